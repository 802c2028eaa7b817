//! The planner's node of each op a [`Session`](super::session::Session) recorded
//! (NOTE \[followed-entries\]).
//!
//! # Invariants
//! - Entries are numbered by session position, `0..len()`.
//! - While a step follows a plan, the session started following at its first op, so every
//!   entry is the plan's view's node or one of its side ops: nothing is listed.

use std::borrow::Cow;
use std::sync::Arc;

use super::state::Side;
use crate::planner::{self, GraphView};

// NOTE [followed-entries]: the session listed the planner's node of every op it recorded
// (about 100 bytes, two small lists and the growth of the list: 150-250 bytes an op), and
// while a step followed a plan it also compacted itself as it doubled, which resumed the
// online planner on a copy of them all. A step that follows its plan records, op for op,
// the plan's view's nodes: the view the cache holds already lists them. Such a step's
// entries are now the view itself, its side ops' nodes (a few) and the recorded constants
// where they are fewer than the view's (NOTE [shared-release]); the list is made only when
// it is needed (the step departs from its plan, the session is compacted, a backward pass
// describes the step otherwise than the plan's view). A listed node then carries the view's
// cost, not this step's measurement: under `OpCosts::Measured` the times of a step that
// followed its plan are not measured again.

// NOTE [lent-entries]: online, the session's planner (`Dtr`) holds the planner's node of
// every op it is fed, and the session held a second copy of each in its entries: about 180
// bytes an op, 0.85 MB at the forward pass's end of Burn's `Lstm` under half of K (128 steps,
// 4,737 ops; SaveAll's step peaks at 6.1 MB), where a graph's first step under a budget
// peaks. Online, the entries now lend their nodes to the planner and keep only their
// number; whoever reads them takes them back first (`Session::release_planner`: the pass as
// it starts, a compaction, a step going online), and the planner that held them is then
// replaced.

/// The planner's node of each recorded op, by session position (see the module docs).
#[derive(Default)]
pub(super) struct Entries {
    listed: Vec<planner::Node>,
    followed: Option<Followed>,
    /// NOTE \[lent-entries\]: the number of entries whose nodes the session's online planner
    /// holds (`listed` is then empty and nothing is followed).
    lent: Option<usize>,
}

impl From<Vec<planner::Node>> for Entries {
    fn from(listed: Vec<planner::Node>) -> Self {
        Self {
            listed,
            followed: None,
            lent: None,
        }
    }
}

/// The entries of a step that followed a plan from its first op.
struct Followed {
    view: Arc<GraphView>,
    sides: Arc<[Side]>,
    /// The side ops' nodes, in order.
    side_nodes: Vec<planner::Node>,
    /// The view's nodes recorded with fewer constants than the view charges: their
    /// positions (ascending) and the recorded bytes.
    fixed: Vec<(u32, u64)>,
    len: u32,
}

/// The view's node at session position `at` of a step whose side ops are `sides`, or
/// `Err(k)` when side op `k` is there.
pub(super) fn view_node(sides: &[Side], at: u32) -> Result<u32, usize> {
    let k = sides.partition_point(|side| side.at < at);
    match sides.get(k) {
        Some(side) if side.at == at => Err(k),
        _ => Ok(at - k as u32),
    }
}

/// The session position of the view's node `v` of a step whose side ops are `sides`.
pub(super) fn position(sides: &[Side], v: u32) -> u32 {
    v + sides.partition_point(|side| side.before <= v) as u32
}

impl Entries {
    /// The number of entries.
    pub(super) fn len(&self) -> usize {
        match (&self.followed, self.lent) {
            (_, Some(lent)) => lent,
            (Some(followed), None) => followed.len as usize,
            (None, None) => self.listed.len(),
        }
    }

    /// `n` entries whose nodes the online planner holds (NOTE \[lent-entries\]).
    pub(super) fn lent(n: usize) -> Self {
        Self {
            listed: Vec::new(),
            followed: None,
            lent: Some(n),
        }
    }

