//! Chains of blocks (NOTE [stages], NOTE [rotor]): the cuts a view has, the smallest budget
//! whatever the chain's length, plans valid at every budget, the grouped DP against one
//! level over the whole chain, and Revolve's closed form on single-op chains.

use super::{chain, keep_all};
use crate::planner::blocks::{Stages, cuts};
use crate::planner::plan::PORTFOLIO;
use crate::planner::rotor::{Rotor, min_budget};
use crate::planner::{GraphView, Node, chain_plan, plan, revolve, simulate, smallest_budget};

include!("power_iteration.rs");

#[test]
fn a_power_iteration_cuts_at_each_matmul_and_each_division() {
    let view = power_iteration(4);
    // Inside a block, the matmul's output is read by the division: no cut at the square,
    // the sum or the sqrt.
    assert_eq!(cuts(&view).unwrap(), vec![0, 4, 5, 9, 10, 14, 15, 19, 20]);
    // A residual edge over a block removes the cuts it crosses.
    let mut nodes = view.nodes().to_vec();
    nodes[9].inputs.push(3);
    let view = GraphView::new(nodes).unwrap();
    assert_eq!(cuts(&view).unwrap(), vec![0, 9, 10, 14, 15, 19, 20]);
}

#[test]
fn the_smallest_budget_of_a_chain_of_blocks_does_not_grow_with_its_length() {
    let mut smallest = Vec::new();
    // 1,000 and 10,000 blocks in optimized builds only (`scripts/test.sh` runs this test in
    // release too): unoptimized, planning 1,000 blocks at the smallest budget alone takes a
    // minute.
    let lengths: &[u32] = if cfg!(debug_assertions) {
        &[100, 300]
    } else {
        &[100, 1000, 10_000]
    };
    for &n in lengths {
        let view = power_iteration(n);
        let min = smallest_budget(&view);
        // At the smallest budget every schedule replays the chain quadratically often: a
        // long one is planned with a few more slots.
        let budget = if n > 1000 { min + 8 * D } else { min };
        let schedule = plan(&view, budget).expect("the smallest budget plans");
        let outcome = simulate(&view, &schedule, budget).expect("and its plan is valid");
        assert!(outcome.peak_bytes <= budget);
        smallest.push(min);
    }
    // One boundary plus a block's own need: about four matrices.
    assert!(smallest[0] <= 5 * D, "{smallest:?}");
    assert!(smallest.iter().all(|&b| b == smallest[0]), "{smallest:?}");
}

/// Every budget from the smallest to keep-all plans a valid schedule within the budget,
/// and a larger budget never costs more.
#[test]
fn a_chain_of_blocks_plans_within_every_budget() {
    let view = power_iteration(60);
    let smallest = smallest_budget(&view);
    let mut last = f64::INFINITY;
    for slots in [0u64, 1, 2, 3, 5, 8, 13, 21, 40, 80, 200] {
        let budget = smallest + slots * D;
        let schedule = plan(&view, budget).unwrap();
        let outcome = simulate(&view, &schedule, budget).unwrap();
        assert!(outcome.peak_bytes <= budget);
        assert!(
            outcome.recompute_cost <= last,
            "{slots} more slots cost {} after {last}",
            outcome.recompute_cost
        );
        last = outcome.recompute_cost;
    }
    assert_eq!(last, 0.0, "keep-all replays nothing");
}

/// The grouped DP (checkpoints at group ends at the upper levels) against one level over
/// the whole chain, the optimum of the chain model: within 10%, and both schedules valid
/// and costing what their DP says.
#[test]
fn grouped_levels_plan_within_10_percent_of_one_level() {
    let view = power_iteration(100);
    let stages = Stages::of(&view, PORTFOLIO).unwrap();
    assert_eq!(stages.len(), 201);
    let smallest = min_budget(&view, &stages);
    for slots in [1u64, 2, 4, 8, 16, 40] {
        let budget = smallest + slots * D;
        let grouped = Rotor::for_resume(&view, &stages, budget).unwrap();
        let flat = Rotor::with_group(&view, &stages, budget, usize::MAX, true).unwrap();
        for rotor in [&grouped, &flat] {
            let schedule = rotor.schedule().expect("fits");
            let outcome = simulate(&view, &schedule, budget).unwrap();
            assert!((outcome.recompute_cost - rotor.cost()).abs() < 1e-6 * rotor.cost().max(1.0));
        }
        assert!(
            grouped.cost() <= 1.1 * flat.cost(),
            "{slots} slots: grouped {} against one level {}",
            grouped.cost(),
            flat.cost()
        );
    }
}

/// On single-op stages of equal size and cost whose steps read their input, the DP is
/// Revolve's closed form.
#[test]
fn on_a_uniform_chain_the_dp_is_revolve_s_closed_form() {
    for n in [10u32, 40, 97] {
        let view = chain(n, 1, 1.0);
        let stages = Stages::of(&view, PORTFOLIO).unwrap();
        for slots in 1..6u64 {
            let rotor = Rotor::with_group(&view, &stages, slots, usize::MAX, true).unwrap();
            let optimum = revolve::replays(n as u64, slots).unwrap();
            assert_eq!(rotor.cost(), optimum as f64, "n {n}, {slots} slots");
        }
    }
}

