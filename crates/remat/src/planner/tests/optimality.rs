//! How close the planner gets: Revolve's closed form on uniform chains, an exact solver on
//! small random DAGs.

use super::{Flavor, Rng, chain, random_view};
use crate::planner::exact;
use crate::planner::{
    GraphView, Node, min_feasible_budget, plan, recompute_lower_bound, revolve, simulate,
};

fn planned_replays(view: &GraphView, budget: u64) -> u64 {
    let schedule = plan(view, budget).unwrap();
    simulate(view, &schedule, budget).unwrap().total_replays
}

#[test]
fn revolve_s_closed_form_is_the_exact_optimum_of_small_chains() {
    for n in 1..=9u32 {
        for slots in 1..=4u64 {
            let view = chain(n, 1, 1.0);
            let exact = exact::optimum(&view, slots).expect("one slot is enough for a chain");
            assert_eq!(
                revolve::replays(n as u64, slots),
                Some(exact as u64),
                "n = {n}, slots = {slots}"
            );
        }
    }
    assert_eq!(revolve::replays(5, 0), None);
    assert_eq!(revolve::replays(1, 0), Some(0));
    // Unlimited room (an unlimited budget over 1-byte values) replays nothing.
    assert_eq!(revolve::replays(5, u64::MAX), Some(0));
    let view = chain(5, 1, 1.0);
    assert_eq!(planned_replays(&view, u64::MAX), 0);
}

#[test]
fn revolve_s_schedule_reaches_the_closed_form() {
    for n in [2u32, 3, 10, 57, 200] {
        for slots in 1..=8u64 {
            let view = chain(n, 3, 1.0);
            assert_eq!(
                planned_replays(&view, slots * 3),
                revolve::replays(n as u64, slots).unwrap(),
                "n = {n}, slots = {slots}"
            );
        }
    }
}

#[test]
fn a_1000_op_chain_replays_within_10_percent_of_revolve() {
    let view = chain(1000, 1 << 20, 1000.0);
    for slots in [10u64, 3] {
        let optimum = revolve::replays(1000, slots).unwrap();
        let planned = planned_replays(&view, slots << 20);
        assert!(
            planned as f64 <= 1.1 * optimum as f64,
            "slots {slots}: {planned} replays, Revolve {optimum}"
        );
    }
    assert_eq!(revolve::replays(1000, 10), Some(2637));
    assert_eq!(revolve::replays(1000, 3), Some(11156));
}

#[test]
fn planned_recompute_is_within_10_percent_of_the_exact_optimum_on_small_dags() {
    // 400 random DAGs of 4 to 14 ops (half with pinned values, forced marks and constants,
    // some with a shuffled step order), each at 4 budgets from the smallest feasible to
    // keep-all: 1600 cases.
    let mut rng = Rng::new(7);
    let mut ratios: Vec<f64> = Vec::new();
    let mut heuristic_ratios: Vec<f64> = Vec::new();
    for case in 0..400 {
        let n = if case % 8 == 7 {
            14
        } else {
            4 + rng.below(8) as usize
        };
        let flavor = Flavor {
            marks: rng.chance(0.5),
            shuffled_steps: rng.chance(0.3),
        };
        let view = random_view(&mut rng, n, flavor);
        let min = min_feasible_budget(&view);
        let exact_min = exact::min_budget(&view);
        assert!(exact_min <= min, "{view}");
        let high = simulate(&view, &plan(&view, u64::MAX).unwrap(), u64::MAX)
            .unwrap()
            .peak_bytes;
        for k in 0..4 {
            let budget = min + (high.max(min) - min) * k / 4;
            let optimum = exact::optimum(&view, budget).expect("the planner met this budget");
            let ratio = |planned: f64| {
                if optimum == 0.0 {
                    if planned == 0.0 { 1.0 } else { f64::INFINITY }
                } else {
                    planned / optimum
                }
            };
            let schedule = plan(&view, budget).unwrap();
            let planned = simulate(&view, &schedule, budget).unwrap().recompute_cost;
            assert!(planned >= optimum - 1e-9, "{view}");
            ratios.push(ratio(planned));
            // The heuristic generators alone (larger views have nothing else).
            let (schedule, _) = crate::planner::plan::plan_with(&view, budget, false).unwrap();
            let heuristic = simulate(&view, &schedule, budget).unwrap().recompute_cost;
            heuristic_ratios.push(ratio(heuristic));
        }
    }
    // Views of at most 14 ops are solved exactly (`exact.rs`): every case is at the optimum.
    assert_eq!(ratios.len(), 1600);
    let exact = ratios.iter().filter(|&&r| r <= 1.0 + 1e-9).count();
    assert_eq!(exact, 1600);
    // The heuristic generators, which plan every larger view: 1593 of the 1600 within 10%
    // (tight budgets on graphs with pinned values; the worst is 1.39x).
    let within = heuristic_ratios.iter().filter(|&&r| r <= 1.1).count();
    let worst = heuristic_ratios.iter().copied().fold(1.0, f64::max);
    assert!(
        within >= 1593 && worst < 1.4,
        "{within} within 10%, worst {worst}"
    );
}

