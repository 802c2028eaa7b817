//! [`Policy::Budget`](crate::Policy::Budget): the engine's side of the planner.
//!
//! NOTE \[budget\]: the bytes remat holds for a training step recorded under a budget (saved,
//! rebuilt and constant values; leaves are the user's) never pass the budget, in the forward
//! pass or in backward. The planner (`crate::planner`, which never sees a tensor) decides;
//! this module tells it what happens and carries out what it says.
//! - **Forward** (online, DTR): every op recorded under a budget on a thread is fed to that
//!   thread's [`Session`], a [`Dtr`] over the ops recorded so far. The op's inputs that a
//!   step or a replay reads are marked needed (rebuildable ones evicted, the rest kept, as
//!   `require_value` does); the planner's `Keep`s then store the values it keeps (they are
//!   in hand: the op's inputs and output) and its `Free`s evict earlier values. Every input a
//!   replay reads is retained, so any value it kept may be evicted later.
//! - **Backward** (planned before any step runs): the pass builds a
//!   [`GraphView`](crate::planner::GraphView) of the nodes it claimed, as they stand (held
//!   or not, bytes, measured forward times, what each replay and step reads), follows the
//!   plan the step followed or asks the planner how to resume
//!   ([`plan_backward`](crate::planner::backward::plan_backward): online eviction, Revolve,
//!   the chain's DP, the lean state), and collects the whole pass's actions: a budget the
//!   graph cannot fit panics before any step runs, naming the smallest budget that works. The pass then
//!   carries the actions out: `Replay` rebuilds a value from held inputs, `Free` drops one
//!   (still rebuildable while its op can replay), `Step` runs a backward step whose reads
//!   the schedule holds. The nodes are marked `scheduled`: reads hand out clones and never
//!   free, so a value lives exactly as long as the schedule says. In debug builds (and with
//!   `export_tests`) the held bytes, counted from the values themselves, are checked
//!   against the budget before every op.
//! - **Other live graphs** of the thread recorded under a budget (a second loss whose
//!   backward runs later) hold their values and constants through the pass: it plans within
//!   what they leave of the budget, and when that is too little, their values that can be
//!   rebuilt are dropped first (their own pass rebuilds them). A value that cannot be
//!   rebuilt is never dropped, here or when a smaller budget takes over the session.
//! - After a pass, the view (with measured op times) is kept for [`tradeoff`], and the
//!   thread's session forgets consumed nodes.
//!
//! Recorded nodes are listed by the session in recording order; a backward view orders its
//! nodes by id, which is the recording order (ids are minted as ops are recorded).
//!
//! # Files
//! One concern each; this file declares them and re-exports what the engine calls. From
//! the bottom up (no file names one above it):
//! - `state.rs`: the state they share: the interned budgets, [`Memory`] (what a thread
//!   remembers of the steps it ran: its plans, the graph it ran last and the one after
//!   each, side ops; NOTE \[plan-ahead\], \[next-graph\], \[side-ops\]), the plans offered
//!   across threads (\[plans-across-threads\]), what reports read from other threads, and
//!   the cost estimate of an op not measured yet.
//! - `stop.rs`: a budget too small: [`BudgetError`] and the panic that names a budget that
//!   works.
//! - `entries.rs`: the planner's node of each op a session recorded, the plan's view's
//!   while the step follows it (NOTE \[followed-entries\]).
//! - `session.rs`: the forward pass as a value: a [`Session`] fed op by op as plain facts
//!   (`session::record`), online or following a plan [`Memory`] picked, answering what to
//!   keep and drop; no tensor and no thread-local (unit-tested in `tests.rs` with nodes
//!   that only count bytes).
//! - `thread.rs`: the one per-thread handle (the session, the memory, what a stop left) and
//!   the engine's calls into it ([`on_record`], [`reserve`], [`upcoming`],
//!   [`read_outside`], [`dropped`]), which carry the session's answers out on the nodes.
//! - `pass.rs`: planning one backward pass before any step runs ([`plan_pass`]): its view,
//!   the plan the step followed or the planner's choice (`planner::plan_backward`), cut
//!   into the pass's actions.
//! - `carry.rs`: carrying the pass's actions out node by node ([`carry_out`]), and what
//!   follows a pass ([`after_pass`]: the plan for the next steps, the view kept).
//! - `report.rs`: what users read: [`tradeoff`], [`check_budget`], [`try_with_budget`].

//! # Invariants
//! - Neither the session nor a schedule runs user code under a borrow of the session: the
//!   actions are computed under the borrow and carried out after it is released.
//! - The session's memory is bounded by the live graph: nodes that died or were consumed are
//!   dropped from it when it doubles (and after every backward pass); a step following its
//!   plan is bounded by the plan's view instead, and compacted after its pass.
//!
//! [`Session`]: session::Session
//! [`Memory`]: state::Memory
//! [`Dtr`]: crate::planner::Dtr

mod carry;
mod entries;
mod pass;
mod report;
mod session;
mod state;
mod stop;
#[cfg(test)]
mod tests;
mod thread;

pub(crate) use carry::{after_pass, carry_out};
pub(crate) use pass::{PassActions, Pending, pass_budget, plan_pass};
pub use report::{check_budget, tradeoff, try_with_budget};
pub(crate) use session::{InputRead, OpFacts, Upcoming};
pub(crate) use state::{estimate, last_budget};
pub use stop::BudgetError;
pub(crate) use thread::{
    InHand, Recorded, dropped, intern, on_record, read_outside, reserve, upcoming,
};
