//! Chains whose blocks hand several values to the next (NOTE [tuple-cuts]).
//!
//! NOTE [tuple-cuts]: a cut (NOTE \[stages\] in `blocks.rs`) is one value every later block
//! reads through. An LSTM hands two to its next step, `(h, c)`; a GRU whose loss reads
//! every output hands `h` and the `[batch, seq, hidden]` output it writes step by step
//! with `slice_assign`. No single value cuts such a chain, so it had no stages: the
//! portfolio's eviction runs planned it alone and, below about 15% of its bytes, only the
//! lean schedule fitted (Burn's `Lstm` at 128 steps: 3.6M replays a step).
//!
//! Here such a hand-over becomes one value. Where at most [`MAX_MEMBERS`] values cross a
//! position (produced at or before it, read after it), all produced after the previous
//! such position, a *tuple* node is inserted right after it: it reads those values (its
//! *members*), costs nothing, holds their bytes, and every later read of a member reads the
//! tuple instead. The tuple cuts the *augmented* view, which is planned like any other
//! view (its chain by Rotor's DP among the portfolio); the schedule is then *translated*
//! back: a value is held while the plan holds it or a tuple it is a member of; keeping a
//! tuple keeps its members (from their computation), replaying one replays nothing (its
//! members are held), freeing one frees the members nothing else holds. The simulator
//! checks the translated schedule on the real view like any other; one it rejects is not
//! used.
//!
//! The augmented view counts a member twice while the plan holds it and its tuple: the
//! translated schedule holds at most what the plan counted, but for the members kept from
//! their computation until the tuple is (within one block).
//!
//! Burn's backward runs some steps that read nothing far from their block (Burn's `Lstm`
//! steps one gate's input projection of every time step last, a `Gru` the `slice_assign`s
//! of its stacked output first), and a later node stepping after an earlier one breaks
//! every cut. The cuts are checked on the steps that read something; the augmented view
//! runs the steps block by block, the last block first (each block's steps in the real
//! order), and the translation puts each step that reads nothing back where the real
//! order has it. Such a step only releases its constants, so the augmented view charges
//! none of them and is planned under the budget less all of them.
//!
//! Measured (`examples/plan_view`, Burn's `Lstm` at 128 steps, batch 16, input 16, hidden
//! 64, loss on the last state, 4,737 ops): at 10% of its keep-all bytes the plan replayed
//! 3,624,184 ops (the lean schedule, 765 forward passes), now 8,539 (1.8 forward passes,
//! planned in 0.12 s); at 20% 8.9 -> 8.4 ms of recompute; 30% and above unchanged.
//!
//! Cost model: finding the positions is O((n + e) log n); the augmented view has one node
//! more per block; translating a schedule is O(actions + members).

use std::collections::BTreeSet;

use super::blocks::Planner;
use super::schedule::with_inserted;
use super::view::rebuildable;
use super::{Action, GraphView, Node, Schedule, rotor};

/// The most values one tuple hands over.
const MAX_MEMBERS: usize = 4;

/// The fewest tuples worth planning a chain by.
const MIN_TUPLES: usize = 3;

/// A view whose hand-overs were made tuples, and how to map its schedules back.
pub(crate) struct Tupled {
    /// The augmented view.
    pub(crate) view: GraphView,
    /// For each augmented node, the real node it is, or `None` for a tuple.
    real: Vec<Option<u32>>,
    /// For each augmented node that is a tuple, its members (real indices).
    members: Vec<Vec<u32>>,
    /// The real nodes whose steps the augmented view runs earlier (they read nothing).
    moved: Vec<bool>,
    /// The constants of the moved nodes, not charged by the augmented view: the budget it
    /// is planned under leaves them out.
    pub(crate) moved_fixed: u64,
    /// The real nodes no schedule needs (NOTE \[unneeded-members\]); empty when none.
    unneeded: Vec<bool>,
    /// The real view's step order.
    real_order: Vec<u32>,
    /// For each real node, its augmented index.
    index: Vec<u32>,
}

