//! Chain structure in any graph view: the values that cut a step into consecutive *stages*,
//! and what each stage costs and needs, for the chain planner (`rotor/`).
//!
//! NOTE [stages]: node `c` *cuts* a view when every edge that crosses from `0..=c` to the
//! nodes after it (a replay's input or a step's read) starts at `c`, every step of the later
//! nodes runs before every step of `0..=c`, and `c` itself may be kept and rebuilt (replayable,
//! no forced mark). Leaves, weights and constants are not nodes, so they never break a cut.
//! The cuts split the view into stages `[start, end]`: stage `k` reads nothing of the earlier
//! stages but value `end(k - 1)`, its *input* (a leaf for the first stage); its *boundary* is
//! its last value `end(k)`. A chain of blocks (an unrolled RNN, residual blocks, ODE steps,
//! `x = f(x); x = x / |x|`) has one or more stages per block, whatever happens inside a block
//! (fan-outs, several ops, a value read by a later op of the block).
//!
//! A stage is planned on its own *sub-view* (its nodes, the input a leaf), by the portfolio
//! planner (`plan.rs`, passed in as a [`Planner`]) at a few budgets. Each such *inner plan*
//! is a whole schedule in the forward-pass-is-free form (`Compute`); the chain planner also
//! runs it after the forward pass, where every value costs a replay (*rev form*): the
//! values the plan keeps at the end of its forward part, and what they are computed from,
//! are replayed in index order, each freed after its last use, then the plan's backward
//! part runs unchanged.
//!
//! Cost model: finding the cuts is O(n + e); each distinct stage (by structure) is planned at
//! most [`INNER_BUDGETS`] + 1 times.
//!
//! # Invariants
//! - A stage's inner plans pass [`simulate`] on its sub-view; the bytes reported for the rev
//!   form bound what it holds from above.
//! - Every node of a view with stages is rebuildable (else there are no stages).

use std::collections::HashMap;
use std::sync::Arc;

use super::simulate::for_each_distinct;
use super::view::rebuildable;
use super::{Action, Error, GraphView, Schedule, signature, simulate};

/// The planner a stage's inner plans come from: the portfolio ([`plan`](super::plan) and
/// [`smallest_budget`](super::smallest_budget)), which plans each stage of a chain with
/// itself. It comes in as a value, so that the chain's files (these, `rotor/`, `pinned.rs`,
/// `tuples.rs`), which the portfolio names, do not name it back.
#[derive(Clone, Copy)]
pub(crate) struct Planner {
    /// A schedule of a view within a budget.
    pub(crate) plan: fn(&GraphView, u64) -> Result<Schedule, Error>,
    /// The smallest budget `plan` meets on a view.
    pub(crate) smallest_budget: fn(&GraphView) -> u64,
}

/// The fewest stages a view planned as a chain has.
const MIN_STAGES: usize = 3;

/// A stage may hold a quarter of the view's ops, or this many.
const MAX_SMALL_STAGE: usize = 64;

/// How many budgets between a stage's smallest and keep-all the inner plans are made at.
const INNER_BUDGETS: usize = 4;

