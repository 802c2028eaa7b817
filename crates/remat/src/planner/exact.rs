//! An exact solver for small views (at most 16 nodes): Dijkstra over states (backward
//! position, set of held values) under the same cost model as `simulate`. The planner uses
//! it for views of at most [`PLAN_MAX_NODES`] nodes (their optimum, in about a millisecond),
//! keeping only the states it reaches (NOTE \[sparse-exact\]); the tests' solvers
//! (`optimum`, `min_budget`) use dense tables and measure the other generators against it.
//! Its [`Problem`] (the view as bit masks, the moves out of a state) is also the search of
//! larger views (`search.rs`, NOTE \[exact-search\]).
//!
//! - The forward pass keeps a set `K` (each value at the latest moment it is in hand, which
//!   dominates keeping it earlier): its held bytes at the end are `bytes(K)` plus every
//!   constant, the most the forward pass holds.
//! - Backward transitions: free a held value (free of cost); replay `x` whose inputs are
//!   held, taking any subset of its inputs (cost `cost[x]`); run the next step when its reads
//!   are held. Every state's held bytes (values + constants of unstepped nodes) must fit.
//! - A value no later step can need, directly or through a replay of a rebuildable
//!   descendant, is dropped at once (dominant).
//! - Forced marks and replayability are the simulator's rules.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::mask::Mask;
use super::{Action, Forced, GraphView, Schedule};

/// The largest view the planner solves exactly (states: `(n + 1) 2^n`).
pub(crate) const PLAN_MAX_NODES: usize = 14;

/// The largest view the dense solvers here take (their tables have `(n + 1) 2^n` entries).
const DENSE_MAX_NODES: usize = 16;

/// One transition of the search.
#[derive(Clone, Copy)]
pub(super) enum Move {
    /// Drop a held value.
    Free(u32),
    /// Replay `x`, dropping the inputs in the mask (read last by it).
    Replay(u32, Mask),
    /// Run the step at the position; drop what no later step can need.
    Step,
}

/// A view as bit masks over its nodes (at most [`MAX_NODES`]), shared with the search of
/// larger views (`search.rs`).
pub(super) struct Problem {
    pub(super) n: usize,
    pub(super) bytes: Vec<u64>,
    pub(super) cost: Vec<f64>,
    pub(super) inputs: Vec<Mask>,
    pub(super) can_replay: Mask,
    forced_keep: Mask,
    /// Values the forward pass may keep: some step may need them and no mark says
    /// Recompute.
    pub(super) keepable: Mask,
    /// Reads of the step at each position, and the step's node.
    reads: Vec<Mask>,
    steps: Vec<usize>,
    /// Constants of the nodes not stepped before each position.
    fixed: Vec<u64>,
    /// Values some step at or after each position may need.
    pub(super) useful: Vec<Mask>,
    /// Forced-Keep values still read at or after each position.
    pub(super) pinned_reads: Vec<Mask>,
    /// The nodes stepped before each position.
    stepped: Vec<Mask>,
    /// Values some step at or after each position reads.
    pub(super) read_from: Vec<Mask>,
}

/// The most nodes a [`Problem`] takes (one bit each).
pub(super) const MAX_NODES: usize = Mask::CAPACITY;

