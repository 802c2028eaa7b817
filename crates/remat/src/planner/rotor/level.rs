//! The DP of one level of items (NOTE \[rotor\] in `mod.rs`): its `rev` and `top` tables,
//! pinned, owned and absent, over a level's items (stages, or groups solved by their own
//! level), at one memory [`Scale`]; the items, the choices the tables record, and the
//! meter that counts the tables' bytes (NOTE \[planner-memory\] in `solve.rs`).
//!
//! NOTE [rotor-skip]: a stage whose steps read nothing (a bias add, a residual sum) needs
//! nothing held to step. `rev(s, t, m)` may run such a last stage `t` first and go on with
//! `rev(s, t - 1, m + its constants)`: without it the DP rebuilt the input of every such
//! stage that no step reads (the benchmark's MLP at 5% of its keep-all bytes: 36.8
//! forward passes of recompute where the optimum is 23.6; with it 24.6).
//!
//! NOTE [rotor-owned]: Rotor's chains hold a stage's input until its backward step, which
//! reads it. Here a step may not read its input (a ReLU's reads its output, an add's
//! nothing), and a value held for nothing crowds out a value that is read. So each table
//! comes twice: *pinned* (the caller holds the input of `s` throughout, as above) and
//! *owned* (the sub-chain frees the input of `s` once it is of no more use, and counts its
//! bytes as room from then on). An owned tape of stage `s` whose steps do not read its input
//! and whose inner plan's backward part replays nothing from it frees the input right
//! after the tape is made; a split's rest owns the boundary the split kept, and a tape's
//! rest owns the tape's boundary where the stage's own steps do not read it. The root's
//! input is a leaf; a level's first item counts no room for freeing its input (its bytes
//! are outside the level), though it frees it. Owned is never dearer than pinned (more
//! room), and doubles the tables' size and work.
//!
//! NOTE [rotor-run-ahead]: in the forward pass, `top(s, m)` may also run `s..s'` keeping
//! nothing of it, go on with `top(s', m)` without its input (NOTE \[rotor-absent\]'s
//! table), and step `s..s'` last, rebuilt from the input of `s`: a split whose boundary
//! nothing after it reads. Random block chains (`random_block_chains_against_the_exact_
//! optimum`): at the exact optimum in 4,174 of 5,441 cases -> 4,230 of 5,460 (the chain's
//! plan fits 19 budgets more); the recorded views plan as before. O(n) more work per `top`
//! entry.

use std::sync::Arc;

use crate::planner::blocks::Shape;

pub(super) const INF: f64 = f64::INFINITY;

/// `top`s. The `rev` tables hold `s <= t` only (NOTE \[rev-triangle\]).
pub(super) fn level_entries(n: usize, width: usize) -> u64 {
    ((n * (n + 1) + 3 * n) * width) as u64
}

/// Pairs `s <= t` of items of a level of `n`: the rows of a `rev` table.
fn rev_rows(n: usize) -> usize {
    n * (n + 1) / 2
}

/// Bytes of one table entry: a cost and a choice.
pub(super) const ENTRY_BYTES: u64 = 12;

thread_local! {
    /// Bytes of DP tables alive on this thread, and their peak since the last
    /// [`TableMeter::start`] (NOTE \[planner-memory\]).
    static TABLE_BYTES: core::cell::Cell<(u64, u64)> = const { core::cell::Cell::new((0, 0)) };
}

/// Counts the bytes of a set of DP tables while they live (NOTE \[planner-memory\]).
pub(super) struct TableMeter(u64);

impl TableMeter {
    pub(super) fn new(bytes: u64) -> Self {
        TABLE_BYTES.with(|c| {
            let (live, peak) = c.get();
            c.set((live + bytes, peak.max(live + bytes)));
        });
        Self(bytes)
    }

    /// Restarts the peak at the bytes alive now; returns that level.
    pub(super) fn start() -> u64 {
        TABLE_BYTES.with(|c| {
            let (live, _) = c.get();
            c.set((live, live));
            live
        })
    }

