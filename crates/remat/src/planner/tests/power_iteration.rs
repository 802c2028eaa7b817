// The power iteration both `planner/tests/chains.rs` and `examples/plan_chain.rs` plan
// (`include!`d by each, after importing `GraphView` and `Node`: the tests reach them
// through the crate, the example through `remat::planner`).

/// Bytes of one matrix of the power iteration (64 x 64 f64).
const D: u64 = 8 * 64 * 64;

/// `n` steps of a normalized power iteration, `x = A x; x = x / |x|` (a matmul, then
/// square, sum, sqrt and a division reading the matmul's output and the norm: a fan-out
/// inside each block), then a loss. Costs in ns.
fn power_iteration(n: u32) -> GraphView {
    power_iteration_after(Vec::new(), None, n)
}

/// [`power_iteration`] recorded after `head`, each matmul also reading node `shared` of
/// the head (`A` computed in the step) when given.
#[allow(dead_code)] // `examples/plan_chain.rs` plans only the plain iteration
fn power_iteration_after(head: Vec<Node>, shared: Option<u32>, n: u32) -> GraphView {
    let mut nodes = head;
    let mut push = |node: Node| {
        nodes.push(node);
        nodes.len() as u32 - 1
    };
    let mut x: Option<u32> = None;
    for _ in 0..n {
        let input: Vec<u32> = shared.into_iter().chain(x).collect();
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
