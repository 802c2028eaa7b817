//! Chains whose blocks also read one value computed before them (NOTE [pinned-chain]).
//!
//! NOTE [pinned-chain]: a chain of blocks breaks its cuts (NOTE \[stages\] in `blocks.rs`)
//! when every block also reads a value recorded before the chain: `C = A + l B` read by each
//! step of a recurrence, weights normalized once and read by every step, a mask drawn once
//! (not replayable). Leaves and constants are not nodes and never break a cut; such a value
//! is a node, and the edges from it to every block cross every cut. Without stages the
//! planner had only the portfolio's eviction runs, whose smallest budget grows with the
//! chain's length (the recurrence above needed 17 MiB at 400 steps, 346 MiB at 10,000).
//!
//! Such a value is *pinned*: held from its forward computation to its last read, charged
//! once. The chain is planned on the *reduced* view, the same nodes without any read of a
//! pinned value (the pinned node itself made rebuildable there: nothing reads it, so no
//! schedule of the reduced view rebuilds it), with the budget less the pinned bytes; the
//! schedule is then *completed* for the real view: the pinned value is kept right after
//! its computation (or, resuming from a forward pass that did not keep it, rebuilt with
//! what it is computed from before the first backward action), every action of the reduced
//! schedule about it is dropped, and it is freed after its last read. The simulator checks
//! the completed schedule like any other.
//!
//! A node is pinned when at least [`MIN_READERS`] other nodes read it and its readers span
//! more than half of the nodes after it, unless a region forces it to be rebuilt; at most
//! [`MAX_PINNED`] of them, the most read first, and only when the reduced view has stages.
//! The smallest budget of such a view is the pinned bytes plus the reduced chain's smallest
//! (`feasible.rs`), which does not grow with the chain's length.
//!
//! Cost model: finding the pinned nodes and building the reduced view is O(n + e);
//! completing a schedule is O(actions + e).

use super::analysis::{Analysis, without_unneeded_inputs};
use super::blocks::Planner;
use super::schedule::with_inserted;
use super::view::rebuildable;
use super::{Action, Forced, GraphView, Node, Schedule, rotor};

/// The fewest distinct readers a pinned node has.
const MIN_READERS: usize = 4;

/// The most nodes pinned in one view.
const MAX_PINNED: usize = 8;

/// A head is at least this many times the median value's bytes (NOTE \[pinned-heads\]).
const HEAD_TIMES: u64 = 8;

/// NOTE [pinned-heads]: a loss on every output of Burn's `Lstm` or `Gru` reads the
/// `[batch, seq, hidden]` tensor the module writes step by step with `slice_assign`: one
/// large value at the end of a chain of large values, each the previous one with a step's
/// output written in. Its readers step first in backward, and rebuilding it replays the
/// whole chain. The chain crosses every cut beside `(h, c)`, so each tuple (NOTE
/// \[tuple-cuts\]) carried a copy of the stacked output: on 32 steps below 40% of the
/// keep-all bytes no chain plan fitted and the lean schedule ran (225,304 replays a step).
/// Such a value, a *head*, is pinned: held from its computation until its readers have
/// stepped, which is at the start of backward. With it held, the values only its rebuild
/// needed are never rebuilt, so the reduced view drops their inputs, and the rest of the
/// view is the `(h, c)` chain, planned by tuples. A head: at least [`HEAD_TIMES`] the median
/// value's bytes, a rebuild that runs through a chain of at least an eighth of the view's
/// nodes, needed only within the first eighth of the step order (it dies there: NOTE
/// \[need\] in `analysis.rs`); not forced to be rebuilt.
fn heads(view: &GraphView) -> Vec<u32> {
    let n = view.len();
    let nodes = view.nodes();
    let mut sizes: Vec<u64> = nodes.iter().map(|node| node.bytes).collect();
    let median = *sizes.select_nth_unstable(n / 2).1;
    // The longest chain of rebuilds behind each value.
    let mut depth = vec![0u32; n];
    for (w, node) in nodes.iter().enumerate() {
        if rebuildable(node) {
            depth[w] = 1 + node
                .inputs
                .iter()
                .map(|&u| depth[u as usize])
                .max()
                .unwrap_or(0);
        }
    }
    // NOTE [need] in `analysis.rs`: a value is needed until the step position it dies at.
    let analysis = Analysis::new(view);
    let candidate: Vec<bool> = (0..n)
        .map(|u| {
            analysis.need[u] > 0
                && nodes[u].forced != Some(Forced::Recompute)
                && nodes[u].bytes >= HEAD_TIMES * median.max(1)
                && 8 * depth[u] as usize >= n
                && 8 * (analysis.death[u] as usize) < n
        })
        .collect();
    // Only the last of a chain of candidates: the values before it are needed only to
    // rebuild it.
    let mut fed = vec![false; n];
    for (w, node) in nodes.iter().enumerate() {
        if candidate[w] {
            for &u in &node.inputs {
                fed[u as usize] = true;
            }
        }
    }
    (0..n)
        .filter(|&u| candidate[u] && !fed[u])
        .map(|u| u as u32)
        .collect()
}

