//! The planner's view of one training step's graph: what each recorded op produces, what its
//! replay and its backward step read, and what the policies decided. No tensor, no backend.
//!
//! # Invariants
//! A [`GraphView`] is checked when it is built and cannot be changed afterwards:
//! - nodes are in recording order: every `inputs[i]` and every `step_reads[i]` other than `i`
//!   itself names an earlier node;
//! - `cost` is finite and not negative;
//! - a node forced to [`Forced::Recompute`] is replayable;
//! - `step_order` lists every node once, consumers before producers (for every edge
//!   `u -> w`, through `inputs` or `step_reads`, `w` steps before `u`).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use super::Error;

/// A decision about a node made before the planner runs (by a policy or a region); the planner
/// must respect it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Forced {
    /// The value is kept from the forward pass until its last backward read, never rebuilt.
    Keep,
    /// The value is not kept in the forward pass: when backward reads it, it is rebuilt.
    Recompute,
}

/// A node's list of earlier nodes (its inputs, or what its step reads): up to four in place.
///
/// NOTE [node-lists]: a plan a graph follows keeps its view from the step that made it for as
/// long as the graph runs, and most ops read one or two values. As `Vec`s, a view of Burn's
/// `Lstm` over 1,024 steps kept 37,900 allocations of 4 and 8 bytes, made during the first
/// step's backward pass among the tensors it freed: every later step of that process found
/// its heap cut into about 5,000 free chunks (glibc's `mallinfo2`, against about 200 under
/// SaveAll), and each allocation of its own tensors took longer to place. In place, the list
/// costs no allocation and no more bytes than the `Vec` did (24).
pub type Ids = smallvec::SmallVec<[u32; 4]>;

/// One recorded op: its output value and what reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The op's name, e.g. `"matmul"`.
    pub name: &'static str,
    /// Size of the op's output in bytes.
    pub bytes: u64,
    /// Cost of running the op forward once, in nanoseconds (estimated from its cost class,
    /// later measured). A replay costs this much.
    pub cost: f64,
    /// The earlier nodes whose values a replay of this op reads. Leaves and untracked
    /// constants are not nodes: they are always available.
    pub inputs: Ids,
    /// Whether the op can be replayed bit-identically. False for random ops, custom ops
    /// without a retro-forward, transfers: once dropped, such a value is gone.
    pub replayable: bool,
    /// The node values this node's backward step reads, in the order it reads them: some of
    /// its inputs, other earlier nodes it saved (custom ops), and/or itself.
    pub step_reads: Ids,
    /// Bytes of constants held on this node's edges, counted from the node's recording until
    /// its step runs (or `fixed_until`'s), whatever the schedule.
    pub fixed_bytes: u64,
    /// The later node whose step releases this node's constants, when another op holds one
    /// of them and steps after this one (NOTE \[shared-release\] in
    /// `checkpoint/budget/pass.rs`); `None`: this node's own step.
    pub fixed_until: Option<u32>,
    /// A decision the planner must respect; `None`: the planner decides.
    pub forced: Option<Forced>,
}

impl Node {
    /// A replayable op with no inputs, no step reads, no constants, and no forced decision.
    pub fn new(name: &'static str, bytes: u64, cost: f64) -> Self {
        Self {
            name,
            bytes,
            cost,
            inputs: Ids::new(),
            replayable: true,
            step_reads: Ids::new(),
            fixed_bytes: 0,
            fixed_until: None,
            forced: None,
        }
    }

    /// Sets the nodes a replay reads.
    pub fn inputs(mut self, inputs: impl IntoIterator<Item = u32>) -> Self {
        self.inputs = inputs.into_iter().collect();
        self
    }

    /// Sets the node values the backward step reads.
    pub fn step_reads(mut self, reads: impl IntoIterator<Item = u32>) -> Self {
        self.step_reads = reads.into_iter().collect();
        self
    }

    /// Sets whether the op can be replayed.
    pub fn replayable(mut self, replayable: bool) -> Self {
        self.replayable = replayable;
        self
    }

    /// Sets the constant bytes held on the node's edges.
    pub fn fixed_bytes(mut self, bytes: u64) -> Self {
        self.fixed_bytes = bytes;
        self
    }

    /// Sets the node whose step releases this node's constants.
    pub fn fixed_until(mut self, node: u32) -> Self {
        self.fixed_until = Some(node);
        self
    }

    /// The node whose step releases node `i`'s constants.
    pub(crate) fn releaser(&self, i: u32) -> u32 {
        self.fixed_until.unwrap_or(i)
    }

    /// Sets a forced decision.
    pub fn forced(mut self, forced: Option<Forced>) -> Self {
        self.forced = forced;
        self
    }
}

