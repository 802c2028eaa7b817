//! How a pass that follows no plan runs (`plan_backward`, `backward.rs`), on chains without
//! tensors: from the state its forward pass left when that fits, from the lean state when
//! it does not (the values to drop named first), the smallest budget that works when
//! nothing fits, and the cheapest of Revolve's resumed schedule and online eviction.

use crate::planner::backward::{BackwardPlan, OnlineSteps, online_steps, plan_backward};
use crate::planner::{
    Action, Error, GraphView, Node, Schedule, revolve, simulate, smallest_budget,
};

/// A chain of `n` ops of 8 bytes and cost 1, each reading the one before in its replay
/// and its step (Revolve's chain); with `pinned_head`, the first op cannot replay.
fn chain(n: u32, pinned_head: bool) -> GraphView {
    let nodes = (0..n)
        .map(|i| {
            let previous: Vec<u32> = if i == 0 { vec![] } else { vec![i - 1] };
            Node::new("f", 8, 1.0)
                .inputs(previous.clone())
                .step_reads(previous)
                .replayable(!(pinned_head && i == 0))
        })
        .collect();
    GraphView::new(nodes).unwrap()
}

/// Every `every`-th value of an `n`-op chain (the last of each run of `every`).
fn every(n: u32, every: u32) -> Vec<u32> {
    (0..n).filter(|i| (i + 1) % every == 0).collect()
}

/// `plan_backward` with the view's own replayable flags: the plan and the values it asked
/// to drop first.
fn planned(
    view: &GraphView,
    held: &[u32],
    budget: u64,
    made: Option<OnlineSteps>,
) -> (Result<BackwardPlan, Error>, Vec<u32>) {
    let mut dropped = Vec::new();
    let plan = plan_backward(
        view,
        held,
        budget,
        made,
        |v| view.node(v).replayable,
        |v| dropped.push(v),
        &mut None,
    );
    (plan, dropped)
}

/// The whole step the engine runs: a forward pass that keeps `held`, then the plan's
/// backward. A whole schedule is one already; online steps follow that forward pass, and
/// each step's range ends with its `Step` (checked here).
fn whole_step(view: &GraphView, held: &[u32], plan: &BackwardPlan) -> Schedule {
    match plan {
        BackwardPlan::Whole(schedule) => schedule.clone(),
        BackwardPlan::Online(steps) => {
            assert_eq!(
                steps.ranges.len(),
                view.step_order().len(),
                "a range per step"
            );
            let mut start = 0;
            for (range, &step) in steps.ranges.iter().zip(view.step_order()) {
                assert_eq!(range.start, start, "the ranges cover the actions in order");
                let chunk = &steps.actions.actions()[range.start as usize..range.end as usize];
                let steps_run: Vec<Action> = chunk
                    .iter()
                    .copied()
                    .filter(|a| matches!(a, Action::Step(_)))
                    .collect();
                assert_eq!(
                    steps_run,
                    [Action::Step(step)],
                    "one step per range, its own"
                );
                start = range.end;
            }
            assert_eq!(start as usize, steps.actions.len());
            let mut actions = Vec::new();
            for i in 0..view.len() as u32 {
                actions.push(Action::Compute(i));
                if held.contains(&i) {
                    actions.push(Action::Keep(i));
                }
            }
            actions.extend_from_slice(steps.actions.actions());
            Schedule::new(actions)
        }
    }
}

/// A chain whose forward pass kept every tenth value within the budget: the pass resumes
/// from that state, drops nothing first, and online eviction replays no more than Revolve
/// would (equal here: the Dtr's steps are taken).
#[test]
fn a_held_state_that_fits_is_resumed_as_it_stands() {
    let view = chain(50, false);
    let held = every(50, 10);
    let budget = 20 * 8;
    let (plan, dropped) = planned(&view, &held, budget, None);
    let plan = plan.expect("the held state fits");
    assert!(
        dropped.is_empty(),
        "dropped {dropped:?} from a state that fits"
    );
    assert!(
        matches!(plan, BackwardPlan::Online(_)),
        "equal costs: the Dtr's steps"
    );
    let outcome = simulate(&view, &whole_step(&view, &held, &plan), budget).unwrap();
    let (_, revolve_cost) = revolve::resume(&view, &held, budget).unwrap();
    assert_eq!(outcome.recompute_cost, 45.0);
    assert_eq!(outcome.recompute_cost, revolve_cost);
}

