//! Planned mode: a near-optimal schedule for a step whose graph is known (a training step
//! that recurs), from the view and a budget.
//!
//! The planner tries a portfolio and keeps the cheapest schedule the simulator accepts:
//! - a uniform chain gets Revolve's optimal binomial schedule ([`revolve`](super::revolve));
//! - every view gets the executor with full lookahead (Belady-style: the victim is the held
//!   value with the lowest rebuild cost per byte and per unit of time until its next read,
//!   with the distance weighted by several exponents), and DTR's own score;
//! - views of up to 20,000 ops get one more run, whose forward pass keeps what the lower
//!   bound's relaxation holds (NOTE [bound-guided]), unless the chain's plan stopped the
//!   portfolio (NOTE [chain-abandons]);
//! - the lean schedule (NOTE [lean-schedule]) is the fallback that fits any budget at or
//!   above [`min_feasible_budget`](super::min_feasible_budget).
//!
//! Cost model: a constant number of executor runs, each near-linear in the graph (see
//! `exec/`), plus one simulation per candidate.
//!
//! # Invariants
//! - A returned schedule passes [`simulate`](super::simulate) under the budget.

use std::sync::Arc;

use super::analysis::Analysis;
use super::blocks::Planner;
use super::exact::MAX_NODES;
use super::exec::runs::{self, Run};
use super::exec::{self, Hints, Strategy, Work};
use super::pinned::{self, Pinned};
use super::search::{self, Optimum};
use super::tuples::{self, Tupled};
use super::{
    Action, CachedPlan, Error, GraphView, PlanCache, Schedule, bound, chain, exact,
    min_feasible_budget, revolve, rotor, signature, simulate,
};

/// Past this many ops, a view with stages plans its chain first (NOTE \[rotor\]): the
/// portfolio's runs there are then abandoned once they cost more, and the portfolio stops
/// at the first that does not beat the chain's plan (NOTE \[chain-abandons\]). The
/// portfolio still runs: on a long chain of small blocks the DP's memory units are coarse
/// (a unit may hold many boundary values), near keep-all the executor's plan is the better
/// one, and where the chain's levels find no plan (2,000 blocks of (matmul, add, GELU) one
/// slot above the smallest budget) the executor's first run replays 71 forward passes
/// where the lean chain schedule replays 500. It was 20,000 before the second paragraph of
/// NOTE \[chain-abandons\].
const CHAIN_FIRST_OPS: usize = 5_000;

// NOTE [chain-second]: on a chain of stages at a tight budget, every executor run replays
// as much as the chain's plan (quadratically in the chain's length near the smallest
// budget) at about 2 us a replay, and the chain's DP is the better plan: on a 100-block
// power iteration at 2 slots above the smallest budget the runs cost 2.7x the DP's plan
// after their search. Every run used to finish (a search was to start from them) and the
// DP came last: 2 s to plan 100 blocks at the smallest budget, 50 s for 1,000. Now the
// DP's plan comes after the portfolio's first run (unless that run replays nothing: a
// budget near keep-all pays no DP), and every later run is abandoned once it costs more
// than the best plan so far, or `SEARCH_MARGIN` times it where a search may start from
// it.

// NOTE [chain-abandons]: at a tight budget on a chain of stages, each abandoned run still
// replays as much as the chain's plan before it stops (NOTE [chain-second]), and eight of
// them made most of the planning time: a 300-block power iteration at its smallest budget
// planned in 3.9 s, its runs abandoned one after the other behind the DP's plan. Once the
// chain's plan is the best and `CHAIN_ABANDONS` runs in a row were abandoned behind it,
// the portfolio stops where no search follows (views of more than 512 ops). A run that
// finishes, or beats the chain's plan, resets the count. Measured (`examples/plan_chain`,
// release): 300 blocks at the smallest budget 3.9 -> 1.4 s, at one slot 0.59 -> 0.26 s;
// 1,000 blocks 29 -> 15.5 s and 4.1 -> 1.6 s; the same plans. With two, the benchmark's
// residual MLP (a recorded view of 1,000 ops) planned 0.3% more recompute at 30% and 20%
// of its bytes; with three, it and the other recorded views plan exactly as before.
//
// A run that fits no plan at all (the executor's runs on a long power iteration, from 2
// to 30 slots above its smallest budget) did not beat the chain's plan either, yet it
// reset the count: 3,900 blocks (19,501 ops) ran all eight runs and the bound-guided one
// behind the chain's plan, 1.2-2.5 s at 1 to 100 slots. It counts as abandoned now, and
// past `CHAIN_FIRST_OPS` ops (5,000, from 20,000) the chain's plan goes first and one
// run that does not beat it stops the portfolio, the bound-guided run included: 3,900
// blocks 0.35-0.53 s, 2,000 blocks 0.39-0.71 s (0.52-2.1 s), 1,000 blocks 0.31-0.46 s
// (0.41-0.93 s), the same plans; chains of (matmul, add, GELU) blocks from 1,700 to 6,000
// blocks at 1 to 8 slots plan the same (the executor's wins at one and two slots are its
// first run's), and the recorded views (at most 5,000 ops) are untouched.

