//! The executor's nodes: a view's (borrowed or owned) or, online, packed.
//!
//! NOTE [packed-nodes]: online, the executor appends a node per recorded op and holds them
//! all until backward starts, beside every value the forward pass kept. A [`Node`] is 104
//! bytes plus two small lists of its own; packed, a node's facts take 32 bytes (its name an
//! index into the distinct names, its constants, which few ops hold, in a list of their
//! own), and its lists are runs of one shared list of ids (4 bytes an id). On Burn's `Lstm`
//! over 128 steps (about 5,000 ops) that is about 0.5 MB less at the forward pass's end,
//! where a graph's first step under a budget peaked (the online planner's state, FIXME
//! [tape-bytes]). The nodes are unpacked when the session takes them back
//! (`Exec::into_node_list`), after the executor's own per-value state is dropped.
//!
//! Cost model: O(1) per node appended (amortized, one hash of its name) and per fact read,
//! O(log k) for the constants of a node among the k that hold some.

use std::borrow::Cow;
use std::collections::HashMap;

use super::grow;
use super::view::{Forced, Node, may_rebuild};

/// A packed node's facts; its inputs and step reads are `ids[at..]`.
#[derive(Clone, Copy, Debug)]
struct Head {
    bytes: u64,
    cost: f64,
    /// Where the node's inputs start in `Packed::ids`; its step reads follow them, up to
    /// the next node's `at`.
    at: u32,
    n_inputs: u32,
    /// The node's name, in `Packed::names`.
    name: u32,
    /// `REPLAYABLE`, `FORCED_*`, `FIXED`.
    flags: u8,
}

const REPLAYABLE: u8 = 1;
const FORCED_KEEP: u8 = 2;
const FORCED_RECOMPUTE: u8 = 4;
/// The node holds constants: its entry in `Packed::fixed`.
const FIXED: u8 = 8;

/// Nodes appended one at a time, packed (NOTE \[packed-nodes\]).
#[derive(Debug, Default)]
pub(crate) struct Packed {
    heads: Vec<Head>,
    ids: Vec<u32>,
    /// The distinct names, and where each is in the list (by its address and length).
    names: Vec<&'static str>,
    name_at: HashMap<(usize, usize), u32>,
    /// The nodes that hold constants, ascending: node, `fixed_until`, `fixed_bytes`.
    fixed: Vec<(u32, Option<u32>, u64)>,
}

impl Packed {
    /// Appends `node`; `None` when the ids or the names would pass `u32::MAX` (no graph
    /// that fits in memory has that many).
    fn push(&mut self, node: Node) -> Option<()> {
        let index = u32::try_from(self.heads.len()).ok()?;
        let at = u32::try_from(self.ids.len()).ok()?;
        let n_inputs = u32::try_from(node.inputs.len()).ok()?;
        let end = self.ids.len() + node.inputs.len() + node.step_reads.len();
        u32::try_from(end).ok()?;
        let key = (node.name.as_ptr() as usize, node.name.len());
        let name = match self.name_at.get(&key) {
            Some(&k) => k,
            None => {
                let k = u32::try_from(self.names.len()).ok()?;
                self.names.push(node.name);
                self.name_at.insert(key, k);
                k
            }
        };
        let mut flags = match node.forced {
            None => 0,
            Some(Forced::Keep) => FORCED_KEEP,
            Some(Forced::Recompute) => FORCED_RECOMPUTE,
        };
        if node.replayable {
            flags |= REPLAYABLE;
        }
        if node.fixed_bytes != 0 || node.fixed_until.is_some() {
            flags |= FIXED;
            grow::push(&mut self.fixed, (index, node.fixed_until, node.fixed_bytes));
        }
        // NOTE [gentle-growth] in `grow.rs`.
        grow::room_for(&mut self.ids, end);
        self.ids.extend_from_slice(&node.inputs);
        self.ids.extend_from_slice(&node.step_reads);
        grow::push(
            &mut self.heads,
            Head {
                bytes: node.bytes,
                cost: node.cost,
                at,
                n_inputs,
                name,
                flags,
            },
        );
        Some(())
    }

