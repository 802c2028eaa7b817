//! The exact optimum of views too large for dense tables (NOTE [exact-search]).
//!
//! NOTE [exact-search]: [`exact_optimum`] searches the states of `exact.rs` (backward
//! position, set of held values, under `simulate`'s cost model) with A*, so that only the
//! states a schedule at most as dear as the optimum can pass are ever stored:
//! - **The forward pass** decides node by node whether its value is kept (each value at the
//!   latest moment it is in hand; nothing is freed in the forward pass, so its held bytes
//!   grow to `bytes(kept)` plus every constant at its end, the one check). A value the
//!   pass has decided to drop is *dropped*; the values not decided yet count as held.
//! - **Backward** moves are `exact.rs`'s: free a held value, replay one whose inputs are held
//!   (dropping any of them it reads last), run the next step when its reads are held; but
//!   only the lazy ones (NOTE \[lazy-frees\]).
//! - **The estimate** of the recompute still to come from a state: every value a later step
//!   reads that is not held (or dropped, in the forward pass) must be replayed at least once
//!   before that step, and so must each of its inputs that is not held, and theirs: the
//!   sum of their costs (infinite where one of them cannot be replayed: no schedule goes on
//!   from there). In the forward pass, the values later steps read and not decided yet that
//!   cannot all be kept add the cheapest way to drop the excess, in a knapsack's relaxation
//!   (NOTE \[unread-inputs\]; infinite where what may be dropped cannot make room). The
//!   estimate never passes what a schedule from the state pays (admissible), and in
//!   backward it is consistent (a replay of `x` lowers it by at most `cost[x]`: its inputs
//!   are held, so only `x` leaves the set; a free or a step never lowers it). A state
//!   reached again more cheaply is expanded again, so the first time the search takes the
//!   end state its cost is the optimum, and the least estimate among the states waiting is
//!   always a lower bound on it.
//! - **The limit**: the search stores at most `max_states` states (about 200 bytes each,
//!   with the queue). A search that reaches it answers with the lower bound it proved
//!   ([`Optimum::GaveUp`]): on the benchmark's MLP at 50% of its bytes above
//!   [`recompute_lower_bound`](super::recompute_lower_bound)'s (0.276 forward passes against
//!   0.272), on larger views below it.
//!
//! NOTE [lazy-frees]: freeing costs nothing and only a replay needs room (a step adds no
//! value, and frees the constants it was the last to need), so any schedule can free each
//! value later, right before the first replay that does not fit with it, at no extra cost:
//! the frees before a replay are then a least set that makes it fit. The search takes only
//! such moves: a free while some replay ready to run does not fit as things are, and a
//! replay that drops just enough of its inputs to fit (none where it fits keeping them
//! all). Without it, the frees alone reach every subset of what is held; with it, the
//! search is equal to the dense solver (which takes every move) on every small view tested.
//!
//! The search suits tight budgets (few sets of values fit, and most must be rebuilt: the
//! estimate is close); where many layers are equal, looser budgets have too many equal
//! choices of what to drop (the benchmark's MLP from 20% of its bytes up), and the search
//! stops with a bound. Views of more than 128 nodes are not searched (one bit per node,
//! `mask.rs`).

use std::collections::BinaryHeap;
use std::collections::HashMap;

use super::exact::{Entry, MAX_NODES, Move, Problem};
use super::mask::Mask;
use super::{GraphView, Schedule};

/// What [`exact_optimum`] found.
#[derive(Clone, Debug)]
pub enum Optimum {
    /// The least recompute cost (the sum of the replays' costs) of any schedule under the
    /// budget, and a schedule that makes it (it passes [`simulate`](super::simulate)).
    Found {
        /// The optimum.
        cost: f64,
        /// A schedule that makes it.
        schedule: Schedule,
        /// The states the search stored.
        states: usize,
    },
    /// No schedule fits the budget.
    Infeasible {
        /// The states the search stored.
        states: usize,
    },
    /// The search stored `max_states` states (or the view has more than 128 nodes, with
    /// `states` 0) before it found the optimum; `bound` is a lower bound on it that the
    /// search proved (0 when it did not start).
    GaveUp {
        /// The states the search stored.
        states: usize,
        /// A lower bound on the optimum.
        bound: f64,
    },
}

/// One stored state.
struct State {
    /// `i < n`: the forward pass deciding node `i`; `n + p`: backward position `p`.
    pos: u32,
    set: Mask,
    /// The least cost found to reach it, the state it came from and how (`None`: a forward
    /// decision, or the start).
    cost: f64,
    from: u32,
    how: Option<Move>,
    done: bool,
}

impl Problem {
    /// The estimate of the recompute still to come (see the module docs): the cost of the
    /// values later steps read that are not in `held`, with their inputs not in `held`,
    /// transitively; infinite where one of them cannot be replayed.
    fn estimate(&self, read_later: Mask, held: Mask) -> f64 {
        let mut seen = read_later & !held;
        let mut stack = seen;
        let mut total = 0.0;
        while let Some(x) = stack.first() {
            stack &= !Mask::bit(x);
            if !self.can_replay.has(x) {
                return f64::INFINITY;
            }
            let x = x as usize;
            total += self.cost[x];
            let more = self.inputs[x] & !held & !seen;
            seen |= more;
            stack |= more;
        }
        total
    }

