//! Burn's type-level checkpoint strategies, mapped onto run-time policies.
//!
//! Burn picks the strategy with `device.autodiff()` ([`NoCheckpointing`]) or
//! `device.autodiff().gradient_checkpointing()` ([`BalancedCheckpointing`]). Here the type
//! only picks the default policy, used when no policy was chosen:
//! [`Policy::SaveAll`](super::policy::Policy::SaveAll) under `NoCheckpointing`,
//! [`Policy::Balanced`](super::policy::Policy::Balanced) under `BalancedCheckpointing`. A
//! policy set with [`set_policy`](super::policy::set_policy), scopes and regions apply under
//! both.

use core::fmt::Debug;

/// A checkpoint strategy type parameter of [`Autodiff`](crate::Autodiff).
pub trait CheckpointStrategy: Clone + Copy + Debug + Default + Send + Sync + 'static {
    /// Whether graphs recorded under this strategy default to
    /// [`Policy::Balanced`](super::policy::Policy::Balanced) (else to
    /// [`Policy::SaveAll`](super::policy::Policy::SaveAll)) when no policy was chosen.
    const BALANCED: bool;
}

/// Keep every value a backward step needs (Burn's default), unless a policy is chosen.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCheckpointing {}

impl CheckpointStrategy for NoCheckpointing {
    const BALANCED: bool = false;
}

/// Recompute cheap element-wise outputs, keep compute-bound ones (Burn's balanced
/// checkpointing), unless a policy is chosen.
#[derive(Clone, Copy, Debug, Default)]
pub struct BalancedCheckpointing {}

impl CheckpointStrategy for BalancedCheckpointing {
    const BALANCED: bool = true;
}