    // Out of line: a planned run's reads (`Nodes::List`) stay small enough to inline.
    #[inline(never)]
    fn get(&self, i: usize) -> NodeRef<'_> {
        let head = &self.heads[i];
        let start = head.at as usize;
        let split = start + head.n_inputs as usize;
        let end = self
            .heads
            .get(i + 1)
            .map_or(self.ids.len(), |next| next.at as usize);
        let (fixed_until, fixed_bytes) = if head.flags & FIXED == 0 {
            (None, 0)
        } else {
            let k = self
                .fixed
                .binary_search_by_key(&(i as u32), |&(node, ..)| node)
                .expect("remat internal error: a packed node's constants are listed");
            (self.fixed[k].1, self.fixed[k].2)
        };
        NodeRef {
            bytes: head.bytes,
            cost: head.cost,
            inputs: &self.ids[start..split],
            step_reads: &self.ids[split..end],
            replayable: head.flags & REPLAYABLE != 0,
            forced: if head.flags & FORCED_KEEP != 0 {
                Some(Forced::Keep)
            } else if head.flags & FORCED_RECOMPUTE != 0 {
                Some(Forced::Recompute)
            } else {
                None
            },
            fixed_bytes,
            fixed_until,
        }
    }

    /// Node `i` as it was appended.
    fn node(&self, i: usize) -> Node {
        let node = self.get(i);
        Node {
            name: self.names[self.heads[i].name as usize],
            bytes: node.bytes,
            cost: node.cost,
            inputs: node.inputs.iter().copied().collect(),
            replayable: node.replayable,
            step_reads: node.step_reads.iter().copied().collect(),
            fixed_bytes: node.fixed_bytes,
            fixed_until: node.fixed_until,
            forced: node.forced,
        }
    }

    /// The nodes as they were appended, each its own [`Node`] again (exactly as many as
    /// there are: the list is held beside the packed one while it is made).
    fn to_vec(&self) -> Vec<Node> {
        let mut nodes = Vec::with_capacity(self.heads.len());
        nodes.extend((0..self.heads.len()).map(|i| self.node(i)));
        nodes
    }
}

/// One node's facts as the executor reads them, wherever they are held.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeRef<'n> {
    pub(crate) bytes: u64,
    pub(crate) cost: f64,
    pub(crate) inputs: &'n [u32],
    pub(crate) step_reads: &'n [u32],
    pub(crate) replayable: bool,
    pub(crate) forced: Option<Forced>,
    pub(crate) fixed_bytes: u64,
    pub(crate) fixed_until: Option<u32>,
}

impl NodeRef<'_> {
    /// Whether the value may be dropped and rebuilt ([`may_rebuild`]).
    pub(crate) fn rebuildable(&self) -> bool {
        may_rebuild(self.replayable, self.forced)
    }

    /// The node whose step releases node `i`'s constants ([`Node::releaser`]).
    pub(crate) fn releaser(&self, i: u32) -> u32 {
        self.fixed_until.unwrap_or(i)
    }
}

impl<'n> From<&'n Node> for NodeRef<'n> {
    fn from(node: &'n Node) -> Self {
        NodeRef {
            bytes: node.bytes,
            cost: node.cost,
            inputs: &node.inputs,
            step_reads: &node.step_reads,
            replayable: node.replayable,
            forced: node.forced,
            fixed_bytes: node.fixed_bytes,
            fixed_until: node.fixed_until,
        }
    }
}

/// The executor's nodes (NOTE \[packed-nodes\]). A list is one variant for each of its
/// two forms, so that reading a node matches once (not once here and again in a `Cow`).
#[derive(Debug)]
pub(crate) enum Nodes<'a> {
    /// A view's nodes or a prefix given whole, borrowed: read as they are, never copied.
    Borrowed(&'a [Node]),
    /// A prefix given whole, owned.
    Owned(Vec<Node>),
    /// Appended online, packed.
    Packed(Packed),
}

impl<'a> Nodes<'a> {
    /// No nodes yet; appended ones are packed.
    pub(crate) fn packed() -> Self {
        Nodes::Packed(Packed::default())
    }

    /// The nodes of `list`, as given.
    pub(crate) fn listed(list: Cow<'a, [Node]>) -> Self {
        match list {
            Cow::Borrowed(list) => Nodes::Borrowed(list),
            Cow::Owned(list) => Nodes::Owned(list),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Nodes::Borrowed(list) => list.len(),
            Nodes::Owned(list) => list.len(),
            Nodes::Packed(packed) => packed.heads.len(),
        }
    }

