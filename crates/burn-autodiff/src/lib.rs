//! # burn-autodiff (remat)
//!
//! A drop-in replacement for Burn 0.22's `burn-autodiff` crate, backed by the
//! [remat] activation-checkpointing engine. Add to your workspace's `Cargo.toml`
//!
//! ```toml
//! [patch.crates-io]
//! burn-autodiff = { path = "<checkout>/crates/burn-autodiff" }   # or git = "..."
//! ```
//!
//! and every Burn model, optimizer and training loop (which reach autodiff through
//! `burn-dispatch`) runs on remat, on any inner backend.
//!
//! This crate only re-exports remat under the module paths Burn's dispatch layer names:
//!
//! | Burn path | remat item |
//! |---|---|
//! | [`Autodiff<B, C>`] | [`remat::Autodiff`] |
//! | [`checkpoint::strategy`]`::{CheckpointStrategy, NoCheckpointing, BalancedCheckpointing}` | [`remat::checkpoint::strategy`] |
//! | [`grads::Gradients`] | [`remat::grads::Gradients`] |
//! | [`ops::DifferentiableTransfer`] (and the inherent `Autodiff::to_backend`) | [`remat::ops::DifferentiableTransfer`] |
//! | [`NodeId`] | [`remat::NodeId`] |
//!
//! remat's own API (policies, regions, statistics) is reached through [`remat`] itself,
//! re-exported here as [`remat`] for convenience.
//!
//! # Feature flags
//! - `std` (default): forwarded to remat (required by the engine).
//! - `tracing`: remat's `tracing` events (one per retrieval, one per replay).
//! - `export_tests`: backward asserts that the checkpointer is drained after each pass.

#![deny(missing_docs)]

pub use remat;
pub use remat::{Autodiff, AutodiffTensor, NodeId};

/// Checkpointing, under Burn's path `burn_autodiff::checkpoint`.
pub mod checkpoint {
    /// Burn's type-level checkpoint strategies (`Autodiff<B, C>`'s `C`).
    pub mod strategy {
        pub use remat::checkpoint::strategy::{
            BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
        };
    }

    /// What a custom op's backward reads its checkpointed values from.
    pub mod base {
        pub use remat::ops::custom::Checkpointer;
    }

    /// Retro-forwards of memory-bound custom ops: how a dropped output is recomputed. The
    /// `retro_unary!`, `retro_binary!` and `retro_unary_scalar!` macros (at the crate root,
    /// as in Burn) write the common ones.
    pub mod retro_forward {
        pub use remat::ops::custom::RetroForward;
    }

    /// The values a retro-forward reads and writes.
    pub mod state {
        pub use remat::ops::custom::BackwardStates;
    }
}

/// Graph nodes as custom ops' backward steps see them.
pub mod graph {
    pub use remat::NodeId;
    pub use remat::ops::custom::{Node, NodeRef, Requirement};
}

/// The gradients container returned by backward, under Burn's path `burn_autodiff::grads`.
pub mod grads {
    pub use remat::grads::Gradients;
}

/// Operations, under Burn's path `burn_autodiff::ops`.
pub mod ops {
    pub use remat::ops::DifferentiableTransfer;
    pub use remat::ops::custom::{
        Backward, ComputePropertyDone, Init, MemoryBound, MemoryBoundRetroForward, NodeGuard, Ops,
        OpsKind, OpsPrep, Tracked, UnTracked, binary, broadcast_shape, unary,
    };
}

#[doc(hidden)]
pub mod __private {
    pub use burn_backend;
}

