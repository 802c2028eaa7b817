//! A budget too small for a step: the error users match on ([`BudgetError`]), the panic
//! that names a budget that works, and the payload it unwinds with inside
//! `try_with_budget`. Names none of its sibling files.

use crate::planner;

/// The user-facing panic for a budget the graph cannot fit; `trying`: inside
/// `try_with_budget`, which turns it into its `Err` (no message is printed).
pub(super) fn too_small(budget: u64, error: &planner::Error, op: Option<&str>, trying: bool) -> ! {
    let (min, lower) = match error {
        planner::Error::Infeasible {
            min_budget_bytes,
            lower_bound,
            ..
        } => (*min_budget_bytes, *lower_bound),
        other => panic!("remat internal error: the budget's planner refused a step: {other}"),
    };
    let at = op.map_or(String::new(), |op| {
        format!(" (at op `{op}`, in the forward pass)")
    });
    if trying {
        // Inside `try_with_budget`: it turns this into its `Err`, so no message is printed.
        std::panic::resume_unwind(Box::new(TooSmallUnwind(BudgetError::TooSmall {
            budget_bytes: budget,
            min_budget_bytes: min,
        })));
    }
    if lower {
        // The rest of the forward pass is not recorded yet: `min` may not be enough.
        panic!(
            "remat: Policy::Budget({budget}) is too small for this training step{at}: the \
             values that cannot be rebuilt and the op running need at least {min} bytes ({}) \
             so far, and the rest of the forward pass is not recorded yet. To find the \
             smallest budget that works, run one step under Policy::Budget(u64::MAX) (it \
             keeps what SaveAll keeps) and print remat::tradeoff(): its first row is the \
             smallest budget (`min_budget_bytes`), each row with its extra compute, and \
             its smallest_budget_within(4.0) the smallest whose plan replays at most 4 \
             forward passes. The least to try: remat::Policy::Budget({min}).",
            crate::report_items::format_bytes(min)
        )
    }
    panic!(
        "remat: Policy::Budget({budget}) is too small for this training step{at}: it needs \
         (the smallest budget the planner guarantees) {min} bytes ({}). Set a larger budget, \
         e.g. remat::set_policy(remat::Policy::Budget({min})), or print remat::tradeoff() \
         after one step under a larger budget to choose one.",
        crate::report_items::format_bytes(min)
    )
}

/// The payload `too_small` unwinds with inside `try_with_budget`.
pub(super) struct TooSmallUnwind(pub(super) BudgetError);

/// Why `check_budget` refused a budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetError {
    /// No training step has run backward under a [`Policy::Budget`] yet, so there is no
    /// graph to check against: run one step under `Policy::Budget(u64::MAX)` (it keeps what
    /// [`Policy::SaveAll`](crate::Policy::SaveAll) keeps) first.
    ///
    /// [`Policy::Budget`]: crate::Policy::Budget
    NoStep,
    /// The budget is below the smallest one the planner guarantees for that step.
    TooSmall {
        /// The budget asked about.
        budget_bytes: u64,
        /// The smallest budget that fits the step: the first row of `tradeoff()`, or more
        /// when a step stopped as too small needed more (see `check_budget`).
        min_budget_bytes: u64,
    },
}

impl std::fmt::Display for BudgetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoStep => write!(
                f,
                "no training step has run under a Policy::Budget yet: run one under \
                 Policy::Budget(u64::MAX) (it keeps what SaveAll keeps), then check a budget"
            ),
            Self::TooSmall {
                budget_bytes,
                min_budget_bytes,
            } => write!(
                f,
                "Policy::Budget({budget_bytes}) is too small for the last training step: the \
                 smallest budget it fits is {min_budget_bytes} bytes ({})",
                crate::report_items::format_bytes(*min_budget_bytes)
            ),
        }
    }
}

impl std::error::Error for BudgetError {}

/// The least bytes an infeasible plan needs, as the planner says.
pub(super) fn need_of(error: &planner::Error) -> u64 {
    match error {
        planner::Error::Infeasible {
            min_budget_bytes, ..
        } => *min_budget_bytes,
        other => panic!("remat internal error: the budget's planner refused a step: {other}"),
    }
}