/// A recorded training step as the planner sees it: nodes in recording order and the order
/// of the backward steps. See the module docs of [`planner`](super) for the model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphView {
    // INVARIANT: checked by `check` (see the module docs).
    nodes: Vec<Node>,
    step_order: Vec<u32>,
}

impl GraphView {
    /// A view whose backward steps run in reverse recording order.
    ///
    /// # Errors
    /// [`Error::InvalidView`] when a node breaks the rules in the module docs.
    pub fn new(nodes: Vec<Node>) -> Result<Self, Error> {
        let n = u32::try_from(nodes.len()).map_err(|_| Error::InvalidView {
            node: None,
            reason: "more than u32::MAX nodes".into(),
        })?;
        let step_order = (0..n).rev().collect();
        Self::with_step_order(nodes, step_order)
    }

    /// A view whose backward steps run in `step_order` (consumers before producers).
    ///
    /// # Errors
    /// [`Error::InvalidView`] when a node or the order breaks the rules in the module docs.
    pub fn with_step_order(mut nodes: Vec<Node>, step_order: Vec<u32>) -> Result<Self, Error> {
        // A view lives as long as its plan, and lists that grow leave room: the nodes of
        // Burn's `Lstm` over 128 steps (4,737 ops) had room for 8,192 when they doubled,
        // 0.36 MB more at the first step's peak under a budget.
        nodes.shrink_to_fit();
        let view = Self { nodes, step_order };
        view.check()?;
        Ok(view)
    }

    fn check(&self) -> Result<(), Error> {
        let n = self.nodes.len();
        let invalid = |node: usize, reason: String| Error::InvalidView {
            node: Some(node as u32),
            reason,
        };
        if u32::try_from(n).is_err() {
            return Err(Error::InvalidView {
                node: None,
                reason: "more than u32::MAX nodes".into(),
            });
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(&u) = node.inputs.iter().find(|&&u| u as usize >= i) {
                return Err(invalid(
                    i,
                    format!("input {u} is not an earlier node (nodes must be in recording order)"),
                ));
            }
            if let Some(&u) = node.step_reads.iter().find(|&&u| u as usize > i) {
                return Err(invalid(i, format!("its step reads node {u}, a later node")));
            }
            if !node.cost.is_finite() || node.cost < 0.0 {
                return Err(invalid(
                    i,
                    format!("cost {} is not a finite cost >= 0", node.cost),
                ));
            }
            if node.forced == Some(Forced::Recompute) && !node.replayable {
                return Err(invalid(
                    i,
                    "it is forced to Recompute but cannot be replayed".into(),
                ));
            }
        }
        if self.step_order.len() != n {
            return Err(Error::InvalidView {
                node: None,
                reason: format!(
                    "the step order lists {} steps for {n} nodes",
                    self.step_order.len()
                ),
            });
        }
        let mut position = vec![u32::MAX; n];
        for (p, &s) in self.step_order.iter().enumerate() {
            let slot = position
                .get_mut(s as usize)
                .ok_or_else(|| Error::InvalidView {
                    node: None,
                    reason: format!("the step order names node {s}, which does not exist"),
                })?;
            if *slot != u32::MAX {
                return Err(invalid(
                    s as usize,
                    "it appears twice in the step order".into(),
                ));
            }
            *slot = p as u32;
        }
        for (w, node) in self.nodes.iter().enumerate() {
            let producers = node.inputs.iter().chain(&node.step_reads);
            if let Some(&u) = producers
                .filter(|&&u| u as usize != w)
                .find(|&&u| position[u as usize] < position[w])
            {
                return Err(invalid(
                    w,
                    format!("it reads node {u} but steps after it (consumers step first)"),
                ));
            }
            if let Some(u) = node.fixed_until
                && (u as usize >= n || position[u as usize] <= position[w])
            {
                return Err(invalid(
                    w,
                    format!("its constants are released by node {u}, which does not step after it"),
                ));
            }
        }
        Ok(())
    }

    /// The nodes, in recording order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Node `i`.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn node(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the view has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The order of the backward steps.
    pub fn step_order(&self) -> &[u32] {
        &self.step_order
    }

    /// Per step position `p` (and one past the last), the bytes of the constants released by
    /// the steps at `p` or later: the constants held while the steps before `p` have run.
    pub(crate) fn constants_from(&self) -> Vec<u64> {
        let released = self.released_by_steps();
        let n = self.step_order.len();
        let mut from = vec![0u64; n + 1];
        for p in (0..n).rev() {
            from[p] = from[p + 1] + released[self.step_order[p] as usize];
        }
        from
    }

    /// Per node, the bytes of constants its step releases: its own, and those of the nodes
    /// whose constants it holds last (`Node::fixed_until`).
    pub(crate) fn released_by_steps(&self) -> Vec<u64> {
        let mut released = vec![0u64; self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            released[node.releaser(i as u32) as usize] += node.fixed_bytes;
        }
        released
    }

