//! A long chain that repeats, solved by block counts (NOTE [rotor-run] on [`Run`]): its
//! tables, the block's tape, and the galloping searches of their entries (NOTE
//! \[run-hints\]); where many blocks merge into one (NOTE \[run-merge\]).

use std::collections::HashMap;
use std::sync::Arc;

use super::cuts::{Solutions, group_item};
use super::level::{BASE, ENTRY_BYTES, INF, Item, Kind, Level, SPLIT, Scale, TableMeter};
use crate::planner::blocks::Shape;

/// NOTE [run-units]: the most memory units of a run's tables. A unit of the grouped levels
/// (at most [`UNITS`](super::solve::UNITS)) may hold many boundaries of a long chain of
/// small blocks: at 300 slots of a 10,000-stage chain a unit held four, so the DP saw 75
/// checkpoints where 300 fit, and replayed up to a forward pass more than Revolve. A run's
/// tables have `(blocks + 1) (units + 1)` entries each (at most [`MAX_BLOCKS`] blocks at
/// this many units, within NOTE \[planner-memory\]'s cap), O(log blocks) work per entry, so
/// it can afford boundary-sized units up to this many; beyond it a unit holds a few
/// boundaries of a chain whose every checkpoint fits anyway.
pub(super) const RUN_UNITS: u64 = 1024;

/// NOTE [rotor-run]: a long chain that repeats (an unrolled RNN, a stack of equal residual
/// blocks, the steps of a solver) is a *run*: a head, `k` equal blocks of `p` stages, and a
/// tail. The grouped levels (NOTE \[rotor\]) reverse each group from its own input, which
/// holds one more value per level than a single level needs; a run is solved as one level,
/// indexed by how many blocks a sub-task spans instead of where it starts (the blocks are
/// equal), so its checkpoints may sit at any block end. With `l` blocks and room `m`:
///
/// ```text
/// R(l, m)   l blocks, their input held, backward (rev);  RT(l, m) the same, then the tail;
/// T(l, m)   l blocks and the tail, their first pass the forward pass (top);
/// H(l, m)   the head and l blocks from the leaves, rev;  HT(l, m) and the tail, rev;
/// TH(l, m)  the head, l blocks and the tail, top (the whole step).
/// ```
///
/// Each is a block's (or the head's, or the tail's) own DP at its base, else the cheapest
/// split after the head and `j` blocks: replay (rev) or compute (top) up to there, keep that
/// boundary, do the rest from it (the `R`, `RT` or `T` of `l - j` blocks with the boundary's
/// room less), free it, then the prefix (`R` or `H` of `j` blocks, with the constants of the
/// rest released). The best `j` is found by a binary search (the cost is convex in `j` for
/// Revolve's recursion, which this is with costs) and a check of its neighbours.
///
/// Cost model: six tables of `(k + 1) (m + 1)` entries, O(log k) each.
pub(super) struct Run {
    pub(super) head: Option<Item>,
    pub(super) block: Item,
    /// The block's stages taped one after the other (NOTE \[rotor\]'s tape, for a whole
    /// block), one per inner plan index: a rest may run from the tape, then the block's
    /// steps from it.
    pub(super) tapes: Vec<BlockTape>,
    pub(super) tail: Item,
    head_stages: usize,
    block_stages: usize,
    pub(super) k: usize,
    tables: Vec<Vec<f64>>,
    pub(super) choices: Vec<Vec<u32>>,
    /// Counts the tables (NOTE \[planner-memory\]).
    meter: Option<TableMeter>,
}

/// A block's tape: every stage's tape, made one after the other.
pub(super) struct BlockTape {
    /// The stages' shapes, in order, and the inner plan each tapes with.
    pub(super) shapes: Vec<Arc<Shape>>,
    pub(super) options: Vec<usize>,
    /// Units held while the rest runs, while the tape is made (rev form, forward-pass
    /// form), and while the block's steps run from it.
    pub(super) bytes: usize,
    making: usize,
    top_making: usize,
    backward: usize,
    /// Replay cost in the rev form and in the forward-pass form.
    rev_cost: f64,
    top_cost: f64,
}

