//! A node in a backward pass: [`GraphNode`] for [`Node`], the steps, replays, frees and
//! hand-overs the traversal and the budget's schedule ask of it (NOTE \[hand-over\] in
//! `node.rs`). Above retrieval (`retrieve.rs`) and the step's context (`vjp.rs`), which it
//! runs.

use std::sync::Arc;

use burn_backend::Backend;
use burn_backend::distributed::DistributedParams;

use super::grads::Gradients;
use super::id::NodeId;
use super::node::{
    BudgetNode, GraphNode, Input, Node, NodeKind, OpState, ScheduleEntry, ScheduleFacts, Signature,
    Slot, Vjp, charged_constants, shared_constants,
};
use super::retrieve;

impl<B: Backend> Node<B> {
    /// Marks the node as run by a schedule and reads its slot and recorded op with `f`;
    /// `None` for a leaf or a node whose step ran.
    fn scheduled<R>(&self, f: impl FnOnce(&Slot<B>, &OpState<B>) -> R) -> Option<R> {
        if self.kind() == NodeKind::Leaf {
            return None;
        }
        let mut state = self.lock();
        state.scheduled = true;
        let op = state.op.as_ref()?;
        Some(f(&state.slot, op))
    }

    /// The facts of [`GraphNode::schedule_facts`] for this op node, its slot `slot` and its
    /// recorded op `op`.
    fn facts(&self, slot: &Slot<B>, op: &OpState<B>) -> ScheduleFacts {
        let bytes = match slot {
            Slot::Stored(kept) => kept.bytes(),
            Slot::Evicted(signature) => signature.bytes(),
            Slot::Unneeded => 0,
        };
        // A value that no planner decides and that was kept may not have its inputs retained
        // (INVARIANT [rebuildable] holds only for evicted values): it stays pinned.
        let replayable = op.rule.replayable()
            && self.placement.recompute
            && (self.placement.planned || matches!(slot, Slot::Evicted(_)));
        ScheduleFacts {
            id: self.id,
            bytes: if self.placement.leaf_view { 0 } else { bytes },
            fixed_bytes: charged_constants(&op.inputs, self.id),
            held: matches!(slot, Slot::Stored(_)),
            replayable,
        }
    }
}

impl<B: Backend> GraphNode for Node<B> {
    fn id(&self) -> NodeId {
        self.id
    }

    fn claim_and_push_parents(&self, out: &mut Vec<Arc<dyn GraphNode>>) -> bool {
        let mut state = self.lock();
        if self.kind() != NodeKind::Leaf && core::mem::replace(&mut state.consumed, true) {
            return false;
        }
        if let Some(op) = &state.op {
            for input in &op.inputs {
                if let Some(node) = &input.node {
                    out.push(node.clone());
                }
            }
            op.rule.push_foreign_parents(out);
        }
        true
    }

    fn unclaim(&self) {
        if self.kind() != NodeKind::Leaf {
            self.lock().consumed = false;
        }
    }

    fn plan_reads(&self) {
        let mut state = self.lock();
        let Some(op) = &state.op else {
            return;
        };
        let reads = &op.reads;
        for (i, input) in op.inputs.iter().enumerate() {
            if reads.has_input(i)
                && let Some(producer) = input.producer()
            {
                producer.lock().n_required += 1;
            }
        }
        if reads.output {
            state.n_required += 1;
        }
    }

    fn plan_rebuild(&self) {
        let mut state = self.lock();
        let state = &mut *state;
        match state.slot {
            Slot::Evicted(_) if state.n_required > 0 => {
                let op = state
                    .op
                    .as_ref()
                    .expect("remat internal error: an evicted value's op is kept until its step");
                for producer in op.replay_inputs().filter_map(Input::producer) {
                    producer.lock().n_required += 1;
                }
            }
            Slot::Evicted(_) | Slot::Stored(_) if state.n_required == 0 => {
                // A backup that nothing in this backward pass reads.
                state.slot = Slot::Unneeded;
            }
            _ => {}
        }
    }

    fn step(&self, grads: &mut Gradients) {
        if self.kind() == NodeKind::Leaf {
            return;
        }
        let grad = grads.remove::<B>(self.id);
        let Some(grad) = grad else {
            // No gradient reached this node (its consumers registered none): its step reads
            // nothing, and nothing is rebuilt for it (NOTE [release-without-rebuild]). The
            // output's read is released first, while the op (which a release of an evicted
            // value walks) is still in place.
            let reads_output = self.lock().op.as_ref().is_some_and(|op| op.reads.output);
            if reads_output {
                retrieve::release(self);
            }
            let op = self.lock().op.take();
            if let Some(op) = op {
                for (i, input) in op.inputs.iter().enumerate() {
                    if op.reads.has_input(i) {
                        retrieve::release_input(input);
                    }
                }
            }
            return;
        };
        let rebuild_own = {
            let state = self.lock();
            state.op.as_ref().is_some_and(|op| op.reads.output)
                && matches!(state.slot, Slot::Evicted(_))
                && state.n_required > 0
        };
        if rebuild_own {
            retrieve::rebuild(self);
        }
        let op = self.lock().op.take();
        let Some(op) = op else {
            return;
        };
        let mut cx = Vjp::new(self, &op.inputs, &op.reads, grads);
        op.rule.vjp(&mut cx, grad);
        cx.release_unread();
        drop(op);
    }

    fn finish(&self) -> bool {
        let mut state = self.lock();
        // A schedule leaves an evicted value behind once its last reader is done.
        let empty = match state.slot {
            Slot::Unneeded => true,
            Slot::Evicted(_) => state.scheduled,
            Slot::Stored(_) => false,
        };
        let drained = empty && state.n_required == 0 && state.op.is_none();
        state.slot = Slot::Unneeded;
        state.n_required = 0;
        drained || self.kind() == NodeKind::Leaf
    }

