//! Plans a long chain of blocks away from any model (issue 19's planning-time target): `n`
//! steps of a normalized power iteration (`x = A x; x = x / |x|`, five ops a block with a
//! fan-out inside), at the smallest budget plus a number of boundary-sized slots. For each
//! slot count it prints the planned recompute in forward passes, the replays and how long
//! [`plan`] took (its first call: nothing is cached).
//!
//! ```text
//! cargo run --release -p remat --example plan_chain -- [BLOCKS] [SLOTS...]
//! ```
//! Defaults: 10,000 blocks; 2 30 100 300 1000 slots.

use std::time::Instant;

use remat::planner::{GraphView, Node, plan, simulate, smallest_budget};

include!("../src/planner/tests/power_iteration.rs");

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let n: u32 = match args.next() {
        Some(a) => a.parse().map_err(|e| format!("{a}: {e}"))?,
        None => 10_000,
    };
    let mut slots: Vec<u64> = args
        .map(|a| a.parse().map_err(|e| format!("{a}: {e}")))
        .collect::<Result<_, String>>()?;
    if slots.is_empty() {
        slots = vec![2, 30, 100, 300, 1000];
    }
    let view = power_iteration(n);
    let start = Instant::now();
    let smallest = smallest_budget(&view);
    eprintln!(
        "{n} blocks, {} ops: smallest budget {:.1} matrices (found in {:.1} ms)",
        view.len(),
        smallest as f64 / D as f64,
        start.elapsed().as_secs_f64() * 1e3
    );
    for slots in slots {
        let budget = smallest + slots * D;
        let start = Instant::now();
        let schedule = plan(&view, budget).map_err(|e| e.to_string())?;
        let took = start.elapsed();
        let outcome = simulate(&view, &schedule, budget).map_err(|e| e.to_string())?;
        eprintln!(
            "{slots:>5} slots: recompute {:.2} forward passes, {} replays, planned in {:.0} ms",
            outcome.recompute_cost / view.forward_cost(),
            outcome.total_replays,
            took.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
