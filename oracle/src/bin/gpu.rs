//! `remat-gpu-oracle`: runs the model programs of `crates/remat-models` on Burn's own
//! autodiff (no patch in this workspace) on a wgpu device and writes one reference file per
//! program, `<dir>/<program>.txt`, for `gpu/tests/wgpu.rs` (pass the directory as the only
//! argument; default: `remat_gpu::reference::dir`'s rule).
//!
//! `gpu/src/shared.rs` (the programs compared, the device, the reference directory) is
//! included as a module rather than depended on: the `remat-gpu` crate's build has the patch,
//! this one must not.

use remat_oracle::programs;

#[path = "../../../gpu/src/shared.rs"]
mod gpu;

use std::time::Instant;

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(gpu::reference::dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("gpu oracle: cannot create {}: {e}", dir.display());
        std::process::exit(1);
    }
    let device = gpu::device().autodiff();
    for (name, program) in gpu::PARITY {
        let start = Instant::now();
        let report = program(&device);
        let path = dir.join(format!("{name}.txt"));
        if let Err(e) = std::fs::write(&path, programs::to_text(&report)) {
            eprintln!("gpu oracle: cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
        println!(
            "gpu oracle: {name:<12} loss {:.5} -> {:.5}  ({:.1?})  {}",
            report.losses.first().copied().unwrap_or(f32::NAN),
            report.losses.last().copied().unwrap_or(f32::NAN),
            start.elapsed(),
            path.display()
        );
    }
}