impl BlockTape {
    /// The block's stages each taped with its inner plan `k` (its last, if it has fewer).
    fn new(block: &Item, k: usize, scale: Scale) -> Option<Self> {
        let Kind::Group(level) = &block.kind else {
            return None;
        };
        let mut shapes = Vec::new();
        for item in &level.items {
            match &item.kind {
                Kind::Stage(shape) => shapes.push(shape.clone()),
                Kind::Group(_) => return None,
            }
        }
        let (mut held, mut making, mut backward, mut top_making) = (0u64, 0u64, 0u64, 0u64);
        let (mut rev_cost, mut top_cost) = (0.0, 0.0);
        let mut options = Vec::new();
        for shape in &shapes {
            let k = k.min(shape.inners.len() - 1);
            let inner = &shape.inners[k];
            let made = &shape.tapes[k];
            let own = inner.top_peak.saturating_sub(shape.fixed);
            making = making.max(held + made.forward.peak);
            top_making = top_making.max(held + own);
            backward = backward.max(held + own);
            held += made.bytes;
            rev_cost += made.forward.cost + inner.top_cost;
            top_cost += inner.top_cost;
            options.push(k);
        }
        Some(Self {
            shapes,
            options,
            bytes: scale.units(held),
            making: scale.units(making),
            top_making: scale.units(top_making),
            backward: scale.units(backward),
            rev_cost,
            top_cost,
        })
    }

    /// Whether the tape fits room `m`, and its cost there.
    fn fits(&self, m: usize, rev: bool) -> Option<f64> {
        let making = if rev { self.making } else { self.top_making };
        (self.bytes <= m && making <= m && self.backward <= m).then_some(if rev {
            self.rev_cost
        } else {
            self.top_cost
        })
    }
}

/// A run's choice: its block's tape `k` (`RUN_TAPE + k`), then the rest.
pub(super) const RUN_TAPE: u32 = 1;

const T_R: usize = 0;
const T_RT: usize = 1;
const T_T: usize = 2;
const T_H: usize = 3;
pub(super) const T_HT: usize = 4;
pub(super) const T_TH: usize = 5;

/// The most blocks of a run's tables at [`RUN_UNITS`] units (NOTE \[run-merge\]).
pub(super) const MAX_BLOCKS: usize = 1024;

/// NOTE [run-merge]: a run of `k` blocks has tables of `(k + 1) (m + 1)` entries at `m`
/// units. At [`RUN_UNITS`] units a run of more than [`MAX_BLOCKS`] blocks merges equal
/// blocks into one item, and its checkpoints sit every few blocks. At a room of a few
/// boundaries the backward of a merged item is a small Revolve of its own and the run over
/// the merged items is quadratic in their number: 10,000 power-iteration blocks one slot
/// above the smallest budget, merged by 10, replayed 503 forward passes. The units a run
/// needs grow with the boundaries its room holds, not with its length: where the tables
/// afford [`RUN_PER_BOUNDARY`] units a boundary unmerged, the run is solved unmerged at
/// those units too and the cheaper kept. Power iteration, 10,000 blocks at 1/2/3 slots:
/// 503 -> 92.5, 31.8 -> 27.1, 15.0 forward passes (from 4 slots merging wins: unchanged);
/// 2,000 blocks at 1/2/4/8 slots 170.8 -> 40.4, 20.9 -> 14.9, 7.29 -> 6.71, 3.91 -> 3.69,
/// and planning at one slot 17.4 -> 2.2 s. Merging is not only a matter of size: the
/// merged item's own levels free inputs inside it (NOTE \[rotor-owned\]), where the run's
/// tables pin every block's input. On a chain of (matmul, add, GELU) blocks the merged
/// run is the cheaper (4,000 blocks at 4 slots: 9.69 forward passes, unmerged 10.17), so
/// both are solved rather than one rule chosen, their tables side by side while compared
/// (up to 150 MB of planner memory while it plans). Planning 10,000 blocks: 0.54-0.76 s.
const RUN_PER_BOUNDARY: u64 = 16;

/// The units of an unmerged run of `blocks` blocks (NOTE \[run-merge\]): the most its
/// tables afford, if that is at least [`RUN_PER_BOUNDARY`] for each boundary the room holds.
pub(super) fn unmerged_units(
    blocks: usize,
    room: u64,
    boundary: u64,
    run_units: u64,
) -> Option<u64> {
    let entries = MAX_BLOCKS as u64 * (run_units + 1);
    let affordable = (entries / (blocks as u64 + 1)).saturating_sub(1);
    (affordable >= unmerged_needed(room, boundary)).then_some(affordable.min(run_units))
}

