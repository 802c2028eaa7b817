//! The one recording site: every op, custom op and transfer is recorded here. It asks the
//! decision layer (`checkpoint::decide`) what to keep for the op, and applies the answer to
//! the graph: the edges to its inputs, its node and its output's slot; under a budget, it
//! hands the op to the budget's session (NOTE \[budget\]).
//!
//! # Invariants
//! - Nothing here decides what is kept: the decision comes whole from `checkpoint::decide`.

use std::sync::Arc;

use burn_backend::{Backend, BackendTypes, Shape, TensorMetadata, tensor::FloatTensor};
use smallvec::SmallVec;

use crate::checkpoint::decide::{Decision, InputState, OpFacts, decide};
use crate::checkpoint::{budget, cost};
use crate::counters::KeepReason;
use crate::graph::{
    Input, Kept, Node, NodeId, NodeKind, OpInfo, OpState, Placement, Reads, Rule, Signature, Slot,
    Tracked, Values, charged_constants,
};
use crate::planner::Forced;
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
    let decision = decide_unread(rule.info(), balanced, &[InputState::GradientOnly]);
    let edge = Input {
        node: Some(parent),
        held: None,
    };
    finish_node(
        rule,
        decision.placement,
        smallvec::smallvec![edge],
        Reads::NOTHING,
        decision.output,
        output,
        Budgeted::default(),
    )
}

/// Records a transfer from another inner backend: a node with no input on this backend (the
/// rule reaches its parent), never replayed, whose step reads nothing; not planned by a
/// budget (the value never waits for backward).
pub(crate) fn record_transfer<B: Backend, R: Rule<B>>(
    rule: R,
    balanced: bool,
    output: FloatTensor<B>,
) -> AutodiffTensor<B> {
    let info = rule.info();
    let decision = decide_unread(info, balanced, &[]);
    let op = OpState {
        rule: Box::new(rule),
        inputs: SmallVec::new(),
        reads: Reads::NOTHING,
    };
    let node = Node::op(NodeId::new(), info, decision.placement, op, Slot::Unneeded);
    AutodiffTensor::tracked(output, Arc::new(node))
}

/// The decision for an op that is never replayed and whose step reads nothing, over
/// `inputs` (an unread input, or none for a transfer).
fn decide_unread(info: OpInfo, balanced: bool, inputs: &[InputState]) -> Decision {
    decide(
        &OpFacts {
            info,
            replayable: false,
            balanced,
            reads: &Reads::NOTHING,
            replay_reads: &|_| false,
            inputs,
            stored: &|_| false,
            weigh_bytes: false,
        },
        &mut never_weighed,
    )
}

/// The output size for [`decide`] where it never asks (`weigh_bytes` is false).
fn never_weighed() -> u64 {
    panic!("remat internal error: the decision weighed an op recorded with weigh_bytes false")
}

