//! Optimal checkpointing of a chain of stages of different sizes and costs (NOTE [rotor]).
//!
//! NOTE [rotor]: after Beaumont, Eyraud-Dubois, Herrmann, Joly and Shilova, "Optimal
//! checkpointing for heterogeneous chains: how to train deep neural networks with limited
//! memory" (2019). A view with stages (NOTE \[stages\] in `blocks.rs`) is a chain: stage `k`
//! reads only its input, the boundary of stage `k - 1`. With room `m` (memory units beyond
//! what the caller holds and beyond the constants of the stages not stepped yet):
//!
//! ```text
//! rev(s, t, m) = run the backward steps of stages t..s, the input of s held, nothing of
//!                s..=t held, at the least replay cost. The cheapest of:
//!   base  (s = t): the stage's cheapest inner plan whose rev form fits m;
//!   tape  (a leaf stage): replay s keeping what its steps read and its boundary (the
//!                 tape), rev(s + 1, t, m - tape), then the steps of s from the tape;
//!   split (s < s' <= t): replay s..s'-1 straight (each stage's values freed after their
//!                 last use, each boundary after the next stage read it), keep the boundary
//!                 of s'-1, rev(s', t, m - boundary), free it, rev(s, s'-1, m + the
//!                 constants of s'..=t, released by then).
//! top(s, m)    = the same for s..=last, its first pass being the forward pass (free, and
//!                holding nothing it does not keep).
//! ```
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
//! Memory is counted in units (at most [`UNITS`] for the budget; boundary sizes round up, so
//! the plan is valid and the room is used within a unit). The DP over one level of `n`
//! items is O(n^3 m) and a level has at most [`GROUP`] items; longer chains are grouped:
//! consecutive items make a group whose own rev and top, for every room, come from the DP
//! of its items (a block that is itself a chain), so that checkpoints sit at group ends at
//! the upper levels and anywhere inside a group. Groups of the same items share one DP: a
//! chain of 10,000 equal blocks solves a handful of DPs.
//!
//! NOTE [rotor-run-ahead]: in the forward pass, `top(s, m)` may also run `s..s'` keeping
//! nothing of it, go on with `top(s', m)` without its input (NOTE \[rotor-absent\]'s
//! table), and step `s..s'` last, rebuilt from the input of `s`: a split whose boundary
//! nothing after it reads. Random block chains (`random_block_chains_against_the_exact_
//! optimum`): at the exact optimum in 4,174 of 5,441 cases -> 4,230 of 5,460 (the chain's
//! plan fits 19 budgets more); the recorded views plan as before. O(n) more work per `top`
//! entry.
//!
//! NOTE [group-owned]: a group's owned and absent forms come from its own level, whose
//! first item gains the bytes of the group's input where it frees it (the boundary before
//! the group; nothing for the chain's input, a leaf). Before, a group took its input
//! pinned from its parent whatever the parent's table, and freed it after its whole
//! backward (200 blocks of (matmul, add, GELU), one slot above the smallest budget:
//! 394,670 -> 394,430 replayed; small, but the model is now the same at every level).
//! Groups of the same items with inputs of different units are solved apart.
//!
//! NOTE [level-cuts]: where groups are cut decides where the root's checkpoints can sit,
//! and how many levels deep a tight budget must keep boundaries. Cut from the stages up
//! (groups of [`GROUP`] stages, then groups of those), a chain of a little more than
//! [`GROUP`]^2 stages had a root of two items and three levels: 1,000 blocks of (matmul,
//! add, GELU) one slot above the smallest budget found no plan in the levels, and the run
//! (whole blocks) replayed 51.5M, a quadratic schedule. Near the smallest budget (room for
//! at most [`TIGHT_CUTS`] boundaries) the chain is now cut three ways and the cheapest
//! kept: from the stages up in groups of [`GROUP`] and of two thirds of it, and from the
//! root down (the root takes [`GROUP`] groups, each cut the same way within; on a
//! repeating chain, whose equal groups share one DP, the root's groups are whole periods
//! and each is one flat level where it has at most [`FLAT_GROUP`] stages). Measured
//! against one flat level over the whole chain (the chain model's optimum): 200 blocks at 1/2/4 slots 1.15/1.18/1.03x ->
//! 1.07/1.05/1.03x; 100 blocks 1.28/1.08/1.02x -> 1.13/1.08/1.02x; 1,000 blocks at one slot
//! 51.5M -> 4.43M replayed (43 forward passes), two slots 2.30M -> 2.04M. Planning the
//! levels three ways costs about 2x where it applies; with more room the cuts differed by
//! under 0.1% on these chains and one is solved. On a repeating chain the root takes more
//! than [`GROUP`] items (at most [`FLAT`]) where that keeps its groups flat, and a root of
//! [`FLAT`] items is a fourth cut: one slot above the smallest budget, where a group of two
//! levels finds no plan, 2,000 blocks 500 -> 67.4 forward passes (the executor's best 71.1)
//! and 4,000 blocks 500 -> 92.5 (101.4); at two slots the finer root places the root's
//! checkpoints better, 1,000 blocks 19.8 -> 15.6 (17.2), 1,700 blocks 23.4 -> 20.6 (21.0).
//! The price is planner memory while it plans: a root of [`FLAT`] items holds `2 FLAT^2
//! (m + 1)` entries (63 MB at 160 units, 32 MB at 80), as a run's six tables do (75 MB).
//! Past [`FLAT`] root groups of [`FLAT`] stages (5,461 blocks of three stages) a root group
//! takes two levels again and one slot above the smallest budget the levels find no plan
//! (6,000 blocks: the lean chain schedule 504 forward passes, the executor's 124.7, which
//! `plan` keeps).
//!
//! Revolve is the case of single-op stages of equal sizes and costs whose steps read their
//! input; the tests check that this DP reaches its closed form.
//!
//! Cost model: O(n^3 m / 3) per distinct group (pinned and owned tables), `n <= GROUP`,
//! `m <= UNITS`; a run whose stages may free their inputs also solves the grouped levels
//! (NOTE [run-or-levels]); emitting the schedule is linear in its length, with an explicit
//! stack.
//!
//! # Invariants
//! - The schedule this module emits passes `simulate` under its budget (the planner checks
//!   it before use) and costs what the DP says (`planned_cost`).

use std::collections::HashMap;
use std::sync::Arc;

use super::blocks::{Replays, Shape, Stages};
use super::{Action, GraphView, Schedule};

/// Views of more ops than this are long chains for the trade-off report (rows whose plans
/// replay too much are priced, not planned).
pub(crate) const LONG_CHAIN: usize = 2_000;

/// The most items one DP level takes in a grouped chain.
const GROUP: usize = 48;

/// The most stages a chain solved in one level has (O(n^3 m / 6): 128 stages at 160
/// units is 56 million steps).
const FLAT: usize = 128;

/// The most memory units of a budget.
const UNITS: u64 = 160;

/// Room for at most this many of the chain's largest boundaries is tight: the chain's
/// groups are cut three ways (NOTE \[level-cuts\]).
const TIGHT_CUTS: usize = 8;

/// The most stages of a root group of a repeating chain solved as one flat level (NOTE
/// \[level-cuts\]): its tables take at most 16 MB at 160 units, and a chain has a few such
/// groups (the first, the last, the one with its head).
const FLAT_GROUP: usize = 64;

/// NOTE [run-units]: the most memory units of a run's tables. A unit of the grouped levels
/// (at most [`UNITS`]) may hold many boundaries of a long chain of small blocks: at 300
/// slots of a 10,000-stage chain a unit held four, so the DP saw 75 checkpoints where 300
/// fit, and replayed up to a forward pass more than Revolve. A run's tables have
/// `(blocks + 1) (units + 1)` entries each (at most [`MAX_BLOCKS`] blocks at this many
/// units, within NOTE \[planner-memory\]'s cap), O(log blocks) work per entry, so it can
/// afford boundary-sized units up to this many; beyond it a unit holds a few boundaries of a
/// chain whose every checkpoint fits anyway.
const RUN_UNITS: u64 = 1024;

const INF: f64 = f64::INFINITY;

