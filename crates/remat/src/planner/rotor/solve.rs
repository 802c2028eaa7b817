//! The chain planner for one view at one budget ([`Rotor`]): the memory units its tables
//! afford (NOTE [planner-memory]), then the chain solved as levels cut one or several ways
//! (`cuts.rs`) or as a run (`run.rs`), the cheapest kept (NOTE \[run-or-levels\]).

use std::sync::Arc;

use super::cuts::{Cut, FLAT, FLAT_GROUP, GROUP, TIGHT_CUTS, build, stage_items};
use super::level::{ENTRY_BYTES, Level, Scale, TableMeter, level_entries};
use super::run::{
    MAX_BLOCKS, RUN_TABLES, RUN_UNITS, Run, T_HT, T_TH, unmerged_needed, unmerged_units,
};
use crate::planner::GraphView;
use crate::planner::blocks::Stages;

/// The most memory units of a budget.
pub(super) const UNITS: u64 = 160;

// NOTE [planner-memory]: the DP's tables are the planner's memory, and the planner runs in
// the step it plans for (after the first backward pass under a budget, when the plan for the
// next steps is made), so they count in the process's peak as much as the values the budget
// bounds. At full resolution they took 35-44 MB planning a 400-block recurrence of 80 KB
// matrices under budgets of 1.6 to 32 MB: the first step's heap peaked at 1.3x SaveAll's
// whatever the budget. The tables of one solve may now take at most [`table_cap`]: a quarter
// of the room, [`MIN_TABLE_CAP`], or an eighth of what the view's steps read (what keeping
// all holds), whichever is most: half, 256 KiB and a quarter while the levels' `rev` tables
// were laid out square, twice their size (NOTE \[rev-triangle\] in `level.rs`), so the
// levels' units are as then. Finer units are not always better plans: at the old cap,
// Burn's recorded `Lstm` at 13% of its bytes replayed 4.3 forward passes where it replays
// 2.8 (`burn_s_lstm_is_planned_by_its_tuples_below_a_sixth_of_its_bytes`). A run's tables are not triangles: it takes the whole cap where it took half (at
// half, a 10,000-block power iteration at 3 slots replayed 15.42 forward passes, not 14.98).
// The last share keeps the level cuts that long chains at tight
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
const MIN_TABLE_CAP: u64 = 128 << 10;

/// The share of the bytes steps read (what keeping all holds) the tables of one solve may
/// take (NOTE \[planner-memory\]).
const TABLE_SHARE_OF_KEPT: u64 = 8;

/// The memory the DP's tables may take for a room of `room` bytes in a view whose steps
/// read values of `kept` bytes in all (NOTE \[planner-memory\]).
pub(crate) fn table_cap(room: u64, kept: u64) -> u64 {
    (room / 4)
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

/// The chain planner for one view at one budget.
pub(crate) struct Rotor<'a> {
    pub(super) view: &'a GraphView,
    pub(super) stages: &'a Stages,
    pub(super) scale: Scale,
    pub(super) solved: Solved,
    /// Room at the top, in units.
    pub(super) room: usize,
}

/// How the chain was solved: levels of items (one, or grouped), or as a run when it
/// repeats and is longer than a level (NOTE \[rotor-run\]).
pub(super) enum Solved {
    Levels(Arc<Level>),
    Run(Box<Run>),
}

/// Bytes of the view's constants.
pub(super) fn fixed_total(view: &GraphView) -> u64 {
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
            // Each try's tables within the cap, as they were within half of twice it before
            // the levels' `rev` tables became triangles (NOTE [planner-memory]): a run's
            // tables are not, and at half this cap a 10,000-block power iteration at 3 slots
            // replayed 15.42 forward passes where it replays 14.98.
            let within = |items: usize| {
                let tables = if lean { RUN_TABLES } else { RUN_TABLES - 2 };
                let per_unit = tables * (items as u64 + 1) * ENTRY_BYTES;
                (cap / per_unit).saturating_sub(1).max(MIN_UNITS)
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
                .min_by(|a, b| a.root_cost(lean).total_cmp(&b.root_cost(lean)))
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
                .min_by(|a, b| a.root_cost(lean).total_cmp(&b.root_cost(lean)))
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
            if levels.root_cost(lean) < run.root_cost(lean) {
                return Some(levels);
            }
        }
        Some(run)
    }

    /// The whole chain's cost: in the forward-pass form (the step), or with `lean` in the
    /// rev form (a backward pass from a state where nothing is held; `INF` for a run solved
    /// without its lean tables, by [`Rotor::new`]).
    pub(super) fn root_cost(&self, lean: bool) -> f64 {
        let (scale, m) = (self.scale, self.room);
        match &self.solved {
            Solved::Run(run) => {
                let table = if lean { T_HT } else { T_TH };
                run.get(table, run.k, m, scale)
            }
            Solved::Levels(level) if lean => {
                let t = level.n() - 1;
                level.rev[level.rev_at(0, t, m, scale)]
            }
            Solved::Levels(level) => level.top[level.top_at(0, m, scale)],
        }
    }

    /// The replay cost of the best schedule (`INF` when none fits).
    pub(crate) fn cost(&self) -> f64 {
        self.root_cost(false)
    }
}
