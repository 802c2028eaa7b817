//! Planner tests: hand-made graphs with exact expected numbers, property tests over random
//! DAGs, Revolve's closed form and an exact solver. No tensors.

mod backward;
mod chains;
mod generators;
mod optimality;
mod search;
mod simulator;

use crate::planner::{Forced, GraphView, Node};

/// A small deterministic PRNG (SplitMix64): tests need no dependency for randomness.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(super) fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// What random views may contain.
#[derive(Clone, Copy)]
pub(super) struct Flavor {
    /// Non-replayable nodes, forced marks, constants.
    pub(super) marks: bool,
    /// A random step order (else reverse index order).
    pub(super) shuffled_steps: bool,
}

/// A random DAG of `n` nodes: 0 to 3 inputs, mostly recent ones; sizes 1..=8, costs 1..=10
/// (integers, so that sums are exact); random step reads among the inputs and the node.
pub(super) fn random_view(rng: &mut Rng, n: usize, flavor: Flavor) -> GraphView {
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n as u32 {
        let mut inputs: Vec<u32> = Vec::new();
        if i > 0 {
            let k = if rng.chance(0.1) {
                0
            } else {
                1 + rng.below(3.min(i as u64))
            };
            for _ in 0..k {
                let u = if rng.chance(0.7) {
                    i - 1 - rng.below(3.min(i as u64)) as u32
                } else {
                    rng.below(i as u64) as u32
                };
                if !inputs.contains(&u) {
                    inputs.push(u);
                }
            }
        }
        let mut reads: Vec<u32> = inputs.iter().copied().filter(|_| rng.chance(0.5)).collect();
        if rng.chance(0.3) {
            reads.push(i);
        }
        let mut node = Node::new("op", 1 + rng.below(8), (1 + rng.below(10)) as f64)
            .inputs(inputs)
            .step_reads(reads);
        if flavor.marks {
            node.replayable = !rng.chance(0.1);
            node.forced = if rng.chance(0.1) {
                Some(Forced::Keep)
            } else if node.replayable && rng.chance(0.1) {
                Some(Forced::Recompute)
            } else {
                None
            };
            if rng.chance(0.1) {
                node.fixed_bytes = 1 + rng.below(3);
            }
        }
        nodes.push(node);
    }
    let order = if flavor.shuffled_steps {
        random_step_order(rng, &nodes)
    } else {
        (0..n as u32).rev().collect()
    };
    if flavor.marks {
        // Every third node with constants shares one with the later node that steps last,
        // when that one steps after it (NOTE [shared-release]); no draw, so the views the
        // other marks make stay as they were.
        let mut position = vec![0usize; n];
        for (p, &s) in order.iter().enumerate() {
            position[s as usize] = p;
        }
        for i in (0..n).filter(|i| i % 3 == 0) {
            if nodes[i].fixed_bytes == 0 {
                continue;
            }
            let last = (i + 1..n).max_by_key(|&j| position[j]);
            if let Some(j) = last.filter(|&j| position[j] > position[i]) {
                nodes[i].fixed_until = Some(j as u32);
            }
        }
    }
    GraphView::with_step_order(nodes, order).expect("a random view is valid")
}

/// A random order of steps, consumers first.
fn random_step_order(rng: &mut Rng, nodes: &[Node]) -> Vec<u32> {
    let n = nodes.len();
    let mut waiting = vec![0usize; n];
    let mut producers: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (w, node) in nodes.iter().enumerate() {
        for &u in node.inputs.iter().chain(&node.step_reads) {
            if u as usize != w && !producers[w].contains(&u) {
                producers[w].push(u);
                waiting[u as usize] += 1;
            }
        }
    }
    let mut ready: Vec<u32> = (0..n as u32)
        .filter(|&v| waiting[v as usize] == 0)
        .collect();
    let mut order = Vec::with_capacity(n);
    while !ready.is_empty() {
        let k = rng.below(ready.len() as u64) as usize;
        let w = ready.swap_remove(k);
        order.push(w);
        for &u in &producers[w as usize] {
            waiting[u as usize] -= 1;
            if waiting[u as usize] == 0 {
                ready.push(u);
            }
        }
    }
    order
}