/// What the decision layer is told about one input (see [`InputState`]).
fn state_of<B: Backend>(input: &AutodiffTensor<B>) -> InputState {
    match &input.node {
        None => InputState::Untracked,
        Some(node) if node.kind() == NodeKind::Leaf => InputState::Leaf,
        Some(node) => InputState::Op {
            rebuildable: node.rebuildable(),
            planned: node.placement.planned,
            bytes: bytes::<B>(&input.primitive) as u64,
        },
    }
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
    let reads = rule.reads(tracked);
    let mut output = output;
    let (
        Decision {
            placement,
            output: output_mark,
            inputs: marks,
        },
        upcoming,
    ) = decide_and_reserve(
        &rule,
        info,
        balanced,
        &reads,
        &inputs.iter().map(Some).collect::<SmallVec<[_; 2]>>(),
        Some(&mut || {
            // Asked only when Balanced recomputes the op: every input is then retained for
            // the replay, so computing the output first (on clones) takes no in-place
            // opportunity away.
            let out = output.get_or_insert_with(|| {
                rule.forward(inputs.iter().map(|t| t.primitive.clone()).collect())
            });
            bytes::<B>(out) as u64
        }),
        true,
    );
    let mut edges: SmallVec<[Input<B>; 2]> = SmallVec::with_capacity(inputs.len());
    let mut values: Values<B> = SmallVec::with_capacity(inputs.len());
    let mut budgeted = Budgeted::default();
    let keeps = upcoming.keeps;
    for (i, (input, mark)) in inputs.into_iter().zip(&marks).enumerate() {
        let step_reads = reads.has_input(i);
        let (edge, primitive) = edge(input, *mark, info.name, placement.budget, step_reads);
        let kept_here = |edge: &Input<B>| {
            keeps
                .as_ref()
                .is_none_or(|keeps| edge.producer().is_some_and(|p| keeps.contains(&p.id)))
        };
        if placement.budget != 0 && mark.is_some() && kept_here(&edge) {
            budgeted.in_hand(&edge, &primitive);
        }
        edges.push(edge);
        values.push(primitive);
    }

    // The op's cost for the budget's planner (NOTE [budget]): a replay costs as much.
    // Estimated from its shapes (NOTE [estimated-costs] in checkpoint/cost.rs), or measured.
    let estimated = placement.budget != 0 && cost::op_costs() == cost::OpCosts::Estimated;
    let work = estimated.then(|| {
        let shapes: SmallVec<[Shape; 3]> = values.iter().map(|v| v.shape()).collect();
        let dims: SmallVec<[&[usize]; 3]> = shapes.iter().map(|s| &s[..]).collect();
        let input_bytes = values.iter().map(|v| bytes::<B>(v) as u64).sum();
        cost::Work::of(info.name, info.cost, &dims, input_bytes)
    });
    let output = match output {
        Some(output) => {
            drop(values);
            output
        }
        None if placement.budget != 0 && !estimated => {
            // Timed between syncs for its first runs (NOTE [op-times] in checkpoint/cost.rs).
            let kind = cost::Kind::new(
                core::any::TypeId::of::<B>(),
                info.name,
                values.iter().map(|v| bytes::<B>(v) as u64).sum(),
                values.len(),
            );
            let (output, ns) = cost::timed(
                kind,
                values.first().map(|v| v.device()),
                // Advisory: a failed computation surfaces at the next read.
                |device| {
                    let _ = B::sync(device);
                },
                || rule.forward(values),
            );
            budgeted.cost_ns = Some(ns);
            output
        }
        None => rule.forward(values),
    };
    if let Some(work) = work {
        let elements = output.shape().num_elements() as u64;
        budgeted.cost_ns = Some(work.ns(elements, bytes::<B>(&output) as u64));
    }
    finish_node(rule, placement, edges, reads, output_mark, output, budgeted)
}

