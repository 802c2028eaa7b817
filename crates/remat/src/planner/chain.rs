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
//! rev(a, b, s)  = steps b..a with value a-1 held (a leaf for a = 0), nothing of a..b held;
//! top(a, b, s)  = the same, its first pass being the forward pass (free);
//! held(a, b, s) = the same with value b (read by its own step) still held, in one of the s
//!                 slots. Each is the cheapest of:
//!   the sweep:  one straight pass from a-1 (replaying up to the last value a step of a..=b
//!               reads and is not held), keeping the values read (one slot each; the value
//!               in flight takes the slot of one kept later, or of the one it takes), then
//!               the steps;
//!   a split:    for m in a+1..=b,
//!                 advance a..m-1 (free under top), each value taken by the next; keep m-1
//!               + the same sub-task on m..b with s-1 slots, from the checkpoint
//!               + rev(a, m-1, s) with the checkpoint freed, or held(a, m-1, s) with it kept
//!                 when its own step reads it (it was freed and rebuilt before);
//!   a skip:     for m in a+1..=b whose step does not read m-1, one straight pass from a-1
//!               keeping only what steps m..=b read, those steps, then rev(a, m-1, s): no
//!               checkpoint, so the right part has every slot (a value read only by its
//!               own step late in the chain, or a held b whose step goes first).
//! ```
//!
//! On every random general chain of up to 12 ops the tests try (steps reading the previous
//! value, their own, both or nothing; costs 1..=10), at every budget, this is the exact
//! optimum.
//!
//! Revolve's closed form is the case of equal costs and every step reading its input.
//!
//! Cost model: n^2 (s + 1) `rev` states (`top` only ends the chain, `held` only at values
//! their own step reads), O(n) each: O(n^3 s) with s <= n; used for views of at most
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
    /// `prefix[i]`: the cost of nodes `0..i`.
    prefix: Vec<f64>,
    /// `first_count[c]`: the first `i` with `read_count[i] >= c`.
    first_count: Vec<usize>,
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
        let mut prefix = vec![0.0; n + 1];
        for i in 0..n {
            prefix[i + 1] = prefix[i] + cost[i];
        }
        let mut first_count = Vec::new();
        for (i, &c) in read_count.iter().enumerate() {
            while first_count.len() <= c {
                first_count.push(i);
            }
        }
        let chain = Self {
            first_count,
            prefix,
            cost,
            reads_prev,
            reads_self,
            read_count,
            last_read,
        };
        (slot > 0).then_some((chain, slot))
    }

    /// The last value a straight pass from `a` replays for the steps `m..=b` (`a <= m`):
    /// the last one they read, or with `b` held, the last one below `b`.
    fn straight_last(&self, mode: Mode, m: usize, b: usize) -> Option<usize> {
        match mode {
            Mode::Held => self.read_below(m, b),
            _ => self.reads_in(m, b).0,
        }
    }

    /// What a straight pass costs: from `a - 1`, forward (`top`) or replaying up to
    /// [`straight_last`](Self::straight_last), keeping the values the steps `m..=b` read
    /// (one slot each; the value in flight takes the slot of one kept later, or of the one
    /// it takes), then those steps. Infinite when they do not fit in `s` slots.
    fn straight_cost(&self, mode: Mode, a: usize, m: usize, b: usize, s: usize) -> f64 {
        if self.reads_in(m, b).1 > s {
            return f64::INFINITY;
        }
        match (mode, self.straight_last(mode, m, b)) {
            (Mode::Top, _) | (_, None) => 0.0,
            (_, Some(hi)) => self.prefix[hi + 1] - self.prefix[a],
        }
    }

    /// Emits a straight pass (see [`straight_cost`](Self::straight_cost)): each value not
    /// kept is taken by the next replay; then the steps `b..=m`, each value freed after its
    /// last reader.
    fn straight(&self, mode: Mode, a: usize, m: usize, b: usize, out: &mut Vec<Action>) {
        let kept = |i: usize| i >= m && self.read(i, b);
        if mode == Mode::Top {
            for i in a..=b {
                out.push(Action::Compute(i as u32));
                if kept(i) {
                    out.push(Action::Keep(i as u32));
                }
            }
        } else if let Some(hi) = self.straight_last(mode, m, b) {
            for i in a..=hi {
                out.push(Action::Replay(i as u32));
                if i > a && !kept(i - 1) {
                    out.push(Action::Free(i as u32 - 1));
                }
            }
        }
        for j in (m..=b).rev() {
            out.push(Action::Step(j as u32));
            // Value j's last reader is its own step; value j - 1's is step j unless its own
            // step reads it too.
            if self.reads_self[j] {
                out.push(Action::Free(j as u32));
            }
            if j > m && self.reads_prev[j] && !self.reads_self[j - 1] {
                out.push(Action::Free(j as u32 - 1));
            }
        }
    }

    /// The `m` in `a + 1..=b` for which steps `m..=b` read exactly `s` values of `m..=b`.
    fn reading_exactly(&self, a: usize, b: usize, s: usize) -> std::ops::Range<usize> {
        // count(m..=b) = total - read_count[m], with read_count nondecreasing in m.
        let total = self.read_count[b] + usize::from(self.reads_self[b]);
        let Some(target) = total.checked_sub(s) else {
            return 0..0;
        };
        let first = |c: usize| self.first_count.get(c).copied().unwrap_or(usize::MAX);
        first(target).max(a + 1)..first(target + 1).min(b + 1)
    }

    /// Whether a step of a sub-task ending at `b` reads value `i` (`i <= b`).
    fn read(&self, i: usize, b: usize) -> bool {
        self.reads_self[i] || (i < b && self.reads_prev[i + 1])
    }

    /// The last value of `a..b` (below `b`) a step of `a..=b` reads.
    fn read_below(&self, a: usize, b: usize) -> Option<usize> {
        let last = self.last_read[b];
        (last != usize::MAX && last >= a).then_some(last)
    }

    /// The last value of `a..=b` a step of `a..=b` reads, and how many are read.
    fn reads_in(&self, a: usize, b: usize) -> (Option<usize>, usize) {
        let own = usize::from(self.reads_self[b]);
        let last = if self.reads_self[b] {
            Some(b)
        } else {
            self.read_below(a, b)
        };
        (last, self.read_count[b] - self.read_count[a] + own)
    }
}