/// A chain of `n` ops of `bytes` and `cost`, each step reading its input: Revolve's setting.
pub(super) fn chain(n: u32, bytes: u64, cost: f64) -> GraphView {
    let nodes = (0..n)
        .map(|i| {
            let previous: Vec<u32> = if i == 0 { vec![] } else { vec![i - 1] };
            Node::new("f", bytes, cost)
                .inputs(previous.clone())
                .step_reads(previous)
        })
        .collect();
    GraphView::new(nodes).expect("a chain is valid")
}

/// A transformer-like graph: `layers` blocks of 14 ops (attention and an MLP around two
/// residual adds), plus an embedding and a loss. Sizes in MiB, costs in ns, roughly in the
/// proportions of a small model.
pub(super) fn transformer(layers: u32) -> GraphView {
    const MIB: u64 = 1 << 20;
    let mut nodes: Vec<Node> = vec![Node::new("embed", MIB, 1000.0)];
    let mut push = |node: Node| {
        nodes.push(node);
        nodes.len() as u32 - 1
    };
    let mut x = 0;
    for _ in 0..layers {
        let op = |name, mib: u64, cost, inputs: &[u32], reads: &[u32]| {
            Node::new(name, mib * MIB, cost)
                .inputs(inputs.to_vec())
                .step_reads(reads.to_vec())
        };
        let ln = push(op("layer_norm", 1, 300.0, &[x], &[x]));
        let q = push(op("matmul", 1, 2000.0, &[ln], &[ln]));
        let k = push(op("matmul", 1, 2000.0, &[ln], &[ln]));
        let v = push(op("matmul", 1, 2000.0, &[ln], &[ln]));
        let s = push(op("matmul", 4, 3000.0, &[q, k], &[q, k]));
        let p = push(op("softmax", 4, 800.0, &[s], &[s]));
        let a = push(op("matmul", 1, 3000.0, &[p, v], &[p, v]));
        let o = push(op("matmul", 1, 2000.0, &[a], &[a]));
        let r = push(op("add", 1, 200.0, &[x, o], &[]));
        let ln2 = push(op("layer_norm", 1, 300.0, &[r], &[r]));
        let h = push(op("matmul", 4, 8000.0, &[ln2], &[ln2]));
        let g = push(op("gelu", 4, 800.0, &[h], &[h]));
        let o2 = push(op("matmul", 1, 8000.0, &[g], &[g]));
        x = push(op("add", 1, 200.0, &[r, o2], &[]));
    }
    push(Node::new("loss", 4, 100.0).inputs([x]).step_reads([x]));
    GraphView::new(nodes).expect("a transformer view is valid")
}

/// The peak when everything that is read is kept (the top of the budget ladder).
pub(super) fn keep_all(view: &GraphView) -> u64 {
    let schedule = crate::planner::plan(view, u64::MAX).expect("an unlimited budget always fits");
    crate::planner::simulate(view, &schedule, u64::MAX)
        .unwrap()
        .peak_bytes
}

/// NOTE [node-lists]: a node's lists of up to four earlier nodes are kept in place, no larger
/// than a `Vec`; longer ones are whole.
#[test]
fn a_node_s_short_lists_are_in_place() {
    let node = Node::new("mul", 8, 1.0)
        .inputs([0, 1])
        .step_reads([0, 1, 2, 3]);
    assert!(!node.inputs.spilled() && !node.step_reads.spilled());
    assert_eq!(
        core::mem::size_of::<crate::planner::Ids>(),
        core::mem::size_of::<Vec<u32>>()
    );
    let cat = Node::new("cat", 8, 1.0).inputs(0..6);
    assert_eq!(cat.inputs[..], [0, 1, 2, 3, 4, 5]);
}
