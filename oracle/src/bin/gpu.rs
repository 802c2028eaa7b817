//! `remat-gpu-oracle`: runs the model programs of `crates/remat-models` on Burn's own
//! autodiff (no patch in this workspace) on a wgpu device and writes one reference file per
//! program, `<dir>/<program>.txt`, for `gpu/tests/wgpu.rs` (pass the directory as the only
//! argument; default: `remat_gpu::reference::dir`'s rule).
//!
//! `gpu/src/shared.rs` (the programs compared, the device, the reference directory) is
//! included as a module rather than depended on: the `remat-gpu` crate's build has the patch,
//! this one must not.

use remat_oracle::{programs, write_references};

#[path = "../../../gpu/src/shared.rs"]
mod gpu;

fn main() {
    let device = gpu::device().autodiff();
    write_references(
        "gpu oracle",
        gpu::reference::dir,
        || device.clone(),
        gpu::PARITY,
    );
}
