//! Optimal checkpointing of a *general chain*: Revolve's recursion with each op's own cost,
//! by dynamic programming (NOTE [chain-dp]).
//!
//! NOTE [chain-dp]: a general chain is a view where node `i` replays from node `i - 1` only
//! (node 0 from leaves and constants), its step reads `i - 1`, `i`, both or nothing, and
//! backward steps run in reverse index order; values may differ in cost, not much in size (each takes one
//! slot of the largest size). An MLP's linear -> add bias -> activation layers and its loss
//! make one. With `s` slots (the values held besides the one a sub-task starts from; the
//! constants are set aside first):
//!
//! ```text
//! rev(a, b, s)  = steps b..a with value a-1 held (a leaf for a = 0), nothing of a..b held:
//!   the sweep:  replay a.. up to the last value a step of a..=b reads, keeping those values
//!               (one slot each, plus one for the value in flight), then the steps
//!   or a split: min over m in a+1..=b of
//!            cost(a..m-1)   replay a..m-1, each value freed at the next replay; keep m-1
//!          + rev(m, b, s-1) the steps after it, from the checkpoint
//!          + rev(a, m-1, s) then the steps before it, the checkpoint freed
//! top(a, b, s) = the same, the first sweep being the forward pass (free).
//! ```
//!
//! On every random general chain of up to 12 ops whose steps read no output of their own
//! the tests try, at every budget, this is the exact optimum; with such reads (a checkpoint
//! its own step also reads is freed and rebuilt), it is within the bounds the tests state.
//!
//! Revolve's closed form is the case of equal costs and every step reading its input.
//!
//! Cost model: O(n^2 s) states, O(n) each: O(n^3 s) with s <= n; used for views of at most
//! [`MAX_NODES`] nodes. The schedule is emitted with an explicit stack.
//!
//! # Invariants
//! - The schedule is valid for the view (the planner checks it with `simulate` before use);
//!   its replay cost is the recursion's optimum.

use super::{Action, GraphView, Schedule};

/// The largest view the DP plans (O(n^3 s) time, O(n^2 s) memory).
pub(crate) const MAX_NODES: usize = 96;

/// The most `n^3 (s + 1)` the DP takes on (about 20 ms): past it, at loose budgets, the
/// executor's plans are as good.
const MAX_WORK: usize = 16_000_000;

/// What each step reads, for a general chain.
struct Chain {
    cost: Vec<f64>,
    /// Whether step `i` reads value `i - 1`.
    reads_prev: Vec<bool>,
    /// Whether step `i` reads value `i` (its own output).
    reads_self: Vec<bool>,
    /// `read_count[i]`: values among `0..i` read by their own step or the next one.
    read_count: Vec<usize>,
    /// `last_read[i]`: the last such value below `i` (`usize::MAX`: none).
    last_read: Vec<usize>,
}

impl Chain {
    /// The chain behind `view`, if it is one (see NOTE \[chain-dp\]); with its slot size.
    fn of(view: &GraphView) -> Option<(Self, u64)> {
        let n = view.len();
        if !(2..=MAX_NODES).contains(&n) {
            return None;
        }
        let reverse = view.step_order().iter().copied().eq((0..n as u32).rev());
        if !reverse {
            return None;
        }
        let mut cost = Vec::with_capacity(n);
        let mut reads_prev = Vec::with_capacity(n);
        let mut reads_self = Vec::with_capacity(n);
        let mut slot = 0;
        for (i, node) in view.nodes().iter().enumerate() {
            let i = i as u32;
            let prev_only = |vs: &[u32]| vs.iter().all(|&v| i > 0 && v == i - 1);
            let steps_ok = node
                .step_reads
                .iter()
                .all(|&v| v == i || (i > 0 && v == i - 1));
            if !prev_only(&node.inputs)
                || !steps_ok
                || !node.replayable
                || node.forced.is_some()
                || (i > 0 && node.inputs.is_empty())
            {
                return None;
            }
            cost.push(node.cost);
            reads_prev.push(i > 0 && node.step_reads.contains(&(i - 1)));
            reads_self.push(node.step_reads.contains(&i));
            slot = slot.max(node.bytes);
        }
        let mut read_count = vec![0; n + 1];
        let mut last_read = vec![usize::MAX; n + 1];
        for i in 0..n {
            let read = reads_self[i] || reads_prev.get(i + 1).copied().unwrap_or(false);
            read_count[i + 1] = read_count[i] + usize::from(read);
            last_read[i + 1] = if read { i } else { last_read[i] };
        }
        let chain = Self {
            cost,
            reads_prev,
            reads_self,
            read_count,
            last_read,
        };
        (slot > 0).then_some((chain, slot))
    }

    /// Whether a step of a sub-task ending at `b` reads value `i` (`i <= b`).
    fn read(&self, i: usize, b: usize) -> bool {
        self.reads_self[i] || (i < b && self.reads_prev[i + 1])
    }

    /// The last value of `a..=b` a step of `a..=b` reads, and how many are read.
    fn reads_in(&self, a: usize, b: usize) -> (Option<usize>, usize) {
        let own = usize::from(self.reads_self[b]);
        let last = if self.reads_self[b] {
            Some(b)
        } else {
            let last = self.last_read[b];
            (last != usize::MAX && last >= a).then_some(last)
        };
        (last, self.read_count[b] - self.read_count[a] + own)
    }
}