/// A view's pinned nodes and its reduced view (see NOTE \[pinned-chain\]).
pub(crate) struct Pinned {
    /// The pinned nodes, ascending.
    pub(crate) nodes: Vec<u32>,
    /// Their bytes together.
    pub(crate) bytes: u64,
    /// The view without any read of a pinned node.
    pub(crate) view: GraphView,
    /// The nodes the reduced view never needs rebuilt, their inputs dropped there (NOTE
    /// \[pinned-heads\]); empty when no head was pinned.
    unneeded: Vec<bool>,
}

/// The pinned nodes of `view` and its reduced view, when the view has no stages of its own,
/// some node qualifies and the reduced view has stages (NOTE \[pinned-chain\]); stages'
/// inner plans by `planner`.
pub(crate) fn reduced(view: &GraphView, planner: Planner) -> Option<Pinned> {
    let n = view.len();
    if n < 2 * MIN_READERS {
        return None;
    }
    let nodes = view.nodes();
    // Distinct readers and the first and last of them, per node.
    let mut readers = vec![0u32; n];
    let mut first = vec![u32::MAX; n];
    let mut last = vec![0u32; n];
    let mut seen = vec![u32::MAX; n];
    for (w, node) in nodes.iter().enumerate() {
        for &u in node.inputs.iter().chain(&node.step_reads) {
            let u = u as usize;
            if u == w || seen[u] == w as u32 {
                continue;
            }
            seen[u] = w as u32;
            readers[u] += 1;
            first[u] = first[u].min(w as u32);
            last[u] = w as u32;
        }
    }
    let mut candidates: Vec<u32> = (0..n)
        .filter(|&u| {
            readers[u] as usize >= MIN_READERS
                && nodes[u].forced != Some(Forced::Recompute)
                && 2 * (last[u] - first[u]) as usize > n - 1 - u
        })
        .map(|u| u as u32)
        .collect();
    if rotor::stages_of(view, planner).is_some() {
        return None;
    }
    let heads = heads(view);
    if candidates.is_empty() && heads.is_empty() {
        return None;
    }
    candidates.sort_by_key(|&u| std::cmp::Reverse(readers[u as usize]));
    candidates.truncate(MAX_PINNED);
    candidates.extend(heads.iter().copied());
    candidates.sort_unstable();
    candidates.dedup();
    let mut is_pinned = vec![false; n];
    for &p in &candidates {
        is_pinned[p as usize] = true;
    }
    let reduced_nodes: Vec<Node> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let mut node = node.clone();
            node.inputs.retain(|u| !is_pinned[*u as usize]);
            node.step_reads.retain(|u| !is_pinned[*u as usize]);
            if is_pinned[i] {
                node.replayable = true;
                node.forced = None;
            }
            node
        })
        .collect();
    let mut reduced = GraphView::with_step_order(reduced_nodes, view.step_order().to_vec()).ok()?;
    let mut unneeded = Vec::new();
    if !heads.is_empty() {
        // NOTE [pinned-heads]: with the heads held, what only they needed is never rebuilt.
        let (pruned, flags) = without_unneeded_inputs(&reduced);
        unneeded = flags;
        if let Some(pruned) = pruned {
            reduced = pruned;
        }
    }
    // A reduced view cut by tuples (NOTE [tuple-cuts]) only where a head was pinned: other
    // pinned views keep the plans they had.
    if rotor::stages_of(&reduced, planner).is_none()
        && (heads.is_empty() || super::tuples::tupled(&reduced, planner).is_none())
    {
        return None;
    }
    let bytes = candidates.iter().map(|&p| nodes[p as usize].bytes).sum();
    Some(Pinned {
        nodes: candidates,
        bytes,
        view: reduced,
        unneeded,
    })
}

