//! The executor: runs a training step event by event under a budget and writes the schedule.
//! Online eviction ([`Dtr`](super::Dtr)), the planned runs and the lean schedule are this one
//! machine with different victim scores.
//!
//! Forward: at each op, the values that become needed are kept (NOTE [need]): values that
//! cannot be rebuilt are *pinned* (kept until they die); rebuildable values a step reads are
//! kept unless the strategy is lean or no room can be made. Backward, per step: the values
//! the step reads that are not held, and the values needed to rebuild them, are replayed in
//! index order, each once (the *sweep*); a value the sweep still needs is locked; room for
//! each replay is made by evicting unlocked rebuildable values, lowest score first. When no
//! room can be made, the step falls back to the lean sweep (NOTE [lean-schedule]): everything
//! rebuildable is evicted and the step's reads are rebuilt from scratch, which fits any budget
//! at or above `min_feasible_budget`.
//!
//! Cost model: a step costs its sweep (the closure walk plus one scan of the candidates per
//! eviction, capped at [`SCAN_LIMIT`] candidates); the rest is O(1) per action.
//!
//! # Invariants
//! - `held_bytes` is the sum of the held values' bytes plus the constants of every node
//!   computed and not stepped; it never passes the budget after an action.
//! - `uses[v]` is zero outside a sweep; inside, it counts the sweep's remaining reads of `v`.
//! - A value is in `candidates` iff it is held and rebuildable.
//! - `evicted[v]` iff `v` is computed, rebuildable, alive and not held.

use std::borrow::Cow;
use std::sync::Arc;

use smallvec::SmallVec;

use super::analysis::{Analysis, NONE};
use super::simulate::for_each_distinct;
use super::view::rebuildable;
use super::{Action, Error, GraphView, Node, min_feasible_budget};

/// At most this many eviction candidates are scored per eviction; larger sets are sampled
/// with a rotating window (DTR's sampling), which keeps a step's cost bounded.
pub(crate) const SCAN_LIMIT: usize = 64;

/// How victims are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Strategy {
    /// NOTE [lean-schedule]: keep only pinned values; drop everything right after use.
    Lean,
    /// DTR (Kirisame et al. 2021): rebuild cost / (bytes * staleness).
    Dtr,
    /// The future is known: rebuild cost / (bytes * distance to next use ^ alpha).
    Lookahead { alpha: f64 },
}

/// What a run counted, for planning-cost checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Work {
    /// Candidates scored, closure nodes visited and actions written.
    pub(crate) units: u64,
    /// Steps that fell back to the lean sweep.
    pub(crate) fallbacks: u64,
}

pub(crate) struct Exec<'a> {
    strategy: Strategy,
    budget: u64,
    nodes: Cow<'a, [Node]>,
    /// Set once the whole graph is known (from the start for planned runs).
    view: Option<Cow<'a, GraphView>>,
    analysis: Option<Arc<Analysis>>,
    /// Whether the whole graph was known in the forward pass.
    planned: bool,
    consumers: Vec<Vec<u32>>,
    /// Recorded steps that read each value (forward, online).
    reads_known: Vec<u32>,
    need: Vec<u32>,
    held: Vec<bool>,
    offered: Vec<bool>,
    dead: Vec<bool>,
    stepped: Vec<bool>,
    uses: Vec<u32>,
    last_access: Vec<u64>,
    evicted: Vec<bool>,
    uf_parent: Vec<u32>,
    uf_size: Vec<u32>,
    uf_cost: Vec<f64>,
    candidates: Vec<u32>,
    candidate_pos: Vec<u32>,
    held_bytes: u64,
    peak: u64,
    /// A clock for staleness: one tick per op.
    now: u64,
    /// The forward ops run so far.
    computed: u32,
    /// Whether the backward pass started.
    in_backward: bool,
    /// Where the current step's actions start.
    step_start: usize,
    step_pos: usize,
    read_cursor: Vec<u32>,
    scan_offset: usize,
    out: Vec<Action>,
    cost: f64,
    work: Work,
    keep_sources: bool,
    late_keep: bool,
    /// NOTE [pin-release]: held values pinned in place of an input that was dropped.
    pinned_now: Vec<bool>,
    /// Values that cannot be rebuilt and were dropped by the plan a resumed run took over
    /// from (`Dtr::resume`): their consumers are pinned instead.
    lost: Vec<bool>,
    /// The value the sweep is about to replay, and (while its consumable inputs are
    /// scored) the consumer `distance` leaves out.
    current_replay: Option<u32>,
    replaying: Option<u32>,
    /// Release plans of the pinned inputs the current replay may take.
    releases: Vec<(u32, ReleasePlan)>,
    choices: Vec<u8>,
    free_release: bool,
    /// NOTE [decisions]: the number of options of each decision so far (planned runs).
    decisions: Vec<u8>,
    /// `Hints::keep`.
    keep: Option<Arc<[bool]>>,
}

/// What NOTE [pin-release] changes when it drops a pinned value.
#[derive(Debug)]
struct ReleasePlan {
    frontier: Vec<u32>,
    crossed: Vec<u32>,
}

/// Why room was not made.
#[derive(Debug)]
enum Room {
    /// Not enough can be evicted: a sweep falls back to the lean sweep.
    NoRoom,
    /// Dropping the value about to be kept is the cheapest way.
    Declined,
}

/// A victim candidate and its score.
#[derive(Clone, Copy, Debug)]
struct Scored {
    value: u32,
    bytes: u64,
    /// What evicting it is expected to cost (strategy-weighted rebuild cost).
    expected: f64,
    /// `expected` per byte.
    ratio: f64,
}

/// What a planned run does differently (the planner's portfolio variants and search).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hints {
    /// Whether the forward pass also keeps values no step reads (rebuild sources:
    /// checkpoints); the eviction scores then decide.
    pub(crate) keep_sources: bool,
    /// Whether the forward pass keeps a value at the last op that has it in hand (planned
    /// runs), rather than at the first that needs it.
    pub(crate) late_keep: bool,
    /// NOTE [decisions]: the option taken at each decision (0, or missing: the heuristic's).
    pub(crate) choices: Vec<u8>,
    /// NOTE [pin-release] without the weight condition (the guarantee may be lost: planned
    /// runs only, with the lean schedule as the fallback).
    pub(crate) free_release: bool,
    /// The rebuildable values the forward pass keeps (all others are dropped when they could
    /// be kept): the lower bound's held set (`bound::held_at_forward_end`).
    pub(crate) keep: Option<Arc<[bool]>>,
}

/// NOTE [decisions]: a planned run records each choice it makes: whether the forward pass
/// keeps a rebuildable value (two options: the heuristic's, and the other), and which value
/// an eviction takes first (the heuristic's, then the next lowest-ratio candidates, at most
/// [`ALTERNATIVES`] in all). Runs are deterministic, so a run given the same choices for its
/// first `k` decisions makes the same first `k` decisions; the planner's search replays a
/// view with some choices overridden.
pub(crate) const ALTERNATIVES: usize = 4;