/// Abandoned portfolio runs in a row, behind the chain's plan, after which the portfolio
/// stops (NOTE [chain-abandons]).
const CHAIN_ABANDONS: u32 = 3;

/// The lookahead exponents the portfolio tries: 0 weighs only cost per byte (a knapsack),
/// larger values favour evicting what is read last.
const ALPHAS: [f64; 4] = [0.0, 0.5, 1.0, 2.0];

/// [`ALPHAS`] with the pure cost-per-byte weighting last (NOTE [portfolio-bound]).
///
/// NOTE [portfolio-bound]: on a large view with a tight budget, the weighting that ignores
/// how soon a value is read again (alpha 0) can evict values needed next and replay 50x
/// more than the others (a 10k-op wide DAG at 1024 values: 750M against 13M ns of
/// recompute, 100M work units against 2-3M, 8 s against 0.3 s). Where no search follows
/// (views of more than 512 ops), each run is abandoned once its recompute passes the best
/// schedule's so far, and alpha 0 runs last, so that it meets a bound; past 20,000 ops only
/// alpha 1 runs. Measured on that DAG
/// through the engine: the first backward (online pass plus the plan cached for the next
/// steps) went from 22 s to 2.3 s; a 100k-op one at 10% of its keep-all bytes, 8.5 to 5.3 s.
const ALPHAS_LATE_ZERO: [f64; 4] = [0.5, 1.0, 2.0, 0.0];

/// How much more than the best schedule so far a portfolio run may cost before it is
/// abandoned, where a search may start from it (NOTE [chain-second]).
const SEARCH_MARGIN: f64 = 1.25;

/// The search starts from this many of the cheapest portfolio runs.
const SEARCH_STARTS: usize = 4;

/// When no single change helps, the search pairs this many of the best single changes.
const PAIRED: usize = 6;

/// This planner as a value, for the files of a chain below it (`blocks.rs`, `rotor/`,
/// `pinned.rs`, `tuples.rs`): it plans each stage of a chain with itself.
pub(crate) const PORTFOLIO: Planner = Planner {
    plan,
    smallest_budget,
};

/// A near-optimal schedule for `view` under `budget_bytes`; see the module docs.
///
/// # Errors
/// [`Error::Infeasible`] naming [`smallest_budget`] when no schedule the planner can make
/// fits.
pub fn plan(view: &GraphView, budget_bytes: u64) -> Result<Schedule, Error> {
    plan_counted(view, budget_bytes).map(|(schedule, _)| schedule)
}

/// What planning cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PlanWork {
    /// Executor work units over all runs (see `exec::Work`), plus simulated actions.
    pub(crate) units: u64,
    /// Executor runs.
    pub(crate) runs: u32,
}

/// The most states the planner's last search stores (NOTE [search-last]): about 3 us and
/// 200 bytes each.
const SEARCH_STATES: usize = 20_000;

/// The last search stores at most one state per this many bytes of the view's values: its
/// memory (about 200 bytes a state) stays within 1/64 of what the step's values take,
/// however small the model (`tests/memory.rs` counts the planner's memory in a step's).
const SEARCH_SHARE: u64 = 200 * 64;

/// The most plans of a tupled view per chain plan (NOTE \[tuple-room\]).
const TUPLE_TRIES: usize = 5;

/// The cheapest valid schedule seen so far.
struct Best<'v> {
    view: &'v GraphView,
    budget: u64,
    best: Option<(f64, u64, Schedule)>,
    work: PlanWork,
}

impl Best<'_> {
    /// Keeps `schedule` if the simulator accepts it and it is cheaper; returns whether it was.
    fn consider(&mut self, schedule: Schedule) -> bool {
        self.work.units += schedule.len() as u64;
        if let Ok(outcome) = simulate(self.view, &schedule, self.budget) {
            let better = self.best.as_ref().is_none_or(|(cost, peak, _)| {
                outcome.recompute_cost < *cost
                    || (outcome.recompute_cost == *cost && outcome.peak_bytes < *peak)
            });
            if better {
                self.best = Some((outcome.recompute_cost, outcome.peak_bytes, schedule));
                return true;
            }
        }
        false
    }

    fn cost(&self) -> Option<f64> {
        self.best.as_ref().map(|(cost, _, _)| *cost)
    }
}