/// The units an unmerged run needs: [`RUN_PER_BOUNDARY`] for each boundary the room holds.
pub(super) fn unmerged_needed(room: u64, boundary: u64) -> u64 {
    (room / boundary.max(1) + 1).saturating_mul(RUN_PER_BOUNDARY)
}

/// The most tables a run solves: the lean form's six (four without it).
pub(super) const RUN_TABLES: u64 = 6;

/// A choice of a run's table: the base case, or a split after the head and `j` blocks
/// (`SPLIT + j`).
pub(super) const NO_CHOICE: u32 = u32::MAX;

/// NOTE [run-hints]: the three searches of a run's entry `(l, m)` (the first split whose
/// rest fits, the last whose prefix fits, the cheapest between) start where they ended at
/// `(l - 1, m)`: their answers move by a block or so from one row to the next, so a
/// galloping search from there takes a few probes where a binary search over `l` splits
/// took about `3 log l`. The predicates are monotone, so the answers are the same.
#[derive(Clone, Copy, Default)]
struct Hint {
    low: usize,
    high: usize,
    best: usize,
}

/// The first `j` in `lo..hi` where `pred` holds (`hi` if none), for a `pred` false then
/// true over `lo..hi`: a galloping search from `hint`.
fn first_true(lo: usize, hi: usize, hint: usize, pred: impl Fn(usize) -> bool) -> usize {
    if lo >= hi {
        return hi;
    }
    let hint = hint.clamp(lo, hi - 1);
    // Bracket the answer in (a, b]: `pred(a)` false (or `a` below `lo`), `pred(b)` true
    // (or `b == hi`).
    let (mut a, mut b);
    if pred(hint) {
        b = hint;
        let mut step = 1;
        loop {
            if b == lo {
                return lo;
            }
            let probe = b.saturating_sub(step).max(lo);
            if pred(probe) {
                b = probe;
                step *= 2;
            } else {
                a = probe;
                break;
            }
        }
    } else {
        a = hint;
        let mut step = 1;
        loop {
            let probe = (a + step).min(hi);
            if probe == hi || pred(probe) {
                b = probe;
                break;
            }
            a = probe;
            step *= 2;
        }
    }
    // pred(a) is false and pred(b) true (or b == hi): the answer is in a + 1..=b.
    while b - a > 1 {
        let mid = a + (b - a) / 2;
        if pred(mid) {
            b = mid;
        } else {
            a = mid;
        }
    }
    b
}

pub(super) fn from_leaf(table: usize) -> bool {
    table >= T_H
}

pub(super) fn to_tail(table: usize) -> bool {
    matches!(table, T_RT | T_T | T_HT | T_TH)
}

pub(super) fn top_form(table: usize) -> bool {
    matches!(table, T_T | T_TH)
}

/// The table of a split's rest (from a held boundary, to the same end, in the same form).
pub(super) fn rest_of(table: usize) -> usize {
    match table {
        T_R | T_H => T_R,
        T_RT | T_HT => T_RT,
        _ => T_T,
    }
}

/// The table of a split's prefix (rev, ending at a block).
pub(super) fn prefix_of(table: usize) -> usize {
    if from_leaf(table) { T_H } else { T_R }
}

impl Run {
    /// The run in `items` (single stages) laid out as [`Run::layout`] found it in their
    /// keys: a head of `head_stages`, `k` equal blocks of `p` stages, and a tail.
    pub(super) fn find(
        items: &[Item],
        (head_stages, p, k): (usize, usize, usize),
        scale: Scale,
        merge: usize,
        lean: bool,
    ) -> Self {
        // `merge` equal blocks make one (the tail takes what is left over): checkpoints
        // then sit every few blocks, and the tables stay small (NOTE [run-merge]).
        let (p, k) = (p * merge, k / merge);
        // A run's tables hold every part's input (pinned): no gain for freeing one.
        let mut solved = HashMap::new();
        let part = |items: &[Item], solved: &mut Solutions| group_item(items, scale, 0, solved);
        let head = (head_stages > 0).then(|| part(&items[..head_stages], &mut solved));
        let block = part(&items[head_stages..head_stages + p], &mut solved);
        let tail = part(&items[head_stages + k * p..], &mut solved);
        let options = match &block.kind {
            Kind::Group(level) => level
                .items
                .iter()
                .map(|item| match &item.kind {
                    Kind::Stage(shape) => shape.inners.len(),
                    Kind::Group(_) => 0,
                })
                .max()
                .unwrap_or(0),
            Kind::Stage(_) => 0,
        };
        let tapes = (0..options)
            .filter_map(|k| BlockTape::new(&block, k, scale))
            .collect();
        let mut run = Self {
            head,
            tapes,
            block,
            tail,
            head_stages,
            block_stages: p,
            k,
            tables: vec![Vec::new(); 6],
            choices: vec![Vec::new(); 6],
            meter: None,
        };
        run.solve(scale, lean);
        run
    }