/// The augmented view of `view` (NOTE \[tuple-cuts\]), when `view` has no stages of its
/// own, at least [`MIN_TUPLES`] hand-overs of two to [`MAX_MEMBERS`] values, and the
/// augmented view has stages; stages' inner plans by `planner`.
pub(crate) fn tupled(view: &GraphView, planner: Planner) -> Option<Tupled> {
    let n = view.len();
    if n < 8 || rotor::stages_of(view, planner).is_some() {
        return None;
    }
    // NOTE [unneeded-members]: values no schedule ever needs cross no cut.
    let (pruned, unneeded) = pruned(view);
    let view = pruned.as_ref().unwrap_or(view);
    let nodes = view.nodes();
    // reach[u]: the last node other than u reading u (u itself when none).
    let mut reach: Vec<u32> = (0..n as u32).collect();
    for (w, node) in nodes.iter().enumerate() {
        for &u in node.inputs.iter().chain(&node.step_reads) {
            if u as usize != w {
                reach[u as usize] = reach[u as usize].max(w as u32);
            }
        }
    }
    let mut closing: Vec<Vec<u32>> = vec![Vec::new(); n];
    for u in 0..n {
        if reach[u] as usize > u {
            closing[reach[u] as usize].push(u as u32);
        }
    }
    // Steps that read nothing need nothing held: Burn's order runs some far from their
    // block (an LSTM's input projections last, a GRU's stacked outputs first). The cuts
    // are checked on the steps that read something; the augmented view runs the others
    // with their block, and charges their constants for the whole pass.
    let moved: Vec<bool> = nodes
        .iter()
        .map(|node| node.step_reads.is_empty())
        .collect();
    let mut position = vec![u32::MAX; n];
    for (p, &s) in view.step_order().iter().enumerate() {
        if !moved[s as usize] {
            position[s as usize] = p as u32;
        }
    }
    // later_last[c]: the last position of the reading steps of the nodes after c.
    let mut later_last = vec![0u32; n + 1];
    for c in (0..n).rev() {
        let own = if moved[c] { 0 } else { position[c] };
        later_last[c] = later_last[c + 1].max(own);
    }
    let mut first_step = u32::MAX;
    // Walk the positions with the set of values crossing each.
    let mut open: BTreeSet<u32> = BTreeSet::new();
    let mut cuts: Vec<(u32, Vec<u32>)> = Vec::new();
    let mut last_cut: Option<u32> = None;
    for c in 0..n - 1 {
        for &u in &closing[c] {
            open.remove(&u);
        }
        if reach[c] as usize > c {
            open.insert(c as u32);
        }
        first_step = first_step.min(position[c]);
        if open.len() < 2 || open.len() > MAX_MEMBERS || later_last[c + 1] > first_step {
            continue;
        }
        let first = *open.first().expect("not empty");
        if last_cut.is_some_and(|l| first <= l) {
            continue;
        }
        if !open
            .iter()
            .all(|&u| rebuildable(&nodes[u as usize]) && nodes[u as usize].forced.is_none())
        {
            continue;
        }
        // At a local minimum: the next position crosses no fewer values.
        let next_open =
            open.len() - closing[c + 1].len() + usize::from(reach[c + 1] as usize > c + 1);
        if next_open < open.len() && next_open >= 2 {
            continue;
        }
        cuts.push((c as u32, open.iter().copied().collect()));
        last_cut = Some(c as u32);
    }
    if cuts.len() < MIN_TUPLES {
        return None;
    }
    // The augmented numbering: tuple k sits right after its position.
    let mut index = vec![0u32; n];
    let mut real: Vec<Option<u32>> = Vec::with_capacity(n + cuts.len());
    let mut members: Vec<Vec<u32>> = Vec::with_capacity(n + cuts.len());
    let mut tuple_of: Vec<u32> = vec![u32::MAX; n]; // member -> augmented tuple index
    let mut next_cut = cuts.iter().peekable();
    for (u, slot) in index.iter_mut().enumerate() {
        *slot = real.len() as u32;
        real.push(Some(u as u32));
        members.push(Vec::new());
        if let Some((c, m)) = next_cut.peek()
            && *c as usize == u
        {
            let t = real.len() as u32;
            for &v in m {
                tuple_of[v as usize] = t;
            }
            real.push(None);
            members.push(m.clone());
            next_cut.next();
        }
    }
    let mut aug: Vec<Node> = Vec::with_capacity(real.len());
    let mut moved_fixed = 0u64;
    for (a, r) in real.iter().enumerate() {
        match *r {
            Some(u) => {
                let mut node = nodes[u as usize].clone();
                // Constants a moved step releases are charged for the whole pass too.
                if moved[u as usize] || moved[node.releaser(u) as usize] {
                    moved_fixed += node.fixed_bytes;
                    node.fixed_bytes = 0;
                    node.fixed_until = None;
                }
                node.fixed_until = node.fixed_until.map(|r| index[r as usize]);
                let map = |v: &u32| {
                    let t = tuple_of[*v as usize];
                    if t != u32::MAX && (t as usize) < a {
                        t
                    } else {
                        index[*v as usize]
                    }
                };
                node.inputs = node.inputs.iter().map(map).collect();
                node.step_reads = node.step_reads.iter().map(map).collect();
                aug.push(node);
            }
            None => {
                let m = &members[a];
                let bytes = m.iter().map(|&v| nodes[v as usize].bytes).sum();
                let inputs: Vec<u32> = m.iter().map(|&v| index[v as usize]).collect();
                aug.push(Node::new("tuple", bytes, 0.0).inputs(inputs));
            }
        }
    }
    // The steps by block, the last block first, each tuple first in its block, the real
    // order within a block: the reading steps keep their order (the cuts were checked on
    // them), and every consumer still steps before its producers (edges never go from a
    // later block to an earlier one).
    let mut stage = vec![0u32; n];
    let mut k = 0u32;
    let mut cut_iter = cuts.iter().peekable();
    for (u, slot) in stage.iter_mut().enumerate() {
        *slot = k;
        if cut_iter.peek().is_some_and(|(c, _)| *c as usize == u) {
            cut_iter.next();
            k += 1;
        }
    }
    let mut by_stage: Vec<u32> = view.step_order().to_vec();
    by_stage.sort_by_key(|&s| std::cmp::Reverse(stage[s as usize]));
    let tuple_at: Vec<u32> = (0..real.len() as u32)
        .filter(|&a| real[a as usize].is_none())
        .collect();
    let mut aug_order: Vec<u32> = Vec::with_capacity(real.len());
    let mut current = u32::MAX;
    for &s in &by_stage {
        let k = stage[s as usize];
        if k != current {
            current = k;
            if let Some(&t) = tuple_at.get(k as usize) {
                aug_order.push(t);
            }
        }
        aug_order.push(index[s as usize]);
    }
    // A releaser the block order runs before its node holds the constants for the pass.
    let mut aug_position = vec![0u32; aug.len()];
    for (p, &a) in aug_order.iter().enumerate() {
        aug_position[a as usize] = p as u32;
    }
    for (a, node) in aug.iter_mut().enumerate() {
        if node
            .fixed_until
            .is_some_and(|r| aug_position[r as usize] <= aug_position[a])
        {
            moved_fixed += node.fixed_bytes;
            node.fixed_bytes = 0;
            node.fixed_until = None;
        }
    }
    let augmented = GraphView::with_step_order(aug, aug_order).ok()?;
    rotor::stages_of(&augmented, planner)?;
    Some(Tupled {
        view: augmented,
        real,
        members,
        moved,
        unneeded,
        moved_fixed,
        real_order: view.step_order().to_vec(),
        index,
    })
}

