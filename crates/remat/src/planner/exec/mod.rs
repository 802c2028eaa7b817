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
//! - `acct.held_bytes` is the sum of the held values' bytes plus the constants of every node
//!   computed and not stepped; it never passes the budget after an action.
//! - `sweep.uses[v]` is zero outside a sweep; inside, it counts the sweep's remaining reads
//!   of `v`.
//! - A value is in `acct.candidates` iff it is held and rebuildable.
//! - `acct.evicted[v]` iff `v` is computed, rebuildable, alive and not held.
//!
//! # Files
//! [`Exec`]'s state is a few structs, each with the file that mainly changes it. This file
//! holds [`Exec`], its construction and the state every file reads: `Knobs`, what a run is
//! told (its strategy and budget, [`Hints`], NOTE \[decisions\]); `Graph`, the graph as far
//! as it is known; `Life`, what each value is still needed for (NOTE \[need\]); `Report`,
//! what a run writes and counts. It names the files below only for the state they own (the
//! planner calls `runs.rs` by its path); they add [`Exec`]'s events:
//! - `forward.rs`: the forward pass: ops recorded or adopted, and what is kept as they run;
//! - `backward.rs`: the backward pass: a step's sweep (the values it replays, each once)
//!   and the lean fallback (NOTE \[lean-schedule\]), and the values that die after it;
//!   `Sweep`, the pass's progress and the current step's sweep;
//! - `release.rs`: NOTE \[pin-release\], dropping a pinned value once only values held can
//!   need it;
//! - `evict.rs`: the eviction choice: making room by score (DTR's or the lookahead's);
//! - `held.rs`: the accounting, `Accounting`: the held set and its bytes, the eviction
//!   candidates, the evicted values and their `Classes` (union-find);
//! - `runs.rs`: a whole view run event by event (the planner's runs).

mod backward;
mod evict;
mod forward;
mod held;
mod release;
pub(super) mod runs;

use std::borrow::Cow;
use std::sync::Arc;

use smallvec::SmallVec;

use super::analysis::{Analysis, NONE};
use super::grow::room_for;
use super::packed::{NodeRef, Nodes};
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

/// Lengthens a per-value list to `n` values (if shorter), new ones `value` (NOTE
/// [gentle-growth] in `grow.rs`).
fn grow_to<T: Clone>(list: &mut Vec<T>, n: usize, value: T) {
    if n > list.len() {
        room_for(list, n);
        list.resize(n, value);
    }
}

/// What a run counted, for planning-cost checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Work {
    /// Candidates scored, closure nodes visited and actions written.
    pub(crate) units: u64,
    /// Steps that fell back to the lean sweep.
    pub(crate) fallbacks: u64,
}

/// The executor. Its state is grouped by the file that mainly changes it (module docs,
/// `# Files`); the two clocks stay here, as every file reads them.
pub(crate) struct Exec<'a> {
    /// What the run was told.
    knobs: Knobs,
    /// The graph as far as it is known.
    graph: Graph<'a>,
    /// What each value is still needed for, and whether it is decided, dead, pinned or lost.
    life: Life,
    /// The held values, their bytes and the evicted classes (`held.rs`).
    acct: Accounting,
    /// The backward pass's progress and the current step's sweep (`backward.rs`).
    sweep: Sweep,
    /// A clock for staleness: one tick per op.
    now: u64,
    /// The forward ops run so far.
    computed: u32,
    /// What the run writes and counts.
    report: Report,
}

/// What a run was told (this file): its strategy and budget, whether it knows the graph
/// from the start, the planner's hints, and the decisions it made under them.
struct Knobs {
    strategy: Strategy,
    budget: u64,
    /// Whether the whole graph was known in the forward pass.
    planned: bool,
    /// Errors name a lower bound on the smallest budget, not the smallest one (whose bound
    /// is planning of its own: the caller does not read it).
    bound_errors: bool,
    /// The planner's hints ([`Exec::set_hints`]; planned runs only).
    hints: Hints,
    /// NOTE [decisions]: the number of options of each decision so far (planned runs).
    decisions: Vec<u8>,
}

