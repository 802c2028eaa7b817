//! Checkpointing: which values are kept, which are rebuilt, and how a rebuild runs.
//!
//! - [`policy`]: run-time policies, scopes and regions;
//! - `decide`: the one decision for a recorded op (what is kept, what may be rebuilt,
//!   which inputs are retained), from plain facts, in the planner's vocabulary;
//! - [`strategy`]: Burn's type-level strategies, mapped onto policies;
//! - `budget`: [`Policy::Budget`](policy::Policy::Budget), the engine's side of the planner
//!   (NOTE \[budget\]);
//! - `pass`: the budget's hooks in a backward pass (a schedule the graph's traversal runs).
//!
//! # Invariants
//! - Policies never see a tensor; retrieval never decides what to keep.

pub(crate) mod budget;
pub(crate) mod cost;
pub(crate) mod decide;
pub(crate) mod pass;
pub mod policy;
pub mod strategy;

/// Runs `f` as a checkpoint region, in the spirit of PyTorch's `torch.utils.checkpoint`.
///
/// Values produced inside the region are not kept for backward: the values that flow into
/// it are, and in backward the region's values are rebuilt once, when first needed, by
/// replaying the region's ops, and freed at their last use. A value produced inside and used
/// after the region (its output) is kept as usual. Gradients are bit-identical to
/// [`Policy::SaveAll`](policy::Policy::SaveAll).
///
/// Regions nest (an inner region inside an outer one is rebuilt with it), apply whatever
/// the checkpointing strategy of the tensors, and take precedence over
/// [`with_policy`](policy::with_policy) inside them. Outputs of random ops (dropout) are
/// kept even inside a region, so a rebuild never draws new random numbers.
///
/// Outside any autodiff computation a region just runs `f`. If `f` panics, the region is
/// closed as the panic unwinds.
///
/// A region is per thread, like a [`with_policy`](policy::with_policy) scope: call it inside
/// the model's `forward` and it applies on whatever thread runs the forward (burn-train's
/// multi-device and DDP strategies run it on worker threads, one per device).
///
/// ```
/// use burn_flex::Flex;
/// use burn_backend::{Backend, TensorData, ops::FloatTensorOps};
/// use remat::{Autodiff, checkpoint};
/// type B = Autodiff<Flex>;
///
/// let device = Default::default();
/// let x = B::float_from_data(TensorData::from([1.0f32, 2.0]), &device);
/// let x = B::float_set_require_grad(x, true);
/// let y = checkpoint(|| B::float_exp(B::float_sin(x.clone())));
/// let grads = B::float_sum(y).backward();
/// assert!(x.grad(&grads).is_some());
/// ```
pub fn checkpoint<R>(f: impl FnOnce() -> R) -> R {
    policy::in_region(f)
}