/// Which sub-task a DP state is (NOTE \[chain-dp\]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `rev(a, b, s)`: nothing of `a..=b` held.
    Rev = 0,
    /// `top(a, b, s)`: the first pass is the forward pass.
    Top = 1,
    /// `held(a, b, s)`: value `b` (which its own step reads) still held from the split
    /// that made it a checkpoint, in one of the `s` slots.
    Held = 2,
}

/// A split's left sub-task starts with its checkpoint still held (`held`), not freed.
const LEFT_HELD: u16 = 1 << 15;

/// A skip (NOTE \[chain-dp\]): no checkpoint; the split's right part is one straight pass.
const SKIP: u16 = 1 << 14;

/// The DP table: `[mode][a][b][s]` flattened, with the best choice: `0` the sweep, else
/// the split point `m`, with [`LEFT_HELD`] or [`SKIP`].
struct Table {
    n: usize,
    slots: usize,
    cost: Vec<f64>,
    split: Vec<u16>,
}

impl Table {
    fn at(&self, mode: Mode, a: usize, b: usize, s: usize) -> usize {
        (((mode as usize) * self.n + a) * self.n + b) * (self.slots + 1) + s
    }

    fn solve(chain: &Chain, slots: usize) -> Self {
        let n = chain.cost.len();
        let size = 3 * n * n * (slots + 1);
        let mut t = Self {
            n,
            slots,
            cost: vec![f64::INFINITY; size],
            split: vec![0; size],
        };
        for len in 1..=n {
            for a in 0..=n - len {
                let b = a + len - 1;
                for s in 0..=slots {
                    for mode in [Mode::Rev, Mode::Top, Mode::Held] {
                        // `top` only ever ends the chain; `held` only at a value its
                        // own step reads.
                        let used = match mode {
                            Mode::Rev => true,
                            Mode::Top => b == n - 1,
                            Mode::Held => chain.reads_self[b],
                        };
                        if !used {
                            continue;
                        }
                        let best = t.best(chain, mode, a, b, s);
                        let k = t.at(mode, a, b, s);
                        (t.cost[k], t.split[k]) = best;
                    }
                }
            }
        }
        t
    }

