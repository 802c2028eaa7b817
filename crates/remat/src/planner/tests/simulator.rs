//! The simulator on hand-made graphs, with exact expected numbers.

use super::{Flavor, Rng, random_view};
use crate::planner::{
    Action::{self, *},
    Dtr, Error, Forced, GraphView, HeldEvent, Node, Schedule, from_decisions, simulate,
    simulate_traced,
};

/// x (4 B) -> y = exp(x) (8 B, its step reads y) -> z = y * x (2 B, reads both inputs).
fn small() -> GraphView {
    GraphView::new(vec![
        Node::new("x", 4, 10.0),
        Node::new("exp", 8, 20.0).inputs([0]).step_reads([1]),
        Node::new("mul", 2, 30.0).inputs([1, 0]).step_reads([1, 0]),
    ])
    .unwrap()
}

fn events(trace: &[HeldEvent]) -> Vec<(usize, u64)> {
    trace.iter().map(|e| (e.index, e.held_bytes)).collect()
}

#[test]
fn keeping_everything_holds_the_reads_until_their_last_step() {
    let view = small();
    let schedule = Schedule::new(vec![
        Compute(0),
        Keep(0),
        Compute(1),
        Keep(1),
        Compute(2),
        Step(2),
        Step(1),
        Free(1),
        Step(0),
        Free(0),
    ]);
    let outcome = simulate_traced(&view, &schedule, 12).unwrap();
    assert_eq!(outcome.peak_bytes, 12);
    assert_eq!(outcome.forward_peak_bytes, 12);
    assert_eq!(outcome.recompute_cost, 0.0);
    assert_eq!(outcome.total_replays, 0);
    assert_eq!(events(&outcome.trace), [(1, 4), (3, 12), (7, 4), (9, 0)]);
    // One byte less is over the budget, at the keep of y.
    assert_eq!(
        simulate(&view, &schedule, 11),
        Err(Error::OverBudget {
            index: 3,
            held_bytes: 12,
            budget_bytes: 11
        })
    );
    // Today's engine with every value kept keeps each value when its first reader is
    // recorded and drops it after its last read.
    let engine = from_decisions(&view);
    assert_eq!(
        engine.actions(),
        [
            Compute(0),
            Compute(1),
            Keep(1),
            Compute(2),
            Keep(0),
            Step(2),
            Free(0),
            Step(1),
            Free(1),
            Step(0),
        ]
    );
    let outcome = simulate_traced(&view, &engine, 12).unwrap();
    assert_eq!(events(&outcome.trace), [(2, 8), (4, 12), (6, 8), (8, 0)]);
}

#[test]
fn a_replay_takes_its_last_read_input_before_its_output_arrives() {
    let view = small();
    // Keep only x; rebuild y for the first step that reads it.
    let schedule = Schedule::new(vec![
        Compute(0),
        Keep(0),
        Compute(1),
        Compute(2),
        Replay(1),
        Step(2),
        Step(1),
        Free(1),
        Step(0),
        Free(0),
    ]);
    let outcome = simulate(&view, &schedule, 12).unwrap();
    assert_eq!(outcome.peak_bytes, 12);
    assert_eq!(outcome.forward_peak_bytes, 4);
    assert_eq!(outcome.recompute_cost, 20.0);
    assert_eq!(outcome.replays, [0, 1, 0]);

    // A chain a -> b -> c, each 10 B, each step reading its input: rebuilding b from a while
    // taking a holds 10 B, never 20 (the op-running exception).
    let chain = GraphView::new(vec![
        Node::new("a", 10, 1.0),
        Node::new("b", 10, 1.0).inputs([0]).step_reads([0]),
        Node::new("c", 10, 1.0).inputs([1]).step_reads([1]),
    ])
    .unwrap();
    let schedule = Schedule::new(vec![
        Compute(0),
        Keep(0),
        Compute(1),
        Compute(2),
        Replay(1),
        Free(0),
        Step(2),
        Free(1),
        Replay(0),
        Step(1),
        Free(0),
        Step(0),
    ]);
    let outcome = simulate_traced(&chain, &schedule, 10).unwrap();
    assert_eq!(outcome.peak_bytes, 10);
    assert_eq!(outcome.recompute_cost, 2.0);
    assert_eq!(
        events(&outcome.trace),
        [(1, 10), (5, 0), (4, 10), (7, 0), (8, 10), (10, 0)]
    );
}