/// The benchmark's recorded models at low budgets: the chain's plan is valid and `plan`
/// keeps the cheaper of it and the portfolio's. Prints what each costs, in forward passes.
#[test]
fn recorded_models_at_low_budgets() {
    let recorded = [
        ("transformer", include_str!("views/transformer.view")),
        ("mlp", include_str!("views/mlp.view")),
        ("convnet", include_str!("views/convnet.view")),
    ];
    for (name, text) in recorded {
        let view: GraphView = text.parse().unwrap();
        let forward = view.forward_cost();
        let all = keep_all(&view);
        let smallest = smallest_budget(&view);
        let stages = Stages::of(&view, PORTFOLIO);
        eprintln!(
            "{name}: {} stages, smallest {:.3} of keep-all (lean schedule {:.3})",
            stages.as_ref().map_or(0, |s| s.len()),
            smallest as f64 / all as f64,
            crate::planner::min_feasible_budget(&view) as f64 / all as f64
        );
        if name == "mlp" {
            // Why the MLP at 5% replays quadratically (bench/RESULTS.md: about 9x SaveAll's
            // step): 5% of its keep-all bytes is above its smallest budget by less than one
            // boundary value, so no chain schedule there holds more checkpoints than at the
            // smallest, where one checkpoint slot makes Revolve's schedule quadratic.
            let boundary = stages
                .as_ref()
                .and_then(|s| (0..s.len()).map(|k| s.shape[k].boundary).max())
                .expect("the MLP is a chain of stages");
            let five = all * 5 / 100;
            eprintln!(
                "  5% is {:.3}x the smallest budget; above it by {:.2} boundary values",
                five as f64 / smallest as f64,
                five.saturating_sub(smallest) as f64 / boundary as f64
            );
            assert!(five.saturating_sub(smallest) < boundary);
        }
        for percent in [30u64, 20, 10, 5, 0] {
            let budget = if percent == 0 {
                smallest
            } else {
                (all * percent / 100).max(smallest)
            };
            let planned = simulate(&view, &plan(&view, budget).unwrap(), budget)
                .unwrap()
                .recompute_cost;
            let chain = chain_plan(&view, budget)
                .map(|s| simulate(&view, &s, budget).unwrap().recompute_cost);
            assert_eq!(chain.is_some(), stages.is_some(), "{name} at {percent}%");
            assert!(chain.is_none_or(|c| planned <= c + 1e-6));
            if name == "mlp" {
                // A chain of single ops: the DP finds what the portfolio finds (before NOTE
                // [rotor-skip], [rotor-owned] and [rotor-absent], 1.56x it at 5%).
                let chain = chain.expect("the MLP is a chain");
                assert!(
                    chain <= planned * (1.0 + 1e-9),
                    "{percent}%: {chain} > {planned}"
                );
            }
            eprintln!(
                "  {percent}%: plan {:.3} forward passes, chain DP {:?}",
                planned / forward,
                chain.map(|c| c / forward)
            );
        }
    }
}

/// The benchmark's MLP at 5% of its keep-all bytes (issue 19's target there was 3x SaveAll's
/// step): the plan is the optimum, and the optimum is quadratic. 5% (4.9 MiB) holds the
/// fixed input (2 MiB) and one 2 MiB activation, not two. A backward step that reads a value
/// must hold it; with room for one activation nothing else is held meanwhile, and the value
/// the previous step held lies deeper in the chain than the one this step reads (backward
/// walks towards the input), so every read is rebuilt from the input: a read of node `v`
/// costs `v + 1` replays. The 24 blocks are `matmul -> add -> gelu`; `gelu` reads its input
/// (node `3i + 1`: `3i + 2` replays), `matmul` reads the previous `gelu` (node `3i - 1`: `3i`
/// replays, none for the first, whose input is fixed); the loss's `mul` reads the last value,
/// still held when the forward pass ends. 1,704 replays, 23.6 forward passes of recompute:
/// about 8.5x SaveAll's step, the bench's 8.48x measured (`bench/budget/RESULTS.md`).
#[test]
fn the_mlp_at_5_percent_plans_the_optimum_of_one_activation() {
    let view: GraphView = include_str!("views/mlp.view").parse().unwrap();
    let all = keep_all(&view);
    let five = all * 5 / 100;
    let fixed: u64 = view.nodes().iter().map(|n| n.fixed_bytes).sum();
    let value = view.node(1).bytes;
    assert!(fixed + value <= five && five < fixed + 2 * value, "{five}");
    let blocks = 24u64;
    let gelu: u64 = (0..blocks).map(|i| 3 * i + 2).sum();
    let matmul: u64 = (1..blocks).map(|i| 3 * i).sum();
    let optimum = gelu + matmul;
    assert_eq!(optimum, 1_704);
    let outcome = simulate(&view, &plan(&view, five).unwrap(), five).unwrap();
    assert_eq!(outcome.total_replays, optimum);
    let passes = outcome.recompute_cost / view.forward_cost();
    assert!((passes - 23.64).abs() < 0.01, "{passes}");
    // The lower bound says so too (NOTE [one-value-bound]): no schedule replays less.
    let bound = crate::planner::recompute_lower_bound(&view, five);
    assert!(
        (bound - outcome.recompute_cost).abs() <= 1e-9 * bound,
        "bound {bound}, optimum {}",
        outcome.recompute_cost
    );
    // The chain's DP alone reaches it too (NOTE [rotor-skip], [rotor-owned] and
    // [rotor-absent]: it made 36.8 forward passes without them).
    let chain = simulate(&view, &chain_plan(&view, five).unwrap(), five).unwrap();
    assert_eq!(chain.total_replays, optimum);
}

/// A long uniform chain at every order of slots: `plan` within 10% of Revolve's optimum
/// (the chain model's optimum for single-op stages of equal sizes and costs). Ten thousand
/// stages in optimized builds only (debug: a thousand).
#[test]
fn a_long_uniform_chain_plans_near_revolve_s_optimum_at_any_slots() {
    let n: u32 = if cfg!(debug_assertions) {
        1_000
    } else {
        10_000
    };
    let view = chain(n, 1, 1.0);
    for slots in [2u64, 3, 5, 10, 30, 100, 300, 1_000] {
        let optimum = revolve::replays(u64::from(n), slots).expect("revolve fits") as f64;
        let schedule = plan(&view, slots).expect("plans");
        let outcome = simulate(&view, &schedule, slots).expect("valid");
        eprintln!(
            "n {n}, {slots} slots: planned {} replays, Revolve {optimum} ({:.3}x)",
            outcome.recompute_cost,
            outcome.recompute_cost / optimum.max(1.0)
        );
        assert!(
            outcome.recompute_cost <= 1.1 * optimum,
            "n {n}, {slots} slots: {} replays against Revolve's {optimum}",
            outcome.recompute_cost
        );
    }
}