impl Tupled {
    /// Whether no schedule needs real node `u` (NOTE \[unneeded-members\]).
    fn is_unneeded(&self, u: u32) -> bool {
        self.unneeded.get(u as usize).copied().unwrap_or(false)
    }

    /// The real values augmented node `a` stands for: itself, or a tuple's members (`one`
    /// holds a real node's index, so that no action allocates).
    fn values<'s>(&'s self, a: usize, one: &'s mut [u32; 1]) -> &'s [u32] {
        match self.real[a] {
            Some(u) => {
                one[0] = u;
                one
            }
            None => &self.members[a],
        }
    }

    /// [`rotor::resume`] on the augmented view (NOTE \[tuple-cuts\]): from a forward pass
    /// that kept `held` (real indices), under `budget`; the schedule translated and checked
    /// on the real `view`, with its replay cost.
    ///
    /// It runs in the step it plans for (NOTE \[planner-memory\] in `rotor/solve.rs`): the
    /// augmented view goes before the schedule is translated, and the augmented schedule is
    /// not simulated (the translation is).
    pub(crate) fn resume(
        mut self,
        view: &GraphView,
        held: &[u32],
        budget: u64,
        planner: Planner,
    ) -> Option<(Schedule, f64)> {
        let room = budget.checked_sub(self.moved_fixed)?;
        let held: Vec<u32> = held.iter().map(|&h| self.index[h as usize]).collect();
        let schedule = rotor::resume_schedule(&self.view, &held, room, planner)?;
        self.view = GraphView::default();
        let schedule = self.translated(view.len(), schedule);
        let cost = super::simulate(view, &schedule, budget)
            .ok()?
            .recompute_cost;
        Some((schedule, cost))
    }

