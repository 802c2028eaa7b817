//! A lower bound on the recompute any schedule needs under a budget (NOTE [recompute-bound]
//! and NOTE [one-value-bound]).
//!
//! NOTE [recompute-bound]: when the forward pass ends, every value some backward step reads
//! is either held or will be replayed at least once; a value replayed needs each of its
//! inputs held then or replayed too. So the recompute of any schedule is at least
//!
//! ```text
//! min  sum(cost[v] for v in P)
//! over H, P with: every step read in H or P; every input of a v in P in H or P;
//!                 P only replayable values not forced to Keep; H no value forced to Recompute;
//!                 bytes(H) + all constants <= budget
//! ```
//!
//! (`H`: held when the forward pass ends; `P`: replayed at least once.) That problem is a
//! closure problem with one knapsack constraint. Its Lagrangian relaxation, for a price
//! `lambda >= 0` per held byte, is a maximum-weight closure, solved exactly by a minimum cut;
//! every `lambda` gives a valid bound (weak duality) and the bound is the best over
//! `lambda` (the dual function is concave: a golden-section search finds its top).
//!
//! The bound ignores what happens after the forward pass (a value replayed twice, rebuilt
//! values competing for room during backward), so it is reached on graphs whose budget binds
//! only when the forward pass ends, and is loose on long chains under a small budget (where
//! Revolve's nested sweeps are optimal).
//!
//! Cost model: each evaluation is one max-flow (Dinic's algorithm) on a network of at most
//! `2n + 2` vertices and `O(n + edges)` arcs; the search makes a fixed number of them.
//!
//! # Invariants
//! - The returned value never exceeds the recompute of a schedule that `simulate` accepts
//!   under the same budget (the property tests check it against the exact solver and every
//!   generator).
//! - No recursion: the flow's depth-first search uses an explicit stack.

use super::simulate::for_each_distinct;
use super::view::{Forced, GraphView};

/// Golden-section steps over `log(lambda)`: the bracket shrinks by 0.618 each step.
const SEARCH_STEPS: usize = 60;

/// A lower bound on the recompute cost (ns) of any schedule for `view` that holds at most
/// `budget_bytes`: the better of NOTE \[recompute-bound\] and NOTE \[one-value-bound\].
/// `f64::INFINITY` when the bound proves that no schedule fits (the constants alone pass the
/// budget, a step's reads and the constants held with them do, or the step reads cannot be
/// covered within it).
pub fn recompute_lower_bound(view: &GraphView, budget_bytes: u64) -> f64 {
    forward_end_bound(view, budget_bytes).max(one_value_bound(view, budget_bytes))
}

/// NOTE \[recompute-bound\]'s bound alone.
fn forward_end_bound(view: &GraphView, budget_bytes: u64) -> f64 {
    let fixed: u64 = view.nodes().iter().map(|n| n.fixed_bytes).sum();
    let Some(room) = budget_bytes.checked_sub(fixed) else {
        return f64::INFINITY;
    };
    let closure = Closure::new(view);
    let room = room as f64;
    // The dual at lambda: the min of cost(P) + lambda * bytes(H), minus lambda * room.
    let dual = |lambda: f64| closure.min_objective(lambda) - lambda * room;
    let Some((mut a, mut b)) = log_prices(view) else {
        // No cost or no byte anywhere: holding is free or replays are.
        return dual(0.0).max(0.0);
    };
    // Beyond the top price, holding anything costs more than any replay: the dual is then
    // linear in lambda, with slope (fewest bytes the reads need held) - room. If it still
    // grows there, the reads cannot fit.
    let top = dual(b.exp());
    let above = dual((b + 10.0).exp());
    if above > top * (1.0 + 1e-9) + 1.0 {
        return f64::INFINITY;
    }
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = b - ratio * (b - a);
    let mut d = a + ratio * (b - a);
    let (mut fc, mut fd) = (dual(c.exp()), dual(d.exp()));
    for _ in 0..SEARCH_STEPS {
        if fc >= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - ratio * (b - a);
            fc = dual(c.exp());
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + ratio * (b - a);
            fd = dual(d.exp());
        }
    }
    let best = [fc, fd, top].into_iter().fold(0.0, f64::max);
    // Below a millionth of a nanosecond is rounding in the flow.
    if best < 1e-6 { 0.0 } else { best }
}

