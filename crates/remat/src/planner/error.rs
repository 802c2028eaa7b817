//! The planner's one error type.

use std::fmt;

use super::Action;

/// Why a view, a schedule or a budget was rejected.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// The graph view breaks a rule of the model (see [`GraphView`](super::GraphView)).
    InvalidView {
        /// The offending node, when there is one.
        node: Option<u32>,
        /// What is wrong.
        reason: String,
    },
    /// A schedule's action is not valid at its place.
    InvalidAction {
        /// Its index in the schedule.
        index: usize,
        /// The action.
        action: Action,
        /// What is wrong.
        reason: String,
    },
    /// The schedule ended before the step did, or left values held.
    Incomplete {
        /// What is missing or left over.
        reason: String,
    },
    /// A schedule holds more than the budget.
    OverBudget {
        /// The index of the action at which the held bytes passed the budget.
        index: usize,
        /// The bytes held then.
        held_bytes: u64,
        /// The budget.
        budget_bytes: u64,
    },
    /// No schedule the planner can make fits the budget.
    Infeasible {
        /// The budget asked for.
        budget_bytes: u64,
        /// The smallest budget the planner guarantees for this graph
        /// ([`min_feasible_budget`](super::min_feasible_budget)); when `lower_bound` is true,
        /// only the part of the graph recorded so far is known, and this is the least it
        /// needs.
        min_budget_bytes: u64,
        /// Whether `min_budget_bytes` is only a lower bound (online planning in the forward
        /// pass, before the whole graph is known).
        lower_bound: bool,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidView {
                node: Some(node),
                reason,
            } => write!(f, "invalid graph view: node {node}: {reason}"),
            Error::InvalidView { node: None, reason } => {
                write!(f, "invalid graph view: {reason}")
            }
            Error::InvalidAction {
                index,
                action,
                reason,
            } => write!(f, "invalid schedule: action {index} ({action:?}): {reason}"),
            Error::Incomplete { reason } => write!(f, "incomplete schedule: {reason}"),
            Error::OverBudget {
                index,
                held_bytes,
                budget_bytes,
            } => write!(
                f,
                "the schedule holds {held_bytes} bytes at action {index}, over the budget of \
                 {budget_bytes} bytes"
            ),
            Error::Infeasible {
                budget_bytes,
                min_budget_bytes,
                lower_bound: false,
            } => write!(
                f,
                "a budget of {budget_bytes} bytes ({}) is too small for this graph: remat \
                 guarantees budgets from {min_budget_bytes} bytes ({}) up; pass at least that \
                 to `Policy::Budget`, or keep fewer values alive at once (smaller batch)",
                mib(*budget_bytes),
                mib(*min_budget_bytes)
            ),
            Error::Infeasible {
                budget_bytes,
                min_budget_bytes,
                lower_bound: true,
            } => write!(
                f,
                "a budget of {budget_bytes} bytes ({}) is too small for this graph: the values \
                 that cannot be rebuilt and the op running need at least {min_budget_bytes} \
                 bytes ({}) already, and the rest of the forward pass is not recorded yet; pass \
                 a larger `Policy::Budget`. To learn the smallest that works, run one step under \
                 `Policy::Budget(u64::MAX)` and read `remat::tradeoff()` (its \
                 `min_budget_bytes`, and the extra compute of each budget above it)",
                mib(*budget_bytes),
                mib(*min_budget_bytes)
            ),
        }
    }
}

impl std::error::Error for Error {}

/// `bytes` in MiB, for messages.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}
