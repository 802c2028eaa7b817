//! Graph signatures and the plan cache: a training step's graph recurs, so a plan made once
//! is reused on later steps, and the engine falls back to online planning when a step's
//! graph differs.
//!
//! A signature hashes a view's structure: each node's name, bytes, inputs, step reads,
//! replayability, constants and forced mark, in order, then the step order. It leaves out
//! the costs (measured, they vary from step to step). The hash is FNV-1a over fixed-width
//! integers, the same on every run and platform. Two views with the same signature are
//! assumed to be the same graph; [`same_structure`] compares two nodes exactly for an engine
//! that checks each recorded op against the cached view as it goes.
//!
//! # Invariants
//! - `SignatureHasher::prefix()` after pushing the first `k` nodes of a view depends only on
//!   those nodes; `signature(view)` is `finish` after all of them.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{Forced, GraphView, Node, Schedule, ScheduleIndex};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Builds a signature node by node (see the module docs).
#[derive(Clone, Debug)]
pub struct SignatureHasher {
    state: u64,
}

impl Default for SignatureHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl SignatureHasher {
    /// An empty signature.
    pub fn new() -> Self {
        Self { state: FNV_OFFSET }
    }

    /// Adds one word (the chain planner hashes its groups' keys with it).
    pub(crate) fn word(&mut self, word: u64) {
        for byte in word.to_le_bytes() {
            self.state ^= byte as u64;
            self.state = self.state.wrapping_mul(FNV_PRIME);
        }
    }

    fn list(&mut self, values: &[u32]) {
        self.word(values.len() as u64);
        for &v in values {
            self.word(v as u64);
        }
    }

    /// Adds the next node.
    pub fn push(&mut self, node: &Node) {
        self.word(node.name.len() as u64);
        for &byte in node.name.as_bytes() {
            self.word(byte as u64);
        }
        self.word(node.bytes);
        self.list(&node.inputs);
        self.list(&node.step_reads);
        self.word(node.replayable as u64);
        self.word(node.fixed_bytes);
        if let Some(until) = node.fixed_until {
            // Only where set, so that views without shared constants hash as before.
            self.word(u64::MAX - until as u64);
        }
        self.word(match node.forced {
            None => 0,
            Some(Forced::Keep) => 1,
            Some(Forced::Recompute) => 2,
        });
    }

    /// The signature of the nodes pushed so far.
    pub fn prefix(&self) -> u64 {
        self.state
    }

    /// The signature of a whole view whose nodes were pushed, given its step order.
    pub fn finish(&self, step_order: &[u32]) -> u64 {
        let mut end = self.clone();
        end.list(step_order);
        end.state
    }
}

/// The signature of `view` (see the module docs).
pub fn signature(view: &GraphView) -> u64 {
    let mut hasher = SignatureHasher::new();
    for node in view.nodes() {
        hasher.push(node);
    }
    hasher.finish(view.step_order())
}

/// Whether two nodes have the same structure (everything but the cost).
pub fn same_structure(a: &Node, b: &Node) -> bool {
    a.name == b.name
        && a.bytes == b.bytes
        && a.inputs == b.inputs
        && a.step_reads == b.step_reads
        && a.replayable == b.replayable
        && a.fixed_bytes == b.fixed_bytes
        && a.fixed_until == b.fixed_until
        && a.forced == b.forced
}

/// Whether `recorded`, an op as the engine records it, may be `node` of a view made from an
/// earlier step: the same structure, its constants at most the view's (a pass's view also
/// charges a shared constant to the holder that steps last: NOTE \[shared-release\] in
/// `checkpoint/budget/pass.rs`).
pub fn recorded_as(recorded: &Node, node: &Node) -> bool {
    recorded.name == node.name
        && recorded.bytes == node.bytes
        && recorded.replayable == node.replayable
        && recorded.fixed_bytes <= node.fixed_bytes
        && recorded.forced == node.forced
        && recorded.inputs == node.inputs
        && recorded.step_reads == node.step_reads
}