    /// The peak since [`TableMeter::start`].
    pub(super) fn peak() -> u64 {
        TABLE_BYTES.with(|c| c.get().1)
    }
}

impl Drop for TableMeter {
    fn drop(&mut self) {
        TABLE_BYTES.with(|c| {
            let (live, peak) = c.get();
            c.set((live.saturating_sub(self.0), peak));
        });
    }
}

/// A choice of the DP: the base case, the tape of inner plan `k` (`TAPE + k`), or a split
/// at `s'` (`SPLIT + s'`).
pub(super) const BASE: u32 = 0;
pub(super) const TAPE: u32 = 1;
pub(super) const SPLIT: u32 = 1 << 16;
/// The skip of a last item whose steps read nothing (NOTE \[rotor-skip\]).
pub(super) const SKIP: u32 = SPLIT - 1;
/// A split of the forward pass at `s'` that keeps no boundary (`SPLIT_ABSENT + s'`; NOTE
/// \[rotor-run-ahead\]).
pub(super) const SPLIT_ABSENT: u32 = 1 << 24;
/// The tape of inner plan `k` (`TAPE_DROP + k`) whose boundary the next stages do without
/// (NOTE \[rotor-absent\]).
pub(super) const TAPE_DROP: u32 = 1 << 8;

/// One item of a level: a stage, or a group of consecutive items solved by its own level.
#[derive(Clone)]
pub(super) struct Item {
    /// The item's first stage, relative to its level's first, and its stage count.
    pub(super) first: usize,
    pub(super) stages: usize,
    pub(super) key: u64,
    /// Boundary bytes and units.
    pub(super) boundary: u64,
    pub(super) boundary_units: usize,
    /// Constants on the item's edges.
    pub(super) fixed: u64,
    /// A straight replay through the item: cost, and room it needs when the sweep starts
    /// here (its input held outside) or runs through (its input part of the room).
    pub(super) sweep_cost: f64,
    pub(super) sweep_first: usize,
    pub(super) sweep_later: usize,
    pub(super) kind: Kind,
    /// `rev` and `top` of the item alone, by room (see NOTE \[rotor\]), its input pinned.
    pub(super) rev: Arc<[f64]>,
    pub(super) top: Arc<[f64]>,
    /// The same with its input owned (NOTE \[rotor-owned\]), and `top` with its input not
    /// held (NOTE \[rotor-absent\]): a group's come from its own level (NOTE
    /// \[group-owned\]).
    pub(super) rev_owned: Arc<[f64]>,
    pub(super) top_owned: Arc<[f64]>,
    pub(super) top_absent: Arc<[f64]>,
}

#[derive(Clone)]
pub(super) enum Kind {
    Stage(Arc<Shape>),
    Group(Arc<Level>),
}

/// The DP of one level.
pub(super) struct Level {
    pub(super) items: Vec<Item>,
    /// `fixed_before[k]`: constants of items `0..k`.
    fixed_before: Vec<u64>,
    /// Units an owned sub-chain from the first item gains by freeing the level's input (the
    /// boundary before a group; 0 for the chain's input, a leaf; NOTE \[group-owned\]).
    input_units: usize,
    /// `rev` at [`Level::rev_at`], `top[s * (m_max + 1) + m]`, and their choices:
    /// the input of `s` held by the caller throughout.
    pub(super) rev: Vec<f64>,
    rev_choice: Vec<u32>,
    pub(super) top: Vec<f64>,
    top_choice: Vec<u32>,
    /// The same with the input of `s` owned: freed once of no more use (NOTE \[rotor-owned\]).
    pub(super) rev_owned: Vec<f64>,
    rev_owned_choice: Vec<u32>,
    pub(super) top_owned: Vec<f64>,
    top_owned_choice: Vec<u32>,
    /// `top` with the input of `s` not held (NOTE \[rotor-absent\]).
    pub(super) top_absent: Vec<f64>,
    top_absent_choice: Vec<u32>,
    /// Counts the tables (NOTE \[planner-memory\]).
    _meter: TableMeter,
}

