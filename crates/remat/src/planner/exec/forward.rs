//! The executor's forward pass: each op appended ([`Exec::record`] online, [`Exec::adopt_given`]
//! for the state another plan left), then run ([`Exec::compute`]): its constants find room,
//! and the values it has in hand are kept, or not, as they become needed (NOTE \[need\]).

use super::evict::Room;
use super::{Exec, Strategy};
use crate::planner::grow;
use crate::planner::packed::NodeRef;
use crate::planner::simulate::for_each_distinct;
use crate::planner::{Action, Error, Forced, Node};

/// Checks that `node` may be appended as node `j`: it reads earlier nodes only, its step
/// no later one, its cost is finite, and a forced replay is a possible one.
fn check_appended<'n>(node: impl Into<NodeRef<'n>>, j: u32) -> Result<(), Error> {
    let node = node.into();
    let invalid = |reason: String| Error::InvalidView {
        node: Some(j),
        reason,
    };
    if let Some(&u) = node.inputs.iter().find(|&&u| u >= j) {
        return Err(invalid(format!("input {u} is not an earlier node")));
    }
    if let Some(&u) = node.step_reads.iter().find(|&&u| u > j) {
        return Err(invalid(format!("its step reads node {u}, a later node")));
    }
    if !node.cost.is_finite() || node.cost < 0.0 {
        return Err(invalid(format!(
            "cost {} is not a finite cost >= 0",
            node.cost
        )));
    }
    if node.forced == Some(Forced::Recompute) && !node.replayable {
        return Err(invalid(
            "it is forced to Recompute but cannot be replayed".into(),
        ));
    }
    Ok(())
}