#[test]
fn the_recompute_bound_never_passes_the_exact_optimum() {
    // NOTE [recompute-bound]: a lower bound for every schedule; on 300 random DAGs at 5
    // budgets from below the smallest feasible to keep-all, it is at most the exact optimum
    // and at most the planner's cost, and infinite only where nothing fits.
    let mut rng = Rng::new(11);
    let (mut tight, mut cases) = (0, 0);
    let mut ratios: Vec<f64> = Vec::new();
    for case in 0..300 {
        let n = 3 + rng.below(10) as usize;
        let flavor = Flavor {
            marks: case % 2 == 0,
            shuffled_steps: case % 3 == 0,
        };
        let view = random_view(&mut rng, n, flavor);
        let exact_min = exact::min_budget(&view);
        // The keep-all peak of the heuristic plan (the exact solver's, equal in cost, may
        // hold its values in another order).
        let (keep_all, _) = crate::planner::plan::plan_with(&view, u64::MAX, false).unwrap();
        let high = simulate(&view, &keep_all, u64::MAX).unwrap().peak_bytes;
        for k in 0..5u64 {
            let budget = if k == 0 {
                exact_min.saturating_sub(1)
            } else {
                exact_min + (high.max(exact_min) - exact_min) * (k - 1) / 3
            };
            let bound = recompute_lower_bound(&view, budget);
            match exact::optimum(&view, budget) {
                None => continue,
                Some(optimum) => {
                    cases += 1;
                    assert!(
                        bound <= optimum + 1e-6,
                        "bound {bound} > optimum {optimum} at {budget}:\n{view}"
                    );
                    if let Ok(schedule) = plan(&view, budget) {
                        let planned = simulate(&view, &schedule, budget).unwrap().recompute_cost;
                        assert!(bound <= planned + 1e-6, "{view}");
                    }
                    if optimum > 0.0 {
                        ratios.push(bound / optimum);
                    }
                    if optimum > 0.0 && bound >= 0.999 * optimum {
                        tight += 1;
                    }
                }
            }
        }
    }
    // How close it gets: NOTE [recompute-bound] ignores what a budget costs after the forward
    // pass, so on small random graphs at tight budgets it was loose (median 0.53 of the
    // optimum where the optimum replays; 101 of those 763 cases met it); with NOTE
    // [one-value-bound], which counts a rebuild per step where a step leaves room for
    // nothing else: median 0.68, 218 of 763 meet it.
    ratios.sort_by(f64::total_cmp);
    let q = |f: f64| ratios[((ratios.len() - 1) as f64 * f) as usize];
    let summary = format!(
        "{tight} tight of {cases} ({} with replays): quartiles {} {} {}",
        ratios.len(),
        q(0.25),
        q(0.5),
        q(0.75)
    );
    eprintln!("{summary}");
    assert!(cases > 1000 && tight >= 200 && q(0.5) > 0.65, "{summary}");
}

