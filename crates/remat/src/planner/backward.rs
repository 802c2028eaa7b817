//! How a backward pass runs from the state its forward pass left, when it follows no plan
//! (the engine's first step under a budget, run online, or a step that departed from its
//! plan): [`plan_backward`] weighs the planner's ways of resuming on a [`GraphView`] whose
//! values `held` are held, and names the smallest budget that works when none fits. This is
//! the choice, not the running: the engine (`checkpoint/budget/pass.rs`) builds the view,
//! drops what it is told to and carries the result out; the plan it followed, when it did,
//! is the engine's (its plan cache) and is not weighed here. Not the executor's backward
//! pass (`exec/backward.rs`), which every generator runs.
//!
//! The choice, in order:
//! - **Online**: Revolve per segment on a chain (NOTE \[resume-chain\] in `revolve.rs`), the
//!   chain's DP on a long chain of blocks ([`chain_resume`], over [`LONG_CHAIN`] ops: NOTE
//!   \[rotor\] in `rotor/mod.rs`), and online eviction resumed over the view ([`Dtr`]),
//!   abandoned once it replays more than the best of the others; the cheapest wins. On a
//!   long view the chain's DP is planned only where online eviction replays more than four
//!   forward passes (NOTE [online-first]: its planning is part of the step's peak).
//! - **The lean state**, when nothing fits online: every held value that can be rebuilt is
//!   dropped, then the cheapest of the chain's DP, the whole-step plan run once more
//!   ([`replay_plan`], NOTE \[replay-plan\] in `resume.rs`) and the online eviction (again
//!   abandoned past the others' cost; on a long view run first, as online).
//! - **Too small**: the smallest budget that works from the lean state, by bisection
//!   (planning only), in the error.
//!
//! # Invariants
//! - Nothing here sees a tensor: values are view indices, and dropping one is the engine's
//!   business (the `drop` callback of [`plan_backward`]).
//! - Every plan returned starts from the state it was given: the held values, or the lean
//!   state once the engine was told to drop the others.

use std::ops::Range;

use super::resume::{chain_resume, replay_plan, replay_plan_keeping};
use super::rotor::LONG_CHAIN;
use super::{Action, Dtr, Error, GraphView, Node, Schedule, grow, revolve, smallest_budget};

/// Online eviction resumed over a pass ([`online_steps`]): its actions, and for each step
/// of the view's step order the range of them to carry out before finishing that step (the
/// first range starts with the drops of [`Dtr::begin_backward_over_view`]). Every action lies in one
/// range, in order.
pub(crate) struct OnlineSteps {
    /// The whole backward pass's actions.
    pub(crate) actions: Schedule,
    /// Per step, in step order, a range of `actions`.
    pub(crate) ranges: Vec<Range<u32>>,
}

impl OnlineSteps {
    /// The replays' cost at `nodes`' costs, summed step by step.
    pub(crate) fn replay_cost(&self, nodes: &[Node]) -> f64 {
        self.ranges
            .iter()
            .map(|r| {
                replay_cost(
                    nodes,
                    &self.actions.actions()[r.start as usize..r.end as usize],
                )
            })
            .sum()
    }
}

/// How a backward pass runs ([`plan_backward`]).
pub(crate) enum BackwardPlan {
    /// Online eviction's actions, a range per step.
    Online(OnlineSteps),
    /// A whole-step schedule (a forward pass that keeps the state resumed from, then the
    /// backward), resumed after its forward pass ran: the engine carries out its backward
    /// part, cut per step by [`Schedule::index`], the drops right after its last forward op
    /// included.
    Whole(Schedule),
}

/// The replay time of `actions`' `Replay`s, at the nodes' costs.
fn replay_cost(nodes: &[Node], actions: &[Action]) -> f64 {
    actions
        .iter()
        .filter_map(|a| match *a {
            Action::Replay(v) => Some(nodes[v as usize].cost),
            _ => None,
        })
        .sum()
}