// NOTE [planner-memory]: the DP's tables are the planner's memory, and the planner runs in
// the step it plans for (after the first backward pass under a budget, when the plan for the
// next steps is made), so they count in the process's peak as much as the values the budget
// bounds. At full resolution they took 35-44 MB planning a 400-block recurrence of 80 KB
// matrices under budgets of 1.6 to 32 MB: the first step's heap peaked at 1.3x SaveAll's
// whatever the budget. The tables of one solve may now take at most [`table_cap`]: half the
// room, [`MIN_TABLE_CAP`], or a quarter of what the view's steps read (what keeping all
// holds), whichever is most. The last keeps the level cuts that long chains at tight
// budgets need (NOTE \[level-cuts\]; a 10,000-block power iteration of 32 KB matrices one
// slot above its smallest budget replays 92.5 forward passes, 503 with 13 MB of tables)
// while the tables stay a share of SaveAll's own peak. It was 2 KiB an op with a floor of
// 16 MiB: Burn's Lstm and Gru on 4 KiB values (128 steps, about 6 MB at SaveAll's peak)
// took 9-15 MB of tables at the first step under a new budget, and that step's heap peaked
// at 2.6-3.8x SaveAll's where its planned steps peak at 0.65-0.95x; now it peaks within
// 0.05x of them (`a_new_budget_s_first_step_peaks_as_its_planned_steps_do` in
// `remat-models`), for 0-4% more replays, 29% on the Lstm on every output at a quarter of
// K (4,431 -> 5,714 a step). The chain is solved once at 1/32 of the units, its tables'
// peak counted (they grow linearly with the units), and then at the units that peak
// affords, at most the full resolution. Coarser units cost plan quality on long chains,
// never validity (boundaries round up).

/// The least memory the tables of one solve may take (NOTE \[planner-memory\]).
const MIN_TABLE_CAP: u64 = 256 << 10;

/// The share of the bytes steps read (what keeping all holds) the tables of one solve may
/// take (NOTE \[planner-memory\]).
const TABLE_SHARE_OF_KEPT: u64 = 4;

/// The memory the DP's tables may take for a room of `room` bytes in a view whose steps
/// read values of `kept` bytes in all (NOTE \[planner-memory\]).
pub(crate) fn table_cap(room: u64, kept: u64) -> u64 {
    (room / 2)
        .max(MIN_TABLE_CAP)
        .max(kept / TABLE_SHARE_OF_KEPT)
}

/// Bytes of the values some step of `view` reads: what keeping all holds for backward.
/// Zero-cost nodes are left out: the tuples of NOTE \[tuple-cuts\] weigh their members,
/// and Burn's `Gru` on its last output has its stacked output (512 KiB at 128 steps) in
/// every tuple, read by every step: 69 MB where its steps read 3.1 MB.
fn step_read_bytes(view: &GraphView) -> u64 {
    let mut read = vec![false; view.len()];
    for node in view.nodes() {
        for &v in &node.step_reads {
            read[v as usize] = true;
        }
    }
    view.nodes()
        .iter()
        .zip(read)
        .filter(|(node, read)| *read && node.cost > 0.0)
        .map(|(node, _)| node.bytes)
        .sum()
}

/// The share of the full resolution's units the probe solves at (NOTE \[planner-memory\]).
const PROBE: f64 = 1.0 / 32.0;

/// The fewest units a solve uses, however little memory its tables may take.
const MIN_UNITS: u64 = 4;

/// `units` at `fraction` of the full resolution, at least [`MIN_UNITS`].
fn scaled(units: u64, fraction: f64) -> u64 {
    ((units as f64 * fraction).round() as u64).clamp(MIN_UNITS.min(units), units)
}

/// Table entries of a level of `n` items at `width` rooms: `rev` pinned and owned, three
/// `top`s.
fn level_entries(n: usize, width: usize) -> u64 {
    ((2 * n * n + 3 * n) * width) as u64
}

/// Bytes of one table entry: a cost and a choice.
const ENTRY_BYTES: u64 = 12;

thread_local! {
    /// Bytes of DP tables alive on this thread, and their peak since the last
    /// [`TableMeter::start`] (NOTE \[planner-memory\]).
    static TABLE_BYTES: core::cell::Cell<(u64, u64)> = const { core::cell::Cell::new((0, 0)) };
}

/// Counts the bytes of a set of DP tables while they live (NOTE \[planner-memory\]).
struct TableMeter(u64);

impl TableMeter {
    fn new(bytes: u64) -> Self {
        TABLE_BYTES.with(|c| {
            let (live, peak) = c.get();
            c.set((live + bytes, peak.max(live + bytes)));
        });
        Self(bytes)
    }

    /// Restarts the peak at the bytes alive now; returns that level.
    fn start() -> u64 {
        TABLE_BYTES.with(|c| {
            let (live, _) = c.get();
            c.set((live, live));
            live
        })
    }

