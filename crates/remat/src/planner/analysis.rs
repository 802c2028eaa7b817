//! Facts about a view that every generator needs: consumers, step positions, and when each
//! value stops being needed.
//!
//! NOTE [need]: a value is *needed* while a step still to run reads it, or while a needed,
//! rebuildable consumer might have to be replayed from it. `need[v]` counts both: the steps
//! that read `v` plus the rebuildable consumers whose own `need` is positive. A step reading
//! `v` lowers it by one; a rebuildable consumer that stops being needed lowers it by one. At
//! zero the value is *dead*: it is freed and never read again. Because steps run consumers
//! first, every needed value dies at the latest at its own step.
//!
//! # Invariants
//! - `need` is computed once, in reverse index order (consumers have larger indices).
//! - `death[v]` is the step position at which `v` dies, or [`NONE`] if `v` is never needed.

use std::ops::Index;

use super::simulate::for_each_distinct;
use super::view::{GraphView, rebuildable};

/// No position / no node.
pub(crate) const NONE: u32 = u32::MAX;

/// A list of `u32` for each of a view's values, laid end to end: list `v` is
/// `items[start[v]..start[v + 1]]`.
///
/// NOTE [flat-lists]: an analysis is made for every planning of a view, in the step it
/// plans for (the engine's first step resumes over its view, NOTE \[planner-memory\] in
/// `rotor/solve.rs`), and a list per value (a `Vec` each: three words and an allocation) was
/// about 80 bytes a value for consumers and read positions, 0.35 MB on Burn's `Lstm` over 128
/// steps. Laid end to end they take a word a value and a word an item; each planned run
/// reads them where it copied them before (`Exec::planned`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Lists {
    start: Vec<u32>,
    items: Vec<u32>,
}

impl Lists {
    /// The lists of `n` values, from `each`, which hands every `(value, item)` pair to its
    /// argument, each list's items in order; `each` is called twice (to count, then to fill)
    /// and must hand the same pairs both times.
    fn build(n: usize, each: impl Fn(&mut dyn FnMut(u32, u32))) -> Self {
        let mut start = vec![0u32; n + 1];
        each(&mut |v, _| start[v as usize + 1] += 1);
        for k in 0..n {
            start[k + 1] += start[k];
        }
        let mut next = start[..n].to_vec();
        let mut items = vec![0u32; start[n] as usize];
        each(&mut |v, item| {
            items[next[v as usize] as usize] = item;
            next[v as usize] += 1;
        });
        Self { start, items }
    }
}

impl Index<usize> for Lists {
    type Output = [u32];

    fn index(&self, v: usize) -> &[u32] {
        &self.items[self.start[v] as usize..self.start[v + 1] as usize]
    }
}

pub(crate) struct Analysis {
    /// The distinct nodes whose `inputs` name each value, ascending (NOTE [flat-lists]).
    pub(crate) consumers: Lists,
    /// NOTE [need]: the initial count.
    pub(crate) need: Vec<u32>,
    /// NOTE [need]: the step position at which the value dies.
    pub(crate) death: Vec<u32>,
    /// The step positions that read each value, ascending (NOTE [flat-lists]).
    pub(crate) read_positions: Lists,
    /// The largest index of a needed rebuildable consumer of each value, or [`NONE`]: a
    /// rebuild that starts from scratch holds the value until then.
    pub(crate) last_consumer: Vec<u32>,
    /// The last forward op that has each value in hand (itself, or the last op whose
    /// inputs or step reads name it): keeping a value then holds it the shortest.
    pub(crate) last_in_hand: Vec<u32>,
}

impl Analysis {
    pub(crate) fn new(view: &GraphView) -> Self {
        let n = view.len();
        let nodes = view.nodes();
        let consumers = Lists::build(n, |push| {
            for (w, node) in nodes.iter().enumerate() {
                for_each_distinct(&node.inputs, |u| push(u, w as u32));
            }
        });
        let read_positions = Lists::build(n, |push| {
            for (p, &s) in view.step_order().iter().enumerate() {
                for_each_distinct(&nodes[s as usize].step_reads, |r| push(r, p as u32));
            }
        });
        let mut need = vec![0u32; n];
        let mut last_consumer = vec![NONE; n];
        for v in (0..n).rev() {
            let from_consumers = consumers[v]
                .iter()
                .filter(|&&w| rebuildable(&nodes[w as usize]) && need[w as usize] > 0)
                .count() as u32;
            need[v] = read_positions[v].len() as u32 + from_consumers;
            last_consumer[v] = consumers[v]
                .iter()
                .rev()
                .copied()
                .find(|&w| rebuildable(&nodes[w as usize]) && need[w as usize] > 0)
                .unwrap_or(NONE);
        }
        let death = deaths(view, &need);
        let mut last_in_hand: Vec<u32> = (0..n as u32).collect();
        for (j, node) in nodes.iter().enumerate() {
            for &u in node.inputs.iter().chain(&node.step_reads) {
                last_in_hand[u as usize] = last_in_hand[u as usize].max(j as u32);
            }
        }
        Self {
            consumers,
            need,
            death,
            read_positions,
            last_consumer,
            last_in_hand,
        }
    }
}

/// Replays NOTE [need] over the step order and records when each value dies.
fn deaths(view: &GraphView, need0: &[u32]) -> Vec<u32> {
    let nodes = view.nodes();
    let mut need = need0.to_vec();
    let mut death = vec![NONE; nodes.len()];
    let mut dying: Vec<u32> = Vec::new();
    for (p, &s) in view.step_order().iter().enumerate() {
        let p = p as u32;
        for_each_distinct(&nodes[s as usize].step_reads, |r| {
            need[r as usize] -= 1;
            if need[r as usize] == 0 {
                dying.push(r);
            }
        });
        while let Some(v) = dying.pop() {
            death[v as usize] = p;
            if rebuildable(&nodes[v as usize]) {
                for_each_distinct(&nodes[v as usize].inputs, |u| {
                    need[u as usize] -= 1;
                    if need[u as usize] == 0 {
                        dying.push(u);
                    }
                });
            }
        }
        debug_assert!(
            need0[s as usize] == 0 || need[s as usize] == 0,
            "remat internal error: value {s} is still needed after its own step"
        );
    }
    death
}

/// `view` with the inputs of every value no schedule needs (NOTE \[need\]: `need` is 0)
/// left out, when any such value reads something, and which values those are. A schedule
/// never rebuilds such a value, so its inputs only tie it to values it would otherwise not
/// cross (NOTE \[pinned-heads\] in `pinned.rs`, NOTE \[unneeded-members\] in `tuples.rs`).
pub(crate) fn without_unneeded_inputs(view: &GraphView) -> (Option<GraphView>, Vec<bool>) {
    let unneeded: Vec<bool> = Analysis::new(view).need.iter().map(|&n| n == 0).collect();
    let nodes = view.nodes();
    if !nodes
        .iter()
        .zip(&unneeded)
        .any(|(node, &unneeded)| unneeded && !node.inputs.is_empty())
    {
        return (None, unneeded);
    }
    let pruned: Vec<_> = nodes
        .iter()
        .zip(&unneeded)
        .map(|(node, &unneeded)| {
            let mut node = node.clone();
            if unneeded {
                node.inputs.clear();
            }
            node
        })
        .collect();
    (
        GraphView::with_step_order(pruned, view.step_order().to_vec()).ok(),
        unneeded,
    )
}