impl Problem {
    pub(super) fn new(view: &GraphView) -> Self {
        let n = view.len();
        assert!(
            n <= MAX_NODES,
            "the exact solvers take at most {MAX_NODES} nodes"
        );
        let nodes = view.nodes();
        let bit = Mask::bit;
        let mask = Mask::of;
        let mut position = vec![0usize; n];
        for (p, &s) in view.step_order().iter().enumerate() {
            position[s as usize] = p;
        }
        // last_read[v]: the last position whose step reads v.
        let mut last_read: Vec<Option<usize>> = vec![None; n];
        for (p, &s) in view.step_order().iter().enumerate() {
            for &v in &nodes[s as usize].step_reads {
                last_read[v as usize] = last_read[v as usize].max(Some(p));
            }
        }
        // last_use[v]: the last position whose step may need v.
        let mut last_use: Vec<Option<usize>> = vec![None; n];
        for v in (0..n).rev() {
            let mut last = last_read[v];
            for (w, node) in nodes.iter().enumerate().skip(v + 1) {
                let rebuildable = node.replayable && node.forced != Some(Forced::Keep);
                if rebuildable && node.inputs.contains(&(v as u32)) {
                    last = last.max(last_use[w].map(|l| l.min(position[w])));
                }
            }
            last_use[v] = last;
        }
        let useful: Vec<Mask> = (0..=n)
            .map(|p| {
                (0..n)
                    .filter(|&v| last_use[v].is_some_and(|l| l >= p))
                    .fold(Mask::EMPTY, |m, v| m | bit(v as u32))
            })
            .collect();
        let reads: Vec<Mask> = view
            .step_order()
            .iter()
            .map(|&s| mask(&nodes[s as usize].step_reads))
            .collect();
        let mut read_from = vec![Mask::EMPTY; n + 1];
        for p in (0..n).rev() {
            read_from[p] = read_from[p + 1] | reads[p];
        }
        let forced_keep = (0..n)
            .filter(|&v| nodes[v].forced == Some(Forced::Keep))
            .fold(Mask::EMPTY, |m, v| m | bit(v as u32));
        let pinned_reads = read_from.iter().map(|&r| r & forced_keep).collect();
        let mut stepped = vec![Mask::EMPTY; n + 1];
        for (p, &s) in view.step_order().iter().enumerate() {
            stepped[p + 1] = stepped[p] | bit(s);
        }
        let fixed = view.constants_from();
        let forced_recompute = (0..n)
            .filter(|&v| nodes[v].forced == Some(Forced::Recompute))
            .fold(Mask::EMPTY, |m, v| m | bit(v as u32));
        Self {
            n,
            bytes: nodes.iter().map(|x| x.bytes).collect(),
            cost: nodes.iter().map(|x| x.cost).collect(),
            inputs: nodes.iter().map(|x| mask(&x.inputs)).collect(),
            can_replay: (0..n)
                .filter(|&v| nodes[v].replayable && nodes[v].forced != Some(Forced::Keep))
                .fold(Mask::EMPTY, |m, v| m | bit(v as u32)),
            forced_keep,
            keepable: useful[0] & !forced_recompute,
            reads,
            steps: view.step_order().iter().map(|&s| s as usize).collect(),
            fixed,
            useful,
            pinned_reads,
            stepped,
            read_from,
        }
    }

    /// A view small enough for the dense tables.
    fn dense(view: &GraphView) -> Self {
        assert!(
            view.len() <= DENSE_MAX_NODES,
            "the dense exact solver takes at most {DENSE_MAX_NODES} nodes"
        );
        Self::new(view)
    }

    /// The bytes held at position `p` with `set` held: the values and the constants of the
    /// nodes not stepped yet.
    pub(super) fn held(&self, p: usize, set: Mask) -> u64 {
        self.fixed[p] + self.bytes_of(set)
    }

    /// The bytes of the values in `set`.
    pub(super) fn bytes_of(&self, set: Mask) -> u64 {
        set.iter().map(|v| self.bytes[v as usize]).sum()
    }

    fn index(&self, p: usize, set: Mask) -> usize {
        debug_assert!(self.n <= DENSE_MAX_NODES);
        (p << self.n) | set.low()
    }

