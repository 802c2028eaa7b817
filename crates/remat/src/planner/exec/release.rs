//! NOTE \[pin-release\] (below, on [`Exec::try_release`]): a held value that cannot be
//! rebuilt is dropped once only values held can need it, and those are pinned in its place.

use smallvec::SmallVec;

use super::{Exec, ReleasePlan};
use crate::planner::simulate::for_each_distinct;
use crate::planner::{Action, Forced};

/// The most values a pin-release walk visits (NOTE [pin-release]).
const RELEASE_WALK: usize = 64;

impl Exec<'_> {
    /// The distinct inputs of `x` that only its replay still needs and that may be dropped:
    /// rebuildable ones, and pinned ones that are never needed again once `x` is held (NOTE
    /// [pin-release]; their plans are kept in `releases` for `replay`).
    pub(super) fn consumable_inputs(&mut self, x: u32) -> Vec<u32> {
        let mut inputs = Vec::new();
        for_each_distinct(self.graph.nodes.get(x as usize).inputs, |u| inputs.push(u));
        inputs.retain(|&u| self.sweep.uses[u as usize] == 1);
        self.sweep.releases.clear();
        let mut consumable = Vec::new();
        for u in inputs {
            if self.rebuildable(u) {
                consumable.push(u);
            } else if let Some(plan) = self.release_plan(u, Some(x)) {
                self.sweep.releases.push((u, plan));
                consumable.push(u);
            }
        }
        // A value pinned by one of these releases stays held.
        consumable.retain(|&u| {
            !self
                .sweep
                .releases
                .iter()
                .any(|(_, plan)| plan.frontier.contains(&u))
        });
        self.sweep.releases.retain(|(u, _)| consumable.contains(u));
        consumable
    }

    /// NOTE [pin-release]: a held value that cannot be rebuilt stays only because
    /// rebuildable descendants might have to be replayed from it. Once no step will read it
    /// again, follow its rebuildable consumers through the values that are not held (no
    /// later step may read those either): if every path ends at a computed, held value (the
    /// *frontier*), the value is dropped, the frontier is pinned in its place (never evicted
    /// again) and the values crossed are never needed again. With `free_release` unset the
    /// frontier must weigh no more than the value: the pinned bytes never grow, so the lean
    /// fallback still fits (NOTE [lean-schedule]). Only when the whole graph is known
    /// (planned runs, or any backward pass); walks are bounded by [`RELEASE_WALK`].
    pub(super) fn try_release(&mut self, u: u32) {
        self.release_assuming(u, None);
    }

    /// [`Exec::try_release`], counting `assume` (a value about to be kept in the forward
    /// pass) as held; then the weight condition always applies, so that dropping the value
    /// makes room for the one kept. Returns whether the value was dropped.
    fn release_assuming(&mut self, u: u32, assume: Option<u32>) -> bool {
        self.acct.held[u as usize] && self.release_pinned(u, assume)
    }

    /// The walk and the release of NOTE [pin-release] for `u`, held or not: a pinned value
    /// in hand at its last forward moment and not kept yet is simply never kept.
    pub(super) fn release_pinned(&mut self, u: u32, assume: Option<u32>) -> bool {
        match self.release_plan(u, assume) {
            Some(plan) => {
                if self.acct.held[u as usize] {
                    self.report.out.push(Action::Free(u));
                    self.release(u);
                }
                self.apply_release(u, plan);
                true
            }
            None => false,
        }
    }

    /// The walk of NOTE [pin-release] for `u`: the frontier and the values crossed, if `u`
    /// may be dropped (nothing changes).
    fn release_plan(&mut self, u: u32, assume: Option<u32>) -> Option<ReleasePlan> {
        if self.life.dead[u as usize]
            || self.node(u).rebuildable()
            || self.life.pinned_now[u as usize]
        {
            return None;
        }
        if self.graph.view.is_none() || (!self.knobs.planned && !self.sweep.in_backward) {
            return None;
        }
        if self.read_later(u) {
            return None;
        }
        let analysis = self
            .graph
            .analysis
            .clone()
            .expect("remat internal error: analysis is set");
        let mut frontier: Vec<u32> = Vec::new();
        let mut crossed: Vec<u32> = Vec::new();
        let mut stack: Vec<u32> = analysis.consumers[u as usize].to_vec();
        let mut visits = 0;
        while let Some(w) = stack.pop() {
            if self.life.dead[w as usize]
                || !self.rebuildable(w)
                || frontier.contains(&w)
                || crossed.contains(&w)
            {
                continue;
            }
            visits += 1;
            if visits > RELEASE_WALK || w >= self.computed {
                return None;
            }
            // In the forward pass, a value still to be decided (at this op or a later one
            // that has it in hand) can still be kept.
            let kept_later = self.knobs.hints.late_keep
                && !self.sweep.in_backward
                && !self.life.offered[w as usize]
                && self.node(w).forced != Some(Forced::Recompute)
                && analysis.last_in_hand[w as usize] + 1 >= self.computed;
            if self.acct.held[w as usize] || Some(w) == assume || kept_later {
                frontier.push(w);
                continue;
            }
            if self.read_later(w) {
                return None;
            }
            crossed.push(w);
            stack.extend_from_slice(&analysis.consumers[w as usize]);
        }
        let pinned: u64 = frontier.iter().map(|&w| self.node(w).bytes).sum();
        // A value kept in the forward pass in place of `u` must find room in what `u` frees.
        let weighed = !self.knobs.hints.free_release
            || (!self.sweep.in_backward && assume.is_some_and(|a| frontier.contains(&a)));
        if weighed && pinned > self.node(u).bytes {
            return None;
        }
        Some(ReleasePlan { frontier, crossed })
    }

    /// Applies a release of `u` (already freed if it was held): `u` and the values crossed
    /// are never needed again, the frontier is pinned.
    pub(super) fn apply_release(&mut self, u: u32, plan: ReleasePlan) {
        let ReleasePlan { frontier, crossed } = plan;
        debug_assert!(
            !self.acct.held[u as usize],
            "remat internal error: release of a held value"
        );
        self.life.dead[u as usize] = true;
        self.life.offered[u as usize] = true;
        // Pin the frontier first: a value crossed may be the last consumer of a frontier
        // value, which must then die pinned (its inputs counted down once, here).
        let mut dying = Vec::new();
        for w in frontier {
            if self.life.dead[w as usize] {
                continue;
            }
            if std::mem::replace(&mut self.life.pinned_now[w as usize], true) {
                // Already pinned by an earlier release: its inputs were counted down then.
                continue;
            }
            self.acct.drop_candidate(w);
            let inputs = self.graph.nodes.get(w as usize).inputs;
            for (k, &x) in inputs.iter().enumerate() {
                if inputs[..k].contains(&x) || self.life.dead[x as usize] {
                    continue;
                }
                self.life.need[x as usize] -= 1;
                if self.life.need[x as usize] == 0 {
                    dying.push(x);
                }
            }
        }
        dying.extend(crossed);
        self.die(dying);
    }

    /// Whether a step still to run reads `v`.
    fn read_later(&mut self, v: u32) -> bool {
        if self.sweep.in_backward {
            self.next_read(v).is_some()
        } else {
            self.graph
                .analysis
                .as_ref()
                .is_some_and(|a| !a.read_positions[v as usize].is_empty())
        }
    }

    /// Tries NOTE [pin-release] for the pinned values above `v` (reached through its inputs
    /// and values that are not held), after `v` became held or was computed.
    pub(super) fn release_above(&mut self, v: u32) {
        self.release_above_assuming(v, None);
    }

    /// [`Exec::release_above`] with [`Exec::release_assuming`]'s `assume` = `v`, when `v`
    /// is about to be kept: returns whether `v` ended up pinned (it must then be kept).
    pub(super) fn release_above_assuming(&mut self, v: u32, assume: Option<u32>) -> bool {
        // In place up to a usual walk: this runs at nearly every op at a tight budget.
        let mut stack: SmallVec<[u32; 8]> =
            SmallVec::from_slice(self.graph.nodes.get(v as usize).inputs);
        let mut seen: SmallVec<[u32; 16]> = SmallVec::new();
        while let Some(x) = stack.pop() {
            if seen.contains(&x) || seen.len() >= RELEASE_WALK {
                continue;
            }
            seen.push(x);
            if self.acct.held[x as usize] {
                if !self.node(x).rebuildable() && !self.life.pinned_now[x as usize] {
                    self.release_assuming(x, assume);
                }
            } else if !self.life.dead[x as usize] && self.rebuildable(x) {
                stack.extend_from_slice(self.graph.nodes.get(x as usize).inputs);
            }
        }
        assume.is_some_and(|a| self.life.pinned_now[a as usize])
    }
}
