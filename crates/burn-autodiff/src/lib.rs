//! # burn-autodiff (remat)
//!
//! A drop-in replacement for Burn 0.22's `burn-autodiff` crate, backed by the
//! [remat] activation-checkpointing engine. In your project's `Cargo.toml`:
//!
//! ```toml
//! [dependencies]
//! burn = { version = "0.22", features = ["flex", "autodiff"] }
//! # remat's controls (policies, regions, statistics), reached through the patched crate
//! remat = { package = "burn-autodiff", version = "0.22" }
//!
//! [patch.crates-io]
//! burn-autodiff = { path = "../remat/crates/burn-autodiff" }   # this repository's checkout
//! ```
//!
//! then `cargo update -p burn-autodiff`. Every Burn model, optimizer and training loop (which
//! reach autodiff through `burn-dispatch`) runs on remat, on any inner backend.
//!
//! Reaching the controls through this crate (`remat::set_policy`, `remat::checkpoint`,
//! `remat::stats`: every item of the [remat] crate is re-exported at this crate's root) is
//! what makes an inactive patch impossible to miss: if cargo does not apply the patch (it
//! only warns), `remat` above is Burn's own `burn-autodiff`, and code that calls
//! `remat::set_policy` does not compile.
//!
//! The crate also re-exports remat under the module paths Burn's dispatch layer names:
//!
//! | Burn path | remat item |
//! |---|---|
//! | [`Autodiff<B, C>`] | [`remat::Autodiff`] |
//! | [`checkpoint::strategy`]`::{CheckpointStrategy, NoCheckpointing, BalancedCheckpointing}` | [`remat::checkpoint::strategy`] |
//! | [`grads::Gradients`] | [`remat::grads::Gradients`] |
//! | [`ops::DifferentiableTransfer`] (and the inherent `Autodiff::to_backend`) | [`remat::ops::DifferentiableTransfer`] |
//! | [`NodeId`] | [`remat::NodeId`] |
//!
//! Where a Burn module path and a remat item share a name, Burn's module wins (a glob
//! re-export yields to named items): `checkpoint` is Burn's module here and, in the value
//! namespace, remat's [`checkpoint()`](remat::checkpoint()) function.
//!
//! # Feature flags
//! - `std` (default): forwarded to remat (required by the engine).
//! - `tracing`: remat's `tracing` events (one per retrieval, one per replay).
//! - `export_tests`: backward asserts that the checkpointer is drained after each pass.

#![deny(missing_docs)]

pub use remat;
// remat's whole API at the root (see the crate docs); named items below take precedence.
pub use remat::*;
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

/// The one body behind the `retro_*!` macros: `struct $name<B>` holding the ids of the tensors
/// it reads and any extra operands, a `new` taking them in that order, and a `RetroForward`
/// that reads the tensors' values and saves `$ops(tensors.., extras..)` as the output.
#[doc(hidden)]
#[macro_export]
macro_rules! __retro_forward {
    ($name:ident, $ops:expr, reads [$($read:ident),*], extra [$($extra:ident: $ty:ty),*]) => {
        #[derive(Debug, Clone)]
        struct $name<B: $crate::__private::burn_backend::Backend> {
            $($read: $crate::NodeId,)*
            $($extra: $ty,)*
            _backend: ::core::marker::PhantomData<B>,
        }

        #[allow(dead_code)]
        impl<B: $crate::__private::burn_backend::Backend> $name<B> {
            /// Reads the tensors under the given ids; the other arguments are operands.
            pub fn new($($read: $crate::NodeId,)* $($extra: $ty),*) -> Self {
                Self {
                    $($read,)*
                    $($extra,)*
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
                $(let $read = states.get_state::<B::FloatTensorPrimitive>(&self.$read);)*
                states.save(out_node, $ops($($read,)* $(self.$extra.clone(),)*))
            }
        }
    };
}

/// Defines `struct $name<B>`, a [`RetroForward`](checkpoint::retro_forward::RetroForward)
/// that recomputes a unary op's output with `$ops(input)`; build it with
/// `$name::<B>::new(input.id())`. (Burn's macro of the same name and shape.)
#[macro_export]
macro_rules! retro_unary {
    ($name:ident, $ops:expr) => {
        $crate::__retro_forward!($name, $ops, reads [input_id], extra []);
    };
}

/// Defines `struct $name<B>`, a [`RetroForward`](checkpoint::retro_forward::RetroForward)
/// that recomputes a binary op's output with `$ops(lhs, rhs)`; build it with
/// `$name::<B>::new(lhs.id(), rhs.id())`. (Burn's macro of the same name and shape.)
#[macro_export]
macro_rules! retro_binary {
    ($name:ident, $ops:expr) => {
        $crate::__retro_forward!($name, $ops, reads [lhs_id, rhs_id], extra []);
    };
}

/// Defines `struct $name<B>`, a [`RetroForward`](checkpoint::retro_forward::RetroForward)
/// that recomputes an op of a tensor and a scalar with `$ops(lhs, scalar)`; build it with
/// `$name::<B>::new(lhs.id(), scalar)`. (Burn's macro of the same name and shape.)
#[macro_export]
macro_rules! retro_unary_scalar {
    ($name:ident, $ops:expr) => {
        $crate::__retro_forward!(
            $name,
            $ops,
            reads [lhs_id],
            extra [rhs: $crate::__private::burn_backend::Scalar]
        );
    };
}
