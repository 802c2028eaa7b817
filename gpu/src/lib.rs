//! remat on Burn's wgpu backend (CubeCL, wrapped in burn-fusion by default): what the tests
//! in `tests/wgpu.rs` share with the unpatched twin in `oracle/`.
//!
//! - [`programs`] are the model programs of `crates/remat-models` (the very same source
//!   files); this crate runs them on a wgpu device through the `[patch.crates-io]`, the oracle
//!   workspace's `remat-gpu-oracle` binary runs them on Burn's own autodiff and writes the
//!   references ([`reference::dir`]).
//! - [`device`] is the wgpu device both use, [`PARITY`] the programs compared with Burn
//!   (`shared.rs`, a file both crates include).

#![deny(missing_docs)]

#[path = "../../crates/remat-models/src/programs/mod.rs"]
#[allow(missing_docs)]
pub mod programs;

mod shared;
pub use shared::{PARITY, device, reference};