/// A power iteration (five ops a block, a fan-out inside) at slot counts above its smallest
/// budget: the recompute, in forward passes, that the plans reached when NOTE [run-units],
/// NOTE [run-hints] and NOTE [exact-units] landed (`examples/plan_chain.rs` prints them),
/// pinned so that a change that plans worse fails. Before NOTE [run-units], 10,000 blocks at
/// 2 slots replayed 503 forward passes and at 300 slots 1.51; before NOTE [exact-units], 100
/// blocks at 1 slot 26.37 and at 4 slots 2.91; before NOTE [run-merge], 10,000 blocks at 1
/// slot 503 and at 2 slots 31.79. NOTE [planner-memory] caps the tables (now at an eighth
/// of what the steps read; at 2 KiB an op, 100 MB here): at 100 slots the levels are solved
/// at half the units, 1.68 -> 1.686; with 13 MB, 1 slot replayed 503 passes. Ten
/// thousand blocks in optimized builds only (debug: a hundred).
#[test]
fn a_power_iteration_plans_the_recompute_measured_at_every_slot_count() {
    let (n, pinned): (u32, &[(u64, f64)]) = if cfg!(debug_assertions) {
        (
            100,
            &[
                (0, 49.58),
                (1, 7.79),
                (2, 4.17),
                (4, 2.37),
                (8, 1.46),
                (30, 0.67),
                (100, 0.07),
            ],
        )
    } else {
        (
            10_000,
            &[
                (1, 92.53),
                (2, 27.11),
                (3, 14.98),
                (8, 5.46),
                (30, 2.55),
                (100, 1.69),
                (300, 0.98),
                (1_000, 0.92),
            ],
        )
    };
    let view = power_iteration(n);
    let smallest = smallest_budget(&view);
    assert_eq!(
        smallest,
        2 * D,
        "two matrices: a boundary and the block's matmul output"
    );
    for &(slots, passes) in pinned {
        let budget = smallest + slots * D;
        let schedule = plan(&view, budget).expect("plans");
        let outcome = simulate(&view, &schedule, budget).expect("valid");
        assert!(outcome.peak_bytes <= budget);
        let planned = outcome.recompute_cost / view.forward_cost();
        assert!(
            planned <= passes + 0.005,
            "{n} blocks, {slots} slots: {planned:.3} forward passes replayed, {passes} pinned"
        );
    }
}

/// A random chain of `blocks` blocks of 1 to 4 ops: each block's first op reads the
/// previous block's output, later ops read one or two earlier ops of the block (a fan-out
/// inside), steps read some of their inputs and maybe their own output; sizes 2 to 8,
/// costs 1 to 10.
fn random_block_chain(rng: &mut super::Rng, blocks: usize, max_ops: u64) -> GraphView {
    let mut nodes: Vec<Node> = Vec::new();
    let mut boundary: Option<u32> = None;
    for _ in 0..blocks {
        let first = nodes.len() as u32;
        let ops = 1 + rng.below(max_ops) as u32;
        for j in 0..ops {
            let i = first + j;
            let mut inputs: Vec<u32> = Vec::new();
            if j == 0 {
                inputs.extend(boundary);
            } else {
                inputs.push(i - 1);
                if j >= 2 && rng.chance(0.5) {
                    inputs.push(first + rng.below(u64::from(j - 1)) as u32);
                }
            }
            let mut reads: Vec<u32> = inputs.iter().copied().filter(|_| rng.chance(0.6)).collect();
            if rng.chance(0.25) {
                reads.push(i);
            }
            nodes.push(
                Node::new("op", 2 + rng.below(7), (1 + rng.below(10)) as f64)
                    .inputs(inputs)
                    .step_reads(reads),
            );
        }
        boundary = Some(first + ops - 1);
    }
    GraphView::new(nodes).unwrap()
}

