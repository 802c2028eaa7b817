//! What users read of the budget: [`tradeoff`] (budget against extra compute, for the last
//! step run under a budget), [`check_budget`] with its [`BudgetError`], and the panic for a
//! budget a step cannot fit, which names a budget that works.

use std::sync::Arc;

use super::state::{LAST_GRADS, LAST_VIEW};
use super::stop::BudgetError;
use super::stop::TooSmallUnwind;
use super::thread::with_thread;
use crate::checkpoint::policy::{Policy, with_policy};
use crate::planner::{self, GraphView, Tradeoff};

/// Runs `f` (a training step, or several) under [`Policy::Budget`]`(budget_bytes)`, as
/// [`with_policy`](crate::with_policy) does, and returns [`BudgetError::TooSmall`] instead
/// of panicking when the budget is too small for it: the fallible form of running a step
/// under a budget.
///
/// A step stops at `backward()` when the budget is too small for its graph, before any
/// backward step runs (its forward pass goes on past the budget where it must: NOTE
/// \[forward-overflow\] in `session.rs`). The step's graph is dropped, no gradient is
/// returned and the optimizer has not run, so the step can be run again; its error's
/// `min_budget_bytes` is the smallest budget the whole step runs with. (A step recorded
/// while another graph of the thread, recorded under a larger budget, is still alive may
/// stop in its forward pass, naming what the part recorded so far needs.) Other panics of
/// `f` go on unwinding.
///
/// ```
/// use burn_flex::Flex;
/// use burn_backend::{Backend, TensorData, ops::FloatTensorOps};
/// use remat::{Autodiff, BudgetError, try_with_budget};
/// type B = Autodiff<Flex>;
///
/// let step = || {
///     let x = B::float_from_data(TensorData::from([1.0f32, 2.0, 3.0]), &Default::default());
///     let x = B::float_set_require_grad(x, true);
///     let y = B::float_exp(B::float_sin(B::float_exp(x)));
///     B::float_sum(y).backward()
/// };
/// let mut budget = 1;
/// let grads = loop {
///     match try_with_budget(budget, step) {
///         Ok(grads) => break grads,
///         Err(BudgetError::TooSmall { min_budget_bytes, .. }) => budget = min_budget_bytes,
///         Err(e) => panic!("{e}"),
///     }
/// };
/// assert!(budget > 1);
/// # drop(grads);
/// ```
///
/// # Errors
/// [`BudgetError::TooSmall`] (with the budget that stopped the step and the least one to
/// try) when a budget in force during `f` is too small for a step `f` runs; never
/// [`BudgetError::NoStep`].
///
/// [`Policy::Budget`]: crate::Policy::Budget
pub fn try_with_budget<R>(budget_bytes: u64, f: impl FnOnce() -> R) -> Result<R, BudgetError> {
    with_thread(|thread| thread.trying.set(thread.trying.get() + 1));
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        with_policy(Policy::Budget(budget_bytes), f)
    }));
    with_thread(|thread| thread.trying.set(thread.trying.get() - 1));
    match run {
        Ok(result) => Ok(result),
        Err(payload) => match payload.downcast::<TooSmallUnwind>() {
            Ok(too_small) => Err(too_small.0),
            Err(payload) => std::panic::resume_unwind(payload),
        },
    }
}

/// The trade-off between budget and extra compute for the last training step run under a
/// [`Policy::Budget`](crate::Policy::Budget), predicted by the planner from the
/// recorded graph and the op times measured in its forward pass; `Display` prints a table
/// (budget, predicted peak, predicted extra compute and replays). `None` before any such
/// step. The step is the last one this thread ran backward on under a budget, else the last
/// one in the process (a training loop's worker thread, say).
///
/// To pick a budget for a model: run one step under `Policy::Budget(u64::MAX)` (which keeps
/// what [`Policy::SaveAll`](crate::Policy::SaveAll) keeps), print this, and set the
/// budget whose extra compute you accept.
///
/// Each row also predicts the step's peak of held values plus gradients in flight
/// ([`TradeoffRow::step_peak_bytes`](crate::planner::TradeoffRow::step_peak_bytes)), from the
/// gradients the last completed pass of that graph held step by step ([`Tradeoff::grads`];
/// NOTE \[grads-in-flight\] in `planner/grads.rs`): with the optimizer step inside
/// backward (`remat-optim`), from a pass that ran that way.
pub fn tradeoff() -> Option<Tradeoff> {
    let view = last_view()?;
    let grads = grads_of(&view);
    Some(planner::tradeoff_shared(view, grads))
}

/// The gradients of the last completed pass of `view`'s graph: this thread's, else the
/// process's (NOTE \[grads-in-flight\] in `planner/grads.rs`).
fn grads_of(view: &GraphView) -> Option<planner::GradProfile> {
    let signature = planner::signature(view);
    let matching = |slot: &Option<(u64, Arc<planner::GradProfile>)>| {
        slot.as_ref()
            .filter(|(s, _)| *s == signature)
            .map(|(_, grads)| (**grads).clone())
    };
    with_thread(|thread| thread.memory.borrow().grads_of(signature))
        .map(|grads| (*grads).clone())
        .or_else(|| matching(&LAST_GRADS.lock().unwrap_or_else(|p| p.into_inner())))
}