    /// Whether the online planner holds the entries' nodes.
    pub(super) fn is_lent(&self) -> bool {
        self.lent.is_some()
    }

    /// Whether the next entry may be lent to the online planner: the entries are lent, or
    /// there are none and none is followed.
    pub(super) fn lendable(&self) -> bool {
        self.lent.is_some() || (self.listed.is_empty() && self.followed.is_none())
    }

    /// Appends an entry whose node the online planner holds (see [`lendable`](Self::lendable)).
    pub(super) fn push_lent(&mut self) {
        debug_assert!(
            self.lendable(),
            "remat internal error: an entry lent among listed ones"
        );
        self.lent = Some(self.lent.unwrap_or(0) + 1);
    }

    /// Takes back the nodes lent to the online planner (all of them, in order).
    ///
    /// # Panics
    /// When `nodes` are not as many as the entries lent.
    pub(super) fn reclaim(&mut self, nodes: Vec<planner::Node>) {
        let lent = self.lent.take();
        assert_eq!(
            lent,
            Some(nodes.len()),
            "remat internal error: the online planner holds other entries than were lent"
        );
        self.listed = nodes;
    }

    /// Panics where the entries are lent: their nodes are the online planner's.
    fn not_lent(&self) {
        assert!(
            self.lent.is_none(),
            "remat internal error: the session's entries are read while lent to its planner"
        );
    }

    /// Whether there is no entry.
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// From now on, entries are the nodes of `view` with the side ops `sides`, as a step
    /// following a plan made for that view records them ([`push`](Self::push) checks
    /// nothing: the session matched each op first).
    ///
    /// # Panics
    /// When entries were recorded already (a step follows a plan from its first op).
    pub(super) fn follow(&mut self, view: Arc<GraphView>, sides: Arc<[Side]>) {
        assert!(
            self.is_empty(),
            "remat internal error: a step started following a plan after its first op"
        );
        self.lent = None;
        self.followed = Some(Followed {
            view,
            sides,
            side_nodes: Vec::new(),
            fixed: Vec::new(),
            len: 0,
        });
    }

    /// The entries of a session whose backward pass took the list of its nodes for its
    /// `view`, with the side ops `sides` split out as `side_nodes` (NOTE \[split-sides\] in
    /// `pass.rs`): read as a followed step's entries are.
    pub(super) fn after_pass(
        view: Arc<GraphView>,
        sides: Arc<[Side]>,
        side_nodes: Vec<planner::Node>,
    ) -> Self {
        assert_eq!(
            sides.len(),
            side_nodes.len(),
            "remat internal error: a side op without its node"
        );
        let len = (view.len() + sides.len()) as u32;
        Self {
            listed: Vec::new(),
            followed: Some(Followed {
                view,
                sides,
                side_nodes,
                fixed: Vec::new(),
                len,
            }),
            lent: None,
        }
    }

    /// Appends `entry`; while following, it is the view's node or side op at its position.
    pub(super) fn push(&mut self, entry: planner::Node) {
        self.not_lent();
        let Some(followed) = &mut self.followed else {
            planner::grow::push(&mut self.listed, entry);
            return;
        };
        if view_node(&followed.sides, followed.len).is_ok() {
            self.push_view_node(entry.fixed_bytes);
        } else {
            followed.side_nodes.push(entry);
            followed.len += 1;
        }
    }

    /// Appends the followed view's node at the next position, recorded with `fixed_bytes` of
    /// constants (the session matched the op with it: NOTE \[followed-facts\] in
    /// `session.rs`).
    ///
    /// # Panics
    /// When the step follows no plan, or a side op is expected there.
    pub(super) fn push_view_node(&mut self, fixed_bytes: u64) {
        self.not_lent();
        let followed = self
            .followed
            .as_mut()
            .expect("remat internal error: a view node appended to a step that follows none");
        let at = followed.len;
        let v = view_node(&followed.sides, at)
            .expect("remat internal error: a view node appended where a side op is expected");
        if fixed_bytes != followed.view.node(v).fixed_bytes {
            followed.fixed.push((at, fixed_bytes));
        }
        followed.len += 1;
    }

