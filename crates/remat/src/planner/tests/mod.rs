//! Planner tests: hand-made graphs with exact expected numbers, property tests over random
//! DAGs, Revolve's closed form and an exact solver. No tensors.

mod exact;
mod generators;
mod optimality;
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