    /// `schedule` (for the augmented view) translated for the real view (NOTE
    /// \[tuple-cuts\]).
    ///
    /// The augmented schedule goes before the translation's keeps are merged in: the
    /// first step under a budget translates in the step it plans for (NOTE
    /// \[planner-memory\] in `rotor/solve.rs`).
    pub(crate) fn translated(&self, real_len: usize, schedule: Schedule) -> Schedule {
        let mut holds = vec![0u32; real_len];
        let mut was_held = vec![false; real_len];
        // Where a value was dropped in the forward pass, and the drops a later keep cancels.
        let mut freed_at: Vec<Option<usize>> = vec![None; real_len];
        let mut cancelled: Vec<usize> = Vec::new();
        let mut forward = true;
        let mut out: Vec<Action> = Vec::with_capacity(schedule.len());
        // Where each real value's forward computation sits in `out`, and the keeps to
        // insert after a position (members kept from their computation).
        let mut computed_at = vec![usize::MAX; real_len];
        let mut keep_after: Vec<(usize, Action)> = Vec::new();
        let mut one = [0u32];
        let mut next_step = 0usize; // the next position of the real step order
        // A value whose step ran is needed by nothing: dropped right after its step (where
        // the engine's op for it is gone), however long the plan holds it or its tuple.
        let mut gone = vec![false; real_len];
        for &action in schedule.actions() {
            let a = action.node() as usize;
            match (action, self.real[a]) {
                (Action::Compute(_), Some(u)) => {
                    computed_at[u as usize] = out.len();
                    out.push(Action::Compute(u));
                }
                (Action::Compute(_), None) => {}
                (Action::Keep(_), _) => {
                    for &u in self.values(a, &mut one) {
                        let held = &mut holds[u as usize];
                        *held += 1;
                        if *held > 1 {
                            continue;
                        }
                        // Kept from its computation, the one place a keep is always valid
                        // (the plan may keep it after a tuple that reads it), unless it was
                        // held and dropped before.
                        if was_held[u as usize] {
                            // Dropped earlier in the forward pass: held through instead.
                            match freed_at[u as usize] {
                                Some(at) => cancelled.push(at),
                                None => out.push(Action::Keep(u)),
                            }
                        } else {
                            keep_after.push((computed_at[u as usize], Action::Keep(u)));
                        }
                        was_held[u as usize] = true;
                    }
                }
                (Action::Replay(_), Some(u)) if self.is_unneeded(u) => forward = false,
                (Action::Replay(_), Some(u)) => {
                    forward = false;
                    holds[u as usize] += 1;
                    if holds[u as usize] == 1 {
                        out.push(Action::Replay(u));
                    }
                }
                (Action::Replay(_), None) => {
                    forward = false;
                    for &m in &self.members[a] {
                        if !gone[m as usize] {
                            holds[m as usize] += 1;
                        }
                    }
                }
                (Action::Free(_), _) => {
                    for &u in self.values(a, &mut one) {
                        // A replay of a value nothing needs was left out: so is its free.
                        if gone[u as usize] || (holds[u as usize] == 0 && self.is_unneeded(u)) {
                            continue;
                        }
                        holds[u as usize] = holds[u as usize].saturating_sub(1);
                        if holds[u as usize] == 0 {
                            freed_at[u as usize] = forward.then_some(out.len());
                            out.push(Action::Free(u));
                        }
                    }
                }
                (Action::Step(_), Some(u)) if self.moved[u as usize] => forward = false,
                (Action::Step(_), Some(u)) => {
                    forward = false;
                    // The moved steps Burn's order runs before this one run here.
                    while let Some(&s) = self.real_order.get(next_step) {
                        next_step += 1;
                        if s == u {
                            break;
                        }
                        if self.moved[s as usize] {
                            step_then_drop(&mut out, &mut holds, &mut gone, s);
                        }
                    }
                    step_then_drop(&mut out, &mut holds, &mut gone, u);
                }
                (Action::Step(_), None) => forward = false,
            }
        }
        for &s in &self.real_order[next_step.min(self.real_order.len())..] {
            if self.moved[s as usize] {
                step_then_drop(&mut out, &mut holds, &mut gone, s);
            }
        }
        drop(schedule);
        cancelled.sort_unstable();
        Schedule::new(with_inserted(&out, keep_after, &cancelled))
    }
}

