//! # burn-autodiff (remat)
//!
//! A drop-in replacement for Burn 0.22's `burn-autodiff` crate, backed by the
//! [remat](remat) activation-checkpointing engine. Add to your workspace's `Cargo.toml`
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
//! re-exported here as [`remat`](crate::remat) for convenience.
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

    /// Retro-forwards of memory-bound custom ops (accepted; remat keeps their outputs).
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