/// The most values a pin-release walk visits (NOTE [pin-release]).
const RELEASE_WALK: usize = 64;

impl<'a> Exec<'a> {
    /// An executor for a graph recorded op by op ([`Exec::record`]).
    pub(crate) fn online(strategy: Strategy, budget: u64) -> Exec<'static> {
        Exec::with_nodes(strategy, budget, Cow::Owned(Vec::new()), None, None)
    }

    /// An executor that knows the whole graph from the start.
    pub(crate) fn planned(
        view: &'a GraphView,
        analysis: Arc<Analysis>,
        strategy: Strategy,
        budget: u64,
    ) -> Self {
        let mut exec = Exec::with_nodes(
            strategy,
            budget,
            Cow::Borrowed(view.nodes()),
            Some(Cow::Borrowed(view)),
            Some(analysis.clone()),
        );
        exec.planned = true;
        exec.need = analysis.need.clone();
        exec.consumers = analysis.consumers.clone();
        exec.grow(view.len());
        for v in 0..view.len() {
            exec.dead[v] = exec.need[v] == 0;
        }
        exec
    }

    fn with_nodes(
        strategy: Strategy,
        budget: u64,
        nodes: Cow<'a, [Node]>,
        view: Option<Cow<'a, GraphView>>,
        analysis: Option<Arc<Analysis>>,
    ) -> Self {
        Self {
            strategy,
            budget,
            nodes,
            view,
            analysis,
            planned: false,
            consumers: Vec::new(),
            reads_known: Vec::new(),
            need: Vec::new(),
            held: Vec::new(),
            offered: Vec::new(),
            dead: Vec::new(),
            stepped: Vec::new(),
            uses: Vec::new(),
            last_access: Vec::new(),
            evicted: Vec::new(),
            uf_parent: Vec::new(),
            uf_size: Vec::new(),
            uf_cost: Vec::new(),
            candidates: Vec::new(),
            candidate_pos: Vec::new(),
            held_bytes: 0,
            peak: 0,
            now: 0,
            computed: 0,
            in_backward: false,
            step_start: 0,
            step_pos: 0,
            read_cursor: Vec::new(),
            scan_offset: 0,
            out: Vec::new(),
            cost: 0.0,
            work: Work::default(),
            keep_sources: false,
            late_keep: false,
            pinned_now: Vec::new(),
            lost: Vec::new(),
            current_replay: None,
            replaying: None,
            releases: Vec::new(),
            choices: Vec::new(),
            free_release: false,
            decisions: Vec::new(),
            keep: None,
        }
    }

    fn grow(&mut self, n: usize) {
        let len = self.held.len();
        if n <= len {
            return;
        }
        self.consumers.resize(n, Vec::new());
        self.reads_known.resize(n, 0);
        self.need.resize(n, 0);
        self.held.resize(n, false);
        self.offered.resize(n, false);
        self.dead.resize(n, false);
        self.stepped.resize(n, false);
        self.uses.resize(n, 0);
        self.last_access.resize(n, 0);
        self.evicted.resize(n, false);
        self.uf_parent.extend(len as u32..n as u32);
        self.uf_size.resize(n, 1);
        self.uf_cost.resize(n, 0.0);
        self.candidate_pos.resize(n, NONE);
        self.read_cursor.resize(n, 0);
        self.pinned_now.resize(n, false);
        self.lost.resize(n, false);
    }

    pub(crate) fn actions(&self) -> &[Action] {
        &self.out
    }

    /// The decisions recorded so far (NOTE [decisions]).
    pub(crate) fn take_decisions(&mut self) -> Decisions {
        std::mem::take(&mut self.decisions)
    }

    pub(crate) fn into_actions(self) -> Vec<Action> {
        self.out
    }

    pub(crate) fn recompute_cost(&self) -> f64 {
        self.cost
    }

    pub(crate) fn peak(&self) -> u64 {
        self.peak
    }

    pub(crate) fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    pub(crate) fn work(&self) -> Work {
        self.work
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    fn node(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    /// Whether value `i` may be evicted and rebuilt now: statically rebuildable, and not
    /// pinned in place of an input (NOTE [pin-release]).
    fn rebuildable(&self, i: u32) -> bool {
        rebuildable(self.node(i)) && !self.pinned_now[i as usize]
    }

    /// The distinct inputs of `x` that only its replay still needs and that may be dropped:
    /// rebuildable ones, and pinned ones that are never needed again once `x` is held (NOTE
    /// [pin-release]; their plans are kept in `releases` for `replay`).
    fn consumable_inputs(&mut self, x: u32) -> Vec<u32> {
        let mut inputs = Vec::new();
        for_each_distinct(&self.nodes[x as usize].inputs, |u| inputs.push(u));
        inputs.retain(|&u| self.uses[u as usize] == 1);
        self.releases.clear();
        let mut consumable = Vec::new();
        for u in inputs {
            if self.rebuildable(u) {
                consumable.push(u);
            } else if let Some(plan) = self.release_plan(u, Some(x)) {
                self.releases.push((u, plan));
                consumable.push(u);
            }
        }
        // A value pinned by one of these releases stays held.
        consumable.retain(|&u| {
            !self
                .releases
                .iter()
                .any(|(_, plan)| plan.frontier.contains(&u))
        });
        self.releases.retain(|(u, _)| consumable.contains(u));
        consumable
    }

    // ---- forward -------------------------------------------------------------------------

    /// Appends `node` (online) and counts what it needs, without running it.
    fn append(&mut self, node: Node) -> Result<u32, Error> {
        let j = self.nodes.len();
        let invalid = |reason: String| Error::InvalidView {
            node: Some(j as u32),
            reason,
        };
        if let Some(&u) = node.inputs.iter().find(|&&u| u as usize >= j) {
            return Err(invalid(format!("input {u} is not an earlier node")));
        }
        if let Some(&u) = node.step_reads.iter().find(|&&u| u as usize > j) {
            return Err(invalid(format!("its step reads node {u}, a later node")));
        }
        if !node.cost.is_finite() || node.cost < 0.0 {
            return Err(invalid(format!(
                "cost {} is not a finite cost >= 0",
                node.cost
            )));
        }
        if node.forced == Some(super::Forced::Recompute) && !node.replayable {
            return Err(invalid(
                "it is forced to Recompute but cannot be replayed".into(),
            ));
        }
        self.nodes.to_mut().push(node);
        self.grow(j + 1);
        let j = j as u32;
        let node = &self.nodes[j as usize];
        for_each_distinct(&node.inputs, |u| self.consumers[u as usize].push(j));
        let replayable_consumer = rebuildable(node);
        for_each_distinct(&node.step_reads, |r| {
            self.reads_known[r as usize] += 1;
            self.need[r as usize] += 1;
        });
        if replayable_consumer {
            for_each_distinct(&node.inputs, |u| self.need[u as usize] += 1);
        }
        Ok(j)
    }

    /// Appends `node` (online) and runs its forward op.
    pub(crate) fn record(&mut self, node: Node) -> Result<u32, Error> {
        let j = self.append(node)?;
        self.compute(j)?;
        Ok(j)
    }

    /// After [`Exec::adopt`]ing a prefix: a value that cannot be rebuilt, may be needed and
    /// is not held is *lost* for now: the plan either dropped it (NOTE [pin-release]: then
    /// every consumer that may need it is computed, and held or kept when an op next has it
    /// in hand) or keeps it later, when an op has it in hand (then it is kept again here,
    /// and is no longer lost). The held values that depend on it through values not held are
    /// pinned, and so is a value kept while one of its inputs is lost.
    pub(crate) fn settle_lost(&mut self) {
        let mut stack: Vec<u32> = Vec::new();
        for u in 0..self.nodes.len() as u32 {
            if !rebuildable(self.node(u)) && !self.held[u as usize] && self.need[u as usize] > 0 {
                self.lost[u as usize] = true;
                stack.push(u);
            }
        }
        let mut seen = vec![false; self.nodes.len()];
        while let Some(u) = stack.pop() {
            for k in 0..self.consumers[u as usize].len() {
                let w = self.consumers[u as usize][k];
                if !rebuildable(self.node(w)) || std::mem::replace(&mut seen[w as usize], true) {
                    continue;
                }
                if self.held[w as usize] {
                    self.pinned_now[w as usize] = true;
                    self.drop_candidate(w);
                } else {
                    stack.push(w);
                }
            }
        }
    }

    /// Appends `node` (online) as already computed, with its value held or not, without
    /// deciding anything: the state another plan left (see `Dtr::resume`).
    pub(crate) fn adopt(&mut self, node: Node, held: bool) -> Result<u32, Error> {
        let j = self.append(node)?;
        self.computed = j + 1;
        self.now += 1;
        self.held_bytes += self.node(j).fixed_bytes;
        self.peak = self.peak.max(self.held_bytes);
        if held {
            self.offered[j as usize] = true;
            self.hold(j);
        } else {
            self.mark_evicted(j);
        }
        Ok(j)
    }

    /// Runs forward op `j` (all earlier ops ran).
    pub(crate) fn compute(&mut self, j: u32) -> Result<(), Error> {
        debug_assert_eq!(
            j, self.computed,
            "remat internal error: forward ops in order"
        );
        self.computed = j + 1;
        self.now += 1;
        let fixed = self.node(j).fixed_bytes;
        if fixed > 0 && self.make_room(fixed, &[], None).is_err() {
            return Err(self.infeasible(fixed));
        }
        self.out.push(Action::Compute(j));
        self.work.units += 1;
        self.held_bytes += fixed;
        self.peak = self.peak.max(self.held_bytes);
        let mut in_hand: Vec<u32> = Vec::new();
        let node = self.node(j);
        for_each_distinct(&node.inputs, |u| in_hand.push(u));
        for &r in &node.step_reads {
            if !in_hand.contains(&r) {
                in_hand.push(r);
            }
        }
        if !in_hand.contains(&j) {
            in_hand.push(j);
        }
        for &u in &in_hand {
            self.last_access[u as usize] = self.now;
        }
        for &u in &in_hand {
            if self.offered[u as usize] {
                continue;
            }
            if let Some(analysis) = &self.analysis
                && self.planned
                && self.late_keep
                && analysis.last_in_hand[u as usize] != j
            {
                // Planned: keep a value at the last forward op that has it in hand.
                continue;
            }
            if self.planned && self.late_keep {
                // Decided now, whatever the decision.
                self.offered[u as usize] = true;
            }
            if self.planned && !rebuildable(self.node(u)) && self.release_pinned(u, None) {
                continue;
            }
            if self.pinned_now[u as usize] {
                // Pinned in place of a value that was let go (NOTE [pin-release]), unless
                // nothing needs it after all.
                self.offered[u as usize] = true;
                if self.dead[u as usize] {
                    continue;
                }
                let bytes = self.node(u).bytes;
                if self.make_room(bytes, &[], None).is_err() {
                    return Err(self.infeasible(bytes));
                }
                self.out.push(Action::Keep(u));
                self.unmark_evicted(u);
                self.hold(u);
                continue;
            }
            let mut keep = self.wants_keep(u);
            if self.planned && self.may_keep(u) {
                // NOTE [decisions]: keep it or not, the other way round if told so.
                self.offered[u as usize] = true;
                keep ^= self.decide(2) == 1;
            }
            if !keep {
                continue;
            }
            self.offered[u as usize] = true;
            let bytes = self.node(u).bytes;
            if self.planned && self.rebuildable(u) && self.release_above_assuming(u, Some(u)) {
                // Keeping `u` let a pinned input go, which made room for it.
                self.out.push(Action::Keep(u));
                self.unmark_evicted(u);
                self.hold(u);
                continue;
            }
            // A value whose input is lost (`settle_lost`) cannot be declined: it could not be
            // rebuilt.
            let input_lost = self.nodes[u as usize]
                .inputs
                .iter()
                .any(|&x| self.lost[x as usize]);
            let newcomer = (self.rebuildable(u) && !input_lost).then_some(u);
            match self.make_room(bytes, &[], newcomer) {
                Ok(_) => {
                    self.out.push(Action::Keep(u));
                    self.unmark_evicted(u);
                    self.hold(u);
                }
                Err(Room::Declined) => {}
                Err(Room::NoRoom) => return Err(self.infeasible(bytes)),
            }
        }
        if !self.held[j as usize] {
            self.mark_evicted(j);
        }
        if self.planned {
            self.release_above(j);
            for u in in_hand {
                if self.held[u as usize] {
                    self.release_above(u);
                }
                self.try_release(u);
            }
        }
        Ok(())
    }

    /// Whether the forward pass may keep `u` at all (a choice, not a need).
    fn may_keep(&self, u: u32) -> bool {
        let node = self.node(u);
        self.strategy != Strategy::Lean
            && rebuildable(node)
            && node.forced != Some(super::Forced::Recompute)
            && self.need[u as usize] > 0
    }

    /// Whether value `u`, in hand in the forward pass, should be kept now.
    fn wants_keep(&self, u: u32) -> bool {
        let node = self.node(u);
        if node.forced == Some(super::Forced::Recompute) || self.need[u as usize] == 0 {
            return false;
        }
        if !rebuildable(node) || node.inputs.iter().any(|&x| self.lost[x as usize]) {
            // Cannot be rebuilt (`settle_lost`: an input is lost).
            return true;
        }
        if self.strategy == Strategy::Lean {
            return false;
        }
        if let Some(keep) = &self.keep {
            return keep[u as usize];
        }
        let read_by_a_step = match &self.analysis {
            Some(a) if self.planned => !a.read_positions[u as usize].is_empty(),
            _ => self.reads_known[u as usize] > 0,
        };
        read_by_a_step || self.keep_sources
    }

    /// NOTE [decisions]: records a decision of `options` options; returns the one to take.
    fn decide(&mut self, options: usize) -> usize {
        if !self.planned || options < 2 {
            return 0;
        }
        let k = self.decisions.len();
        self.decisions.push(options.min(u8::MAX as usize) as u8);
        let choice = self.choices.get(k).copied().unwrap_or(0) as usize;
        if choice < options { choice } else { 0 }
    }

    /// Applies the planner's hints (planned runs only).
    pub(crate) fn set_hints(&mut self, hints: &Hints) {
        self.keep_sources = hints.keep_sources;
        self.late_keep = hints.late_keep;
        self.choices = hints.choices.clone();
        self.free_release = hints.free_release;
        self.keep = hints.keep.clone();
    }

    /// The error for a budget that cannot hold what must be held now plus `needed` bytes.
    fn infeasible(&self, needed: u64) -> Error {
        match &self.view {
            Some(view) => Error::Infeasible {
                budget_bytes: self.budget,
                min_budget_bytes: min_feasible_budget(view),
                lower_bound: false,
            },
            None => {
                let pinned: u64 = (0..self.nodes.len() as u32)
                    .filter(|&v| self.held[v as usize] && !self.rebuildable(v))
                    .map(|v| self.node(v).bytes)
                    .sum();
                let fixed: u64 = self
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !self.stepped[*i])
                    .map(|(_, n)| n.fixed_bytes)
                    .sum();
                Error::Infeasible {
                    budget_bytes: self.budget,
                    min_budget_bytes: pinned + fixed + needed,
                    lower_bound: true,
                }
            }
        }
    }

    // ---- backward ------------------------------------------------------------------------

    /// Starts the backward pass of an online run: the whole graph is known now.
    pub(crate) fn begin_backward(&mut self, step_order: Vec<u32>) -> Result<(), Error> {
        if self.view.is_none() {
            let view = GraphView::with_step_order(self.nodes.to_vec(), step_order)?;
            let analysis = Arc::new(Analysis::new(&view));
            self.view = Some(Cow::Owned(view));
            self.analysis = Some(analysis);
        }
        let analysis = self
            .analysis
            .clone()
            .expect("remat internal error: analysis is set");
        self.in_backward = true;
        if !self.planned {
            // Online, the forward pass counted what might be needed; now it is known. A
            // pinned value will never be rebuilt: its inputs do not count it; a lost value
            // is never read again.
            self.need = analysis.need.clone();
            for w in 0..self.nodes.len() {
                if self.lost[w] {
                    // Never read again (`settle_lost`).
                    self.dead[w] = true;
                }
                let never_rebuilt = self.pinned_now[w] || self.lost[w];
                if never_rebuilt && analysis.need[w] > 0 && rebuildable(&self.nodes[w]) {
                    for k in 0..self.nodes[w].inputs.len() {
                        let x = self.nodes[w].inputs[k];
                        if !self.nodes[w].inputs[..k].contains(&x) {
                            self.need[x as usize] -= 1;
                        }
                    }
                }
            }
        }
        let mut dying = Vec::new();
        for v in 0..self.nodes.len() as u32 {
            if self.need[v as usize] > 0 || self.dead[v as usize] {
                continue;
            }
            if analysis.need[v as usize] > 0 {
                // Needed, but only by values that will never be rebuilt: its inputs count
                // it, so it dies the usual way.
                dying.push(v);
            } else {
                // Never needed: nothing counts it.
                self.dead[v as usize] = true;
                if self.held[v as usize] {
                    self.out.push(Action::Free(v));
                    self.release(v);
                }
                self.unmark_evicted(v);
            }
        }
        self.die(dying);
        for v in 0..self.nodes.len() as u32 {
            self.try_release(v);
        }
        Ok(())
    }

    /// Runs the next backward step.
    pub(crate) fn step(&mut self) -> Result<(), Error> {
        let view = self
            .view
            .as_ref()
            .expect("remat internal error: backward runs on a known graph");
        let s = *view
            .step_order()
            .get(self.step_pos)
            .expect("remat internal error: a step after the last one");
        let mut reads: Vec<u32> = Vec::new();
        for_each_distinct(&self.node(s).step_reads, |r| reads.push(r));
        self.now += 1;
        self.step_start = self.out.len();
        let fell_back = match self.strategy {
            Strategy::Lean => true,
            _ => self.sweep(&reads).is_err(),
        };
        if fell_back {
            if self.strategy != Strategy::Lean {
                self.work.fallbacks += 1;
            }
            self.lean_sweep(&reads)?;
        }
        self.out.push(Action::Step(s));
        self.work.units += 1;
        self.stepped[s as usize] = true;
        self.held_bytes -= self.node(s).fixed_bytes;
        let mut dying = Vec::new();
        for &r in &reads {
            self.uses[r as usize] -= 1;
            self.last_access[r as usize] = self.now;
            self.need[r as usize] -= 1;
            if self.need[r as usize] == 0 {
                dying.push(r);
            }
        }
        if self.need[s as usize] == 0 && !self.dead[s as usize] {
            dying.push(s);
        }
        self.die(dying);
        self.step_pos += 1;
        let start = self.step_start;
        let replayed: Vec<u32> = self.out[start..]
            .iter()
            .filter_map(|a| match a {
                Action::Replay(x) => Some(*x),
                _ => None,
            })
            .collect();
        for &r in &reads {
            self.try_release(r);
        }
        for x in replayed {
            if self.held[x as usize] {
                self.release_above(x);
            }
        }
        if self.strategy == Strategy::Lean {
            for &r in &reads {
                if self.held[r as usize] && self.rebuildable(r) {
                    self.out.push(Action::Free(r));
                    self.release(r);
                    self.mark_evicted(r);
                }
            }
        }
        Ok(())
    }

    /// Frees the values in `dying` and everything that dies with them (NOTE [need]).
    fn die(&mut self, mut dying: Vec<u32>) {
        while let Some(v) = dying.pop() {
            if std::mem::replace(&mut self.dead[v as usize], true) {
                continue;
            }
            if self.held[v as usize] {
                self.out.push(Action::Free(v));
                self.release(v);
            }
            self.unmark_evicted(v);
            if self.rebuildable(v) {
                let node = &self.nodes[v as usize];
                for_each_distinct(&node.inputs, |u| {
                    self.need[u as usize] -= 1;
                    if self.need[u as usize] == 0 {
                        dying.push(u);
                    }
                });
            }
        }
    }

    /// The values the sweep must replay to make `reads` held: not held, reached from the
    /// reads through values that are not held; ascending.
    fn closure(&mut self, reads: &[u32]) -> Vec<u32> {
        let mut closure = Vec::new();
        let mut stack: Vec<u32> = reads
            .iter()
            .copied()
            .filter(|&r| !self.held[r as usize])
            .collect();
        while let Some(v) = stack.pop() {
            self.work.units += 1;
            if self.held[v as usize] || self.uses[v as usize] == NONE {
                continue;
            }
            assert!(
                self.rebuildable(v) && !self.dead[v as usize] && !self.stepped[v as usize],
                "remat internal error: value {v} is needed but can no longer be rebuilt \
                 (a pinned value was dropped while needed)"
            );
            // Mark as visited with a sentinel; reset below.
            self.uses[v as usize] = NONE;
            closure.push(v);
            for &u in &self.nodes[v as usize].inputs {
                if !self.held[u as usize] && self.uses[u as usize] != NONE {
                    stack.push(u);
                }
            }
        }
        for &v in &closure {
            self.uses[v as usize] = 0;
        }
        closure.sort_unstable();
        closure
    }

    /// Locks the sweep's reads: every input of a closure value, and the step's reads.
    fn lock(&mut self, closure: &[u32], reads: &[u32]) {
        for &x in closure {
            let node = &self.nodes[x as usize];
            for_each_distinct(&node.inputs, |u| self.uses[u as usize] += 1);
        }
        for &r in reads {
            self.uses[r as usize] += 1;
        }
    }

    /// The sweep with evictions; `Err` when no room can be made (locks are then released).
    fn sweep(&mut self, reads: &[u32]) -> Result<(), Room> {
        let closure = self.closure(reads);
        self.lock(&closure, reads);
        self.replay_closure(&closure, reads, false)
    }

    /// Replays `closure` in order. Room for each replay is made by evicting unlocked values
    /// and the inputs only it still needs, lowest score first; `eager` (the lean schedule)
    /// takes every such input instead. `Err` when no room can be made (the locks of what is
    /// left are released).
    fn replay_closure(&mut self, closure: &[u32], reads: &[u32], eager: bool) -> Result<(), Room> {
        for (k, &x) in closure.iter().enumerate() {
            let consumable = self.consumable_inputs(x);
            let bytes = self.node(x).bytes;
            if eager {
                let freed: u64 = consumable.iter().map(|&u| self.node(u).bytes).sum();
                if self.held_bytes - freed + bytes > self.budget {
                    self.releases.clear();
                    self.unlock(&closure[k..], reads);
                    return Err(Room::NoRoom);
                }
                self.replay(x, &consumable);
                continue;
            }
            // The frontiers of the releases the replay may make stay held meanwhile.
            let frontier: Vec<u32> = self
                .releases
                .iter()
                .flat_map(|(_, plan)| plan.frontier.iter().copied())
                .filter(|&w| w != x)
                .collect();
            for &w in &frontier {
                self.uses[w as usize] += 1;
            }
            self.current_replay = Some(x);
            let room = self.make_room(bytes, &consumable, None);
            self.current_replay = None;
            for &w in &frontier {
                self.uses[w as usize] -= 1;
            }
            match room {
                Ok(taken) => self.replay(x, &taken),
                Err(_) => {
                    self.releases.clear();
                    self.unlock(&closure[k..], reads);
                    return Err(Room::NoRoom);
                }
            }
        }
        Ok(())
    }

    /// Releases the locks a sweep still holds for the closure values not replayed yet.
    fn unlock(&mut self, rest: &[u32], reads: &[u32]) {
        for &x in rest {
            let node = &self.nodes[x as usize];
            for_each_distinct(&node.inputs, |u| self.uses[u as usize] -= 1);
        }
        for &r in reads {
            self.uses[r as usize] -= 1;
        }
    }

    /// NOTE [lean-schedule]: evicts everything rebuildable, then rebuilds `reads` from scratch
    /// (dropping each value after its last use when the strategy is lean).
    fn lean_sweep(&mut self, reads: &[u32]) -> Result<(), Error> {
        let held: Vec<u32> = self.candidates.clone();
        for v in held {
            self.out.push(Action::Free(v));
            self.release(v);
            self.mark_evicted(v);
        }
        let closure = self.closure(reads);
        self.lock(&closure, reads);
        // Beyond what the lean schedule holds, everything is evictable: making room by score
        // fits wherever taking every input does, and keeps what later steps read if it can.
        let eager = self.strategy == Strategy::Lean;
        self.replay_closure(&closure, reads, eager)
            .map_err(|_| self.infeasible(0))
    }

    /// Replays `x` (its inputs are held and locked); `taken` are inputs it consumes.
    fn replay(&mut self, x: u32, taken: &[u32]) {
        self.now += 1;
        self.out.push(Action::Replay(x));
        self.work.units += 1;
        self.cost += self.node(x).cost;
        for &u in taken {
            self.out.push(Action::Free(u));
            self.release(u);
            self.mark_evicted(u);
        }
        self.unmark_evicted(x);
        self.hold(x);
        let releases = std::mem::take(&mut self.releases);
        for (u, plan) in releases {
            if taken.contains(&u) {
                self.apply_release(u, plan);
            }
        }
        let now = self.now;
        let node = &self.nodes[x as usize];
        for_each_distinct(&node.inputs, |u| {
            self.uses[u as usize] -= 1;
            self.last_access[u as usize] = now;
        });
    }

    /// NOTE [pin-release]: a held value that cannot be rebuilt stays only because
    /// rebuildable descendants might have to be replayed from it. Once no step will read it
    /// again, follow its rebuildable consumers through the values that are not held (no
    /// later step may read those either): if every path ends at a computed, held value (the
    /// *frontier*), the value is dropped, the frontier is pinned in its place (never evicted
    /// again) and the values crossed are never needed again. With `free_release` unset the
    /// frontier must weigh no more than the value: the pinned bytes never grow, so the lean
    /// fallback still fits (NOTE [lean-schedule]). Only when the whole graph is known
    /// (planned runs, or any backward pass); walks are bounded by [`RELEASE_WALK`].
    fn try_release(&mut self, u: u32) {
        self.release_assuming(u, None);
    }

    /// [`Exec::try_release`], counting `assume` (a value about to be kept in the forward
    /// pass) as held; then the weight condition always applies, so that dropping the value
    /// makes room for the one kept. Returns whether the value was dropped.
    fn release_assuming(&mut self, u: u32, assume: Option<u32>) -> bool {
        self.held[u as usize] && self.release_pinned(u, assume)
    }

    /// The walk and the release of NOTE [pin-release] for `u`, held or not: a pinned value
    /// in hand at its last forward moment and not kept yet is simply never kept.
    fn release_pinned(&mut self, u: u32, assume: Option<u32>) -> bool {
        match self.release_plan(u, assume) {
            Some(plan) => {
                if self.held[u as usize] {
                    self.out.push(Action::Free(u));
                    self.release(u);
                }
                self.apply_release(u, plan);
                true
            }
            None => false,
        }
    }

    /// The walk of NOTE [pin-release] for `u`: the frontier and the values crossed, if `u`
    /// may be dropped (nothing changes).
    fn release_plan(&mut self, u: u32, assume: Option<u32>) -> Option<ReleasePlan> {
        if self.dead[u as usize] || rebuildable(self.node(u)) || self.pinned_now[u as usize] {
            return None;
        }
        if self.view.is_none() || (!self.planned && !self.in_backward) {
            return None;
        }
        if self.read_later(u) {
            return None;
        }
        let analysis = self
            .analysis
            .clone()
            .expect("remat internal error: analysis is set");
        let mut frontier: Vec<u32> = Vec::new();
        let mut crossed: Vec<u32> = Vec::new();
        let mut stack: Vec<u32> = analysis.consumers[u as usize].clone();
        let mut visits = 0;
        while let Some(w) = stack.pop() {
            if self.dead[w as usize]
                || !self.rebuildable(w)
                || frontier.contains(&w)
                || crossed.contains(&w)
            {
                continue;
            }
            visits += 1;
            if visits > RELEASE_WALK || w >= self.computed {
                return None;
            }
            // In the forward pass, a value still to be decided (at this op or a later one
            // that has it in hand) can still be kept.
            let kept_later = self.late_keep
                && !self.in_backward
                && !self.offered[w as usize]
                && self.node(w).forced != Some(super::Forced::Recompute)
                && analysis.last_in_hand[w as usize] + 1 >= self.computed;
            if self.held[w as usize] || Some(w) == assume || kept_later {
                frontier.push(w);
                continue;
            }
            if self.read_later(w) {
                return None;
            }
            crossed.push(w);
            stack.extend_from_slice(&analysis.consumers[w as usize]);
        }
        let pinned: u64 = frontier.iter().map(|&w| self.node(w).bytes).sum();
        // A value kept in the forward pass in place of `u` must find room in what `u` frees.
        let weighed = !self.free_release
            || (!self.in_backward && assume.is_some_and(|a| frontier.contains(&a)));
        if weighed && pinned > self.node(u).bytes {
            return None;
        }
        Some(ReleasePlan { frontier, crossed })
    }

    /// Applies a release of `u` (already freed if it was held): `u` and the values crossed
    /// are never needed again, the frontier is pinned.
    fn apply_release(&mut self, u: u32, plan: ReleasePlan) {
        let ReleasePlan { frontier, crossed } = plan;
        debug_assert!(
            !self.held[u as usize],
            "remat internal error: release of a held value"
        );
        self.dead[u as usize] = true;
        self.offered[u as usize] = true;
        // Pin the frontier first: a value crossed may be the last consumer of a frontier
        // value, which must then die pinned (its inputs counted down once, here).
        let mut dying = Vec::new();
        for w in frontier {
            if self.dead[w as usize] {
                continue;
            }
            if std::mem::replace(&mut self.pinned_now[w as usize], true) {
                // Already pinned by an earlier release: its inputs were counted down then.
                continue;
            }
            self.drop_candidate(w);
            for k in 0..self.nodes[w as usize].inputs.len() {
                let x = self.nodes[w as usize].inputs[k];
                if self.nodes[w as usize].inputs[..k].contains(&x) || self.dead[x as usize] {
                    continue;
                }
                self.need[x as usize] -= 1;
                if self.need[x as usize] == 0 {
                    dying.push(x);
                }
            }
        }
        dying.extend(crossed);
        self.die(dying);
    }

    /// Whether a step still to run reads `v`.
    fn read_later(&mut self, v: u32) -> bool {
        if self.in_backward {
            self.next_read(v).is_some()
        } else {
            self.analysis
                .as_ref()
                .is_some_and(|a| !a.read_positions[v as usize].is_empty())
        }
    }

    /// Tries NOTE [pin-release] for the pinned values above `v` (reached through its inputs
    /// and values that are not held), after `v` became held or was computed.
    fn release_above(&mut self, v: u32) {
        self.release_above_assuming(v, None);
    }

    /// [`Exec::release_above`] with [`Exec::release_assuming`]'s `assume` = `v`, when `v`
    /// is about to be kept: returns whether `v` ended up pinned (it must then be kept).
    fn release_above_assuming(&mut self, v: u32, assume: Option<u32>) -> bool {
        let mut stack: Vec<u32> = self.nodes[v as usize].inputs.clone();
        let mut seen: Vec<u32> = Vec::new();
        while let Some(x) = stack.pop() {
            if seen.contains(&x) || seen.len() >= RELEASE_WALK {
                continue;
            }
            seen.push(x);
            if self.held[x as usize] {
                if !rebuildable(self.node(x)) && !self.pinned_now[x as usize] {
                    self.release_assuming(x, assume);
                }
            } else if !self.dead[x as usize] && self.rebuildable(x) {
                stack.extend_from_slice(&self.nodes[x as usize].inputs);
            }
        }
        assume.is_some_and(|a| self.pinned_now[a as usize])
    }

    // ---- holding and evicting ------------------------------------------------------------

    fn hold(&mut self, v: u32) {
        debug_assert!(
            !self.held[v as usize],
            "remat internal error: {v} held twice"
        );
        // `settle_lost`: a lost value in hand again is no longer lost; a value whose input
        // is lost can never be rebuilt.
        self.lost[v as usize] = false;
        if !self.pinned_now[v as usize]
            && self.nodes[v as usize]
                .inputs
                .iter()
                .any(|&x| self.lost[x as usize])
        {
            self.pinned_now[v as usize] = true;
        }
        self.held[v as usize] = true;
        self.held_bytes += self.node(v).bytes;
        self.peak = self.peak.max(self.held_bytes);
        self.last_access[v as usize] = self.now;
        if self.rebuildable(v) {
            self.candidate_pos[v as usize] = self.candidates.len() as u32;
            self.candidates.push(v);
        }
    }

    fn release(&mut self, v: u32) {
        debug_assert!(
            self.held[v as usize],
            "remat internal error: {v} is not held"
        );
        self.held[v as usize] = false;
        self.held_bytes -= self.node(v).bytes;
        self.drop_candidate(v);
    }

    /// Removes `v` from the eviction candidates, if it is one.
    fn drop_candidate(&mut self, v: u32) {
        let pos = self.candidate_pos[v as usize];
        if pos != NONE {
            let last = self
                .candidates
                .pop()
                .expect("remat internal error: candidate list");
            if last != v {
                self.candidates[pos as usize] = last;
                self.candidate_pos[last as usize] = pos;
            }
            self.candidate_pos[v as usize] = NONE;
        }
    }

    /// Evicts unlocked values until `bytes` more fit; values in `consumable` (inputs of the
    /// op about to run) may be chosen too: they are returned, to be taken by that op, and
    /// freed after it. `newcomer`, a value about to be kept, competes with the held values:
    /// `Err(Declined)` when dropping it is the cheapest way to make room.
    ///
    /// The victims: the lowest cost per byte until the deficit is covered, replaced by a
    /// single value that covers it alone if that costs less, then without the members the
    /// others make unnecessary (dearest first).
    fn make_room(
        &mut self,
        bytes: u64,
        consumable: &[u32],
        newcomer: Option<u32>,
    ) -> Result<Vec<u32>, Room> {
        let total = self.held_bytes + bytes;
        if total <= self.budget {
            return Ok(Vec::new());
        }
        let deficit = total - self.budget;
        let mut scored: Vec<Scored> = Vec::new();
        let n = self.candidates.len();
        let (start, len) = if n <= SCAN_LIMIT {
            (0, n)
        } else {
            self.scan_offset = (self.scan_offset + SCAN_LIMIT) % n;
            (self.scan_offset, SCAN_LIMIT)
        };
        for k in 0..len {
            let v = self.candidates[(start + k) % n];
            if self.uses[v as usize] == 0 {
                self.score_into(v, &mut scored);
            }
        }
        for &v in newcomer.as_slice() {
            self.score_into(v, &mut scored);
        }
        // An input the op about to run takes: the op's output is held afterwards, so the
        // input is needed only by its other consumers.
        self.replaying = self.replaying.or(self.current_replay);
        for &v in consumable {
            self.score_into(v, &mut scored);
        }
        self.replaying = None;
        let total_bytes: u64 = scored.iter().map(|c| c.bytes).sum();
        if total_bytes < deficit {
            return Err(Room::NoRoom);
        }
        // One pick at a time: by default the lowest ratio, or a single value that covers
        // the rest alone when that is cheaper than filling by ratio; NOTE [decisions]: the
        // search may take another low-ratio candidate instead.
        let by_ratio =
            |a: &Scored, b: &Scored| a.ratio.total_cmp(&b.ratio).then(a.value.cmp(&b.value));
        let mut chosen: Vec<Scored> = Vec::new();
        let mut covered = 0u64;
        while covered < deficit {
            let rest = deficit - covered;
            // The lowest-ratio candidates, best first.
            let mut top: SmallVec<[usize; ALTERNATIVES]> = SmallVec::new();
            for k in 0..scored.len() {
                let at = top.partition_point(|&t| by_ratio(&scored[t], &scored[k]).is_lt());
                if at < ALTERNATIVES {
                    if top.len() == ALTERNATIVES {
                        top.pop();
                    }
                    top.insert(at, k);
                }
            }
            let fill = if scored[top[0]].bytes >= rest {
                scored[top[0]].expected
            } else {
                let mut order: Vec<&Scored> = scored.iter().collect();
                order.sort_by(|a, b| by_ratio(a, b));
                let mut filled = 0u64;
                let mut fill = 0.0;
                for c in order {
                    if filled >= rest {
                        break;
                    }
                    filled += c.bytes;
                    fill += c.expected;
                }
                fill
            };
            let single = scored
                .iter()
                .enumerate()
                .filter(|(_, c)| c.bytes >= rest)
                .min_by(|(_, a), (_, b)| {
                    a.expected
                        .total_cmp(&b.expected)
                        .then(a.value.cmp(&b.value))
                })
                .filter(|(_, c)| c.expected < fill)
                .map(|(k, _)| k);
            let mut options: SmallVec<[usize; ALTERNATIVES]> = SmallVec::new();
            options.push(single.unwrap_or(top[0]));
            for &k in &top {
                if options.len() < ALTERNATIVES && !options.contains(&k) {
                    options.push(k);
                }
            }
            let pick = scored.swap_remove(options[self.decide(options.len())]);
            covered += pick.bytes;
            chosen.push(pick);
        }
        // Drop the picks the others make unnecessary, dearest first.
        chosen.sort_by(|a, b| {
            b.expected
                .total_cmp(&a.expected)
                .then(a.value.cmp(&b.value))
        });
        let mut k = 0;
        while k < chosen.len() {
            if covered - chosen[k].bytes >= deficit {
                covered -= chosen[k].bytes;
                chosen.remove(k);
            } else {
                k += 1;
            }
        }
        if newcomer.is_some_and(|u| chosen.iter().any(|c| c.value == u)) {
            return Err(Room::Declined);
        }
        let mut taken = Vec::new();
        chosen.sort_by_key(|c| c.value);
        for c in chosen {
            if consumable.contains(&c.value) {
                taken.push(c.value);
            } else {
                self.out.push(Action::Free(c.value));
                self.release(c.value);
                self.mark_evicted(c.value);
            }
        }
        Ok(taken)
    }

    /// Scores `v` as a victim into `out` (values of no bytes free nothing: skipped).
    fn score_into(&mut self, v: u32, out: &mut Vec<Scored>) {
        self.work.units += 1;
        let bytes = self.node(v).bytes;
        if bytes == 0 {
            return;
        }
        let rebuild = self.rebuild_cost(v);
        let released = self.releases.iter().any(|(u, _)| *u == v);
        let expected = if released {
            // Never needed again once taken.
            0.0
        } else {
            match self.strategy {
                Strategy::Lean => 0.0,
                Strategy::Dtr => {
                    let staleness = (self.now - self.last_access[v as usize] + 1) as f64;
                    rebuild / staleness
                }
                Strategy::Lookahead { alpha } => {
                    let distance = self.distance(v) as f64;
                    rebuild / distance.powf(alpha)
                }
            }
        };
        out.push(Scored {
            value: v,
            bytes,
            expected,
            ratio: expected / bytes as f64,
        });
    }

    /// The cost of rebuilding `v`: its own plus its evicted ancestors' (DTR's equivalence
    /// classes: evicted values joined through their edges, never split).
    fn rebuild_cost(&mut self, v: u32) -> f64 {
        let mut cost = self.node(v).cost;
        let mut roots: SmallVec<[u32; 4]> = SmallVec::new();
        for k in 0..self.nodes[v as usize].inputs.len() {
            let u = self.nodes[v as usize].inputs[k];
            if self.evicted[u as usize] {
                let root = self.find(u);
                if !roots.contains(&root) {
                    roots.push(root);
                    cost += self.uf_cost[root as usize].max(0.0);
                }
            }
        }
        cost
    }

    /// Time until `v` is read next (by a step, or by the replay of a consumer that is not
    /// held); `2n + 1` when no such read is planned.
    fn distance(&mut self, v: u32) -> u64 {
        let n = self.nodes.len() as u64;
        let now = if self.in_backward {
            n + self.step_pos as u64
        } else {
            self.computed as u64
        };
        let mut next = 2 * n + 1;
        if let Some(t) = self.next_read(v) {
            next = next.min(n + t as u64);
        }
        let consumers = self.consumers[v as usize].len().min(16);
        for k in 0..consumers {
            let w = self.consumers[v as usize][k];
            if Some(w) != self.replaying
                && !self.held[w as usize]
                && !self.dead[w as usize]
                && self.evicted[w as usize]
                && let Some(t) = self.next_read(w)
            {
                next = next.min(n + t as u64);
            }
        }
        next.saturating_sub(now).max(1)
    }

    /// The next step position at or after the current one that reads `v`.
    fn next_read(&mut self, v: u32) -> Option<u32> {
        let analysis = self.analysis.as_ref()?;
        let positions = &analysis.read_positions[v as usize];
        let mut k = self.read_cursor[v as usize] as usize;
        while k < positions.len() && (positions[k] as usize) < self.step_pos {
            k += 1;
        }
        self.read_cursor[v as usize] = k as u32;
        positions.get(k).copied()
    }

    fn mark_evicted(&mut self, v: u32) {
        if self.evicted[v as usize] || self.dead[v as usize] || !self.rebuildable(v) {
            return;
        }
        self.evicted[v as usize] = true;
        let root = self.find(v);
        self.uf_cost[root as usize] += self.node(v).cost;
        for k in 0..self.nodes[v as usize].inputs.len() {
            let u = self.nodes[v as usize].inputs[k];
            if self.evicted[u as usize] {
                self.union(v, u);
            }
        }
        for k in 0..self.consumers[v as usize].len() {
            let w = self.consumers[v as usize][k];
            if (w as usize) < self.evicted.len() && self.evicted[w as usize] {
                self.union(v, w);
            }
        }
    }

    fn unmark_evicted(&mut self, v: u32) {
        if std::mem::replace(&mut self.evicted[v as usize], false) {
            let root = self.find(v);
            self.uf_cost[root as usize] -= self.node(v).cost;
        }
    }

    fn find(&mut self, v: u32) -> u32 {
        let mut root = v;
        while self.uf_parent[root as usize] != root {
            root = self.uf_parent[root as usize];
        }
        let mut x = v;
        while self.uf_parent[x as usize] != root {
            let next = self.uf_parent[x as usize];
            self.uf_parent[x as usize] = root;
            x = next;
        }
        root
    }

    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return;
        }
        let (big, small) = if self.uf_size[ra as usize] >= self.uf_size[rb as usize] {
            (ra, rb)
        } else {
            (rb, ra)
        };
        self.uf_parent[small as usize] = big;
        self.uf_size[big as usize] += self.uf_size[small as usize];
        self.uf_cost[big as usize] += self.uf_cost[small as usize];
    }

    // ---- the online API's extras ---------------------------------------------------------

    /// Marks an access to value `v` (for staleness).
    pub(crate) fn touch(&mut self, v: u32) {
        if (v as usize) < self.last_access.len() {
            self.now += 1;
            self.last_access[v as usize] = self.now;
        }
    }

    /// Evicts unlocked values until `bytes` more fit; returns them.
    pub(crate) fn victims(&mut self, bytes: u64) -> Result<Vec<u32>, Error> {
        let start = self.out.len();
        if self.make_room(bytes, &[], None).is_err() {
            return Err(self.infeasible(bytes));
        }
        Ok(self.out[start..].iter().map(|a| a.node()).collect())
    }

    pub(crate) fn step_pos(&self) -> usize {
        self.step_pos
    }
}