/// Decides what an op with a tracked input keeps ([`decide`]) and, under a budget, reserves
/// room for the constants its edges will hold, before they are held (NOTE \[budget\]).
///
/// `inputs[i]` is input `i`'s tensor, `None` for a custom op's parent (its value is not read).
/// `output_bytes` sizes the output when Balanced weighs bytes (NOTE \[thrifty-balanced\] in
/// `checkpoint/decide.rs`); `None` where it may not (custom ops, whose replay inputs are the
/// user's retro-forward's). With `follows_plan`, the op takes the word of the plan its budget
/// follows (custom ops do not): the [`budget::Upcoming`] returned, and a free side op retains
/// nothing.
fn decide_and_reserve<B: Backend, R: Rule<B>>(
    rule: &R,
    info: OpInfo,
    balanced: bool,
    reads: &Reads,
    inputs: &[Option<&AutodiffTensor<B>>],
    output_bytes: Option<&mut dyn FnMut() -> u64>,
    follows_plan: bool,
) -> (Decision, budget::Upcoming) {
    let states: SmallVec<[InputState; 2]> = inputs
        .iter()
        .map(|input| input.map_or(InputState::GradientOnly, state_of))
        .collect();
    let weigh_bytes = output_bytes.is_some();
    let mut decision = decide(
        &OpFacts {
            info,
            replayable: rule.replayable(),
            balanced,
            reads,
            replay_reads: &|i| rule.replay_input(i),
            inputs: &states,
            stored: &|i| {
                inputs[i]
                    .and_then(|t| t.node.as_ref())
                    .is_some_and(|n| n.is_stored())
            },
            weigh_bytes,
        },
        output_bytes.unwrap_or(&mut never_weighed),
    );

    // NOTE [in-place-forward] in `checkpoint/budget/session.rs`: following a plan, only the
    // inputs it keeps here are held while the op runs.
    let upcoming = if follows_plan && decision.placement.budget != 0 {
        let budget_id = decision.placement.budget;
        let reads_of: SmallVec<[budget::InputRead; 2]> = inputs
            .iter()
            .enumerate()
            .filter_map(|(i, input)| {
                let parent = (*input)?.node.as_ref()?;
                (parent.kind() == NodeKind::Op && parent.placement.budget == budget_id).then(|| {
                    budget::InputRead {
                        producer: parent.id,
                        by_step: reads.has_input(i),
                        by_replay: decision.placement.recompute && rule.replay_input(i),
                    }
                })
            })
            .collect();
        budget::upcoming(budget_id, info.name, &reads_of)
    } else {
        budget::Upcoming::default()
    };
    if upcoming.free_side && *reads == Reads::NOTHING {
        // NOTE [side-ops] in `checkpoint/budget/state.rs`: no backward step reaches this op
        // and its own reads nothing: nothing is retained for it, as under SaveAll, and no
        // plan keeps its value (an op that reads it after all keeps it).
        decision.placement.recompute = false;
        decision.placement.planned = false;
        decision.inputs.iter_mut().for_each(|mark| *mark = None);
    }
    if decision.placement.budget != 0 {
        // NOTE [budget]: room for the constants the edges will hold, before they are held.
        let constants = inputs
            .iter()
            .zip(&decision.inputs)
            .filter_map(|(input, mark)| input.filter(|t| t.node.is_none() && mark.is_some()))
            .map(|t| bytes::<B>(&t.primitive) as u64)
            .sum();
        budget::reserve(decision.placement.budget, constants);
    }
    (decision, upcoming)
}

/// What the budget's session needs from the recording of one op (NOTE \[budget\] in
/// `checkpoint/budget/`): the inputs' values in hand, and the measured forward time.
struct Budgeted<B: Backend> {
    /// In place for up to two (no allocation per op).
    in_hand: budget::InHand<B>,
    cost_ns: Option<f64>,
}

