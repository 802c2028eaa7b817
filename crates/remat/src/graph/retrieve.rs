//! Retrieval: handing a saved value to a backward step, rebuilding it first if it was
//! dropped.
//!
//! Cost model: one retrieval of an evicted value walks the evicted ancestors it needs once
//! (a visited set makes shared ancestors count once) and replays each of them exactly once,
//! parents first. A rebuilt value is stored with the reads still to come and freed at its
//! last read, so over a whole backward pass every evicted value is replayed at most once:
//! total work is linear in the nodes and edges of the graph.
//!
//! # Invariants
//! - Relies on INVARIANT [rebuildable] (see `graph::node`): every input of a replayed op is
//!   stored, rebuildable or held on the edge.
//! - Locks are taken child before parent, never the other way round, and never two
//!   siblings at once: no lock-order cycle is possible in a DAG.
//! - No lock is held while an op's forward runs in a replay (NOTE [replay-unlocked]).

use std::collections::HashSet;
use std::sync::Arc;

use burn_backend::{Backend, TensorMetadata, tensor::FloatTensor};

use super::op::Values;
use super::{IdBuildHasher, Input, Kept, Node, NodeId, Slot};
use crate::counters::{self, KeepReason};

/// Hands out the value of `node` for one planned read.
///
/// The last planned read takes the value out of the slot (freed at last use); earlier ones
/// hand out a clone (a handle clone for Burn's backends).
pub(crate) fn read_value<B: Backend>(node: &Node<B>) -> FloatTensor<B> {
    #[cfg(feature = "tracing")]
    tracing::debug!(node = %node.id, op = node.name(), "remat: retrieve");
    loop {
        let mut state = node.lock();
        if state.scheduled {
            // NOTE [budget]: a schedule holds every value a step or a replay reads, and
            // frees it itself; the last read before a `Free` takes it (NOTE [hand-over]).
            if !matches!(state.slot, Slot::Stored(_)) {
                drop(state);
                panic!(
                    "remat internal error: the budget's schedule reads {node:?}, which it does \
                     not hold"
                );
            }
            if state.n_required == 1 {
                state.n_required = 0;
                let rebuildable = state.op.is_some();
                let Slot::Stored(kept) = core::mem::replace(&mut state.slot, Slot::Unneeded) else {
                    unreachable!()
                };
                if rebuildable {
                    state.slot = Slot::Evicted(super::Signature::of::<B>(kept.get()));
                }
                drop(state);
                return kept.into_value();
            }
            state.n_required = state.n_required.saturating_sub(1);
            let Slot::Stored(kept) = &state.slot else {
                unreachable!()
            };
            return kept.get().clone();
        }
        match state.slot {
            Slot::Stored(_) => {
                debug_assert!(
                    state.n_required > 0,
                    "remat internal error: a read of {node:?} that was not planned"
                );
                state.n_required = state.n_required.saturating_sub(1);
                if state.n_required == 0 {
                    let Slot::Stored(kept) = core::mem::replace(&mut state.slot, Slot::Unneeded)
                    else {
                        unreachable!()
                    };
                    return kept.into_value();
                }
                let Slot::Stored(kept) = &state.slot else {
                    unreachable!()
                };
                return kept.get().clone();
            }
            Slot::Evicted(_) => {
                drop(state);
                rebuild(node);
            }
            Slot::Unneeded => {
                drop(state);
                panic!(
                    "remat internal error: {node:?} is read in backward but its value was \
                     neither kept nor marked for rebuild"
                );
            }
        }
    }
}

/// The value of one input of an op, for a backward read or a replay.
pub(crate) fn read_input<B: Backend>(input: &Input<B>) -> FloatTensor<B> {
    match input.producer() {
        Some(producer) => read_value(producer),
        None => input
            .held
            .as_ref()
            .expect("remat internal error: an input that is read is held on its edge")
            .constant(),
    }
}

/// Releases one planned read of `node` that will not happen (a step that received no
/// gradient, or a declared read a rule did not make), without rebuilding anything.
///
/// NOTE [release-without-rebuild]: when the last planned read of an evicted value is released,
/// the value is never rebuilt, so the reads its replay would have made (counted on its
/// producers by `plan_rebuild`) are released too, and so on up the evicted ancestors: one
/// iterative walk, each released value at most once. A stored value's last release frees it.
pub(crate) fn release<B: Backend>(node: &Node<B>) {
    let mut stack: Vec<Arc<Node<B>>> = Vec::new();
    release_one(node, &mut stack);
    while let Some(next) = stack.pop() {
        release_one(&next, &mut stack);
    }
}

/// Releases the read planned for input `input`, if its value lives in a producer's slot (a
/// value held on the edge is released with the op).
pub(crate) fn release_input<B: Backend>(input: &Input<B>) {
    if let Some(producer) = input.producer() {
        release(producer);
    }
}

