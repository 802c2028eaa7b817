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
mod id;
mod name;
mod node;
mod op;
mod retrieve;
mod step;
mod vjp;

pub(crate) use backward::{PassHooks, ScheduledPass, backward};
pub(crate) use id::IdBuildHasher;
pub use id::NodeId;
pub(crate) use node::{
    BudgetNode, Fill, GraphNode, Input, Kept, Node, NodeKind, OpState, Rule, ScheduleFacts,
    Signature, Slot, Vjp, charged_constants,
};
pub use op::{Cost, OpInfo};
pub(crate) use op::{Placement, Reads, Tracked, Values};