#[test]
fn constants_count_from_the_forward_op_to_its_step() {
    let view = GraphView::new(vec![
        Node::new("a", 4, 1.0).fixed_bytes(3),
        Node::new("b", 4, 1.0)
            .inputs([0])
            .step_reads([0])
            .fixed_bytes(5),
    ])
    .unwrap();
    let schedule = Schedule::new(vec![
        Compute(0),
        Compute(1),
        Keep(0),
        Step(1),
        Free(0),
        Step(0),
    ]);
    let outcome = simulate_traced(&view, &schedule, 12).unwrap();
    assert_eq!(outcome.peak_bytes, 12);
    assert_eq!(
        events(&outcome.trace),
        [(0, 3), (1, 8), (2, 12), (3, 7), (4, 3), (5, 0)]
    );
}

fn invalid(view: &GraphView, actions: Vec<Action>) -> (usize, String) {
    match simulate(view, &Schedule::new(actions), u64::MAX) {
        Err(Error::InvalidAction { index, reason, .. }) => (index, reason),
        other => panic!("expected an invalid action, got {other:?}"),
    }
}

#[test]
fn invalid_schedules_are_rejected_with_the_action_at_fault() {
    let view = small();
    // A step reads a value that is not held.
    let (index, reason) = invalid(&view, vec![Compute(0), Compute(1), Compute(2), Step(2)]);
    assert_eq!(index, 3);
    assert!(reason.contains("value 1"), "{reason}");
    // Forward ops out of order.
    assert_eq!(invalid(&view, vec![Compute(1)]).0, 0);
    // A replay before the forward pass ends.
    assert_eq!(invalid(&view, vec![Compute(0), Replay(0)]).0, 1);
    // A replay whose input is not held.
    let (index, reason) = invalid(&view, vec![Compute(0), Compute(1), Compute(2), Replay(1)]);
    assert_eq!(index, 3);
    assert!(reason.contains("input 0"), "{reason}");
    // A keep outside the forward pass.
    assert_eq!(
        invalid(
            &view,
            vec![
                Compute(0),
                Keep(0),
                Compute(1),
                Compute(2),
                Replay(1),
                Keep(1)
            ]
        )
        .0,
        5
    );
    // Steps out of order.
    assert_eq!(
        invalid(&view, vec![Compute(0), Compute(1), Compute(2), Step(1)]).0,
        3
    );
    // A double free.
    assert_eq!(
        invalid(&view, vec![Compute(0), Keep(0), Free(0), Free(0)]).0,
        3
    );
    // A replay after the node's step.
    let (index, _) = invalid(
        &view,
        vec![
            Compute(0),
            Keep(0),
            Compute(1),
            Keep(1),
            Compute(2),
            Step(2),
            Step(1),
            Free(1),
            Replay(1),
        ],
    );
    assert_eq!(index, 8);
    // Ending with values held.
    let unfinished = Schedule::new(vec![
        Compute(0),
        Keep(0),
        Compute(1),
        Keep(1),
        Compute(2),
        Step(2),
        Step(1),
        Step(0),
    ]);
    assert!(matches!(
        simulate(&view, &unfinished, u64::MAX),
        Err(Error::Incomplete { .. })
    ));
}