#[cfg(test)]
impl Exec<'_> {
    /// Checks the invariants of the module docs and NOTE [need] against a recount from
    /// scratch, between events (planned runs). Returns the first that fails.
    pub(crate) fn check_invariants(&mut self) -> Result<(), String> {
        let view = self
            .view
            .clone()
            .expect("remat internal error: a known graph");
        let n = self.nodes.len();
        let mut held_bytes = 0;
        for v in 0..n {
            if self.held[v] {
                if self.dead[v] {
                    return Err(format!("value {v} is dead but held"));
                }
                held_bytes += self.nodes[v].bytes;
            }
            if v < self.computed as usize && !self.stepped[v] {
                held_bytes += self.nodes[v].fixed_bytes;
            }
            if self.uses[v] != 0 {
                return Err(format!("uses[{v}] = {} between events", self.uses[v]));
            }
            let candidate = self.candidate_pos[v] != NONE;
            if candidate != (self.held[v] && self.rebuildable(v as u32)) {
                return Err(format!("value {v}: candidate {candidate}"));
            }
            if self.dead[v] {
                continue;
            }
            let reads = view.step_order()[self.step_pos..]
                .iter()
                .filter(|&&s| self.nodes[s as usize].step_reads.contains(&(v as u32)))
                .count();
            let consumers = self.consumers[v]
                .iter()
                .filter(|&&w| !self.dead[w as usize] && self.rebuildable(w))
                .count();
            let expected = (reads + consumers) as u32;
            if self.need[v] != expected {
                return Err(format!(
                    "need[{v}] = {} but {reads} reads + {consumers} consumers remain",
                    self.need[v]
                ));
            }
        }
        if held_bytes != self.held_bytes {
            return Err(format!("held_bytes {} != {held_bytes}", self.held_bytes));
        }
        if self.held_bytes > self.budget {
            return Err(format!("held_bytes {} over the budget", self.held_bytes));
        }
        Ok(())
    }
}

