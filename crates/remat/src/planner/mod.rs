//! The planner: which values to keep, drop and rebuild so that the bytes remat holds for
//! backward stay within a budget, at the least recompute. It never sees a tensor: it works on
//! a [`GraphView`] (ids, sizes, costs, edges, marks) and returns [`Schedule`]s, which the
//! engine interprets.
//!
//! # The model
//!
//! **Graph.** A [`GraphView`] lists the step's recorded ops in recording order (parents
//! before children). Node `i` has an output of `bytes`, a forward `cost` (ns), the `inputs`
//! a replay reads (earlier nodes; leaves and untracked constants are not nodes and are always
//! available), whether it is `replayable`, the `step_reads` of its backward step (its inputs,
//! other earlier values it saved, and/or itself), `fixed_bytes` of constants held on its
//! edges (released at its step, or at the later step of `fixed_until` where another op
//! holds one of them longer), and an optional [`Forced`] decision. Backward runs the steps in the view's
//! `step_order` (consumers first; reverse index order by default).
//!
//! **Schedule.** One sequence of [`Action`]s over the whole step: `Compute(i)` for every node
//! in index order (the forward pass, free), with `Keep`s and `Free`s between them; then the
//! backward pass: `Replay(i)` (costs `cost[i]`, needs every input held), `Free(i)`, and
//! `Step(i)` in step order (needs every step read held).
//!
//! **Held bytes** (what the budget bounds): the bytes of the values remat holds (kept in
//! the forward pass, or rebuilt) plus the `fixed_bytes` of every node recorded whose constants
//! were not released yet. The user's own tensors in the forward pass are not remat's memory: a forward op's
//! output counts only once it is kept. The one exception to the budget is the op running: a
//! replay's inputs that it is the last to read (the `Free`s right after it) leave before its
//! output arrives, as the engine hands a value over at its last read.
//!
//! **Rebuildable** values are replayable and not forced to Keep. The others are *pinned*:
//! kept from a forward op that has them in hand until nothing can need them (NOTE \[need\] in
//! `analysis.rs`), or until every value that could need them is held: those are then pinned
//! in their place (NOTE \[pin-release\] in `exec/release.rs`).
//!
//! # What is here
//! - [`simulate`]: the one simulator. It checks a schedule and returns the peak, the
//!   recompute cost, the replays per node and the held-bytes trace (one entry per keep and
//!   free event): the engine's runtime statistics are meant to match it.
//! - [`min_feasible_budget`]: the smallest budget every generator meets (NOTE
//!   [lean-schedule] in `feasible.rs`): an upper bound on the true minimum, exact on chains;
//!   [`smallest_budget`]: the smallest budget [`plan`] meets, which on a chain of blocks
//!   does not grow with the chain's length (NOTE \[rotor\] in `rotor/mod.rs`).
//! - Chain structure: the values that cut any view into consecutive stages (`blocks.rs`,
//!   NOTE \[stages\]), planned as a heterogeneous chain by Rotor's dynamic program over
//!   stages whose own plans come from the portfolio (`rotor/`, NOTE \[rotor\]); a chain
//!   that repeats is solved by block counts (NOTE \[rotor-run\]), any length in one level.
//!   [`chain_plan`] returns that plan alone (what [`plan`] weighs against its others).
//!   The portfolio reaches the chain's files as a value (`Planner`, in `blocks.rs`), so
//!   that they do not name it back. A step whose forward pass ran resumes from what it
//!   held by the chain's DP or by the whole-step plan run once more (`resume.rs`, NOTE
//!   \[replay-plan\]); `plan_backward` (`backward.rs`, above `resume.rs`) chooses how the
//!   engine's backward pass runs when it follows no plan: the cheapest of those, Revolve
//!   and a resumed [`Dtr`], from the state the forward pass left or from the lean state,
//!   and otherwise the smallest budget that works.
//! - Generators: [`from_decisions`] (today's engine for per-node decisions, no budget);
//!   [`Dtr`] (online eviction, event by event or over a whole view, and
//!   [`Dtr::resume`] to take over a step a cached plan started); [`plan`] (planned mode for a
//!   known, recurring graph: the exact optimum for views of at most 14 ops (`exact.rs`);
//!   otherwise a portfolio of lookahead executor runs, Revolve for uniform chains, a dynamic
//!   program for general chains (`chain.rs`), and a bounded search over the executor's
//!   decisions); [`revolve::replays`]
//!   (Revolve's optimum, closed form).
//! - [`exact_optimum`]: the least recompute of any schedule, for views of at most 128 ops,
//!   by an A* search with a limit on the states it stores (NOTE \[exact-search\] in
//!   `search.rs`); where it stops, the lower bound it proved. [`plan`] ends with a short
//!   one for a schedule cheaper than its portfolio's (NOTE \[search-last\] in `plan.rs`).
//! - [`recompute_lower_bound`]: the least recompute any schedule needs under a budget (a
//!   Lagrangian relaxation solved by min cuts, NOTE \[recompute-bound\] in `bound.rs`, or
//!   near the smallest budget the rebuilds between steps that leave room for nothing else,
//!   NOTE \[one-value-bound\]): how far a plan can be from the optimum on graphs too large
//!   for an exact search.
//! - [`tradeoff`]: predicted extra compute and peak for a ladder of budgets, and the bound.
//! - [`signature`] and [`PlanCache`]: reuse a plan while the graph recurs.
//!
//! # Invariants
//! - `planner/` never sees a tensor: it imports nothing from `graph/`, `ops/`, `backend/`,
//!   `tensor.rs` or Burn.
//! - Every generator's schedule passes [`simulate`] and never holds more than its budget;
//!   under a budget at or above [`min_feasible_budget`] every budgeted generator succeeds
//!   (a resumed [`Dtr`] excepted: it starts from a plan's state, not the lean schedule's).
//! - No recursion over the graph: every walk uses an explicit stack. Planning is a bounded
//!   number of near-linear executor runs (victim scans capped): up to 8 for a graph of more
//!   than 64 nodes (plus a search of at most 32 runs up to 512 nodes), a search of at most
//!   512 runs below; Revolve is O(n + replays).

mod analysis;
mod backward;
mod blocks;
mod bound;
mod cache;
mod chain;
mod decisions;
mod dtr;
mod error;
pub(crate) mod exact;
mod exec;
mod feasible;
mod grads;
pub(crate) mod grow;
mod mask;
mod packed;
pub(crate) mod pinned;
mod plan;
mod resume;
pub mod revolve;
pub(crate) mod rotor;
mod schedule;
mod search;
mod simulate;
mod tradeoff;
pub(crate) mod tuples;
mod view;

#[cfg(test)]
mod tests;

pub(crate) use backward::{BackwardPlan, OnlineSteps, online_steps, plan_backward};
pub use bound::recompute_lower_bound;
pub use cache::{CachedPlan, PlanCache, SignatureHasher, recorded_as, same_structure, signature};
pub use decisions::from_decisions;
pub use dtr::Dtr;
pub use error::Error;
pub use feasible::min_feasible_budget;
pub use grads::{GradProfile, step_peak};
pub use plan::{chain_plan, plan, smallest_budget};
pub use schedule::{Action, Schedule, ScheduleIndex};
pub use search::{Optimum, exact_optimum};
pub use simulate::{HeldEvent, Outcome, simulate, simulate_traced};
pub(crate) use tradeoff::tradeoff_shared;
pub use tradeoff::{BOUND_MAX_NODES, Tradeoff, TradeoffRow, tradeoff, tradeoff_with_grads};
pub use view::{Forced, GraphView, Ids, Node};