#[test]
fn the_recompute_bound_on_a_hand_made_graph() {
    // x -> a (8 B, cost 5, read) -> b (8 B, cost 1, read), both read by their steps; x is a
    // pinned 4-byte value (not replayable), read by a's step.
    let view = GraphView::new(vec![
        Node::new("x", 4, 100.0).replayable(false),
        Node::new("a", 8, 5.0).inputs([0]).step_reads([0, 1]),
        Node::new("b", 8, 1.0).inputs([1]).step_reads([1, 2]),
    ])
    .unwrap();
    // Everything held: 20 bytes, no replay.
    assert_eq!(recompute_lower_bound(&view, 20), 0.0);
    // Below: b's step holds a and b while x waits for a's step (NOTE [one-value-bound]).
    for budget in [19, 12, 4, 3] {
        assert_eq!(exact::optimum(&view, budget), None);
        assert_eq!(
            recompute_lower_bound(&view, budget),
            f64::INFINITY,
            "{budget}"
        );
    }
    // A chain of four 4-byte values (costs 1, 2, 3, 4), each step reading the value before.
    let chain = GraphView::new(
        (0..4u32)
            .map(|i| {
                let node = Node::new("op", 4, f64::from(i + 1));
                if i == 0 {
                    node
                } else {
                    node.inputs([i - 1]).step_reads([i - 1])
                }
            })
            .collect(),
    )
    .unwrap();
    // Room for two values: keep 2 and 1, replay 0 (cost 1) when forward ends.
    assert_eq!(exact::optimum(&chain, 8), Some(1.0));
    assert!((recompute_lower_bound(&chain, 8) - 1.0).abs() < 1e-6);
    // Room for one: every read after the first is rebuilt from scratch, 1 + 2 then 1; the
    // forward pass's end alone sees each value replayed once (3).
    assert_eq!(exact::optimum(&chain, 4), Some(4.0));
    assert!((recompute_lower_bound(&chain, 4) - 4.0).abs() < 1e-6);
}

/// Graphs recorded from the benchmark's models (`bench --dump-views`), with the op times
/// measured on the 2-core CI-class machine.
pub(super) const RECORDED: [(&str, &str); 3] = [
    ("transformer", include_str!("views/transformer.view")),
    ("mlp", include_str!("views/mlp.view")),
    ("convnet", include_str!("views/convnet.view")),
];

#[test]
fn recorded_models_plan_close_to_the_recompute_bound() {
    // The bound is fractional (a knapsack's relaxation): at a loose budget where one op's
    // replay decides, the plan's integral cost can pass 1.2x the bound by up to one op's
    // cost (transformer at 90%: the bound replays 5/8 of an 8 MiB value, the plan all of
    // it). Measured: at 90/75/50/30%, transformer 1.39/1.20/1.05/1.09x the bound (1.16 and
    // 1.13x at 50 and 30% before the bound-guided run, NOTE [bound-guided] in `plan.rs`: its
    // plans there are certified within 10% of the optimum, which the bound cannot pass), mlp
    // 1.02/1.06/1.13/1.07x, convnet 1.43/1.14/1.00/2.04x (30% is near its smallest budget,
    // where the bound, blind to the backward pass, is loose).
    let mut report = String::new();
    let mut over = Vec::new();
    for (name, text) in RECORDED {
        let view: GraphView = text.parse().unwrap();
        let largest = view.nodes().iter().map(|n| n.cost).fold(0.0, f64::max);
        let all = simulate(&view, &plan(&view, u64::MAX).unwrap(), u64::MAX)
            .unwrap()
            .peak_bytes;
        for percent in [90u64, 75, 50, 30] {
            let budget = all * percent / 100;
            let planned = simulate(&view, &plan(&view, budget).unwrap(), budget)
                .unwrap()
                .recompute_cost;
            let bound = recompute_lower_bound(&view, budget);
            assert!(bound <= planned + 1e-6, "{name} {percent}%");
            let ratio = planned / bound;
            report += &format!("{name} {percent}%: {ratio:.3} ({planned:.0} / {bound:.0} ns)\n");
            if percent >= 50 && planned > 1.2 * bound + largest {
                over.push(format!("{name} {percent}%"));
            }
            if name == "transformer" && percent <= 50 && planned > 1.1 * bound {
                over.push(format!("{name} {percent}%: not within 10% of the optimum"));
            }
        }
    }
    println!("{report}");
    assert!(over.is_empty(), "{over:?}\n{report}");
}