    /// The cheapest way to do state `(mode, a, b, s)`, from the shorter states.
    fn best(&self, chain: &Chain, mode: Mode, a: usize, b: usize, s: usize) -> (f64, u16) {
        let mut best = (chain.straight_cost(mode, a, a, b, s), 0u16);
        // Skips: one straight pass for m..b (which then needs nothing below m), then
        // a..m-1 from a - 1. Only where steps m..=b read exactly s values: with fewer, the
        // split at m costs no more.
        for m in chain.reading_exactly(a, b, s) {
            if chain.reads_prev[m] {
                continue;
            }
            let right = chain.straight_cost(mode, a, m, b, s);
            let total = right + self.cost[self.at(Mode::Rev, a, m - 1, s)];
            if total < best.0 {
                best = (total, m as u16 | SKIP);
            }
        }
        if s == 0 {
            return best;
        }
        // Splits: advance to m - 1 and keep it, do m..b with one slot less, then a..m-1
        // (the checkpoint freed first, or still held when its own step reads it).
        for m in a + 1..=b {
            let advance = if mode == Mode::Top {
                0.0
            } else {
                chain.prefix[m] - chain.prefix[a]
            };
            let right = self.cost[self.at(mode, m, b, s - 1)];
            let freed = self.cost[self.at(Mode::Rev, a, m - 1, s)];
            let (left, flag) = if chain.reads_self[m - 1] {
                let held = self.cost[self.at(Mode::Held, a, m - 1, s)];
                if held < freed {
                    (held, LEFT_HELD)
                } else {
                    (freed, 0)
                }
            } else {
                (freed, 0)
            };
            let total = advance + right + left;
            if total < best.0 {
                best = (total, m as u16 | flag);
            }
        }
        best
    }
}

enum Task {
    Solve {
        mode: Mode,
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
    if !table.cost[table.at(Mode::Top, 0, n - 1, slots)].is_finite() {
        return None;
    }
    let mut out = Vec::new();
    let mut tasks = vec![Task::Solve {
        mode: Mode::Top,
        a: 0,
        b: n - 1,
        s: slots,
    }];
    while let Some(task) = tasks.pop() {
        let (mode, a, b, s) = match task {
            Task::Free(v) => {
                out.push(Action::Free(v));
                continue;
            }
            Task::Solve { mode, a, b, s } => (mode, a, b, s),
        };
        let split = table.split[table.at(mode, a, b, s)];
        let m = (split & !(LEFT_HELD | SKIP)) as usize;
        if m == 0 {
            chain.straight(mode, a, a, b, &mut out);
            continue;
        }
        if split & SKIP != 0 {
            chain.straight(mode, a, m, b, &mut out);
            tasks.push(Task::Solve {
                mode: Mode::Rev,
                a,
                b: m - 1,
                s,
            });
            continue;
        }
        for i in a..m {
            if mode == Mode::Top {
                out.push(Action::Compute(i as u32));
            } else {
                out.push(Action::Replay(i as u32));
                if i > a {
                    out.push(Action::Free(i as u32 - 1));
                }
            }
        }
        if mode == Mode::Top {
            // A replayed value is held as it arrives; a computed one is kept explicitly.
            out.push(Action::Keep(m as u32 - 1));
        }
        if split & LEFT_HELD != 0 {
            tasks.push(Task::Solve {
                mode: Mode::Held,
                a,
                b: m - 1,
                s,
            });
        } else {
            tasks.push(Task::Solve {
                mode: Mode::Rev,
                a,
                b: m - 1,
                s,
            });
            tasks.push(Task::Free(m as u32 - 1));
        }
        tasks.push(Task::Solve {
            mode,
            a: m,
            b,
            s: s - 1,
        });
    }
    Some(Schedule::new(out))
}