/// A forward pass that kept all 20 values of a chain (160 bytes) leaves nothing that runs
/// within 48 bytes: the pass drops every value that can be rebuilt (all but the pinned
/// head), in the order held, before planning from the lean state, which fits.
#[test]
fn a_state_that_does_not_fit_runs_from_the_lean_state() {
    let view = chain(20, true);
    let held: Vec<u32> = (0..20).collect();
    let budget = 6 * 8;
    // Its error names a lower bound, not the smallest budget, whose bound is planning of
    // its own (`Dtr::bound_errors`).
    assert!(
        matches!(
            online_steps(&view, &held, budget),
            Err(Error::Infeasible {
                lower_bound: true,
                ..
            })
        ),
        "no online plan from it"
    );
    let (plan, dropped) = planned(&view, &held, budget, None);
    let plan = plan.expect("the lean state fits");
    assert_eq!(
        dropped,
        (1..20).collect::<Vec<u32>>(),
        "every rebuildable value, first"
    );
    let outcome = simulate(&view, &whole_step(&view, &[0], &plan), budget).unwrap();
    assert!(outcome.peak_bytes <= budget);
    assert!(outcome.total_replays > 0);
}

/// Under one value's bytes nothing fits, even from the lean state: the error names the
/// smallest budget that works from it, at which the pass plans, and planning just below
/// it names it again.
#[test]
fn a_budget_too_small_names_one_that_plans() {
    let view = chain(20, true);
    let held: Vec<u32> = (0..20).collect();
    let (plan, dropped) = planned(&view, &held, 8, None);
    assert_eq!(dropped, (1..20).collect::<Vec<u32>>());
    let Err(Error::Infeasible {
        budget_bytes: 8,
        min_budget_bytes: min,
        lower_bound: false,
    }) = plan
    else {
        panic!("planned under 8 bytes: {:?}", plan.map(|_| ()));
    };
    // On a chain, the planner's smallest works: the head and one value.
    assert_eq!(min, smallest_budget(&view));
    assert_eq!(min, 16);
    let (plan, _) = planned(&view, &held, min, None);
    let plan = plan.unwrap_or_else(|e| panic!("the budget named, {min}, does not plan: {e}"));
    let outcome = simulate(&view, &whole_step(&view, &[0], &plan), min).unwrap();
    assert!(outcome.peak_bytes <= min);
    let (below, _) = planned(&view, &[0], min - 1, None);
    assert!(
        matches!(below, Err(Error::Infeasible { min_budget_bytes, .. }) if min_budget_bytes == min),
        "at {} bytes: {:?}",
        min - 1,
        below.map(|_| ())
    );
}

/// Where the engine cannot drop what the forward pass kept (its values are not rebuildable
/// by the engine, whatever the view says), the lean state holds them all, and the planner's
/// smallest budget, made for a whole step from nothing held, does not plan from there: the
/// budget named is found by bisection, plans, and one byte less does not.
#[test]
fn a_budget_too_small_for_what_cannot_be_dropped_is_found_by_bisection() {
    let view = chain(20, false);
    let held = every(20, 5);
    let plan_at = |budget: u64| {
        let mut dropped = Vec::new();
        let plan = plan_backward(
            &view,
            &held,
            budget,
            None,
            |_| false,
            |v| dropped.push(v),
            &mut None,
        );
        assert!(dropped.is_empty(), "nothing is dropped: {dropped:?}");
        plan
    };
    let smallest = smallest_budget(&view);
    let Err(Error::Infeasible {
        min_budget_bytes: min,
        lower_bound: false,
        ..
    }) = plan_at(smallest)
    else {
        panic!("planned at the planner's smallest budget, {smallest}, with 4 values held");
    };
    assert!(
        min > smallest && min >= 4 * 8,
        "named {min}: above the planner's smallest ({smallest}), at least what is held (32)"
    );
    let plan =
        plan_at(min).unwrap_or_else(|e| panic!("the budget named, {min}, does not plan: {e}"));
    let outcome = simulate(&view, &whole_step(&view, &held, &plan), min).unwrap();
    assert!(outcome.peak_bytes <= min);
    assert!(
        matches!(plan_at(min - 1), Err(Error::Infeasible { min_budget_bytes, .. }) if min_budget_bytes == min),
        "{} bytes planned, or named another budget",
        min - 1
    );
}