/// Online eviction ([`Dtr`]) resumed over `view` with `held` held, under `budget`: its
/// actions, step by step, for the whole backward pass. The engine makes it once, for the
/// room other graphs leave, before its own plan is looked at, and hands it to
/// [`plan_backward`] as `made`.
///
/// # Errors
/// As [`Dtr::resume_over`], [`Dtr::begin_backward`] and [`Dtr::on_step`], naming a lower bound
/// on the smallest budget ([`Dtr::bound_errors`]).
pub(crate) fn online_steps(
    view: &GraphView,
    held: &[u32],
    budget: u64,
) -> Result<OnlineSteps, Error> {
    let steps = online_within(view, held, budget, f64::INFINITY)?;
    Ok(steps.expect("a plan without a limit is never abandoned"))
}

/// [`online_steps`], abandoned (`Ok(None)`) once its replays cost more than `limit`.
fn online_within(
    view: &GraphView,
    held: &[u32],
    budget: u64,
    limit: f64,
) -> Result<Option<OnlineSteps>, Error> {
    // Over the view's nodes, not a copy of them (0.9 MB of the first step's peak on Burn's
    // `Lstm`, 128 steps: the step's own heap was 6.1 MB), and its backward over the view
    // itself (NOTE [resume-view] in `exec/backward.rs`).
    let mut dtr = Dtr::resume_over_view(budget, view, held)?;
    dtr.bound_errors();
    let nodes = view.nodes();
    let steps = view.step_order().len();
    let mut ranges: Vec<Range<u32>> = Vec::with_capacity(steps);
    let mut actions = dtr.begin_backward_over_view().to_vec();
    let mut start = 0;
    let mut replayed = replay_cost(nodes, &actions);
    for _ in 0..steps {
        // Each step's actions are copied here, not held by the planner too (NOTE
        // [online-first]); the copy grows gently (NOTE [gentle-growth] in `grow.rs`).
        dtr.forget_actions();
        let step = dtr.on_step()?;
        replayed += replay_cost(nodes, step);
        if replayed > limit {
            return Ok(None);
        }
        let len = actions.len() + step.len();
        grow::room_for(&mut actions, len);
        actions.extend_from_slice(step);
        let end = u32::try_from(actions.len())
            .expect("remat internal error: a pass of more than u32::MAX actions");
        ranges.push(start..end);
        start = end;
    }
    Ok(Some(OnlineSteps {
        actions: Schedule::new(actions),
        ranges,
    }))
}

/// How the backward pass over `view` runs under `budget`, its forward pass having left
/// `held` held (see the module docs for the order of the choice). `made`: the online
/// eviction already made for this state and budget ([`online_steps`]), weighed in place of
/// making it again. `rebuildable`: whether the engine can drop a held value and rebuild it.
///
/// When nothing fits from the held state, the plan is made from the lean state: `drop` is
/// called once for each held value that `rebuildable` accepts, in `held`'s order, before
/// the planner plans from there, so that the engine frees those values before the lean
/// plans are made beside them; the plan returned then holds only the others.
///
/// `planned` is set to the whole-step plan of `view` under `budget` where one was made on
/// the way (NOTE \[first-step-plan\]).
///
/// # Errors
/// [`Error::Infeasible`] when no plan fits, even from the lean state: its
/// `min_budget_bytes` is the smallest budget with which this function plans from the lean
/// state (the planner's [`smallest_budget`] where that works, else found by bisection),
/// never below `budget`.
pub(crate) fn plan_backward(
    view: &GraphView,
    held: &[u32],
    budget: u64,
    made: Option<OnlineSteps>,
    rebuildable: impl Fn(u32) -> bool,
    mut drop: impl FnMut(u32),
    planned: &mut Option<Schedule>,
) -> Result<BackwardPlan, Error> {
    if let Ok(plan) = online(view, held, budget, made) {
        return Ok(plan);
    }
    // The forward pass left a state the backward pass cannot continue from within the
    // budget: drop every value that can be rebuilt (the lean state, from which any budget
    // at or above the planner's smallest one works) and plan again.
    let mut pinned = Vec::new();
    for &v in held {
        if rebuildable(v) {
            drop(v);
        } else {
            pinned.push(v);
        }
    }
    if let Some(plan) = lean(view, &pinned, budget, planned) {
        return Ok(plan);
    }
    Err(Error::Infeasible {
        budget_bytes: budget,
        min_budget_bytes: smallest_lean_budget(view, &pinned, budget),
        lower_bound: false,
    })
}