/// A uniform chain followed by ops whose values nothing reads and whose steps read nothing
/// (a training step's loss reduction, say): Revolve's schedule for the chain, with the
/// trailing ops computed after it and stepped first. `None` for any other view.
fn chain_then_sinks(view: &GraphView, budget: u64) -> Option<Schedule> {
    let nodes = view.nodes();
    let n = nodes.len();
    let mut read = vec![false; n];
    for node in nodes {
        for &v in node.inputs.iter().chain(&node.step_reads) {
            read[v as usize] = true;
        }
    }
    let sink = |i: usize| !read[i] && nodes[i].step_reads.is_empty() && nodes[i].fixed_bytes == 0;
    let m = (0..n).rev().take_while(|&i| sink(i)).last()?;
    if m < 2 {
        return None;
    }
    let tail = n - m;
    let order = view.step_order();
    let tail_first = order[..tail].iter().all(|&v| v as usize >= m)
        && order[tail..].iter().copied().eq((0..m as u32).rev());
    if !tail_first {
        return None;
    }
    let prefix = GraphView::new(nodes[..m].to_vec()).ok()?;
    let bytes = revolve::uniform_chain(&prefix)?;
    let schedule = revolve::schedule(&prefix, budget / bytes)?;
    let actions = schedule.actions();
    let split = actions
        .iter()
        .position(|a| matches!(a, Action::Replay(_) | Action::Step(_)))
        .unwrap_or(actions.len());
    let mut out = actions[..split].to_vec();
    out.extend((m..n).map(|i| Action::Compute(i as u32)));
    out.extend(order[..tail].iter().map(|&v| Action::Step(v)));
    out.extend_from_slice(&actions[split..]);
    Some(Schedule::new(out))
}

pub(crate) fn plan_counted(view: &GraphView, budget: u64) -> Result<(Schedule, PlanWork), Error> {
    plan_with(view, budget, true)
}

