//! Plans a saved graph view (`remat::Tradeoff::view`, written with `Display`) away from the
//! model: the trade-off table, then for each budget asked the planned recompute, the
//! replays per op name, how long planning took, and the exact optimum where the search
//! finds it (`remat::planner::exact_optimum`).
//!
//! ```text
//! cargo run --release -p remat --example plan_view -- FILE [PERCENT...]
//! ```
//! `PERCENT`s are shares of the keep-all peak (default: 50 30).

use std::collections::BTreeMap;
use std::time::Instant;

use remat::planner::{
    GraphView, Optimum, exact_optimum, plan, recompute_lower_bound, simulate, tradeoff,
};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: plan_view FILE [PERCENT...] (a view written by remat::Tradeoff::view)")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let view: GraphView = text.parse().map_err(|e| format!("{path}: {e}"))?;
    let mut percents: Vec<f64> = args
        .map(|a| a.parse().map_err(|e| format!("{a}: {e}")))
        .collect::<Result<_, String>>()?;
    if percents.is_empty() {
        percents = vec![50.0, 30.0];
    }
    let start = Instant::now();
    let table = tradeoff(&view);
    eprintln!(
        "{table}(the table took {:.1} ms)",
        start.elapsed().as_secs_f64() * 1e3
    );
    for percent in percents {
        let budget = (table.keep_all_bytes as f64 * percent / 100.0) as u64;
        let start = Instant::now();
        let planned = plan(&view, budget);
        let took = start.elapsed();
        let schedule = match planned {
            Ok(schedule) => schedule,
            Err(e) => {
                eprintln!("{percent}%: {e}");
                continue;
            }
        };
        let outcome = simulate(&view, &schedule, budget).map_err(|e| e.to_string())?;
        let mut by_name: BTreeMap<&str, (u32, f64)> = BTreeMap::new();
        for (i, &count) in outcome.replays.iter().enumerate() {
            if count > 0 {
                let node = view.node(i as u32);
                let entry = by_name.entry(node.name).or_default();
                entry.0 += count;
                entry.1 += count as f64 * node.cost;
            }
        }
        let bound = recompute_lower_bound(&view, budget);
        eprintln!(
            "{percent}% ({:.1} MiB): recompute {:.3} ms (at least {:.3} ms; {:.1}% of forward), {} replays, peak {:.1} MiB, planned in {:.1} ms",
            budget as f64 / 1048576.0,
            outcome.recompute_cost / 1e6,
            bound / 1e6,
            100.0 * outcome.recompute_cost / view.forward_cost(),
            outcome.total_replays,
            outcome.peak_bytes as f64 / 1048576.0,
            took.as_secs_f64() * 1e3
        );
        for (name, (count, cost)) in by_name {
            eprintln!("    {name:<14} {count:>5} replays {:>10.3} ms", cost / 1e6);
        }
        // The least recompute of any schedule, where the search finds it (views of at most
        // 128 ops; its 4M states at most take about 10 s and 800 MB).
        let start = Instant::now();
        let took = |start: Instant| start.elapsed().as_secs_f64() * 1e3;
        match exact_optimum(&view, budget, 4_000_000) {
            Optimum::Found { cost, states, .. } => eprintln!(
                "    optimum {:.3} ms (the plan: {:.3}x), {states} states in {:.0} ms",
                cost / 1e6,
                outcome.recompute_cost / cost.max(f64::MIN_POSITIVE),
                took(start)
            ),
            Optimum::GaveUp {
                states,
                bound: proved,
            } => eprintln!(
                "    optimum: the search stopped at {states} states, at least {:.3} ms",
                proved.max(bound) / 1e6
            ),
            Optimum::Infeasible { .. } => eprintln!("    optimum: none fits (a planner bug)"),
        }
        if std::env::var_os("PLAN_VIEW_NODES").is_some() {
            let replayed: Vec<String> = outcome
                .replays
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| format!("{i}:{}x{c}", view.node(i as u32).name))
                .collect();
            eprintln!("    replayed: {}", replayed.join(" "));
        }
    }
    Ok(())
}
