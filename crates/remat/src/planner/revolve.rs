//! Revolve: optimal binomial checkpointing of a uniform chain (Griewank 1992; Griewank and
//! Walther, "Algorithm 799: revolve", ACM TOMS 2000).
//!
//! A *uniform chain* is a view where node `i` reads node `i - 1` (node 0 reads only leaves),
//! each step reads its node's input, every value has the same size, and nothing is pinned,
//! constant or forced. With room for `s` values (the value being advanced included), the
//! fewest forward evaluations that reverse `l` steps are
//! `t(l, s) = r l - C(s + r, r - 1)`, where `r` is the smallest integer with
//! `C(s + r, s) >= l`; here the first forward pass is free, so a plan replays
//! `t(n, s) - (n - 1)` values. [`replays`] gives that count; `schedule` (crate-private) builds a schedule
//! that reaches it, splitting each sub-chain where `t`'s recursion is smallest (the split
//! cost is convex in the split point, so a binary search finds it).
//!
//! Cost model: O(log) per split with precomputed binomial tables; the schedule itself has
//! O(n + replays) actions. Built with an explicit stack: no recursion.
//!
//! # Invariants
//! - A sub-task `Rev(a, b, s)` starts with value `a - 1` held (a leaf when `a = 0`), values
//!   `a..=b` not held and steps `b..=a` to run, and holds at most `s` values of `a..=b` at
//!   once.

use super::{Action, GraphView, Schedule};

/// The value size of `view` if it is a uniform chain (see the module docs): a general chain
/// whose steps all read their input, of equal sizes and no constants.
pub(crate) fn uniform_chain(view: &GraphView) -> Option<u64> {
    let bytes = general_chain(view)?;
    let uniform = view.nodes().iter().enumerate().all(|(i, node)| {
        node.bytes == bytes && node.fixed_bytes == 0 && (i == 0 || !node.step_reads.is_empty())
    });
    uniform.then_some(bytes)
}

/// The slot size of `view` if it is a *general* chain Revolve's schedule serves (valid,
/// though no longer optimal in cost): node `i` reads node `i - 1` only, each step reads its
/// node's input or nothing (never its own output), values of any size (each in a slot of
/// the largest), nothing pinned or forced, steps in reverse order.
pub(crate) fn general_chain(view: &GraphView) -> Option<u64> {
    let nodes = view.nodes();
    let slot = nodes.iter().map(|node| node.bytes).max()?;
    if slot == 0 {
        return None;
    }
    let n = nodes.len() as u32;
    let chain = nodes.iter().enumerate().all(|(i, node)| {
        let i = i as u32;
        let previous: &[u32] = if i == 0 { &[] } else { &[i - 1] };
        node.inputs[..] == *previous
            && (node.step_reads.is_empty() || node.step_reads[..] == *previous)
            && node.replayable
            && node.forced.is_none()
    });
    let reversed = view.step_order().iter().copied().eq((0..n).rev());
    (chain && reversed).then_some(slot)
}

/// Binomial tables for `t(l, s)`.
struct Tables {
    n: u64,
    /// `beta[s][r] = C(s + r, s)`, for `r` until the value reaches `n` (capped), `s >= 2`.
    beta: Vec<Vec<u64>>,
}

impl Tables {
    fn new(n: u64, s_max: u64) -> Self {
        let s_max = s_max.min(n + 1) as usize;
        let mut beta = vec![Vec::new(); s_max + 2];
        for (s, row) in beta.iter_mut().enumerate().skip(2) {
            let mut value: u128 = 1;
            let mut r: u128 = 0;
            loop {
                row.push(value.min(u64::MAX as u128) as u64);
                if value >= n as u128 {
                    break;
                }
                r += 1;
                value = value * (s as u128 + r) / r;
            }
        }
        Self { n, beta }
    }

    /// `C(s + r, s)`, saturating at `u64::MAX`.
    fn beta(s: u64, r: u64) -> u64 {
        let k = s.min(r) as u128;
        let top = (s + r) as u128;
        let mut value: u128 = 1;
        for i in 1..=k {
            value = value * (top - k + i) / i;
            if value > u64::MAX as u128 {
                return u64::MAX;
            }
        }
        value as u64
    }