/// [`plan_counted`], with or without the exact solver for small views (the tests measure
/// the heuristic generators against it).
pub(crate) fn plan_with(
    view: &GraphView,
    budget: u64,
    exact_small: bool,
) -> Result<(Schedule, PlanWork), Error> {
    let mut best = Best {
        view,
        budget,
        best: None,
        work: PlanWork::default(),
    };
    // A small view is solved exactly (`exact.rs`): nothing beats its schedule.
    if exact_small && view.len() <= exact::PLAN_MAX_NODES {
        best.work.runs += 1;
        if let Some(schedule) = exact::schedule(view, budget)
            && best.consider(schedule)
        {
            return Ok((best.best.expect("just considered").2, best.work));
        }
    }
    let mut uniform_costs = false;
    let uniform = revolve::uniform_chain(view);
    if let Some(bytes) = uniform {
        let first = view.nodes()[0].cost;
        uniform_costs = view.nodes().iter().all(|n| n.cost == first);
        if let Some(schedule) = revolve::schedule(view, budget / bytes) {
            best.consider(schedule);
        }
    } else if let Some(schedule) = chain_then_sinks(view, budget) {
        best.consider(schedule);
    }
    // A general chain (NOTE [chain-dp] in `chain.rs`): Revolve's recursion with each op's cost.
    if let Some(schedule) = chain::schedule(view, budget) {
        best.work.runs += 1;
        best.consider(schedule);
    } else if uniform.is_none()
        && let Some(slot) = revolve::general_chain(view)
    {
        // Too long for the DP: Revolve's binomial schedule, blind to costs but never far
        // from the fewest replays, and a bound for the runs below.
        let fixed: u64 = view.nodes().iter().map(|n| n.fixed_bytes).sum();
        if let Some(schedule) = budget
            .checked_sub(fixed)
            .and_then(|room| revolve::schedule(view, room / slot))
        {
            best.work.runs += 1;
            best.work.units += schedule.len() as u64;
            best.consider(schedule);
        }
    }
    // A chain of stages (NOTE [rotor] in `rotor/mod.rs`): the heterogeneous chain's optimum.
    // On a large view it goes first (the portfolio's runs are then abandoned once they cost
    // more); on a smaller one it goes last, when the portfolio's best still replays.
    // A chain whose blocks also read a value computed before them (NOTE [pinned-chain] in
    // `pinned.rs`) is planned as the chain without those reads, the value held throughout.
    let pinned = pinned::reduced(view, PORTFOLIO);
    // A chain whose blocks hand several values to the next (an LSTM's (h, c)) is planned
    // with each hand-over made one value (NOTE [tuple-cuts] in `tuples.rs`).
    let tupled = if pinned.is_none() {
        tuples::tupled(view, PORTFOLIO)
    } else {
        None
    };
    let chain = Chain {
        pinned: pinned.as_ref(),
        tupled: tupled.as_ref(),
    };
    let tier = Tier::of(view);
    let large = view.len() > CHAIN_FIRST_OPS || tight_chain(view, &chain, &tier, budget);
    if large && !(uniform_costs && best.cost().is_some()) {
        chain_run(&mut best, &chain);
    }
    // Revolve is optimal for a uniform chain with equal costs: nothing can beat it.
    let revolve_optimal = uniform_costs && best.cost().is_some();
    if !revolve_optimal {
        let analysis = Arc::new(Analysis::new(view));
        let strategies = tier
            .alphas
            .iter()
            .map(|&alpha| Strategy::Lookahead { alpha })
            .chain(tier.dtr.then_some(Strategy::Dtr));
        let variants = tier.late.iter().flat_map(|&late| {
            tier.free_release.iter().flat_map(move |&free| {
                tier.keep_sources
                    .iter()
                    .map(move |&sources| (free, sources, late))
            })
        });
        let mut starts: Vec<(f64, Strategy, Hints)> = Vec::new();
        // NOTE [chain-second]: on a smaller view with stages, the chain's plan comes right
        // after the portfolio's first run, unless that run replays nothing.
        let mut chain_done = large;
        // NOTE [chain-abandons]: runs since the chain's plan became the best, all abandoned.
        let mut chain_best = large && best.cost().is_some();
        let mut abandoned = 0;
        let abandons = if view.len() > CHAIN_FIRST_OPS {
            1
        } else {
            CHAIN_ABANDONS
        };
        let mut stopped = false;
        'portfolio: for (free_release, keep_sources, late_keep) in variants {
            let hints = Hints {
                free_release,
                keep_sources,
                late_keep,
                ..Hints::default()
            };
            for strategy in strategies.clone() {
                if chain_best && tier.search_runs == 0 && abandoned >= abandons {
                    stopped = true;
                    break 'portfolio;
                }
                let before = best.cost();
                match portfolio_run(&mut best, &analysis, &tier, strategy, &hints, &mut starts) {
                    // A run that fits nothing did not beat the chain's plan either
                    // (NOTE [chain-abandons]).
                    Ran::Abandoned | Ran::Failed => abandoned += 1,
                    Ran::Done if best.cost() != before => {
                        chain_best = false;
                        abandoned = 0;
                    }
                    Ran::Done => abandoned = 0,
                }
                if best.cost() == Some(0.0) {
                    break 'portfolio;
                }
                if !chain_done {
                    chain_done = true;
                    let before = best.cost();
                    chain_run(&mut best, &chain);
                    if best.cost() != before {
                        chain_best = true;
                        abandoned = 0;
                    }
                }
            }
        }
        // NOTE [bound-guided]: the executor's runs decide what to keep one value at a time,
        // and on a model of many identical layers they make the same choice in every layer:
        // 1.15-1.26x the lower bound's recompute on 48 transformer layers. The bound
        // (`bound.rs`) chooses the held set for the whole graph at once, by a minimum cut; its
        // solutions jump from holding a value kind in every layer to none, and
        // `held_at_forward_end` mixes the two around the budget layer by layer, the latest
        // layers held the fuller (backward meets them first, with the budget full). One run
        // keeps exactly that set in its forward pass, then evicts and rebuilds in backward
        // as the others do: 1.01-1.02x the bound on those 48 layers, and on the benchmark's
        // transformer at 50% of its bytes 1.16x -> 1.05x. It costs up to 18 flows on the
        // bound's network (under a tenth of a second at 5000 ops); past 20,000 ops it is
        // left out.
        let guide = if tier.guided && !stopped && best.cost() != Some(0.0) {
            let (keep, work) = bound::held_at_forward_end(view, budget);
            best.work.units += work;
            keep
        } else {
            None
        };
        if let Some(keep) = guide {
            let hints = Hints {
                keep: Some(keep.into()),
                ..Hints::default()
            };
            let strategy = Strategy::Lookahead { alpha: 1.0 };
            portfolio_run(&mut best, &analysis, &tier, strategy, &hints, &mut starts);
        }
        // Search from the cheapest few runs, sharing the run budget.
        // Not from a run that costs more than the margin above the best (the first run,
        // which nothing abandons, NOTE [chain-second]).
        let worst = best
            .cost()
            .map_or(f64::INFINITY, |cost| cost * SEARCH_MARGIN);
        starts.retain(|start| start.0 <= worst);
        starts.sort_by(|a, b| a.0.total_cmp(&b.0));
        starts.truncate(SEARCH_STARTS);
        let mut runs = tier.search_runs;
        let count = starts.len() as u32;
        for (k, (_, strategy, hints)) in starts.into_iter().enumerate() {
            if runs > 0 && best.cost().is_some_and(|c| c > 0.0) {
                // Each start gets an equal share of what is left.
                let share = runs / (count - k as u32);
                runs -= share - search(&mut best, &analysis, strategy, hints, share);
            }
        }
        if !chain_done && best.cost() != Some(0.0) {
            chain_run(&mut best, &chain);
        }
        if best.cost().is_none() {
            best.work.runs += 1;
            if let Ok((actions, _, _)) = runs::run(view, &analysis, Strategy::Lean, budget) {
                best.consider(Schedule::new(actions));
            }
        }
        // NOTE [search-last]: a view of at most 128 ops gets a short search for a cheaper
        // schedule than the portfolio's (`search.rs`, NOTE [exact-search]): it stores only
        // the states that could still beat it, at most SEARCH_STATES of them.
        if let Some(cost) = best.cost()
            && cost > 0.0
            && exact_small
            && view.len() <= MAX_NODES
        {
            best.work.runs += 1;
            let bytes: u64 = view.nodes().iter().map(|n| n.bytes + n.fixed_bytes).sum();
            let states = SEARCH_STATES.min((bytes / SEARCH_SHARE) as usize);
            if let Optimum::Found { schedule, .. } =
                search::search(view, budget, states, cost * (1.0 - 1e-9))
            {
                best.consider(schedule);
            }
        }
    }
    match best.best {
        Some((_, _, schedule)) => Ok((schedule, best.work)),
        None => Err(Error::Infeasible {
            budget_bytes: budget,
            min_budget_bytes: smallest_budget(view),
            lower_bound: false,
        }),
    }
}