/// NOTE [unneeded-members]: a value no backward step reads and no needed value is rebuilt
/// from (NOTE \[need\] in `analysis.rs`) is never held by a schedule that does not choose
/// to. Burn's `Gru` with a loss on its last output writes every `h` into a `[batch, seq,
/// hidden]` output with `slice_assign`, each the previous one with a step written in, and
/// the loss reads a slice of the last: gradients flow through that chain, but no step reads
/// its values. Counted as crossing every cut, the stacked output went into every tuple (32
/// times `h`'s bytes on 32 steps), no chain plan fitted below about 1.5x the smallest budget,
/// and the lean schedule ran there (136,440 replays a step on 32 steps).
///
/// The tuples are found on the *pruned* view, where such a value reads nothing: it crosses
/// no cut and no schedule of the augmented view needs it. A schedule that replays one anyway
/// (a stage rebuilt whole) has that replay and its free left out by the translation.
///
/// Returns the pruned view, `None` when no unneeded value reads anything, and which nodes
/// are unneeded (empty then: the translation leaves nothing out).
fn pruned(view: &GraphView) -> (Option<GraphView>, Vec<bool>) {
    match super::analysis::without_unneeded_inputs(view) {
        (Some(pruned), unneeded) => (Some(pruned), unneeded),
        (None, _) => (None, Vec::new()),
    }
}

/// Step `s`, then its value dropped where the plan still holds it: after its step a value is
/// needed by nothing, and the engine's op for it is gone (NOTE \[tuple-cuts\]).
fn step_then_drop(out: &mut Vec<Action>, holds: &mut [u32], gone: &mut [bool], s: u32) {
    out.push(Action::Step(s));
    gone[s as usize] = true;
    if std::mem::take(&mut holds[s as usize]) > 0 {
        out.push(Action::Free(s));
    }
}