/// Random chains of 2 to 4 blocks (at most 13 ops) against the exact optimum, at every
/// budget from the smallest any schedule meets to keep-all: the chain's own plan
/// (`chain_plan`, Rotor's DP) is valid and never below the optimum, and how often it
/// reaches it is pinned (its family of schedules misses some: keeping a stage's input for
/// its steps while the later stages run from their own kept values, say); `plan` solves
/// these views exactly.
#[test]
fn random_block_chains_against_the_exact_optimum() {
    let mut rng = super::Rng::new(11);
    let (mut cases, mut chain_hits) = (0, 0);
    let mut ratios = Vec::new();
    for _ in 0..200 {
        let view = loop {
            let blocks = 2 + rng.below(3) as usize;
            let v = random_block_chain(&mut rng, blocks, 4);
            if v.len() <= 13 && Stages::of(&v, PORTFOLIO).is_some() {
                break v;
            }
        };
        let smallest = crate::planner::exact::min_budget(&view);
        let all: u64 = view.nodes().iter().map(|n| n.bytes).sum();
        for budget in smallest..=all {
            let optimum =
                crate::planner::exact::optimum(&view, budget).expect("above the smallest");
            let planned = simulate(&view, &plan(&view, budget).unwrap(), budget).unwrap();
            assert!(planned.recompute_cost <= optimum + 1e-9, "{view}");
            // The DP's schedule, where it has one, costs what the DP says.
            let stages = Stages::of(&view, PORTFOLIO).unwrap();
            if let Some(rotor) = Rotor::new(&view, &stages, budget)
                && let Some(schedule) = rotor.schedule()
            {
                let outcome = simulate(&view, &schedule, budget)
                    .unwrap_or_else(|e| panic!("{e} at {budget}:\n{view}"));
                let planned = rotor.cost();
                assert!(
                    (outcome.recompute_cost - planned).abs() <= 1e-9 * planned.max(1.0),
                    "{} against the DP's {planned} at {budget}:\n{view}",
                    outcome.recompute_cost
                );
            }
            let Some(chain) = chain_plan(&view, budget) else {
                continue;
            };
            let chain = simulate(&view, &chain, budget)
                .unwrap_or_else(|e| panic!("{e} at {budget}:\n{view}"))
                .recompute_cost;
            assert!(chain >= optimum - 1e-9, "{view}");
            cases += 1;
            chain_hits += usize::from(chain <= optimum + 1e-9);
            ratios.push((chain + 1.0) / (optimum + 1.0));
        }
    }
    ratios.sort_by(f64::total_cmp);
    let q = |f: f64| ratios[((ratios.len() - 1) as f64 * f) as usize];
    eprintln!(
        "{cases} cases, the chain's plan at the optimum in {chain_hits}; (chain + 1) / \
         (optimum + 1): median {:.3}, 90% {:.3}, max {:.3}",
        q(0.5),
        q(0.9),
        q(1.0)
    );
    // 4,230 of 5,460 on 2026-12-03 (4,174 of 5,441 before NOTE [rotor-run-ahead], 2,889
    // of 5,294 before NOTE [rotor-owned] and [rotor-absent], 1,806 before NOTE
    // [rotor-skip] too).
    assert!(cases > 5000, "{cases}");
    assert!(chain_hits * 4 >= cases * 3, "{chain_hits} of {cases}");
}

/// The bytes of each value of [`mlp_chain`]: a 128 x 128 f32 activation. The DP's tables may
/// take a share of what the steps read (NOTE [planner-memory]): with 8-byte values, as
/// these chains had, they got only the floor, and the three-level chains below replayed
/// 500 forward passes one slot above the smallest budget instead of 43.
const MLP_VALUE: u64 = 64 << 10;

/// A chain of (matmul, add, GELU) stages, as the benchmark's MLP records them: the matmul's
/// step reads its input, the add's nothing, the GELU's its input. Each value
/// [`MLP_VALUE`] bytes.
fn mlp_chain(blocks: u32) -> GraphView {
    const V: u64 = MLP_VALUE;
    let mut nodes: Vec<Node> = Vec::new();
    let mut x: Option<u32> = None;
    for _ in 0..blocks {
        let input: Vec<u32> = x.into_iter().collect();
        let mm = nodes.len() as u32;
        nodes.push(
            Node::new("matmul", V, 75.0)
                .inputs(input.clone())
                .step_reads(input),
        );
        nodes.push(Node::new("add", V, 2.0).inputs([mm]));
        nodes.push(
            Node::new("gelu", V, 26.0)
                .inputs([mm + 1])
                .step_reads([mm + 1]),
        );
        x = Some(mm + 2);
    }
    GraphView::new(nodes).unwrap()
}

/// NOTE [run-or-levels]: a chain longer than one level whose blocks repeat is solved as a
/// run; where its stages may free their inputs the grouped levels are solved too and the
/// cheaper kept. On 50 blocks (150 stages) the chain's plan stays within 10% of one level
/// over the whole chain from two slots above the smallest budget, 1.35x at one (on 200
/// blocks, the run alone replayed 5.2x the levels' cost there).
#[test]
fn a_long_chain_of_stages_that_free_their_inputs_plans_near_one_level() {
    let view = mlp_chain(50);
    let stages = Stages::of(&view, PORTFOLIO).unwrap();
    assert_eq!(stages.len(), 150);
    let smallest = smallest_budget(&view);
    for slots in [1u64, 2, 4, 8, 16] {
        let budget = smallest + slots * MLP_VALUE;
        let chain = simulate(&view, &chain_plan(&view, budget).unwrap(), budget)
            .unwrap()
            .recompute_cost;
        let flat = Rotor::with_group(&view, &stages, budget, usize::MAX, false).unwrap();
        let flat = simulate(&view, &flat.schedule().unwrap(), budget)
            .unwrap()
            .recompute_cost;
        eprintln!("{slots} slots: chain {chain}, one level {flat}");
        // One slot above the smallest budget, the groups' fixed boundaries cost most:
        // 48,633 against 37,527 (1.30x; 1.43x before NOTE [level-cuts]); from two slots
        // within 1.05x.
        let within = if slots == 1 { 1.35 } else { 1.1 };
        assert!(
            chain <= within * flat,
            "{slots} slots: {chain} against one level's {flat}"
        );
    }
}

/// The simulated recompute of the chain's plan under `budget`, checked to be what the DP
/// says it costs.
fn chain_cost(view: &GraphView, stages: &Stages, budget: u64) -> f64 {
    let schedule = chain_plan(view, budget).unwrap();
    let cost = simulate(view, &schedule, budget).unwrap().recompute_cost;
    let planned = Rotor::new(view, stages, budget).unwrap().cost();
    assert!(
        (cost - planned).abs() <= 1e-9 * planned,
        "{cost} against the DP's {planned} at {budget}"
    );
    cost
}

