//! The op trait the graph runs: what a recorded op is to the engine below the policies.
//!
//! A [`Rule`] describes an op once (its forward, what its backward reads, the backward
//! itself, its cost class); [`Vjp`] is the context its backward step reads values through
//! (NOTE [one-rule]). [`Placement`] is the plain data a node carries about what the decision
//! layer (`checkpoint/`) decided for it when it was recorded.
//!
//! NOTE [one-rule]: the forward recorded with a node is the same code that the forward pass
//! ran, so every node is replayable by construction and a replay is bit-identical to the
//! forward. A rule's `vjp` reads saved values only through [`Vjp`], which hands out stored or
//! rebuilt values and checks that the rule reads only what it declared.
//!
//! # Invariants
//! - Nothing here decides what is kept: a [`Placement`] is read, never computed, in `graph/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use burn_backend::{Backend, BackendTypes, TensorMetadata, tensor::FloatTensor};
use burn_std::Shape;
use smallvec::SmallVec;

use super::grads::Gradients;
use super::retrieve;
use super::{GraphNode, Input, Node, NodeId, NodeKind, Slot};

/// How expensive an op is to replay, relative to keeping its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cost {
    /// A view or layout change (reshape, transpose, slice, expand): no arithmetic.
    Alias,
    /// Element-wise or otherwise memory-bound work (add, exp, relu, mask ...).
    Cheap,
    /// Compute-bound work: matmul, convolution, reductions, pooling, attention.
    Compute,
    /// Draws random numbers: never replayed, its output is always kept.
    Random,
}

/// What a policy knows about a recorded op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// The op's name, e.g. `"matmul"`, `"exp"`, `"conv2d"`.
    pub name: &'static str,
    /// Its cost class.
    pub cost: Cost,
}

/// What the decision layer decided for one recorded op, as plain data the node carries:
/// whether its output may be rebuilt, and while which region is open (NOTE [regions] in
/// `checkpoint/policy.rs`).
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    pub(crate) recompute: bool,
    /// The output is a view (an [`Cost::Alias`] op) of leaves only: keeping it holds the
    /// leaves' memory, which is the user's, so it is counted with the leaves.
    pub(crate) leaf_view: bool,
    /// The "open" flag of the outermost checkpoint region open when the op was recorded,
    /// cleared by the region when it closes; `None` outside any region. The value stays
    /// rebuildable for later consumers only while it is set.
    pub(crate) region: Option<Arc<AtomicBool>>,
    /// The `Policy::Budget` the op was recorded under (an id from `budget::intern`), 0
    /// for none: which planner's pass the node joins. graph/ only carries it.
    pub(crate) budget: u32,
    /// A planner decides at backward time whether the value is kept or rebuilt (the
    /// decision layer sets it for ops recorded under a budget, NOTE \[budget\]): every input
    /// a replay needs was retained when the op was recorded, so while `recompute` is set the
    /// value is rebuildable whatever its region or its slot.
    pub(crate) planned: bool,
}

impl Placement {
    /// A leaf's placement: kept, in no region, under no budget.
    pub(crate) const LEAF: Placement = Placement {
        recompute: false,
        leaf_view: false,
        region: None,
        budget: 0,
        planned: false,
    };

    /// Whether the region the op was recorded in (if any) is still open.
    pub(crate) fn region_open(&self) -> bool {
        self.region
            .as_ref()
            .is_none_or(|open| open.load(Ordering::Acquire))
    }
}

/// The float values an op reads: its inputs in order.
pub(crate) type Values<B> = SmallVec<[FloatTensor<B>; 2]>;

/// Input indices from [`INLINE`] on, one bit each: bit `i - INLINE` of word
/// `(i - INLINE) / 64` for input `i`. Only ops with more inputs than that have one (`cat`,
/// custom ops with many parents or checkpoints); boxed, so that the common case costs one
/// word (`graph::node`'s `a_node_is_small`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Spill(Vec<u64>);

/// Inputs below this index are one bit each of a `u32`; the rest go to a [`Spill`].
const INLINE: usize = 32;

/// Whether input `i` is in the set stored as `low` (inputs below [`INLINE`]) and `high`.
fn contains(low: u32, high: &Option<Box<Spill>>, i: usize) -> bool {
    if i < INLINE {
        return low & (1 << i) != 0;
    }
    let i = i - INLINE;
    high.as_ref()
        .and_then(|spill| spill.0.get(i / 64))
        .is_some_and(|word| word & (1 << (i % 64)) != 0)
}