/// The stage ends (boundaries) of `view`, in order, when it has at least [`MIN_STAGES`]
/// stages, none longer than a quarter of the view (or [`MAX_SMALL_STAGE`]); see NOTE
/// \[stages\].
pub(crate) fn cuts(view: &GraphView) -> Option<Vec<u32>> {
    let n = view.len();
    if n < 2 {
        return None;
    }
    let nodes = view.nodes();
    if !nodes.iter().all(rebuildable) {
        return None;
    }
    // reach[u]: the last node reading u (itself when none).
    let mut reach: Vec<u32> = (0..n as u32).collect();
    for (w, node) in nodes.iter().enumerate() {
        for &u in node.inputs.iter().chain(&node.step_reads) {
            let r = &mut reach[u as usize];
            *r = (*r).max(w as u32);
        }
    }
    let mut position = vec![0u32; n];
    for (p, &s) in view.step_order().iter().enumerate() {
        position[s as usize] = p as u32;
    }
    // later_last[c]: the last step position of the nodes after c.
    let mut later_last = vec![0u32; n + 1];
    for c in (0..n).rev() {
        later_last[c] = later_last[c + 1].max(position[c]);
    }
    let mut ends = Vec::new();
    let mut reach_before = 0u32; // the largest reach of the nodes before c
    let mut first_step = u32::MAX; // the first step position of 0..=c
    for c in 0..n - 1 {
        first_step = first_step.min(position[c]);
        let edges_ok = c == 0 || reach_before <= c as u32;
        let steps_ok = later_last[c + 1] < first_step;
        if edges_ok && steps_ok && nodes[c].forced.is_none() {
            ends.push(c as u32);
        }
        reach_before = reach_before.max(reach[c]);
    }
    if ends.is_empty() {
        return None;
    }
    ends.push(n as u32 - 1);
    // A chain whose stages are few, or one of which holds most of the view, gains little
    // from the chain's plan and would pay for planning that stage several times.
    let mut longest = 0;
    let mut start = 0;
    for &end in &ends {
        longest = longest.max(end + 1 - start);
        start = end + 1;
    }
    (ends.len() >= MIN_STAGES && longest as usize <= (n / 4).max(MAX_SMALL_STAGE)).then_some(ends)
}

/// The nodes `start..=end` of `view` as a view of their own: node `start + i` is node `i`,
/// and reads of earlier nodes (the stage's input) are dropped (a leaf). `order` is the
/// view's step order restricted to the stage, in the stage's indices.
///
/// A node whose constants a later stage's step releases (`Node::fixed_until`) holds them
/// until the stage's last step here.
pub(crate) fn sub_view(view: &GraphView, start: u32, end: u32, order: Vec<u32>) -> GraphView {
    let local = |v: &u32| (*v >= start).then(|| v - start);
    let last_step = order.last().copied();
    let nodes = view.nodes()[start as usize..=end as usize]
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let mut node = node.clone();
            node.inputs = node.inputs.iter().filter_map(local).collect();
            node.step_reads = node.step_reads.iter().filter_map(local).collect();
            node.fixed_until = node.fixed_until.map(|u| {
                if u <= end {
                    u - start
                } else {
                    last_step.expect("remat internal error: a stage has steps")
                }
            });
            if node.fixed_until == Some(i as u32) {
                node.fixed_until = None;
            }
            node
        })
        .collect();
    GraphView::with_step_order(nodes, order)
        .expect("remat internal error: a stage of a valid view is a valid view")
}

/// The view's step order split by stage (stage `k` spans `starts[k]..next start`), each in
/// its stage's own indices: one pass over the order, not one per stage.
fn stage_orders(view: &GraphView, starts: &[u32]) -> Vec<Vec<u32>> {
    let mut stage_of = vec![0u32; view.len()];
    for (k, window) in starts.windows(2).enumerate() {
        stage_of[window[0] as usize..window[1] as usize].fill(k as u32);
    }
    if let Some(&last) = starts.last() {
        stage_of[last as usize..].fill(starts.len() as u32 - 1);
    }
    let mut orders = vec![Vec::new(); starts.len()];
    for &s in view.step_order() {
        let k = stage_of[s as usize] as usize;
        orders[k].push(s - starts[k]);
    }
    orders
}

/// One inner plan of a stage (see NOTE \[stages\]), in the stage's own indices.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) schedule: Schedule,
    /// Where its backward part starts (the first `Replay` or `Step`).
    pub(crate) split: usize,
    /// The values it holds when its forward part ends, ascending.
    pub(crate) held_at_end: Vec<u32>,
    /// Peak bytes in the forward-pass-is-free form, constants included, and its replays' cost.
    pub(crate) top_peak: u64,
    pub(crate) top_cost: f64,
    /// The same in the rev form: the stage's input held outside.
    pub(crate) rev_peak: u64,
    pub(crate) rev_cost: f64,
    /// The replays of the rev form's forward part (which rebuild what the plan keeps).
    pub(crate) rev_forward: Replays,
}

/// A straight replay through a stage from its input: the nodes it replays, ascending, the
/// values it frees after each (by position in that list, each after its last use), its cost
/// and its peak bytes (without the input and constants).
#[derive(Debug)]
pub(crate) struct Replays {
    pub(crate) replays: Vec<u32>,
    pub(crate) frees: Vec<Vec<u32>>,
    pub(crate) cost: f64,
    pub(crate) peak: u64,
}