    fn distributed(&self) -> Option<DistributedParams> {
        if self.kind() != NodeKind::Leaf {
            return None;
        }
        self.distributed_params()
    }

    fn is_leaf(&self) -> bool {
        self.kind() == NodeKind::Leaf
    }

    fn backend(&self) -> core::any::TypeId {
        core::any::TypeId::of::<B>()
    }

    fn budget(&self) -> u32 {
        self.placement.budget
    }

    fn schedule_entry(&self) -> Option<ScheduleEntry> {
        self.scheduled(|slot, op| {
            let id_of = |input: &Input<B>| input.producer().map(|p| p.id);
            ScheduleEntry {
                facts: self.facts(slot, op),
                name: self.name(),
                cost: op.rule.info().cost,
                inputs: op.replay_inputs().filter_map(id_of).collect(),
                step_reads: op
                    .inputs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| op.reads.has_input(*i))
                    .filter_map(|(_, input)| id_of(input))
                    .collect(),
                reads_output: op.reads.output,
                shared: shared_constants(&op.inputs, self.id),
            }
        })
    }

    fn schedule_facts(&self) -> Option<ScheduleFacts> {
        self.scheduled(|slot, op| self.facts(slot, op))
    }

    fn scheduled_replay(&self, before_store: &mut dyn FnMut(), synced: bool) -> (u64, Option<f64>) {
        let ns = retrieve::replay_then(self, before_store, synced);
        let bytes = match &self.lock().slot {
            // A view of leaves is the user's memory (`KeepReason::Leaf`), not the budget's.
            Slot::Stored(kept) if !self.placement.leaf_view => kept.bytes(),
            _ => 0,
        };
        (bytes, ns)
    }

    fn step_reads_of(&self, producer: NodeId) -> u32 {
        let state = self.lock();
        let Some(op) = &state.op else {
            return 0;
        };
        let inputs = op
            .inputs
            .iter()
            .enumerate()
            .filter(|(i, input)| {
                op.reads.has_input(*i) && input.producer().is_some_and(|p| p.id == producer)
            })
            .count() as u32;
        inputs + u32::from(op.reads.output && producer == self.id)
    }

    fn replay_reads_of(&self, producer: NodeId) -> u32 {
        let state = self.lock();
        let Some(op) = &state.op else {
            return 0;
        };
        op.replay_inputs()
            .filter(|input| input.producer().is_some_and(|p| p.id == producer))
            .count() as u32
    }

    fn scheduled_hand_over(&self, reads: u32) -> u64 {
        let mut state = self.lock();
        let Slot::Stored(kept) = &state.slot else {
            return 0;
        };
        let bytes = if self.placement.leaf_view {
            0
        } else {
            kept.bytes()
        };
        // In a scheduled pass `n_required` counts nothing else (NOTE [hand-over]).
        state.n_required = reads;
        bytes
    }

    fn scheduled_step(&self, grads: &mut Gradients) -> u64 {
        let op = self.lock().op.take();
        let Some(op) = op else {
            return 0;
        };
        let constants = charged_constants(&op.inputs, self.id);
        // No gradient reached the node: nothing to read or compute. The step holds its
        // gradient while it runs (NOTE [grads-in-flight] in `planner/grads.rs`).
        if let Some(grad) = grads.take_for_step::<B>(self.id) {
            let mut cx = Vjp::new(self, &op.inputs, &op.reads, grads);
            op.rule.vjp(&mut cx, grad);
            grads.step_done();
        }
        drop(op);
        constants
    }

    fn describe(&self) -> String {
        match self.kind() {
            NodeKind::Leaf => format!("leaf {}", self.id),
            NodeKind::Op => format!("node {} (op `{}`)", self.id, self.name()),
        }
    }
}

impl<B: Backend> BudgetNode for Node<B> {
    fn scheduled_free(&self) -> u64 {
        let freed = {
            let mut state = self.lock();
            state.n_required = 0;
            // Whether the schedule may replay it is the planner's call (the view says which
            // values are replayable); the op is what a replay needs.
            let rebuildable = state.op.is_some();
            match core::mem::replace(&mut state.slot, Slot::Unneeded) {
                Slot::Stored(kept) => {
                    if rebuildable {
                        state.slot = Slot::Evicted(Signature::of::<B>(kept.get()));
                    }
                    Some(kept)
                }
                other => {
                    state.slot = other;
                    None
                }
            }
        };
        // Freed outside the node's lock. A view of leaves is the user's memory.
        freed
            .filter(|_| !self.placement.leaf_view)
            .map_or(0, |kept| kept.bytes())
    }

    fn is_consumed(&self) -> bool {
        self.kind() == NodeKind::Leaf || self.lock().consumed
    }

    fn is_held(&self) -> bool {
        self.is_stored()
    }

    fn name(&self) -> &'static str {
        self.name()
    }

    fn evicted_bytes(&self) -> Option<u64> {
        match &self.lock().slot {
            Slot::Evicted(signature) if !self.placement.leaf_view => Some(signature.bytes()),
            _ => None,
        }
    }

    fn budget_bytes_now(&self) -> u64 {
        let state = self.lock();
        let value = match &state.slot {
            Slot::Stored(kept) if !self.placement.leaf_view => kept.bytes(),
            _ => 0,
        };
        let constants = state
            .op
            .as_ref()
            .map_or(0, |op| charged_constants(&op.inputs, self.id));
        value + constants
    }
}
