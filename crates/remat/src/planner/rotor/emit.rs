//! A solved chain's schedule: the DP's choices read back from the root's task, with an
//! explicit stack of tasks (a level's `rev` and `top`, a run's table entry, a free, a run
//! of actions), each pushing the tasks it splits into; and the straight replays, sweeps and
//! rev forms of stages that the tasks and the lean chain schedule are made of.

use std::sync::Arc;

use super::level::{
    BASE, Hold, INF, Kind, Level, SKIP, SPLIT, SPLIT_ABSENT, TAPE, TAPE_DROP, inner_for,
    inner_without_input,
};
use super::run::{
    NO_CHOICE, RUN_TAPE, Run, T_HT, T_TH, from_leaf, prefix_of, rest_of, to_tail, top_form,
};
use super::solve::{Rotor, Solved};
use crate::planner::Action;
use crate::planner::Schedule;
use crate::planner::blocks::{Replays, Shape, Stages};

impl Rotor<'_> {
    /// The whole chain's task (NOTE \[rotor\]): in the forward-pass form (the step), or
    /// with `lean` in the rev form (a backward pass from a state where nothing is held).
    fn root_task(&self, lean: bool) -> Task {
        let m = self.room;
        match &self.solved {
            Solved::Run(run) => Task::Run {
                table: if lean { T_HT } else { T_TH },
                l: run.k,
                first: 0,
                m,
            },
            Solved::Levels(level) if lean => {
                let t = level.n() - 1;
                Task::rev(level, 0, (0, t), m, false)
            }
            Solved::Levels(level) => Task::top(level, 0, 0, m, Hold::Pinned),
        }
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

    /// `out`, then the whole chain's task (see [`Rotor::root_task`]); `None` when it does not
    /// fit.
    fn emit_root(&self, lean: bool, mut out: Vec<Action>) -> Option<Schedule> {
        if self.root_cost(lean) == INF {
            return None;
        }
        self.emit(vec![self.root_task(lean)], &mut out);
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
pub(crate) fn replay(start: u32, replays: &Replays, out: &mut Vec<Action>) {
    for (p, &i) in replays.replays.iter().enumerate() {
        out.push(Action::Replay(start + i));
        out.extend(replays.frees[p].iter().map(|&u| Action::Free(start + u)));
    }
}

/// A stage's inner plan `k` in the rev form (NOTE \[stages\] in `blocks.rs`).
pub(super) fn inner_rev(
    stages: &Stages,
    stage: usize,
    shape: &Shape,
    k: usize,
    out: &mut Vec<Action>,
) {
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
pub(super) fn sweep(stages: &Stages, range: std::ops::Range<usize>, out: &mut Vec<Action>) {
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