/// What the chain planner knows of one stage shape (shared by the stages with the same
/// structure and costs).
#[derive(Debug)]
pub(crate) struct Shape {
    pub(crate) len: u32,
    /// Bytes of the boundary (the last value).
    pub(crate) boundary: u64,
    /// Constants held on the stage's edges.
    pub(crate) fixed: u64,
    /// A straight replay from the input to the boundary, and its peak with the input
    /// handed over to its last reader (a replay that runs through from the stage before).
    pub(crate) sweep: Replays,
    pub(crate) sweep_through_peak: u64,
    /// The last position of `sweep.replays` whose replay reads the stage's input (`None`:
    /// none does).
    pub(crate) input_last: Option<usize>,
    /// Whether a step of the stage reads a value (its input or one of its own). A stage
    /// whose steps read nothing needs nothing held to step (NOTE \[rotor-skip\] in
    /// `rotor/level.rs`).
    pub(crate) steps_read: bool,
    /// For each inner plan: whether the stage's input is of no more use once the plan's
    /// forward part ran (or its tape was replayed): no step of the stage reads the input
    /// and the plan's backward part replays nothing that reads it (NOTE \[rotor-owned\] in
    /// `rotor/level.rs`).
    pub(crate) input_done: Vec<bool>,
    /// For each inner plan: whether it holds the boundary for its own backward part (else
    /// the stages after it may free the boundary once they have read it).
    pub(crate) keeps_boundary: Vec<bool>,
    /// The inner plans, in no order (the first keeps all): the chain planner picks the
    /// cheapest that fits.
    pub(crate) inners: Vec<Inner>,
    /// For each inner plan, its forward part in the rev form, also keeping the boundary:
    /// what the chain planner's *tape* option replays before it goes on to the next stages
    /// (in the forward pass, the inner plan's own forward part keeps it).
    pub(crate) tapes: Vec<Tape>,
}

/// The rev form of an inner plan's forward part, the boundary kept too.
#[derive(Debug)]
pub(crate) struct Tape {
    pub(crate) forward: Replays,
    /// Bytes held at the end.
    pub(crate) bytes: u64,
    /// The peak of `forward` with the stage's input counted and handed over to its last
    /// reader, and that reader's position in `forward.replays` (`None`: none reads it): a
    /// sub-chain that owns its input frees it there (NOTE \[rotor-owned\] in `rotor/level.rs`).
    pub(crate) through_peak: u64,
    pub(crate) input_last: Option<usize>,
}

/// The peak bytes of `sweep` when the stage's input (`input` bytes, read by the replays of
/// the nodes marked in `reads_input`) is held when it starts and freed as the last replay
/// that reads it takes it (at once if none does): a straight replay through several stages
/// hands each boundary over to the next stage this way.
fn peak_with_input(sub: &GraphView, sweep: &Replays, input: u64, reads_input: &[bool]) -> u64 {
    let nodes = sub.nodes();
    let (replays, frees) = (&sweep.replays, &sweep.frees);
    let last = replays.iter().rposition(|&i| reads_input[i as usize]);
    let mut held = if last.is_some() { input } else { 0 };
    let mut peak = held;
    for (k, &i) in replays.iter().enumerate() {
        for &u in &frees[k] {
            if u != i {
                held -= nodes[u as usize].bytes;
            }
        }
        if last == Some(k) {
            held -= input;
        }
        held += nodes[i as usize].bytes;
        peak = peak.max(held);
        if frees[k].contains(&i) {
            held -= nodes[i as usize].bytes;
        }
    }
    peak
}