/// The memory scale of one planning: bytes per unit and the most units.
#[derive(Clone, Copy)]
pub(super) struct Scale {
    pub(super) unit: u64,
    pub(super) m_max: usize,
}

impl Scale {
    /// The scale of a room of `room` bytes in at most about `units` units, the largest
    /// boundary `boundary` a whole number of units where the room allows (so a checkpoint
    /// costs what it holds, not a rounded-up unit).
    pub(super) fn new(room: u64, boundary: u64, units: u64) -> Self {
        let coarse = room.div_ceil(units).max(1);
        let per_boundary = boundary / coarse;
        let unit = if per_boundary >= 1 {
            // NOTE [exact-units]: a unit that divides the boundary, where one is at most
            // twice the finest: a unit rounded up makes `k` boundaries more units than the
            // room holds when the room is exactly `k` boundaries (a 32 KiB boundary in
            // 619-byte units is 53 units, three of them 159 in a room of 158), and the DP
            // then never keeps the last one.
            (per_boundary.div_ceil(2)..=per_boundary)
                .rev()
                .find(|&k| boundary.is_multiple_of(k))
                .map_or_else(|| boundary.div_ceil(per_boundary), |k| boundary / k)
        } else {
            coarse
        };
        Self {
            unit,
            m_max: (room / unit) as usize,
        }
    }

    /// Units that hold `bytes` (rounded up).
    pub(super) fn units(self, bytes: u64) -> usize {
        bytes.div_ceil(self.unit).min(u64::from(u32::MAX)) as usize
    }

    /// Units within `bytes` (rounded down, at most `m_max`).
    pub(super) fn within(self, bytes: u64) -> usize {
        ((bytes / self.unit) as usize).min(self.m_max)
    }
}

impl Level {
    pub(super) fn n(&self) -> usize {
        self.items.len()
    }

    /// NOTE [rev-triangle]: `rev(s, t)` is defined for `s <= t` only, so a `rev` table
    /// holds the pairs row by row, `t` then `s` (`t (t + 1) / 2 + s`): half the square it
    /// was laid out in, whose other half was never written (the tables were 55% of the
    /// first step's planning memory on Burn's `Lstm` over 128 steps; NOTE
    /// \[planner-memory\] in `solve.rs`).
    pub(super) fn rev_at(&self, s: usize, t: usize, m: usize, scale: Scale) -> usize {
        debug_assert!(
            s <= t && t < self.n(),
            "rev({s}, {t}) of {} items",
            self.n()
        );
        (t * (t + 1) / 2 + s) * (scale.m_max + 1) + m
    }

    pub(super) fn top_at(&self, s: usize, m: usize, scale: Scale) -> usize {
        s * (scale.m_max + 1) + m
    }

    /// Units freed when the steps of items `a..=b` have run (their constants).
    pub(super) fn released(&self, a: usize, b: usize, scale: Scale) -> usize {
        ((self.fixed_before[b + 1] - self.fixed_before[a]) / scale.unit) as usize
    }

    /// The rev table, pinned or owned.
    fn revs(&self, owned: bool) -> &[f64] {
        if owned { &self.rev_owned } else { &self.rev }
    }

    /// The top table, pinned or owned.
    fn tops(&self, owned: bool) -> &[f64] {
        if owned { &self.top_owned } else { &self.top }
    }

    /// The choice made for `rev(s, t, m)` or (`t` = `None`) `top(s, m)`.
    pub(super) fn choice(
        &self,
        s: usize,
        t: Option<usize>,
        m: usize,
        hold: Hold,
        scale: Scale,
    ) -> u32 {
        match (t, hold) {
            (Some(t), Hold::Owned) => self.rev_owned_choice[self.rev_at(s, t, m, scale)],
            (Some(t), _) => self.rev_choice[self.rev_at(s, t, m, scale)],
            (None, Hold::Pinned) => self.top_choice[self.top_at(s, m, scale)],
            (None, Hold::Owned) => self.top_owned_choice[self.top_at(s, m, scale)],
            (None, Hold::Absent) => self.top_absent_choice[self.top_at(s, m, scale)],
        }
    }