/// NOTE [level-cuts]: at tight budgets the levels are cut from the stages up and from the
/// root down. 100 blocks (300 stages) from two slots above the smallest budget plan within
/// 10% of one flat level over the whole chain (1.08x, 1.02x, 1.02x measured; one slot
/// 1.13x). One flat level over 300 stages takes seconds unoptimized: release builds only.
#[test]
fn a_chain_of_two_levels_plans_within_10_percent_of_one_level() {
    if cfg!(debug_assertions) {
        return;
    }
    let view = mlp_chain(100);
    let stages = Stages::of(&view, PORTFOLIO).unwrap();
    let smallest = smallest_budget(&view);
    for slots in [2u64, 3, 4] {
        let budget = smallest + slots * MLP_VALUE;
        let chain = chain_cost(&view, &stages, budget);
        let flat = Rotor::with_group(&view, &stages, budget, usize::MAX, false).unwrap();
        eprintln!("{slots} slots: chain {chain}, one level {}", flat.cost());
        assert!(
            chain <= 1.1 * flat.cost(),
            "{slots} slots: {chain} against one level's {}",
            flat.cost()
        );
    }
}

/// NOTE [level-cuts]: a chain of 3,000 stages (1,000 blocks) takes three levels of
/// 48-item groups; cut from the stages up alone its root had two items, the levels
/// found no plan one slot above the smallest budget, and the run (whole blocks) replayed
/// 51.5M (500 forward passes, quadratic). Cut from the root down too: 4.43M (43 passes);
/// two slots 2.30M -> 2.04M (19.8 passes), and with a root of 128 items 1.60M (15.6
/// passes, where the executor's best run replays 17.2). 4,000 blocks (12,000 stages) one
/// slot above the smallest budget: 500 -> 92.5 passes, its root taking 128 flat groups.
#[test]
fn a_chain_of_three_levels_keeps_checkpoints_at_its_root() {
    for (blocks, slots, passes) in [(1000, 1u64, 43.5), (1000, 2, 16.0), (4000, 1, 93.0)] {
        let view = mlp_chain(blocks);
        let stages = Stages::of(&view, PORTFOLIO).unwrap();
        let smallest = smallest_budget(&view);
        let budget = smallest + slots * MLP_VALUE;
        // The schedule costs what the DP says (owned groups, cuts from the root down).
        let cost = chain_cost(&view, &stages, budget);
        // The engine's first step resumes from its forward pass by the DP's lean tables.
        let lean = Rotor::for_resume(&view, &stages, budget).unwrap();
        let lean = lean.lean_schedule().expect("the lean form fits");
        simulate(&view, &lean, budget).expect("the lean schedule is valid");
        let measured = cost / view.forward_cost();
        eprintln!("{blocks} blocks, {slots} slots: {measured:.2} forward passes");
        assert!(
            measured <= passes,
            "{blocks} blocks, {slots} slots: {measured:.2} forward passes"
        );
    }
}

/// NOTE [chain-abandons]: past `CHAIN_FIRST_OPS` ops a chain of stages plans its chain's DP
/// first and stops the portfolio at the first run that does not beat it, abandoned or
/// fitting nothing (the executor's runs fit no plan on this chain from 2 to 30 slots, and
/// each used to reset the count: eight runs and the bound-guided one, 1.2-1.6 s on 3,900
/// blocks, now 0.35-0.53 s, the same plans).
#[test]
fn a_long_chain_plans_in_two_runs() {
    let view = power_iteration(1_001);
    assert!(view.len() > 5_000);
    let smallest = smallest_budget(&view);
    for slots in [1u64, 2, 8, 30] {
        let budget = smallest + slots * D;
        let (schedule, work) = crate::planner::plan::plan_counted(&view, budget).unwrap();
        assert_eq!(work.runs, 2, "{slots} slots: {work:?}");
        let planned = simulate(&view, &schedule, budget).unwrap().recompute_cost;
        let chain = chain_plan(&view, budget).unwrap();
        let chain = simulate(&view, &chain, budget).unwrap().recompute_cost;
        assert_eq!(planned, chain, "{slots} slots");
    }
}

/// `n` steps of `x = C x; x = x / |x|` where `C = A + l B` is computed once before the
/// chain (a `mul` and an `add`, `l` a tracked leaf) and read by every step's matmul: the
/// edges from `C` cross every cut (NOTE [pinned-chain]). `replayable: false` makes `C` a
/// value that cannot be rebuilt (a mask drawn once).
fn shared_power_iteration(n: u32, replayable: bool) -> GraphView {
    let head = vec![
        Node::new("mul", D, 300.0),
        Node::new("add", D, 300.0)
            .inputs([0])
            .replayable(replayable),
    ];
    power_iteration_after(head, Some(1), n)
}

/// NOTE [pinned-chain]: a chain whose every block reads one value computed before it is
/// planned as a chain with that value held once: its smallest budget does not grow with
/// the length (it grew by about a matrix a step), and the plans there are valid.
#[test]
fn a_value_read_by_every_block_is_held_once_and_the_chain_planned() {
    let lengths: &[u32] = if cfg!(debug_assertions) {
        &[40, 150]
    } else {
        &[40, 150, 1000]
    };
    for replayable in [true, false] {
        let mut smallest = Vec::new();
        for &n in lengths {
            let view = shared_power_iteration(n, replayable);
            assert!(cuts(&view).is_none(), "C's reads cross every cut");
            let min = smallest_budget(&view);
            let schedule = plan(&view, min).expect("the smallest budget plans");
            let outcome = simulate(&view, &schedule, min).expect("and its plan is valid");
            assert!(outcome.peak_bytes <= min);
            let chain = chain_plan(&view, min).expect("the chain's own plan at the smallest");
            simulate(&view, &chain, min).expect("the chain's plan is valid");
            // The chain's plan keeps C once, never replays it (the portfolio may find
            // replaying C cheaper than something else).
            let action = crate::planner::Action::Replay(1);
            assert!(!chain.actions().contains(&action), "C is held throughout");
            smallest.push(min);
        }
        // C, one boundary and a block's own need: about five matrices.
        assert!(smallest[0] <= 6 * D, "{smallest:?}");
        assert!(smallest.iter().all(|&b| b == smallest[0]), "{smallest:?}");
    }
}

