//! Optimal checkpointing of a chain of stages of different sizes and costs (NOTE [rotor]).
//!
//! The chain's dynamic program, by topic: the DP of one level of items (`level.rs`: NOTE
//! \[rotor-skip\], \[rotor-owned\], \[rotor-run-ahead\]), the levels a long chain is cut
//! into (`cuts.rs`: NOTE \[group-owned\], \[level-cuts\]), a chain that repeats solved by
//! block counts (`run.rs`: NOTE \[rotor-run\]), the planner at one budget that picks
//! among them ([`Rotor`], `solve.rs`: NOTE \[planner-memory\]), and the schedule read
//! back from the DP's choices (`emit.rs`). This file holds the entry points: the stages a
//! view is planned by, the lean chain schedule and its smallest budget, and resuming a
//! step whose forward pass ran.
//!
//! NOTE [rotor]: after Beaumont, Eyraud-Dubois, Herrmann, Joly and Shilova, "Optimal
//! checkpointing for heterogeneous chains: how to train deep neural networks with limited
//! memory" (2019). A view with stages (NOTE \[stages\] in `blocks.rs`) is a chain: stage `k`
//! reads only its input, the boundary of stage `k - 1`. With room `m` (memory units beyond
//! what the caller holds and beyond the constants of the stages not stepped yet):
//!
//! ```text
//! rev(s, t, m) = run the backward steps of stages t..s, the input of s held, nothing of
//!                s..=t held, at the least replay cost. The cheapest of:
//!   base  (s = t): the stage's cheapest inner plan whose rev form fits m;
//!   tape  (a leaf stage): replay s keeping what its steps read and its boundary (the
//!                 tape), rev(s + 1, t, m - tape), then the steps of s from the tape;
//!   split (s < s' <= t): replay s..s'-1 straight (each stage's values freed after their
//!                 last use, each boundary after the next stage read it), keep the boundary
//!                 of s'-1, rev(s', t, m - boundary), free it, rev(s, s'-1, m + the
//!                 constants of s'..=t, released by then).
//! top(s, m)    = the same for s..=last, its first pass being the forward pass (free, and
//!                holding nothing it does not keep).
//! ```
//!
//! Memory is counted in units (at most [`UNITS`](solve::UNITS) for the budget; boundary
//! sizes round up, so the plan is valid and the room is used within a unit). The DP over
//! one level of `n` items is O(n^3 m) and a level has at most [`GROUP`](cuts::GROUP) items;
//! longer chains are grouped: consecutive items make a group whose own rev and top, for
//! every room, come from the DP of its items (a block that is itself a chain), so that
//! checkpoints sit at group ends at the upper levels and anywhere inside a group. Groups of
//! the same items share one DP: a chain of 10,000 equal blocks solves a handful of DPs.
//!
//! Revolve is the case of single-op stages of equal sizes and costs whose steps read their
//! input; the tests check that this DP reaches its closed form.
//!
//! Cost model: O(n^3 m / 3) per distinct group (pinned and owned tables), `n <= GROUP`,
//! `m <= UNITS`; a run whose stages may free their inputs also solves the grouped levels
//! (NOTE [run-or-levels]); emitting the schedule is linear in its length, with an explicit
//! stack.
//!
//! # Invariants
//! - The schedule this module emits passes `simulate` under its budget (the planner checks
//!   it before use) and costs what the DP says (`planned_cost`).

mod cuts;
mod emit;
mod level;
mod run;
mod solve;

use std::sync::Arc;

use super::blocks::{Planner, Stages};
use super::{Action, GraphView, Schedule};
use cuts::group_key;
pub(crate) use emit::replay;
use emit::{inner_rev, sweep};
pub(crate) use solve::Rotor;
use solve::fixed_total;

/// Views of more ops than this are long chains for the trade-off report (rows whose plans
/// replay too much are priced, not planned).
pub(crate) const LONG_CHAIN: usize = 2_000;

thread_local! {
    /// How deep the planner is in stages' inner plans (a stage's own stages are planned as
    /// a chain too, to [`MAX_NESTING`] levels).
    static NESTING: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// The most levels of stages within stages the planner plans as chains.
const MAX_NESTING: u32 = 3;

thread_local! {
    /// The stages of the views planned last on this thread, by a hash of their structure
    /// and costs: a trade-off report plans one view at ten budgets, and a stage's inner
    /// plans do not depend on the budget.
    static RECENT: core::cell::RefCell<Vec<(u64, Option<Arc<Stages>>)>> =
        const { core::cell::RefCell::new(Vec::new()) };
}

/// How many views' stages [`RECENT`] keeps.
const RECENT_KEPT: usize = 4;

/// The stages of `view` if the planner plans it as a chain here (not too deep in stages'
/// inner plans), their inner plans by `planner`.
pub(crate) fn stages_of(view: &GraphView, planner: Planner) -> Option<Arc<Stages>> {
    let depth = NESTING.with(|n| n.get());
    if depth >= MAX_NESTING {
        return None;
    }
    let costs: Vec<u64> = view.nodes().iter().map(|n| n.cost.to_bits()).collect();
    let key = group_key(&costs) ^ super::signature(view).rotate_left(17);
    let cached = RECENT.with(|recent| {
        let recent = recent.borrow();
        recent
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| s.clone())
    });
    if let Some(stages) = cached {
        return stages;
    }
    NESTING.with(|n| n.set(depth + 1));
    let stages = Stages::of(view, planner).map(Arc::new);
    NESTING.with(|n| n.set(depth));
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        if recent.len() >= RECENT_KEPT {
            recent.remove(0);
        }
        recent.push((key, stages.clone()));
    });
    stages
}