// NOTE [one-value-bound]: NOTE [recompute-bound] counts a value's replays once; under a
// budget that holds little more than the values a backward step reads, a value is rebuilt
// for every step that reads it. At a step that reads the values `W`, the held bytes are at
// least `bytes(W)` plus the constants still held after the step (more than the budget: no
// schedule fits); the room left, `e`, is all any other value held then can take. The next
// step that reads values reads `V`. A value of `V - W` with more than `e` bytes was not held
// at the earlier step, so it is replayed between the two steps, and so is each input of a
// value replayed there that is not in `W` and has more than `e` bytes (it was not held
// either): that set `R` is replayed at least once between the two steps, which costs at
// least `cost(R)`. The intervals between consecutive reading steps are disjoint, so the sum
// over them bounds any schedule's recompute; where `R` holds a value that cannot be
// replayed (or is forced to Keep), no schedule fits. With room for one activation (the
// benchmark's MLP at 5% of its keep-all bytes) it is the optimum: every read rebuilt from
// the input, the sum of the reads' depths. A step that leaves room for the values its
// successor reads adds nothing, so it is the better of the two bounds only near the
// smallest budget.
//
// Cost model: one walk over ancestors per pair of reading steps, stopped after
// [`ONE_VALUE_VISITS`] visits in all (the sum so far is still a bound).

/// The most node visits NOTE \[one-value-bound\] makes on one view.
const ONE_VALUE_VISITS: u64 = 5_000_000;

/// NOTE \[one-value-bound\]'s bound: `0.0` where no step's room binds so,
/// `f64::INFINITY` where it proves that no schedule fits.
fn one_value_bound(view: &GraphView, budget_bytes: u64) -> f64 {
    let nodes = view.nodes();
    let n = nodes.len();
    let order = view.step_order();
    // Constants still held after the step at position `p`: `later[p + 1]`.
    let later = view.constants_from();
    // `mark[v] == stamp`: in the current `W`; `seen[v] == stamp`: walked for the current `R`.
    let (mut mark, mut seen) = (vec![0u32; n], vec![0u32; n]);
    let mut stack: Vec<u32> = Vec::new();
    // The previous reading step: its reads, and the room its held bytes left.
    let mut previous: Option<(&[u32], u64)> = None;
    let (mut total, mut visits) = (0.0, 0u64);
    let mut stamp = 0u32;
    for (p, &s) in order.iter().enumerate() {
        let reads = &nodes[s as usize].step_reads;
        if reads.is_empty() {
            continue;
        }
        let mut read_bytes = 0u64;
        for_each_distinct(reads, |v| read_bytes += nodes[v as usize].bytes);
        let Some(room) = budget_bytes.checked_sub(read_bytes.saturating_add(later[p + 1])) else {
            return f64::INFINITY;
        };
        if let Some((held, room)) = previous {
            // Values of more than `room` bytes not read there were not held there.
            stamp += 1;
            for &v in held {
                mark[v as usize] = stamp;
            }
            let big = |v: u32| nodes[v as usize].bytes > room;
            for_each_distinct(reads, |v| {
                if mark[v as usize] != stamp && big(v) {
                    stack.push(v);
                }
            });
            while let Some(v) = stack.pop() {
                let (vi, node) = (v as usize, &nodes[v as usize]);
                if seen[vi] == stamp {
                    continue;
                }
                seen[vi] = stamp;
                visits += 1;
                if !node.replayable || node.forced == Some(Forced::Keep) {
                    return f64::INFINITY;
                }
                total += node.cost;
                for &u in &node.inputs {
                    if mark[u as usize] != stamp && seen[u as usize] != stamp && big(u) {
                        stack.push(u);
                    }
                }
            }
            if visits > ONE_VALUE_VISITS {
                break;
            }
        }
        previous = Some((reads, room));
    }
    total
}