/// Runs a whole view under `strategy` and `budget`.
pub(crate) fn run(
    view: &GraphView,
    analysis: &Arc<Analysis>,
    strategy: Strategy,
    budget: u64,
) -> Result<(Vec<Action>, f64, Work), Error> {
    run_with(view, analysis, strategy, budget, &Hints::default())
}

/// Runs a whole view under `strategy`, `budget` and `hints`.
pub(crate) fn run_with(
    view: &GraphView,
    analysis: &Arc<Analysis>,
    strategy: Strategy,
    budget: u64,
    hints: &Hints,
) -> Result<(Vec<Action>, f64, Work), Error> {
    run_logged(view, analysis, strategy, budget, hints).map(|(a, c, w, _)| (a, c, w))
}

/// The number of options of each decision of a run (NOTE [decisions]).
pub(crate) type Decisions = Vec<u8>;

/// [`run_with`], also returning its decisions.
pub(crate) fn run_logged(
    view: &GraphView,
    analysis: &Arc<Analysis>,
    strategy: Strategy,
    budget: u64,
    hints: &Hints,
) -> Result<(Vec<Action>, f64, Work, Decisions), Error> {
    match run_within(view, analysis, strategy, budget, hints, f64::INFINITY)? {
        Run::Done(actions, cost, work, decisions) => Ok((actions, cost, work, decisions)),
        Run::Abandoned(_) => unreachable!("a run without a limit completes"),
    }
}