    /// The run's layout in a chain of stages with these keys, `(head stages, stages per
    /// block, blocks)`, if it repeats: a head of at most 8 stages, at least 8 equal blocks
    /// of at most 8 stages, and a tail of at least one stage and at most 16; the longest
    /// repeated part wins.
    pub(super) fn layout(keys: &[u64]) -> Option<(usize, usize, usize)> {
        let n = keys.len();
        let mut best: Option<(usize, usize, usize)> = None;
        for p in 1..=8usize {
            for head in 0..=8usize.min(n) {
                let mut k = 0;
                while head + (k + 1) * p < n
                    && (0..p).all(|i| keys[head + k * p + i] == keys[head + i])
                {
                    k += 1;
                }
                let tail = n - head - k * p;
                if k >= 8
                    && (1..=16).contains(&tail)
                    && best.is_none_or(|(_, bp, bk)| k * p > bk * bp)
                {
                    best = Some((head, p, k));
                }
            }
        }
        best
    }

    pub(super) fn at(&self, l: usize, m: usize, scale: Scale) -> usize {
        l * (scale.m_max + 1) + m
    }

    pub(super) fn get(&self, table: usize, l: usize, m: usize, scale: Scale) -> f64 {
        self.tables[table]
            .get(self.at(l, m, scale))
            .copied()
            .unwrap_or(INF)
    }

    fn solve(&mut self, scale: Scale, lean: bool) {
        let width = scale.m_max + 1;
        let wanted: &[usize] = if lean {
            &[T_R, T_RT, T_T, T_H, T_HT, T_TH]
        } else {
            &[T_R, T_T, T_H, T_TH]
        };
        let entries = wanted.len() * (self.k + 1) * width;
        self.meter = Some(TableMeter::new(entries as u64 * ENTRY_BYTES));
        for &t in wanted {
            self.tables[t] = vec![INF; (self.k + 1) * width];
            self.choices[t] = vec![NO_CHOICE; (self.k + 1) * width];
        }
        // Where the previous row's searches ended, per table and room (NOTE [run-hints]).
        let mut hints = vec![vec![Hint::default(); width]; 6];
        for l in 0..=self.k {
            for &table in wanted {
                for (m, hint) in hints[table].iter_mut().enumerate() {
                    let best = self.best(table, l, m, scale, hint);
                    let at = self.at(l, m, scale);
                    (self.tables[table][at], self.choices[table][at]) = best;
                }
            }
        }
    }

    /// The boundary units after the head and `j` blocks.
    pub(super) fn boundary_units(&self, j: usize) -> usize {
        match (j, &self.head) {
            (0, Some(head)) => head.boundary_units,
            (0, None) => 0,
            _ => self.block.boundary_units,
        }
    }

    /// What a split after the head (from the leaves) and `j` blocks costs in `table` at
    /// `(l, m)`.
    fn split(&self, table: usize, l: usize, j: usize, m: usize, scale: Scale) -> f64 {
        let x = self.boundary_units(j);
        if x > m {
            return INF;
        }
        let leaf = from_leaf(table);
        let mut sweep = 0.0;
        if !top_form(table) {
            let head = self.head.as_ref().filter(|_| leaf);
            let mut need = head.map_or(0, |h| h.sweep_first);
            if j >= 1 {
                need = need.max(if head.is_some() {
                    self.block.sweep_later
                } else {
                    self.block.sweep_first
                });
            }
            if j >= 2 {
                need = need.max(self.block.sweep_later);
            }
            if need > m {
                return INF;
            }
            sweep = head.map_or(0.0, |h| h.sweep_cost) + j as f64 * self.block.sweep_cost;
        }
        let rest = self.get(rest_of(table), l - j, m - x, scale);
        if rest == INF {
            return INF;
        }
        let fixed =
            (l - j) as u64 * self.block.fixed + if to_tail(table) { self.tail.fixed } else { 0 };
        let room = (m + (fixed / scale.unit) as usize).min(scale.m_max);
        sweep + rest + self.get(prefix_of(table), j, room, scale)
    }

