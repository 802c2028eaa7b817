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

use super::simulate::for_each_distinct;
use super::view::{GraphView, rebuildable};

/// No position / no node.
pub(crate) const NONE: u32 = u32::MAX;

pub(crate) struct Analysis {
    /// The distinct nodes whose `inputs` name each value, ascending.
    pub(crate) consumers: Vec<Vec<u32>>,
    /// NOTE [need]: the initial count.
    pub(crate) need: Vec<u32>,
    /// NOTE [need]: the step position at which the value dies.
    pub(crate) death: Vec<u32>,
    /// The step positions that read each value, ascending.
    pub(crate) read_positions: Vec<Vec<u32>>,
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
        let mut consumers: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (w, node) in nodes.iter().enumerate() {
            for_each_distinct(&node.inputs, |u| consumers[u as usize].push(w as u32));
        }
        let mut read_positions: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (p, &s) in view.step_order().iter().enumerate() {
            for_each_distinct(&nodes[s as usize].step_reads, |r| {
                read_positions[r as usize].push(p as u32)
            });
        }
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
