//! Schedules: one sequence of actions over a whole training step (forward and backward).
//!
//! # Invariants
//! A schedule is only a list; [`simulate`](super::simulate) is the one place that says
//! whether it is valid for a view and what it costs.

use std::ops::Range;

/// One action of a [`Schedule`]. The `u32` is a node index of the [`GraphView`](super::GraphView).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The forward pass runs node `i`'s op (in index order; no recompute cost). Its output is
    /// the user's tensor: remat holds it only after a [`Action::Keep`].
    Compute(u32),
    /// remat keeps value `i` for backward. Only in the forward pass, right after
    /// `Compute(i)` or after `Compute(j)` of a node `j` that reads `i` (the value is in hand).
    Keep(u32),
    /// Backward rebuilds value `i` by replaying its op (cost `cost[i]`); every input must be
    /// held. The value is held afterwards.
    Replay(u32),
    /// remat drops value `i`. Directly after an op that reads `i`, the op takes it (its last
    /// read): the value leaves before the op's output arrives.
    Free(u32),
    /// Node `i`'s backward step runs (in the view's step order); every value it reads must be
    /// held. It releases its constants (unless a later step holds them: `Node::fixed_until`)
    /// and those whose `fixed_until` it is.
    Step(u32),
}

impl Action {
    /// The node the action is about.
    pub fn node(self) -> u32 {
        match self {
            Action::Compute(i)
            | Action::Keep(i)
            | Action::Replay(i)
            | Action::Free(i)
            | Action::Step(i) => i,
        }
    }

    /// The same action about node `i` (renumbering a schedule's nodes).
    pub fn with_node(self, i: u32) -> Action {
        match self {
            Action::Compute(_) => Action::Compute(i),
            Action::Keep(_) => Action::Keep(i),
            Action::Replay(_) => Action::Replay(i),
            Action::Free(_) => Action::Free(i),
            Action::Step(_) => Action::Step(i),
        }
    }

    /// Whether the action runs an op (a forward op, a replay or a backward step).
    pub fn is_op(self) -> bool {
        matches!(
            self,
            Action::Compute(_) | Action::Replay(_) | Action::Step(_)
        )
    }
}

/// `actions` with each `(k, action)` of `after` inserted right after position `k` (those at
/// one position in the order given) and the positions listed in `dropped` (ascending) left
/// out: how a
/// schedule planned on a derived view is completed for the real one (`pinned.rs`,
/// `tuples.rs`).
pub(crate) fn with_inserted(
    actions: &[Action],
    mut after: Vec<(usize, Action)>,
    dropped: &[usize],
) -> Vec<Action> {
    after.sort_by_key(|&(k, _)| k);
    let mut out = Vec::with_capacity(actions.len() + after.len());
    let mut next = after.iter().peekable();
    for (k, &action) in actions.iter().enumerate() {
        if dropped.binary_search(&k).is_err() {
            out.push(action);
        }
        while let Some(&&(at, inserted)) = next.peek()
            && at == k
        {
            out.push(inserted);
            next.next();
        }
    }
    out
}

/// A whole training step's actions, forward then backward.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    actions: Vec<Action>,
}

impl Schedule {
    /// A schedule of these actions (checked only by [`simulate`](super::simulate)).
    pub fn new(actions: Vec<Action>) -> Self {
        Self { actions }
    }

    /// The actions, in order.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// The number of actions.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// Whether there is no action.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// The actions, owned.
    pub fn into_actions(self) -> Vec<Action> {
        self.actions
    }

    /// The number of replays of each node (`n` entries).
    pub fn replays(&self, n: usize) -> Vec<u32> {
        let mut replays = vec![0; n];
        for a in &self.actions {
            if let Action::Replay(i) = *a
                && let Some(r) = replays.get_mut(i as usize)
            {
                *r += 1;
            }
        }
        replays
    }

    /// Splits the schedule into the chunks an interpreter runs at each op of the step; see
    /// [`ScheduleIndex`].
    pub fn index(&self) -> ScheduleIndex {
        ScheduleIndex::new(&self.actions)
    }
}

impl From<Vec<Action>> for Schedule {
    fn from(actions: Vec<Action>) -> Self {
        Self::new(actions)
    }
}

/// Where each forward op's and each backward step's actions are, for an engine that runs a
/// schedule as the step happens.
///
/// - `forward(j)`: `Compute(j)` and the `Keep`/`Free` actions after it, up to the next op:
///   what the engine does when it records op `j`.
/// - `backward(p)`: everything after the previous chunk up to and including the `p`-th
///   `Step` of the step order and the `Free`s right after it: the replays and drops before
///   the step, the step, and the values it took.
///
/// The chunks cover the schedule in order, without overlap. Drops that make room for an op's
/// constants come before its `Compute`, so they close the previous chunk: dropping a value
/// early is always safe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleIndex {
    // Positions in u32 (a schedule's actions are numbered in u32 too): half the bytes a
    // cached plan's index takes.
    forward: Vec<Range<u32>>,
    backward: Vec<Range<u32>>,
}

impl ScheduleIndex {
    fn new(actions: &[Action]) -> Self {
        assert!(
            u32::try_from(actions.len()).is_ok(),
            "remat internal error: a schedule of {} actions (at most u32::MAX)",
            actions.len()
        );
        let chunk = |start: usize, end: usize| start as u32..end as u32;
        let mut index = Self::default();
        let mut start = 0;
        let mut i = 0;
        while i < actions.len() {
            let a = actions[i];
            i += 1;
            match a {
                Action::Compute(_) => {
                    while i < actions.len() && !actions[i].is_op() {
                        i += 1;
                    }
                    index.forward.push(chunk(start, i));
                    start = i;
                }
                Action::Step(_) => {
                    while i < actions.len() && matches!(actions[i], Action::Free(_)) {
                        i += 1;
                    }
                    index.backward.push(chunk(start, i));
                    start = i;
                }
                _ => {}
            }
        }
        index
    }

    /// The actions of forward op `j` (the `j`-th `Compute`), as a range of the schedule.
    pub fn forward(&self, j: usize) -> Option<Range<usize>> {
        self.forward
            .get(j)
            .map(|r| r.start as usize..r.end as usize)
    }

    /// The actions of the `p`-th backward step, as a range of the schedule.
    pub fn backward(&self, p: usize) -> Option<Range<usize>> {
        self.backward
            .get(p)
            .map(|r| r.start as usize..r.end as usize)
    }
}