    /// The node stored for the entry at `at`, with the side ops its node lists are to be
    /// renumbered past (`None`: they are session positions already).
    fn stored(&self, at: usize) -> (&planner::Node, Option<&[Side]>) {
        self.not_lent();
        match &self.followed {
            None => (&self.listed[at], None),
            Some(followed) => match view_node(&followed.sides, at as u32) {
                Err(k) => (&followed.side_nodes[k], None),
                Ok(v) => (followed.view.node(v), Some(&followed.sides)),
            },
        }
    }

    /// The entry at `at`.
    pub(super) fn get(&self, at: usize) -> Cow<'_, planner::Node> {
        let (node, sides) = self.stored(at);
        let Some(sides) = sides else {
            return Cow::Borrowed(node);
        };
        let mut node = node.clone();
        for u in node.inputs.iter_mut().chain(node.step_reads.iter_mut()) {
            *u = position(sides, *u);
        }
        node.fixed_bytes = self.fixed_bytes(at);
        // Where a constant is released is the pass's to say (NOTE [shared-release]).
        node.fixed_until = None;
        Cow::Owned(node)
    }

    /// The forward cost of the entry at `at`.
    pub(super) fn cost(&self, at: usize) -> f64 {
        self.stored(at).0.cost
    }

    /// The output bytes of the entry at `at`.
    pub(super) fn bytes(&self, at: usize) -> u64 {
        self.stored(at).0.bytes
    }

    /// Whether the entry at `at` can be replayed.
    pub(super) fn replayable(&self, at: usize) -> bool {
        self.stored(at).0.replayable
    }

    /// The bytes of constants the entry at `at` was recorded with.
    pub(super) fn fixed_bytes(&self, at: usize) -> u64 {
        let recorded = self.followed.as_ref().and_then(|followed| {
            let k = followed
                .fixed
                .binary_search_by_key(&(at as u32), |f| f.0)
                .ok()?;
            Some(followed.fixed[k].1)
        });
        recorded.unwrap_or_else(|| self.stored(at).0.fixed_bytes)
    }

    /// Walks the entries from the last to the first: `visit(at)` says whether to read the
    /// entry at `at`, and `read(u)` then gets each value it reads (its inputs, then its step's
    /// reads), as session positions; `visit` sees what `read` marked (both get `marks`).
    /// Linear in the entries and their reads: where the step followed a plan, the view's
    /// indices are renumbered past the side ops by one table and one cursor, not a search
    /// per read (NOTE \[pass-index\] in `pass.rs`).
    pub(super) fn reads_from_last<M>(
        &self,
        marks: &mut M,
        mut visit: impl FnMut(&mut M, usize) -> bool,
        mut read: impl FnMut(&mut M, u32),
    ) {
        self.not_lent();
        let Some(followed) = &self.followed else {
            for at in (0..self.listed.len()).rev() {
                if visit(marks, at) {
                    let node = &self.listed[at];
                    for &u in node.inputs.iter().chain(&node.step_reads) {
                        read(marks, u);
                    }
                }
            }
            return;
        };
        let sides = &followed.sides;
        // The session position of each view node (`position`, in one sweep).
        let mut k = 0;
        let at_of: Vec<u32> = (0..followed.view.len() as u32)
            .map(|v| {
                while k < sides.len() && sides[k].before <= v {
                    k += 1;
                }
                v + k as u32
            })
            .collect();
        // Side ops at or after `at` not passed yet, from the last.
        let mut k = sides.len();
        for at in (0..followed.len).rev() {
            while k > 0 && sides[k - 1].at > at {
                k -= 1;
            }
            let side = k > 0 && sides[k - 1].at == at;
            if !visit(marks, at as usize) {
                continue;
            }
            if side {
                let node = &followed.side_nodes[k - 1];
                for &u in node.inputs.iter().chain(&node.step_reads) {
                    read(marks, u);
                }
            } else {
                // `k` side ops lie before `at`.
                let node = followed.view.node(at - k as u32);
                for &u in node.inputs.iter().chain(&node.step_reads) {
                    read(marks, at_of[u as usize]);
                }
            }
        }
    }

    /// The entry at `at`, moved out where it is listed (an empty node is left in its place)
    /// and made where the step followed a plan: a compaction keeps a few live entries of
    /// many without listing them all first (NOTE \[compaction-entries\] in `session.rs`).
    pub(super) fn take(&mut self, at: usize) -> planner::Node {
        if self.followed.is_some() {
            return self.get(at).into_owned();
        }
        self.not_lent();
        std::mem::replace(&mut self.listed[at], planner::Node::new("", 0, 0.0))
    }

    /// The entries as a list, made now where the step followed a plan (see the module
    /// docs): appending to it no longer follows.
    pub(super) fn listed(&mut self) -> &mut Vec<planner::Node> {
        self.not_lent();
        if self.followed.is_some() {
            let listed = (0..self.len())
                .map(|at| self.get(at).into_owned())
                .collect();
            self.followed = None;
            self.listed = listed;
        }
        &mut self.listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(at: u32, before: u32) -> Side {
        Side {
            at,
            before,
            name: "slice_assign",
            bytes: 64,
            free: true,
        }
    }

    /// A chain `a -> b -> c` where `b` and `c` read their input, `c` holding 16 bytes of
    /// constants in the view.
    fn chain() -> Vec<planner::Node> {
        vec![
            planner::Node::new("a", 8, 1.0),
            planner::Node::new("b", 8, 2.0).inputs([0]).step_reads([0]),
            planner::Node::new("c", 8, 3.0)
                .inputs([1])
                .step_reads([1])
                .fixed_bytes(16),
        ]
    }

    #[test]
    fn followed_entries_are_the_view_s_nodes_renumbered_past_the_side_ops() {
        let view = Arc::new(GraphView::new(chain()).unwrap());
        // Side ops at positions 1 (after `a`) and 3 (after `b`).
        let sides: Arc<[Side]> = Arc::from([side(1, 1), side(3, 2)]);
        let mut entries = Entries::default();
        entries.follow(view, sides.clone());
        // As the session records them: positions renumbered, `c` with fewer constants.
        let mut recorded = vec![
            planner::Node::new("a", 8, 1.5),
            planner::Node::new("slice_assign", 64, 0.5).inputs([0]),
            planner::Node::new("b", 8, 2.5).inputs([0]).step_reads([0]),
            planner::Node::new("slice_assign", 64, 0.5).inputs([1, 2]),
            planner::Node::new("c", 8, 3.5)
                .inputs([2])
                .step_reads([2])
                .fixed_bytes(8),
        ];
        for node in &recorded {
            entries.push(node.clone());
        }
        assert_eq!(entries.len(), 5);
        // Each entry's reads, walked from the last entry (NOTE [pass-index] in `pass.rs`);
        // a second walk reads the even entries only.
        let mut walked: Vec<Vec<u32>> = vec![Vec::new(); 5];
        let mut visited = Vec::new();
        entries.reads_from_last(
            &mut (&mut walked, &mut visited),
            |(_, visited), at| {
                visited.push(at);
                true
            },
            |(walked, visited), u| walked[*visited.last().unwrap()].push(u),
        );
        assert_eq!(visited, [4, 3, 2, 1, 0]);
        let mut even: Vec<Vec<u32>> = vec![Vec::new(); 5];
        let mut at_now = 0;
        entries.reads_from_last(
            &mut (&mut even, &mut at_now),
            |(_, at_now), at| {
                **at_now = at;
                at % 2 == 0
            },
            |(even, at_now), u| even[**at_now].push(u),
        );
        // The view's costs, the recorded constants, the session's numbering.
        for (at, node) in recorded.iter_mut().enumerate() {
            if !node.name.starts_with("slice") {
                node.cost = chain()[view_node(&sides, at as u32).unwrap() as usize].cost;
            }
            assert_eq!(*entries.get(at), *node, "entry {at}");
            assert_eq!(entries.cost(at), node.cost);
            assert_eq!(entries.bytes(at), node.bytes);
            assert_eq!(entries.fixed_bytes(at), node.fixed_bytes);
            assert_eq!(entries.replayable(at), node.replayable);
            let expected: Vec<u32> = node
                .inputs
                .iter()
                .chain(&node.step_reads)
                .copied()
                .collect();
            assert_eq!(walked[at], expected, "entry {at}");
            let expected_even = if at % 2 == 0 { expected } else { Vec::new() };
            assert_eq!(even[at], expected_even, "entry {at}, even entries only");
        }
        // NOTE [compaction-entries]: taken one by one while followed, nothing is listed.
        for at in [4, 1] {
            assert_eq!(entries.take(at), recorded[at], "entry {at} taken");
        }
        assert!(entries.followed.is_some() && entries.listed.is_empty());
        let listed = entries.listed().clone();
        assert_eq!(listed, recorded);
        // Once listed, an entry taken is moved out, and an empty node left in its place.
        assert_eq!(entries.take(2), recorded[2]);
        assert_eq!(entries.get(2).name, "");
        entries.listed()[2] = recorded[2].clone();
        entries.push(planner::Node::new("d", 8, 1.0).inputs([4]));
        assert_eq!(entries.len(), 6);
        assert_eq!(entries.get(5).inputs[..], [4]);
    }

    #[test]
    fn positions_and_view_nodes_invert_each_other() {
        let sides = [side(0, 0), side(2, 1), side(3, 1)];
        let mut v = 0;
        for at in 0..8u32 {
            match view_node(&sides, at) {
                Ok(node) => {
                    assert_eq!(node, v);
                    assert_eq!(position(&sides, node), at);
                    v += 1;
                }
                Err(k) => assert_eq!(sides[k].at, at),
            }
        }
    }

    /// NOTE [lent-entries]: lent entries are counted, read only once taken back, and taken
    /// back whole.
    #[test]
    fn lent_entries_are_counted_and_taken_back_whole() {
        let mut entries = Entries::default();
        assert!(entries.lendable());
        entries.push_lent();
        entries.push_lent();
        entries.push_lent();
        assert!(entries.is_lent() && entries.lendable());
        assert_eq!(entries.len(), 3);
        entries.reclaim(chain());
        assert!(!entries.is_lent() && !entries.lendable());
        assert_eq!(entries.len(), 3);
        assert_eq!(*entries.get(2), chain()[2]);
        assert_eq!(entries.fixed_bytes(2), 16);
        let mut lent = Entries::lent(2);
        assert_eq!(lent.len(), 2);
        // A followed step starts from no entry, lent or not.
        let mut none = Entries::lent(0);
        none.follow(Arc::new(GraphView::new(chain()).unwrap()), Arc::from([]));
        assert!(!none.is_lent() && !none.lendable());
        let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lent.reclaim(chain());
        }));
        assert!(taken.is_err(), "three nodes taken back for two entries");
    }

    #[test]
    #[should_panic(expected = "while lent to its planner")]
    fn lent_entries_are_not_read_in_place() {
        let mut entries = Entries::default();
        entries.push_lent();
        let _ = entries.cost(0);
    }

    #[test]
    #[should_panic(expected = "after its first op")]
    fn a_step_follows_from_its_first_op() {
        let view = Arc::new(GraphView::new(chain()).unwrap());
        let mut entries = Entries::default();
        entries.push(planner::Node::new("a", 8, 1.0));
        entries.follow(view, Arc::from([]));
    }
}