/// The chain's plan (NOTE \[rotor\] in `rotor/mod.rs`), when the view has stages: the DP's
/// schedule, or near the smallest budget (where the DP's units round the room away) the
/// lean chain schedule. A view with `pinned` values (NOTE \[pinned-chain\]) gets the plan
/// of its reduced chain, completed.
fn chain_run(best: &mut Best<'_>, chain: &Chain<'_>) {
    let (view, budget) = (best.view, best.budget);
    if let Some(tupled) = chain.tupled {
        // The augmented view leaves out the constants of the steps it moves (NOTE
        // [tuple-cuts]): they are charged for the whole pass. NOTE [tuple-room]: a
        // translated schedule may hold a member from its computation to its tuple beyond
        // what the plan counted; one that goes over the budget is planned again with the
        // room less the excess (at least a 64th of the room), then twice, four times... that.
        let mut room = budget.checked_sub(tupled.moved_fixed);
        for k in 0..TUPLE_TRIES {
            let Some((schedule, work)) = room.and_then(|r| plan_with(&tupled.view, r, false).ok())
            else {
                break;
            };
            best.work.runs += work.runs;
            best.work.units += work.units;
            let schedule = tupled.translated(view.len(), schedule);
            match simulate(view, &schedule, budget) {
                Err(Error::OverBudget { held_bytes, .. }) => {
                    // The DP counts in coarse units: the cut is at least a 64th of the
                    // room, and doubles on each try.
                    room = room.and_then(|r| r.checked_sub((held_bytes - budget).max(r / 64) << k));
                }
                Ok(_) => {
                    best.consider(schedule);
                    break;
                }
                Err(_) => break,
            }
        }
        return;
    }
    if rotor::stages_of(view, PORTFOLIO).is_none()
        && let Some(pinned) = chain.pinned
    {
        // The reduced view has stages: its whole portfolio, the chain's plan among it (near
        // keep-all the executor's runs beat the DP's coarse units, `CHAIN_FIRST_OPS`).
        let planned = pinned
            .room(budget)
            .and_then(|room| plan_with(&pinned.view, room, false).ok());
        if let Some((schedule, work)) = planned {
            best.work.runs += work.runs;
            best.work.units += work.units;
            if best.consider(pinned.completed(view, &schedule, |_| true, &[])) {
                return;
            }
        }
        if best.cost().is_none()
            && let Some(schedule) = pinned_plan(view, pinned, budget)
        {
            best.work.runs += 1;
            best.consider(schedule);
        }
        return;
    }
    let Some(stages) = rotor::stages_of(view, PORTFOLIO) else {
        return;
    };
    best.work.runs += 1;
    if let Some(schedule) = chain_dp(view, &stages, budget) {
        best.work.units += schedule.len() as u64;
        best.consider(schedule);
    }
    if best.cost().is_none() && budget >= rotor::min_budget(view, &stages) {
        best.consider(rotor::lean_chain(view, &stages));
    }
}