/// Between the smallest budget and keep-all, the pinned chain's plans are valid, and a
/// larger budget never costs more; a step resumed from the lean state (C not kept by the
/// forward pass) rebuilds C first and runs within the smallest budget.
#[test]
fn a_pinned_chain_plans_every_budget_and_resumes_from_the_lean_state() {
    let view = shared_power_iteration(60, true);
    let smallest = smallest_budget(&view);
    let mut last = f64::INFINITY;
    for slots in [0u64, 1, 2, 4, 8, 16, 40, 200] {
        let budget = smallest + slots * D;
        let schedule = plan(&view, budget).expect("plans");
        let outcome = simulate(&view, &schedule, budget).expect("valid");
        assert!(
            outcome.recompute_cost <= last + 1e-6,
            "{slots}: {outcome:?}"
        );
        last = outcome.recompute_cost;
    }
    assert_eq!(last, 0.0, "keep-all replays nothing");
    let (schedule, cost) = crate::planner::resume::chain_resume(&view, &[], smallest)
        .expect("resumes from the lean state");
    let outcome = simulate(&view, &schedule, smallest).expect("valid");
    assert_eq!(outcome.recompute_cost, cost);
    let actions = schedule.actions();
    let forward_end = actions
        .iter()
        .rposition(|a| matches!(a, crate::planner::Action::Compute(_)))
        .unwrap();
    assert_eq!(
        &actions[forward_end + 1..forward_end + 4],
        &[
            crate::planner::Action::Replay(0),
            crate::planner::Action::Replay(1),
            crate::planner::Action::Free(0)
        ],
        "C rebuilt from what it is computed from first"
    );
}

/// `n` steps of an LSTM-like cell: each step's gate adds an input projection (a matmul of
/// a constant, reading no node, whose step reads nothing and runs last, as Burn's order
/// runs it) to a projection of `h`; `c = sigmoid(gate) * c`, `h = tanh(c)`. Two values,
/// `(h, c)`, cross every boundary between steps: no single value cuts the chain.
fn two_value_chain(n: u32) -> GraphView {
    let mut nodes: Vec<Node> = Vec::new();
    let mut push = |node: Node| {
        nodes.push(node);
        nodes.len() as u32 - 1
    };
    let mut state: Option<(u32, u32)> = None;
    let mut projections = Vec::new();
    for _ in 0..n {
        let (x, gate) = projected_gate(&mut push, state.map(|(h, _)| h));
        projections.push(x);
        let s = push(
            Node::new("sigmoid", D, 300.0)
                .inputs([gate])
                .step_reads([gate]),
        );
        let c = match state {
            Some((_, c)) => push(Node::new("mul", D, 300.0).inputs([s, c]).step_reads([s, c])),
            None => push(Node::new("mul", D, 300.0).inputs([s]).step_reads([s])),
        };
        let h = push(Node::new("tanh", D, 300.0).inputs([c]).step_reads([c]));
        state = Some((h, c));
    }
    let (h, c) = state.expect("at least one step");
    push(Node::new("mul", 8, 100.0).inputs([h, c]).step_reads([h, c]));
    projections_last(nodes, &projections)
}

/// The view of `nodes` stepped in reverse recording order, the input projections' steps
/// last (as Burn's order runs an LSTM's).
fn projections_last(nodes: Vec<Node>, projections: &[u32]) -> GraphView {
    let total = nodes.len() as u32;
    let mut order: Vec<u32> = (0..total)
        .rev()
        .filter(|v| !projections.contains(v))
        .collect();
    order.extend(projections.iter().rev());
    GraphView::with_step_order(nodes, order).expect("a recurrence is a valid view")
}

/// A step's input projection (a constant, reading no node) added to a projection of `h`
/// (the first step has none); returns the projection and the sum.
fn projected_gate(push: &mut impl FnMut(Node) -> u32, h: Option<u32>) -> (u32, u32) {
    let x = push(Node::new("matmul", D, 5000.0).fixed_bytes(D / 8));
    let gate = match h {
        Some(h) => {
            let hp = push(Node::new("matmul", D, 5000.0).inputs([h]).step_reads([h]));
            push(Node::new("add", D, 300.0).inputs([x, hp]))
        }
        None => push(Node::new("add", D, 300.0).inputs([x])),
    };
    (x, gate)
}

/// NOTE [tuple-cuts]: a chain whose steps hand two values to the next is planned by its
/// tuples' chain: at a tenth of its keep-all bytes the plan replays about two forward
/// passes, where the lean schedule, the only plan before, replays one per step; every
/// translated schedule is valid within its budget, and the augmented view has stages.
#[test]
fn a_chain_that_hands_two_values_to_each_step_is_planned_by_tuples() {
    let view = two_value_chain(200);
    assert!(cuts(&view).is_none(), "(h, c) cross every boundary");
    let tupled =
        crate::planner::tuples::tupled(&view, PORTFOLIO).expect("the hand-overs are tuples");
    assert!(
        cuts(&tupled.view).is_some(),
        "the augmented view has stages"
    );
    let keep_all = keep_all(&view);
    let forward = view.forward_cost();
    for share in [0.1, 0.2, 0.3, 0.5] {
        let budget = (keep_all as f64 * share) as u64;
        let schedule = plan(&view, budget).expect("plans");
        let outcome = simulate(&view, &schedule, budget).expect("valid");
        assert!(outcome.peak_bytes <= budget);
        assert!(
            outcome.recompute_cost <= 4.0 * forward,
            "{share}: {} forward passes of recompute",
            outcome.recompute_cost / forward
        );
    }
}

