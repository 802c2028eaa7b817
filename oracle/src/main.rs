//! Runs every model program on Burn's own autodiff (Flex) and writes one
//! reference file per program: `<dir>/<program>.txt` (see `remat_oracle::reference::dir`,
//! or pass the directory as the only argument).

use burn::tensor::Device;
use remat_oracle::{programs, reference, write_references};

fn main() {
    write_references(
        "oracle",
        reference::dir,
        || Device::flex().autodiff(),
        programs::all(),
    );
}
