//! The schedule of today's engine for per-node decisions: what `SaveAll`, `Balanced`,
//! `Selective`, `RecomputeAll` and regions do once their decisions are written into a view
//! as [`Forced`] marks. The engine's own planning passes, replayed on the view, at the
//! planner's granularity (one action per op).
//!
//! - Forward: when op `j` is recorded, each value it needs (its step reads it, or `j` is
//!   rebuilt and its replay reads it) is kept then, unless it is rebuilt itself. A value
//!   marked [`Forced::Recompute`] is rebuilt; any other (`Keep`, or `None`) is kept.
//! - Backward start: a value to rebuild is *needed* if a step reads it or a needed value to
//!   rebuild replays from it (consumers first). Kept values that nothing reads, directly or
//!   through such a replay, are dropped (Burn's "unneeded backup").
//! - Each step rebuilds the values it reads that are not held, together with their needed
//!   ancestors that are not held, parents first, each once; a value is held until its last
//!   read (by a step or by a replay).
//!
//! Cost model: O(n + e); every value to rebuild is replayed exactly once.
//!
//! It agrees with the engine on what is kept after forward, which values are rebuilt and
//! how often (when every step receives a gradient and makes every read it declared), and
//! which backups are dropped when backward starts. The engine (like Burn's checkpointer)
//! works at a finer grain inside a step, which a [`Schedule`] cannot express (a `Step`
//! needs all its reads held when it starts; a `Free` follows the op):
//! - a step rebuilds a value when its backward reads it, not before the step starts (the
//!   step's inner calls before that read run with less held);
//! - a read that is a value's last takes it: the value leaves before the step's
//!   computation, not after the step;
//! - a step that receives no gradient, or does not make a read it declared, rebuilds
//!   nothing for it (NOTE [release-without-rebuild] in `graph/retrieve.rs`).
//!
//! So the held bytes `simulate` reports for this schedule are an upper bound on the
//! engine's inside a step, and its replays an upper bound on the engine's.
//!
//! # Invariants
//! - The schedule needs no budget: it is what the engine does today, and `simulate` with
//!   `u64::MAX` accepts it.

use super::simulate::for_each_distinct;
use super::{Action, Forced, GraphView, Schedule};

/// Today's schedule for the view's forced marks (`None` counts as `Keep`); see the module docs.
pub fn from_decisions(view: &GraphView) -> Schedule {
    let n = view.len();
    let nodes = view.nodes();
    let recompute = |v: u32| nodes[v as usize].forced == Some(Forced::Recompute);
    let mut out = Vec::new();
    // Forward: keep each value when its first consumer that needs it is recorded.
    let mut kept = vec![false; n];
    let mut evicted = vec![false; n];
    for (j, node) in nodes.iter().enumerate() {
        let j = j as u32;
        out.push(Action::Compute(j));
        let mut needed: Vec<u32> = Vec::new();
        for_each_distinct(&node.step_reads, |r| needed.push(r));
        if recompute(j) {
            for_each_distinct(&node.inputs, |u| {
                if !needed.contains(&u) {
                    needed.push(u)
                }
            });
        }
        // The op's own output first, as the engine places it when it creates the node.
        needed.sort_by_key(|&v| v != j);
        for v in needed {
            if recompute(v) {
                evicted[v as usize] = true;
            } else if !kept[v as usize] {
                kept[v as usize] = true;
                out.push(Action::Keep(v));
            }
        }
    }
    // Backward start: count the reads each value will serve.
    let mut reads = vec![0u32; n];
    for node in nodes {
        for_each_distinct(&node.step_reads, |r| reads[r as usize] += 1);
    }
    for &v in view.step_order() {
        if evicted[v as usize] && reads[v as usize] > 0 {
            for_each_distinct(&nodes[v as usize].inputs, |u| reads[u as usize] += 1);
        }
    }
    let mut held = vec![false; n];
    for v in 0..n {
        if kept[v] {
            if reads[v] > 0 {
                held[v] = true;
            } else {
                out.push(Action::Free(v as u32));
            }
        }
        if evicted[v] && reads[v] == 0 {
            evicted[v] = false;
        }
    }
    // Steps.
    let mut order: Vec<u32> = Vec::new();
    let mut stack: Vec<u32> = Vec::new();
    let mut visited = vec![false; n];
    for &s in view.step_order() {
        let node = &nodes[s as usize];
        let mut step_reads: Vec<u32> = Vec::new();
        for_each_distinct(&node.step_reads, |r| step_reads.push(r));
        step_reads.sort_by_key(|&r| r != s);
        for &r in &step_reads {
            if held[r as usize] {
                continue;
            }
            // Collect r and its evicted ancestors that are not held, replay parents first.
            order.clear();
            stack.clear();
            stack.push(r);
            while let Some(v) = stack.pop() {
                if visited[v as usize] || held[v as usize] {
                    continue;
                }
                assert!(
                    evicted[v as usize],
                    "remat internal error: value {v} is read but neither kept nor rebuildable"
                );
                visited[v as usize] = true;
                order.push(v);
                stack.extend(nodes[v as usize].inputs.iter().copied());
            }
            order.sort_unstable();
            for &x in &order {
                visited[x as usize] = false;
                out.push(Action::Replay(x));
                for_each_distinct(&nodes[x as usize].inputs, |u| {
                    reads[u as usize] -= 1;
                    if reads[u as usize] == 0 {
                        held[u as usize] = false;
                        out.push(Action::Free(u));
                    }
                });
                held[x as usize] = true;
                evicted[x as usize] = false;
            }
        }
        out.push(Action::Step(s));
        for &r in &step_reads {
            reads[r as usize] -= 1;
            if reads[r as usize] == 0 {
                held[r as usize] = false;
                out.push(Action::Free(r));
            }
        }
    }
    Schedule::new(out)
}