    /// Node `i`'s facts.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> NodeRef<'_> {
        match self {
            Nodes::Borrowed(list) => NodeRef::from(&list[i]),
            Nodes::Owned(list) => NodeRef::from(&list[i]),
            Nodes::Packed(packed) => packed.get(i),
        }
    }

    /// Appends `node` (a borrowed list is copied first); `None` when a packed list's ids
    /// or names would pass `u32::MAX`.
    pub(crate) fn push(&mut self, node: Node) -> Option<()> {
        match self {
            Nodes::Borrowed(list) => {
                let mut list = list.to_vec();
                grow::push(&mut list, node);
                *self = Nodes::Owned(list);
            }
            Nodes::Owned(list) => grow::push(list, node),
            Nodes::Packed(packed) => return packed.push(node),
        }
        Some(())
    }

    /// Whether these are `list` itself (borrowed, not a copy).
    pub(crate) fn are(&self, list: &[Node]) -> bool {
        matches!(self, Nodes::Borrowed(nodes) if std::ptr::eq(*nodes, list))
    }

    /// The nodes as a list: as given, or unpacked.
    pub(crate) fn into_list(self) -> Cow<'a, [Node]> {
        match self {
            Nodes::Borrowed(list) => Cow::Borrowed(list),
            Nodes::Owned(list) => Cow::Owned(list),
            Nodes::Packed(packed) => Cow::Owned(packed.to_vec()),
        }
    }

    /// A copy of the nodes as a list.
    pub(crate) fn to_vec(&self) -> Vec<Node> {
        match self {
            Nodes::Borrowed(list) => list.to_vec(),
            Nodes::Owned(list) => list.clone(),
            Nodes::Packed(packed) => packed.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_nodes_read_and_unpack_as_they_were_appended() {
        let nodes = vec![
            Node::new("a", 8, 1.0),
            Node::new("b", 16, 2.5)
                .inputs(vec![0])
                .step_reads(vec![0, 1])
                .fixed_bytes(4)
                .fixed_until(2),
            Node::new("c", 4, 0.5)
                .inputs(vec![1, 0, 1])
                .replayable(false)
                .forced(Some(Forced::Keep)),
            Node::new("d", 0, 0.0)
                .step_reads(vec![2])
                .forced(Some(Forced::Recompute)),
            Node::new("e", 2, 3.0).inputs(vec![3]),
            // A name seen before; a releaser with no bytes of its own.
            Node::new("b", 6, 1.5).inputs(vec![4, 4]).fixed_until(6),
            Node::new("a", 1, 0.25)
                .step_reads(vec![5, 6])
                .fixed_bytes(3),
        ];
        let mut packed = Nodes::packed();
        for node in nodes.clone() {
            packed.push(node).unwrap();
        }
        assert_eq!(packed.len(), nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            let read = packed.get(i);
            assert_eq!(read.bytes, node.bytes);
            assert_eq!(read.cost, node.cost);
            assert_eq!(read.inputs, &node.inputs[..]);
            assert_eq!(read.step_reads, &node.step_reads[..]);
            assert_eq!(read.replayable, node.replayable);
            assert_eq!(read.forced, node.forced);
            assert_eq!(read.fixed_bytes, node.fixed_bytes);
            assert_eq!(read.releaser(i as u32), node.releaser(i as u32));
            assert_eq!(read.rebuildable(), super::super::view::rebuildable(node));
        }
        assert_eq!(packed.to_vec(), nodes);
        if let Nodes::Packed(inner) = &packed {
            assert_eq!(inner.names.len(), 5, "each distinct name listed once");
            assert_eq!(inner.fixed.len(), 3, "only the nodes that hold constants");
        }
        assert!(!packed.are(&nodes));
        assert_eq!(packed.into_list().into_owned(), nodes);
        let listed = Nodes::listed(Cow::Borrowed(&nodes));
        assert!(listed.are(&nodes));
        assert_eq!(listed.get(1).step_reads, &[0, 1]);
        let mut owned = Nodes::listed(Cow::Borrowed(&nodes[..2]));
        owned.push(nodes[2].clone()).unwrap();
        assert!(!owned.are(&nodes) && owned.len() == 3);
        assert_eq!(owned.into_list().into_owned(), nodes[..3].to_vec());
    }

    #[test]
    fn a_packed_node_takes_32_bytes() {
        assert_eq!(std::mem::size_of::<Head>(), 32);
    }
}
