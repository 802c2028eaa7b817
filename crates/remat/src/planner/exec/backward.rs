//! The executor's backward pass: [`Exec::begin_backward`] once the graph is known, then
//! [`Exec::step`] per step: the sweep replays the values the step reads that are not held
//! (and what rebuilding them needs), each once, making room by eviction; when no room can be
//! made, the lean sweep (NOTE \[lean-schedule\]). After the step, what nothing reads again
//! dies (NOTE \[need\]).

use std::borrow::Cow;
use std::sync::Arc;

use super::evict::Room;
use super::{Exec, Strategy};
use crate::planner::analysis::{Analysis, NONE};
use crate::planner::simulate::for_each_distinct;
use crate::planner::{Action, Error, GraphView};

impl<'a> Exec<'a> {
    /// The whole graph is `view`, whose nodes this executor was resumed over: the backward
    /// pass reads it as it is (NOTE [resume-view]).
    ///
    /// # Panics
    /// When the executor's nodes are not the view's.
    pub(crate) fn know_view(&mut self, view: &'a GraphView) {
        assert!(
            self.graph.nodes.are(view.nodes()),
            "remat internal error: an executor told of a view over other nodes"
        );
        self.graph.view = Some(Cow::Borrowed(view));
    }

    /// Starts the backward pass of an online run: the whole graph is known now, its step
    /// order `step_order`.
    ///
    /// # Panics
    /// When the executor knows its view already ([`Exec::begin_backward_over_view`]).
    pub(crate) fn begin_backward(&mut self, step_order: Vec<u32>) -> Result<(), Error> {
        assert!(
            self.graph.view.is_none(),
            "remat internal error: an executor that knows its view is given a step order"
        );
        let view = GraphView::with_step_order(self.graph.nodes.to_vec(), step_order)?;
        self.graph.analysis = Some(Arc::new(Analysis::new(&view)));
        self.graph.view = Some(Cow::Owned(view));
        self.enter_backward();
        Ok(())
    }

    /// Starts the backward pass over the view the executor knows: planned over it, or
    /// resumed over its nodes ([`Exec::know_view`]).
    ///
    /// # Panics
    /// When the executor knows no view ([`Exec::begin_backward`]).
    pub(crate) fn begin_backward_over_view(&mut self) {
        if self.graph.analysis.is_none() {
            // NOTE [resume-view]: resumed over a view's nodes, the backward pass copied them
            // into a view of its own (0.12 MB of a 2.0 MB first step on Burn's `Lstm` under
            // half of K, 32 steps, where the pass plans from the online state).
            let view = self
                .graph
                .view
                .as_deref()
                .expect("remat internal error: an executor without a view begins backward");
            self.graph.analysis = Some(Arc::new(Analysis::new(view)));
        }
        self.enter_backward();
    }

    /// The backward pass starts: what the forward pass counted as maybe needed becomes what
    /// the steps need, and values nothing reads die.
    fn enter_backward(&mut self) {
        let analysis = self
            .graph
            .analysis
            .clone()
            .expect("remat internal error: analysis is set");
        self.sweep.in_backward = true;
        self.grow_sweep(self.graph.nodes.len());
        if !self.knobs.planned {
            // Online, the forward pass counted what might be needed; now it is known. A
            // pinned value will never be rebuilt: its inputs do not count it; a lost value
            // is never read again.
            self.life.need = analysis.need.clone();
            for w in 0..self.graph.nodes.len() {
                if self.life.lost[w] {
                    // Never read again (`settle_lost`).
                    self.life.dead[w] = true;
                }
                let never_rebuilt = self.life.pinned_now[w] || self.life.lost[w];
                if never_rebuilt && analysis.need[w] > 0 && self.graph.nodes.get(w).rebuildable() {
                    let inputs = self.graph.nodes.get(w).inputs;
                    for (k, &x) in inputs.iter().enumerate() {
                        if !inputs[..k].contains(&x) {
                            self.life.need[x as usize] -= 1;
                        }
                    }
                }
            }
        }
        let mut dying = Vec::new();
        for v in 0..self.graph.nodes.len() as u32 {
            if self.life.need[v as usize] > 0 || self.life.dead[v as usize] {
                continue;
            }
            if analysis.need[v as usize] > 0 {
                // Needed, but only by values that will never be rebuilt: its inputs count
                // it, so it dies the usual way.
                dying.push(v);
            } else {
                // Never needed: nothing counts it.
                self.life.dead[v as usize] = true;
                if self.acct.held[v as usize] {
                    self.report.out.push(Action::Free(v));
                    self.release(v);
                }
                self.unmark_evicted(v);
            }
        }
        self.die(dying);
        for v in 0..self.graph.nodes.len() as u32 {
            self.try_release(v);
        }
    }