/// Adds input `i` to the set stored as `low` and `high`.
fn insert(low: &mut u32, high: &mut Option<Box<Spill>>, i: usize) {
    if i < INLINE {
        *low |= 1 << i;
        return;
    }
    let i = i - INLINE;
    let words = &mut high.get_or_insert_with(Box::default).0;
    if words.len() <= i / 64 {
        words.resize(i / 64 + 1, 0);
    }
    words[i / 64] |= 1 << (i % 64);
}

/// Which values a backward step reads: a set of inputs (any number of them) and maybe the
/// output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    /// Inputs `0..INLINE`, bit `i` for input `i`.
    low: u32,
    pub(crate) output: bool,
    /// Inputs from `INLINE` on; `None` when none of them is read.
    high: Option<Box<Spill>>,
}

impl Reads {
    /// Reads nothing.
    pub(crate) const NOTHING: Reads = Reads {
        low: 0,
        output: false,
        high: None,
    };
    /// Reads the output.
    pub(crate) const OUTPUT: Reads = Reads {
        low: 0,
        output: true,
        high: None,
    };

    /// Reads input `i`.
    pub(crate) fn input(i: usize) -> Reads {
        Reads::NOTHING.with_input_if(i, true)
    }

    /// Also reads input `i` when `cond` holds.
    pub(crate) fn with_input_if(mut self, i: usize, cond: bool) -> Reads {
        if cond {
            self.insert(i);
        }
        self
    }

    /// Also reads the output when `cond` holds.
    pub(crate) fn with_output_if(mut self, cond: bool) -> Reads {
        self.output |= cond;
        self
    }

    /// Whether input `i` is read.
    pub(crate) fn has_input(&self, i: usize) -> bool {
        contains(self.low, &self.high, i)
    }

    /// Adds input `i`.
    pub(crate) fn insert(&mut self, i: usize) {
        insert(&mut self.low, &mut self.high, i);
    }
}

/// Which inputs of an op are tracked (need a gradient): any number of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tracked {
    low: u32,
    high: Option<Box<Spill>>,
}

impl Tracked {
    /// The tracked inputs of `inputs`, where `tracked(input)` says whether one is.
    pub(crate) fn of<T>(inputs: &[T], tracked: impl Fn(&T) -> bool) -> Self {
        let mut set = Tracked::default();
        for (i, input) in inputs.iter().enumerate() {
            if tracked(input) {
                insert(&mut set.low, &mut set.high, i);
            }
        }
        set
    }

    /// Whether input `i` is tracked.
    pub(crate) fn get(&self, i: usize) -> bool {
        contains(self.low, &self.high, i)
    }

    /// Whether no input is tracked.
    pub(crate) fn is_empty(&self) -> bool {
        self.low == 0 && self.high.is_none()
    }
}

/// An op, described once (NOTE [one-rule]).
pub(crate) trait Rule<B: BackendTypes>: Send + Sync + 'static {
    /// Name and cost class, for policies and statistics.
    fn info(&self) -> OpInfo;

    /// Computes the output from the inputs. Runs in the forward pass and in every replay.
    fn forward(&self, inputs: Values<B>) -> FloatTensor<B>;

    /// What the backward step reads, given which inputs need a gradient.
    fn reads(&self, tracked: Tracked) -> Reads;

    /// The backward step: from the output's gradient, sets the gradient of each tracked input.
    fn vjp(&self, cx: &mut Vjp<'_, B>, grad: FloatTensor<B>);

    /// Whether replaying `forward` reproduces the output bit for bit. False for random ops
    /// and transfers between backends.
    fn replayable(&self) -> bool {
        self.info().cost != Cost::Random
    }

    /// Whether a replay of `forward` reads input `i`. Every input, but for custom ops:
    /// their first inputs are parents for the gradient only, and a replay reads the inputs
    /// their retro-forward declared.
    fn replay_input(&self, _i: usize) -> bool {
        true
    }

    /// Parents on another inner backend (only transfers have some).
    fn push_foreign_parents(&self, _out: &mut Vec<Arc<dyn GraphNode>>) {}
}

/// The context of one backward step: reads saved values, sets input gradients.
pub(crate) struct Vjp<'a, B: BackendTypes> {
    node: &'a Node<B>,
    inputs: &'a [Input<B>],
    reads: &'a Reads,
    done: Reads,
    grads: &'a mut Gradients,
}

impl<'a, B: Backend> Vjp<'a, B> {
    pub(crate) fn new(
        node: &'a Node<B>,
        inputs: &'a [Input<B>],
        reads: &'a Reads,
        grads: &'a mut Gradients,
    ) -> Self {
        Self {
            node,
            inputs,
            reads,
            done: Reads::NOTHING,
            grads,
        }
    }