/// The replays that produce `wanted` (and what they read) in index order, each value freed
/// after its last use unless it is wanted.
fn rev_forward(sub: &GraphView, wanted: &[bool]) -> Replays {
    let n = sub.len();
    let nodes = sub.nodes();
    let mut needed = wanted.to_vec();
    for i in (0..n).rev() {
        if needed[i] {
            for &u in &nodes[i].inputs {
                needed[u as usize] = true;
            }
        }
    }
    let replays: Vec<u32> = (0..n as u32).filter(|&i| needed[i as usize]).collect();
    let mut last_use = vec![usize::MAX; n];
    for (k, &i) in replays.iter().enumerate() {
        for_each_distinct(&nodes[i as usize].inputs, |u| last_use[u as usize] = k);
    }
    let mut frees: Vec<Vec<u32>> = vec![Vec::new(); replays.len()];
    let (mut held, mut peak, mut cost) = (0u64, 0u64, 0.0);
    for (k, &i) in replays.iter().enumerate() {
        let node = &nodes[i as usize];
        cost += node.cost;
        for_each_distinct(&node.inputs, |u| {
            if last_use[u as usize] == k && !wanted[u as usize] {
                frees[k].push(u);
                held -= nodes[u as usize].bytes;
            }
        });
        held += node.bytes;
        peak = peak.max(held);
        if last_use[i as usize] == usize::MAX && !wanted[i as usize] {
            // Read by nothing replayed later: only wanted for what it reads (never here).
            frees[k].push(i);
            held -= node.bytes;
        }
    }
    Replays {
        replays,
        frees,
        cost,
        peak,
    }
}

impl Inner {
    /// The facts of `schedule`, a whole-step plan of `sub` (`None` when it is not valid).
    pub(crate) fn new(sub: &GraphView, schedule: Schedule) -> Option<Self> {
        let outcome = simulate(sub, &schedule, u64::MAX).ok()?;
        let actions = schedule.actions();
        let split = actions
            .iter()
            .position(|a| matches!(a, Action::Replay(_) | Action::Step(_)))
            .unwrap_or(actions.len());
        let mut held = vec![false; sub.len()];
        for a in &actions[..split] {
            match *a {
                Action::Keep(v) => held[v as usize] = true,
                Action::Free(v) => held[v as usize] = false,
                _ => {}
            }
        }
        let held_at_end: Vec<u32> = (0..sub.len() as u32)
            .filter(|&v| held[v as usize])
            .collect();
        let rev_forward = rev_forward(sub, &held);
        let fixed: u64 = sub.nodes().iter().map(|n| n.fixed_bytes).sum();
        Some(Self {
            split,
            held_at_end,
            top_peak: outcome.peak_bytes,
            top_cost: outcome.recompute_cost,
            rev_peak: outcome.peak_bytes.max(rev_forward.peak + fixed),
            rev_cost: outcome.recompute_cost + rev_forward.cost,
            rev_forward,
            schedule,
        })
    }
}

impl Shape {
    /// The facts of the stage `sub` (see NOTE \[stages\]), its inner plans by `planner`.
    fn new(
        sub: &GraphView,
        reads_input: &[bool],
        input_bytes: u64,
        steps_read: (bool, bool),
        planner: Planner,
    ) -> Self {
        let (steps_read, steps_read_input) = steps_read;
        let n = sub.len();
        let nodes = sub.nodes();
        let mut wanted = vec![false; n];
        wanted[n - 1] = true;
        let sweep = rev_forward(sub, &wanted);
        let sweep_through_peak = peak_with_input(sub, &sweep, input_bytes, reads_input);
        let input_last = sweep.replays.iter().rposition(|&i| reads_input[i as usize]);
        let keep_all =
            (planner.plan)(sub, u64::MAX).expect("remat internal error: keep-all always fits");
        let mut inners = vec![Inner::new(sub, keep_all).expect("a plan passes simulate")];
        let all_bytes = inners[0].top_peak;
        let min = (planner.smallest_budget)(sub);
        let mut budgets: Vec<u64> = (0..INNER_BUDGETS)
            .map(|k| min + (all_bytes.saturating_sub(min)) * k as u64 / INNER_BUDGETS as u64)
            .collect();
        budgets.dedup();
        for budget in budgets {
            if budget >= all_bytes {
                continue;
            }
            if let Ok(schedule) = (planner.plan)(sub, budget)
                && let Some(inner) = Inner::new(sub, schedule)
            {
                inners.push(inner);
            }
        }
        let tapes = inners
            .iter()
            .map(|inner| {
                let mut wanted = vec![false; n];
                for &v in &inner.held_at_end {
                    wanted[v as usize] = true;
                }
                wanted[n - 1] = true;
                let forward = rev_forward(sub, &wanted);
                Tape {
                    through_peak: peak_with_input(sub, &forward, input_bytes, reads_input),
                    input_last: forward
                        .replays
                        .iter()
                        .rposition(|&i| reads_input[i as usize]),
                    bytes: (0..n).filter(|&v| wanted[v]).map(|v| nodes[v].bytes).sum(),
                    forward,
                }
            })
            .collect();
        let input_done = inners
            .iter()
            .map(|inner| {
                !steps_read_input
                    && !inner.schedule.actions()[inner.split..]
                        .iter()
                        .any(|a| matches!(*a, Action::Replay(i) if reads_input[i as usize]))
            })
            .collect();
        let keeps_boundary = inners
            .iter()
            .map(|inner| inner.held_at_end.binary_search(&(n as u32 - 1)).is_ok())
            .collect();
        Self {
            len: n as u32,
            boundary: nodes[n - 1].bytes,
            fixed: nodes.iter().map(|n| n.fixed_bytes).sum(),
            sweep,
            sweep_through_peak,
            input_last,
            steps_read,
            input_done,
            keeps_boundary,
            inners,
            tapes,
        }
    }
}