/// NOTE [tuple-cuts] on Burn's own `Lstm` (32 steps, batch 16, input 16, hidden 64, loss on
/// the last state: the view a step under a budget recorded): between 11% and 15% of its
/// keep-all bytes every plan was the lean schedule, 189 forward passes of recompute; by
/// the tuples' chain 15x at 11% and under 2x at 15% (measured 15.5, 4.4, 2.8, 1.7 at 11,
/// 12, 13, 15%).
#[test]
fn burn_s_lstm_is_planned_by_its_tuples_below_a_sixth_of_its_bytes() {
    let view: GraphView = include_str!("views/lstm32.view").parse().unwrap();
    assert!(crate::planner::tuples::tupled(&view, PORTFOLIO).is_some());
    let keep_all = keep_all(&view);
    let forward = view.forward_cost();
    for (percent, passes) in [(11, 20.0), (13, 4.0), (15, 2.5)] {
        let budget = keep_all * percent / 100;
        let schedule = plan(&view, budget).expect("plans");
        let outcome = simulate(&view, &schedule, budget).expect("valid");
        assert!(
            outcome.recompute_cost <= passes * forward,
            "{percent}%: {} forward passes of recompute",
            outcome.recompute_cost / forward
        );
    }
}

/// NOTE [tuple-cuts]: the engine's first step, which resumes from what its forward pass
/// kept (`chain_resume`), resumes the Lstm by its tuples' chain from the lean state
/// within the budget.
#[test]
fn burn_s_lstm_resumes_by_its_tuples() {
    let view: GraphView = include_str!("views/lstm32.view").parse().unwrap();
    let keep_all = keep_all(&view);
    let budget = keep_all * 13 / 100;
    let (schedule, cost) = crate::planner::resume::chain_resume(&view, &[], budget)
        .expect("resumes from the lean state");
    let outcome = simulate(&view, &schedule, budget).expect("valid");
    assert_eq!(outcome.recompute_cost, cost);
    assert!(cost <= 10.0 * view.forward_cost(), "{cost}");
}

/// NOTE [pinned-heads]: Burn's `Lstm` with the loss on every output (32 steps, batch 16,
/// input 16, hidden 64, recorded under `Budget(u64::MAX)`): the `[batch, seq, hidden]`
/// output the loss reads is pinned until the loss has stepped, and the rest is planned as a
/// chain of `(h, c)` tuples. At 35% and 30% of the keep-all bytes the plan replayed the
/// lean schedule, 225,304 ops (181 forward passes), before; now 1,151 and 2,587.
#[test]
fn an_lstm_s_stacked_output_read_by_the_loss_is_held_until_the_loss_steps() {
    let view: GraphView = include_str!("views/lstm32_every_output.view")
        .parse()
        .unwrap();
    let all = keep_all(&view);
    for (percent, most) in [(35u64, 1_300u64), (30, 3_000)] {
        let budget = all * percent / 100;
        let schedule = plan(&view, budget).expect("a plan above the smallest budget");
        let outcome = simulate(&view, &schedule, budget).unwrap();
        assert!(
            outcome.total_replays <= most,
            "{percent}%: {} replays (at most {most})",
            outcome.total_replays
        );
    }
}

/// NOTE [budget-cliff] in `tradeoff.rs`: the same `Lstm`'s plan at its smallest budget replays
/// about 180 forward passes, and the budget past the cliff that `smallest_budget_within`
/// names is within a tenth above it (measured: 2.6 forward passes at 1.1x).
#[test]
fn the_budget_past_an_lstm_s_cliff_is_a_few_percent_above_its_smallest() {
    let view: GraphView = include_str!("views/lstm32_every_output.view")
        .parse()
        .unwrap();
    let report = crate::planner::tradeoff(&view);
    let min = report.min_budget_bytes;
    let forward = view.forward_cost();
    let passes = |budget: u64| {
        let schedule = plan(&view, budget).expect("plans at its smallest budget and above");
        simulate(&view, &schedule, budget).unwrap().recompute_cost / forward
    };
    assert!(passes(min) > 100.0, "{} forward passes", passes(min));
    let past = report.smallest_budget_within(4.0);
    assert!(
        past > min && past as f64 <= 1.1 * min as f64,
        "{past} against the smallest {min}"
    );
    assert!(passes(past) <= 4.0, "{} forward passes", passes(past));
}

/// NOTE [unneeded-replays] and NOTE [head-rebuild] in `pinned.rs`: Burn's `Gru` with the
/// loss on every output (32 steps, batch 16, input 16, hidden 64), its backward resumed from
/// the lean state (the engine's fallback when a step's forward pass left a state it cannot
/// go on from: a step that followed another graph's plan and departed from it at its loss).
/// The reduced chain's schedule replayed a node whose inputs the reduced view had dropped
/// (invalid in the real view, so no chain plan resumed at any budget), and the head's
/// rebuild held the whole forward pass at once (128 steps: no resumed plan within half of
/// the keep-all bytes, and a step stopped there, its plan fitting a quarter).
#[test]
fn a_gru_s_stacked_output_is_rebuilt_from_the_lean_state_within_the_budget() {
    let view: GraphView = include_str!("views/gru32_every_output.view")
        .parse()
        .unwrap();
    let keep_all = keep_all(&view);
    let forward = view.forward_cost();
    for percent in [60, 50] {
        let budget = keep_all * percent / 100;
        let (schedule, cost) = crate::planner::resume::chain_resume(&view, &[], budget)
            .unwrap_or_else(|| panic!("{percent}%: no chain plan from the lean state"));
        let outcome = simulate(&view, &schedule, budget).expect("valid within the budget");
        assert_eq!(outcome.recompute_cost, cost);
        // The stacked output rebuilt once (a forward pass), then the chain's plan.
        assert!(
            cost <= 3.0 * forward,
            "{percent}%: {cost} ns, forward {forward} ns"
        );
    }
}