/// A cached plan: the view it was made for and its schedule.
#[derive(Clone, Debug)]
pub struct CachedPlan {
    /// The view's signature.
    pub signature: u64,
    /// The budget the schedule meets.
    pub budget_bytes: u64,
    /// The view the schedule was made for.
    pub view: Arc<GraphView>,
    /// The schedule.
    pub schedule: Arc<Schedule>,
    /// The schedule's chunks, made once for every step that follows it.
    pub index: Arc<ScheduleIndex>,
}

/// A small cache of plans by (signature, budget), least recently used evicted first.
#[derive(Debug)]
pub struct PlanCache {
    capacity: usize,
    // INVARIANT: at most `capacity` entries, most recently used last.
    entries: VecDeque<CachedPlan>,
}

impl PlanCache {
    /// A cache of at most `capacity` plans (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: VecDeque::new(),
        }
    }

    /// The plan for `signature` under `budget_bytes`, if cached (it becomes the most recent).
    pub fn get(&mut self, signature: u64, budget_bytes: u64) -> Option<CachedPlan> {
        let k = self
            .entries
            .iter()
            .position(|e| e.signature == signature && e.budget_bytes == budget_bytes)?;
        let entry = self.entries.remove(k)?;
        self.entries.push_back(entry.clone());
        Some(entry)
    }

    /// The most recently used plan for `budget_bytes`: what the engine follows at the start
    /// of a step, before it knows the step's graph.
    pub fn most_recent(&self, budget_bytes: u64) -> Option<&CachedPlan> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.budget_bytes == budget_bytes)
    }

    /// The most recently used plan for `budget_bytes` whose view starts with an op like
    /// `first` ([`recorded_as`]): what the engine follows from the first op of a step (a
    /// loop whose last batch is smaller has two graphs; each step picks its own).
    pub fn most_recent_starting_with(
        &self,
        budget_bytes: u64,
        first: &super::Node,
    ) -> Option<&CachedPlan> {
        self.entries.iter().rev().find(|e| {
            e.budget_bytes == budget_bytes
                && !e.view.is_empty()
                && recorded_as(first, e.view.node(0))
        })
    }

    /// The view of the most recently used plan, under any budget, whose view starts with an
    /// op like `first`: a graph run before, to plan for another budget before its step starts
    /// (NOTE \[plan-ahead\] in `checkpoint/budget/state.rs`).
    pub fn most_recent_view_starting_with(&self, first: &super::Node) -> Option<Arc<GraphView>> {
        self.entries
            .iter()
            .rev()
            .find(|e| !e.view.is_empty() && recorded_as(first, e.view.node(0)))
            .map(|e| e.view.clone())
    }

    /// The view of a cached plan of the graph with `signature`, under any budget.
    pub fn view_of(&self, signature: u64) -> Option<Arc<GraphView>> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.signature == signature)
            .map(|e| e.view.clone())
    }

    /// Caches a plan and returns it.
    pub fn insert(&mut self, view: GraphView, budget_bytes: u64, schedule: Schedule) -> CachedPlan {
        self.insert_shared(Arc::new(view), budget_bytes, schedule)
    }

    /// [`insert`](Self::insert) for a view held elsewhere too (not copied). Plans of one
    /// graph under several budgets share one view: the view of a plan already cached for
    /// the same signature is taken instead of `view`.
    pub fn insert_shared(
        &mut self,
        view: Arc<GraphView>,
        budget_bytes: u64,
        schedule: Schedule,
    ) -> CachedPlan {
        let signature = signature(&view);
        let view = self
            .entries
            .iter()
            .find(|e| e.signature == signature)
            .map_or(view, |e| e.view.clone());
        self.entries
            .retain(|e| !(e.signature == signature && e.budget_bytes == budget_bytes));
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        let entry = CachedPlan {
            signature,
            budget_bytes,
            view,
            index: Arc::new(schedule.index()),
            schedule: Arc::new(schedule),
        };
        self.entries.push_back(entry.clone());
        entry
    }

    /// The number of cached plans.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
