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
//!   (dropping any of them it reads last), run the next step when its reads are held.
//! - **The estimate** of the recompute still to come from a state: every value a later step
//!   reads that is not held (or dropped, in the forward pass) must be replayed at least once
//!   before that step, and so must each of its inputs that is not held, and theirs: the
//!   sum of their costs (infinite where one of them cannot be replayed: no schedule goes on
//!   from there). A replay of `x` lowers the estimate by at most `cost[x]` (its inputs are
//!   held, so only `x` leaves the set), a free or a step never lowers it (a step drops only
//!   values no later step or replay can need), so the estimate is consistent: the first
//!   time the search takes the end state, its cost is the optimum, and at any moment the
//!   estimate of the state taken last is a lower bound on it.
//! - **The limit**: the search stores at most `max_states` states (about 130 bytes each).
//!   A search that reaches it answers with the lower bound it proved
//!   ([`Optimum::GaveUp`]), often above [`recompute_lower_bound`](super::recompute_lower_bound)'s
//!   where budgets are tight (the estimate counts every value a step needs, not one cut).
//!
//! The search suits tight budgets (few sets of values fit, and most must be rebuilt: the
//! estimate is close) and loose ones (few values are dropped); mid-range budgets on long
//! views have too many equal choices of what to keep. Views of more than 128 nodes are not
//! searched (one bit per node).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::collections::HashMap;

use super::exact::{MAX_NODES, Move, Problem};
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
    set: u128,
    /// The least cost found to reach it, the state it came from and how (`None`: a forward
    /// decision, or the start).
    cost: f64,
    from: u32,
    how: Option<Move>,
    done: bool,
}

/// A state waiting in the queue: its estimate of a whole schedule's cost, its cost so far.
struct Entry {
    estimate: f64,
    cost: f64,
    id: u32,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// The least estimate first; among equal ones, the furthest along (the most spent).
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .estimate
            .total_cmp(&self.estimate)
            .then(self.cost.total_cmp(&other.cost))
    }
}

impl Problem {
    /// The estimate of the recompute still to come (see the module docs): the cost of the
    /// values later steps read that are not in `held`, with their inputs not in `held`,
    /// transitively; infinite where one of them cannot be replayed.
    fn estimate(&self, read_later: u128, held: u128) -> f64 {
        let mut seen = read_later & !held;
        let mut stack = seen;
        let mut total = 0.0;
        while stack != 0 {
            let x = stack.trailing_zeros() as usize;
            stack &= stack - 1;
            if self.can_replay & (1u128 << x) == 0 {
                return f64::INFINITY;
            }
            total += self.cost[x];
            let more = self.inputs[x] & !held & !seen;
            seen |= more;
            stack |= more;
        }
        total
    }

    /// The estimate at a state.
    fn estimate_at(&self, pos: usize, set: u128, budget: u64, by_rate: &[usize]) -> f64 {
        let n = self.n;
        if pos >= n {
            return self.estimate(self.read_from[pos - n], set);
        }
        // The values not decided yet count as held, those it may keep as far as they fit.
        let keepable = self.useful[0] & !self.forced_recompute;
        let undecided = !((1u128 << pos) - 1) & keepable;
        let decided = self.estimate(self.read_from[0], set | undecided);
        let wanted = undecided & self.read_from[0];
        let room = budget.saturating_sub(self.held(0, set));
        let mut over = self.held(0, wanted) - self.held(0, 0);
        if over <= room {
            return decided;
        }
        // Of the values later steps read, those that do not fit are dropped and replayed:
        // the cheapest per byte first, the last in part (a knapsack's relaxation).
        over -= room;
        let mut dropped = 0.0;
        for &v in by_rate {
            if wanted & (1u128 << v) == 0 || self.bytes[v] == 0 {
                continue;
            }
            let part = self.bytes[v].min(over);
            dropped += self.cost[v] * part as f64 / self.bytes[v] as f64;
            over -= part;
            if over == 0 {
                break;
            }
        }
        decided + dropped
    }
}

/// The least recompute of any schedule of `view` under `budget`, by a search that stores at
/// most `max_states` states (NOTE \[exact-search\]); a schedule that makes it, or the lower
/// bound the search proved when it stops at its limit.
///
/// Where it finds one, this is the optimum of the planner's cost model over all schedules,
/// the reference [`plan`](super::plan) is measured against on views too large for the
/// planner's own exact solver (14 ops). Its time and memory grow with the states it stores
/// (about 130 bytes each): a few million take seconds.
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
    let keepable = problem.useful[0] & !problem.forced_recompute;
    let must = problem.pinned_reads[0];
    if must & !keepable != 0 || problem.held(0, 0) > budget {
        return Optimum::Infeasible { states: 0 };
    }
    let mut states: Vec<State> = Vec::new();
    let mut index: HashMap<(u32, u128), u32> = HashMap::new();
    let mut queue = BinaryHeap::new();
    // The nodes by replay cost per byte, for the forward pass's estimate.
    let mut by_rate: Vec<usize> = (0..n).filter(|&v| view.nodes()[v].bytes > 0).collect();
    by_rate.sort_by(|&a, &b| {
        let rate = |v: usize| problem.cost[v] / view.nodes()[v].bytes as f64;
        rate(a).total_cmp(&rate(b))
    });
    let start = problem.estimate_at(0, 0, budget, &by_rate);
    if start < below {
        states.push(State {
            pos: 0,
            set: 0,
            cost: 0.0,
            from: u32::MAX,
            how: None,
            done: false,
        });
        index.insert((0, 0), 0);
        queue.push(Entry {
            estimate: start,
            cost: 0.0,
            id: 0,
        });
    }
    let end = 2 * n as u32;
    let mut successors: Vec<(usize, u128, f64, Option<Move>)> = Vec::new();
    while let Some(Entry { estimate, cost, id }) = queue.pop() {
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
            let bit = 1u128 << pos;
            if keepable & bit != 0 && problem.held(0, set | bit) <= budget {
                successors.push((pos + 1, set | bit, 0.0, None));
            }
            if must & bit == 0 {
                successors.push((pos + 1, set, 0.0, None));
            }
        } else {
            problem.transitions(pos - n, set, budget, true, |q, next, c, how| {
                successors.push((n + q, next, c, Some(how)));
            });
        }
        for &(to, next, c, how) in &successors {
            let rest = problem.estimate_at(to, next, budget, &by_rate);
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
                    if known.done || reached >= known.cost {
                        continue;
                    }
                    known.cost = reached;
                    known.from = id;
                    known.how = how;
                    k
                }
                None => {
                    if states.len() >= max_states {
                        return Optimum::GaveUp {
                            states: states.len(),
                            bound: estimate,
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
                id: id_next,
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