impl Pinned {
    /// The budget left to the reduced view under `budget`, `None` when the pinned values
    /// alone take it.
    pub(crate) fn room(&self, budget: u64) -> Option<u64> {
        budget.checked_sub(self.bytes)
    }

    /// `schedule` (for the reduced view) completed for the real `view`: each pinned value
    /// kept from its computation in the forward pass, or where `kept_in_forward` says the
    /// forward pass did not keep it, rebuilt when the forward pass ends (from `held`, what
    /// the forward pass kept: what it is computed from that is not held is replayed too,
    /// and freed); freed after its last read.
    pub(crate) fn completed(
        &self,
        view: &GraphView,
        schedule: &Schedule,
        kept_in_forward: impl Fn(u32) -> bool,
        held: &[u32],
    ) -> Schedule {
        let n = view.len();
        let mut is_pinned = vec![false; n];
        for &p in &self.nodes {
            is_pinned[p as usize] = true;
        }
        let actions = schedule.actions();
        let mut out: Vec<Action> = Vec::with_capacity(actions.len() + 4 * self.nodes.len());
        // The forward pass ends after its last computation and the keeps that follow it.
        let mut forward_end = actions
            .iter()
            .rposition(|a| matches!(a, Action::Compute(_)))
            .map_or(0, |k| k + 1);
        while matches!(actions.get(forward_end), Some(Action::Keep(_))) {
            forward_end += 1;
        }
        // NOTE [unneeded-replays]: a schedule of the reduced view may replay a node it
        // never needs (resumed from the lean state, a stage is rebuilt whole): there its
        // inputs were dropped, in the real view they are not held. Such replays are left
        // out, and a free of such a node only follows a keep of it.
        let unneeded = |v: u32| self.unneeded.get(v as usize).copied().unwrap_or(false);
        let mut kept_unneeded = vec![false; if self.unneeded.is_empty() { 0 } else { n }];
        for (k, &action) in actions.iter().enumerate() {
            if k == forward_end {
                self.rebuild(view, &kept_in_forward, held, &mut out);
            }
            match action {
                Action::Keep(p) | Action::Free(p) | Action::Replay(p) if is_pinned[p as usize] => {}
                Action::Replay(v) if unneeded(v) => {}
                Action::Keep(v) if unneeded(v) => {
                    kept_unneeded[v as usize] = true;
                    out.push(action);
                }
                Action::Free(v) if unneeded(v) => {
                    if std::mem::take(&mut kept_unneeded[v as usize]) {
                        out.push(action);
                    }
                }
                Action::Compute(p) if is_pinned[p as usize] => {
                    out.push(action);
                    if kept_in_forward(p) {
                        out.push(Action::Keep(p));
                    }
                }
                _ => out.push(action),
            }
        }
        if forward_end == actions.len() {
            self.rebuild(view, &kept_in_forward, held, &mut out);
        }
        // Each pinned value is freed after the last action that reads it.
        let nodes = view.nodes();
        let reads = |action: Action, p: u32| match action {
            Action::Compute(w) | Action::Replay(w) => nodes[w as usize].inputs.contains(&p),
            Action::Step(w) => nodes[w as usize].step_reads.contains(&p),
            Action::Keep(_) | Action::Free(_) => false,
        };
        let mut free_after: Vec<(usize, Action)> = Vec::with_capacity(self.nodes.len());
        for &p in &self.nodes {
            let became_held = if kept_in_forward(p) {
                Action::Keep(p)
            } else {
                Action::Replay(p)
            };
            let Some(from) = out.iter().position(|&a| a == became_held) else {
                continue;
            };
            let last = (from..out.len())
                .rev()
                .find(|&k| reads(out[k], p))
                .unwrap_or(from);
            free_after.push((last, Action::Free(p)));
        }
        Schedule::new(with_inserted(&out, free_after, &[]))
    }

