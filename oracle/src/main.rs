//! Runs every model program on Burn's own autodiff (Flex) and writes one
//! reference file per program: `<dir>/<program>.txt` (see `remat_oracle::reference::dir`,
//! or pass the directory as the only argument).

use std::time::Instant;

use burn::tensor::Device;
use remat_oracle::{programs, reference};

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(reference::dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("oracle: cannot create {}: {e}", dir.display());
        std::process::exit(1);
    }
    for (name, program) in programs::all() {
        let start = Instant::now();
        let report = program(&Device::flex().autodiff());
        let path = dir.join(format!("{name}.txt"));
        if let Err(e) = std::fs::write(&path, programs::to_text(&report)) {
            eprintln!("oracle: cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
        println!(
            "oracle: {name:<21} loss {:.5} -> {:.5}  ({} params, {:.1?})  {}",
            report.losses.first().copied().unwrap_or(f32::NAN),
            report.losses.last().copied().unwrap_or(f32::NAN),
            report.params.iter().map(|p| p.values.len()).sum::<usize>(),
            start.elapsed(),
            path.display()
        );
    }
}
