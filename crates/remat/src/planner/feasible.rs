//! The smallest budget the planner guarantees for a view.
//!
//! NOTE [lean-schedule]: the *lean* schedule holds as little as the planner ever holds. In
//! the forward pass it keeps only the values that cannot be rebuilt and may be needed
//! (*pinned*: not replayable or forced to Keep). For each backward step it rebuilds the
//! step's reads from scratch: it replays every value they need that is not held, in index
//! order, each once, dropping each value after the last replay that reads it; then it runs
//! the step and drops everything it rebuilt. Every generator falls back to this sweep for a
//! step when it cannot make room otherwise (`exec/`), so every generator meets any budget
//! the lean schedule meets.
//!
//! Cost model: [`min_feasible_budget`] does not run the lean schedule (that is quadratic on a
//! chain); it bounds its held bytes from above, in O((n + e) log n), by
//!
//! - forward: the pinned values that may be needed plus every node's constants;
//! - step `s` at position `p`: the pinned values alive then, the constants of the nodes not
//!   stepped yet, and the most the sweep can hold at any index `i`: the reads of `s` already
//!   rebuilt (index <= `i`) plus the other rebuildable values that are live at `i` in the
//!   forward pass (produced at or before `i`, read by a needed rebuildable consumer after
//!   `i`): a value the sweep still holds after replaying `i` is one of those.
//!
//! The bound is exact on chains, and is at least the largest step's reads plus the constants
//! held then; it may exceed what a cleverer order of replays would need.
//!
//! # Invariants
//! - `min_feasible_budget(view)` >= the peak of the lean schedule, which every generator can
//!   fall back to: a budget at or above it never makes a generator fail.

use super::analysis::{Analysis, NONE};
use super::simulate::for_each_distinct;
use super::view::{GraphView, rebuildable};

/// The smallest budget (bytes) the planner guarantees for `view`: at or above it every
/// generator returns a schedule. Below it a generator may still succeed, but nothing is
/// promised. See NOTE [lean-schedule] in this module's source for what it bounds.
pub fn min_feasible_budget(view: &GraphView) -> u64 {
    let analysis = Analysis::new(view);
    Bounds::new(view, &analysis).min_feasible()
}

/// The per-position quantities behind [`min_feasible_budget`].
pub(crate) struct Bounds<'a> {
    view: &'a GraphView,
    analysis: &'a Analysis,
    /// Bytes of rebuildable values live in the forward pass at each index, as a max
    /// segment tree over `n` leaves: `live_max[n + i]` is index `i`'s, `live_max[k]` the
    /// larger of its two children's. Two words an index, where a range-max table of
    /// `log n` levels took 4.8 MB on Burn's `Lstm` over 1,024 steps (37,900 ops), in the
    /// step whose online eviction asked for this bound (NOTE \[planner-memory\] in
    /// `rotor/solve.rs`).
    live_max: Vec<u64>,
    /// Bytes of pinned values alive at each step position.
    pinned_at: Vec<u64>,
    /// Constants of the nodes not stepped before each step position.
    fixed_at: Vec<u64>,
    /// Pinned values that may be needed plus every constant: the lean forward pass's end.
    forward_end: u64,
}

impl<'a> Bounds<'a> {
    pub(crate) fn new(view: &'a GraphView, analysis: &'a Analysis) -> Self {
        let n = view.len();
        let nodes = view.nodes();
        // Forward liveness of rebuildable values: [v, last_consumer(v)).
        let mut delta = vec![0i128; n + 1];
        for v in 0..n {
            let last = analysis.last_consumer[v];
            if rebuildable(&nodes[v]) && last != NONE {
                delta[v] += nodes[v].bytes as i128;
                delta[last as usize] -= nodes[v].bytes as i128;
            }
        }
        let mut live_max = vec![0u64; 2 * n];
        let mut running = 0i128;
        for (i, d) in delta.iter().take(n).enumerate() {
            running += d;
            live_max[n + i] = running as u64;
        }
        for k in (1..n).rev() {
            live_max[k] = live_max[2 * k].max(live_max[2 * k + 1]);
        }
        let mut pinned_delta = vec![0i128; n + 1];
        let mut forward_end: u64 = nodes.iter().map(|node| node.fixed_bytes).sum();
        for (v, node) in nodes.iter().enumerate() {
            if rebuildable(node) {
                continue;
            }
            // Online planning pins a value as soon as anything might read it.
            let may_be_needed = !analysis.read_positions[v].is_empty()
                || analysis.consumers[v]
                    .iter()
                    .any(|&w| rebuildable(&nodes[w as usize]));
            if may_be_needed {
                forward_end += node.bytes;
            }
            if analysis.death[v] != NONE {
                pinned_delta[0] += node.bytes as i128;
                pinned_delta[analysis.death[v] as usize + 1] -= node.bytes as i128;
            }
        }
        let mut pinned_at = Vec::with_capacity(n);
        let mut running = 0i128;
        for d in pinned_delta.iter().take(n) {
            running += d;
            pinned_at.push(running as u64);
        }
        let fixed_at = view.constants_from();
        Self {
            view,
            analysis,
            live_max,
            pinned_at,
            fixed_at,
            forward_end,
        }
    }