/// The chain plan of `pinned`'s reduced view under the budget less the pinned bytes,
/// completed for `view` (NOTE \[pinned-chain\]): the DP's schedule when the completed one
/// fits, else the lean chain schedule's where the room allows it.
fn pinned_plan(view: &GraphView, pinned: &Pinned, budget: u64) -> Option<Schedule> {
    let room = pinned.room(budget)?;
    let stages = rotor::stages_of(&pinned.view, PORTFOLIO)?;
    let complete = |schedule: &Schedule| pinned.completed(view, schedule, |_| true, &[]);
    if let Some(schedule) = chain_dp(&pinned.view, &stages, room).map(|s| complete(&s))
        && simulate(view, &schedule, budget).is_ok()
    {
        return Some(schedule);
    }
    (room >= rotor::min_budget(&pinned.view, &stages))
        .then(|| complete(&rotor::lean_chain(&pinned.view, &stages)))
}

/// The schedule of Rotor's DP over `stages`, when one fits its units.
fn chain_dp(view: &GraphView, stages: &super::blocks::Stages, budget: u64) -> Option<Schedule> {
    rotor::Rotor::new(view, stages, budget)?.schedule()
}

/// The plan of the view's chain of stages alone (NOTE \[rotor\] in `rotor/mod.rs`): Rotor's
/// dynamic program over the stages (each stage run by its inner plans, taped, or split at
/// a kept boundary), or near the chain's smallest budget, where the DP's memory units round
/// the room away, the lean chain schedule. `None` when the view is not a chain of stages or
/// the budget is below the chain's smallest.
///
/// [`plan`] considers this schedule among others and returns the cheapest, so its recompute
/// is never above this one's: the gap says what the rest of the portfolio finds beyond the
/// chain's optimum (which is exact in Rotor's model of a chain, not over all schedules).
///
/// A view whose chain's blocks also read a value computed before them (NOTE
/// \[pinned-chain\] in `pinned.rs`) gets its reduced chain's plan, completed.
pub fn chain_plan(view: &GraphView, budget: u64) -> Option<Schedule> {
    let Some(stages) = rotor::stages_of(view, PORTFOLIO) else {
        return pinned_plan(view, pinned::reduced(view, PORTFOLIO).as_ref()?, budget);
    };
    if let Some(schedule) = chain_dp(view, &stages, budget)
        && simulate(view, &schedule, budget).is_ok()
    {
        return Some(schedule);
    }
    (budget >= rotor::min_budget(view, &stages)).then(|| rotor::lean_chain(view, &stages))
}

/// Whether the chain's plan goes first on a view whose tier runs no search (more than 512
/// ops) because the budget is tight for its chain of stages (NOTE [chain-tight]).
///
/// NOTE [chain-tight]: near a chain's smallest budget the portfolio's first run, which
/// nothing abandons (no plan is known yet), replayed 1.8-4.5x what the chain's plan does
/// (a 300-block power iteration: 274 forward passes against 150 at the smallest budget, 65
/// against 14.6 at one slot above it). Within `TIGHT_CHAIN` times the chain's smallest
/// budget the chain's plan goes first, and the first run is abandoned behind it like the
/// others. Further from it the first run is cheap (near keep-all it replays nothing and the
/// chain's DP, whose tables grow with the budget, is not paid for). Measured (CPU time of
/// `examples/plan_chain`, same plans): 1,000 blocks at the smallest budget 15.5 -> 10.6 s,
/// at one slot 1.62 -> 0.71 s; 300 blocks 1.45 -> 1.01 s and 0.26 -> 0.13 s.
fn tight_chain(view: &GraphView, chain: &Chain<'_>, tier: &Tier, budget: u64) -> bool {
    if tier.search_runs > 0 {
        return false;
    }
    let smallest = if let Some(stages) = rotor::stages_of(view, PORTFOLIO) {
        rotor::min_budget(view, &stages)
    } else if let Some(pinned) = chain.pinned
        && let Some(stages) = rotor::stages_of(&pinned.view, PORTFOLIO)
    {
        pinned.bytes + rotor::min_budget(&pinned.view, &stages)
    } else if let Some(tupled) = chain.tupled
        && let Some(stages) = rotor::stages_of(&tupled.view, PORTFOLIO)
    {
        rotor::min_budget(&tupled.view, &stages)
    } else {
        return false;
    };
    budget <= smallest.saturating_mul(TIGHT_CHAIN)
}

/// How a view without stages of its own may still be planned as a chain.
struct Chain<'a> {
    /// Its blocks read values computed before them (NOTE \[pinned-chain\]).
    pinned: Option<&'a Pinned>,
    /// Its blocks hand several values to the next (NOTE \[tuple-cuts\]).
    tupled: Option<&'a Tupled>,
}

/// How many times a chain's smallest budget counts as tight (NOTE [chain-tight]).
const TIGHT_CHAIN: u64 = 2;