/// A random general chain (NOTE [chain-dp]): each node replays from the previous one, its
/// step reads the previous value or nothing (and, with `own_reads`, maybe its own output);
/// equal sizes, costs 1..=10.
fn random_chain(rng: &mut Rng, n: u32, own_reads: bool) -> GraphView {
    let nodes = (0..n)
        .map(|i| {
            let inputs: Vec<u32> = if i == 0 { vec![] } else { vec![i - 1] };
            let mut reads = Vec::new();
            if i > 0 && rng.chance(0.7) {
                reads.push(i - 1);
            }
            if own_reads && rng.chance(0.3) {
                reads.push(i);
            }
            Node::new("op", 4, (1 + rng.below(10)) as f64)
                .inputs(inputs)
                .step_reads(reads)
        })
        .collect();
    GraphView::new(nodes).unwrap()
}

#[test]
fn the_chain_dp_is_revolve_on_uniform_chains_and_exact_on_small_general_ones() {
    // Uniform chains: the DP's replays are Revolve's closed form.
    for (n, slots) in [(12u32, 2u64), (30, 3), (60, 4), (90, 6)] {
        let view = chain(n, 8, 1.0);
        let schedule = super::super::chain::schedule(&view, slots * 8).unwrap();
        let outcome = simulate(&view, &schedule, slots * 8).unwrap();
        assert_eq!(
            Some(outcome.total_replays),
            revolve::replays(n as u64, slots),
            "n {n}, {slots} slots"
        );
    }
    // Small general chains with their own costs: the DP's schedule is valid and costs what
    // the exact solver finds, at every budget from the smallest that fits to keep-all.
    let mut rng = Rng::new(5);
    // Per kind of chain (without, then with steps that read their own output): cases,
    // cases at the optimum, and the ratios to it.
    let mut kinds = [(0, 0, Vec::new()), (0, 0, Vec::new())];
    for case in 0..300 {
        let own_reads = case % 2 == 1;
        let n = 3 + rng.below(10) as u32;
        let view = random_chain(&mut rng, n, own_reads);
        for slots in 1..=n as u64 {
            let budget = slots * 4;
            let Some(schedule) = super::super::chain::schedule(&view, budget) else {
                continue;
            };
            let cost = simulate(&view, &schedule, budget)
                .unwrap_or_else(|e| panic!("{e} at {budget}:\n{view}"))
                .recompute_cost;
            let optimum = exact::optimum(&view, budget).expect("the DP fit it");
            assert!(cost >= optimum - 1e-9, "{view}");
            let (cases, hits, ratios) = &mut kinds[usize::from(own_reads)];
            *cases += 1;
            if cost <= optimum + 1e-9 {
                *hits += 1;
            }
            ratios.push(if optimum > 0.0 {
                cost / optimum
            } else {
                f64::INFINITY
            });
        }
    }
    for (what, (cases, hits, mut ratios)) in ["no own reads", "own reads"].into_iter().zip(kinds) {
        ratios.sort_by(f64::total_cmp);
        let q = |f: f64| ratios[((ratios.len() - 1) as f64 * f) as usize];
        assert!(cases > 500, "{what}: {cases}");
        assert_eq!(
            hits,
            cases,
            "{what}: {hits} of {cases} at the optimum; quartiles {} {} {} 90% {}",
            q(0.25),
            q(0.5),
            q(0.75),
            q(0.9)
        );
    }
}