    /// Units an owned sub-chain from item `s` gains when it frees its input (rounded down:
    /// the caller counted it rounded up, alone or in a tape; NOTE \[rotor-owned\]). The
    /// input of a level's first item is the level's input (NOTE \[group-owned\]).
    fn input_gain(&self, s: usize, scale: Scale) -> usize {
        if s == 0 {
            self.input_units
        } else {
            ((self.items[s - 1].boundary / scale.unit) as usize).min(scale.m_max)
        }
    }

    /// The units an owned sub-chain from stage item `s` gains by freeing its input early
    /// with the tape of inner plan `k` (NOTE \[rotor-owned\]): none unless it owns the
    /// input and the stage is done with it after the tape.
    pub(super) fn early_gain(
        &self,
        shape: &Shape,
        s: usize,
        k: usize,
        owned: bool,
        scale: Scale,
    ) -> usize {
        if owned && shape.input_done[k] {
            self.input_gain(s, scale)
        } else {
            0
        }
    }

    pub(super) fn solve(items: Vec<Item>, scale: Scale, input_units: usize) -> Self {
        let n = items.len();
        let width = scale.m_max + 1;
        let mut fixed_before = vec![0u64; n + 1];
        for (k, item) in items.iter().enumerate() {
            fixed_before[k + 1] = fixed_before[k] + item.fixed;
        }
        let entries = level_entries(n, width);
        let mut level = Self {
            _meter: TableMeter::new(entries * ENTRY_BYTES),
            items,
            fixed_before,
            input_units,
            rev: vec![INF; rev_rows(n) * width],
            rev_choice: vec![BASE; rev_rows(n) * width],
            top: vec![INF; n * width],
            top_choice: vec![BASE; n * width],
            rev_owned: vec![INF; rev_rows(n) * width],
            rev_owned_choice: vec![BASE; rev_rows(n) * width],
            top_owned: vec![INF; n * width],
            top_owned_choice: vec![BASE; n * width],
            top_absent: vec![INF; n * width],
            top_absent_choice: vec![BASE; n * width],
        };
        for len in 1..=n {
            for s in 0..=n - len {
                let t = s + len - 1;
                for m in 0..width {
                    let k = level.rev_at(s, t, m, scale);
                    let best = level.best_rev(s, t, m, true, scale);
                    (level.rev_owned[k], level.rev_owned_choice[k]) = best;
                    let best = level.best_rev(s, t, m, false, scale);
                    (level.rev[k], level.rev_choice[k]) = best;
                }
            }
        }
        for s in (0..n).rev() {
            for m in 0..width {
                let k = level.top_at(s, m, scale);
                let best = level.best_top(s, m, Hold::Absent, scale);
                (level.top_absent[k], level.top_absent_choice[k]) = best;
                let best = level.best_top(s, m, Hold::Owned, scale);
                (level.top_owned[k], level.top_owned_choice[k]) = best;
                let best = level.best_top(s, m, Hold::Pinned, scale);
                (level.top[k], level.top_choice[k]) = best;
            }
        }
        level
    }

