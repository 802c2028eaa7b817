//! The executor's accounting ([`Accounting`]): which values are held (and their bytes),
//! which of them are eviction candidates, and the evicted values' classes ([`Classes`]: DTR's
//! equivalence classes, a union-find whose roots sum their members' costs).

use super::{Accounting, Classes, Exec};
use crate::planner::analysis::NONE;

impl Accounting {
    /// Removes `v` from the eviction candidates, if it is one.
    pub(super) fn drop_candidate(&mut self, v: u32) {
        let pos = self.candidate_pos[v as usize];
        if pos != NONE {
            let last = self
                .candidates
                .pop()
                .expect("remat internal error: candidate list");
            if last != v {
                self.candidates[pos as usize] = last;
                self.candidate_pos[last as usize] = pos;
            }
            self.candidate_pos[v as usize] = NONE;
        }
    }
}

impl Classes {
    pub(super) fn find(&mut self, v: u32) -> u32 {
        let mut root = v;
        while self.uf_parent[root as usize] != root {
            root = self.uf_parent[root as usize];
        }
        let mut x = v;
        while self.uf_parent[x as usize] != root {
            let next = self.uf_parent[x as usize];
            self.uf_parent[x as usize] = root;
            x = next;
        }
        root
    }

    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return;
        }
        let (big, small) = if self.uf_size[ra as usize] >= self.uf_size[rb as usize] {
            (ra, rb)
        } else {
            (rb, ra)
        };
        self.uf_parent[small as usize] = big;
        self.uf_size[big as usize] += self.uf_size[small as usize];
        self.uf_cost[big as usize] += self.uf_cost[small as usize];
    }
}

impl Exec<'_> {
    pub(super) fn hold(&mut self, v: u32) {
        debug_assert!(
            !self.acct.held[v as usize],
            "remat internal error: {v} held twice"
        );
        // `settle_lost`: a lost value in hand again is no longer lost; a value whose input
        // is lost can never be rebuilt.
        self.life.lost[v as usize] = false;
        if !self.life.pinned_now[v as usize]
            && self
                .graph
                .nodes
                .get(v as usize)
                .inputs
                .iter()
                .any(|&x| self.life.lost[x as usize])
        {
            self.life.pinned_now[v as usize] = true;
        }
        self.acct.held[v as usize] = true;
        self.acct.held_bytes += self.node(v).bytes;
        self.acct.peak = self.acct.peak.max(self.acct.held_bytes);
        self.acct.last_access[v as usize] = self.now;
        if self.rebuildable(v) {
            self.acct.candidate_pos[v as usize] = self.acct.candidates.len() as u32;
            self.acct.candidates.push(v);
        }
    }

    pub(super) fn release(&mut self, v: u32) {
        debug_assert!(
            self.acct.held[v as usize],
            "remat internal error: {v} is not held"
        );
        self.acct.held[v as usize] = false;
        self.acct.held_bytes -= self.node(v).bytes;
        self.acct.drop_candidate(v);
    }

    pub(super) fn mark_evicted(&mut self, v: u32) {
        if self.acct.evicted[v as usize] || self.life.dead[v as usize] || !self.rebuildable(v) {
            return;
        }
        self.acct.evicted[v as usize] = true;
        let root = self.acct.classes.find(v);
        self.acct.classes.uf_cost[root as usize] += self.node(v).cost;
        for &u in self.graph.nodes.get(v as usize).inputs {
            if self.acct.evicted[u as usize] {
                self.acct.classes.union(v, u);
            }
        }
        for k in 0..self.consumers_of(v).len() {
            let w = self.consumers_of(v)[k];
            if (w as usize) < self.acct.evicted.len() && self.acct.evicted[w as usize] {
                self.acct.classes.union(v, w);
            }
        }
    }

    pub(super) fn unmark_evicted(&mut self, v: u32) {
        if std::mem::replace(&mut self.acct.evicted[v as usize], false) {
            let root = self.acct.classes.find(v);
            self.acct.classes.uf_cost[root as usize] -= self.node(v).cost;
        }
    }
}