/// One executor run of the portfolio: its schedule is considered, and it may start a search.
/// Without a search to start from them, runs that already cost more than the best schedule
/// are abandoned (NOTE [portfolio-bound]).
fn portfolio_run(
    best: &mut Best<'_>,
    analysis: &Arc<Analysis>,
    tier: &Tier,
    strategy: Strategy,
    hints: &Hints,
    starts: &mut Vec<(f64, Strategy, Hints)>,
) -> Ran {
    best.work.runs += 1;
    // A search may improve a start by a few tenths: with one to follow, a run is kept up
    // to a margin above the best (NOTE [chain-second]).
    let margin = if tier.search_runs == 0 {
        1.0
    } else {
        SEARCH_MARGIN
    };
    let limit = best.cost().map_or(f64::INFINITY, |cost| cost * margin);
    match runs::run_within(best.view, analysis, strategy, best.budget, hints, limit) {
        Ok(Run::Done(actions, cost, Work { units, .. }, _)) => {
            best.work.units += units;
            best.consider(Schedule::new(actions));
            starts.push((cost, strategy, hints.clone()));
            Ran::Done
        }
        Ok(Run::Abandoned(Work { units, .. })) => {
            best.work.units += units;
            Ran::Abandoned
        }
        Err(_) => Ran::Failed,
    }
}

/// How a portfolio run ended.
enum Ran {
    /// It finished (or found no schedule).
    Done,
    /// It cost more than the best schedule before it finished.
    Abandoned,
    /// It found no schedule within the budget.
    Failed,
}

/// How much the planner tries, by graph size: small graphs get the whole portfolio and a
/// wide search; large ones the variants that matter there, and no search (planning stays a
/// small constant number of near-linear runs).
struct Tier {
    alphas: &'static [f64],
    dtr: bool,
    late: &'static [bool],
    free_release: &'static [bool],
    keep_sources: &'static [bool],
    search_runs: u32,
    /// Whether a run follows the lower bound's held set (NOTE [bound-guided]).
    guided: bool,
}

impl Tier {
    fn of(view: &GraphView) -> Self {
        let n = view.len();
        // Pin release variants only matter when some value cannot be rebuilt.
        let pinned = (0..n as u32).any(|v| !view.rebuildable(v));
        let free_release: &'static [bool] = if pinned { &[false, true] } else { &[false] };
        if n <= 64 {
            Tier {
                alphas: &ALPHAS,
                dtr: true,
                late: &[false, true],
                free_release,
                keep_sources: &[false, true],
                search_runs: 512,
                guided: true,
            }
        } else if n <= 512 {
            Tier {
                alphas: &ALPHAS,
                dtr: false,
                late: &[false, true],
                free_release,
                keep_sources: &[false],
                search_runs: 32,
                guided: true,
            }
        } else if n <= 20_000 {
            Tier {
                alphas: &ALPHAS_LATE_ZERO,
                dtr: false,
                late: &[false, true],
                free_release,
                keep_sources: &[false],
                search_runs: 0,
                guided: true,
            }
        } else {
            Tier {
                alphas: &[1.0],
                dtr: false,
                late: &[false],
                free_release: &[false],
                keep_sources: &[false],
                search_runs: 0,
                guided: false,
            }
        }
    }
}