/// The smallest budget a chain of `stages` runs with (the lean chain schedule: for each
/// stage from the last, replay from the first stage to its input, then its smallest inner
/// plan), whatever its length: one boundary and the largest stage's own need, plus the
/// constants.
pub(crate) fn min_budget(view: &GraphView, stages: &Stages) -> u64 {
    let mut need = 0u64;
    let mut sweep = 0u64; // the most a sweep from the first stage to stage k's input holds
    for k in 0..stages.len() {
        let shape = &stages.shape[k];
        let input = if k == 0 {
            0
        } else {
            stages.shape[k - 1].boundary
        };
        let inner = shape
            .inners
            .iter()
            .map(|inner| inner.rev_peak.saturating_sub(shape.fixed))
            .min()
            .unwrap_or(u64::MAX);
        need = need.max(sweep).max(input.saturating_add(inner));
        sweep = sweep.max(if k == 0 {
            shape.sweep.peak
        } else {
            shape.sweep_through_peak
        });
    }
    need + fixed_total(view)
}

/// The lean chain schedule of [`min_budget`]: a forward pass that keeps nothing, then for
/// each stage from the last, a straight replay to its input, kept, and its smallest inner
/// plan in the rev form. Valid at [`min_budget`]; quadratic in replays (the fallback where
/// the DP's units round a budget near the smallest away).
pub(crate) fn lean_chain(view: &GraphView, stages: &Stages) -> Schedule {
    let mut out: Vec<Action> = (0..view.len() as u32).map(Action::Compute).collect();
    for k in (0..stages.len()).rev() {
        if k > 0 {
            sweep(stages, 0..k, &mut out);
        }
        let shape = &stages.shape[k];
        let smallest = (0..shape.inners.len())
            .min_by_key(|&i| shape.inners[i].rev_peak)
            .expect("a stage has its keep-all plan");
        inner_rev(stages, k, shape, smallest, &mut out);
        if k > 0 {
            out.push(Action::Free(stages.end[k - 1]));
        }
    }
    Schedule::new(out)
}

/// A backward pass for a step whose forward pass already ran and left `held` held, as a
/// whole schedule (a forward pass that keeps `held`, then the backward): the held values
/// are dropped, and the chain is reversed from there by the DP (`rev` over the whole
/// chain). Returns the schedule and its replay cost; `None` when the view is not a chain of
/// stages or nothing fits. The engine's first step under a budget, which has no plan yet,
/// resumes this way when it is cheaper than its online eviction.
pub(crate) fn resume(
    view: &GraphView,
    held: &[u32],
    budget: u64,
    planner: Planner,
) -> Option<(Schedule, f64)> {
    let schedule = resume_schedule(view, held, budget, planner)?;
    let cost = super::simulate(view, &schedule, budget)
        .ok()?
        .recompute_cost;
    Some((schedule, cost))
}

/// [`resume`]'s schedule, not checked (a caller that translates it checks the translation).
/// It runs in the step it plans for (NOTE \[planner-memory\] in `solve.rs`): the held
/// values' keeps and drops go into the DP's schedule in place, not into a copy of it (0.7
/// MB of the first step's peak on Burn's `Lstm` on every output, 128 steps).
pub(crate) fn resume_schedule(
    view: &GraphView,
    held: &[u32],
    budget: u64,
    planner: Planner,
) -> Option<Schedule> {
    let stages = stages_of(view, planner)?;
    let mut held = held.to_vec();
    held.sort_unstable();
    held.dedup();
    let body = match Rotor::for_resume(view, &stages, budget).and_then(|r| r.lean_schedule()) {
        Some(schedule) => schedule,
        None if budget >= min_budget(view, &stages) => lean_chain(view, &stages),
        None => return None,
    };
    let mut actions = body.into_actions();
    let n = view.len();
    let mut head = Vec::with_capacity(n + 2 * held.len());
    for &a in &actions[..n] {
        head.push(a);
        if let Action::Compute(i) = a
            && held.binary_search(&i).is_ok()
        {
            head.push(Action::Keep(i));
        }
    }
    head.extend(held.iter().map(|&h| Action::Free(h)));
    actions.splice(..n, head);
    Some(Schedule::new(actions))
}
