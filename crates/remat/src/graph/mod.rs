//! The recorded graph: node ids, nodes, edges, and the backward traversal.
//!
//! This module owns the structure of what the forward pass recorded. A [`Node`] is one
//! tracked tensor: a leaf that requires a gradient, or the output of a recorded op. Tensors
//! hold their node; nodes hold their inputs; the graph therefore lives exactly as long as
//! something can still reach it (NOTE [graph-lifetime]).
//!
//! The bottom layer of the engine (ARCHITECTURE.md, "Layers"): the op trait backward runs
//! ([`Rule`], [`Vjp`]), retrieval and rebuilds, the gradients container and the backward
//! traversal. What a node keeps was decided above (`checkpoint::decide`) and arrives as
//! plain data ([`Placement`], slots); the budget's schedule and the distributed leaves reach
//! a pass through [`PassHooks`].
//!
//! # Invariants
//! - Names only itself and the bottom utilities (`counters`, `active`) of the crate
//!   (`tests/layers.rs`): no policy, no recording, no tensor wrapper, no planner.
//! - Every algorithm here is iterative: traversal, backward and drop use explicit stacks, so
//!   a 100k-node chain neither overflows the stack when it runs nor when it is dropped.
//! - A node's step runs at most once; afterwards the node is *consumed*: its op, inputs and
//!   saved value are released, and a second backward through it panics with a message that
//!   says why.

mod backward;
pub(crate) mod grads;
mod node;
mod op;
mod retrieve;

pub(crate) use backward::{PassHooks, ScheduledPass, backward};
pub(crate) use node::{
    Fill, GraphNode, Input, Kept, Node, NodeKind, OpState, ScheduleEntry, Signature, Slot,
    charged_constants,
};
pub use op::{Cost, OpInfo};
pub(crate) use op::{Placement, Reads, Rule, Tracked, Values, Vjp};

use core::sync::atomic::{AtomicU64, Ordering};

/// Identifier of a recorded node, unique in the process.
///
/// Gradients are keyed by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    /// The integer behind the id (public, as in Burn's `NodeId`).
    pub value: u64,
}

impl NodeId {
    /// A fresh id, never handed out before in this process.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(1);
        Self {
            value: COUNTER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The raw value, for display and hashing.
    pub fn value(self) -> u64 {
        self.value
    }
}

impl core::fmt::Display for NodeId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "#{}", self.value)
    }
}

/// A fast hasher for maps and sets keyed by [`NodeId`] (ids are sequential integers: one
/// multiply spreads them well; no need for SipHash's DoS resistance on our own ids).
#[derive(Clone, Copy, Default)]
pub(crate) struct IdHasher(u64);

impl core::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// `BuildHasher` for [`IdHasher`].
pub(crate) type IdBuildHasher = core::hash::BuildHasherDefault<IdHasher>;