impl Exec<'_> {
    /// Appends `node` (online) and counts what it needs, without running it.
    fn append(&mut self, node: Node) -> Result<u32, Error> {
        let j = self.graph.nodes.len() as u32;
        check_appended(&node, j)?;
        self.graph
            .nodes
            .push(node)
            .ok_or_else(|| Error::InvalidView {
                node: Some(j),
                reason: "the graph's inputs and step reads pass u32::MAX ids".into(),
            })?;
        self.link(j);
        Ok(j)
    }

    /// Counts what node `j` (the newest linked) needs: its constants' releaser, its
    /// consumers, the steps that read values and the values its replays need.
    fn link(&mut self, j: u32) {
        let node = self.node(j);
        let releaser = node.releaser(j) as usize;
        let fixed = node.fixed_bytes;
        if releaser >= self.graph.released.len() {
            grow::room_for(&mut self.graph.released, releaser + 1);
            self.graph.released.resize(releaser + 1, 0);
        }
        self.graph.released[releaser] += fixed;
        self.grow(j as usize + 1);
        let node = self.graph.nodes.get(j as usize);
        for_each_distinct(node.inputs, |u| self.graph.consumers[u as usize].push(j));
        let replayable_consumer = node.rebuildable();
        for_each_distinct(node.step_reads, |r| {
            self.graph.reads_known[r as usize] += 1;
            self.life.need[r as usize] += 1;
        });
        if replayable_consumer {
            for_each_distinct(node.inputs, |u| self.life.need[u as usize] += 1);
        }
    }

    /// Appends `node` (online) and runs its forward op.
    pub(crate) fn record(&mut self, node: Node) -> Result<u32, Error> {
        let j = self.append(node)?;
        self.compute(j)?;
        Ok(j)
    }

    /// After [`Exec::adopt`]ing a prefix: a value that cannot be rebuilt, may be needed and
    /// is not held is *lost* for now: the plan either dropped it (NOTE [pin-release]: then
    /// every consumer that may need it is computed, and held or kept when an op next has it
    /// in hand) or keeps it later, when an op has it in hand (then it is kept again here,
    /// and is no longer lost). The held values that depend on it through values not held are
    /// pinned, and so is a value kept while one of its inputs is lost.
    pub(crate) fn settle_lost(&mut self) {
        let mut stack: Vec<u32> = Vec::new();
        for u in 0..self.graph.nodes.len() as u32 {
            if !self.node(u).rebuildable()
                && !self.acct.held[u as usize]
                && self.life.need[u as usize] > 0
            {
                self.life.lost[u as usize] = true;
                stack.push(u);
            }
        }
        let mut seen = vec![false; self.graph.nodes.len()];
        while let Some(u) = stack.pop() {
            for k in 0..self.consumers_of(u).len() {
                let w = self.consumers_of(u)[k];
                if !self.node(w).rebuildable() || std::mem::replace(&mut seen[w as usize], true) {
                    continue;
                }
                if self.acct.held[w as usize] {
                    self.life.pinned_now[w as usize] = true;
                    self.acct.drop_candidate(w);
                } else {
                    stack.push(w);
                }
            }
        }
    }

    /// Takes every node the executor was made with (`Exec::online_over`: borrowed or owned,
    /// not copied) as already computed, node `j`'s value held where `held[j]`, without
    /// deciding anything: the state another plan left (see `Dtr::resume`).
    pub(crate) fn adopt_given(&mut self, held: &[bool]) -> Result<(), Error> {
        debug_assert_eq!(self.computed, 0, "remat internal error: adopted twice");
        for j in 0..self.graph.nodes.len() as u32 {
            check_appended(self.node(j), j)?;
            self.link(j);
            self.adopted(j, held[j as usize]);
        }
        Ok(())
    }

    /// Notes the linked node `j` as computed, its value held or not.
    fn adopted(&mut self, j: u32, held: bool) {
        self.computed = j + 1;
        self.now += 1;
        self.acct.held_bytes += self.node(j).fixed_bytes;
        self.acct.peak = self.acct.peak.max(self.acct.held_bytes);
        if held {
            self.life.offered[j as usize] = true;
            self.hold(j);
        } else {
            self.mark_evicted(j);
        }
    }

    /// Runs forward op `j` (all earlier ops ran).
    pub(crate) fn compute(&mut self, j: u32) -> Result<(), Error> {
        debug_assert_eq!(
            j, self.computed,
            "remat internal error: forward ops in order"
        );
        self.computed = j + 1;
        self.now += 1;
        let fixed = self.node(j).fixed_bytes;
        if fixed > 0 && self.make_room(fixed, &[], None).is_err() {
            return Err(self.infeasible(fixed));
        }
        self.report.out.push(Action::Compute(j));
        self.report.work.units += 1;
        self.acct.held_bytes += fixed;
        self.acct.peak = self.acct.peak.max(self.acct.held_bytes);
        let mut in_hand: Vec<u32> = Vec::new();
        let node = self.node(j);
        for_each_distinct(node.inputs, |u| in_hand.push(u));
        for &r in node.step_reads {
            if !in_hand.contains(&r) {
                in_hand.push(r);
            }
        }
        if !in_hand.contains(&j) {
            in_hand.push(j);
        }
        for &u in &in_hand {
            self.acct.last_access[u as usize] = self.now;
        }
        for &u in &in_hand {
            if self.life.offered[u as usize] {
                continue;
            }
            if let Some(analysis) = &self.graph.analysis
                && self.knobs.planned
                && self.knobs.hints.late_keep
                && analysis.last_in_hand[u as usize] != j
            {
                // Planned: keep a value at the last forward op that has it in hand.
                continue;
            }
            if self.knobs.planned && self.knobs.hints.late_keep {
                // Decided now, whatever the decision.
                self.life.offered[u as usize] = true;
            }
            if self.knobs.planned && !self.node(u).rebuildable() && self.release_pinned(u, None) {
                continue;
            }
            if self.life.pinned_now[u as usize] {
                // Pinned in place of a value that was let go (NOTE [pin-release]), unless
                // nothing needs it after all.
                self.life.offered[u as usize] = true;
                if self.life.dead[u as usize] {
                    continue;
                }
                let bytes = self.node(u).bytes;
                if self.make_room(bytes, &[], None).is_err() {
                    return Err(self.infeasible(bytes));
                }
                self.report.out.push(Action::Keep(u));
                self.unmark_evicted(u);
                self.hold(u);
                continue;
            }
            let mut keep = self.wants_keep(u);
            if self.knobs.planned && self.may_keep(u) {
                // NOTE [decisions]: keep it or not, the other way round if told so.
                self.life.offered[u as usize] = true;
                keep ^= self.decide(2) == 1;
            }
            if !keep {
                continue;
            }
            self.life.offered[u as usize] = true;
            let bytes = self.node(u).bytes;
            if self.knobs.planned && self.rebuildable(u) && self.release_above_assuming(u, Some(u))
            {
                // Keeping `u` let a pinned input go, which made room for it.
                self.report.out.push(Action::Keep(u));
                self.unmark_evicted(u);
                self.hold(u);
                continue;
            }
            // A value whose input is lost (`settle_lost`) cannot be declined: it could not be
            // rebuilt.
            let input_lost = self
                .node(u)
                .inputs
                .iter()
                .any(|&x| self.life.lost[x as usize]);
            let newcomer = (self.rebuildable(u) && !input_lost).then_some(u);
            match self.make_room(bytes, &[], newcomer) {
                Ok(_) => {
                    self.report.out.push(Action::Keep(u));
                    self.unmark_evicted(u);
                    self.hold(u);
                }
                Err(Room::Declined) => {}
                Err(Room::NoRoom) => return Err(self.infeasible(bytes)),
            }
        }
        if !self.acct.held[j as usize] {
            self.mark_evicted(j);
        }
        if self.knobs.planned {
            self.release_above(j);
            for u in in_hand {
                if self.acct.held[u as usize] {
                    self.release_above(u);
                }
                self.try_release(u);
            }
        }
        Ok(())
    }

    /// Whether the forward pass may keep `u` at all (a choice, not a need).
    fn may_keep(&self, u: u32) -> bool {
        let node = self.node(u);
        self.knobs.strategy != Strategy::Lean
            && node.rebuildable()
            && node.forced != Some(Forced::Recompute)
            && self.life.need[u as usize] > 0
    }

    /// Online, before the next op is recorded: whether [`Exec::record`] may keep `u`, one of
    /// that op's inputs, at that op, where the op's step reads `u` (`read_by_its_step`) and
    /// a replay of the op reads it (`replay_input`: the op is replayable and `u` is one of
    /// its replay inputs). `false` only where the op's `compute` would not keep it: `u` is
    /// not in its hand, was offered already, or is not wanted with the counts the op adds
    /// (NOTE [in-place-forward] in `checkpoint/budget/session.rs`). A planned run, a run in
    /// its backward pass or an unknown `u` answers `true`.
    pub(crate) fn may_keep_at_next(
        &self,
        u: u32,
        read_by_its_step: bool,
        replay_input: bool,
    ) -> bool {
        if self.knobs.planned || self.sweep.in_backward || u as usize >= self.graph.nodes.len() {
            return true;
        }
        if !read_by_its_step && !replay_input {
            return false;
        }
        if self.life.offered[u as usize] {
            return false;
        }
        if self.life.pinned_now[u as usize] {
            return true;
        }
        let step = u32::from(read_by_its_step);
        self.wants_keep_given(
            u,
            self.life.need[u as usize] + step + u32::from(replay_input),
            self.graph.reads_known[u as usize] + step,
        )
    }

    /// Whether value `u`, in hand in the forward pass, should be kept now.
    fn wants_keep(&self, u: u32) -> bool {
        self.wants_keep_given(
            u,
            self.life.need[u as usize],
            self.graph.reads_known[u as usize],
        )
    }

    /// [`Exec::wants_keep`] with `need` and `reads_known` as `u`'s counts.
    fn wants_keep_given(&self, u: u32, need: u32, reads_known: u32) -> bool {
        let node = self.node(u);
        if node.forced == Some(Forced::Recompute) || need == 0 {
            return false;
        }
        if !node.rebuildable() || node.inputs.iter().any(|&x| self.life.lost[x as usize]) {
            // Cannot be rebuilt (`settle_lost`: an input is lost).
            return true;
        }
        if self.knobs.strategy == Strategy::Lean {
            return false;
        }
        if let Some(keep) = &self.knobs.hints.keep {
            return keep[u as usize];
        }
        let read_by_a_step = match &self.graph.analysis {
            Some(a) if self.knobs.planned => !a.read_positions[u as usize].is_empty(),
            _ => reads_known > 0,
        };
        read_by_a_step || self.knobs.hints.keep_sources
    }
}