    /// Whether input `i` needs a gradient.
    pub(crate) fn needs_grad(&self, i: usize) -> bool {
        self.inputs[i].node.is_some()
    }

    /// The value of input `i`, which the rule declared it reads.
    pub(crate) fn input(&mut self, i: usize) -> FloatTensor<B> {
        debug_assert!(
            self.reads.has_input(i) && !self.done.has_input(i),
            "remat internal error: op `{}` reads input {i} without declaring it (or twice)",
            self.node.name
        );
        self.done.insert(i);
        retrieve::read_input(&self.inputs[i])
    }

    /// The op's output, which the rule declared it reads.
    pub(crate) fn output(&mut self) -> FloatTensor<B> {
        debug_assert!(
            self.reads.output && !self.done.output,
            "remat internal error: op `{}` reads its output without declaring it (or twice)",
            self.node.name
        );
        self.done.output = true;
        retrieve::read_value(self.node)
    }

    /// An argument with input `i`'s shape for a kernel that reads only its shape
    /// (NOTE [shape-only-arguments]): the input's value when it is kept anyway (stored in its
    /// producer's slot for a read still to come, or held on the edge), else one element
    /// broadcast to `shape`. Makes no read, rebuilds nothing and allocates no input-sized
    /// buffer.
    pub(crate) fn shape_arg(
        &self,
        i: usize,
        shape: &Shape,
        like: &FloatTensor<B>,
    ) -> FloatTensor<B> {
        let input = &self.inputs[i];
        let kept = match input.producer() {
            Some(producer) => match &producer.lock().slot {
                Slot::Stored(kept) => Some(kept.get().clone()),
                Slot::Evicted(_) | Slot::Unneeded => None,
            },
            // A fill's recipe holds no buffer (NOTE [fill-constants]).
            None => input.held.as_ref().and_then(|kept| kept.buffer()).cloned(),
        };
        kept.unwrap_or_else(|| shape_only::<B>(shape.clone(), like))
    }

    /// Sets the gradient of input `i` (accumulated with other gradients of the same node).
    /// Dropped when the input needs none.
    pub(crate) fn set(&mut self, i: usize, grad: FloatTensor<B>) {
        if let Some(node) = &self.inputs[i].node {
            self.grads.register::<B>(node.id, grad);
        }
    }

    /// Like [`set`](Self::set), with a gradient a collective wrote that is not synchronised
    /// yet: it is synchronised before it is first read (NOTE [lazy-collectives] in
    /// `backend/distributed.rs`).
    pub(crate) fn set_unsynced(&mut self, i: usize, grad: FloatTensor<B>) {
        match &self.inputs[i].node {
            Some(node) => self.grads.register_unsynced::<B>(node.id, grad),
            // Nothing will read it: synchronise before its buffer is released.
            None => B::sync_collective(&grad.device()),
        }
    }

    /// The id of the node whose step this is.
    pub(crate) fn node_id(&self) -> NodeId {
        self.node.id
    }

    /// The id of input `i`'s node and whether it is a leaf, when it needs a gradient.
    pub(crate) fn input_node(&self, i: usize) -> Option<(NodeId, bool)> {
        self.inputs[i]
            .node
            .as_ref()
            .map(|n| (n.id, n.kind == NodeKind::Leaf))
    }

    /// The gradients container, for rules whose parents live on another backend.
    pub(crate) fn grads(&mut self) -> &mut Gradients {
        self.grads
    }

    /// Releases the declared reads the rule did not make, so that counts drain, without
    /// rebuilding the values they would have read (NOTE [release-without-rebuild]).
    pub(crate) fn release_unread(&mut self) {
        for i in 0..self.inputs.len() {
            if self.reads.has_input(i) && !self.done.has_input(i) {
                self.done.insert(i);
                retrieve::release_input(&self.inputs[i]);
            }
        }
        if self.reads.output && !self.done.output {
            self.done.output = true;
            retrieve::release(self.node);
        }
    }
}

/// One element broadcast to `shape`, with the device and dtype of `like`: an argument whose
/// values a kernel does not read (NOTE [shape-only-arguments] in `ops/common.rs`).
fn shape_only<B: Backend>(shape: Shape, like: &FloatTensor<B>) -> FloatTensor<B> {
    let one = Shape::from(vec![1; shape.num_dims()]);
    let zero = B::float_zeros(one, &like.device(), like.dtype().into());
    B::float_expand(zero, shape)
}
