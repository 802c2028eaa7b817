//! Whole views run event by event: the planner's runs (its portfolio, its search and the
//! lean schedule), each an [`Exec`] that knows the graph from the start.

use std::sync::Arc;

use super::{Decisions, Exec, Hints, Strategy, Work};
use crate::planner::analysis::Analysis;
use crate::planner::{Action, Error, GraphView};

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
    exec.begin_backward_over_view();
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