#[test]
fn forced_marks_are_enforced() {
    let keep = GraphView::new(vec![
        Node::new("a", 4, 1.0).forced(Some(Forced::Keep)),
        Node::new("b", 4, 1.0).inputs([0]).step_reads([0]),
    ])
    .unwrap();
    // A forced-Keep value dropped before its last read.
    let (index, reason) = invalid(&keep, vec![Compute(0), Keep(0), Free(0)]);
    assert_eq!(index, 2);
    assert!(reason.contains("forced to Keep"), "{reason}");
    // ... or replayed.
    assert_eq!(invalid(&keep, vec![Compute(0), Compute(1), Replay(0)]).0, 2);
    let recompute = GraphView::new(vec![
        Node::new("a", 4, 1.0).forced(Some(Forced::Recompute)),
        Node::new("b", 4, 1.0).inputs([0]).step_reads([0]),
    ])
    .unwrap();
    assert_eq!(invalid(&recompute, vec![Compute(0), Keep(0)]).0, 1);
    // A non-replayable value cannot be rebuilt.
    let random = GraphView::new(vec![
        Node::new("rand", 4, 1.0).replayable(false),
        Node::new("b", 4, 1.0).inputs([0]).step_reads([0]),
    ])
    .unwrap();
    assert_eq!(
        invalid(&random, vec![Compute(0), Compute(1), Replay(0)]).0,
        2
    );
}

#[test]
fn invalid_views_are_rejected() {
    let later_input = GraphView::new(vec![Node::new("a", 1, 1.0).inputs([0])]);
    assert!(matches!(
        later_input,
        Err(Error::InvalidView { node: Some(0), .. })
    ));
    let bad_cost = GraphView::new(vec![Node::new("a", 1, f64::NAN)]);
    assert!(matches!(
        bad_cost,
        Err(Error::InvalidView { node: Some(0), .. })
    ));
    let lost = GraphView::new(vec![
        Node::new("a", 1, 1.0)
            .replayable(false)
            .forced(Some(Forced::Recompute)),
    ]);
    assert!(matches!(
        lost,
        Err(Error::InvalidView { node: Some(0), .. })
    ));
    let nodes = vec![Node::new("a", 1, 1.0), Node::new("b", 1, 1.0).inputs([0])];
    // Producers before consumers in the step order.
    let order = GraphView::with_step_order(nodes.clone(), vec![0, 1]);
    assert!(matches!(
        order,
        Err(Error::InvalidView { node: Some(1), .. })
    ));
    let short = GraphView::with_step_order(nodes, vec![1]);
    assert!(matches!(short, Err(Error::InvalidView { node: None, .. })));
    // Constants released by a step that runs before their node's.
    let early = GraphView::new(vec![
        Node::new("a", 1, 1.0).fixed_bytes(4).fixed_until(1),
        Node::new("b", 1, 1.0),
    ]);
    assert!(matches!(
        early,
        Err(Error::InvalidView { node: Some(0), .. })
    ));
}

/// NOTE [shared-release]: a constant two ops hold, charged to the first (`a`), is held
/// until the later of their steps (`b`'s), once, and released there; a schedule that keeps
/// it past `a`'s step needs room for it until then.
#[test]
fn a_shared_constant_is_held_once_until_its_last_holder_steps() {
    // a (2 B, constant 100 B held with b) and b (8 B, independent of a), c = f(b) reading b.
    // Steps: c, a, b.
    let view = GraphView::with_step_order(
        vec![
            Node::new("a", 2, 1.0).fixed_bytes(100).fixed_until(1),
            Node::new("b", 8, 1.0),
            Node::new("c", 1, 1.0).inputs([1]).step_reads([1]),
        ],
        vec![2, 0, 1],
    )
    .unwrap();
    let schedule = Schedule::new(vec![
        Compute(0),
        Compute(1),
        Keep(1),
        Compute(2),
        Step(2),
        Free(1),
        Step(0),
        Step(1),
    ]);
    let outcome = simulate_traced(&view, &schedule, u64::MAX).unwrap();
    // The constant from a's op, b kept, b freed, and the constant released at b's step
    // (not at a's).
    assert_eq!(
        events(&outcome.trace),
        vec![(0, 100), (2, 108), (5, 100), (7, 0)]
    );
    assert_eq!(outcome.peak_bytes, 108);
    assert_eq!(view.constants_from(), vec![100, 100, 100, 0]);
    assert!(simulate(&view, &schedule, 107).is_err());
    let text = view.to_string();
    assert!(text.contains("fixed 100 B until 1"), "{text}");
    assert_eq!(text.parse::<GraphView>().unwrap(), view);
    // The executor over the whole view counts the same: it fits in 108, not 107; and fed
    // op by op (the releaser not yet recorded when `a` is), the same.
    let dtr = Dtr::schedule(&view, 108).expect("fits in 108 bytes");
    assert!(simulate(&view, &dtr, 108).is_ok());
    assert!(Dtr::schedule(&view, 107).is_err());
    let online = |budget: u64| -> Result<u64, Error> {
        let mut dtr = Dtr::new(budget);
        for node in view.nodes() {
            dtr.on_compute(node.clone())?;
        }
        dtr.begin_backward(view.step_order().to_vec())?;
        for _ in 0..view.len() {
            dtr.on_step()?;
        }
        assert_eq!(dtr.held_bytes(), 0, "everything released at the end");
        Ok(dtr.peak_bytes())
    };
    assert_eq!(online(108).unwrap(), 108);
    assert!(online(107).is_err());
}