fn release_one<B: Backend>(node: &Node<B>, stack: &mut Vec<Arc<Node<B>>>) {
    let freed = {
        let mut state = node.lock();
        if state.scheduled {
            // A schedule frees values itself (NOTE [budget]).
            return;
        }
        debug_assert!(
            state.n_required > 0,
            "remat internal error: a release of {node:?} that was not planned"
        );
        state.n_required = state.n_required.saturating_sub(1);
        if state.n_required > 0 {
            return;
        }
        match core::mem::replace(&mut state.slot, Slot::Unneeded) {
            Slot::Stored(kept) => Some(kept),
            Slot::Evicted(_) => {
                let op = state.op.as_ref().unwrap_or_else(|| {
                    panic!(
                        "remat internal error: {node:?} is evicted with reads to come but its \
                         op was already consumed (INVARIANT [rebuildable])"
                    )
                });
                stack.extend(op.replay_inputs().filter_map(Input::producer).cloned());
                None
            }
            Slot::Unneeded => None,
        }
    };
    // Freed outside the node's lock.
    drop(freed);
}

/// Rebuilds the evicted value of `node`: replays its evicted ancestors, parents first, then
/// `node` itself, each exactly once.
pub(crate) fn rebuild<B: Backend>(node: &Node<B>) {
    #[cfg(feature = "tracing")]
    let _span = tracing::debug_span!("remat: rebuild", node = %node.id, op = node.name()).entered();
    let mut order: Vec<Arc<Node<B>>> = Vec::new();
    let mut visited: HashSet<NodeId, IdBuildHasher> = HashSet::default();
    let mut stack: Vec<(Arc<Node<B>>, bool)> = Vec::new();
    push_evicted_producers(node, &mut stack);
    while let Some((next, expanded)) = stack.pop() {
        if expanded {
            order.push(next);
            continue;
        }
        if !visited.insert(next.id) {
            continue;
        }
        stack.push((next.clone(), true));
        push_evicted_producers(&next, &mut stack);
    }
    for ancestor in &order {
        replay(ancestor);
    }
    replay(node);
}

fn push_evicted_producers<B: Backend>(node: &Node<B>, stack: &mut Vec<(Arc<Node<B>>, bool)>) {
    let state = node.lock();
    let Some(op) = &state.op else {
        return;
    };
    for producer in op.replay_inputs().filter_map(Input::producer) {
        if matches!(producer.lock().slot, Slot::Evicted(_)) {
            stack.push((producer.clone(), false));
        }
    }
}

/// Replays the op of `node` from its inputs and stores the result for the reads to come.
///
/// NOTE [replay-unlocked]: the op runs with no lock held. A custom op's replay is its
/// retro-forward, user code that may record ops or run a backward pass of its own; it must
/// not find this node locked. The op is taken out of the node for the replay and put back
/// afterwards: the node belongs to the running pass (claimed, NOTE [no-retain-graph]), so
/// nothing else reads its op meanwhile. If the replay panics, the op is dropped on the way
/// out and the node (consumed) is freed with its graph.
pub(crate) fn replay<B: Backend>(node: &Node<B>) {
    replay_then(node, &mut || {}, false);
}

/// Like [`replay`], running `before_store` between the op's forward and the storing of its
/// output (a schedule frees there the inputs the replay read last: NOTE \[budget\]).
/// Returns the time the op's forward took (ns), or `None` when the value was held (nothing
/// replayed); with `synced`, the forward is timed between two `Backend::sync`s (NOTE
/// [replay-times] in `checkpoint/cost.rs`).
pub(crate) fn replay_then<B: Backend>(
    node: &Node<B>,
    before_store: &mut dyn FnMut(),
    synced: bool,
) -> Option<f64> {
    let (signature, op) = {
        let mut state = node.lock();
        let Slot::Evicted(signature) = &state.slot else {
            return None;
        };
        let signature = signature.clone();
        let op = state.op.take().unwrap_or_else(|| {
            panic!(
                "remat internal error: {node:?} must be rebuilt but its op was already \
                 consumed (INVARIANT [rebuildable])"
            )
        });
        (signature, op)
    };
    let values: Values<B> = op.replay_inputs().map(read_input).collect();
    #[cfg(feature = "tracing")]
    tracing::trace!(node = %node.id, op = node.name(), "remat: replay");
    // Advisory syncs: a failed computation surfaces at the next read.
    if synced && let Some(first) = values.first() {
        let _ = B::sync(&first.device());
    }
    let start = std::time::Instant::now();
    let value = op.rule.forward(values);
    if synced {
        let _ = B::sync(&value.device());
    }
    let ns = start.elapsed().as_nanos() as f64;
    let name = node.name();
    signature.check::<B>(&value, name);
    counters::on_replay(name, ns as u64);
    before_store();
    let mut state = node.lock();
    state.op = Some(op);
    // A view of leaves is the user's memory, kept or rebuilt (NOTE [what-is-kept]).
    let reason = if node.placement.leaf_view {
        KeepReason::Leaf
    } else {
        KeepReason::Rebuilt
    };
    state.slot = Slot::Stored(Kept::new(value, reason, name));
    Some(ns)
}