/// A run of [`run_within`]: finished (actions, recompute cost, work, decisions), or
/// abandoned once its recompute passed the limit (the work it took).
pub(crate) enum Run {
    Done(Vec<Action>, f64, Work, Decisions),
    Abandoned(Work),
}

/// [`run_logged`], abandoned as soon as its recompute cost passes `limit`: a portfolio does
/// not finish a run that has already lost.
pub(crate) fn run_within(
    view: &GraphView,
    analysis: &Arc<Analysis>,
    strategy: Strategy,
    budget: u64,
    hints: &Hints,
    limit: f64,
) -> Result<Run, Error> {
    let mut exec = Exec::planned(view, analysis.clone(), strategy, budget);
    exec.set_hints(hints);
    for j in 0..view.len() as u32 {
        exec.compute(j)?;
        if exec.recompute_cost() > limit {
            return Ok(Run::Abandoned(exec.work()));
        }
    }
    exec.begin_backward(view.step_order().to_vec())?;
    for _ in 0..view.len() {
        exec.step()?;
        if exec.recompute_cost() > limit {
            return Ok(Run::Abandoned(exec.work()));
        }
    }
    let cost = exec.recompute_cost();
    let work = exec.work();
    let decisions = exec.take_decisions();
    Ok(Run::Done(exec.into_actions(), cost, work, decisions))
}
