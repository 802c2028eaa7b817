//! The budget's hooks in a backward pass: the [`ScheduledPass`] that carries out the plan
//! `budget::plan_pass` makes (NOTE \[budget\] in `checkpoint/budget/`).
//!
//! The graph's traversal (`graph/backward.rs`) does not name the budget: it asks
//! [`schedule`] once its nodes are ordered, and runs the answer node by node (the nodes
//! themselves know the budget's rules: ARCHITECTURE.md, "Layers").
//!
//! # Invariants
//! - A pass is scheduled exactly when one of its nodes was recorded under a budget.

use std::sync::Arc;

use super::budget;
use crate::graph::grads::Gradients;
use crate::graph::{GraphNode, ScheduledPass};
use crate::planner::GradProfile;

/// The schedule of a pass over nodes recorded under a budget, or `None`.
///
/// # Panics
/// When the graph cannot fit the budget, before anything ran.
pub(crate) fn schedule(order: &[Arc<dyn GraphNode>]) -> Option<Box<dyn ScheduledPass>> {
    let budget = budget::pass_budget(order)?;
    // The pass plans within what other live graphs under a budget leave of it.
    let (plan, held, budget, pending) = budget::plan_pass(order, budget);
    Some(Box::new(BudgetPass {
        budget,
        plan,
        held,
        pending: Some(pending),
        grads: None,
    }))
}

/// A pass planned under `budget`: the actions to run before each node of the order is
/// finished, the bytes the schedule holds, and the pass's view until it ends.
struct BudgetPass {
    budget: u64,
    plan: budget::PassActions,
    held: u64,
    pending: Option<budget::Pending>,
    /// The gradients the pass held, step by step, from its first node on (NOTE
    /// [grads-in-flight] in `planner/grads.rs`).
    grads: Option<GradProfile>,
}

impl Drop for BudgetPass {
    /// A pass that panicked midway still leaves its view for `tradeoff()`.
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            budget::after_pass(pending, false);
        }
    }
}

impl ScheduledPass for BudgetPass {
    fn before_finish(
        &mut self,
        i: usize,
        order: &[Option<Arc<dyn GraphNode>>],
        grads: &mut Gradients,
    ) {
        let actions = self.plan.at(i);
        let profile = self.grads.get_or_insert_with(|| {
            grads.take_peak();
            GradProfile {
                before_bytes: grads.live_bytes(),
                measured_peak_bytes: self.held + grads.live_bytes(),
                ..GradProfile::default()
            }
        });
        budget::carry_out(order, &actions, grads, &mut self.held, self.budget, profile);
    }

    fn after_pass(&mut self) {
        if let Some(mut pending) = self.pending.take() {
            pending.grads = self.grads.take();
            budget::after_pass(pending, true);
        }
    }
}
