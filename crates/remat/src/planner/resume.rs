//! A backward pass for a step whose forward pass already ran and left some values held (the
//! engine's first step under a budget, run online while it has no plan yet, NOTE
//! \[forward-overflow\] in `checkpoint/budget/session.rs`): the held values dropped, then
//! the chain's DP from there (`chain_resume`: a view with stages, a chain that reads pinned
//! values, or one that hands tuples over), or the whole-step plan run once more
//! (`replay_plan`, NOTE [replay-plan]). The engine runs the cheapest of these and its online
//! eviction. Both sit above the portfolio (`plan.rs`), which plans a chain's stages.

use super::blocks::Inner;
use super::plan::PORTFOLIO;
use super::view::rebuildable;
use super::{Action, GraphView, Schedule, pinned, plan, rotor, simulate, tuples};

/// [`rotor::resume`] for a view with stages; for a view whose chain reads pinned values
/// (NOTE \[pinned-chain\]), the reduced chain resumed from `held` under the budget less the
/// pinned bytes, completed (a pinned value the forward pass did not keep is rebuilt first);
/// for a chain that hands several values to the next, the augmented view's (NOTE
/// \[tuple-cuts\] in `tuples.rs`). `None` when the view has none of them or nothing fits.
pub(crate) fn chain_resume(view: &GraphView, held: &[u32], budget: u64) -> Option<(Schedule, f64)> {
    if rotor::stages_of(view, PORTFOLIO).is_some() {
        return rotor::resume(view, held, budget, PORTFOLIO);
    }
    let Some(pinned) = pinned::reduced(view, PORTFOLIO) else {
        // A chain that hands several values to the next (NOTE [tuple-cuts]).
        return tuples::tupled(view, PORTFOLIO)?.resume(view, held, budget, PORTFOLIO);
    };
    let room = pinned.room(budget)?;
    let rest: Vec<u32> = held
        .iter()
        .copied()
        .filter(|h| pinned.nodes.binary_search(h).is_err())
        .collect();
    let (schedule, _) = match rotor::stages_of(&pinned.view, PORTFOLIO) {
        Some(_) => rotor::resume(&pinned.view, &rest, room, PORTFOLIO)?,
        None => {
            tuples::tupled(&pinned.view, PORTFOLIO)?.resume(&pinned.view, &rest, room, PORTFOLIO)?
        }
    };
    let schedule = pinned.completed(view, &schedule, |p| held.contains(&p), held);
    let cost = simulate(view, &schedule, budget).ok()?.recompute_cost;
    Some((schedule, cost))
}

/// NOTE [replay-plan]: a backward pass for a step whose forward pass already ran and left
/// `held` held (the first step under a budget, run online, NOTE \[forward-overflow\] in
/// `checkpoint/budget/session.rs`), by the whole-step plan of the view run once more: the held
/// values are dropped, the plan's forward part is replayed in its rev form (what it keeps at
/// its end, rebuilt in index order, each value freed after its last use: NOTE \[stages\] in
/// `blocks.rs`, the whole view one stage), then its backward part runs unchanged. One more
/// forward pass than the plan, on any graph whose values can all be rebuilt, where online
/// eviction from the held state may need far more than the plan (Burn's `Gru` with a loss on
/// every output: the online first step stopped at half of SaveAll's bytes, which its plan
/// fits). Returns the schedule and its replay cost; `None` when the view does not plan
/// within `budget` or the rev form does not fit.
pub(crate) fn replay_plan(view: &GraphView, held: &[u32], budget: u64) -> Option<(Schedule, f64)> {
    replay_plan_keeping(view, held, budget, &mut None)
}

/// [`replay_plan`], with `planned` set to the view's whole-step plan under `budget` where
/// it makes one ([`plan`] of `view` at `budget`: the plan the engine makes for the next
/// steps after the pass, NOTE \[first-step-plan\] in `backward.rs`).
pub(crate) fn replay_plan_keeping(
    view: &GraphView,
    held: &[u32],
    budget: u64,
    planned: &mut Option<Schedule>,
) -> Option<(Schedule, f64)> {
    if view.is_empty() || !view.nodes().iter().all(rebuildable) {
        return None;
    }
    let mut held = held.to_vec();
    held.sort_unstable();
    held.dedup();
    // The rev form holds every constant from its start, and its replays' values in flight
    // beside what the plan keeps: a plan at the budget may not fit so. Planned again below
    // the budget by what the rev form passed it, a few times.
    let mut within = budget;
    for _ in 0..4 {
        let plan = plan(view, within).ok()?;
        if within == budget {
            *planned = Some(plan.clone());
        }
        let schedule = replayed(view, &held, Inner::new(view, plan)?);
        let outcome = simulate(view, &schedule, u64::MAX).ok()?;
        if outcome.peak_bytes <= budget {
            return Some((schedule, outcome.recompute_cost));
        }
        within = within.checked_sub(outcome.peak_bytes - budget)?;
    }
    None
}

/// The whole-step schedule of NOTE \[replay-plan\]: a forward pass that keeps `held`
/// (sorted), the held values dropped, `inner`'s forward part replayed, its backward part.
fn replayed(view: &GraphView, held: &[u32], inner: Inner) -> Schedule {
    let n = view.len() as u32;
    let actions = inner.schedule.actions();
    let mut out = Vec::with_capacity(n as usize + 2 * held.len() + actions.len());
    for i in 0..n {
        out.push(Action::Compute(i));
        if held.binary_search(&i).is_ok() {
            out.push(Action::Keep(i));
        }
    }
    out.extend(held.iter().map(|&h| Action::Free(h)));
    rotor::replay(0, &inner.rev_forward, &mut out);
    out.extend_from_slice(&actions[inner.split..]);
    Schedule::new(out)
}
