//! # remat
//!
//! Reverse-mode automatic differentiation for [Burn](https://burn.dev) with a first-class
//! activation-checkpointing engine.
//!
//! [`Autodiff<B, C>`] wraps any inner backend `B`. The forward pass records a graph; every
//! value a backward step needs is either kept or dropped and *rematerialized* later by
//! replaying the ops that produced it, and each value is freed at its last use. Which values
//! are kept is a run-time [`Policy`], chosen per process ([`set_policy`], for every graph
//! whatever its Burn strategy), per scope ([`with_policy`]) or per region ([`checkpoint()`]);
//! [`policy()`] says which applies now. [`stats()`] reports exactly what is kept.
//!
//! Burn users normally reach this crate through the `burn-autodiff` compatibility crate (one
//! `[patch.crates-io]` line): every Burn model then runs on remat unchanged.
//!
//! # Feature flags
//! - `std` (default): required; the engine uses threads-locals for scoped policies.
//! - `tracing`: `tracing` events, one per retrieval (debug) and one per replay (trace).
//! - `export_tests`: backward asserts that the checkpointer is drained after each pass.

#![deny(missing_docs)]

/// Implements trait methods that hand their arguments, unchanged and in order, to the same
/// method of the inner backend `B` (in scope where it is invoked), each written as its
/// signature followed by `;`. With `count: f;` first, each method calls `f("name")` before
/// delegating. The engine's int and bool ops use it (int tensors carry no gradient), and so
/// does the tests' counting wrapper (`tests/support/counting.rs`); not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! delegate_to_inner {
    (count: $hook:path; $( fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* ) => {
        $(
            fn $name( $( $arg : $ty ),* ) -> $ret {
                $hook(stringify!($name));
                B::$name( $( $arg ),* )
            }
        )*
    };
    ($( fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* ) => {
        $(
            fn $name( $( $arg : $ty ),* ) -> $ret {
                B::$name( $( $arg ),* )
            }
        )*
    };
}

mod active;
mod backend;
pub mod checkpoint;
mod counters;
pub mod grads;
pub(crate) mod graph;
mod leaves;
pub mod ops;
pub mod planner;
mod report_items;
pub mod stats;
mod tensor;

pub use active::is_active;
pub use backend::Autodiff;
pub use checkpoint::budget::{BudgetError, check_budget, tradeoff, try_with_budget};
pub use checkpoint::checkpoint;
pub use checkpoint::cost::{OpCosts, op_costs, set_op_costs};
pub use checkpoint::policy::{
    ActivePolicy, Cost, Decision, OpInfo, Policy, PolicySource, Selector, policy, reset_policy,
    set_policy, with_policy,
};
pub use graph::NodeId;
pub use leaves::with_complete_leaves;
pub use stats::{
    DroppedValue, KeepReason, SavedValue, SavedValues, Stats, reset_stats, saved_values, stats,
};
pub use tensor::AutodiffTensor;
