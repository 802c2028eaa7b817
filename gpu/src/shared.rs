//! What the wgpu tests (`remat-gpu`) and the GPU oracle (`oracle/src/bin/gpu.rs`) share.
//! Both include this file as a child of a crate root that has a `programs` module (the model
//! programs of `crates/remat-models`).

use super::programs;
use burn::tensor::{Device, DeviceKind};

/// The programs both workspaces run on wgpu, by name (small sizes: llvmpipe, the CPU Vulkan
/// driver CI runs them on, is slow).
pub const PARITY: [(&str, programs::Program); 5] = [
    ("mlp", programs::mlp::run),
    ("cnn", programs::cnn::run),
    ("transformer", programs::transformer::run),
    ("lstm", programs::lstm::run),
    ("lora", programs::finetune::run_lora),
];

/// The wgpu device the tests run on, without autodiff: wgpu's default adapter (in CI, Mesa's
/// llvmpipe; `CUBECL_WGPU_DEFAULT_DEVICE=Cpu` or `DiscreteGpu(0)` picks another).
pub fn device() -> Device {
    Device::wgpu(DeviceKind::DefaultDevice)
}

/// Where the GPU oracle's reference files live.
pub mod reference {
    use std::path::PathBuf;

    /// `$REMAT_GPU_ORACLE_DIR`, or `<repo>/target/gpu-oracle-reference` (the repository:
    /// the nearest ancestor of the building crate with a `scripts/test.sh`; both crates
    /// that include this file agree on it, whatever `CARGO_TARGET_DIR` they build with).
    pub fn dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("REMAT_GPU_ORACLE_DIR") {
            return PathBuf::from(dir);
        }
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let repo = manifest
            .ancestors()
            .find(|dir| dir.join("scripts/test.sh").is_file())
            .unwrap_or(&manifest);
        repo.join("target/gpu-oracle-reference")
    }
}
