//! # remat-models
//!
//! Small Burn models run on remat through the `[patch.crates-io] burn-autodiff` line of this
//! workspace: the same programs users write, unchanged. [`programs`] holds the model programs
//! (MLPs, CNNs, transformers, recurrent nets, fine-tuning, FFTs, and an MLP trained through
//! burn-train's `Learner`), each training 20 steps from seeded weights on fixed synthetic
//! data. The `oracle/` workspace runs these very files on
//! Burn's own autodiff; `tests/oracle_parity.rs` compares the two.
//!
//! The main example: `cargo run --release -p remat-models --example train`.

#![deny(missing_docs)]

pub mod programs;

/// Where the oracle writes its reference files: `$REMAT_ORACLE_DIR`, or
/// `<repo>/target/oracle-reference` (independent of `CARGO_TARGET_DIR`).
pub fn oracle_dir() -> std::path::PathBuf {
    match std::env::var_os("REMAT_ORACLE_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/oracle-reference"),
    }
}
