//! Burn's type-level checkpoint strategies, mapped onto run-time policies.
//!
//! Burn picks the strategy with `device.autodiff()` ([`NoCheckpointing`]) or
//! `device.autodiff().gradient_checkpointing()` ([`BalancedCheckpointing`]). Here the type
//! only selects a default policy: `NoCheckpointing` records with
//! [`Policy::SaveAll`](super::policy::Policy::SaveAll), `BalancedCheckpointing` with the
//! policy set by [`set_policy`](super::policy::set_policy) (Burn's balanced behaviour unless
//! changed). Scopes and regions apply under both.

use core::fmt::Debug;

/// A checkpoint strategy type parameter of [`Autodiff`](crate::Autodiff).
pub trait CheckpointStrategy: Clone + Copy + Debug + Default + Send + Sync + 'static {
    /// Whether graphs recorded under this strategy use the process-wide balanced policy
    /// (see [`set_policy`](super::policy::set_policy)) rather than `SaveAll`.
    const BALANCED: bool;
}

/// Keep every value a backward step needs (Burn's default).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCheckpointing {}

impl CheckpointStrategy for NoCheckpointing {
    const BALANCED: bool = false;
}

/// Recompute cheap element-wise outputs, keep compute-bound ones (Burn's balanced
/// checkpointing), or whatever policy [`set_policy`](super::policy::set_policy) chose.
#[derive(Clone, Copy, Debug, Default)]
pub struct BalancedCheckpointing {}

impl CheckpointStrategy for BalancedCheckpointing {
    const BALANCED: bool = true;
}