/// The values the bound's relaxation holds when the forward pass ends, fitted to
/// `budget_bytes` (with the constants): a guide for the planner's forward pass
/// (`Hints::keep`), or `None` when no price makes it fit; and the work it took (arcs the
/// flows examined).
///
/// The relaxation's solutions jump at a few prices: on a model of identical layers, one price
/// holds a value kind in every layer and the next in none. Between the last price that
/// overshoots the budget and the first that fits, the two solutions differ in separate
/// pieces (connected through the graph's inputs; one per layer there); starting from the one
/// that fits, pieces of the other are taken in, latest first (backward meets them first),
/// while they fit.
pub(crate) fn held_at_forward_end(view: &GraphView, budget_bytes: u64) -> (Option<Vec<bool>>, u64) {
    let closure = Closure::new(view);
    let held = fit_held(&closure, budget_bytes);
    (held, closure.work.get())
}

/// [`held_at_forward_end`] on `closure`.
fn fit_held(closure: &Closure<'_>, budget_bytes: u64) -> Option<Vec<bool>> {
    let view = closure.view;
    let fixed: u64 = view.nodes().iter().map(|n| n.fixed_bytes).sum();
    let room = budget_bytes.checked_sub(fixed)?;
    let nodes = view.nodes();
    let bytes = |state: &[State]| -> u64 {
        state
            .iter()
            .zip(nodes)
            .filter(|(s, _)| **s == State::Held)
            .map(|(_, n)| n.bytes)
            .sum()
    };
    // Held bytes fall as the price rises: bisect over log(price) for the smallest that fits.
    let (mut a, mut b) = log_prices(view)?;
    let (_, mut fits) = closure.solve(b.exp());
    if bytes(&fits) > room {
        return None;
    }
    let (_, mut over) = closure.solve(a.exp());
    if bytes(&over) <= room {
        return Some(over.iter().map(|s| *s == State::Held).collect());
    }
    for _ in 0..HELD_SEARCH_STEPS {
        let mid = 0.5 * (a + b);
        let (_, state) = closure.solve(mid.exp());
        if bytes(&state) <= room {
            b = mid;
            fits = state;
        } else {
            a = mid;
            over = state;
        }
    }
    // The pieces where the two differ: components of the changed values over input edges.
    let n = nodes.len();
    let changed = |v: usize| fits[v] != over[v];
    let mut parent: Vec<u32> = (0..n as u32).collect();
    fn find(parent: &mut [u32], mut v: u32) -> u32 {
        while parent[v as usize] != v {
            parent[v as usize] = parent[parent[v as usize] as usize];
            v = parent[v as usize];
        }
        v
    }
    for (v, node) in nodes.iter().enumerate() {
        if !changed(v) {
            continue;
        }
        for &u in &node.inputs {
            if changed(u as usize) {
                let (x, y) = (find(&mut parent, v as u32), find(&mut parent, u));
                if x != y {
                    parent[x.max(y) as usize] = x.min(y);
                }
            }
        }
    }
    // Per piece (by its root): its latest value and the bytes it adds when taken in.
    let mut latest = vec![0u32; n];
    let mut extra = vec![0i64; n];
    let mut roots: Vec<u32> = Vec::new();
    for v in (0..n).filter(|&v| changed(v)) {
        let r = find(&mut parent, v as u32) as usize;
        if r == v {
            roots.push(r as u32);
        }
        latest[r] = latest[r].max(v as u32);
        let held = |s: State| {
            if s == State::Held {
                nodes[v].bytes as i64
            } else {
                0
            }
        };
        extra[r] += held(over[v]) - held(fits[v]);
    }
    roots.sort_by_key(|&r| core::cmp::Reverse(latest[r as usize]));
    let mut left = (room - bytes(&fits)) as i64;
    let mut take = vec![false; n];
    for r in roots {
        if extra[r as usize] <= left {
            left -= extra[r as usize];
            take[r as usize] = true;
        }
    }
    Some(
        (0..n)
            .map(|v| {
                let state = if changed(v) && take[find(&mut parent, v as u32) as usize] {
                    over[v]
                } else {
                    fits[v]
                };
                state == State::Held
            })
            .collect(),
    )
}