    fn best(&self, table: usize, l: usize, m: usize, scale: Scale, hint: &mut Hint) -> (f64, u32) {
        let leaf = from_leaf(table);
        let tail = to_tail(table);
        let mut best = (INF, NO_CHOICE);
        match (leaf, tail, l) {
            (false, false, 0) => return best,
            (false, false, 1) => best = (self.block.rev[m], BASE),
            (true, false, 0) => best = (self.head.as_ref().map_or(0.0, |h| h.rev[m]), BASE),
            (false, true, 0) => {
                let curve = if top_form(table) {
                    &self.tail.top
                } else {
                    &self.tail.rev
                };
                best = (curve[m], BASE);
            }
            _ => {}
        }
        // The first block's tape, the rest from it (NOTE [rotor]'s tape, block-wise).
        let min_rest = if tail { 0 } else { 1 };
        if !leaf && l > min_rest {
            for (k, tape) in self.tapes.iter().enumerate() {
                if let Some(cost) = tape.fits(m, !top_form(table)) {
                    let rest = self.get(table, l - 1, m - tape.bytes, scale);
                    if cost + rest < best.0 {
                        best = (cost + rest, RUN_TAPE + k as u32);
                    }
                }
            }
        }
        let lo = if leaf { 0 } else { 1 };
        let hi = if tail { l } else { l.saturating_sub(1) };
        if lo > hi || (!leaf && !tail && l < 2) {
            return best;
        }
        let consider = |j: usize, best: &mut (f64, u32)| {
            let cost = self.split(table, l, j, m, scale);
            if cost < best.0 {
                *best = (cost, SPLIT + j as u32);
            }
        };
        if hi - lo <= 48 {
            for j in lo..=hi {
                consider(j, &mut best);
            }
            return best;
        }
        // The splits that fit are an interval: the rest (after the split) fits when it is
        // short enough, the prefix when it is short enough. Find it, then the cheapest split
        // in it by a binary search on the (convex) cost.
        for j in lo..=(lo + 2).min(hi) {
            consider(j, &mut best);
        }
        let first = lo + 3;
        if first > hi {
            return best;
        }
        let x = self.block.boundary_units;
        if x > m {
            return best;
        }
        let rest_fits = |j: usize| self.get(rest_of(table), l - j, m - x, scale) < INF;
        let fixed =
            |j: usize| (l - j) as u64 * self.block.fixed + if tail { self.tail.fixed } else { 0 };
        let prefix_fits = |j: usize| {
            let room = (m + (fixed(j) / scale.unit) as usize).min(scale.m_max);
            self.get(prefix_of(table), j, room, scale) < INF
        };
        // The first split whose rest fits, and the last whose prefix fits.
        let low = first_true(first, hi + 1, hint.low, rest_fits);
        let high = first_true(first, hi + 1, hint.high, |j| !prefix_fits(j)).saturating_sub(1);
        (hint.low, hint.high) = (low, high + 1);
        if low > high {
            return best;
        }
        let (first, hi) = (low, high);
        let a = first_true(first, hi, hint.best, |j| {
            self.split(table, l, j, m, scale) <= self.split(table, l, j + 1, m, scale)
        });
        hint.best = a;
        for j in a.saturating_sub(3).max(first)..=(a + 3).min(hi) {
            consider(j, &mut best);
        }
        best
    }

    /// The first stage of block `i`.
    pub(super) fn block_stage(&self, i: usize) -> usize {
        self.head_stages + i * self.block_stages
    }

    pub(super) fn level(item: &Item) -> Arc<Level> {
        match &item.kind {
            Kind::Group(level) => level.clone(),
            Kind::Stage(_) => unreachable!("remat internal error: a run's parts are groups"),
        }
    }
}