/// The DP table: `[top?][a][b][s]` flattened, with the best split (`0`: the base case).
struct Table {
    n: usize,
    slots: usize,
    cost: Vec<f64>,
    split: Vec<u16>,
}

impl Table {
    fn at(&self, top: bool, a: usize, b: usize, s: usize) -> usize {
        (((top as usize) * self.n + a) * self.n + b) * (self.slots + 1) + s
    }

    fn solve(chain: &Chain, slots: usize) -> Self {
        let n = chain.cost.len();
        let size = 2 * n * n * (slots + 1);
        let mut t = Self {
            n,
            slots,
            cost: vec![f64::INFINITY; size],
            split: vec![0; size],
        };
        // prefix[i] = cost of nodes 0..i.
        let mut prefix = vec![0.0; n + 1];
        for i in 0..n {
            prefix[i + 1] = prefix[i] + chain.cost[i];
        }
        for len in 1..=n {
            for a in 0..=n - len {
                let b = a + len - 1;
                for s in 0..=slots {
                    for top in [false, true] {
                        // The sweep (split 0): one pass over a..b keeping the values
                        // its steps read; a replay stops at the last one read.
                        let (last, count) = chain.reads_in(a, b);
                        let sweep = match last {
                            None => 0.0,
                            Some(_) if top && count <= s => 0.0,
                            Some(hi) if !top && count < s => prefix[hi + 1] - prefix[a],
                            Some(_) => f64::INFINITY,
                        };
                        let mut best = (sweep, 0u16);
                        if s > 0 {
                            for m in a + 1..=b {
                                let advance = if top { 0.0 } else { prefix[m] - prefix[a] };
                                let right = t.cost[t.at(top, m, b, s - 1)];
                                let left = t.cost[t.at(false, a, m - 1, s)];
                                let total = advance + right + left;
                                if total < best.0 {
                                    best = (total, m as u16);
                                }
                            }
                        }
                        let k = t.at(top, a, b, s);
                        t.split[k] = best.1;
                        let value = best.0;
                        let k = t.at(top, a, b, s);
                        t.cost[k] = value;
                    }
                }
            }
        }
        t
    }
}

enum Task {
    Solve {
        top: bool,
        a: usize,
        b: usize,
        s: usize,
    },
    Free(u32),
}

/// The optimal general-chain schedule for `view` under `budget`, or `None` when the view is
/// not a general chain (NOTE \[chain-dp\]) or nothing fits.
pub(crate) fn schedule(view: &GraphView, budget: u64) -> Option<Schedule> {
    let (chain, slot) = Chain::of(view)?;
    let fixed: u64 = view.nodes().iter().map(|n| n.fixed_bytes).sum();
    let n = chain.cost.len();
    let slots = (budget.checked_sub(fixed)? / slot).min(n as u64) as usize;
    if (n * n * n).saturating_mul(slots + 1) > MAX_WORK {
        return None;
    }
    let table = Table::solve(&chain, slots);
    if !table.cost[table.at(true, 0, n - 1, slots)].is_finite() {
        return None;
    }
    let mut out = Vec::new();
    let mut tasks = vec![Task::Solve {
        top: true,
        a: 0,
        b: n - 1,
        s: slots,
    }];
    while let Some(task) = tasks.pop() {
        let (top, a, b, s) = match task {
            Task::Free(v) => {
                out.push(Action::Free(v));
                continue;
            }
            Task::Solve { top, a, b, s } => (top, a, b, s),
        };
        let m = table.split[table.at(top, a, b, s)] as usize;
        if m == 0 {
            // The sweep: forward (or replay up to the last value read), keeping what the
            // steps read; then the steps, each value freed after its reader.
            let (last, _) = chain.reads_in(a, b);
            if top {
                for i in a..=b {
                    out.push(Action::Compute(i as u32));
                    if chain.read(i, b) {
                        out.push(Action::Keep(i as u32));
                    }
                }
            } else if let Some(hi) = last {
                for i in a..=hi {
                    out.push(Action::Replay(i as u32));
                    if i > a && !chain.read(i - 1, b) {
                        out.push(Action::Free(i as u32 - 1));
                    }
                }
            }
            for j in (a..=b).rev() {
                out.push(Action::Step(j as u32));
                // Value j's last reader is its own step; value j - 1's is step j unless
                // its own step reads it too.
                if chain.reads_self[j] {
                    out.push(Action::Free(j as u32));
                }
                if j > a && chain.reads_prev[j] && !chain.reads_self[j - 1] {
                    out.push(Action::Free(j as u32 - 1));
                }
            }
            continue;
        }
        for i in a..m {
            if top {
                out.push(Action::Compute(i as u32));
            } else {
                out.push(Action::Replay(i as u32));
                if i > a {
                    out.push(Action::Free(i as u32 - 1));
                }
            }
        }
        if top {
            // A replayed value is held as it arrives; a computed one is kept explicitly.
            out.push(Action::Keep(m as u32 - 1));
        }
        tasks.push(Task::Solve {
            top: false,
            a,
            b: m - 1,
            s,
        });
        tasks.push(Task::Free(m as u32 - 1));
        tasks.push(Task::Solve {
            top,
            a: m,
            b,
            s: s - 1,
        });
    }
    Some(Schedule::new(out))
}