    /// The estimate at a state.
    fn estimate_at(&self, pos: usize, set: Mask, budget: u64, inputs: &Unread) -> f64 {
        let n = self.n;
        if pos >= n {
            return self.estimate(self.read_from[pos - n], set);
        }
        // The values not decided yet count as held, those it may keep as far as they fit.
        let undecided = !Mask::below(pos);
        let decided = self.estimate(self.read_from[0], set | (undecided & self.keepable));
        let wanted = undecided & self.keepable & self.read_from[0];
        let room = budget.saturating_sub(self.held(0, set));
        let mut over = self.bytes_of(wanted);
        if over <= room {
            return decided;
        }
        // Of the values later steps read, those that do not fit are dropped and replayed:
        // the cheapest per byte first, the last in part (a knapsack's relaxation).
        over -= room;
        let mut items = inputs.items.borrow_mut();
        items.clear();
        for v in wanted.iter() {
            let rate = inputs.rate(self, v as usize, undecided);
            if rate.is_finite() {
                items.push((rate, self.bytes[v as usize]));
            }
        }
        items.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut dropped = 0.0;
        for &(rate, bytes) in items.iter() {
            let part = bytes.min(over);
            dropped += rate * part as f64;
            over -= part;
            if over == 0 {
                return decided + dropped;
            }
        }
        // What cannot be dropped does not fit.
        f64::INFINITY
    }
}

/// NOTE [unread-inputs]: the forward pass's estimate prices dropping a value `v` that a
/// step reads at `cost[v]` per byte it frees, as a replay of it costs. That replay needs
/// `v`'s inputs held; an input no step reads (a matmul's output before its bias add, say)
/// is kept only for replays, so dropping `v` either keeps that input (it frees its own
/// bytes less the input's) or rebuilds it too. Where `v` has one such input `u` not
/// decided yet, `v`'s rate is the cheaper of the two: `cost[v] / (bytes[v] - bytes[u] / k)`
/// and `(cost[v] + cost[u] / k) / bytes[v]`, with `k` the nodes that read `u` in a replay
/// (one replay or one kept copy of `u` may serve them all, so each is charged its share).
/// It offers `bytes[v]`, the most either frees: a relaxation of the choice, never above
/// what a schedule pays. Other values keep the rate `cost[v] / bytes[v]`.
struct Unread {
    /// Per node: its inputs that no step reads.
    unread: Vec<Mask>,
    /// Per node: a replay's share of its cost and of its bytes (over the nodes whose
    /// replays read it).
    cost_share: Vec<f64>,
    bytes_share: Vec<f64>,
    /// The items of one estimate (rate, bytes), kept to save an allocation each.
    items: std::cell::RefCell<Vec<(f64, u64)>>,
}

