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

/// Bytes of one 64 x 64 f64 matrix.
const D: u64 = 8 * 64 * 64;

fn power_iteration(n: u32) -> GraphView {
    let mut nodes: Vec<Node> = Vec::new();
    let mut push = |node: Node| {
        nodes.push(node);
        nodes.len() as u32 - 1
    };
    let mut x: Option<u32> = None;
    for _ in 0..n {
        let input: Vec<u32> = x.into_iter().collect();
        let y = push(
            Node::new("matmul", D, 5000.0)
                .inputs(input.clone())
                .step_reads(input),
        );
        let sq = push(Node::new("mul", D, 300.0).inputs([y]).step_reads([y]));
        let s = push(Node::new("sum", 8, 200.0).inputs([sq]));
        let norm = push(Node::new("sqrt", 8, 10.0).inputs([s]).step_reads([s]));
        x = Some(push(
            Node::new("div", D, 400.0)
                .inputs([y, norm])
                .step_reads([y, norm]),
        ));
    }
    let x = x.expect("at least one step");
    push(Node::new("sum", 8, 100.0).inputs([x]).step_reads([x]));
    GraphView::new(nodes).expect("a power iteration is a valid view")
}

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