    fn best_rev(&self, s: usize, t: usize, m: usize, owned: bool, scale: Scale) -> (f64, u32) {
        let item = &self.items[s];
        if s == t {
            let rev = if owned { &item.rev_owned } else { &item.rev };
            return (rev[m], BASE);
        }
        let mut best = (INF, BASE);
        if let Kind::Stage(last) = &self.items[t].kind
            && skips(last)
        {
            // The last stage's steps read nothing (NOTE [rotor-skip]): they run first, with
            // nothing held, and its constants are released for the rest.
            let room = (m + self.released(t, t, scale)).min(scale.m_max);
            best = (self.revs(owned)[self.rev_at(s, t - 1, room, scale)], SKIP);
        }
        if let Kind::Stage(shape) = &item.kind {
            for k in 0..shape.inners.len() {
                let gain = self.early_gain(shape, s, k, owned, scale);
                if let Some((tape, cost)) = tape_fits(shape, k, m, true, gain, scale, true) {
                    let room = (m + gain - tape).min(scale.m_max);
                    let rest_owned = !shape.keeps_boundary[k];
                    let rest = self.revs(rest_owned)[self.rev_at(s + 1, t, room, scale)];
                    if cost + rest < best.0 {
                        best = (cost + rest, TAPE + k as u32);
                    }
                }
            }
        }
        let mut need = 0;
        let mut sweep = 0.0;
        for split in s + 1..=t {
            let k = split - 1;
            let joined = &self.items[k];
            need = need.max(if k == s {
                joined.sweep_first
            } else {
                joined.sweep_later
            });
            sweep += joined.sweep_cost;
            if need > m {
                break;
            }
            let x = joined.boundary_units;
            if x > m {
                continue;
            }
            let right = self.rev_owned[self.rev_at(split, t, m - x, scale)];
            if right == INF {
                continue;
            }
            let room = (m + self.released(split, t, scale)).min(scale.m_max);
            let left = self.revs(owned)[self.rev_at(s, k, room, scale)];
            let total = sweep + right + left;
            if total < best.0 {
                best = (total, SPLIT + split as u32);
            }
        }
        best
    }

    /// `top(s, m)` with the input of `s` pinned, owned or (`Hold::Absent`) not held at all
    /// (NOTE \[rotor-absent\]).
    fn best_top(&self, s: usize, m: usize, hold: Hold, scale: Scale) -> (f64, u32) {
        let n = self.n();
        let item = &self.items[s];
        let owned = hold == Hold::Owned;
        let absent = hold == Hold::Absent;
        if s == n - 1 {
            let top = match hold {
                Hold::Pinned => &item.top,
                Hold::Owned => &item.top_owned,
                Hold::Absent => &item.top_absent,
            };
            return (top[m], BASE);
        }
        let mut best = (INF, BASE);
        if let Kind::Stage(shape) = &item.kind {
            for k in 0..shape.inners.len() {
                if absent && !shape.input_done[k] {
                    continue;
                }
                let gain = self.early_gain(shape, s, k, owned, scale);
                if let Some((tape, cost)) = tape_fits(shape, k, m, false, gain, scale, true) {
                    let room = (m + gain - tape).min(scale.m_max);
                    let rest_owned = !shape.keeps_boundary[k];
                    let rest = self.tops(rest_owned)[self.top_at(s + 1, room, scale)];
                    if cost + rest < best.0 {
                        best = (cost + rest, TAPE + k as u32);
                    }
                }
                // NOTE [rotor-absent]: the boundary not kept, the next stages do without.
                if !shape.keeps_boundary[k]
                    && let Some((tape, cost)) = tape_fits(shape, k, m, false, gain, scale, false)
                {
                    let room = (m + gain - tape).min(scale.m_max);
                    let rest = self.top_absent[self.top_at(s + 1, room, scale)];
                    if cost + rest < best.0 {
                        best = (cost + rest, TAPE_DROP + k as u32);
                    }
                }
            }
        }
        if absent {
            return best;
        }
        for split in s + 1..n {
            let x = self.items[split - 1].boundary_units;
            if x > m {
                continue;
            }
            let right = self.top_owned[self.top_at(split, m - x, scale)];
            if right == INF {
                continue;
            }
            let room = (m + self.released(split, n - 1, scale)).min(scale.m_max);
            let total = right + self.revs(owned)[self.rev_at(s, split - 1, room, scale)];
            if total < best.0 {
                best = (total, SPLIT + split as u32);
            }
        }
        // NOTE [rotor-run-ahead]: the forward pass runs on keeping nothing of `s..split`,
        // whose steps come last, from the input of `s`, where the rest does without its
        // input.
        for split in s + 1..n {
            let right = self.top_absent[self.top_at(split, m, scale)];
            if right == INF {
                continue;
            }
            let room = (m + self.released(split, n - 1, scale)).min(scale.m_max);
            let total = right + self.revs(owned)[self.rev_at(s, split - 1, room, scale)];
            if total < best.0 {
                best = (total, SPLIT_ABSENT + split as u32);
            }
        }
        best
    }
}