/// The view of the last step run under a budget (see [`tradeoff`]).
fn last_view() -> Option<Arc<GraphView>> {
    with_thread(|thread| thread.memory.borrow().last_view())
        .or_else(|| LAST_VIEW.lock().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Whether `Policy::Budget(budget_bytes)` fits the last training step run under a budget
/// (the step [`tradeoff`] reports on), without running it: `Ok` when the planner guarantees
/// a schedule within it, so a step of the same graph under it will not panic as too small.
///
/// This is the fallible form of the check `backward()` makes (whose signature is Burn's, so
/// it can only panic). It costs what finding the smallest budget costs (one lean schedule,
/// and the chain's when the graph is one), not the whole trade-off table.
///
/// The step is this thread's last under a budget; on a thread that ran none (a training
/// loop on worker threads), the process's last. The step's graph is what its backward pass
/// reached. A forward pass may also hold values
/// of side computations that backward never reads (dropped before it), and a program may
/// run several graphs a step (gradient accumulation, a second loss), the last not the
/// largest: when a step under a budget stopped as too small (in its forward pass, or at
/// `backward()` on another graph), what it was found to need counts too, until a pass under
/// a budget completes.
///
/// # Errors
/// [`BudgetError::NoStep`] before any step under a budget; [`BudgetError::TooSmall`], with
/// the smallest budget that fits, when `budget_bytes` is below it.
///
/// ```
/// use burn_flex::Flex;
/// use burn_backend::{Backend, TensorData, ops::FloatTensorOps};
/// use remat::{Autodiff, BudgetError, Policy, check_budget, with_policy};
/// type B = Autodiff<Flex>;
///
/// let step = || {
///     let x = B::float_from_data(TensorData::from([1.0f32, 2.0, 3.0]), &Default::default());
///     let x = B::float_set_require_grad(x, true);
///     let y = B::float_exp(B::float_sin(B::float_exp(x)));
///     B::float_sum(y).backward()
/// };
/// with_policy(Policy::Budget(u64::MAX), step);
/// let budget = match check_budget(1) {
///     Ok(()) => 1,
///     Err(BudgetError::TooSmall { min_budget_bytes, .. }) => min_budget_bytes,
///     Err(e) => panic!("{e}"),
/// };
/// assert_eq!(check_budget(budget), Ok(()));
/// with_policy(Policy::Budget(budget), step);
/// ```
pub fn check_budget(budget_bytes: u64) -> Result<(), BudgetError> {
    let failed = with_thread(|thread| thread.failed_need.get());
    // This thread's own steps first: when its only step under a budget stopped as too small,
    // what it needed is the answer, not the graph another thread ran last.
    let own = with_thread(|thread| thread.memory.borrow().last_view());
    let view = match own {
        Some(view) => Some(view),
        None if failed > 0 => None,
        None => LAST_VIEW.lock().unwrap_or_else(|p| p.into_inner()).clone(),
    };
    let graph = match view {
        Some(view) => planner::smallest_budget(&view),
        None if failed > 0 => 0,
        None => return Err(BudgetError::NoStep),
    };
    let min_budget_bytes = graph.max(failed);
    if budget_bytes >= min_budget_bytes {
        Ok(())
    } else {
        Err(BudgetError::TooSmall {
            budget_bytes,
            min_budget_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::thread::stop;
    use super::*;

    /// The message of the panic `f` raises.
    fn panic_text(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let payload = std::panic::catch_unwind(f).expect_err("a panic");
        match payload.downcast::<String>() {
            Ok(text) => *text,
            Err(payload) => payload
                .downcast_ref::<&str>()
                .map_or_else(String::new, |s| (*s).to_string()),
        }
    }

    #[test]
    fn a_budget_error_names_the_smallest_budget_and_how_to_get_a_step() {
        let too_small = BudgetError::TooSmall {
            budget_bytes: 1000,
            min_budget_bytes: 1536,
        };
        assert_eq!(
            too_small.to_string(),
            "Policy::Budget(1000) is too small for the last training step: the smallest \
             budget it fits is 1536 bytes (1.5 KiB)"
        );
        let no_step = BudgetError::NoStep.to_string();
        assert!(
            no_step.contains("run one under Policy::Budget(u64::MAX)"),
            "{no_step}"
        );
    }

    #[test]
    fn too_small_names_a_budget_that_works_and_check_budget_remembers_it() {
        // A need no test graph of this process reaches, so that it decides `check_budget`
        // whatever the last view (process-wide) is; the need itself is this thread's.
        let need = 1u64 << 40;
        let infeasible = |lower_bound| planner::Error::Infeasible {
            budget_bytes: 100,
            min_budget_bytes: need,
            lower_bound,
        };
        let backward = panic_text(|| stop(100, &infeasible(false), None));
        assert!(
            backward.starts_with("remat: Policy::Budget(100) is too small for this training step:"),
            "{backward}"
        );
        assert!(
            backward.contains(&format!("{need} bytes (1.0 TiB)"))
                && backward.contains(&format!("remat::Policy::Budget({need})")),
            "{backward}"
        );
        assert!(!backward.contains("forward pass"), "{backward}");
        // In the forward pass `need` is a lower bound: the message says how to find one.
        let forward = panic_text(|| stop(100, &infeasible(true), Some("matmul")));
        assert!(
            forward.contains("(at op `matmul`, in the forward pass)")
                && forward.contains(&format!("at least {need} bytes"))
                && forward.contains("Policy::Budget(u64::MAX)")
                && forward.contains("remat::tradeoff()")
                && forward.contains("smallest_budget_within(4.0)"),
            "{forward}"
        );
        assert_eq!(
            check_budget(need - 1),
            Err(BudgetError::TooSmall {
                budget_bytes: need - 1,
                min_budget_bytes: need,
            })
        );
        assert_eq!(check_budget(need), Ok(()));
    }
}
