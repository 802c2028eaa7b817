//! Carrying a backward pass's schedule out (NOTE \[budget\]): [`carry_out`] runs one
//! node's actions (replays, frees, the step) on the graph's nodes, handing a value over to
//! the op that reads it last (NOTE \[hand-over\] in `graph/node.rs`), and [`after_pass`]
//! plans the graph for the next steps and keeps its view for the reports.
//!
//! # Invariants
//! - The held count follows the schedule: in debug builds (and with `export_tests`) it is
//!   checked against the budget before every op.

use std::sync::Arc;

use smallvec::SmallVec;

use super::pass::{Pending, smooth_costs};
use super::state::shared_plans;
use super::thread::{compact_thread_session, ran_last, with_thread};
use crate::checkpoint::cost;
use crate::graph::GraphNode;
use crate::planner::{self, Action, GradProfile, GraphView};

/// Carries out one node's actions (positions in `order`; see [`plan_pass`]); `held` counts
/// the bytes the schedule holds, checked against `budget` before every op in debug builds.
/// `profile` gets the gradients held during and after each step, and the most held values
/// plus gradients (NOTE \[grads-in-flight\] in `planner/grads.rs`).
///
/// [`plan_pass`]: super::plan_pass
pub(crate) fn carry_out(
    order: &[Option<Arc<dyn GraphNode>>],
    actions: &[Action],
    grads: &mut crate::grads::Gradients,
    held: &mut u64,
    budget: u64,
    profile: &mut GradProfile,
) {
    let node = |v: u32| {
        order[v as usize].as_ref().unwrap_or_else(|| {
            panic!("remat internal error: the budget's schedule refers to a finished node ({v})")
        })
    };
    let check = |held: u64| {
        assert!(
            !cfg!(any(debug_assertions, feature = "export_tests")) || held <= budget,
            "remat internal error: a budget's schedule holds {held} bytes, over the budget of \
             {budget}"
        );
    };
    let mut k = 0;
    while k < actions.len() {
        let action = actions[k];
        k += 1;
        if action.is_op() {
            // The inputs the previous op was the last to read have left (the planner's one
            // exception is the op running).
            check(*held);
        }
        let frees = actions[k..]
            .iter()
            .take_while(|a| matches!(a, Action::Free(_)))
            .count();
        let frees = &actions[k..k + frees];
        match action {
            Action::Replay(v) => {
                // The `Free`s right after a replay are the values it read last: they leave
                // before its output arrives, as the planner counts them; the replay's last
                // read of each takes it (NOTE [hand-over] in `graph/node.rs`: the op owns
                // it and may work in place, as in the forward pass). (A `Free` of the
                // replayed value itself comes after it is stored.)
                let replaying = node(v);
                let handed = hand_over(frees, |a| {
                    let u = node(a);
                    let reads = if a == v {
                        0
                    } else {
                        replaying.replay_reads_of(u.id())
                    };
                    (u, reads)
                });
                let mut freed = 0;
                // NOTE [replay-times] in `cost.rs`: the first replays of each kind are timed.
                let kind = (
                    replaying.backend(),
                    replaying.name(),
                    replaying.evicted_bytes().unwrap_or(0),
                );
                let synced = cost::replay_wanted(kind);
                let (bytes, ns) = replaying.scheduled_replay(
                    &mut || {
                        for (a, handed) in frees.iter().zip(&handed).filter(|(a, _)| a.node() != v)
                        {
                            freed += node(a.node()).scheduled_free().max(*handed);
                        }
                    },
                    synced,
                );
                if synced && let Some(ns) = ns {
                    cost::record_replay(kind, ns);
                }
                if frees.iter().any(|a| a.node() == v) {
                    freed += node(v).scheduled_free();
                }
                *held = (*held + bytes).saturating_sub(freed);
                let measured = *held + grads.live_bytes();
                profile.measured_peak_bytes = profile.measured_peak_bytes.max(measured);
                k += frees.len();
            }
            Action::Free(v) => *held = held.saturating_sub(node(v).scheduled_free()),
            Action::Step(v) => {
                // NOTE [hand-over] in `graph/node.rs`: the values the step reads last leave
                // at their last read (the step owns them); the `Free`s that follow count
                // them out.
                let stepping = node(v);
                let handed = hand_over(frees, |a| {
                    let u = node(a);
                    (u, stepping.step_reads_of(u.id()))
                });
                // NOTE [grads-in-flight]: the gradients between two steps (a leaf's handed
                // to the optimizer, say) count in this step's most.
                let before = *held;
                *held = held.saturating_sub(stepping.scheduled_step(grads));
                let during = grads.take_peak();
                for (a, handed) in frees.iter().zip(handed) {
                    let freed = node(a.node()).scheduled_free();
                    *held = held.saturating_sub(freed.max(handed));
                }
                let after = grads.live_bytes();
                profile.during_bytes.push(during);
                profile.after_bytes.push(after);
                let measured = (before + during).max(*held + after);
                profile.measured_peak_bytes = profile.measured_peak_bytes.max(measured);
                k += frees.len();
            }
            Action::Keep(_) | Action::Compute(_) => {}
        }
    }
    check(*held);
}