/// NOTE [unneeded-members] in `tuples.rs`: Burn's `Gru` with the loss on its last output (32
/// steps, batch 16, input 16, hidden 64, recorded under `Budget(u64::MAX)`). The stacked
/// output it writes with `slice_assign` is read by no step, but it crossed every cut: each
/// tuple carried it beside `h`, and below about 1.5x the smallest budget only the lean
/// schedule fitted (136,440 replays, 96 forward passes, at 8% to 10% of the keep-all
/// bytes). Without it the tuples' chain plans from about 1.3x the smallest budget (measured:
/// 3.1 and 2.9 forward passes at 9% and 10%); resumed from the lean state too (the
/// engine's first step), and the budget past the cliff is within 1.35x of the smallest.
#[test]
fn a_gru_on_its_last_output_is_planned_by_its_tuples_without_its_stacked_output() {
    let view: GraphView = include_str!("views/gru32_last_output.view")
        .parse()
        .unwrap();
    let keep_all = keep_all(&view);
    let forward = view.forward_cost();
    for percent in [10, 12, 15] {
        let budget = keep_all * percent / 100;
        let schedule = plan(&view, budget).expect("plans");
        let outcome = simulate(&view, &schedule, budget).expect("valid");
        assert!(
            outcome.recompute_cost <= 4.0 * forward,
            "{percent}%: {} forward passes of recompute",
            outcome.recompute_cost / forward
        );
        let (schedule, cost) = crate::planner::resume::chain_resume(&view, &[], budget)
            .unwrap_or_else(|| panic!("{percent}%: no chain plan from the lean state"));
        let outcome = simulate(&view, &schedule, budget).expect("valid within the budget");
        assert_eq!(outcome.recompute_cost, cost);
        assert!(
            cost <= 6.0 * forward,
            "{percent}%: resumed, {} forward passes",
            cost / forward
        );
    }
    let report = crate::planner::tradeoff(&view);
    let past = report.smallest_budget_within(4.0);
    eprintln!(
        "past the cliff: {past}, the smallest {}",
        report.min_budget_bytes
    );
    assert!(
        past as f64 <= 1.35 * report.min_budget_bytes as f64,
        "{past} against the smallest {}",
        report.min_budget_bytes
    );
}

/// A recurrence shaped like Burn's `Gru` with the loss on its last output, `n` steps: each
/// step's input projection (a constant, its step run last, as Burn's order runs it) added to
/// a projection of `h`, `h = tanh(..)`; every `h` written into a stacked output by
/// `slice_assign` (32 times `h`'s bytes, read by no step), the loss on a slice of the last.
/// With `read`, the loss is on the whole stacked output instead (its step reads it, as a loss
/// on every output of Burn's `Gru` does).
fn stacked_chain(n: u32, read: bool) -> GraphView {
    let mut nodes: Vec<Node> = Vec::new();
    let mut push = |node: Node| {
        nodes.push(node);
        nodes.len() as u32 - 1
    };
    let mut h: Option<u32> = None;
    let mut stacked: Option<u32> = None;
    let mut projections = Vec::new();
    for _ in 0..n {
        let (x, gate) = projected_gate(&mut push, h);
        projections.push(x);
        let next = push(
            Node::new("tanh", D, 300.0)
                .inputs([gate])
                .step_reads([gate]),
        );
        let inputs: Vec<u32> = stacked.into_iter().chain([next]).collect();
        stacked = Some(push(
            Node::new("slice_assign", 32 * D, 1000.0).inputs(inputs),
        ));
        h = Some(next);
    }
    let stacked = stacked.expect("a step");
    if read {
        let squared = push(
            Node::new("mul", 32 * D, 1000.0)
                .inputs([stacked])
                .step_reads([stacked]),
        );
        push(Node::new("sum", 8, 100.0).inputs([squared]));
    } else {
        let last = push(Node::new("slice", D, 100.0).inputs([stacked]));
        push(Node::new("sum", 8, 100.0).inputs([last]));
    }
    projections_last(nodes, &projections)
}

/// NOTE [tupled-rows] in `tradeoff.rs`: on a long chain cut by tuples (a `Gru`-shaped
/// recurrence of 700 steps, 3,500 ops), the trade-off leaves out the rows whose chain plan
/// replays over 100 forward passes, and `smallest_budget_within` does not plan such budgets:
/// each planned the lean schedule, quadratic in the length (Burn's `Gru` over 1,024 steps:
/// the table took 21 s and 2.5 GB, `smallest_budget_within(4.0)` 76 s, naming 1.27x the
/// smallest budget where NOTE [tuple-room]'s coarser cuts find 1.09x; the `Lstm` with the
/// loss on every output, whose stacked output is pinned: 64 s and 11 GB, and 36 s). The
/// budget named plans within 4 forward passes. Both with the loss on a slice of the stacked
/// output and on all of it (pinned: NOTE [pinned-heads]).
#[test]
fn a_long_chain_of_tuples_prices_its_lean_budgets_without_planning_them() {
    for read in [false, true] {
        long_chain_of_tuples_priced(stacked_chain(700, read));
    }
}

fn long_chain_of_tuples_priced(view: GraphView) {
    assert!(view.len() > 2_000);
    let report = crate::planner::tradeoff(&view);
    let forward = view.forward_cost();
    assert!(!report.rows.is_empty());
    for row in &report.rows {
        assert!(
            row.recompute_cost <= 100.0 * forward,
            "a row at {} bytes replays {} forward passes",
            row.budget_bytes,
            row.recompute_cost / forward
        );
    }
    let past = report.smallest_budget_within(4.0);
    let schedule = plan(&view, past).expect("plans");
    let outcome = simulate(&view, &schedule, past).expect("valid");
    assert!(outcome.recompute_cost <= 4.0 * forward);
    assert!(
        past as f64 <= 1.5 * report.min_budget_bytes as f64,
        "{past} against the smallest {}",
        report.min_budget_bytes
    );
}