/// NOTE [first-step-plan]: a graph's first step under a budget (online, NOTE
/// \[forward-overflow\] in `checkpoint/budget/session.rs`) plans its pass from the lean
/// state here, where the whole-step plan replayed (NOTE \[replay-plan\] in `resume.rs`)
/// makes `plan(view, budget)`; after the pass the engine made the same plan again for the
/// next steps. On Burn's `Lstm` at a tenth of K (128 steps) that second plan was a fifth of
/// the first step's time. The plan made here is handed back (`planned`), and the engine
/// caches it when the view it planned is the one the pass ran (no replay was timed since)
/// under the same budget.
///
/// NOTE [online-first]: the pass runs in the step it plans for, beside every value the
/// forward pass kept, so what the planner holds while it weighs the ways of resuming is part
/// of the step's peak (NOTE \[planner-memory\] in `rotor/solve.rs`). Online eviction and
/// Revolve need a few arrays of the view's length; the chain's DP and the whole-step plan
/// replayed need the view again (reduced, made of tuples), their tables and schedules. On
/// Burn's `Lstm` under half of K (4 KiB values) that planning was 2.9 MB of a first step
/// that peaked at 1.2x SaveAll's heap on 128 steps (on 1,024 steps, from the lean state,
/// 1.17x), and online eviction won each time. So online eviction runs before them, and they
/// are weighed only where it replays more than [`ONLINE_ENOUGH`] forward passes (or cannot
/// go on, from the lean state). Revolve is weighed first, as before: it is cheap to plan.
const ONLINE_ENOUGH: f64 = 4.0;

/// The replay cost within which online eviction is taken without planning the others
/// (NOTE [online-first]): [`ONLINE_ENOUGH`] forward passes of a view over [`LONG_CHAIN`]
/// ops; `None` on a shorter view, whose other plans are small to make.
fn online_enough(view: &GraphView) -> Option<f64> {
    (view.len() > LONG_CHAIN).then(|| ONLINE_ENOUGH * view.forward_cost())
}

/// The cheapest plan from the held state: Revolve, online eviction where it replays less
/// and at most [`ONLINE_ENOUGH`] forward passes (NOTE [online-first]), else also the chain's
/// DP on a long chain of blocks, online eviction abandoned once it replays more than the
/// others.
fn online(
    view: &GraphView,
    held: &[u32],
    budget: u64,
    made: Option<OnlineSteps>,
) -> Result<BackwardPlan, Error> {
    let nodes = view.nodes();
    let cost_of = |plan: &Option<(Schedule, f64)>| plan.as_ref().map_or(f64::INFINITY, |p| p.1);
    // NOTE [resume-chain] in `revolve.rs`: on a chain, Revolve per segment from this state.
    let revolve = revolve::resume(view, held, budget);
    // NOTE [rotor] in `rotor/mod.rs`: on a long chain of blocks, the chain's DP from this
    // state with the held values dropped, when it replays less (on a short one the online
    // plan is near it, and the DP's tables would be planner memory held beside every kept
    // value: `memory.rs`, `a_budget_bounds_what_the_allocator_sees`).
    let enough = online_enough(view);
    let first_limit = cost_of(&revolve).min(enough.unwrap_or(f64::INFINITY));
    // Made for this state and this budget, without a limit; else made within the limit.
    let first = match made {
        Some(steps) => Ok(Some(steps)),
        None => online_within(view, held, budget, first_limit),
    };
    let first = match first {
        Ok(Some(steps)) if steps.replay_cost(nodes) <= first_limit => {
            return Ok(BackwardPlan::Online(steps));
        }
        // Online eviction cannot go on from here: Revolve may, from the values held. The
        // chain's DP drops them all, as the lean state does, where [`plan_backward`] goes
        // next.
        Err(error) => {
            return revolve
                .map(|(schedule, _)| BackwardPlan::Whole(schedule))
                .ok_or(error);
        }
        other => other,
    };
    let chain = enough.and_then(|_| chain_resume(view, held, budget));
    let best = match (revolve, chain) {
        (Some(r), Some(c)) => Some(if c.1 < r.1 { c } else { r }),
        (r, c) => r.or(c),
    };
    let limit = cost_of(&best);
    let attempt = match first {
        // Made without a limit: weighed as it is.
        Ok(Some(steps)) => (steps.replay_cost(nodes) <= limit).then_some(steps),
        // Abandoned past `enough`: it may still replay less than the others.
        Ok(None) if limit > first_limit => online_within(view, held, budget, limit).ok().flatten(),
        _ => None,
    };
    match (attempt, best) {
        (Some(steps), _) => Ok(BackwardPlan::Online(steps)),
        (None, Some((schedule, _))) => Ok(BackwardPlan::Whole(schedule)),
        (None, None) => unreachable!("only a limit abandons a plan"),
    }
}