/// The stages of a view, with their shapes.
pub(crate) struct Stages {
    /// Stage `k` is nodes `start[k]..=end[k]`.
    pub(crate) start: Vec<u32>,
    pub(crate) end: Vec<u32>,
    /// The shape of each stage (shared by stages of the same structure and costs).
    pub(crate) shape: Vec<Arc<Shape>>,
    /// A key per distinct shape: equal keys, equal shapes.
    pub(crate) key: Vec<u64>,
}

impl Stages {
    /// The stages of `view`, if it has at least two (NOTE \[stages\]), their inner plans by
    /// `planner`.
    pub(crate) fn of(view: &GraphView, planner: Planner) -> Option<Self> {
        let ends = cuts(view)?;
        type Id = (u64, Vec<u64>, Vec<bool>, u64, (bool, bool));
        let mut shapes: HashMap<Id, (u64, Arc<Shape>)> = HashMap::new();
        let mut stages = Self {
            start: Vec::with_capacity(ends.len()),
            end: Vec::with_capacity(ends.len()),
            shape: Vec::with_capacity(ends.len()),
            key: Vec::with_capacity(ends.len()),
        };
        let starts: Vec<u32> = std::iter::once(0)
            .chain(ends.iter().map(|&end| end + 1))
            .take(ends.len())
            .collect();
        let mut orders = stage_orders(view, &starts).into_iter();
        let mut start = 0;
        for &end in &ends {
            let order = orders.next().expect("one order per stage");
            let sub = sub_view(view, start, end, order);
            let costs: Vec<u64> = sub.nodes().iter().map(|n| n.cost.to_bits()).collect();
            // Which nodes a replay of which reads the stage's input (the sub-view drops it).
            let reads_input: Vec<bool> = (start..=end)
                .map(|i| start > 0 && view.node(i).inputs.contains(&(start - 1)))
                .collect();
            let input_bytes = if start > 0 {
                view.node(start - 1).bytes
            } else {
                0
            };
            // The sub-view drops the steps' reads of the input too.
            let steps_read = (
                (start..=end).any(|i| !view.node(i).step_reads.is_empty()),
                start > 0 && (start..=end).any(|i| view.node(i).step_reads.contains(&(start - 1))),
            );
            let id = (signature(&sub), costs, reads_input, input_bytes, steps_read);
            let next = shapes.len() as u64;
            let (key, shape) = shapes
                .entry(id)
                .or_insert_with_key(|id| {
                    (next, Arc::new(Shape::new(&sub, &id.2, id.3, id.4, planner)))
                })
                .clone();
            stages.start.push(start);
            stages.end.push(end);
            stages.shape.push(shape);
            stages.key.push(key);
            start = end + 1;
        }
        Some(stages)
    }

    /// The number of stages.
    pub(crate) fn len(&self) -> usize {
        self.start.len()
    }
}