    /// Rebuilds the pinned values the forward pass did not keep, from `held`: what each is
    /// computed from that is not held is replayed in index order, each freed after the last
    /// of these replays that reads it.
    ///
    /// NOTE [head-rebuild]: the values replayed to rebuild a pinned one were all freed
    /// once every pinned value was rebuilt. Rebuilding a head (NOTE \[pinned-heads\])
    /// from the lean state replays the whole forward pass, so that held all of it at once:
    /// a step of Burn's `Gru` with the loss on every output, run after the thread had run
    /// the `Gru` with the loss on its last output (its forward pass followed that graph's
    /// plan, NOTE \[plan-ahead\] in `checkpoint/budget/state.rs`, departed from it at the
    /// loss, and backward started from the lean state), stopped at half of SaveAll's bytes
    /// with the smallest budget it named, every step after it too.
    fn rebuild(
        &self,
        view: &GraphView,
        kept_in_forward: &impl Fn(u32) -> bool,
        held: &[u32],
        out: &mut Vec<Action>,
    ) {
        let missing: Vec<u32> = self
            .nodes
            .iter()
            .copied()
            .filter(|&p| !kept_in_forward(p))
            .collect();
        if missing.is_empty() {
            return;
        }
        let n = view.len();
        let nodes = view.nodes();
        let mut have = vec![false; n];
        for &h in held {
            have[h as usize] = true;
        }
        for &p in &self.nodes {
            if kept_in_forward(p) {
                have[p as usize] = true;
            }
        }
        // The ancestors to replay: an explicit stack, no recursion.
        let mut needed = vec![false; n];
        let mut stack: Vec<u32> = missing.clone();
        while let Some(v) = stack.pop() {
            if needed[v as usize] || have[v as usize] {
                continue;
            }
            needed[v as usize] = true;
            stack.extend(nodes[v as usize].inputs.iter().copied());
        }
        // Replayed in index order, each freed right after the last replay that reads it
        // (NOTE [head-rebuild]).
        let mut last_reader = vec![u32::MAX; n];
        for w in (0..n as u32).filter(|&w| needed[w as usize]) {
            for &u in &nodes[w as usize].inputs {
                if needed[u as usize] {
                    last_reader[u as usize] = w;
                }
            }
        }
        let mut freed_after: Vec<Vec<u32>> = vec![Vec::new(); n];
        for v in (0..n as u32).filter(|&v| needed[v as usize] && !missing.contains(&v)) {
            let w = last_reader[v as usize];
            freed_after[if w == u32::MAX { v } else { w } as usize].push(v);
        }
        for w in (0..n as u32).filter(|&w| needed[w as usize]) {
            out.push(Action::Replay(w));
            out.extend(freed_after[w as usize].iter().map(|&v| Action::Free(v)));
        }
    }
}
