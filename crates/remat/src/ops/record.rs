//! The one recording site: every op, custom op and transfer is recorded here. It asks the
//! decision layer (`checkpoint::decide`) what to keep for the op, and applies the answer to
//! the graph: the edges to its inputs, its node and its output's slot; under a budget, it
//! hands the op to the budget's session (NOTE \[budget\]).
//!
//! # Invariants
//! - Nothing here decides what is kept: the decision comes whole from `checkpoint::decide`.

use std::sync::Arc;

use burn_backend::{Backend, BackendTypes, TensorMetadata, tensor::FloatTensor};
use smallvec::SmallVec;

use crate::checkpoint::budget;
use crate::checkpoint::policy::{self, OpInfo};
use crate::graph::{
    Input, Kept, Node, NodeId, NodeKind, OpState, Placement, Reads, Rule, Signature, Slot, Tracked,
    Values,
};
use crate::stats::KeepReason;
use crate::tensor::AutodiffTensor;

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
    placement.leaf_view = info.cost == crate::graph::Cost::Alias
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
    placement: Placement,
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
            in_region: placement.region.is_some(),
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
