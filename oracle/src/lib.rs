//! The oracle: Burn's own autodiff (`burn-autodiff` 0.22.0 from crates.io, no patch here) as
//! the reference remat is compared against.
//!
//! - [`programs`] are the model programs of `crates/remat-models`, the very same source files;
//!   the `remat-oracle` binary runs them on real Burn and writes [`reference`] files that the
//!   patched build compares with (`crates/remat-models/tests/oracle_parity.rs`).
//! - [`backend`] runs backend-level programs on `burn_autodiff::Autodiff<B>` and on
//!   `remat::Autodiff<B>` in one process (see `tests/backend_parity.rs`): add a program there
//!   to compare another op.

#[path = "../../crates/remat-models/src/programs/mod.rs"]
pub mod programs;

pub mod backend;

/// Where reference files live.
pub mod reference {
    use std::path::PathBuf;

    /// The reference directory: `$REMAT_ORACLE_DIR`, or `<repo>/target/oracle-reference`.
    ///
    /// The same rule is used by the reader in `crates/remat-models`, whatever
    /// `CARGO_TARGET_DIR` each build uses.
    pub fn dir() -> PathBuf {
        match std::env::var_os("REMAT_ORACLE_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/oracle-reference"),
        }
    }
}