    /// Calls `f(next_p, next_set, cost, move)` for every transition out of `(p, set)` that
    /// fits.
    ///
    /// `lazy` leaves out the moves some schedule as cheap never needs (NOTE \[lazy-frees\]
    /// in `search.rs`): a free while every replay fits without it, and a replay that drops
    /// more of its inputs than it needs to fit.
    pub(super) fn transitions(
        &self,
        p: usize,
        set: Mask,
        budget: u64,
        lazy: bool,
        mut f: impl FnMut(usize, Mask, f64, Move),
    ) {
        let n = self.n;
        if p == n {
            return;
        }
        let held = self.held(p, set);
        let candidates = self.can_replay & self.useful[p] & !set & !self.stepped[p];
        let ready = |x: usize| (self.inputs[x] & !set).is_empty();
        // Free.
        let cramped = candidates.iter().any(|x| {
            let x = x as usize;
            ready(x) && held + self.bytes[x] > budget
        });
        if cramped || !lazy {
            for v in (set & !self.pinned_reads[p]).iter() {
                f(p, set & !Mask::bit(v), 0.0, Move::Free(v));
            }
        }
        // Replay.
        for x in candidates.iter() {
            let x = x as usize;
            if !ready(x) {
                continue;
            }
            let takeable = self.inputs[x] & !self.pinned_reads[p];
            // Every subset of the takeable inputs (lazy: the least ones that make it fit).
            let mut sub = takeable;
            loop {
                let next = (set | Mask::bit(x as u32)) & !sub;
                let fits = |next: Mask| self.held(p, next) <= budget;
                if fits(next) && (!lazy || sub.iter().all(|u| !fits(next | Mask::bit(u)))) {
                    f(p, next, self.cost[x], Move::Replay(x as u32, sub));
                }
                if sub.is_empty() {
                    break;
                }
                sub = sub.prev_subset(takeable);
            }
        }
        // Step.
        if (self.reads[p] & !set).is_empty() {
            f(p + 1, set & self.useful[p + 1], 0.0, Move::Step);
        }
    }

    /// The start states: every keepable set that fits after the forward pass.
    fn starts(&self, budget: u64, mut f: impl FnMut(Mask)) {
        let must = self.pinned_reads[0];
        if !(must & !self.keepable).is_empty() {
            return;
        }
        let free = self.keepable & !must;
        let mut sub = free;
        loop {
            let set = must | sub;
            if self.held(0, set) <= budget {
                f(set);
            }
            if sub.is_empty() {
                break;
            }
            sub = sub.prev_subset(free);
        }
        let _ = self.forced_keep;
    }
}

/// A state waiting in a search's queue, shared with the search of larger views
/// (`search.rs`): its estimate of a whole schedule's cost through it, its cost so far. The
/// dense solver here is Dijkstra's (no estimate of what is left: `estimate` is `cost`).
pub(super) struct Entry<T> {
    /// The cost so far plus the least that is left (an admissible estimate).
    pub(super) estimate: f64,
    /// The cost so far.
    pub(super) cost: f64,
    /// The state, as the search names it.
    pub(super) state: T,
}

impl<T> Entry<T> {
    /// An entry of the dense solver's search, which estimates nothing of what is left.
    fn dijkstra(cost: f64, state: T) -> Self {
        Entry {
            estimate: cost,
            cost,
            state,
        }
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    /// The least estimate first (`BinaryHeap` pops the greatest); among equal ones, the
    /// furthest along (the most spent).
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .estimate
            .total_cmp(&self.estimate)
            .then(self.cost.total_cmp(&other.cost))
    }
}

/// The least recompute cost of any schedule of `view` under `budget`, if one exists.
#[cfg(test)]
pub(crate) fn optimum(view: &GraphView, budget: u64) -> Option<f64> {
    let problem = Problem::dense(view);
    let n = problem.n;
    let mut dist = vec![f64::INFINITY; (n + 1) << n];
    let mut heap = BinaryHeap::new();
    problem.starts(budget, |set| {
        dist[problem.index(0, set)] = 0.0;
        heap.push(Entry::dijkstra(0.0, (0, set)));
    });
    while let Some(Entry {
        cost: d,
        state: (p, set),
        ..
    }) = heap.pop()
    {
        if d > dist[problem.index(p, set)] {
            continue;
        }
        if p == n {
            return Some(d);
        }
        problem.transitions(p, set, budget, false, |q, next, c, _| {
            let k = problem.index(q, next);
            if d + c < dist[k] {
                dist[k] = d + c;
                heap.push(Entry::dijkstra(d + c, (q, next)));
            }
        });
    }
    None
}