/// The range of `log(lambda)` worth trying: prices per held byte spanning the graph's cost
/// per byte, with margins. `None` when no op has both a cost and bytes.
fn log_prices(view: &GraphView) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for node in view.nodes() {
        if node.bytes > 0 && node.cost > 0.0 {
            let price = node.cost / node.bytes as f64;
            lo = lo.min(price);
            hi = hi.max(price);
        }
    }
    lo.is_finite()
        .then(|| ((lo / 1e3).ln(), (hi * 1e3 * view.len().max(1) as f64).ln()))
}

/// What the relaxation does with a value when the forward pass ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Neither held nor needed.
    Absent,
    /// Held.
    Held,
    /// Replayed (its inputs are available).
    Replayed,
}

/// Bisection steps of [`held_at_forward_end`].
const HELD_SEARCH_STEPS: usize = 16;

/// The closure problem of NOTE \[recompute-bound\] for one view: per node, an "available"
/// vertex (held, or replayed when forced to Recompute) and, when the node may be replayed,
/// a "replayed" vertex.
struct Closure<'v> {
    view: &'v GraphView,
    /// Whether some backward step reads the value.
    read: Vec<bool>,
    /// Arcs the flows examined so far.
    work: core::cell::Cell<u64>,
}

impl<'v> Closure<'v> {
    fn new(view: &'v GraphView) -> Self {
        let mut read = vec![false; view.len()];
        for node in view.nodes() {
            for &v in &node.step_reads {
                read[v as usize] = true;
            }
        }
        Self {
            view,
            read,
            work: core::cell::Cell::new(0),
        }
    }

    /// `min cost(P) + lambda * bytes(H)` over the closure's feasible sets: a max-weight
    /// closure, solved as a min cut.
    fn min_objective(&self, lambda: f64) -> f64 {
        self.solve(lambda).0
    }

    /// [`Self::min_objective`] and the sets that attain it: what becomes of each value
    /// when the forward pass ends (from the source side of the minimum cut).
    fn solve(&self, lambda: f64) -> (f64, Vec<State>) {
        let nodes = self.view.nodes();
        let n = nodes.len();
        // Vertices: source 0, sink 1, available(v) = 2 + v, replayed(v) = 2 + n + v.
        let (source, sink) = (0usize, 1usize);
        let avail = |v: usize| 2 + v;
        let replayed = |v: usize| 2 + n + v;
        let mut flow = Flow::new(2 + 2 * n);
        // Weights of the closure (maximised): `positive` sums the positive ones. A read value
        // must be in the closure: an arc of infinite capacity from the source.
        let mut positive = 0.0;
        let add_weight = |flow: &mut Flow, vertex: usize, w: f64, positive: &mut f64| {
            if w > 0.0 {
                flow.add(source, vertex, w);
                *positive += w;
            } else if w < 0.0 {
                flow.add(vertex, sink, -w);
            }
        };
        for (v, node) in nodes.iter().enumerate() {
            let recompute_only = node.forced == Some(Forced::Recompute);
            let hold = lambda * node.bytes as f64;
            // Available: held (price per byte), or for a value that may not be held, replayed
            // (its cost, and its inputs must be available).
            let w = if recompute_only { -node.cost } else { -hold };
            if self.read[v] {
                flow.add(source, avail(v), f64::INFINITY);
            }
            add_weight(&mut flow, avail(v), w, &mut positive);
            if recompute_only {
                for &u in &node.inputs {
                    flow.add(avail(v), avail(u as usize), f64::INFINITY);
                }
                continue;
            }
            let replayable = node.replayable && node.forced != Some(Forced::Keep);
            if replayable && node.cost < hold {
                // Replayed instead of held: saves the holding price, costs the replay.
                add_weight(&mut flow, replayed(v), hold - node.cost, &mut positive);
                flow.add(replayed(v), avail(v), f64::INFINITY);
                for &u in &node.inputs {
                    flow.add(replayed(v), avail(u as usize), f64::INFINITY);
                }
            }
        }
        // Max closure weight = positive - cut; the objective is its negation.
        let objective = flow.max_flow(source, sink) - positive;
        self.work.set(self.work.get() + flow.work);
        // The closure is what the source still reaches: a value is held when it is
        // available there and not replayed.
        let side = flow.source_side(source);
        let state = (0..n)
            .map(|v| {
                if !side[avail(v)] {
                    State::Absent
                } else if side[replayed(v)] || nodes[v].forced == Some(Forced::Recompute) {
                    State::Replayed
                } else {
                    State::Held
                }
            })
            .collect();
        (objective, state)
    }
}

