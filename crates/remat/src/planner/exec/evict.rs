//! The eviction choice: [`Exec::make_room`] drops the held values that cost least to
//! rebuild per byte (as the strategy scores them) until what comes next fits.

use smallvec::SmallVec;

use super::{ALTERNATIVES, Exec, SCAN_LIMIT, Strategy};
use crate::planner::{Action, Error};

/// Why room was not made.
#[derive(Debug)]
pub(super) enum Room {
    /// Not enough can be evicted: a sweep falls back to the lean sweep.
    NoRoom,
    /// Dropping the value about to be kept is the cheapest way.
    Declined,
}

/// A victim candidate and its score.
#[derive(Clone, Copy, Debug)]
struct Scored {
    value: u32,
    bytes: u64,
    /// What evicting it is expected to cost (strategy-weighted rebuild cost).
    expected: f64,
    /// `expected` per byte.
    ratio: f64,
}

impl Exec<'_> {
    /// Evicts unlocked values until `bytes` more fit; values in `consumable` (inputs of the
    /// op about to run) may be chosen too: they are returned, to be taken by that op, and
    /// freed after it. `newcomer`, a value about to be kept, competes with the held values:
    /// `Err(Declined)` when dropping it is the cheapest way to make room.
    ///
    /// The victims: the lowest cost per byte until the deficit is covered, replaced by a
    /// single value that covers it alone if that costs less, then without the members the
    /// others make unnecessary (dearest first).
    pub(super) fn make_room(
        &mut self,
        bytes: u64,
        consumable: &[u32],
        newcomer: Option<u32>,
    ) -> Result<Vec<u32>, Room> {
        let total = self.acct.held_bytes + bytes;
        if total <= self.knobs.budget {
            return Ok(Vec::new());
        }
        let deficit = total - self.knobs.budget;
        let n = self.acct.candidates.len();
        let (start, len) = if n <= SCAN_LIMIT {
            (0, n)
        } else {
            self.acct.scan_offset = (self.acct.scan_offset + SCAN_LIMIT) % n;
            (self.acct.scan_offset, SCAN_LIMIT)
        };
        // Sized once: grown by doubling it was five allocations a call at a tight budget,
        // where a call comes at nearly every op.
        let mut scored: Vec<Scored> =
            Vec::with_capacity(len + usize::from(newcomer.is_some()) + consumable.len());
        for k in 0..len {
            let v = self.acct.candidates[(start + k) % n];
            // Online, a forward pass has no sweep state (`Exec::grow_sweep`).
            if self
                .sweep
                .uses
                .get(v as usize)
                .is_none_or(|&uses| uses == 0)
            {
                self.score_into(v, &mut scored);
            }
        }
        for &v in newcomer.as_slice() {
            self.score_into(v, &mut scored);
        }
        // An input the op about to run takes: the op's output is held afterwards, so the
        // input is needed only by its other consumers.
        self.sweep.replaying = self.sweep.replaying.or(self.sweep.current_replay);
        for &v in consumable {
            self.score_into(v, &mut scored);
        }
        self.sweep.replaying = None;
        let total_bytes: u64 = scored.iter().map(|c| c.bytes).sum();
        if total_bytes < deficit {
            return Err(Room::NoRoom);
        }
        // One pick at a time: by default the lowest ratio, or a single value that covers
        // the rest alone when that is cheaper than filling by ratio; NOTE [decisions]: the
        // search may take another low-ratio candidate instead.
        let by_ratio =
            |a: &Scored, b: &Scored| a.ratio.total_cmp(&b.ratio).then(a.value.cmp(&b.value));
        let mut chosen: Vec<Scored> = Vec::new();
        let mut covered = 0u64;
        while covered < deficit {
            let rest = deficit - covered;
            // The lowest-ratio candidates, best first.
            let mut top: SmallVec<[usize; ALTERNATIVES]> = SmallVec::new();
            for k in 0..scored.len() {
                let at = top.partition_point(|&t| by_ratio(&scored[t], &scored[k]).is_lt());
                if at < ALTERNATIVES {
                    if top.len() == ALTERNATIVES {
                        top.pop();
                    }
                    top.insert(at, k);
                }
            }
            let fill = if scored[top[0]].bytes >= rest {
                scored[top[0]].expected
            } else {
                let mut order: Vec<&Scored> = scored.iter().collect();
                order.sort_by(|a, b| by_ratio(a, b));
                let mut filled = 0u64;
                let mut fill = 0.0;
                for c in order {
                    if filled >= rest {
                        break;
                    }
                    filled += c.bytes;
                    fill += c.expected;
                }
                fill
            };
            let single = scored
                .iter()
                .enumerate()
                .filter(|(_, c)| c.bytes >= rest)
                .min_by(|(_, a), (_, b)| {
                    a.expected
                        .total_cmp(&b.expected)
                        .then(a.value.cmp(&b.value))
                })
                .filter(|(_, c)| c.expected < fill)
                .map(|(k, _)| k);
            let mut options: SmallVec<[usize; ALTERNATIVES]> = SmallVec::new();
            options.push(single.unwrap_or(top[0]));
            for &k in &top {
                if options.len() < ALTERNATIVES && !options.contains(&k) {
                    options.push(k);
                }
            }
            let pick = scored.swap_remove(options[self.decide(options.len())]);
            covered += pick.bytes;
            chosen.push(pick);
        }
        // Drop the picks the others make unnecessary, dearest first.
        chosen.sort_by(|a, b| {
            b.expected
                .total_cmp(&a.expected)
                .then(a.value.cmp(&b.value))
        });
        let mut k = 0;
        while k < chosen.len() {
            if covered - chosen[k].bytes >= deficit {
                covered -= chosen[k].bytes;
                chosen.remove(k);
            } else {
                k += 1;
            }
        }
        if newcomer.is_some_and(|u| chosen.iter().any(|c| c.value == u)) {
            return Err(Room::Declined);
        }
        let mut taken = Vec::new();
        chosen.sort_by_key(|c| c.value);
        for c in chosen {
            if consumable.contains(&c.value) {
                taken.push(c.value);
            } else {
                self.report.out.push(Action::Free(c.value));
                self.release(c.value);
                self.mark_evicted(c.value);
            }
        }
        Ok(taken)
    }

    /// Scores `v` as a victim into `out` (values of no bytes free nothing: skipped).
    fn score_into(&mut self, v: u32, out: &mut Vec<Scored>) {
        self.report.work.units += 1;
        let bytes = self.node(v).bytes;
        if bytes == 0 {
            return;
        }
        let rebuild = self.rebuild_cost(v);
        let released = self.sweep.releases.iter().any(|(u, _)| *u == v);
        let expected = if released {
            // Never needed again once taken.
            0.0
        } else {
            match self.knobs.strategy {
                Strategy::Lean => 0.0,
                Strategy::Dtr => {
                    let staleness = (self.now - self.acct.last_access[v as usize] + 1) as f64;
                    rebuild / staleness
                }
                Strategy::Lookahead { alpha } => {
                    let distance = self.distance(v) as f64;
                    // The portfolio's exponents without `powf` (a fifth of a run's time at
                    // a tight budget): a distance is an integer below 2^26, so its square
                    // is exact, as `powf` returns it; `sqrt` is correctly rounded, `powf`
                    // of 0.5 within an ulp of it.
                    let weight = if alpha == 0.0 {
                        1.0
                    } else if alpha == 0.5 {
                        distance.sqrt()
                    } else if alpha == 1.0 {
                        distance
                    } else if alpha == 2.0 {
                        distance * distance
                    } else {
                        distance.powf(alpha)
                    };
                    rebuild / weight
                }
            }
        };
        out.push(Scored {
            value: v,
            bytes,
            expected,
            ratio: expected / bytes as f64,
        });
    }

    /// The cost of rebuilding `v`: its own plus its evicted ancestors' (DTR's equivalence
    /// classes: evicted values joined through their edges, never split).
    fn rebuild_cost(&mut self, v: u32) -> f64 {
        let mut cost = self.node(v).cost;
        let mut roots: SmallVec<[u32; 4]> = SmallVec::new();
        for &u in self.graph.nodes.get(v as usize).inputs {
            if self.acct.evicted[u as usize] {
                let root = self.acct.classes.find(u);
                if !roots.contains(&root) {
                    roots.push(root);
                    cost += self.acct.classes.uf_cost[root as usize].max(0.0);
                }
            }
        }
        cost
    }

    /// Time until `v` is read next (by a step, or by the replay of a consumer that is not
    /// held); `2n + 1` when no such read is planned.
    fn distance(&mut self, v: u32) -> u64 {
        let n = self.graph.nodes.len() as u64;
        let now = if self.sweep.in_backward {
            n + self.sweep.step_pos as u64
        } else {
            self.computed as u64
        };
        let mut next = 2 * n + 1;
        if let Some(t) = self.next_read(v) {
            next = next.min(n + t as u64);
        }
        let consumers = self.consumers_of(v).len().min(16);
        for k in 0..consumers {
            let w = self.consumers_of(v)[k];
            if Some(w) != self.sweep.replaying
                && !self.acct.held[w as usize]
                && !self.life.dead[w as usize]
                && self.acct.evicted[w as usize]
                && let Some(t) = self.next_read(w)
            {
                next = next.min(n + t as u64);
            }
        }
        next.saturating_sub(now).max(1)
    }

    // ---- the online API's extras ---------------------------------------------------------

    /// Marks an access to value `v` (for staleness).
    pub(crate) fn touch(&mut self, v: u32) {
        if (v as usize) < self.acct.last_access.len() {
            self.now += 1;
            self.acct.last_access[v as usize] = self.now;
        }
    }

    /// Evicts unlocked values until `bytes` more fit; returns them.
    pub(crate) fn victims(&mut self, bytes: u64) -> Result<Vec<u32>, Error> {
        let start = self.report.out.len();
        if self.make_room(bytes, &[], None).is_err() {
            return Err(self.infeasible(bytes));
        }
        Ok(self.report.out[start..].iter().map(|a| a.node()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::{Exec, Strategy};
    use crate::planner::Node;

    #[test]
    fn a_rebuild_counts_each_evicted_class_of_its_inputs_once() {
        // a -> b -> c, and d reading a and b; nothing held but d.
        let nodes = [
            Node::new("a", 8, 1.0),
            Node::new("b", 8, 2.0).inputs([0]),
            Node::new("c", 8, 4.0).inputs([1]),
            Node::new("d", 8, 8.0).inputs([0, 1]),
        ];
        let mut exec = Exec::online_over(Strategy::Dtr, u64::MAX, (&nodes[..]).into());
        exec.adopt_given(&[false, false, false, true]).unwrap();
        assert_eq!(exec.held_bytes(), 8);
        // a, b and c are one class (DTR's: joined through their edges), whose cost counts
        // once although d reads two of its members.
        assert_eq!(exec.rebuild_cost(3), 8.0 + 1.0 + 2.0 + 4.0);
        assert_eq!(exec.acct.classes.find(0), exec.acct.classes.find(2));
        // Held again, b leaves its class's cost (a class is never split).
        exec.unmark_evicted(1);
        exec.hold(1);
        assert_eq!(exec.held_bytes(), 16);
        assert_eq!(exec.rebuild_cost(2), 4.0);
        assert_eq!(exec.rebuild_cost(3), 8.0 + 1.0 + 4.0);
    }
}