/// The smallest budget any schedule of `view` meets.
#[cfg(test)]
pub(crate) fn min_budget(view: &GraphView) -> u64 {
    let problem = Problem::dense(view);
    let n = problem.n;
    // Minimax Dijkstra: the cost of a path is the most it holds.
    let mut best = vec![u64::MAX; (n + 1) << n];
    let mut heap: BinaryHeap<std::cmp::Reverse<(u64, usize, usize)>> = BinaryHeap::new();
    problem.starts(u64::MAX, |set| {
        let held = problem.held(0, set);
        best[problem.index(0, set)] = held;
        heap.push(std::cmp::Reverse((held, 0, set.low())));
    });
    while let Some(std::cmp::Reverse((peak, p, set))) = heap.pop() {
        let set = Mask::from_low(set);
        if peak > best[problem.index(p, set)] {
            continue;
        }
        if p == n {
            return peak;
        }
        problem.transitions(p, set, u64::MAX, false, |q, next, _, _| {
            let next_peak = peak.max(problem.held(q, next));
            let k = problem.index(q, next);
            if next_peak < best[k] {
                best[k] = next_peak;
                heap.push(std::cmp::Reverse((next_peak, q, next.low())));
            }
        });
    }
    u64::MAX
}

/// An optimal schedule of `view` under `budget` (the least recompute; see the module docs),
/// or `None` when the view has more than [`PLAN_MAX_NODES`] nodes or nothing fits.
pub(crate) fn schedule(view: &GraphView, budget: u64) -> Option<Schedule> {
    if view.len() > PLAN_MAX_NODES || view.is_empty() {
        return None;
    }
    let problem = Problem::dense(view);
    let n = problem.n;
    // NOTE [sparse-exact]: the states reached, not a dense table. The planner runs inside
    // the step it plans for, so its scratch is the process's memory too: dense tables of
    // `(n + 1) 2^n` states took 13.8 MB at 14 nodes (a cost and a move each), 10 MB of an
    // Lstm's first step under a budget whose whole step held 6 MB under SaveAll, where
    // Dijkstra reached 2% of the states (at most 5,029 on Burn's Lstm's stages). Each state
    // reached and each queued is packed in a few words ([`Reached`], the queue's state its
    // index): a reached state with its move as a `Move` (two mask words wide) took 56 bytes
    // and a queued one 40, and one solve of 5,029 states held 0.77 MB at its peak, half of
    // the heap of that Lstm's first step under 15% of SaveAll's bytes (32 steps, 1.5 MB).
    // A solve that reaches more than [`EXACT_STATES`] states gives up (the heuristics plan
    // the view instead), so that a view on which Dijkstra fans out cannot take megabytes.
    let mut reached: HashMap<u32, Reached> = HashMap::new();
    let mut heap: BinaryHeap<Entry<u32>> = BinaryHeap::new();
    problem.starts(budget, |set| {
        let k = problem.index(0, set) as u32;
        reached.insert(k, Reached::start());
        heap.push(Entry::dijkstra(0.0, k));
    });
    let mut end = None;
    while let Some(Entry {
        cost: d,
        state: here,
        ..
    }) = heap.pop()
    {
        if d > reached[&here].cost {
            continue;
        }
        let (p, set) = (
            here as usize >> n,
            Mask::from_low(here as usize & ((1 << n) - 1)),
        );
        if p == n {
            end = Some(here);
            break;
        }
        problem.transitions(p, set, budget, false, |q, next, c, how| {
            let k = problem.index(q, next) as u32;
            let better = reached.get(&k).is_none_or(|r| d + c < r.cost);
            if better {
                reached.insert(k, Reached::by(d + c, here, how));
                heap.push(Entry::dijkstra(d + c, k));
            }
        });
        if reached.len() > EXACT_STATES {
            return None;
        }
    }
    // Walk back to the start: the moves, last first.
    let mut k = end?;
    let mut moves = Vec::new();
    while let Some((prev, how)) = reached[&k].from() {
        let (p, set) = (
            prev as usize >> n,
            Mask::from_low(prev as usize & ((1 << n) - 1)),
        );
        moves.push((p, set, how));
        k = prev;
    }
    moves.reverse();
    let kept = Mask::from_low(k as usize & ((1 << n) - 1));
    Some(problem.schedule(view, kept, &moves))
}