/// How a sub-chain's input is held (NOTE \[rotor-owned\], NOTE \[rotor-absent\]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Hold {
    /// By the caller, throughout.
    Pinned,
    /// By the sub-chain, which frees it once of no more use.
    Owned,
    /// Not at all (the forward pass only): the sub-chain never reads it after the stage ran.
    Absent,
}

/// The cheapest inner plan of `shape` in the forward-pass form that fits `m` units and
/// needs the input no more once its forward part ran (NOTE \[rotor-absent\]).
pub(super) fn inner_without_input(shape: &Shape, m: usize, scale: Scale) -> Option<(usize, f64)> {
    shape
        .inners
        .iter()
        .enumerate()
        .filter(|&(k, inner)| {
            shape.input_done[k] && scale.units(inner.top_peak.saturating_sub(shape.fixed)) <= m
        })
        .map(|(k, inner)| (k, inner.top_cost))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Whether a stage may be skipped when it is the last of a sub-chain (NOTE \[rotor-skip\]):
/// its steps read nothing, so its keep-all plan (inner plan 0) holds nothing and replays
/// nothing, and needs no input.
fn skips(shape: &Shape) -> bool {
    let keep_all = &shape.inners[0];
    !shape.steps_read && keep_all.rev_cost == 0.0 && keep_all.rev_forward.replays.is_empty()
}

/// The tape option of a stage with inner plan `k` and room `m` (NOTE \[rotor\]): the
/// units the tape holds while the next stages run and its cost (the replays that make it,
/// in the rev form, and those of the plan's backward part); `None` when it does not fit.
/// `gain`: units of the input freed early by a sub-chain that owns it (NOTE
/// \[rotor-owned\]; 0 for none): in the forward pass before the stage runs, in the rev
/// form as its last reader takes it; the tape then has that much more room. Without
/// `boundary` (the forward pass only, NOTE \[rotor-absent\]) the tape holds what the plan
/// keeps, not the boundary too.
fn tape_fits(
    shape: &Shape,
    k: usize,
    m: usize,
    rev: bool,
    gain: usize,
    scale: Scale,
    boundary: bool,
) -> Option<(usize, f64)> {
    let inner = &shape.inners[k];
    let made = &shape.tapes[k];
    let room = m + gain;
    let dropped = if boundary { 0 } else { shape.boundary };
    let tape = scale.units(made.bytes - dropped);
    let backward = scale.units(inner.top_peak.saturating_sub(shape.fixed));
    let making = match (rev, gain > 0) {
        (true, false) => scale.units(made.forward.peak),
        (true, true) => scale.units(made.through_peak),
        (false, _) => backward,
    };
    let cost = inner.top_cost + if rev { made.forward.cost } else { 0.0 };
    (tape <= room && making <= room && backward <= room).then_some((tape, cost))
}

/// The cheapest inner plan of `shape` whose rev form (`rev`) or forward-pass form fits
/// `m` units: its index and cost.
pub(super) fn inner_for(shape: &Shape, m: usize, rev: bool, scale: Scale) -> Option<(usize, f64)> {
    shape
        .inners
        .iter()
        .enumerate()
        .filter_map(|(k, inner)| {
            let (peak, cost) = if rev {
                (inner.rev_peak, inner.rev_cost)
            } else {
                (inner.top_peak, inner.top_cost)
            };
            (scale.units(peak.saturating_sub(shape.fixed)) <= m).then_some((k, cost))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}