/// Defines `struct $name<B>`, a [`RetroForward`](checkpoint::retro_forward::RetroForward)
/// that recomputes a unary op's output with `$ops(input)`; build it with
/// `$name::<B>::new(input.id())`. (Burn's macro of the same name and shape.)
#[macro_export]
macro_rules! retro_unary {
    ($name:ident, $ops:expr) => {
        #[derive(Debug, Clone)]
        struct $name<B: $crate::__private::burn_backend::Backend> {
            input_id: $crate::NodeId,
            _backend: ::core::marker::PhantomData<B>,
        }

        #[allow(dead_code)]
        impl<B: $crate::__private::burn_backend::Backend> $name<B> {
            /// Reads the input under `input_id`.
            pub fn new(input_id: $crate::NodeId) -> Self {
                Self {
                    input_id,
                    _backend: ::core::marker::PhantomData,
                }
            }
        }

        impl<B: $crate::__private::burn_backend::Backend>
            $crate::checkpoint::retro_forward::RetroForward for $name<B>
        {
            fn forward(
                &self,
                states: &mut $crate::checkpoint::state::BackwardStates,
                out_node: $crate::NodeId,
            ) {
                let input = states.get_state::<B::FloatTensorPrimitive>(&self.input_id);
                states.save(out_node, $ops(input))
            }
        }
    };
}

/// Defines `struct $name<B>`, a [`RetroForward`](checkpoint::retro_forward::RetroForward)
/// that recomputes a binary op's output with `$ops(lhs, rhs)`; build it with
/// `$name::<B>::new(lhs.id(), rhs.id())`. (Burn's macro of the same name and shape.)
#[macro_export]
macro_rules! retro_binary {
    ($name:ident, $ops:expr) => {
        #[derive(Debug, Clone)]
        struct $name<B: $crate::__private::burn_backend::Backend> {
            lhs_id: $crate::NodeId,
            rhs_id: $crate::NodeId,
            _backend: ::core::marker::PhantomData<B>,
        }

        #[allow(dead_code)]
        impl<B: $crate::__private::burn_backend::Backend> $name<B> {
            /// Reads the operands under `lhs_id` and `rhs_id`.
            pub fn new(lhs_id: $crate::NodeId, rhs_id: $crate::NodeId) -> Self {
                Self {
                    lhs_id,
                    rhs_id,
                    _backend: ::core::marker::PhantomData,
                }
            }
        }

        impl<B: $crate::__private::burn_backend::Backend>
            $crate::checkpoint::retro_forward::RetroForward for $name<B>
        {
            fn forward(
                &self,
                states: &mut $crate::checkpoint::state::BackwardStates,
                out_node: $crate::NodeId,
            ) {
                let lhs = states.get_state::<B::FloatTensorPrimitive>(&self.lhs_id);
                let rhs = states.get_state::<B::FloatTensorPrimitive>(&self.rhs_id);
                states.save(out_node, $ops(lhs, rhs))
            }
        }
    };
}

/// Defines `struct $name<B>`, a [`RetroForward`](checkpoint::retro_forward::RetroForward)
/// that recomputes an op of a tensor and a scalar with `$ops(lhs, scalar)`; build it with
/// `$name::<B>::new(lhs.id(), scalar)`. (Burn's macro of the same name and shape.)
#[macro_export]
macro_rules! retro_unary_scalar {
    ($name:ident, $ops:expr) => {
        #[derive(Debug, Clone)]
        struct $name<B: $crate::__private::burn_backend::Backend> {
            lhs_id: $crate::NodeId,
            rhs: $crate::__private::burn_backend::Scalar,
            _backend: ::core::marker::PhantomData<B>,
        }

        #[allow(dead_code)]
        impl<B: $crate::__private::burn_backend::Backend> $name<B> {
            /// Reads the tensor under `lhs_id`; `rhs` is the scalar operand.
            pub fn new(
                lhs_id: $crate::NodeId,
                rhs: $crate::__private::burn_backend::Scalar,
            ) -> Self {
                Self {
                    lhs_id,
                    rhs,
                    _backend: ::core::marker::PhantomData,
                }
            }
        }

        impl<B: $crate::__private::burn_backend::Backend>
            $crate::checkpoint::retro_forward::RetroForward for $name<B>
        {
            fn forward(
                &self,
                states: &mut $crate::checkpoint::state::BackwardStates,
                out_node: $crate::NodeId,
            ) {
                let lhs = states.get_state::<B::FloatTensorPrimitive>(&self.lhs_id);
                states.save(out_node, $ops(lhs, self.rhs))
            }
        }
    };
}