/// Iterated limited-discrepancy search over a run's decisions (NOTE [decisions] in
/// `exec/`): from the current run, try every single decision taken another way and move to
/// the cheapest such run if it is cheaper; when none is, try pairs of the most promising
/// single changes. Stops when nothing helps or `runs` executor runs are spent; returns the
/// runs left.
fn search(
    best: &mut Best<'_>,
    analysis: &Arc<Analysis>,
    strategy: Strategy,
    mut hints: Hints,
    mut runs: u32,
) -> u32 {
    let view = best.view;
    let Ok((_, mut cost, _, mut decisions)) =
        runs::run_logged(view, analysis, strategy, best.budget, &hints)
    else {
        return runs;
    };
    // Runs `choices` and keeps it in `found` if it is the cheapest so far.
    let trial = |best: &mut Best<'_>,
                 choices: Vec<u8>,
                 found: &mut Option<(Vec<u8>, f64, exec::Decisions)>,
                 hints: &Hints|
     -> Option<f64> {
        best.work.runs += 1;
        let trial = Hints {
            choices,
            ..hints.clone()
        };
        let (actions, trial_cost, work, trial_decisions) =
            runs::run_logged(view, analysis, strategy, best.budget, &trial).ok()?;
        best.work.units += work.units;
        if found.as_ref().is_none_or(|f| trial_cost < f.1) {
            best.consider(Schedule::new(actions));
            *found = Some((trial.choices, trial_cost, trial_decisions));
        }
        Some(trial_cost)
    };
    let with = |choices: &[u8], k: usize, option: u8| {
        let mut choices = choices.to_vec();
        choices.resize(choices.len().max(k + 1), 0);
        choices[k] = option;
        choices
    };
    while cost > 0.0 && runs > 0 {
        let mut found: Option<(Vec<u8>, f64, exec::Decisions)> = None;
        let mut singles: Vec<(f64, usize, u8)> = Vec::new();
        'sweep: for (k, &options) in decisions.iter().enumerate() {
            let current = hints.choices.get(k).copied().unwrap_or(0);
            for option in (0..options).filter(|&o| o != current) {
                if runs == 0 {
                    break 'sweep;
                }
                runs -= 1;
                if let Some(c) = trial(best, with(&hints.choices, k, option), &mut found, &hints) {
                    singles.push((c, k, option));
                }
            }
        }
        if found.as_ref().is_none_or(|f| f.1 >= cost) {
            // No single change helps: try pairs of the most promising ones.
            found = None;
            singles.sort_by(|a, b| a.0.total_cmp(&b.0));
            singles.truncate(PAIRED);
            'pairs: for (i, &(_, k1, o1)) in singles.iter().enumerate() {
                for &(_, k2, o2) in &singles[i + 1..] {
                    if k1 == k2 {
                        continue;
                    }
                    if runs == 0 {
                        break 'pairs;
                    }
                    runs -= 1;
                    let choices = with(&with(&hints.choices, k1, o1), k2, o2);
                    trial(best, choices, &mut found, &hints);
                }
            }
        }
        match found {
            Some((choices, trial_cost, trial_decisions)) if trial_cost < cost => {
                hints.choices = choices;
                cost = trial_cost;
                decisions = trial_decisions;
            }
            _ => return runs,
        }
    }
    runs
}
/// The smallest budget the planner's own plans ([`plan`]) run with: the lean schedule's
/// ([`min_feasible_budget`]) or, on a view with chain structure (NOTE \[stages\] in
/// `blocks.rs`), the lean chain schedule's, whichever is smaller. On a chain of blocks
/// it does not grow with the chain's length: one boundary value and the largest block's own
/// need, plus the constants.
///
/// A view whose chain's blocks also read a value computed before them (NOTE
/// \[pinned-chain\] in `pinned.rs`) has the pinned bytes plus the reduced chain's smallest.
pub fn smallest_budget(view: &GraphView) -> u64 {
    let lean = min_feasible_budget(view);
    if let Some(stages) = super::rotor::stages_of(view, PORTFOLIO) {
        return lean.min(super::rotor::min_budget(view, &stages));
    }
    // A reduced view cut by tuples only (NOTE [pinned-heads]) has no such guarantee.
    match super::pinned::reduced(view, PORTFOLIO)
        .and_then(|pinned| Some((super::rotor::stages_of(&pinned.view, PORTFOLIO)?, pinned)))
    {
        Some((stages, pinned)) => {
            lean.min(pinned.bytes + super::rotor::min_budget(&pinned.view, &stages))
        }
        None => lean,
    }
}

/// Planning on a miss of the plan cache: here rather than in `cache.rs`, which the planners
/// below this file name (for signatures) and so cannot name [`plan`] back.
impl PlanCache {
    /// The cached plan for `view` under `budget_bytes`, planning and caching it if needed.
    ///
    /// # Errors
    /// As [`plan`].
    pub fn get_or_plan(
        &mut self,
        view: &GraphView,
        budget_bytes: u64,
    ) -> Result<CachedPlan, Error> {
        match self.get(signature(view), budget_bytes) {
            Some(entry) => Ok(entry),
            None => self.get_or_plan_shared(&Arc::new(view.clone()), budget_bytes),
        }
    }

    /// [`get_or_plan`](Self::get_or_plan) for a view held elsewhere too (not copied).
    ///
    /// # Errors
    /// As [`plan`].
    pub fn get_or_plan_shared(
        &mut self,
        view: &Arc<GraphView>,
        budget_bytes: u64,
    ) -> Result<CachedPlan, Error> {
        self.get_or_plan_signed(view, signature(view), budget_bytes)
    }

    /// [`get_or_plan_shared`](Self::get_or_plan_shared) for a view whose signature is
    /// known (not hashed again).
    ///
    /// # Errors
    /// As [`plan`].
    pub fn get_or_plan_signed(
        &mut self,
        view: &Arc<GraphView>,
        signature: u64,
        budget_bytes: u64,
    ) -> Result<CachedPlan, Error> {
        if let Some(entry) = self.get(signature, budget_bytes) {
            return Ok(entry);
        }
        let schedule = plan(view, budget_bytes)?;
        Ok(self.insert_shared(view.clone(), budget_bytes, schedule))
    }
}