#[test]
fn today_s_engine_rebuilds_each_dropped_value_once_and_drops_unread_backups() {
    // a -> b = exp(a) (Recompute, its step reads b) -> c = mul(b, a) (Recompute, reads both)
    // -> d = sum(c) (keeps, reads nothing).
    let view = GraphView::new(vec![
        Node::new("a", 4, 1.0),
        Node::new("exp", 4, 2.0)
            .inputs([0])
            .step_reads([1])
            .forced(Some(Forced::Recompute)),
        Node::new("mul", 4, 3.0)
            .inputs([1, 0])
            .step_reads([1, 0])
            .forced(Some(Forced::Recompute)),
        Node::new("sum", 4, 4.0).inputs([2]),
    ])
    .unwrap();
    let schedule = from_decisions(&view);
    assert_eq!(
        schedule.actions(),
        [
            Compute(0),
            Compute(1),
            Keep(0),
            Compute(2),
            Compute(3),
            Step(3),
            Replay(1),
            Step(2),
            Free(0),
            Step(1),
            Free(1),
            Step(0),
        ]
    );
    // `a` is kept when `exp` (rebuilt, so its replay reads `a`) is recorded, and dropped
    // after its last read (mul's step); `mul` itself is never needed (sum reads nothing), so
    // it is never rebuilt.
    let outcome = simulate(&view, &schedule, u64::MAX).unwrap();
    assert_eq!(outcome.replays, [0, 1, 0, 0]);
    assert_eq!(outcome.peak_bytes, 8);
}

#[test]
fn the_schedule_index_splits_the_step_into_chunks() {
    let view = small();
    let schedule = from_decisions(&view);
    let index = schedule.index();
    // [C0, C1, K1, C2, K0, S2, F0, S1, F1, S0]
    assert_eq!(index.forward(0), Some(0..1));
    assert_eq!(index.forward(1), Some(1..3));
    assert_eq!(index.forward(2), Some(3..5));
    assert_eq!(index.forward(3), None);
    assert_eq!(index.backward(0), Some(5..7));
    assert_eq!(index.backward(1), Some(7..9));
    assert_eq!(index.backward(2), Some(9..10));
    assert_eq!(index.backward(3), None);
}

#[test]
fn views_read_back_what_display_writes() {
    let mut rng = Rng::new(7);
    for n in [1, 5, 16, 40] {
        let flavor = Flavor {
            marks: true,
            shuffled_steps: true,
        };
        let view = random_view(&mut rng, n, flavor);
        let text = view.to_string();
        let back: GraphView = text.parse().expect("a written view reads back");
        // Costs are written in whole nanoseconds.
        let rounded: Vec<Node> = view
            .nodes()
            .iter()
            .map(|node| Node {
                cost: node.cost.round(),
                ..node.clone()
            })
            .collect();
        assert_eq!(back.nodes(), &rounded[..], "{text}");
        assert_eq!(back.step_order(), view.step_order(), "{text}");
    }
    let error = "0 a 4 B 1 ns in [] reads []\n2 b 4 B 1 ns in [0] reads []"
        .parse::<GraphView>()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("line 2") && error.contains("count up"),
        "{error}"
    );
    let error = "0 a 4 B 1 ns in [] reads [] bogus"
        .parse::<GraphView>()
        .unwrap_err();
    assert!(error.to_string().contains("line 1"), "{error}");
}