/// The cheapest plan from the lean state (`pinned` held, every other value dropped): online
/// eviction where it replays at most [`ONLINE_ENOUGH`] forward passes on a long view (NOTE
/// [online-first]), else the cheapest of a chain of blocks (NOTE \[rotor\]: its smallest
/// budget does not grow with the chain's length, the online eviction's does), the whole-step
/// plan run once more (NOTE \[replay-plan\] in `resume.rs`), and online eviction, abandoned
/// once it replays more. `None` when none fits.
fn lean(
    view: &GraphView,
    pinned: &[u32],
    budget: u64,
    planned: &mut Option<Schedule>,
) -> Option<BackwardPlan> {
    // On a short view the others' planning is small: online eviction goes last, as it
    // does in [`online`].
    let enough = online_enough(view);
    let first = match enough {
        Some(enough) => online_within(view, pinned, budget, enough),
        None => Ok(None),
    };
    if let Ok(Some(steps)) = first {
        return Some(BackwardPlan::Online(steps));
    }
    let planned = [
        chain_resume(view, pinned, budget),
        replay_plan_keeping(view, pinned, budget, planned),
    ]
    .into_iter()
    .flatten()
    .min_by(|a, b| a.1.total_cmp(&b.1));
    let limit = planned.as_ref().map_or(f64::INFINITY, |(_, cost)| *cost);
    let attempt = match first {
        // Not run yet, or abandoned past `enough`: it may still replay less than the others.
        Ok(None) if enough.is_none_or(|enough| limit > enough) => {
            online_within(view, pinned, budget, limit)
        }
        other => other,
    };
    match attempt {
        Ok(Some(steps)) => Some(BackwardPlan::Online(steps)),
        Ok(None) => Some(BackwardPlan::Whole(
            planned.expect("a limit comes from a plan").0,
        )),
        Err(_) => planned.map(|(schedule, _)| BackwardPlan::Whole(schedule)),
    }
}

/// The smallest budget, at least `budget`, with which one of [`lean`]'s plans fits from the
/// lean state (`pinned` held): the planner's smallest (a guarantee for its own schedules)
/// if that works, else the smallest that does, by bisection (planning only: nothing runs).
fn smallest_lean_budget(view: &GraphView, pinned: &[u32], budget: u64) -> u64 {
    let works = |b: u64| {
        online_steps(view, pinned, b).is_ok()
            || chain_resume(view, pinned, b).is_some()
            || replay_plan(view, pinned, b).is_some()
    };
    let mut low = smallest_budget(view).max(budget);
    let mut high = view
        .nodes()
        .iter()
        .map(|n| n.bytes + n.fixed_bytes)
        .sum::<u64>()
        .max(low);
    if works(low) {
        high = low;
    } else {
        while high - low > 1 {
            let mid = low.midpoint(high);
            if works(mid) {
                high = mid;
            } else {
                low = mid;
            }
        }
    }
    high
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_cost_counts_replays_only() {
        let nodes = [
            Node::new("a", 8, 10.0),
            Node::new("b", 8, 100.0),
            Node::new("c", 8, 1000.0),
        ];
        let actions = [
            Action::Replay(0),
            Action::Free(2),
            Action::Replay(1),
            Action::Step(2),
            Action::Replay(0),
            Action::Keep(2),
            Action::Compute(2),
        ];
        assert_eq!(replay_cost(&nodes, &actions), 120.0);
        assert_eq!(replay_cost(&nodes, &[]), 0.0);
    }
}
