//! The one pattern every op follows: a [`Rule`] describes an op once (its forward, what its
//! backward reads, the backward itself, its cost class), and [`record`] does the shared work.
//!
//! NOTE [one-rule]: the forward recorded with a node is the same code that the forward pass
//! ran, so every node is replayable by construction and a replay is bit-identical to the
//! forward. A rule's `vjp` reads saved values only through [`Vjp`], which hands out stored or
//! rebuilt values and checks that the rule reads only what it declared.

use std::sync::Arc;

use burn_backend::{Backend, BackendTypes, TensorMetadata, tensor::FloatTensor};
use burn_std::Shape;
use smallvec::SmallVec;

use super::common::shape_only;
use crate::checkpoint::budget;
use crate::checkpoint::policy::{self, OpInfo};
use crate::checkpoint::retrieve;
use crate::grads::Gradients;
use crate::graph::{GraphNode, Input, Kept, Node, NodeId, NodeKind, OpState, Signature, Slot};
use crate::stats::KeepReason;
use crate::tensor::AutodiffTensor;

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
    fn of<T>(inputs: &[T], tracked: impl Fn(&T) -> bool) -> Self {
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
    fn is_empty(&self) -> bool {
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
        self.info().cost != policy::Cost::Random
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
            None => input.held.as_ref().map(|kept| kept.get().clone()),
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

/// Records `rule` applied to `inputs` and returns its output.
///
/// When no input is tracked nothing is recorded: the op just runs on the inner backend.
/// `balanced` is true for tensors under Burn's `BalancedCheckpointing`.
pub(crate) fn record<B: Backend, R: Rule<B>>(
    rule: R,
    inputs: SmallVec<[AutodiffTensor<B>; 2]>,
    balanced: bool,
) -> AutodiffTensor<B> {
    record_impl(rule, inputs, balanced, None)
}

/// Like [`record`], with the forward output already computed by the caller (for ops whose
/// inner call also returns something else, such as indices). `rule.forward` must reproduce
/// `output` bit for bit.
pub(crate) fn record_computed<B: Backend, R: Rule<B>>(
    rule: R,
    inputs: SmallVec<[AutodiffTensor<B>; 2]>,
    balanced: bool,
    output: FloatTensor<B>,
) -> AutodiffTensor<B> {
    record_impl(rule, inputs, balanced, Some(output))
}

/// Records `rule` over one tracked input whose value neither its backward nor a replay
/// reads (the rule reads nothing and is never replayed), with the output the caller
/// computed. The caller moves the input's value into its inner call (nothing here holds a
/// clone), so an inner kernel that works in place on a uniquely held tensor still can.
pub(crate) fn record_unread<B: Backend, R: Rule<B>>(
    rule: R,
    parent: Arc<Node<B>>,
    balanced: bool,
    output: FloatTensor<B>,
) -> AutodiffTensor<B> {
    debug_assert!(
        !rule.replayable() && rule.reads(Tracked::of(&[()], |_| true)) == Reads::NOTHING,
        "remat internal error: record_unread on a rule that reads its input or is replayed"
    );
    let info = rule.info();
    let placement = policy::place(&info, false, balanced);
    let edge = Input {
        node: Some(parent),
        held: None,
    };
    finish_node(
        rule,
        info,
        placement,
        smallvec::smallvec![edge],
        Reads::NOTHING,
        output,
        Budgeted::default(),
    )
}

fn record_impl<B: Backend, R: Rule<B>>(
    rule: R,
    inputs: SmallVec<[AutodiffTensor<B>; 2]>,
    balanced: bool,
    output: Option<FloatTensor<B>>,
) -> AutodiffTensor<B> {
    let tracked = Tracked::of(&inputs, |input| input.node.is_some());
    if tracked.is_empty() {
        let values: Values<B> = inputs.into_iter().map(|t| t.primitive).collect();
        let output = output.unwrap_or_else(|| rule.forward(values));
        return AutodiffTensor::new(output);
    }

    let info = rule.info();
    let mut placement = policy::place(&info, rule.replayable(), balanced);
    placement.leaf_view = info.cost == policy::Cost::Alias
        && inputs
            .iter()
            .all(|t| t.node.as_ref().is_some_and(|n| n.kind == NodeKind::Leaf));
    let reads = rule.reads(tracked);
    let mut output = output;
    if placement.thrifty {
        // NOTE [thrifty-balanced]: Balanced rebuilds a cheap output to save its bytes, but a
        // rebuild needs the op's inputs. Inputs kept for nothing else (an op output no step
        // reads yet, and that cannot be rebuilt itself) would cost bytes of their own: when
        // they cost at least the output's, keeping the output instead saves the replays at
        // no cost in memory (e.g. conv -> relu, matmul -> add bias). Inputs the op's own
        // backward reads are kept anyway and cost nothing here.
        let extra: usize = inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| !reads.has_input(*i))
            .filter_map(|(_, t)| match &t.node {
                Some(parent)
                    if parent.kind == NodeKind::Op
                        && !parent.rebuildable()
                        && !parent.is_stored() =>
                {
                    Some(bytes::<B>(&t.primitive))
                }
                _ => None,
            })
            .sum();
        if extra > 0 {
            // Every input is retained for the replay in this case: computing the output
            // first (on clones) takes no in-place opportunity away.
            let out = output.take().unwrap_or_else(|| {
                rule.forward(inputs.iter().map(|t| t.primitive.clone()).collect())
            });
            if extra >= bytes::<B>(&out) {
                placement.recompute = false;
            }
            output = Some(out);
        }
    }

    if placement.budget != 0 {
        // NOTE [budget]: room for the constants the edges will hold, before they are held.
        let constants = inputs
            .iter()
            .enumerate()
            .filter(|(i, t)| t.node.is_none() && (reads.has_input(*i) || placement.recompute))
            .map(|(_, t)| bytes::<B>(&t.primitive) as u64)
            .sum();
        budget::reserve(placement.budget, constants);
    }
    let mut edges: SmallVec<[Input<B>; 2]> = SmallVec::with_capacity(inputs.len());
    let mut values: Values<B> = SmallVec::with_capacity(inputs.len());
    let mut budgeted = Budgeted::default();
    for (i, input) in inputs.into_iter().enumerate() {
        let needed = reads.has_input(i) || placement.recompute;
        let (edge, primitive) = edge(input, needed, placement.budget != 0, info.name);
        if placement.budget != 0 && needed {
            budgeted.in_hand(&edge, &primitive);
        }
        edges.push(edge);
        values.push(primitive);
    }

    let output = match output {
        Some(output) => {
            drop(values);
            output
        }
        None if placement.budget != 0 => {
            // Measured for the budget's planner (NOTE [budget]): a replay costs as much.
            let start = std::time::Instant::now();
            let output = rule.forward(values);
            budgeted.cost_ns = Some(start.elapsed().as_nanos() as f64);
            output
        }
        None => rule.forward(values),
    };
    finish_node(rule, info, placement, edges, reads, output, budgeted)
}

/// What the budget's session needs from the recording of one op (NOTE \[budget\] in
/// `checkpoint/budget.rs`): the inputs' values in hand, and the measured forward time.
struct Budgeted<B: Backend> {
    in_hand: Vec<(Arc<Node<B>>, FloatTensor<B>)>,
    cost_ns: Option<f64>,
}

impl<B: Backend> Default for Budgeted<B> {
    fn default() -> Self {
        Self {
            in_hand: Vec::new(),
            cost_ns: None,
        }
    }
}

impl<B: Backend> Budgeted<B> {
    /// Notes the value of a needed input whose producer the budget plans.
    fn in_hand(&mut self, edge: &Input<B>, value: &FloatTensor<B>) {
        if let Some(producer) = edge.producer()
            && producer.placement.budget != 0
        {
            self.in_hand.push((producer.clone(), value.clone()));
        }
    }
}

/// Bytes of a tensor's elements.
fn bytes<B: Backend>(tensor: &FloatTensor<B>) -> usize {
    tensor.shape().num_elements() * tensor.dtype().size()
}

/// The edge from an op to one of its inputs. When the backward step (or a replay) will read
/// the input's value, it is kept: by the producing node (which may rebuild it instead), or
/// held by the edge for leaves and untracked values. Under a budget (`budgeted`: the op was
/// recorded under one), a producer recorded under the budget too waits for the planner:
/// marked needed, stored only if the planner keeps it (NOTE \[budget\]; the planner keeps a
/// value that cannot be rebuilt for as long as anything may read it).
fn edge<B: Backend>(
    input: AutodiffTensor<B>,
    needed: bool,
    budgeted: bool,
    op: &'static str,
) -> (Input<B>, FloatTensor<B>) {
    let AutodiffTensor {
        primitive, node, ..
    } = input;
    let mut held = None;
    if needed {
        match &node {
            Some(parent) if parent.kind == NodeKind::Op => {
                let planned = budgeted && parent.placement.budget != 0;
                parent.require_value(&primitive, planned || parent.rebuildable());
            }
            Some(_leaf) => held = Some(Kept::new(primitive.clone(), KeepReason::Leaf, op)),
            None => held = Some(Kept::new(primitive.clone(), KeepReason::Constant, op)),
        }
    }
    (Input { node, held }, primitive)
}

/// Creates the node of a recorded op from its edges and output; under a budget, hands it to
/// the thread's session (NOTE \[budget\]).
fn finish_node<B: Backend, R: Rule<B>>(
    rule: R,
    info: OpInfo,
    placement: policy::Placement,
    edges: SmallVec<[Input<B>; 2]>,
    reads: Reads,
    output: FloatTensor<B>,
    budgeted: Budgeted<B>,
) -> AutodiffTensor<B> {
    let recorded = (placement.budget != 0).then(|| {
        let ids = |read: &dyn Fn(usize) -> bool| -> Vec<NodeId> {
            edges
                .iter()
                .enumerate()
                .filter(|(i, _)| read(*i))
                .filter_map(|(_, e)| e.producer().map(|p| p.id))
                .collect()
        };
        let bytes = if placement.leaf_view {
            0
        } else {
            bytes::<B>(&output) as u64
        };
        budget::Recorded {
            name: info.name,
            bytes,
            cost_ns: budgeted
                .cost_ns
                .unwrap_or_else(|| budget::estimate(info.cost, bytes)),
            replayable: placement.recompute,
            in_region: placement.region != 0,
            reads_output: reads.output,
            fixed_bytes: edges
                .iter()
                .filter(|e| e.node.is_none())
                .filter_map(|e| e.held.as_ref().map(Kept::bytes))
                .sum(),
            inputs: if placement.recompute {
                ids(&|i| rule.replay_input(i))
            } else {
                Vec::new()
            },
            step_reads: ids(&|i| reads.has_input(i)),
            in_hand: budgeted.in_hand,
        }
    });
    let slot = if !reads.output {
        Slot::Unneeded
    } else if placement.recompute {
        Slot::Evicted(Signature::of::<B>(&output))
    } else {
        Slot::Stored(Kept::new(output.clone(), KeepReason::Saved, info.name))
    };
    let op = OpState {
        rule: Box::new(rule),
        inputs: edges,
        reads,
    };
    let node = Arc::new(Node::op(info, placement, op, slot));
    if let Some(recorded) = recorded {
        budget::on_record(&node, recorded, &output);
    }
    AutodiffTensor::tracked(output, node)
}

/// One input of a custom op (Burn's `Backward` API, [`crate::ops::custom`]).
pub(crate) enum CustomInput<B: BackendTypes> {
    /// A parent: its gradient comes from the op's backward, its value is not read.
    Parent(Option<Arc<Node<B>>>),
    /// A checkpointed tensor: its value is read by the op's backward.
    Read(AutodiffTensor<B>),
    /// A tensor the op's retro-forward reads: its value is read by a replay.
    Replay(AutodiffTensor<B>),
}

/// Records a custom op whose output the caller computed. A rule that is not replayable (no
/// retro-forward) keeps its output when a later op reads it; one with a retro-forward is
/// placed by the policy like any op, its `Replay` inputs kept for the replay.
/// Untracked when no parent is tracked.
pub(crate) fn record_custom<B: Backend, R: Rule<B>>(
    rule: R,
    inputs: Vec<CustomInput<B>>,
    balanced: bool,
    output: FloatTensor<B>,
) -> AutodiffTensor<B> {
    let tracked = Tracked::of(&inputs, |input| {
        matches!(input, CustomInput::Parent(Some(_)))
    });
    if tracked.is_empty() {
        return AutodiffTensor::new(output);
    }
    let info = rule.info();
    let placement = policy::place(&info, rule.replayable(), balanced);
    let reads = rule.reads(tracked);
    if placement.budget != 0 {
        // NOTE [budget]: room for the constants the edges will hold, before they are held.
        let constants = inputs
            .iter()
            .enumerate()
            .filter_map(|(i, input)| match input {
                CustomInput::Read(t) if t.node.is_none() && reads.has_input(i) => Some(t),
                CustomInput::Replay(t) if t.node.is_none() && placement.recompute => Some(t),
                _ => None,
            })
            .map(|t| bytes::<B>(&t.primitive) as u64)
            .sum();
        budget::reserve(placement.budget, constants);
    }
    let mut budgeted = Budgeted::default();
    let edges = inputs
        .into_iter()
        .enumerate()
        .map(|(i, input)| {
            let (tensor, needed) = match input {
                CustomInput::Parent(node) => return Input { node, held: None },
                CustomInput::Read(tensor) => (tensor, reads.has_input(i)),
                CustomInput::Replay(tensor) => (tensor, placement.recompute),
            };
            let (edge, value) = edge(tensor, needed, placement.budget != 0, info.name);
            if placement.budget != 0 && needed {
                budgeted.in_hand(&edge, &value);
            }
            edge
        })
        .collect();
    finish_node(rule, info, placement, edges, reads, output, budgeted)
}