/// The graph as far as it is known (this file builds it; `forward.rs`'s `link` adds each
/// appended node's facts): the nodes, the view and its analysis once known, and per-node
/// facts that only grow.
struct Graph<'a> {
    /// Packed when appended online (NOTE [packed-nodes] in `packed.rs`).
    nodes: Nodes<'a>,
    /// Set once the whole graph is known (from the start for planned runs).
    view: Option<Cow<'a, GraphView>>,
    analysis: Option<Arc<Analysis>>,
    /// The distinct consumers linked so far of each value (online); a planned run reads its
    /// analysis's instead ([`Exec::consumers_of`]). Up to four in place (NOTE
    /// [packed-nodes] in `packed.rs`: most values have one or two, and a list of their own
    /// took 16 bytes more each).
    consumers: Vec<SmallVec<[u32; 4]>>,
    /// Recorded steps that read each value (forward, online).
    reads_known: Vec<u32>,
    /// Per node, the constants its step releases (`GraphView::released_by_steps`); may run
    /// past the nodes appended so far online (a node whose constants a later one holds).
    released: Vec<u64>,
}

/// Each value's standing (NOTE \[need\]): counted up in the forward pass (`forward.rs`),
/// counted down as steps run and values die (`backward.rs`), and changed when a pinned
/// value is dropped (NOTE [pin-release], `release.rs`).
#[derive(Default)]
struct Life {
    /// NOTE \[need\]: per value, the steps still to run that read it plus its needed
    /// rebuildable consumers (online, in the forward pass: those recorded so far).
    need: Vec<u32>,
    /// Whether the forward pass decided on keeping each value (kept or not).
    offered: Vec<bool>,
    /// Values never needed again (NOTE \[need\]: dead).
    dead: Vec<bool>,
    /// NOTE [pin-release]: held values pinned in place of an input that was dropped.
    pinned_now: Vec<bool>,
    /// Values that cannot be rebuilt and were dropped by the plan a resumed run took over
    /// from (`Dtr::resume`): their consumers are pinned instead.
    lost: Vec<bool>,
}

/// What a run writes and counts (this file hands it out: [`Exec::actions`],
/// [`Exec::recompute_cost`], [`Exec::work`]).
#[derive(Default)]
struct Report {
    /// The schedule so far.
    out: Vec<Action>,
    /// The rebuild cost of the replays so far.
    cost: f64,
    work: Work,
}

// The state `backward.rs` and `held.rs` own is defined here, with the rest of [`Exec`]'s:
// a child file names this one (`super::Exec`), so this one names none of them
// (`tests/layers.rs`, `no_file_level_cycle`).

/// The backward pass's progress and the current step's sweep (`backward.rs`; `evict.rs` and
/// `release.rs` read it, and the sweep's eviction scores set `replaying`).
#[derive(Default)]
struct Sweep {
    /// Whether the backward pass started.
    in_backward: bool,
    /// The next step's position in the step order.
    step_pos: usize,
    /// Whether each node's step ran.
    stepped: Vec<bool>,
    /// Per value, how far `Exec::next_read` went in its read positions.
    read_cursor: Vec<u32>,
    /// Where the current step's actions start.
    step_start: usize,
    /// INVARIANT: zero outside a sweep; inside, the sweep's remaining reads of each value
    /// (module docs, `# Invariants`).
    uses: Vec<u32>,
    /// The value the sweep is about to replay, and (while its consumable inputs are
    /// scored) the consumer `distance` leaves out.
    current_replay: Option<u32>,
    replaying: Option<u32>,
    /// Release plans of the pinned inputs the current replay may take.
    releases: Vec<(u32, ReleasePlan)>,
}

