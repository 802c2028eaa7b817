//! Op families. Each file describes its ops once, as rules (the `Rule` trait of
//! `graph/node.rs`): forward, what the backward reads, the backward itself, and the cost class. `record.rs` is the one place an op is recorded (facts -> `checkpoint::decide`
//! -> the graph).
//!
//! The op families name the graph, the decisions and the tensor wrapper, never `backend/`:
//! `backend/` calls into them (`crates/remat/tests/layers.rs`).
//!
//! # Invariants
//! - Rules never store tensors they read in backward: saved values go through the engine
//!   (slots and held edges), so that policies can drop and rebuild them.
//! - [`custom`] is the exception that proves the rule: Burn's API for ops with a hand-written
//!   backward, whose rule wraps the user's code; it replays only through the user's
//!   retro-forward (NOTE [custom-ops-are-kept]).

pub(crate) mod activation;
pub(crate) mod attention;
pub(crate) mod binary;
pub(crate) mod common;
pub(crate) mod conv;
pub mod custom;
pub(crate) mod index;
pub(crate) mod linalg;
pub(crate) mod module;
pub(crate) mod pool;
pub(crate) mod record;
pub(crate) mod reduce;
pub(crate) mod shape;
pub(crate) mod transfer;
pub(crate) mod unary;

pub use transfer::DifferentiableTransfer;