    /// Runs the next backward step.
    pub(crate) fn step(&mut self) -> Result<(), Error> {
        let view = self
            .graph
            .view
            .as_ref()
            .expect("remat internal error: backward runs on a known graph");
        let s = *view
            .step_order()
            .get(self.sweep.step_pos)
            .expect("remat internal error: a step after the last one");
        let mut reads: Vec<u32> = Vec::new();
        for_each_distinct(self.node(s).step_reads, |r| reads.push(r));
        self.now += 1;
        self.sweep.step_start = self.report.out.len();
        let fell_back = match self.knobs.strategy {
            Strategy::Lean => true,
            _ => self.sweep(&reads).is_err(),
        };
        if fell_back {
            if self.knobs.strategy != Strategy::Lean {
                self.report.work.fallbacks += 1;
            }
            self.lean_sweep(&reads)?;
        }
        self.report.out.push(Action::Step(s));
        self.report.work.units += 1;
        self.sweep.stepped[s as usize] = true;
        self.acct.held_bytes -= self.graph.released[s as usize];
        let mut dying = Vec::new();
        for &r in &reads {
            self.sweep.uses[r as usize] -= 1;
            self.acct.last_access[r as usize] = self.now;
            self.life.need[r as usize] -= 1;
            if self.life.need[r as usize] == 0 {
                dying.push(r);
            }
        }
        if self.life.need[s as usize] == 0 && !self.life.dead[s as usize] {
            dying.push(s);
        }
        self.die(dying);
        self.sweep.step_pos += 1;
        let start = self.sweep.step_start;
        let replayed: Vec<u32> = self.report.out[start..]
            .iter()
            .filter_map(|a| match a {
                Action::Replay(x) => Some(*x),
                _ => None,
            })
            .collect();
        for &r in &reads {
            self.try_release(r);
        }
        for x in replayed {
            if self.acct.held[x as usize] {
                self.release_above(x);
            }
        }
        if self.knobs.strategy == Strategy::Lean {
            for &r in &reads {
                if self.acct.held[r as usize] && self.rebuildable(r) {
                    self.report.out.push(Action::Free(r));
                    self.release(r);
                    self.mark_evicted(r);
                }
            }
        }
        Ok(())
    }

    /// Frees the values in `dying` and everything that dies with them (NOTE [need]).
    pub(super) fn die(&mut self, mut dying: Vec<u32>) {
        while let Some(v) = dying.pop() {
            if std::mem::replace(&mut self.life.dead[v as usize], true) {
                continue;
            }
            if self.acct.held[v as usize] {
                self.report.out.push(Action::Free(v));
                self.release(v);
            }
            self.unmark_evicted(v);
            if self.rebuildable(v) {
                let node = self.graph.nodes.get(v as usize);
                for_each_distinct(node.inputs, |u| {
                    self.life.need[u as usize] -= 1;
                    if self.life.need[u as usize] == 0 {
                        dying.push(u);
                    }
                });
            }
        }
    }

    /// The values the sweep must replay to make `reads` held: not held, reached from the
    /// reads through values that are not held; ascending.
    fn closure(&mut self, reads: &[u32]) -> Vec<u32> {
        let mut closure = Vec::new();
        let mut stack: Vec<u32> = reads
            .iter()
            .copied()
            .filter(|&r| !self.acct.held[r as usize])
            .collect();
        while let Some(v) = stack.pop() {
            self.report.work.units += 1;
            if self.acct.held[v as usize] || self.sweep.uses[v as usize] == NONE {
                continue;
            }
            assert!(
                self.rebuildable(v)
                    && !self.life.dead[v as usize]
                    && !self.sweep.stepped[v as usize],
                "remat internal error: value {v} is needed but can no longer be rebuilt \
                 (a pinned value was dropped while needed)"
            );
            // Mark as visited with a sentinel; reset below.
            self.sweep.uses[v as usize] = NONE;
            closure.push(v);
            for &u in self.graph.nodes.get(v as usize).inputs {
                if !self.acct.held[u as usize] && self.sweep.uses[u as usize] != NONE {
                    stack.push(u);
                }
            }
        }
        for &v in &closure {
            self.sweep.uses[v as usize] = 0;
        }
        closure.sort_unstable();
        closure
    }

