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
//!
//! # Files
//! This file holds the state ([`Exec`]'s fields), its construction, what a planned run is
//! told ([`Hints`], NOTE \[decisions\]) and what a run reports; it names none of the files
//! below (the planner calls `runs.rs` by its path), which add [`Exec`]'s events:
//! - `forward.rs`: the forward pass: ops recorded or adopted, and what is kept as they run;
//! - `backward.rs`: the backward pass: a step's sweep (the values it replays, each once)
//!   and the lean fallback (NOTE \[lean-schedule\]), and the values that die after it;
//! - `release.rs`: NOTE \[pin-release\], dropping a pinned value once only values held can
//!   need it;
//! - `evict.rs`: the eviction choice: making room by score (DTR's or the lookahead's);
//! - `held.rs`: the accounting: the held set and its bytes, the eviction candidates, the
//!   evicted classes (union-find);
//! - `runs.rs`: a whole view run event by event (the planner's runs).

mod backward;
mod evict;
mod forward;
mod held;
mod release;
pub(super) mod runs;

use std::borrow::Cow;
use std::sync::Arc;

use super::analysis::{Analysis, NONE};
use super::grow::room_for;
use super::view::rebuildable;
use super::{Action, Error, GraphView, Node, min_feasible_budget};

/// At most this many eviction candidates are scored per eviction; larger sets are sampled
/// with a rotating window (DTR's sampling), which keeps a step's cost bounded.
const SCAN_LIMIT: usize = 64;

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
    /// Per node, the constants its step releases (`GraphView::released_by_steps`); may run
    /// past the nodes appended so far online (a node whose constants a later one holds).
    released: Vec<u64>,
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
    /// Errors name a lower bound on the smallest budget, not the smallest one (whose bound
    /// is planning of its own: the caller does not read it).
    bound_errors: bool,
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
const ALTERNATIVES: usize = 4;

impl<'a> Exec<'a> {
    /// An executor for a graph recorded op by op ([`Exec::record`]).
    pub(crate) fn online(strategy: Strategy, budget: u64) -> Exec<'static> {
        Exec::with_nodes(strategy, budget, Cow::Owned(Vec::new()), None, None)
    }

    /// An online executor over `nodes`, none of them appended yet: `Exec::adopt_given`
    /// adopts them all, borrowed or owned as given.
    pub(crate) fn online_over(strategy: Strategy, budget: u64, nodes: Cow<'a, [Node]>) -> Self {
        Exec::with_nodes(strategy, budget, nodes, None, None)
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
        // The planner's runs only ask whether they fit: the smallest budget is planning of
        // its own (NOTE \[planner-memory\] in `rotor/solve.rs`).
        exec.bound_errors = true;
        exec.need = analysis.need.clone();
        exec.consumers = analysis.consumers.clone();
        exec.grow(view.len());
        exec.released = view.released_by_steps();
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
            released: Vec::new(),
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
            bound_errors: false,
        }
    }

    fn grow(&mut self, n: usize) {
        let len = self.held.len();
        if n <= len {
            return;
        }
        // NOTE [gentle-growth] in `grow.rs`: online, one more value at a time.
        fn to<T: Clone>(list: &mut Vec<T>, n: usize, value: T) {
            room_for(list, n);
            list.resize(n, value);
        }
        to(&mut self.consumers, n, Vec::new());
        to(&mut self.reads_known, n, 0);
        to(&mut self.need, n, 0);
        to(&mut self.held, n, false);
        to(&mut self.offered, n, false);
        to(&mut self.dead, n, false);
        to(&mut self.stepped, n, false);
        to(&mut self.uses, n, 0);
        to(&mut self.last_access, n, 0);
        to(&mut self.evicted, n, false);
        room_for(&mut self.uf_parent, n);
        self.uf_parent.extend(len as u32..n as u32);
        to(&mut self.uf_size, n, 1);
        to(&mut self.uf_cost, n, 0.0);
        to(&mut self.candidate_pos, n, NONE);
        to(&mut self.read_cursor, n, 0);
        to(&mut self.pinned_now, n, false);
        to(&mut self.lost, n, false);
    }

    pub(crate) fn actions(&self) -> &[Action] {
        &self.out
    }

    /// Forgets the actions written so far (an online run whose caller carried them out).
    pub(crate) fn forget_actions(&mut self) {
        self.out.clear();
    }

    /// Makes errors name a lower bound only (`bound_errors`).
    pub(crate) fn bound_errors(&mut self) {
        self.bound_errors = true;
    }

    /// The decisions recorded so far (NOTE [decisions]).
    pub(crate) fn take_decisions(&mut self) -> Decisions {
        std::mem::take(&mut self.decisions)
    }

    pub(crate) fn into_actions(self) -> Vec<Action> {
        self.out
    }

    /// The nodes appended, as they were given (borrowed or owned).
    pub(crate) fn into_node_list(self) -> Cow<'a, [Node]> {
        self.nodes
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
            Some(view) if !self.bound_errors => Error::Infeasible {
                budget_bytes: self.budget,
                min_budget_bytes: min_feasible_budget(view),
                lower_bound: false,
            },
            _ => {
                let pinned: u64 = (0..self.nodes.len() as u32)
                    .filter(|&v| self.held[v as usize] && !self.rebuildable(v))
                    .map(|v| self.node(v).bytes)
                    .sum();
                let fixed: u64 = self
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|&(i, n)| !self.has_stepped(n.releaser(i as u32)))
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

    pub(crate) fn step_pos(&self) -> usize {
        self.step_pos
    }

    /// Whether node `v`'s step ran (false for a node not appended yet).
    fn has_stepped(&self, v: u32) -> bool {
        self.stepped.get(v as usize).copied().unwrap_or(false)
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
            if v < self.computed as usize && !self.has_stepped(self.nodes[v].releaser(v as u32)) {
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

/// The number of options of each decision of a run (NOTE [decisions]).
pub(crate) type Decisions = Vec<u8>;

/// What NOTE [pin-release] (`release.rs`) changes when it drops a pinned value.
#[derive(Debug)]
struct ReleasePlan {
    frontier: Vec<u32>,
    crossed: Vec<u32>,
}