    /// The peak since [`TableMeter::start`].
    fn peak() -> u64 {
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
const BASE: u32 = 0;
const TAPE: u32 = 1;
const SPLIT: u32 = 1 << 16;
/// The skip of a last item whose steps read nothing (NOTE \[rotor-skip\]).
const SKIP: u32 = SPLIT - 1;
/// A split of the forward pass at `s'` that keeps no boundary (`SPLIT_ABSENT + s'`; NOTE
/// \[rotor-run-ahead\]).
const SPLIT_ABSENT: u32 = 1 << 24;
/// The tape of inner plan `k` (`TAPE_DROP + k`) whose boundary the next stages do without
/// (NOTE \[rotor-absent\]).
const TAPE_DROP: u32 = 1 << 8;

/// One item of a level: a stage, or a group of consecutive items solved by its own level.
#[derive(Clone)]
struct Item {
    /// The item's first stage, relative to its level's first, and its stage count.
    first: usize,
    stages: usize,
    key: u64,
    /// Boundary bytes and units.
    boundary: u64,
    boundary_units: usize,
    /// Constants on the item's edges.
    fixed: u64,
    /// A straight replay through the item: cost, and room it needs when the sweep starts
    /// here (its input held outside) or runs through (its input part of the room).
    sweep_cost: f64,
    sweep_first: usize,
    sweep_later: usize,
    kind: Kind,
    /// `rev` and `top` of the item alone, by room (see NOTE \[rotor\]), its input pinned.
    rev: Arc<[f64]>,
    top: Arc<[f64]>,
    /// The same with its input owned (NOTE \[rotor-owned\]), and `top` with its input not
    /// held (NOTE \[rotor-absent\]): a group's come from its own level (NOTE
    /// \[group-owned\]).
    rev_owned: Arc<[f64]>,
    top_owned: Arc<[f64]>,
    top_absent: Arc<[f64]>,
}

#[derive(Clone)]
enum Kind {
    Stage(Arc<Shape>),
    Group(Arc<Level>),
}

/// The DP of one level.
struct Level {
    items: Vec<Item>,
    /// `fixed_before[k]`: constants of items `0..k`.
    fixed_before: Vec<u64>,
    /// Units an owned sub-chain from the first item gains by freeing the level's input (the
    /// boundary before a group; 0 for the chain's input, a leaf; NOTE \[group-owned\]).
    input_units: usize,
    /// `rev[(s * n + t) * (m_max + 1) + m]`, `top[s * (m_max + 1) + m]`, and their choices:
    /// the input of `s` held by the caller throughout.
    rev: Vec<f64>,
    rev_choice: Vec<u32>,
    top: Vec<f64>,
    top_choice: Vec<u32>,
    /// The same with the input of `s` owned: freed once of no more use (NOTE \[rotor-owned\]).
    rev_owned: Vec<f64>,
    rev_owned_choice: Vec<u32>,
    top_owned: Vec<f64>,
    top_owned_choice: Vec<u32>,
    /// `top` with the input of `s` not held (NOTE \[rotor-absent\]).
    top_absent: Vec<f64>,
    top_absent_choice: Vec<u32>,
    /// Counts the tables (NOTE \[planner-memory\]).
    _meter: TableMeter,
}

/// The memory scale of one planning: bytes per unit and the most units.
#[derive(Clone, Copy)]
struct Scale {
    unit: u64,
    m_max: usize,
}

impl Scale {
    /// The scale of a room of `room` bytes in at most about `units` units, the largest
    /// boundary `boundary` a whole number of units where the room allows (so a checkpoint
    /// costs what it holds, not a rounded-up unit).
    fn new(room: u64, boundary: u64, units: u64) -> Self {
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
    fn units(self, bytes: u64) -> usize {
        bytes.div_ceil(self.unit).min(u64::from(u32::MAX)) as usize
    }

    /// Units within `bytes` (rounded down, at most `m_max`).
    fn within(self, bytes: u64) -> usize {
        ((bytes / self.unit) as usize).min(self.m_max)
    }
}

impl Level {
    fn n(&self) -> usize {
        self.items.len()
    }

    fn rev_at(&self, s: usize, t: usize, m: usize, scale: Scale) -> usize {
        (s * self.n() + t) * (scale.m_max + 1) + m
    }

    fn top_at(&self, s: usize, m: usize, scale: Scale) -> usize {
        s * (scale.m_max + 1) + m
    }

    /// Units freed when the steps of items `a..=b` have run (their constants).
    fn released(&self, a: usize, b: usize, scale: Scale) -> usize {
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
    fn choice(&self, s: usize, t: Option<usize>, m: usize, hold: Hold, scale: Scale) -> u32 {
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
    fn early_gain(&self, shape: &Shape, s: usize, k: usize, owned: bool, scale: Scale) -> usize {
        if owned && shape.input_done[k] {
            self.input_gain(s, scale)
        } else {
            0
        }
    }

    fn solve(items: Vec<Item>, scale: Scale, input_units: usize) -> Self {
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
            rev: vec![INF; n * n * width],
            rev_choice: vec![BASE; n * n * width],
            top: vec![INF; n * width],
            top_choice: vec![BASE; n * width],
            rev_owned: vec![INF; n * n * width],
            rev_owned_choice: vec![BASE; n * n * width],
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
enum Hold {
    /// By the caller, throughout.
    Pinned,
    /// By the sub-chain, which frees it once of no more use.
    Owned,
    /// Not at all (the forward pass only): the sub-chain never reads it after the stage ran.
    Absent,
}

/// The cheapest inner plan of `shape` in the forward-pass form that fits `m` units and
/// needs the input no more once its forward part ran (NOTE \[rotor-absent\]).
fn inner_without_input(shape: &Shape, m: usize, scale: Scale) -> Option<(usize, f64)> {
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
fn inner_for(shape: &Shape, m: usize, rev: bool, scale: Scale) -> Option<(usize, f64)> {
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

/// The chain planner for one view at one budget.
pub(crate) struct Rotor<'a> {
    view: &'a GraphView,
    stages: &'a Stages,
    scale: Scale,
    solved: Solved,
    /// Room at the top, in units.
    room: usize,
}

/// How the chain was solved: levels of items (one, or grouped), or as a run when it
/// repeats and is longer than a level (NOTE \[rotor-run\]).
enum Solved {
    Levels(Arc<Level>),
    Run(Box<Run>),
}

/// Bytes of the view's constants.
fn fixed_total(view: &GraphView) -> u64 {
    view.nodes().iter().map(|n| n.fixed_bytes).sum()
}

impl<'a> Rotor<'a> {
    /// The DP for `view` under `budget`, or `None` when the budget leaves no room beyond
    /// the constants.
    pub(crate) fn new(view: &'a GraphView, stages: &'a Stages, budget: u64) -> Option<Self> {
        Self::with_group(view, stages, budget, GROUP, false)
    }

    /// [`Rotor::new`] for [`Rotor::lean_schedule`] too.
    pub(crate) fn for_resume(view: &'a GraphView, stages: &'a Stages, budget: u64) -> Option<Self> {
        Self::with_group(view, stages, budget, GROUP, true)
    }

    /// [`Rotor::new`] with at most `group` items per DP level (the tests solve long chains
    /// in one level, the reference the grouped levels are measured against).
    pub(crate) fn with_group(
        view: &'a GraphView,
        stages: &'a Stages,
        budget: u64,
        group: usize,
        lean: bool,
    ) -> Option<Self> {
        let fixed = fixed_total(view);
        let all: u64 = view.nodes().iter().map(|n| n.bytes).sum();
        let room = budget.checked_sub(fixed)?.min(all);
        // NOTE [planner-memory]: a probe at `PROBE` of the units, then the units its tables'
        // peak affords within the cap (the probe itself where that is about as many).
        let cap = table_cap(room, step_read_bytes(view));
        let before = TableMeter::start();
        let probe = Self::solve_at(view, stages, room, group, lean, PROBE, cap);
        let probe_peak = TableMeter::peak().saturating_sub(before);
        let affordable = (cap as f64 / (probe_peak.max(1) as f64 / PROBE)).min(1.0);
        if affordable < PROBE * 1.25 {
            return probe;
        }
        drop(probe);
        Self::solve_at(view, stages, room, group, lean, affordable, cap)
    }

    /// [`Rotor::with_group`] at `fraction` of the full resolution's units, its levels no
    /// wider than tables of `cap` bytes allow at [`MIN_UNITS`] (NOTE \[planner-memory\]).
    fn solve_at(
        view: &'a GraphView,
        stages: &'a Stages,
        room: u64,
        group: usize,
        lean: bool,
        fraction: f64,
        cap: u64,
    ) -> Option<Self> {
        // Two levels' tables may be alive at once (the cuts are compared).
        let fits = |n: usize| 2 * level_entries(n, MIN_UNITS as usize + 1) * ENTRY_BYTES <= cap;
        let widest = (2..=FLAT).rev().find(|&n| fits(n)).unwrap_or(2);
        // Units: boundaries are a whole number of units where the budget allows.
        let boundary = (0..stages.len())
            .map(|k| stages.shape[k].boundary)
            .max()
            .unwrap_or(1)
            .max(1);
        // Long chains get fewer units: the grouped levels solve (groups x units) DPs.
        let units = scaled(
            if stages.len() > 4_000 {
                UNITS / 2
            } else {
                UNITS
            },
            fraction,
        );
        let scale = Scale::new(room, boundary, units);
        let group = group.max(2).min(widest);
        // One level takes any chain of up to `FLAT` stages: exact in the chain model, and a
        // run's closed head and tail cost a value more near the smallest budget.
        let group = if group == GROUP && stages.len() <= FLAT && FLAT <= widest {
            FLAT
        } else {
            group
        };
        // A run (NOTE [rotor-run]) solves one table of (blocks x units) entries: it affords
        // the finer scale its checkpoints need on a long chain (NOTE [run-units]).
        // The items at the fine scale only where a run is (the layout reads keys alone).
        let layout = Run::layout(&stages.key);
        let make = |solved: Solved, scale: Scale| Self {
            view,
            stages,
            scale,
            room: scale.within(room),
            solved,
        };
        // The run, its blocks merged to fit its tables at `RUN_UNITS` units, and unmerged
        // at fewer units where that fits too (NOTE [run-merge]): the cheaper kept.
        let run = layout.filter(|_| stages.len() > group).map(|layout| {
            let blocks = layout.2;
            let merge = blocks.div_ceil(MAX_BLOCKS);
            // Each try's tables within half the cap (both are alive while compared).
            let within = |items: usize| {
                let tables = if lean { RUN_TABLES } else { RUN_TABLES - 2 };
                let per_unit = tables * (items as u64 + 1) * ENTRY_BYTES;
                (cap / 2 / per_unit).saturating_sub(1).max(MIN_UNITS)
            };
            let run_units = scaled(RUN_UNITS, fraction).min(within(blocks / merge));
            let mut tries = vec![(Scale::new(room, boundary, run_units), merge)];
            if merge > 1
                && let Some(units) = unmerged_units(blocks, room, boundary, RUN_UNITS)
                    .map(|units| units.min(within(blocks)))
                    .filter(|&units| units >= unmerged_needed(room, boundary))
            {
                tries.push((Scale::new(room, boundary, units), 1));
            }
            tries
                .into_iter()
                .map(|(fine, merge)| {
                    let run = Run::find(&stage_items(stages, fine), layout, fine, merge, lean);
                    make(Solved::Run(Box::new(run)), fine)
                })
                .min_by(|a, b| a.root(lean).1.total_cmp(&b.root(lean).1))
                .expect("at least one try")
        });
        // NOTE [level-cuts]: where the chain takes more than one level and the room is
        // tight, its groups are cut three or four ways and the cheapest levels kept.
        // A repeating chain's period, in stages (1 for any other).
        let period = layout.map_or(1, |(_, p, _)| p);
        let tight = scale.within(room) <= TIGHT_CUTS * scale.units(boundary);
        let levels = || {
            let cuts = if stages.len() <= group || !tight {
                vec![Cut::BottomUp(group)]
            } else {
                // From the root down: `group` root items, or more where that makes a
                // repeating chain's root groups flat, and `FLAT` root items.
                let flat = FLAT_GROUP.min(widest) / period * period;
                let top = |top: usize| {
                    if period > 1 && flat > 0 {
                        top.max(stages.len().div_ceil(flat)).min(FLAT).min(widest)
                    } else {
                        top.min(widest)
                    }
                };
                let mut cuts = vec![
                    Cut::BottomUp(group),
                    Cut::BottomUp((group * 2 / 3).max(2)),
                    Cut::TopDown {
                        top: top(group),
                        period,
                    },
                ];
                if top(FLAT) != top(group) {
                    cuts.push(Cut::TopDown {
                        top: top(FLAT),
                        period,
                    });
                }
                cuts
            };
            cuts.into_iter()
                .map(|cut| make(Solved::Levels(build(stages, scale, cut)), scale))
                .min_by(|a, b| a.root(lean).1.total_cmp(&b.root(lean).1))
                .expect("at least one cut")
        };
        let Some(run) = run else {
            return Some(levels());
        };
        // NOTE [run-or-levels]: a run's tables weigh whole blocks and keep every block's
        // input held; the levels free what no later step reads (NOTE [rotor-owned]) inside
        // each group. Where a stage may free its input, both are solved and the cheaper kept:
        // on a 200-block chain of (matmul, add, GELU) stages, one slot above the smallest
        // budget, the run replayed 5.2x the levels' cost (2.05M against 0.39M; one flat
        // level 0.34M), two slots 1.34x; at eight slots the run was 0.7% cheaper. A chain
        // whose stages all read their input (the power iteration) solves the run alone.
        if (0..stages.len()).any(|k| stages.shape[k].input_done.iter().any(|&done| done)) {
            let levels = levels();
            if levels.root(lean).1 < run.root(lean).1 {
                return Some(levels);
            }
        }
        Some(run)
    }

    /// The whole chain's task and its cost: in the forward-pass form (the step), or with
    /// `lean` in the rev form (a backward pass from a state where nothing is held; `INF`
    /// for a run solved without its lean tables, by [`Rotor::new`]).
    fn root(&self, lean: bool) -> (Task, f64) {
        let (scale, m) = (self.scale, self.room);
        match &self.solved {
            Solved::Run(run) => {
                let table = if lean { T_HT } else { T_TH };
                let task = Task::Run {
                    table,
                    l: run.k,
                    first: 0,
                    m,
                };
                (task, run.get(table, run.k, m, scale))
            }
            Solved::Levels(level) if lean => {
                let t = level.n() - 1;
                let cost = level.rev[level.rev_at(0, t, m, scale)];
                let task = Task::rev(level, 0, (0, t), m, false);
                (task, cost)
            }
            Solved::Levels(level) => {
                let cost = level.top[level.top_at(0, m, scale)];
                let task = Task::top(level, 0, 0, m, Hold::Pinned);
                (task, cost)
            }
        }
    }

    /// The replay cost of the best schedule (`INF` when none fits).
    pub(crate) fn cost(&self) -> f64 {
        self.root(false).1
    }

    /// The best schedule, or `None` when nothing fits.
    pub(crate) fn schedule(&self) -> Option<Schedule> {
        self.emit_root(false, Vec::new())
    }

    /// A whole-step schedule whose forward pass keeps nothing, then the best backward pass
    /// from there: for a step whose forward pass already ran, the values it held dropped.
    pub(crate) fn lean_schedule(&self) -> Option<Schedule> {
        let forward = (0..self.view.len() as u32).map(Action::Compute).collect();
        self.emit_root(true, forward)
    }

    /// `out`, then the whole chain's task (see [`Rotor::root`]); `None` when it does not fit.
    fn emit_root(&self, lean: bool, mut out: Vec<Action>) -> Option<Schedule> {
        let (task, cost) = self.root(lean);
        if cost == INF {
            return None;
        }
        self.emit(vec![task], &mut out);
        Some(Schedule::new(out))
    }

    /// The stage range of items `s..=t` of `level` (its first stage at `base`).
    fn stage_range(level: &Level, base: usize, s: usize, t: usize) -> std::ops::Range<usize> {
        let first = base + level.items[s].first;
        let last = base + level.items[t].first + level.items[t].stages;
        first..last
    }

    fn emit(&self, mut tasks: Vec<Task>, out: &mut Vec<Action>) {
        while let Some(task) = tasks.pop() {
            match task {
                Task::Free(v) => out.push(Action::Free(v)),
                Task::Actions(actions) => out.extend(actions),
                Task::Run { table, l, first, m } => {
                    let Solved::Run(run) = &self.solved else {
                        unreachable!("remat internal error: a run's task without a run")
                    };
                    self.emit_run(run, table, l, first, m, &mut tasks, out);
                }
                Task::Rev {
                    level,
                    base,
                    s,
                    t,
                    m,
                    owned,
                } => self.emit_rev(&level, base, (s, t), m, owned, &mut tasks, out),
                Task::Top {
                    level,
                    base,
                    s,
                    m,
                    hold,
                } => self.emit_top(&level, base, s, m, hold, &mut tasks, out),
            }
        }
    }

    /// The input of item `s` of `level` (its first stage at `base`): the boundary of the
    /// stage before, `None` for the chain's first stage (a leaf).
    fn input_of(&self, level: &Level, base: usize, s: usize) -> Option<u32> {
        let stage = base + level.items[s].first;
        (stage > 0).then(|| self.stages.end[stage - 1])
    }

    /// One `rev(s, t, m)` task of a level (NOTE \[rotor\]); an owned one frees its input
    /// (NOTE \[rotor-owned\]).
    #[allow(clippy::too_many_arguments)]
    fn emit_rev(
        &self,
        level: &Arc<Level>,
        base: usize,
        (s, t): (usize, usize),
        m: usize,
        owned: bool,
        tasks: &mut Vec<Task>,
        out: &mut Vec<Action>,
    ) {
        let scale = self.scale;
        let item = &level.items[s];
        let input = self.input_of(level, base, s).filter(|_| owned);
        match level.choice(
            s,
            Some(t),
            m,
            if owned { Hold::Owned } else { Hold::Pinned },
            scale,
        ) {
            BASE => match &item.kind {
                Kind::Stage(shape) => {
                    let stage = base + item.first;
                    let (k, _) = inner_for(shape, m, true, scale)
                        .expect("remat internal error: the DP chose a plan that fits");
                    inner_rev(self.stages, stage, shape, k, out);
                    out.extend(input.map(Action::Free));
                }
                // The group frees its input itself (NOTE [group-owned]).
                Kind::Group(child) => tasks.push(Task::rev(
                    child,
                    base + item.first,
                    (0, child.n() - 1),
                    m,
                    owned,
                )),
            },
            SKIP => {
                let last = &level.items[t];
                let Kind::Stage(shape) = &last.kind else {
                    unreachable!("remat internal error: a skip is a stage's")
                };
                inner_rev(self.stages, base + last.first, shape, 0, out);
                let room = (m + level.released(t, t, scale)).min(scale.m_max);
                tasks.push(Task::rev(level, base, (s, t - 1), room, owned));
            }
            tape if tape < SPLIT => {
                let Kind::Stage(shape) = &item.kind else {
                    unreachable!("remat internal error: a tape is a stage's")
                };
                let k = (tape - TAPE) as usize;
                let gain = level.early_gain(shape, s, k, owned, scale);
                self.tape(
                    base + item.first,
                    shape,
                    k,
                    None,
                    (input, gain > 0, true),
                    tasks,
                    out,
                );
                let room = (m + gain - scale.units(shape.tapes[k].bytes)).min(scale.m_max);
                tasks.push(Task::rev(
                    level,
                    base,
                    (s + 1, t),
                    room,
                    !shape.keeps_boundary[k],
                ));
            }
            split => {
                let split = (split - SPLIT) as usize;
                let stages = Self::stage_range(level, base, s, split - 1);
                sweep(self.stages, stages.clone(), out);
                let room = (m + level.released(split, t, scale)).min(scale.m_max);
                // The rest owns the boundary the sweep kept; the prefix frees the input
                // when this task owns it.
                tasks.push(Task::rev(level, base, (s, split - 1), room, owned));
                tasks.push(Task::rev(
                    level,
                    base,
                    (split, t),
                    m - level.items[split - 1].boundary_units,
                    true,
                ));
            }
        }
    }

    /// One `top(s, m)` task of a level (NOTE \[rotor\]); an owned one frees its input
    /// (NOTE \[rotor-owned\]), an absent one never reads it (NOTE \[rotor-absent\]).
    #[allow(clippy::too_many_arguments)]
    fn emit_top(
        &self,
        level: &Arc<Level>,
        base: usize,
        s: usize,
        m: usize,
        hold: Hold,
        tasks: &mut Vec<Task>,
        out: &mut Vec<Action>,
    ) {
        let scale = self.scale;
        let item = &level.items[s];
        let owned = hold == Hold::Owned;
        let input = self.input_of(level, base, s).filter(|_| owned);
        let choice = level.choice(s, None, m, hold, scale);
        let (tape, drop) = match choice {
            TAPE_DROP.. if choice < SKIP => (Some((choice - TAPE_DROP) as usize), true),
            TAPE.. if choice < TAPE_DROP => (Some((choice - TAPE) as usize), false),
            _ => (None, false),
        };
        match (choice, tape) {
            (BASE, _) => match &item.kind {
                Kind::Stage(shape) => {
                    let start = self.stages.start[base + item.first];
                    let (k, _) = if hold == Hold::Absent {
                        inner_without_input(shape, m, scale)
                    } else {
                        inner_for(shape, m, false, scale)
                    }
                    .expect("remat internal error: the DP chose a plan that fits");
                    out.extend(
                        shape.inners[k]
                            .schedule
                            .actions()
                            .iter()
                            .map(|&a| offset(a, start)),
                    );
                    out.extend(input.map(Action::Free));
                }
                Kind::Group(child) => tasks.push(Task::top(child, base + item.first, 0, m, hold)),
            },
            (_, Some(k)) => {
                let Kind::Stage(shape) = &item.kind else {
                    unreachable!("remat internal error: a tape is a stage's")
                };
                let gain = level.early_gain(shape, s, k, owned, scale);
                self.tape(
                    base + item.first,
                    shape,
                    k,
                    Some(!drop),
                    (input, gain > 0, true),
                    tasks,
                    out,
                );
                let bytes = shape.tapes[k].bytes - if drop { shape.boundary } else { 0 };
                let room = (m + gain - scale.units(bytes)).min(scale.m_max);
                let hold = match (drop, shape.keeps_boundary[k]) {
                    (true, _) => Hold::Absent,
                    (false, true) => Hold::Pinned,
                    (false, false) => Hold::Owned,
                };
                tasks.push(Task::top(level, base, s + 1, room, hold));
            }
            (split, None) => {
                // A split that keeps its boundary, or none (NOTE [rotor-run-ahead]).
                let (split, kept) = match split.checked_sub(SPLIT_ABSENT) {
                    Some(split) => (split as usize, false),
                    None => ((split - SPLIT) as usize, true),
                };
                let stages = Self::stage_range(level, base, s, split - 1);
                let first = self.stages.start[stages.start];
                let boundary = self.stages.end[stages.end - 1];
                out.extend((first..=boundary).map(Action::Compute));
                let n = level.n();
                let room = (m + level.released(split, n - 1, scale)).min(scale.m_max);
                tasks.push(Task::rev(level, base, (s, split - 1), room, owned));
                if kept {
                    out.push(Action::Keep(boundary));
                    let m = m - level.items[split - 1].boundary_units;
                    tasks.push(Task::top(level, base, split, m, Hold::Owned));
                } else {
                    tasks.push(Task::top(level, base, split, m, Hold::Absent));
                }
            }
        }
    }

    /// One task of a run (NOTE \[rotor-run\]): its base pushes the part's own DP; a split
    /// runs or computes the prefix now and pushes the rest, the free and the prefix's task.
    #[allow(clippy::too_many_arguments)]
    fn emit_run(
        &self,
        run: &Run,
        table: usize,
        l: usize,
        first: usize,
        m: usize,
        tasks: &mut Vec<Task>,
        out: &mut Vec<Action>,
    ) {
        let scale = self.scale;
        let choice = run.choices[table][run.at(l, m, scale)];
        let leaf = from_leaf(table);
        if choice == BASE {
            match (leaf, to_tail(table)) {
                (false, false) => {
                    let level = Run::level(&run.block);
                    let t = level.n() - 1;
                    tasks.push(Task::rev(&level, run.block_stage(first), (0, t), m, false));
                }
                (true, false) => {
                    if let Some(head) = &run.head {
                        let level = Run::level(head);
                        let t = level.n() - 1;
                        tasks.push(Task::rev(&level, 0, (0, t), m, false));
                    }
                }
                (false, true) => {
                    let level = Run::level(&run.tail);
                    let base = run.block_stage(run.k);
                    if top_form(table) {
                        tasks.push(Task::top(&level, base, 0, m, Hold::Pinned));
                    } else {
                        let t = level.n() - 1;
                        tasks.push(Task::rev(&level, base, (0, t), m, false));
                    }
                }
                (true, true) => {
                    unreachable!("remat internal error: no base from the leaves to the tail")
                }
            }
            return;
        }
        assert!(
            choice != NO_CHOICE,
            "remat internal error: a run's task that does not fit"
        );
        if choice < SPLIT {
            let tape = &run.tapes[(choice - RUN_TAPE) as usize];
            let first_stage = run.block_stage(first);
            for (i, shape) in tape.shapes.iter().enumerate() {
                let k = tape.options[i];
                let top = top_form(table).then_some(true);
                self.tape(
                    first_stage + i,
                    shape,
                    k,
                    top,
                    (None, false, false),
                    tasks,
                    out,
                );
            }
            tasks.push(Task::Run {
                table,
                l: l - 1,
                first: first + 1,
                m: m - tape.bytes,
            });
            return;
        }
        let j = (choice - SPLIT) as usize;
        let start = if leaf { 0 } else { run.block_stage(first) };
        let end = run.block_stage(first + j);
        let x = run.boundary_units(j);
        let rest = Task::Run {
            table: rest_of(table),
            l: l - j,
            first: first + j,
            m: m - x,
        };
        if start == end {
            // No head and no block before: the rest starts from the leaves.
            tasks.push(rest);
            return;
        }
        let boundary = self.stages.end[end - 1];
        if top_form(table) {
            let from = self.stages.start[start];
            out.extend((from..=boundary).map(Action::Compute));
            out.push(Action::Keep(boundary));
        } else {
            sweep(self.stages, start..end, out);
        }
        let fixed =
            (l - j) as u64 * run.block.fixed + if to_tail(table) { run.tail.fixed } else { 0 };
        let prefix = Task::Run {
            table: prefix_of(table),
            l: j,
            first,
            m: (m + (fixed / scale.unit) as usize).min(scale.m_max),
        };
        push_split(tasks, rest, boundary, prefix);
    }

    /// A stage's tape with its inner plan `k` (NOTE \[rotor\]): its forward part now (in
    /// the forward pass, `top`: the plan's own, the boundary kept; else its rev form), and
    /// pushed to run after the next stages, the boundary freed if only they read it (unless
    /// `rest_owns_boundary`: the next stages' task frees it), then the plan's backward part.
    /// An owned `input` (NOTE \[rotor-owned\]) is freed now if the stage is done with it,
    /// else after its backward part.
    #[allow(clippy::too_many_arguments)]
    fn tape(
        &self,
        stage: usize,
        shape: &Shape,
        k: usize,
        top: Option<bool>,
        (input, early, rest_owns_boundary): (Option<u32>, bool, bool),
        tasks: &mut Vec<Task>,
        out: &mut Vec<Action>,
    ) {
        let start = self.stages.start[stage];
        let inner = &shape.inners[k];
        let last = shape.len - 1;
        let boundary_kept = shape.keeps_boundary[k];
        let (forward, backward) = inner.schedule.actions().split_at(inner.split);
        // Freed early (the DP counted its room): before the stage in the forward pass, at
        // its last reader in the rev form.
        let early = input.filter(|_| early);
        if let Some(keep) = top {
            out.extend(early.map(Action::Free));
            out.extend(forward.iter().map(|&a| offset(a, start)));
            if !boundary_kept && keep {
                out.push(Action::Keep(start + last));
            }
        } else {
            let tape = &shape.tapes[k];
            if tape.input_last.is_none() {
                out.extend(early.map(Action::Free));
            }
            for (p, &i) in tape.forward.replays.iter().enumerate() {
                out.push(Action::Replay(start + i));
                if tape.input_last == Some(p) {
                    out.extend(early.map(Action::Free));
                }
                out.extend(
                    tape.forward.frees[p]
                        .iter()
                        .map(|&u| Action::Free(start + u)),
                );
            }
        }
        if let Some(input) = input.filter(|_| early.is_none()) {
            if shape.input_done[k] {
                out.push(Action::Free(input));
            } else {
                tasks.push(Task::Free(input));
            }
        }
        tasks.push(Task::Actions(
            backward.iter().map(|&a| offset(a, start)).collect(),
        ));
        if !boundary_kept && !rest_owns_boundary {
            tasks.push(Task::Free(start + last));
        }
    }
}

/// A split's tasks after its prefix ran up to `boundary` (kept): the `rest` from it, then
/// the boundary freed, then the `prefix`'s own backward (pushed last first).
fn push_split(tasks: &mut Vec<Task>, rest: Task, boundary: u32, prefix: Task) {
    tasks.push(prefix);
    tasks.push(Task::Free(boundary));
    tasks.push(rest);
}

/// The actions of a straight replay through the stage whose first node is `start`.
fn replay(start: u32, replays: &Replays, out: &mut Vec<Action>) {
    for (p, &i) in replays.replays.iter().enumerate() {
        out.push(Action::Replay(start + i));
        out.extend(replays.frees[p].iter().map(|&u| Action::Free(start + u)));
    }
}

/// A stage's inner plan `k` in the rev form (NOTE \[stages\] in `blocks.rs`).
fn inner_rev(stages: &Stages, stage: usize, shape: &Shape, k: usize, out: &mut Vec<Action>) {
    let start = stages.start[stage];
    let inner = &shape.inners[k];
    replay(start, &inner.rev_forward, out);
    out.extend(
        inner.schedule.actions()[inner.split..]
            .iter()
            .map(|&a| offset(a, start)),
    );
}

/// A straight replay through stages `range` from the input of the first (held by the
/// caller), keeping the boundary of the last: each stage's values are freed after their
/// last use, each boundary after the next stage's last read of it.
fn sweep(stages: &Stages, range: std::ops::Range<usize>, out: &mut Vec<Action>) {
    let first = range.start;
    for stage in range {
        let shape = &stages.shape[stage];
        let start = stages.start[stage];
        let input = (stage > first).then(|| start - 1);
        if let Some(input) = input
            && shape.input_last.is_none()
        {
            out.push(Action::Free(input));
        }
        for (k, &i) in shape.sweep.replays.iter().enumerate() {
            out.push(Action::Replay(start + i));
            if let Some(input) = input
                && shape.input_last == Some(k)
            {
                out.push(Action::Free(input));
            }
            out.extend(
                shape.sweep.frees[k]
                    .iter()
                    .map(|&u| Action::Free(start + u)),
            );
        }
    }
}

/// An action on a stage's own indices moved to the view's.
fn offset(action: Action, start: u32) -> Action {
    match action {
        Action::Compute(i) => Action::Compute(start + i),
        Action::Keep(i) => Action::Keep(start + i),
        Action::Replay(i) => Action::Replay(start + i),
        Action::Free(i) => Action::Free(start + i),
        Action::Step(i) => Action::Step(start + i),
    }
}

impl Task {
    /// The rev of items `s..=t` of `level` (its first stage at `base`) in room `m`; an
    /// `owned` one frees the input of `s` (NOTE \[rotor-owned\]), else the caller does.
    fn rev(level: &Arc<Level>, base: usize, (s, t): (usize, usize), m: usize, owned: bool) -> Self {
        Task::Rev {
            level: level.clone(),
            base,
            s,
            t,
            m,
            owned,
        }
    }

    /// The top of items `s..` of `level` (its first stage at `base`) in room `m`, its input
    /// held as `hold` says.
    fn top(level: &Arc<Level>, base: usize, s: usize, m: usize, hold: Hold) -> Self {
        Task::Top {
            level: level.clone(),
            base,
            s,
            m,
            hold,
        }
    }
}

enum Task {
    /// `owned`: the task frees the input of item `s` (NOTE \[rotor-owned\]).
    Rev {
        level: Arc<Level>,
        base: usize,
        s: usize,
        t: usize,
        m: usize,
        owned: bool,
    },
    Top {
        level: Arc<Level>,
        base: usize,
        s: usize,
        m: usize,
        hold: Hold,
    },
    Run {
        table: usize,
        l: usize,
        first: usize,
        m: usize,
    },
    Free(u32),
    Actions(Vec<Action>),
}

/// The leaf items of `stages` under `scale`.
fn stage_items(stages: &Stages, scale: Scale) -> Vec<Item> {
    let width = scale.m_max + 1;
    type Curves = (Arc<[f64]>, Arc<[f64]>, Arc<[f64]>);
    let mut curves: HashMap<u64, Curves> = HashMap::new();
    (0..stages.len())
        .map(|k| {
            let shape = stages.shape[k].clone();
            let (rev, top, top_absent) = curves
                .entry(stages.key[k])
                .or_insert_with(|| {
                    let curve = |rev: bool| -> Arc<[f64]> {
                        (0..width)
                            .map(|m| inner_for(&shape, m, rev, scale).map_or(INF, |(_, c)| c))
                            .collect()
                    };
                    let absent: Arc<[f64]> = (0..width)
                        .map(|m| inner_without_input(&shape, m, scale).map_or(INF, |(_, c)| c))
                        .collect();
                    (curve(true), curve(false), absent)
                })
                .clone();
            Item {
                first: k,
                stages: 1,
                key: stages.key[k],
                boundary: shape.boundary,
                boundary_units: scale.units(shape.boundary),
                fixed: shape.fixed,
                sweep_cost: shape.sweep.cost,
                sweep_first: scale.units(shape.sweep.peak),
                sweep_later: scale.units(shape.sweep_through_peak),
                kind: Kind::Stage(shape),
                rev_owned: rev.clone(),
                top_owned: top.clone(),
                top_absent,
                rev,
                top,
            }
        })
        .collect()
}

/// The levels of the DP over `stages` (see NOTE \[rotor\]), at most `group` items each,
/// cut from the stages up or from the root down (NOTE \[level-cuts\]); returns the root.
fn build(stages: &Stages, scale: Scale, how: Cut) -> Arc<Level> {
    let mut items = stage_items(stages, scale);
    let mut solved = HashMap::new();
    match how {
        Cut::BottomUp(group) => {
            while items.len() > group {
                let groups = items.len().div_ceil(group);
                let size = items.len().div_ceil(groups);
                items = cut(&items, size, None, scale, 0, &mut solved);
            }
        }
        Cut::TopDown { top, period } => {
            // Equal groups share one DP: the root's groups of a repeating chain start at the
            // same place in its period, and each is one flat level where it has at most
            // `FLAT_GROUP` stages.
            let size = items.len().div_ceil(top).next_multiple_of(period);
            let inner = if period > 1 && size <= FLAT_GROUP {
                FLAT_GROUP
            } else {
                top
            };
            if items.len() > top {
                items = cut(&items, size, Some(inner), scale, 0, &mut solved);
            }
        }
    }
    Arc::new(Level::solve(items, scale, 0))
}

/// How a chain's stages are cut into groups (NOTE \[level-cuts\]).
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Groups of at most this many stages, then groups of those, until a level takes them.
    BottomUp(usize),
    /// At most `top` items at the root, each a group of a whole number of `period`s of
    /// stages (one flat level on a repeating chain where it is short enough), else cut the
    /// same way within.
    TopDown { top: usize, period: usize },
}

/// `items` cut into groups of `size` consecutive items (the last may be shorter), each
/// solved by its own level, cut within into levels of at most `within` items where given
/// (NOTE \[level-cuts\]). `input`: the units of the boundary before `items`.
fn cut(
    items: &[Item],
    size: usize,
    within: Option<usize>,
    scale: Scale,
    input: usize,
    solved: &mut Solutions,
) -> Vec<Item> {
    let mut input = input;
    let mut out = Vec::new();
    for chunk in items.chunks(size) {
        let inner = match within {
            Some(inner) => level_items(chunk, inner, scale, input, solved),
            None => chunk.to_vec(),
        };
        // A group's input is the boundary of the item before it; the first group's is the
        // chain's input, a leaf whose freeing gains nothing (NOTE [group-owned]).
        let item = match &inner[..] {
            [one] => one.clone(),
            _ => group_item(&inner, scale, input, solved),
        };
        input = ((item.boundary / scale.unit) as usize).min(scale.m_max);
        out.push(item);
    }
    out
}

/// The items of one level over `items`, at most `group`, cut from the top: as many groups
/// as the level takes, each cut the same way within (NOTE \[level-cuts\]). `input`: the
/// units of the boundary before `items`.
fn level_items(
    items: &[Item],
    group: usize,
    scale: Scale,
    input: usize,
    solved: &mut Solutions,
) -> Vec<Item> {
    if items.len() <= group {
        return items.to_vec();
    }
    let size = items.len().div_ceil(group);
    cut(items, size, Some(group), scale, input, solved)
}

/// Levels solved for groups, by their items' keys and input units.
type Solutions = HashMap<(Vec<u64>, usize), Arc<Level>>;

/// One item for the consecutive `chunk`, solved by its own level (shared by equal chunks
/// with inputs of the same units), whose input gains `input_units` where freed.
fn group_item(chunk: &[Item], scale: Scale, input_units: usize, solved: &mut Solutions) -> Item {
    let keys: Vec<u64> = chunk.iter().map(|item| item.key).collect();
    let key = group_key(&keys);
    let first = chunk[0].first;
    let level = solved
        .entry((keys, input_units))
        .or_insert_with(|| {
            let relative = chunk
                .iter()
                .map(|item| Item {
                    first: item.first - first,
                    ..item.clone()
                })
                .collect();
            Arc::new(Level::solve(relative, scale, input_units))
        })
        .clone();
    let last = chunk.last().expect("chunks are not empty");
    let width = scale.m_max + 1;
    let t = level.n() - 1;
    let revs = |table: &[f64]| -> Arc<[f64]> {
        (0..width)
            .map(|m| table[level.rev_at(0, t, m, scale)])
            .collect()
    };
    let tops = |table: &[f64]| -> Arc<[f64]> {
        (0..width)
            .map(|m| table[level.top_at(0, m, scale)])
            .collect()
    };
    Item {
        first,
        stages: chunk.iter().map(|item| item.stages).sum(),
        key,
        boundary: last.boundary,
        boundary_units: last.boundary_units,
        fixed: chunk.iter().map(|item| item.fixed).sum(),
        sweep_cost: chunk.iter().map(|item| item.sweep_cost).sum(),
        sweep_first: chunk
            .iter()
            .skip(1)
            .map(|item| item.sweep_later)
            .fold(chunk[0].sweep_first, usize::max),
        sweep_later: chunk.iter().map(|item| item.sweep_later).max().unwrap_or(0),
        rev: revs(&level.rev),
        top: tops(&level.top),
        rev_owned: revs(&level.rev_owned),
        top_owned: tops(&level.top_owned),
        top_absent: tops(&level.top_absent),
        kind: Kind::Group(level),
    }
}

/// A key for a group of items with these keys (the signatures' hash).
fn group_key(keys: &[u64]) -> u64 {
    let mut hasher = super::SignatureHasher::new();
    for &key in keys {
        hasher.word(key);
    }
    hasher.prefix()
}

thread_local! {
    /// How deep the planner is in stages' inner plans (a stage's own stages are planned as
    /// a chain too, to [`MAX_NESTING`] levels).
    static NESTING: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// The most levels of stages within stages the planner plans as chains.
const MAX_NESTING: u32 = 3;

thread_local! {
    /// The stages of the views planned last on this thread, by a hash of their structure
    /// and costs: a trade-off report plans one view at ten budgets, and a stage's inner
    /// plans do not depend on the budget.
    static RECENT: core::cell::RefCell<Vec<(u64, Option<Arc<Stages>>)>> =
        const { core::cell::RefCell::new(Vec::new()) };
}

/// How many views' stages [`RECENT`] keeps.
const RECENT_KEPT: usize = 4;

/// The stages of `view` if the planner plans it as a chain here (not too deep in stages'
/// inner plans).
pub(crate) fn stages_of(view: &GraphView) -> Option<Arc<Stages>> {
    let depth = NESTING.with(|n| n.get());
    if depth >= MAX_NESTING {
        return None;
    }
    let costs: Vec<u64> = view.nodes().iter().map(|n| n.cost.to_bits()).collect();
    let key = group_key(&costs) ^ super::signature(view).rotate_left(17);
    let cached = RECENT.with(|recent| {
        let recent = recent.borrow();
        recent
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| s.clone())
    });
    if let Some(stages) = cached {
        return stages;
    }
    NESTING.with(|n| n.set(depth + 1));
    let stages = Stages::of(view).map(Arc::new);
    NESTING.with(|n| n.set(depth));
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        if recent.len() >= RECENT_KEPT {
            recent.remove(0);
        }
        recent.push((key, stages.clone()));
    });
    stages
}

/// The smallest budget a chain of `stages` runs with (the lean chain schedule: for each
/// stage from the last, replay from the first stage to its input, then its smallest inner
/// plan), whatever its length: one boundary and the largest stage's own need, plus the
/// constants.
pub(crate) fn min_budget(view: &GraphView, stages: &Stages) -> u64 {
    let mut need = 0u64;
    let mut sweep = 0u64; // the most a sweep from the first stage to stage k's input holds
    for k in 0..stages.len() {
        let shape = &stages.shape[k];
        let input = if k == 0 {
            0
        } else {
            stages.shape[k - 1].boundary
        };
        let inner = shape
            .inners
            .iter()
            .map(|inner| inner.rev_peak.saturating_sub(shape.fixed))
            .min()
            .unwrap_or(u64::MAX);
        need = need.max(sweep).max(input.saturating_add(inner));
        sweep = sweep.max(if k == 0 {
            shape.sweep.peak
        } else {
            shape.sweep_through_peak
        });
    }
    need + fixed_total(view)
}

/// The lean chain schedule of [`min_budget`]: a forward pass that keeps nothing, then for
/// each stage from the last, a straight replay to its input, kept, and its smallest inner
/// plan in the rev form. Valid at [`min_budget`]; quadratic in replays (the fallback where
/// the DP's units round a budget near the smallest away).
pub(crate) fn lean_chain(view: &GraphView, stages: &Stages) -> Schedule {
    let mut out: Vec<Action> = (0..view.len() as u32).map(Action::Compute).collect();
    for k in (0..stages.len()).rev() {
        if k > 0 {
            sweep(stages, 0..k, &mut out);
        }
        let shape = &stages.shape[k];
        let smallest = (0..shape.inners.len())
            .min_by_key(|&i| shape.inners[i].rev_peak)
            .expect("a stage has its keep-all plan");
        inner_rev(stages, k, shape, smallest, &mut out);
        if k > 0 {
            out.push(Action::Free(stages.end[k - 1]));
        }
    }
    Schedule::new(out)
}

/// A backward pass for a step whose forward pass already ran and left `held` held, as a
/// whole schedule (a forward pass that keeps `held`, then the backward): the held values
/// are dropped, and the chain is reversed from there by the DP (`rev` over the whole
/// chain). Returns the schedule and its replay cost; `None` when the view is not a chain of
/// stages or nothing fits. The engine's first step under a budget, which has no plan yet,
/// resumes this way when it is cheaper than its online eviction.
pub(crate) fn resume(view: &GraphView, held: &[u32], budget: u64) -> Option<(Schedule, f64)> {
    let stages = stages_of(view)?;
    let mut held = held.to_vec();
    held.sort_unstable();
    held.dedup();
    let mut body = match Rotor::for_resume(view, &stages, budget).and_then(|r| r.lean_schedule()) {
        Some(schedule) => schedule,
        None if budget >= min_budget(view, &stages) => lean_chain(view, &stages),
        None => return None,
    };
    let actions = std::mem::take(&mut body).into_actions();
    let n = view.len();
    let mut out = Vec::with_capacity(actions.len() + 2 * held.len());
    for &a in &actions[..n] {
        out.push(a);
        if let Action::Compute(i) = a
            && held.binary_search(&i).is_ok()
        {
            out.push(Action::Keep(i));
        }
    }
    out.extend(held.iter().map(|&h| Action::Free(h)));
    out.extend_from_slice(&actions[n..]);
    let schedule = Schedule::new(out);
    let cost = super::simulate(view, &schedule, budget)
        .ok()?
        .recompute_cost;
    Some((schedule, cost))
}

/// NOTE [replay-plan]: a backward pass for a step whose forward pass already ran and left
/// `held` held (the first step under a budget, run online, NOTE \[forward-overflow\] in
/// `checkpoint/budget/session.rs`), by the whole-step plan of the view run once more: the held
/// values are dropped, the plan's forward part is replayed in its rev form (what it keeps at
/// its end, rebuilt in index order, each value freed after its last use: NOTE \[stages\] in
/// `blocks.rs`, the whole view one stage), then its backward part runs unchanged. One more
/// forward pass than the plan, on any graph whose values can all be rebuilt, where online
/// eviction from the held state may need far more than the plan (Burn's `Gru` with a loss on
/// every output: the online first step stopped at half of SaveAll's bytes, which its plan
/// fits). Returns the schedule and its replay cost; `None` when the view does not plan
/// within `budget` or the rev form does not fit.
pub(crate) fn replay_plan(view: &GraphView, held: &[u32], budget: u64) -> Option<(Schedule, f64)> {
    if view.is_empty() || !view.nodes().iter().all(super::view::rebuildable) {
        return None;
    }
    let mut held = held.to_vec();
    held.sort_unstable();
    held.dedup();
    // The rev form holds every constant from its start, and its replays' values in flight
    // beside what the plan keeps: a plan at the budget may not fit so. Planned again below
    // the budget by what the rev form passed it, a few times.
    let mut within = budget;
    for _ in 0..4 {
        let plan = super::plan(view, within).ok()?;
        let schedule = replayed(view, &held, super::blocks::Inner::new(view, plan)?);
        let outcome = super::simulate(view, &schedule, u64::MAX).ok()?;
        if outcome.peak_bytes <= budget {
            return Some((schedule, outcome.recompute_cost));
        }
        within = within.checked_sub(outcome.peak_bytes - budget)?;
    }
    None
}

/// The whole-step schedule of NOTE \[replay-plan\]: a forward pass that keeps `held`
/// (sorted), the held values dropped, `inner`'s forward part replayed, its backward part.
fn replayed(view: &GraphView, held: &[u32], inner: super::blocks::Inner) -> Schedule {
    let n = view.len() as u32;
    let actions = inner.schedule.actions();
    let mut out = Vec::with_capacity(n as usize + 2 * held.len() + actions.len());
    for i in 0..n {
        out.push(Action::Compute(i));
        if held.binary_search(&i).is_ok() {
            out.push(Action::Keep(i));
        }
    }
    out.extend(held.iter().map(|&h| Action::Free(h)));
    replay(0, &inner.rev_forward, &mut out);
    out.extend_from_slice(&actions[inner.split..]);
    Schedule::new(out)
}

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
struct Run {
    head: Option<Item>,
    block: Item,
    /// The block's stages taped one after the other (NOTE \[rotor\]'s tape, for a whole
    /// block), one per inner plan index: a rest may run from the tape, then the block's
    /// steps from it.
    tapes: Vec<BlockTape>,
    tail: Item,
    head_stages: usize,
    block_stages: usize,
    k: usize,
    tables: Vec<Vec<f64>>,
    choices: Vec<Vec<u32>>,
    /// Counts the tables (NOTE \[planner-memory\]).
    meter: Option<TableMeter>,
}

/// A block's tape: every stage's tape, made one after the other.
struct BlockTape {
    /// The stages' shapes, in order, and the inner plan each tapes with.
    shapes: Vec<Arc<Shape>>,
    options: Vec<usize>,
    /// Units held while the rest runs, while the tape is made (rev form, forward-pass
    /// form), and while the block's steps run from it.
    bytes: usize,
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
const RUN_TAPE: u32 = 1;

const T_R: usize = 0;
const T_RT: usize = 1;
const T_T: usize = 2;
const T_H: usize = 3;
const T_HT: usize = 4;
const T_TH: usize = 5;

/// The most blocks of a run's tables at [`RUN_UNITS`] units (NOTE \[run-merge\]).
const MAX_BLOCKS: usize = 1024;

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
fn unmerged_units(blocks: usize, room: u64, boundary: u64, run_units: u64) -> Option<u64> {
    let entries = MAX_BLOCKS as u64 * (run_units + 1);
    let affordable = (entries / (blocks as u64 + 1)).saturating_sub(1);
    (affordable >= unmerged_needed(room, boundary)).then_some(affordable.min(run_units))
}

/// The units an unmerged run needs: [`RUN_PER_BOUNDARY`] for each boundary the room holds.
fn unmerged_needed(room: u64, boundary: u64) -> u64 {
    (room / boundary.max(1) + 1).saturating_mul(RUN_PER_BOUNDARY)
}

/// The most tables a run solves: the lean form's six (four without it).
const RUN_TABLES: u64 = 6;

/// A choice of a run's table: the base case, or a split after the head and `j` blocks
/// (`SPLIT + j`).
const NO_CHOICE: u32 = u32::MAX;

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

fn from_leaf(table: usize) -> bool {
    table >= T_H
}

fn to_tail(table: usize) -> bool {
    matches!(table, T_RT | T_T | T_HT | T_TH)
}

fn top_form(table: usize) -> bool {
    matches!(table, T_T | T_TH)
}

/// The table of a split's rest (from a held boundary, to the same end, in the same form).
fn rest_of(table: usize) -> usize {
    match table {
        T_R | T_H => T_R,
        T_RT | T_HT => T_RT,
        _ => T_T,
    }
}

/// The table of a split's prefix (rev, ending at a block).
fn prefix_of(table: usize) -> usize {
    if from_leaf(table) { T_H } else { T_R }
}

impl Run {
    /// The run in `items` (single stages) laid out as [`Run::layout`] found it in their
    /// keys: a head of `head_stages`, `k` equal blocks of `p` stages, and a tail.
    fn find(
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
    fn layout(keys: &[u64]) -> Option<(usize, usize, usize)> {
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

    fn at(&self, l: usize, m: usize, scale: Scale) -> usize {
        l * (scale.m_max + 1) + m
    }

    fn get(&self, table: usize, l: usize, m: usize, scale: Scale) -> f64 {
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
    fn boundary_units(&self, j: usize) -> usize {
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
    fn block_stage(&self, i: usize) -> usize {
        self.head_stages + i * self.block_stages
    }

    fn level(item: &Item) -> Arc<Level> {
        match &item.kind {
            Kind::Group(level) => level.clone(),
            Kind::Stage(_) => unreachable!("remat internal error: a run's parts are groups"),
        }
    }
}