    /// Forward evaluations to reverse `l` steps with `s` slots (`u64::MAX`: impossible).
    fn t(&self, l: u64, s: u64) -> u64 {
        if l <= 1 {
            return 0;
        }
        if s == 0 {
            return u64::MAX;
        }
        if s == 1 {
            return l * (l - 1) / 2;
        }
        let s = s.min(self.n + 1);
        // The smallest r with C(s + r, s) >= l.
        let row = &self.beta[s as usize];
        let r = row.partition_point(|&b| b < l) as u64;
        r * l - Self::beta(s + 1, r - 1)
    }

    /// Replays of the top level: the first forward pass is free.
    fn top(&self, l: u64, s: u64) -> u64 {
        if l <= 1 {
            0
        } else if s == 0 {
            u64::MAX
        } else {
            self.t(l, s) - (l - 1)
        }
    }
}

/// The smallest `j` in `1..=hi` minimizing the convex `f`.
fn argmin_convex(hi: u64, f: impl Fn(u64) -> u64) -> u64 {
    let (mut lo, mut hi) = (1, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if f(mid) <= f(mid + 1) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The fewest replays that reverse a uniform chain of `n` ops with room for `slots` values.
/// `None` when `slots` is zero and `n > 1`.
pub fn replays(n: u64, slots: u64) -> Option<u64> {
    let tables = Tables::new(n.max(1), slots.saturating_add(1));
    let r = tables.top(n, slots);
    (r != u64::MAX).then_some(r)
}

enum Task {
    Top { a: u32, b: u32, s: u64 },
    Rev { a: u32, b: u32, s: u64 },
    Free(u32),
}

/// Carries out Revolve's recursion from `tasks` (popped last first), appending the actions.
fn run(tables: &Tables, mut tasks: Vec<Task>, out: &mut Vec<Action>) {
    while let Some(task) = tasks.pop() {
        match task {
            Task::Free(v) => out.push(Action::Free(v)),
            Task::Top { a, b, s } => {
                let l = (b - a + 1) as u64;
                if l == 1 {
                    out.push(Action::Compute(a));
                    out.push(Action::Step(a));
                    continue;
                }
                let j = if s == 1 {
                    l - 1
                } else {
                    argmin_convex(l - 1, |j| {
                        tables.top(l - j, s - 1).saturating_add(tables.t(j, s))
                    })
                };
                let m = a + j as u32;
                for i in a..m {
                    out.push(Action::Compute(i));
                }
                out.push(Action::Keep(m - 1));
                tasks.push(Task::Rev { a, b: m - 1, s });
                tasks.push(Task::Free(m - 1));
                tasks.push(Task::Top { a: m, b, s: s - 1 });
            }
            Task::Rev { a, b, s } => {
                let l = (b - a + 1) as u64;
                if l == 1 {
                    out.push(Action::Step(a));
                    continue;
                }
                let j = if s == 1 {
                    l - 1
                } else {
                    argmin_convex(l - 1, |j| {
                        j.saturating_add(tables.t(l - j, s - 1))
                            .saturating_add(tables.t(j, s))
                    })
                };
                let m = a + j as u32;
                for i in a..m {
                    out.push(Action::Replay(i));
                    if i > a {
                        out.push(Action::Free(i - 1));
                    }
                }
                tasks.push(Task::Rev { a, b: m - 1, s });
                tasks.push(Task::Free(m - 1));
                tasks.push(Task::Rev { a: m, b, s: s - 1 });
            }
        }
    }
}

/// Emits Revolve's reversal of values `a..=b` (value `a - 1` held, a leaf for `a = 0`) with
/// room for `s` of them.
fn reverse(tables: &Tables, a: u32, b: u32, s: u64, out: &mut Vec<Action>) {
    run(tables, vec![Task::Rev { a, b, s }], out);
}

/// An optimal schedule for a uniform chain with room for `slots` values (see the module
/// docs); `None` if `slots` is zero and the chain has more than one op.
pub(crate) fn schedule(view: &GraphView, slots: u64) -> Option<Schedule> {
    let n = view.len() as u32;
    if n == 0 {
        return Some(Schedule::default());
    }
    let tables = Tables::new(n as u64, slots.saturating_add(1));
    if tables.top(n as u64, slots) == u64::MAX {
        return None;
    }
    let mut out = Vec::new();
    run(
        &tables,
        vec![Task::Top {
            a: 0,
            b: n - 1,
            s: slots,
        }],
        &mut out,
    );
    Some(Schedule::new(out))
}

/// A backward pass for a general chain ([`general_chain`]) whose forward pass left exactly
/// `held` held (an online forward pass, say), as a whole schedule: a forward pass that keeps
/// `held`, then the backward. The backward keeps the lowest few held values (none, one, two,
/// four ... all of them: whichever the simulator finds cheapest), drops the others, and
/// reverses each segment between two kept values, from the last, by Revolve with the slots
/// the kept values below it leave (a segment's end is freed first: only the segment above
/// reads it). Returns the schedule and its recompute cost (as `simulate` measures it);
/// `None` when the view is not such a chain or nothing fits.
///
/// NOTE [resume-chain]: the planner's online eviction, resumed on that state, replays a
/// value's whole segment for each step (about n^2 / 4s replays for n ops and s values);
/// Revolve per segment replays a few times n (a 3000-op chain at 10 values: 241k replays
/// online, about 26k so).
pub(crate) fn resume(view: &GraphView, held: &[u32], budget: u64) -> Option<(Schedule, f64)> {
    let slot = general_chain(view)?;
    let fixed: u64 = view.nodes().iter().map(|node| node.fixed_bytes).sum();
    let room = budget.checked_sub(fixed)? / slot;
    let n = view.len() as u32;
    let mut held = held.to_vec();
    held.sort_unstable();
    held.dedup();
    if held.last().is_some_and(|&h| h >= n) || held.len() as u64 > room {
        return None;
    }
    let mut forward = Vec::with_capacity(2 * n as usize);
    for i in 0..n {
        forward.push(Action::Compute(i));
        if held.binary_search(&i).is_ok() {
            forward.push(Action::Keep(i));
        }
    }
    let tables = Tables::new(u64::from(n), room.saturating_add(1));
    let mut counts: Vec<usize> =
        core::iter::successors(Some(0), |&k| Some(if k == 0 { 1 } else { 2 * k }))
            .take_while(|&k| k < held.len())
            .collect();
    counts.push(held.len());
    let mut best: Option<(f64, Schedule)> = None;
    for keep in counts {
        let mut out = forward.clone();
        out.extend(held[keep..].iter().map(|&h| Action::Free(h)));
        if !reverse_segments(&tables, &held[..keep], n, room, &mut out) {
            continue;
        }
        let schedule = Schedule::new(out);
        if let Ok(outcome) = super::simulate(view, &schedule, budget)
            && best
                .as_ref()
                .is_none_or(|(cost, _)| outcome.recompute_cost < *cost)
        {
            best = Some((outcome.recompute_cost, schedule));
        }
    }
    best.map(|(cost, schedule)| (schedule, cost))
}

/// Emits the reversal of values `0..n` with `kept` (sorted) held and room for `room`
/// values: each segment between two kept values, from the last, by Revolve with the slots
/// the kept values below it leave. `false` when a segment has no room.
fn reverse_segments(
    tables: &Tables,
    kept: &[u32],
    n: u32,
    room: u64,
    out: &mut Vec<Action>,
) -> bool {
    // Segments [a, b], from the last: a - 1 is kept (or a leaf), b is kept or the chain's end.
    let mut b = n - 1;
    loop {
        let below = kept.partition_point(|&h| h < b);
        let a = if below == 0 { 0 } else { kept[below - 1] + 1 };
        if kept.binary_search(&b).is_ok() {
            out.push(Action::Free(b));
        }
        let s = room - below as u64;
        if b > a && s == 0 {
            return false;
        }
        reverse(tables, a, b, s, out);
        if a == 0 {
            return true;
        }
        b = a - 1;
    }
}
