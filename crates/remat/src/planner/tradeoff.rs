//! The trade-off report: predicted extra compute and peak for a ladder of budgets, from the
//! smallest feasible to keeping everything, with the least extra compute any schedule needs
//! (NOTE \[recompute-bound\] in `bound.rs`). The table users read to pick a budget.

use std::fmt;
use std::sync::Arc;

use super::blocks::Stages;
use super::error::mib;
use super::pinned::Pinned;
use super::plan::PORTFOLIO;
use super::tuples::Tupled;
use super::{
    GradProfile, GraphView, plan, recompute_lower_bound, simulate, smallest_budget, step_peak,
};

/// One budget of the ladder and what the planner predicts for it.
#[derive(Clone, Debug, PartialEq)]
pub struct TradeoffRow {
    /// The budget (bytes).
    pub budget_bytes: u64,
    /// The predicted most bytes held (at most the budget).
    pub peak_bytes: u64,
    /// The predicted most bytes of held values plus gradients in flight: the step's peak of
    /// what remat holds (NOTE \[grads-in-flight\] in `grads.rs`); `None` without the
    /// gradients of a pass ([`tradeoff`] on a view alone).
    pub step_peak_bytes: Option<u64>,
    /// The predicted cost of the replays (ns).
    pub recompute_cost: f64,
    /// The replays' cost as a fraction of one forward pass.
    pub recompute_fraction: f64,
    /// The predicted number of replays.
    pub replays: u64,
    /// The least recompute any schedule needs at this budget (ns;
    /// [`recompute_lower_bound`]); `None` for graphs of more than
    /// [`BOUND_MAX_NODES`] nodes, where it is not computed.
    pub lower_bound: Option<f64>,
}

/// The largest graph [`tradeoff`] computes the lower bound for (a few dozen max-flows per
/// row: about 90 ms a row at 5,000 nodes).
pub const BOUND_MAX_NODES: usize = 10_000;

/// The trade-off report for one view; `Display` prints it as a table.
#[derive(Clone, Debug, PartialEq)]
pub struct Tradeoff {
    /// The smallest budget the planner guarantees.
    pub min_budget_bytes: u64,
    /// The peak when nothing is rebuilt (the largest budget worth giving).
    pub keep_all_bytes: u64,
    /// The cost of one forward pass (ns).
    pub forward_cost: f64,
    /// One row per budget, ascending.
    pub rows: Vec<TradeoffRow>,
    /// The gradients of the pass the view was taken from, step by step (NOTE
    /// \[grads-in-flight\]): `remat::tradeoff()` carries them; `None` for [`tradeoff`] on a
    /// view alone.
    pub grads: Option<GradProfile>,
    /// The view the rows were planned from: plan it at any other budget with
    /// [`plan`](super::plan), or save it (`Display`) and read it back (`FromStr`) to study a
    /// model's graph away from the model.
    pub view: Arc<GraphView>,
}

/// The most forward passes a row's plan may replay on a long chain (see `tradeoff_shared`).
const MAX_REPLAYED: f64 = 100.0;

/// The fractions of the keep-all peak on the ladder, besides its two ends.
const LADDER: [f64; 8] = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 0.9, 1.0];

/// Plans `view` at the smallest feasible budget, at fractions of the keep-all peak above
/// it, and at the keep-all peak.
pub fn tradeoff(view: &GraphView) -> Tradeoff {
    tradeoff_shared(Arc::new(view.clone()), None)
}

/// [`tradeoff`] with the gradients a pass over `view` held (NOTE \[grads-in-flight\]):
/// each row also predicts its step's peak of held values plus gradients
/// ([`TradeoffRow::step_peak_bytes`]).
pub fn tradeoff_with_grads(view: &GraphView, grads: GradProfile) -> Tradeoff {
    tradeoff_shared(Arc::new(view.clone()), Some(grads))
}