/// NOTE [resume-chain] in `revolve.rs`: online eviction is abandoned once it replays more
/// than Revolve's resumed schedule, which is then run; where it replays less, its steps
/// are run. A Dtr made beforehand (the engine's, for the room other graphs leave) is
/// weighed the same way.
#[test]
fn the_cheaper_of_revolve_s_resumed_schedule_and_online_eviction_runs() {
    // Two values held of 50, five slots: Revolve replays 87, online eviction 143.
    let view = chain(50, false);
    let held = every(50, 20);
    let budget = 5 * 8;
    let (schedule, revolve_cost) = revolve::resume(&view, &held, budget).unwrap();
    let dtr = online_steps(&view, &held, budget).unwrap();
    let dtr_cost = dtr.replay_cost(view.nodes());
    assert!(
        revolve_cost < dtr_cost,
        "Revolve {revolve_cost}, online {dtr_cost}"
    );
    for made in [None, Some(dtr)] {
        let (plan, dropped) = planned(&view, &held, budget, made);
        assert!(dropped.is_empty());
        match plan.unwrap() {
            BackwardPlan::Whole(whole) => assert_eq!(whole, schedule),
            BackwardPlan::Online(_) => panic!("online eviction ran past Revolve's cost"),
        }
    }
    // Every fifth value held of 100, twenty slots: online eviction replays 83, Revolve 89.
    let view = chain(100, false);
    let held = every(100, 5);
    let budget = 20 * 8;
    let (_, revolve_cost) = revolve::resume(&view, &held, budget).unwrap();
    let dtr = online_steps(&view, &held, budget).unwrap();
    let dtr_cost = dtr.replay_cost(view.nodes());
    assert!(
        dtr_cost < revolve_cost,
        "Revolve {revolve_cost}, online {dtr_cost}"
    );
    let actions = dtr.actions.clone();
    for made in [None, Some(dtr)] {
        let (plan, dropped) = planned(&view, &held, budget, made);
        assert!(dropped.is_empty());
        let plan = plan.unwrap();
        let BackwardPlan::Online(steps) = &plan else {
            panic!("Revolve's schedule ran, costing more");
        };
        assert_eq!(steps.actions, actions);
        let outcome = simulate(&view, &whole_step(&view, &held, &plan), budget).unwrap();
        assert_eq!(outcome.recompute_cost, dtr_cost);
    }
}

/// `blocks` residual blocks `y = x + gelu(matmul(x))` of 1 KiB values, the matmul costing 4,
/// the others 1: a chain of blocks over 2,000 ops (the chain's DP is weighed on it) that is
/// not Revolve's chain (the add reads the block's input).
fn residual_blocks(blocks: u32) -> GraphView {
    const V: u64 = 1 << 10;
    let mut nodes = Vec::new();
    for b in 0..blocks {
        let x: Vec<u32> = if b == 0 { vec![] } else { vec![3 * b - 1] };
        let mm = 3 * b;
        nodes.push(
            Node::new("matmul", V, 4.0)
                .inputs(x.clone())
                .step_reads(x.clone()),
        );
        nodes.push(Node::new("gelu", V, 1.0).inputs([mm]).step_reads([mm]));
        let mut both = x;
        both.push(mm + 1);
        nodes.push(Node::new("add", V, 1.0).inputs(both));
    }
    GraphView::new(nodes).unwrap()
}

/// NOTE [online-first] in `backward.rs`: on a long chain of blocks, online eviction runs
/// first and, where it replays at most four forward passes, is taken without the chain's
/// DP being planned beside the held values, even where the DP would replay less; past four
/// passes the DP is weighed and the cheaper runs.
#[test]
fn online_eviction_within_four_forward_passes_runs_before_the_chain_s_dp() {
    let view = residual_blocks(700);
    assert!(view.len() > 2_000);
    let forward: f64 = view.nodes().iter().map(|n| n.cost).sum();
    assert!(
        revolve::resume(&view, &[], 1 << 20).is_none(),
        "not Revolve's chain"
    );
    // Every block's output held, room for a block more: each block is rebuilt from its
    // input once, well within four forward passes.
    let held: Vec<u32> = (0..700).map(|b| 3 * b + 2).collect();
    let budget = (700 + 4) << 10;
    let (plan, dropped) = planned(&view, &held, budget, None);
    assert!(dropped.is_empty());
    let plan = plan.expect("the held state fits");
    let BackwardPlan::Online(_) = &plan else {
        panic!("the chain's DP was planned where online eviction replays within four passes");
    };
    let outcome = simulate(&view, &whole_step(&view, &held, &plan), budget).unwrap();
    assert!(outcome.peak_bytes <= budget);
    assert!(
        outcome.recompute_cost <= 4.0 * forward,
        "{} against a forward pass of {forward}",
        outcome.recompute_cost
    );
    // Nothing held and room for 32 of the 2,100 values: online eviction replays past four
    // forward passes (it rebuilds from far back), the DP's checkpoints about half as much.
    let budget = 32 << 10;
    let dtr = online_steps(&view, &[], budget).unwrap();
    let dtr_cost = dtr.replay_cost(view.nodes());
    assert!(dtr_cost > 4.0 * forward, "{dtr_cost} against {forward}");
    let (plan, dropped) = planned(&view, &[], budget, None);
    assert!(dropped.is_empty());
    let plan = plan.expect("the DP fits");
    let BackwardPlan::Whole(_) = &plan else {
        panic!("online eviction ran past four forward passes where the DP replays less");
    };
    let outcome = simulate(&view, &whole_step(&view, &[], &plan), budget).unwrap();
    assert!(outcome.peak_bytes <= budget);
    assert!(
        outcome.recompute_cost < dtr_cost,
        "{} against online eviction's {dtr_cost}",
        outcome.recompute_cost
    );
}