impl<B: Backend> Default for Budgeted<B> {
    fn default() -> Self {
        Self {
            in_hand: SmallVec::new(),
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

/// The edge from an op to one of its inputs, with the input's mark from [`decide`]: a
/// retained value is kept by the producing node (`Keep`: stored now; `Recompute`: marked
/// needed, left to a replay or, under a budget, to the planner's `Keep`), or held by the edge
/// for leaves and untracked values.
/// `budget`: the consumer's budget (0: none); `step_reads`: the op's backward step reads the
/// input (else only a replay does).
fn edge<B: Backend>(
    input: AutodiffTensor<B>,
    mark: Option<Forced>,
    op: &'static str,
    budget: u32,
    step_reads: bool,
) -> (Input<B>, FloatTensor<B>) {
    // NOTE [shared-constants]: an untracked input is keyed by its id, shared by its clones.
    let key = (mark.is_some() && input.node.is_none()).then(|| input.id());
    // NOTE [fill-constants] in `tensor.rs`: a zeros, ones or empty tensor that only a replay
    // reads is kept as its recipe. One a backward step reads stays held (charged once):
    // made again at every read, its copies would be temporaries the budget's model does not
    // see (Burn's `Lstm` at a quarter of K peaked 190 KB higher when its zeros initial state
    // was made again for each of its five reads).
    let fill = input.fill().filter(|_| !step_reads);
    let AutodiffTensor {
        primitive, node, ..
    } = input;
    let mut held = None;
    if let Some(mark) = mark {
        match &node {
            Some(parent) if parent.kind() == NodeKind::Op => {
                let outside = parent.placement.budget != budget;
                if parent.placement.budget != 0 && (outside || !parent.placement.planned) {
                    // NOTE [side-ops]: an op the budget's session does not see reads it, or
                    // an op reads (and keeps) a free side op's value.
                    budget::read_outside(
                        parent.placement.budget,
                        parent.id,
                        !parent.placement.planned,
                    );
                }
                parent.require_value(&primitive, mark == Forced::Recompute);
            }
            // A leaf read by many ops (a parameter read at every step of a recurrence) is
            // one buffer: its edges share one record, keyed by the leaf's id, so `stats`
            // counts and lists it once (NOTE [shared-constants]; no budget charges it).
            Some(leaf) => {
                held = Some(Kept::shared(
                    primitive.clone(),
                    KeepReason::Leaf,
                    op,
                    leaf.id.value,
                ));
            }
            None if let Some(fill) = fill => held = Some(Kept::fill(fill, &primitive)),
            None => {
                let key = key.expect("remat internal error: an untracked input has an id");
                held = Some(Kept::shared(
                    primitive.clone(),
                    KeepReason::Constant,
                    op,
                    key.value(),
                ));
            }
        }
    }
    (Input { node, held }, primitive)
}

/// Creates the node of a recorded op from its edges and output; under a budget, hands it to
/// the thread's session (NOTE \[budget\]).
fn finish_node<B: Backend, R: Rule<B>>(
    rule: R,
    placement: Placement,
    edges: SmallVec<[Input<B>; 2]>,
    reads: Reads,
    output_mark: Option<Forced>,
    output: FloatTensor<B>,
    budgeted: Budgeted<B>,
) -> AutodiffTensor<B> {
    let info = rule.info();
    let id = NodeId::new();
    // NOTE [shared-constants]: the op carries the charge of the records its edges made.
    for held in edges.iter().filter_map(|edge| edge.held.as_ref()) {
        held.claim(id);
    }
    let recorded = (placement.budget != 0).then(|| {
        let ids = |read: &dyn Fn(usize) -> bool| -> SmallVec<[NodeId; 2]> {
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
            facts: budget::OpFacts {
                name: info.name,
                bytes,
                cost_ns: budgeted
                    .cost_ns
                    .unwrap_or_else(|| budget::estimate(info.cost, bytes)),
                replayable: placement.recompute,
                in_region: placement.region.is_some(),
                reads_output: reads.output,
                fixed_bytes: charged_constants(&edges, id),
                inputs: if placement.recompute {
                    ids(&|i| rule.replay_input(i))
                } else {
                    SmallVec::new()
                },
                step_reads: ids(&|i| reads.has_input(i)),
                quiet: reads == Reads::NOTHING,
            },
            in_hand: budgeted.in_hand,
        }
    });
    let slot = match output_mark {
        None => Slot::Unneeded,
        Some(Forced::Recompute) => Slot::Evicted(Signature::of::<B>(&output)),
        Some(Forced::Keep) => Slot::Stored(Kept::new(output.clone(), KeepReason::Saved, info.name)),
    };
    let op = OpState {
        rule: Box::new(rule),
        inputs: edges,
        reads,
    };
    let node = Arc::new(Node::op(id, info, placement, op, slot));
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

impl<B: BackendTypes> CustomInput<B> {
    /// The tensor whose value the op or its replay reads (`None` for a parent).
    fn tensor(&self) -> Option<&AutodiffTensor<B>> {
        match self {
            CustomInput::Parent(_) => None,
            CustomInput::Read(t) | CustomInput::Replay(t) => Some(t),
        }
    }
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
    let reads = rule.reads(tracked);
    let (
        Decision {
            placement,
            output: output_mark,
            inputs: marks,
        },
        _,
    ) = decide_and_reserve(
        &rule,
        info,
        balanced,
        &reads,
        &inputs
            .iter()
            .map(CustomInput::tensor)
            .collect::<SmallVec<[_; 2]>>(),
        None,
        false,
    );
    let mut budgeted = Budgeted::default();
    let edges = inputs
        .into_iter()
        .zip(&marks)
        .map(|(input, mark)| {
            let (tensor, step_reads) = match input {
                CustomInput::Parent(node) => return Input { node, held: None },
                CustomInput::Read(tensor) => (tensor, true),
                CustomInput::Replay(tensor) => (tensor, false),
            };
            let (edge, value) = edge(tensor, *mark, info.name, placement.budget, step_reads);
            if placement.budget != 0 && mark.is_some() {
                budgeted.in_hand(&edge, &value);
            }
            edge
        })
        .collect();
    finish_node(rule, placement, edges, reads, output_mark, output, budgeted)
}