/// [`tradeoff`] for a view already shared, with its pass's gradients where known.
pub(crate) fn tradeoff_shared(shared: Arc<GraphView>, grads: Option<GradProfile>) -> Tradeoff {
    let view = &*shared;
    let min_budget = smallest_budget(view);
    let forward_cost = view.forward_cost();
    let keep_all = plan(view, u64::MAX)
        .ok()
        .and_then(|s| simulate(view, &s, u64::MAX).ok())
        .map_or(0, |o| o.peak_bytes);
    let mut budgets: Vec<u64> = vec![min_budget];
    budgets.extend(
        LADDER
            .iter()
            .map(|f| (keep_all as f64 * f).round() as u64)
            .filter(|&b| b > min_budget),
    );
    budgets.sort_unstable();
    budgets.dedup();
    // On a long chain, a budget near the smallest replays the chain quadratically often
    // (any schedule does): rows whose plan would replay more than `MAX_REPLAYED` forward
    // passes are left out, as the chain's DP prices them before any schedule is made.
    // A chain that reads pinned values (NOTE [pinned-chain] in `pinned.rs`) is priced on
    // its reduced view, with the pinned bytes taken from the budget.
    // NOTE [tupled-rows]: a chain cut by tuples (NOTE [tuple-cuts] in `tuples.rs`), the
    // view's own or the reduced view of a pinned one (NOTE [pinned-heads]), is priced on its
    // augmented view, where a budget below the tuples' chain's smallest is left out too:
    // there the plan is the lean schedule or near it. On Burn's `Gru` over 1,024 steps (loss
    // on its last output, 36,000 ops) the smallest budget's row planned the lean schedule,
    // about 140 million replays: the table took 21 s and 2.5 GB; on the `Lstm` with the loss
    // on every output, 64 s and 11 GB.
    let long = view.len() > super::rotor::LONG_CHAIN;
    let plain = super::rotor::stages_of(view, PORTFOLIO);
    let reduced = super::pinned::reduced(view, PORTFOLIO);
    let pinned = plain.is_none().then_some(reduced.as_ref()).flatten();
    let pinned_stages = pinned.and_then(|pinned| super::rotor::stages_of(&pinned.view, PORTFOLIO));
    let tupled = (long && plain.is_none() && pinned_stages.is_none())
        .then(|| tupled_chain(view, reduced.as_ref()))
        .flatten();
    let chain: Option<(&GraphView, &Stages, u64, bool)> = match (&plain, &pinned_stages, &tupled) {
        (Some(stages), _, _) => Some((view, stages, 0, false)),
        (None, Some(stages), _) => {
            pinned.map(|pinned| (&pinned.view, &**stages, pinned.bytes, false))
        }
        (None, None, Some((tupled, stages, outside))) => {
            Some((&tupled.view, &**stages, *outside, true))
        }
        (None, None, None) => None,
    };
    let rows = budgets
        .into_iter()
        .filter_map(|budget| {
            if let Some((chain_view, stages, pinned_bytes, tupled)) = &chain
                && long
                && budget.checked_sub(*pinned_bytes).is_none_or(|room| {
                    match super::rotor::Rotor::new(chain_view, stages, room) {
                        Some(r) => r.cost() > MAX_REPLAYED * forward_cost,
                        None => *tupled,
                    }
                })
            {
                return None;
            }
            let schedule = plan(view, budget).ok()?;
            let outcome = simulate(view, &schedule, budget).ok()?;
            Some(TradeoffRow {
                budget_bytes: budget,
                peak_bytes: outcome.peak_bytes,
                step_peak_bytes: grads
                    .as_ref()
                    .and_then(|grads| step_peak(view, &schedule, grads).ok()),
                recompute_cost: outcome.recompute_cost,
                recompute_fraction: if forward_cost > 0.0 {
                    outcome.recompute_cost / forward_cost
                } else {
                    0.0
                },
                replays: outcome.total_replays,
                lower_bound: (view.len() <= BOUND_MAX_NODES)
                    .then(|| recompute_lower_bound(view, budget)),
            })
        })
        .collect();
    Tradeoff {
        min_budget_bytes: min_budget,
        keep_all_bytes: keep_all,
        forward_cost,
        rows,
        grads,
        view: shared,
    }
}

// NOTE [budget-cliff]: the smallest budget is the lean schedule's (`feasible.rs`): the
// least any schedule holds, each value rebuilt from the step's inputs for every read, so
// near it a plan replays the graph quadratically often. On Burn's `Lstm` of 32 steps with a
// loss on every output (`views/lstm32_every_output.view`), the plan at the smallest budget
// replays 180 forward passes, at 1.05x of it 14 and at 1.1x 2.6: the budget that holds one
// step's values beside the chain's hand-over is a few percent above the smallest, and a user
// who takes the first row of the table pays 70 times the time for 5% of the memory.
// `Tradeoff::smallest_budget_within` names the budget past the cliff.

/// The chain of tuples `view` (which has no stages of its own) is planned by (NOTE
/// \[tupled-rows\]): its own, when it has no pinned values, or the pinned values' reduced
/// view's (`reduced`), when that has no stages; with the augmented view's stages and the
/// bytes held outside its room (pinned values and the moved steps' constants). `None` for
/// any other view.
fn tupled_chain(view: &GraphView, reduced: Option<&Pinned>) -> Option<(Tupled, Arc<Stages>, u64)> {
    let (tupled, pinned) = match reduced {
        None => (super::tuples::tupled(view, PORTFOLIO)?, 0),
        Some(pinned) if super::rotor::stages_of(&pinned.view, PORTFOLIO).is_none() => (
            super::tuples::tupled(&pinned.view, PORTFOLIO)?,
            pinned.bytes,
        ),
        Some(_) => return None,
    };
    let stages = super::rotor::stages_of(&tupled.view, PORTFOLIO)?;
    let outside = pinned + tupled.moved_fixed;
    Some((tupled, stages, outside))
}