/// The accounting (`held.rs`): the held values and their bytes, the eviction candidates
/// (`evict.rs` scores them), and the evicted values and their classes.
#[derive(Default)]
struct Accounting {
    /// Whether each value is held.
    held: Vec<bool>,
    /// INVARIANT: the held values' bytes plus the constants of every node computed and not
    /// stepped (module docs, `# Invariants`).
    held_bytes: u64,
    /// The most `held_bytes` has been.
    peak: u64,
    /// The held rebuildable values (module docs, `# Invariants`), in no order.
    candidates: Vec<u32>,
    /// Per value, its index in `candidates`, or `NONE`.
    candidate_pos: Vec<u32>,
    /// Where the next scan of `candidates` starts when they are more than `SCAN_LIMIT`
    /// (`evict.rs`: DTR's sampling).
    scan_offset: usize,
    /// Per value, `Exec::now` at its last access: DTR's staleness (`evict.rs`).
    last_access: Vec<u64>,
    /// INVARIANT: `evicted[v]` iff `v` is computed, rebuildable, alive and not held.
    evicted: Vec<bool>,
    /// The classes of the evicted values.
    classes: Classes,
}

/// DTR's equivalence classes of evicted values: a union-find whose roots sum their
/// members' costs; classes are joined, never split.
#[derive(Default)]
struct Classes {
    uf_parent: Vec<u32>,
    uf_size: Vec<u32>,
    uf_cost: Vec<f64>,
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
        Exec::with_nodes(strategy, budget, Nodes::packed(), None, None)
    }

    /// An online executor over `nodes`, none of them appended yet: `Exec::adopt_given`
    /// adopts them all, borrowed or owned as given.
    pub(crate) fn online_over(strategy: Strategy, budget: u64, nodes: Cow<'a, [Node]>) -> Self {
        Exec::with_nodes(strategy, budget, Nodes::listed(nodes), None, None)
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
            Nodes::Borrowed(view.nodes()),
            Some(Cow::Borrowed(view)),
            Some(analysis.clone()),
        );
        exec.knobs.planned = true;
        // The planner's runs only ask whether they fit: the smallest budget is planning of
        // its own (NOTE \[planner-memory\] in `rotor/solve.rs`).
        exec.knobs.bound_errors = true;
        exec.life.need = analysis.need.clone();
        exec.grow(view.len());
        exec.graph.released = view.released_by_steps();
        for v in 0..view.len() {
            exec.life.dead[v] = exec.life.need[v] == 0;
        }
        exec
    }

    fn with_nodes(
        strategy: Strategy,
        budget: u64,
        nodes: Nodes<'a>,
        view: Option<Cow<'a, GraphView>>,
        analysis: Option<Arc<Analysis>>,
    ) -> Self {
        Self {
            knobs: Knobs {
                strategy,
                budget,
                planned: false,
                bound_errors: false,
                hints: Hints::default(),
                decisions: Vec::new(),
            },
            graph: Graph {
                nodes,
                view,
                analysis,
                consumers: Vec::new(),
                reads_known: Vec::new(),
                released: Vec::new(),
            },
            life: Life::default(),
            acct: Accounting::default(),
            sweep: Sweep::default(),
            now: 0,
            computed: 0,
            report: Report::default(),
        }
    }

    fn grow(&mut self, n: usize) {
        let len = self.acct.held.len();
        if n <= len {
            return;
        }
        // NOTE [gentle-growth] in `grow.rs`: online, one more value at a time.
        if !self.knobs.planned {
            // A planned run reads its analysis's (`consumers_of`).
            grow_to(&mut self.graph.consumers, n, SmallVec::new());
        }
        grow_to(&mut self.graph.reads_known, n, 0);
        grow_to(&mut self.life.need, n, 0);
        grow_to(&mut self.acct.held, n, false);
        grow_to(&mut self.life.offered, n, false);
        grow_to(&mut self.life.dead, n, false);
        if self.knobs.planned || self.sweep.in_backward {
            self.grow_sweep(n);
        }
        grow_to(&mut self.acct.last_access, n, 0);
        grow_to(&mut self.acct.evicted, n, false);
        room_for(&mut self.acct.classes.uf_parent, n);
        self.acct.classes.uf_parent.extend(len as u32..n as u32);
        grow_to(&mut self.acct.classes.uf_size, n, 1);
        grow_to(&mut self.acct.classes.uf_cost, n, 0.0);
        grow_to(&mut self.acct.candidate_pos, n, NONE);
        grow_to(&mut self.life.pinned_now, n, false);
        grow_to(&mut self.life.lost, n, false);
    }

    /// The state only a backward pass's sweeps read, for `n` values: online, it is made as
    /// the backward pass starts (NOTE [packed-nodes] in `packed.rs`: not held beside the
    /// forward pass's kept values). A forward pass runs no sweep.
    fn grow_sweep(&mut self, n: usize) {
        grow_to(&mut self.sweep.stepped, n, false);
        grow_to(&mut self.sweep.uses, n, 0);
        grow_to(&mut self.sweep.read_cursor, n, 0);
    }

    pub(crate) fn actions(&self) -> &[Action] {
        &self.report.out
    }

    /// Forgets the actions written so far (an online run whose caller carried them out).
    pub(crate) fn forget_actions(&mut self) {
        self.report.out.clear();
    }

    /// Makes errors name a lower bound only (`bound_errors`).
    pub(crate) fn bound_errors(&mut self) {
        self.knobs.bound_errors = true;
    }

    /// The decisions recorded so far (NOTE [decisions]).
    pub(crate) fn take_decisions(&mut self) -> Decisions {
        std::mem::take(&mut self.knobs.decisions)
    }

    pub(crate) fn into_actions(self) -> Vec<Action> {
        self.report.out
    }

    /// The nodes appended, as they were given (borrowed or owned) or unpacked (NOTE
    /// [packed-nodes] in `packed.rs`: after the rest of the executor's state is dropped).
    pub(crate) fn into_node_list(self) -> Cow<'a, [Node]> {
        // The rest of the executor goes at the end of this block, before the unpacking.
        let nodes = {
            let this = self;
            this.graph.nodes
        };
        nodes.into_list()
    }

    pub(crate) fn recompute_cost(&self) -> f64 {
        self.report.cost
    }

    pub(crate) fn peak(&self) -> u64 {
        self.acct.peak
    }

    pub(crate) fn held_bytes(&self) -> u64 {
        self.acct.held_bytes
    }

    pub(crate) fn work(&self) -> Work {
        self.report.work
    }

    pub(crate) fn len(&self) -> usize {
        self.graph.nodes.len()
    }

    /// The distinct consumers of `v`: its analysis's in a planned run (NOTE \[flat-lists\] in
    /// `analysis.rs`: not copied for each run), else the ones linked so far.
    fn consumers_of(&self, v: u32) -> &[u32] {
        match &self.graph.analysis {
            Some(analysis) if self.knobs.planned => &analysis.consumers[v as usize],
            _ => &self.graph.consumers[v as usize][..],
        }
    }

    #[inline]
    fn node(&self, i: u32) -> NodeRef<'_> {
        self.graph.nodes.get(i as usize)
    }

    /// Whether value `i` may be evicted and rebuilt now: statically rebuildable, and not
    /// pinned in place of an input (NOTE [pin-release]).
    fn rebuildable(&self, i: u32) -> bool {
        self.node(i).rebuildable() && !self.life.pinned_now[i as usize]
    }

    /// The next step position at or after the current one that reads `v`.
    fn next_read(&mut self, v: u32) -> Option<u32> {
        let analysis = self.graph.analysis.as_ref()?;
        let positions = &analysis.read_positions[v as usize];
        let mut k = self.sweep.read_cursor[v as usize] as usize;
        while k < positions.len() && (positions[k] as usize) < self.sweep.step_pos {
            k += 1;
        }
        self.sweep.read_cursor[v as usize] = k as u32;
        positions.get(k).copied()
    }

    /// NOTE [decisions]: records a decision of `options` options; returns the one to take.
    fn decide(&mut self, options: usize) -> usize {
        if !self.knobs.planned || options < 2 {
            return 0;
        }
        let k = self.knobs.decisions.len();
        self.knobs
            .decisions
            .push(options.min(u8::MAX as usize) as u8);
        let choice = self.knobs.hints.choices.get(k).copied().unwrap_or(0) as usize;
        if choice < options { choice } else { 0 }
    }

    /// Applies the planner's hints (planned runs only).
    pub(crate) fn set_hints(&mut self, hints: &Hints) {
        self.knobs.hints = hints.clone();
    }

    /// The error for a budget that cannot hold what must be held now plus `needed` bytes.
    fn infeasible(&self, needed: u64) -> Error {
        match &self.graph.view {
            Some(view) if !self.knobs.bound_errors => Error::Infeasible {
                budget_bytes: self.knobs.budget,
                min_budget_bytes: min_feasible_budget(view),
                lower_bound: false,
            },
            _ => {
                let pinned: u64 = (0..self.graph.nodes.len() as u32)
                    .filter(|&v| self.acct.held[v as usize] && !self.rebuildable(v))
                    .map(|v| self.node(v).bytes)
                    .sum();
                let fixed: u64 = (0..self.graph.nodes.len() as u32)
                    .map(|i| (i, self.node(i)))
                    .filter(|&(i, n)| !self.has_stepped(n.releaser(i)))
                    .map(|(_, n)| n.fixed_bytes)
                    .sum();
                Error::Infeasible {
                    budget_bytes: self.knobs.budget,
                    min_budget_bytes: pinned + fixed + needed,
                    lower_bound: true,
                }
            }
        }
    }

    pub(crate) fn step_pos(&self) -> usize {
        self.sweep.step_pos
    }

    /// Whether node `v`'s step ran (false for a node not appended yet).
    fn has_stepped(&self, v: u32) -> bool {
        self.sweep.stepped.get(v as usize).copied().unwrap_or(false)
    }
}

