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

/// The body of the oracle's binaries: runs each of `programs` on `device()` (Burn's own
/// autodiff) and writes `<dir>/<program>.txt`, `dir` being the first command-line argument
/// or `default_dir()`. Prints one line per program, prefixed `who`; exits with status 1,
/// saying why, when a file cannot be written.
pub fn write_references<'a>(
    who: &str,
    default_dir: fn() -> std::path::PathBuf,
    device: impl Fn() -> burn::tensor::Device,
    programs: impl IntoIterator<Item = (&'a str, programs::Program)>,
) {
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(default_dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{who}: cannot create {}: {e}", dir.display());
        std::process::exit(1);
    }
    for (name, program) in programs {
        let start = std::time::Instant::now();
        let report = program(&device());
        let path = dir.join(format!("{name}.txt"));
        if let Err(e) = std::fs::write(&path, programs::to_text(&report)) {
            eprintln!("{who}: cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
        println!(
            "{who}: {name:<21} loss {:.5} -> {:.5}  ({} params, {:.1?})  {}",
            report.losses.first().copied().unwrap_or(f32::NAN),
            report.losses.last().copied().unwrap_or(f32::NAN),
            report.params.iter().map(|p| p.values.len()).sum::<usize>(),
            start.elapsed(),
            path.display()
        );
    }
}
