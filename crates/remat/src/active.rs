//! Whether this process runs on remat at all.
//!
//! A Burn project reaches remat through a `[patch.crates-io]` line. When the patch does not
//! apply (cargo only warns), Burn trains on its own autodiff and remat's controls would do
//! nothing without a word. The recommended setup makes that a compile error (README,
//! "Setup"); this flag is the run-time check for every other setup: [`is_active`] and the
//! note printed by [`Stats`](crate::Stats)' `Display`.
//!
//! Cost: one relaxed atomic store per leaf created (a parameter or an input that requires a
//! gradient), nothing per recorded op: every recorded graph starts from a leaf.

use core::sync::atomic::{AtomicBool, Ordering};

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether remat's autodiff backend has tracked a tensor in this process: true as soon as a
/// Burn model is created on (or a tensor marked `require_grad` on) an autodiff device, when
/// the `burn-autodiff` patch is active.
///
/// False after such a step means Burn runs on its own autodiff: the `[patch.crates-io]` line
/// did not apply (check `cargo tree -i burn-autodiff`; see the README's "Setup").
///
/// ```
/// use burn_backend::{TensorData, ops::FloatTensorOps};
/// type B = remat::Autodiff<burn_flex::Flex>;
/// let x = B::float_from_data(TensorData::from([1.0f32]), &Default::default());
/// let _x = B::float_set_require_grad(x, true);
/// assert!(remat::is_active());
/// ```
pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Records that a tracked tensor was created.
pub(crate) fn mark() {
    if !ACTIVE.load(Ordering::Relaxed) {
        ACTIVE.store(true, Ordering::Relaxed);
    }
}