/// A flow network with `f64` capacities and Dinic's algorithm (iterative).
struct Flow {
    /// Per vertex, its arcs' indices in `to` / `cap`.
    arcs: Vec<Vec<u32>>,
    to: Vec<u32>,
    cap: Vec<f64>,
    /// Arcs examined so far (the planner's work count).
    work: u64,
}

impl Flow {
    fn new(vertices: usize) -> Self {
        Self {
            arcs: vec![Vec::new(); vertices],
            to: Vec::new(),
            cap: Vec::new(),
            work: 0,
        }
    }

    /// An arc `a -> b` of capacity `cap`, and its residual twin.
    fn add(&mut self, a: usize, b: usize, cap: f64) {
        self.arcs[a].push(self.to.len() as u32);
        self.to.push(b as u32);
        self.cap.push(cap);
        self.arcs[b].push(self.to.len() as u32);
        self.to.push(a as u32);
        self.cap.push(0.0);
    }

    /// The vertices the source reaches through arcs with room (after [`Self::max_flow`]:
    /// the source side of a minimum cut).
    fn source_side(&self, source: usize) -> Vec<bool> {
        let mut seen = vec![false; self.arcs.len()];
        seen[source] = true;
        let mut stack = vec![source];
        while let Some(v) = stack.pop() {
            for &arc in &self.arcs[v] {
                let w = self.to[arc as usize] as usize;
                if self.cap[arc as usize] > 1e-9 && !seen[w] {
                    seen[w] = true;
                    stack.push(w);
                }
            }
        }
        seen
    }

    fn max_flow(&mut self, source: usize, sink: usize) -> f64 {
        let n = self.arcs.len();
        let mut total = 0.0;
        let mut level = vec![u32::MAX; n];
        let mut next = vec![0usize; n];
        let mut queue = Vec::with_capacity(n);
        let eps = 1e-9;
        loop {
            // Levels by breadth-first search over arcs with room.
            level.fill(u32::MAX);
            level[source] = 0;
            queue.clear();
            queue.push(source);
            let mut head = 0;
            while head < queue.len() {
                let v = queue[head];
                head += 1;
                self.work += self.arcs[v].len() as u64;
                for &arc in &self.arcs[v] {
                    let w = self.to[arc as usize] as usize;
                    if self.cap[arc as usize] > eps && level[w] == u32::MAX {
                        level[w] = level[v] + 1;
                        queue.push(w);
                    }
                }
            }
            if level[sink] == u32::MAX {
                return total;
            }
            next.fill(0);
            // Blocking flow: depth-first along rising levels with an explicit path stack.
            loop {
                let mut path: Vec<u32> = Vec::new();
                let mut v = source;
                let pushed = loop {
                    if v == sink {
                        let bottleneck = path
                            .iter()
                            .map(|&a| self.cap[a as usize])
                            .fold(f64::INFINITY, f64::min);
                        break Some(bottleneck);
                    }
                    let mut advanced = false;
                    while next[v] < self.arcs[v].len() {
                        self.work += 1;
                        let arc = self.arcs[v][next[v]] as usize;
                        let w = self.to[arc] as usize;
                        if self.cap[arc] > eps && level[w] == level[v] + 1 {
                            path.push(arc as u32);
                            v = w;
                            advanced = true;
                            break;
                        }
                        next[v] += 1;
                    }
                    if !advanced {
                        // Dead end: retreat one arc and skip it.
                        let Some(arc) = path.pop() else {
                            break None;
                        };
                        level[v] = u32::MAX;
                        v = self.to[arc as usize ^ 1] as usize;
                        next[v] += 1;
                    }
                };
                let Some(amount) = pushed else {
                    break;
                };
                if !amount.is_finite() {
                    // A path of infinite arcs only: cannot happen, as every arc into the
                    // sink is finite.
                    return f64::INFINITY;
                }
                for &arc in &path {
                    self.cap[arc as usize] -= amount;
                    self.cap[arc as usize ^ 1] += amount;
                }
                total += amount;
            }
        }
    }
}