    /// The largest forward-live bytes over indices `a..=b`.
    fn live_range_max(&self, a: usize, b: usize) -> u64 {
        debug_assert!(a <= b);
        let n = self.live_max.len() / 2;
        let (mut lo, mut hi) = (a + n, b + n + 1);
        let mut max = 0;
        while lo < hi {
            if lo % 2 == 1 {
                max = max.max(self.live_max[lo]);
                lo += 1;
            }
            if hi % 2 == 1 {
                hi -= 1;
                max = max.max(self.live_max[hi]);
            }
            lo /= 2;
            hi /= 2;
        }
        max
    }

    /// The bound on the lean schedule's held bytes during the step at position `p`.
    pub(crate) fn step_bound(&self, p: usize) -> u64 {
        let nodes = self.view.nodes();
        let s = self.view.step_order()[p] as usize;
        let mut reads: Vec<u32> = Vec::new();
        for_each_distinct(&nodes[s].step_reads, |r| {
            if rebuildable(&nodes[r as usize]) {
                reads.push(r)
            }
        });
        reads.sort_unstable();
        let mut sweep = 0u64;
        if let Some(&first) = reads.first()
            && first > 0
        {
            sweep = self.live_range_max(0, first as usize - 1);
        }
        let mut rebuilt = 0u64;
        let mut splits: Vec<usize> = Vec::new();
        for (j, &t) in reads.iter().enumerate() {
            rebuilt += nodes[t as usize].bytes;
            let start = t as usize;
            let end = match reads.get(j + 1) {
                Some(&next) => next as usize - 1,
                None => t as usize,
            };
            // Within start..=end a rebuilt read `r` is counted by the forward liveness while
            // `i < last_consumer(r)`: split there so that it is counted once.
            splits.clear();
            splits.extend(
                reads[..=j]
                    .iter()
                    .map(|&r| self.analysis.last_consumer[r as usize])
                    .filter(|&c| c != NONE && (c as usize) > start && (c as usize) <= end)
                    .map(|c| c as usize),
            );
            splits.sort_unstable();
            splits.dedup();
            let mut a = start;
            for b_next in splits.iter().copied().chain(std::iter::once(end + 1)) {
                let b = b_next - 1;
                let counted_twice: u64 = reads[..=j]
                    .iter()
                    .filter(|&&r| {
                        let c = self.analysis.last_consumer[r as usize];
                        c != NONE && c as usize > a
                    })
                    .map(|&r| nodes[r as usize].bytes)
                    .sum();
                let held = rebuilt + self.live_range_max(a, b) - counted_twice;
                sweep = sweep.max(held);
                a = b_next;
            }
        }
        self.pinned_at[p] + self.fixed_at[p] + sweep
    }

    pub(crate) fn min_feasible(&self) -> u64 {
        (0..self.view.len())
            .map(|p| self.step_bound(p))
            .fold(self.forward_end, u64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::{Analysis, Bounds};
    use crate::planner::{GraphView, Node};

    /// The segment tree's range maximum is the plain maximum of the live bytes over every
    /// range, on a length that is not a power of two and on one element.
    #[test]
    fn the_live_range_maximum_is_the_maximum_over_the_range() {
        for n in [1u32, 2, 37, 64] {
            // Each op reads the two before it, sizes vary: the live bytes rise and fall.
            let nodes: Vec<Node> = (0..n)
                .map(|i| {
                    let inputs: Vec<u32> = (i.saturating_sub(2)..i).collect();
                    Node::new("f", u64::from(i * 7919 % 97 + 1), 1.0)
                        .inputs(inputs.clone())
                        .step_reads(inputs)
                })
                .collect();
            let view = GraphView::new(nodes).unwrap();
            let analysis = Analysis::new(&view);
            let bounds = Bounds::new(&view, &analysis);
            let n = n as usize;
            let live = &bounds.live_max[n..];
            assert!(n < 3 || live.iter().any(|&b| b > 0));
            for a in 0..n {
                for b in a..n {
                    let expected = live[a..=b].iter().copied().max().unwrap();
                    assert_eq!(bounds.live_range_max(a, b), expected, "{a}..={b} of {n}");
                }
            }
        }
    }
}