/// NOTE [hand-over] in `graph/node.rs`: `frees` follow an op (a step or a replay); `reads`
/// gives each freed value's node and how many times the op reads it. The op's last read of
/// each value it reads takes it; returns the bytes each value hands over (0 where the op
/// does not read it), for the held count.
fn hand_over<'n>(
    frees: &[Action],
    reads: impl Fn(u32) -> (&'n Arc<dyn GraphNode>, u32),
) -> SmallVec<[u64; 4]> {
    frees
        .iter()
        .map(|a| match reads(a.node()) {
            (_, 0) => 0,
            (u, reads) => u.scheduled_hand_over(reads),
        })
        .collect()
}

/// After a backward pass: its graph is planned for the next steps and its view kept for
/// [`tradeoff`] (`pending`), and the thread's session forgets consumed nodes.
///
/// A pass that panicked midway (a custom op's backward, say) passes `completed: false`: its
/// view is still kept for [`tradeoff`], but nothing is planned (the planner does not run
/// while a panic unwinds; the next pass plans the graph).
///
/// [`tradeoff`]: super::tradeoff
pub(crate) fn after_pass(pending: Pending, completed: bool) {
    if completed {
        with_thread(|thread| thread.failed_need.set(0));
        // Compacted before the next steps' plan is made: the session's planner and entries
        // of the pass's nodes are freed first (NOTE [pass-compaction] in `pass.rs`).
        compact_thread_session(true, None);
    }
    let unchanged = cost::replay_samples() == pending.samples;
    let view = if unchanged {
        pending.view
    } else {
        let mut nodes = pending.view.nodes().to_vec();
        smooth_costs(&mut nodes, pending.backend);
        GraphView::with_step_order(nodes, pending.view.step_order().to_vec())
            .map_or(pending.view, Arc::new)
    };
    // NOTE [first-step-plan] in `planner/backward.rs`: the pass's own plan of this view.
    let made = pending.next_plan.filter(|_| unchanged);
    debug_assert!(
        made.as_ref()
            .is_none_or(|made| planner::plan(&view, pending.budget)
                .is_ok_and(|again| again.actions() == made.actions())),
        "remat internal error: a pass's plan of its view is not the planner's"
    );
    if completed
        && pending.plan
        && !pending.side_read
        && let Some(schedule) = made.map_or_else(|| planner::plan(&view, pending.budget).ok(), Some)
    {
        let plan = with_thread(|thread| {
            thread
                .memory
                .borrow_mut()
                .remember_plan(view.clone(), pending.budget, schedule)
        });
        // NOTE [plans-across-threads] in `state.rs`.
        shared_plans(|plans| plans.offer(plan, pending.sides.clone(), pending.recorded_elsewhere));
    }
    let grads = pending.grads.filter(|_| completed);
    ran_last(
        view,
        pending.signature,
        pending.sides,
        pending.side_read,
        false,
        grads,
    );
}