    /// Locks the sweep's reads: every input of a closure value, and the step's reads.
    fn lock(&mut self, closure: &[u32], reads: &[u32]) {
        for &x in closure {
            let node = self.graph.nodes.get(x as usize);
            for_each_distinct(node.inputs, |u| self.sweep.uses[u as usize] += 1);
        }
        for &r in reads {
            self.sweep.uses[r as usize] += 1;
        }
    }

    /// The sweep with evictions; `Err` when no room can be made (locks are then released).
    fn sweep(&mut self, reads: &[u32]) -> Result<(), Room> {
        let closure = self.closure(reads);
        self.lock(&closure, reads);
        self.replay_closure(&closure, reads, false)
    }

    /// Replays `closure` in order. Room for each replay is made by evicting unlocked values
    /// and the inputs only it still needs, lowest score first; `eager` (the lean schedule)
    /// takes every such input instead. `Err` when no room can be made (the locks of what is
    /// left are released).
    fn replay_closure(&mut self, closure: &[u32], reads: &[u32], eager: bool) -> Result<(), Room> {
        for (k, &x) in closure.iter().enumerate() {
            let consumable = self.consumable_inputs(x);
            let bytes = self.node(x).bytes;
            if eager {
                let freed: u64 = consumable.iter().map(|&u| self.node(u).bytes).sum();
                if self.acct.held_bytes - freed + bytes > self.knobs.budget {
                    self.sweep.releases.clear();
                    self.unlock(&closure[k..], reads);
                    return Err(Room::NoRoom);
                }
                self.replay(x, &consumable);
                continue;
            }
            // The frontiers of the releases the replay may make stay held meanwhile.
            let frontier: Vec<u32> = self
                .sweep
                .releases
                .iter()
                .flat_map(|(_, plan)| plan.frontier.iter().copied())
                .filter(|&w| w != x)
                .collect();
            for &w in &frontier {
                self.sweep.uses[w as usize] += 1;
            }
            self.sweep.current_replay = Some(x);
            let room = self.make_room(bytes, &consumable, None);
            self.sweep.current_replay = None;
            for &w in &frontier {
                self.sweep.uses[w as usize] -= 1;
            }
            match room {
                Ok(taken) => self.replay(x, &taken),
                Err(_) => {
                    self.sweep.releases.clear();
                    self.unlock(&closure[k..], reads);
                    return Err(Room::NoRoom);
                }
            }
        }
        Ok(())
    }

    /// Releases the locks a sweep still holds for the closure values not replayed yet.
    fn unlock(&mut self, rest: &[u32], reads: &[u32]) {
        for &x in rest {
            let node = self.graph.nodes.get(x as usize);
            for_each_distinct(node.inputs, |u| self.sweep.uses[u as usize] -= 1);
        }
        for &r in reads {
            self.sweep.uses[r as usize] -= 1;
        }
    }

    /// NOTE [lean-schedule]: evicts everything rebuildable, then rebuilds `reads` from scratch
    /// (dropping each value after its last use when the strategy is lean).
    fn lean_sweep(&mut self, reads: &[u32]) -> Result<(), Error> {
        let held: Vec<u32> = self.acct.candidates.clone();
        for v in held {
            self.report.out.push(Action::Free(v));
            self.release(v);
            self.mark_evicted(v);
        }
        let closure = self.closure(reads);
        self.lock(&closure, reads);
        // Beyond what the lean schedule holds, everything is evictable: making room by score
        // fits wherever taking every input does, and keeps what later steps read if it can.
        let eager = self.knobs.strategy == Strategy::Lean;
        self.replay_closure(&closure, reads, eager)
            .map_err(|_| self.infeasible(0))
    }

    /// Replays `x` (its inputs are held and locked); `taken` are inputs it consumes.
    fn replay(&mut self, x: u32, taken: &[u32]) {
        self.now += 1;
        self.report.out.push(Action::Replay(x));
        self.report.work.units += 1;
        self.report.cost += self.node(x).cost;
        for &u in taken {
            self.report.out.push(Action::Free(u));
            self.release(u);
            self.mark_evicted(u);
        }
        self.unmark_evicted(x);
        self.hold(x);
        let releases = std::mem::take(&mut self.sweep.releases);
        for (u, plan) in releases {
            if taken.contains(&u) {
                self.apply_release(u, plan);
            }
        }
        let now = self.now;
        let node = self.graph.nodes.get(x as usize);
        for_each_distinct(node.inputs, |u| {
            self.sweep.uses[u as usize] -= 1;
            self.acct.last_access[u as usize] = now;
        });
    }
}