#[cfg(test)]
impl Exec<'_> {
    /// Checks the invariants of the module docs and NOTE [need] against a recount from
    /// scratch, between events (planned runs). Returns the first that fails.
    pub(crate) fn check_invariants(&mut self) -> Result<(), String> {
        let view = self
            .graph
            .view
            .clone()
            .expect("remat internal error: a known graph");
        let n = self.graph.nodes.len();
        let mut held_bytes = 0;
        for v in 0..n {
            if self.acct.held[v] {
                if self.life.dead[v] {
                    return Err(format!("value {v} is dead but held"));
                }
                held_bytes += self.node(v as u32).bytes;
            }
            if v < self.computed as usize
                && !self.has_stepped(self.node(v as u32).releaser(v as u32))
            {
                held_bytes += self.node(v as u32).fixed_bytes;
            }
            if let Some(&uses) = self.sweep.uses.get(v)
                && uses != 0
            {
                return Err(format!("uses[{v}] = {uses} between events"));
            }
            let candidate = self.acct.candidate_pos[v] != NONE;
            if candidate != (self.acct.held[v] && self.rebuildable(v as u32)) {
                return Err(format!("value {v}: candidate {candidate}"));
            }
            if self.life.dead[v] {
                continue;
            }
            let reads = view.step_order()[self.sweep.step_pos..]
                .iter()
                .filter(|&&s| self.node(s).step_reads.contains(&(v as u32)))
                .count();
            let consumers = self
                .consumers_of(v as u32)
                .iter()
                .filter(|&&w| !self.life.dead[w as usize] && self.rebuildable(w))
                .count();
            let expected = (reads + consumers) as u32;
            if self.life.need[v] != expected {
                return Err(format!(
                    "need[{v}] = {} but {reads} reads + {consumers} consumers remain",
                    self.life.need[v]
                ));
            }
        }
        if held_bytes != self.acct.held_bytes {
            return Err(format!(
                "held_bytes {} != {held_bytes}",
                self.acct.held_bytes
            ));
        }
        if self.acct.held_bytes > self.knobs.budget {
            return Err(format!(
                "held_bytes {} over the budget",
                self.acct.held_bytes
            ));
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
