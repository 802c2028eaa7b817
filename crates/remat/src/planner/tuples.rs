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
//! steps one gate's input projection of every time step last), and a later node stepping
//! after an earlier one breaks every cut. The augmented view runs each step that reads
//! nothing right after its last consumer's; the translation puts it back where the real
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
    /// The real view's step order.
    real_order: Vec<u32>,
}

/// The augmented view of `view` (NOTE \[tuple-cuts\]), when `view` has no stages of its
/// own, at least [`MIN_TUPLES`] hand-overs of two to [`MAX_MEMBERS`] values, and the
/// augmented view has stages.
pub(crate) fn tupled(view: &GraphView) -> Option<Tupled> {
    let n = view.len();
    if n < 8 || rotor::stages_of(view).is_some() {
        return None;
    }
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
    // Steps that read nothing run where Burn's order puts them, often last (an LSTM's input
    // projections); in the augmented view each steps right after its last consumer, so
    // that they do not break the cuts, and their constants are charged for the whole pass.
    let moved: Vec<bool> = (0..n)
        .map(|w| nodes[w].step_reads.is_empty() && reach[w] as usize > w)
        .collect();
    let order = moved_order(view, &moved);
    let mut position = vec![0u32; n];
    for (p, &s) in order.iter().enumerate() {
        position[s as usize] = p as u32;
    }
    let mut later_last = vec![0u32; n + 1];
    for c in (0..n).rev() {
        later_last[c] = later_last[c + 1].max(position[c]);
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
                if moved[u as usize] {
                    moved_fixed += node.fixed_bytes;
                    node.fixed_bytes = 0;
                }
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
    // Each tuple steps right before the first of its members.
    let mut aug_order: Vec<u32> = Vec::with_capacity(real.len());
    let mut stepped = vec![false; real.len()];
    for &s in &order {
        let t = tuple_of[s as usize];
        if t != u32::MAX && !stepped[t as usize] {
            stepped[t as usize] = true;
            aug_order.push(t);
        }
        aug_order.push(index[s as usize]);
    }
    let augmented = GraphView::with_step_order(aug, aug_order).ok()?;
    rotor::stages_of(&augmented)?;
    Some(Tupled {
        view: augmented,
        real,
        members,
        moved,
        moved_fixed,
        real_order: view.step_order().to_vec(),
    })
}

/// The view's step order with each `moved` step right after the last of its consumers'
/// steps (a moved step's consumers first, in cascade); the others keep their order.
fn moved_order(view: &GraphView, moved: &[bool]) -> Vec<u32> {
    let n = view.len();
    let nodes = view.nodes();
    // Consumers not yet stepped, per moved node (distinct edges counted once each).
    let mut waiting = vec![0u32; n];
    for (w, node) in nodes.iter().enumerate() {
        let mut seen: Vec<u32> = Vec::new();
        for &u in node.inputs.iter().chain(&node.step_reads) {
            if u as usize != w && moved[u as usize] && !seen.contains(&u) {
                seen.push(u);
                waiting[u as usize] += 1;
            }
        }
    }
    let mut order = Vec::with_capacity(n);
    let mut ready: Vec<u32> = Vec::new();
    let mut step = |s: u32, order: &mut Vec<u32>, ready: &mut Vec<u32>| {
        ready.push(s);
        while let Some(s) = ready.pop() {
            order.push(s);
            let node = &nodes[s as usize];
            let mut seen: Vec<u32> = Vec::new();
            for &u in node.inputs.iter().chain(&node.step_reads) {
                if u != s && moved[u as usize] && !seen.contains(&u) {
                    seen.push(u);
                    waiting[u as usize] -= 1;
                    if waiting[u as usize] == 0 {
                        ready.push(u);
                    }
                }
            }
        }
    };
    for &s in view.step_order() {
        if !moved[s as usize] {
            step(s, &mut order, &mut ready);
        }
    }
    order
}

impl Tupled {
    /// `schedule` (for the augmented view) translated for the real view (NOTE
    /// \[tuple-cuts\]).
    pub(crate) fn translated(&self, real_len: usize, schedule: &Schedule) -> Schedule {
        let mut holds = vec![0u32; real_len];
        let mut out: Vec<Action> = Vec::with_capacity(schedule.len());
        // Where each real value's forward computation sits in `out`, and the keeps to
        // insert after a position (members kept from their computation).
        let mut computed_at = vec![usize::MAX; real_len];
        let mut keep_after: Vec<(usize, u32)> = Vec::new();
        let mut next_step = 0usize; // the next position of the real step order
        for &action in schedule.actions() {
            let a = action.node() as usize;
            match (action, self.real[a]) {
                (Action::Compute(_), Some(u)) => {
                    computed_at[u as usize] = out.len();
                    out.push(Action::Compute(u));
                }
                (Action::Compute(_), None) => {}
                (Action::Keep(_), Some(u)) => {
                    holds[u as usize] += 1;
                    if holds[u as usize] == 1 {
                        out.push(Action::Keep(u));
                    }
                }
                (Action::Keep(_), None) => {
                    for &m in &self.members[a] {
                        holds[m as usize] += 1;
                        if holds[m as usize] == 1 {
                            keep_after.push((computed_at[m as usize], m));
                        }
                    }
                }
                (Action::Replay(_), Some(u)) => {
                    holds[u as usize] += 1;
                    if holds[u as usize] == 1 {
                        out.push(Action::Replay(u));
                    }
                }
                (Action::Replay(_), None) => {
                    for &m in &self.members[a] {
                        holds[m as usize] += 1;
                    }
                }
                (Action::Free(_), Some(u)) => {
                    holds[u as usize] = holds[u as usize].saturating_sub(1);
                    if holds[u as usize] == 0 {
                        out.push(Action::Free(u));
                    }
                }
                (Action::Free(_), None) => {
                    for &m in &self.members[a] {
                        holds[m as usize] = holds[m as usize].saturating_sub(1);
                        if holds[m as usize] == 0 {
                            out.push(Action::Free(m));
                        }
                    }
                }
                (Action::Step(_), Some(u)) if self.moved[u as usize] => {}
                (Action::Step(_), Some(u)) => {
                    // The moved steps Burn's order runs before this one run here.
                    while let Some(&s) = self.real_order.get(next_step) {
                        next_step += 1;
                        if s == u {
                            break;
                        }
                        if self.moved[s as usize] {
                            out.push(Action::Step(s));
                        }
                    }
                    out.push(Action::Step(u));
                }
                (Action::Step(_), None) => {}
            }
        }
        for &s in &self.real_order[next_step.min(self.real_order.len())..] {
            if self.moved[s as usize] {
                out.push(Action::Step(s));
            }
        }
        if keep_after.is_empty() {
            return Schedule::new(out);
        }
        keep_after.sort_unstable();
        let mut done = Vec::with_capacity(out.len() + keep_after.len());
        let mut next = keep_after.iter().peekable();
        for (k, &action) in out.iter().enumerate() {
            done.push(action);
            while let Some(&&(at, m)) = next.peek()
                && at == k
            {
                done.push(Action::Keep(m));
                next.next();
            }
        }
        Schedule::new(done)
    }
}