impl Unread {
    fn new(problem: &Problem) -> Self {
        let n = problem.n;
        let mut readers = vec![0u32; n];
        for v in 0..n {
            for u in problem.inputs[v].iter() {
                readers[u as usize] += 1;
            }
        }
        let share = |x: f64, u: usize| x / f64::from(readers[u].max(1));
        Self {
            unread: (0..n)
                .map(|v| problem.inputs[v] & !problem.read_from[0])
                .collect(),
            cost_share: (0..n)
                .map(|u| match problem.can_replay.has(u as u32) {
                    true => share(problem.cost[u], u),
                    false => f64::INFINITY,
                })
                .collect(),
            bytes_share: (0..n).map(|u| share(problem.bytes[u] as f64, u)).collect(),
            items: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// The rate (cost per byte freed) of dropping `v` while `undecided` are not decided.
    fn rate(&self, problem: &Problem, v: usize, undecided: Mask) -> f64 {
        let (cost, bytes) = (problem.cost[v], problem.bytes[v] as f64);
        if bytes == 0.0 {
            return f64::INFINITY;
        }
        let open = self.unread[v] & undecided;
        let Some(u) = open.first().filter(|_| open.count() == 1) else {
            return cost / bytes;
        };
        let keepable = problem.keepable.has(u);
        let u = u as usize;
        let kept = bytes - self.bytes_share[u];
        let keep_it = if keepable && kept > 0.0 {
            cost / kept
        } else {
            f64::INFINITY
        };
        let rebuild_it = (cost + self.cost_share[u]) / bytes;
        keep_it.min(rebuild_it)
    }
}

/// The least recompute of any schedule of `view` under `budget`, by a search that stores at
/// most `max_states` states (NOTE \[exact-search\]); a schedule that makes it, or the lower
/// bound the search proved when it stops at its limit.
///
/// Where it finds one, this is the optimum of the planner's cost model over all schedules,
/// the reference [`plan`](super::plan) is measured against on views too large for the
/// planner's own exact solver (14 ops). Its time and memory grow with the states it stores
/// (about 200 bytes each, with the queue): a few million take seconds.
pub fn exact_optimum(view: &GraphView, budget: u64, max_states: usize) -> Optimum {
    search(view, budget, max_states, f64::INFINITY)
}

/// [`exact_optimum`] among the schedules that cost less than `below` (the planner's best so
/// far): states whose estimate reaches it are never stored, and `Infeasible` means that no
/// schedule is cheaper.
pub(crate) fn search(view: &GraphView, budget: u64, max_states: usize, below: f64) -> Optimum {
    if view.is_empty() {
        return Optimum::Found {
            cost: 0.0,
            schedule: Schedule::new(Vec::new()),
            states: 0,
        };
    }
    if view.len() > MAX_NODES {
        return Optimum::GaveUp {
            states: 0,
            bound: 0.0,
        };
    }
    let problem = Problem::new(view);
    let n = problem.n;
    let must = problem.pinned_reads[0];
    if !(must & !problem.keepable).is_empty() || problem.held(0, Mask::EMPTY) > budget {
        return Optimum::Infeasible { states: 0 };
    }
    let mut states: Vec<State> = Vec::new();
    let mut index: HashMap<(u32, Mask), u32> = HashMap::new();
    let mut queue = BinaryHeap::new();
    let unread = Unread::new(&problem);
    let start = problem.estimate_at(0, Mask::EMPTY, budget, &unread);
    if start < below {
        states.push(State {
            pos: 0,
            set: Mask::EMPTY,
            cost: 0.0,
            from: u32::MAX,
            how: None,
            done: false,
        });
        index.insert((0, Mask::EMPTY), 0);
        queue.push(Entry {
            estimate: start,
            cost: 0.0,
            state: 0,
        });
    }
    let end = 2 * n as u32;
    let mut successors: Vec<(usize, Mask, f64, Option<Move>)> = Vec::new();
    while let Some(Entry {
        estimate,
        cost,
        state: id,
    }) = queue.pop()
    {
        let state = &mut states[id as usize];
        if state.done || cost > state.cost {
            continue;
        }
        state.done = true;
        let (pos, set) = (state.pos as usize, state.set);
        if pos as u32 == end {
            return Optimum::Found {
                cost,
                schedule: path(&problem, view, &states, id),
                states: states.len(),
            };
        }
        successors.clear();
        if pos < n {
            let bit = Mask::bit(pos as u32);
            if problem.keepable.has(pos as u32) && problem.held(0, set | bit) <= budget {
                successors.push((pos + 1, set | bit, 0.0, None));
            }
            if !must.has(pos as u32) {
                successors.push((pos + 1, set, 0.0, None));
            }
        } else {
            problem.transitions(pos - n, set, budget, true, |q, next, c, how| {
                successors.push((n + q, next, c, Some(how)));
            });
        }
        for &(to, next, c, how) in &successors {
            let rest = problem.estimate_at(to, next, budget, &unread);
            if rest.is_infinite() {
                continue;
            }
            let reached = cost + c;
            if reached + rest >= below {
                continue;
            }
            let key = (to as u32, next);
            let id_next = match index.get(&key) {
                Some(&k) => {
                    let known = &mut states[k as usize];
                    if reached >= known.cost {
                        continue;
                    }
                    // Reached more cheaply: expanded again (the forward pass's estimate is
                    // admissible, not consistent).
                    known.done = false;
                    known.cost = reached;
                    known.from = id;
                    known.how = how;
                    k
                }
                None => {
                    if states.len() >= max_states {
                        // Every schedule passes a state in the queue or this one, or costs
                        // at least `below`.
                        let waiting = queue
                            .iter()
                            .filter(|e| {
                                let s = &states[e.state as usize];
                                !s.done && e.cost == s.cost
                            })
                            .map(|e| e.estimate);
                        return Optimum::GaveUp {
                            states: states.len(),
                            bound: waiting.fold(estimate, f64::min).min(below),
                        };
                    }
                    let k = states.len() as u32;
                    states.push(State {
                        pos: to as u32,
                        set: next,
                        cost: reached,
                        from: id,
                        how,
                        done: false,
                    });
                    index.insert(key, k);
                    k
                }
            };
            queue.push(Entry {
                estimate: reached + rest,
                cost: reached,
                state: id_next,
            });
        }
    }
    Optimum::Infeasible {
        states: states.len(),
    }
}

/// The schedule of the path that ends at state `id`.
fn path(problem: &Problem, view: &GraphView, states: &[State], id: u32) -> Schedule {
    let n = problem.n as u32;
    let mut moves = Vec::new();
    let mut k = id;
    // Back to the first backward state: its set is what the forward pass kept.
    while let Some(how) = states[k as usize].how {
        let from = &states[states[k as usize].from as usize];
        moves.push(((from.pos - n) as usize, from.set, how));
        k = states[k as usize].from;
    }
    debug_assert_eq!(
        states[k as usize].pos, n,
        "the path starts where backward does"
    );
    moves.reverse();
    problem.schedule(view, states[k as usize].set, &moves)
}