impl Tradeoff {
    /// The smallest budget whose plan replays at most `forward_passes` forward passes (its
    /// predicted recompute at most `forward_passes` times [`forward_cost`](Self::forward_cost)):
    /// the budget to use where the smallest one costs too much time (NOTE \[budget-cliff\]).
    ///
    /// Found by bisection between [`min_budget_bytes`](Self::min_budget_bytes) and
    /// [`keep_all_bytes`](Self::keep_all_bytes), planning the view at each step (a dozen
    /// plans), to within 1/256 of the keep-all bytes or 4 KiB: the budget returned plans
    /// within `forward_passes`, and the largest one tried below it did not. A plan's
    /// recompute does not always fall as the budget grows, so a smaller budget may also plan
    /// within `forward_passes`. Returns `keep_all_bytes` (no replay) when no smaller budget
    /// tried plans within, and `min_budget_bytes` when the smallest budget does. On a chain
    /// of over 2,000 ops cut by tuples (an LSTM's or a GRU's steps), a budget whose chain
    /// plan replays more than 100 forward passes (or `forward_passes`, if more) counts as not
    /// within without being planned (NOTE \[tupled-rows\]: such a plan is quadratic in the
    /// chain's length).
    pub fn smallest_budget_within(&self, forward_passes: f64) -> u64 {
        let view = &*self.view;
        // NOTE [tupled-rows]: on a long chain cut by tuples, a budget below the tuples'
        // chain's smallest, or whose chain plan replays more than `MAX_REPLAYED` forward
        // passes, plans the lean schedule or near it, quadratic in the length (on Burn's
        // `Gru` over 1,024 steps such a plan took 18 s and gigabytes): it does not plan
        // within.
        let tupled = (view.len() > super::rotor::LONG_CHAIN
            && super::rotor::stages_of(view, PORTFOLIO).is_none())
        .then(|| tupled_chain(view, super::pinned::reduced(view, PORTFOLIO).as_ref()))
        .flatten();
        let most = forward_passes.max(MAX_REPLAYED) * self.forward_cost;
        let priced_out = |budget: u64| match &tupled {
            Some((t, stages, outside)) => budget.checked_sub(*outside).is_none_or(|room| {
                super::rotor::Rotor::new(&t.view, stages, room).is_none_or(|r| r.cost() > most)
            }),
            None => false,
        };
        let within = |budget: u64| {
            !priced_out(budget)
                && plan(view, budget)
                    .ok()
                    .and_then(|schedule| simulate(view, &schedule, budget).ok())
                    .is_some_and(|o| o.recompute_cost <= forward_passes * self.forward_cost)
        };
        let (mut lo, mut hi) = (self.min_budget_bytes, self.keep_all_bytes);
        if hi <= lo || within(lo) {
            return lo;
        }
        let tolerance = (self.keep_all_bytes / 256).max(4096);
        // Invariant: `lo` does not plan within, `hi` does (keep-all replays nothing).
        while hi - lo > tolerance {
            let mid = lo + (hi - lo) / 2;
            if within(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }
}

impl fmt::Display for Tradeoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "budget trade-off: keep-all peak {}, smallest budget {}, forward {:.3} ms",
            mib(self.keep_all_bytes),
            mib(self.min_budget_bytes),
            self.forward_cost / 1e6
        )?;
        let grads = self.grads.is_some();
        write!(f, "{:>14} {:>14}", "budget", "peak")?;
        if grads {
            write!(f, " {:>16}", "peak with grads")?;
        }
        writeln!(
            f,
            " {:>8} {:>14} {:>10} {:>9} {:>14}",
            "of all", "extra compute", "of fwd", "replays", "at least"
        )?;
        for row in &self.rows {
            let share = if self.keep_all_bytes > 0 {
                100.0 * row.budget_bytes as f64 / self.keep_all_bytes as f64
            } else {
                100.0
            };
            let bound = row
                .lower_bound
                .map_or_else(|| "-".to_owned(), |b| format!("{:.3} ms", b / 1e6));
            write!(
                f,
                "{:>14} {:>14}",
                mib(row.budget_bytes),
                mib(row.peak_bytes)
            )?;
            if grads {
                let with = row.step_peak_bytes.map_or_else(|| "-".to_owned(), mib);
                write!(f, " {with:>16}")?;
            }
            writeln!(
                f,
                " {:>7.0}% {:>11.3} ms {:>9.1}% {:>9} {:>14}",
                share,
                row.recompute_cost / 1e6,
                100.0 * row.recompute_fraction,
                row.replays,
                bound
            )?;
        }
        Ok(())
    }
}