    /// The cost of one forward pass: the sum of the nodes' costs.
    pub fn forward_cost(&self) -> f64 {
        self.nodes.iter().map(|n| n.cost).sum()
    }

    /// Whether value `i` may be dropped and rebuilt: its op replays and no decision keeps it.
    pub fn rebuildable(&self, i: u32) -> bool {
        rebuildable(self.node(i))
    }
}

/// Whether a node's value may be dropped and rebuilt.
pub(crate) fn rebuildable(node: &Node) -> bool {
    may_rebuild(node.replayable, node.forced)
}

/// Whether a value replayable as `replayable`, under `forced`, may be dropped and rebuilt.
pub(crate) fn may_rebuild(replayable: bool, forced: Option<Forced>) -> bool {
    replayable && forced != Some(Forced::Keep)
}

impl fmt::Display for GraphView {
    /// One line per node: index, name, bytes, cost, inputs, step reads and marks; then the
    /// step order when it is not the reverse of recording order. [`GraphView::from_str`]
    /// reads it back (costs rounded to whole nanoseconds).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.nodes.iter().enumerate() {
            write!(
                f,
                "{i:>5} {:<16} {:>12} B {:>10.0} ns in {:?} reads {:?}",
                n.name, n.bytes, n.cost, n.inputs, n.step_reads
            )?;
            if !n.replayable {
                f.write_str(" not-replayable")?;
            }
            if n.fixed_bytes > 0 {
                write!(f, " fixed {} B", n.fixed_bytes)?;
            }
            if let Some(u) = n.fixed_until {
                write!(f, " until {u}")?;
            }
            if let Some(forced) = n.forced {
                write!(f, " forced {forced:?}")?;
            }
            writeln!(f)?;
        }
        if !self
            .step_order
            .iter()
            .copied()
            .eq((0..self.len() as u32).rev())
        {
            writeln!(f, "order {:?}", self.step_order)?;
        }
        Ok(())
    }
}

impl FromStr for GraphView {
    type Err = Error;

    /// Reads a view written by `Display` (a recorded model's graph saved for study or as a
    /// test fixture). Blank lines and lines starting with `#` are skipped.
    ///
    /// # Errors
    /// [`Error::InvalidView`] naming the line that does not parse, or the rule the view
    /// breaks.
    fn from_str(text: &str) -> Result<Self, Error> {
        let mut nodes = Vec::new();
        let mut order = None;
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |what: &str| Error::InvalidView {
                node: None,
                reason: format!("line {}: {what}: {line:?}", number + 1),
            };
            if let Some(rest) = line.strip_prefix("order ") {
                order = Some(parse_list(rest).ok_or_else(|| bad("a bad step order"))?);
                continue;
            }
            let node = parse_node(line).ok_or_else(|| {
                bad("not `index name bytes B cost ns in [..] reads [..] [marks]`")
            })?;
            if node.0 != nodes.len() {
                return Err(bad("indices must count up from 0"));
            }
            nodes.push(node.1);
        }
        match order {
            Some(order) => GraphView::with_step_order(nodes, order),
            None => GraphView::new(nodes),
        }
    }
}

/// `[1, 2, 3]` (or `[]`).
fn parse_list(text: &str) -> Option<Vec<u32>> {
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

/// One node line of the `Display` format.
fn parse_node(line: &str) -> Option<(usize, Node)> {
    let (head, rest) = line.split_once(" in ")?;
    let mut words = head.split_whitespace();
    let index = words.next()?.parse().ok()?;
    let name = intern(words.next()?);
    let bytes = words.next()?.parse().ok()?;
    (words.next()? == "B").then_some(())?;
    let cost: f64 = words.next()?.parse().ok()?;
    (words.next()? == "ns" && words.next().is_none()).then_some(())?;
    let (inputs, rest) = rest.split_once(" reads ")?;
    let close = rest.find(']')?;
    let (reads, marks) = rest.split_at(close + 1);
    let mut node = Node::new(name, bytes, cost)
        .inputs(parse_list(inputs)?)
        .step_reads(parse_list(reads)?);
    let mut marks = marks.split_whitespace();
    while let Some(mark) = marks.next() {
        match mark {
            "not-replayable" => node.replayable = false,
            "fixed" => {
                node.fixed_bytes = marks.next()?.parse().ok()?;
                (marks.next()? == "B").then_some(())?;
            }
            "until" => node.fixed_until = Some(marks.next()?.parse().ok()?),
            "forced" => {
                node.forced = Some(match marks.next()? {
                    "Keep" => Forced::Keep,
                    "Recompute" => Forced::Recompute,
                    _ => return None,
                });
            }
            _ => return None,
        }
    }
    Some((index, node))
}

/// A `'static` name for an op name read from text: each distinct name is allocated once
/// for the life of the process (op names are few).
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}