/// The most states one sparse solve reaches before it gives up (NOTE \[sparse-exact\]):
/// three times the most measured on Burn's recurrent modules' stages, about 1 MB of map
/// and queue at most.
const EXACT_STATES: usize = 16_384;

/// A state the sparse solve reached (NOTE \[sparse-exact\]): its cost so far, the state it
/// was reached from (`u32::MAX` for a start) and the move, packed: the move's kind in the
/// top two bits, its node in the next eight, a replay's dropped inputs in the low sixteen
/// (views of at most [`PLAN_MAX_NODES`] nodes).
#[derive(Clone, Copy)]
struct Reached {
    cost: f64,
    from: u32,
    how: u32,
}

const _: () = assert!(
    PLAN_MAX_NODES <= 16,
    "a replay's dropped inputs are packed in 16 bits"
);

impl Reached {
    fn start() -> Self {
        Reached {
            cost: 0.0,
            from: u32::MAX,
            how: 0,
        }
    }

    fn by(cost: f64, from: u32, how: Move) -> Self {
        let how = match how {
            Move::Step => 0,
            Move::Free(v) => 1 << 30 | v << 16,
            Move::Replay(x, taken) => 2 << 30 | x << 16 | taken.low() as u32,
        };
        Reached { cost, from, how }
    }

    /// The state it was reached from and the move, `None` for a start.
    fn from(&self) -> Option<(u32, Move)> {
        if self.from == u32::MAX {
            return None;
        }
        let node = (self.how >> 16) & 0xff;
        let how = match self.how >> 30 {
            0 => Move::Step,
            1 => Move::Free(node),
            _ => Move::Replay(node, Mask::from_low((self.how & 0xffff) as usize)),
        };
        Some((self.from, how))
    }
}

impl Problem {
    /// The schedule of a path: the forward pass keeping `kept`, then `moves`, each made
    /// from the state (position, held set) it names.
    pub(super) fn schedule(
        &self,
        view: &GraphView,
        kept: Mask,
        moves: &[(usize, Mask, Move)],
    ) -> Schedule {
        let mut out = forward(view, kept);
        for &(p, set, how) in moves {
            match how {
                Move::Free(v) => out.push(Action::Free(v)),
                Move::Replay(x, taken) => {
                    out.push(Action::Replay(x));
                    out.extend((taken & !Mask::bit(x)).iter().map(Action::Free));
                }
                Move::Step => {
                    out.push(Action::Step(self.steps[p] as u32));
                    out.extend((set & !self.useful[p + 1]).iter().map(Action::Free));
                }
            }
        }
        Schedule::new(out)
    }
}

/// The forward pass keeping `kept`: each value right after the last op that has it in hand
/// (its own, or the last forward op reading it).
fn forward(view: &GraphView, kept: Mask) -> Vec<Action> {
    let n = view.len();
    let mut at: Vec<Vec<u32>> = vec![Vec::new(); n];
    for v in kept.iter() {
        let last = view
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, node)| node.inputs.contains(&v))
            .map(|(w, _)| w)
            .fold(v as usize, usize::max);
        at[last].push(v);
    }
    let mut out = Vec::new();
    for (i, keeps) in at.into_iter().enumerate() {
        out.push(Action::Compute(i as u32));
        out.extend(keeps.into_iter().map(Action::Keep));
    }
    out
}
