//! The forward pass under a budget (NOTE \[budget\]): each thread's [`Session`] is fed
//! every op recorded under a budget ([`on_record`]) and answers with what to keep and what
//! to drop: a [`Dtr`] over the ops recorded so far (online), or the chunk of a cached plan
//! the step follows (planned mode) while its ops match the plan's view.
//!
//! Cost: one planner event per op (online: the eviction's bounded scan; planned: a lookup
//! in the plan's index), plus a compaction, linear in the session, when it doubles.
//!
//! # Invariants
//! - The planner's answer is computed under the session's borrow and carried out after it
//!   is released (`Apply`): no user code runs under the borrow.
//! - Session index `i` is the planner's node `i`: `handles`, `nodes` and `ids` are parallel
//!   and `index` inverts `ids`; a compaction renumbers them all together.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use super::entries::{Entries, position, view_node};
use super::state::{LAST_BUDGET, Memory, Side, bytes_of};
use super::stop::need_of;
use crate::graph::{BudgetNode, NodeId};
use crate::planner::{self, Action, CachedPlan, Dtr, grow};

/// A cached plan the thread's current step follows while its ops match the plan's view and
/// the view's side ops (NOTE \[side-ops\] in `state.rs`).
pub(super) struct Follow {
    /// The plan, with its schedule's index.
    pub(super) plan: CachedPlan,
    /// The ops of the step the view does not hold, by position.
    pub(super) sides: Arc<[Side]>,
}

impl Follow {
    fn new(plan: CachedPlan, memory: &Memory) -> Self {
        let sides = memory.sides_of(plan.signature);
        Self { plan, sides }
    }

    /// The view's node at session position `at`, or `Err(k)` when side op `k` is expected
    /// there.
    fn view_node(&self, at: u32) -> Result<u32, usize> {
        view_node(&self.sides, at)
    }

    /// The session position of the view's node `v`.
    fn position(&self, v: u32) -> u32 {
        position(&self.sides, v)
    }

    /// Whether the op `entry`, recorded at session position `at`, is the side op the view
    /// expects there (NOTE \[side-ops\] in `state.rs`): it gets no actions. The view's own
    /// nodes are matched from the op's facts in [`record`] (NOTE \[followed-facts\]).
    fn expects_side_op(&self, entry: &planner::Node, at: u32) -> bool {
        let Err(k) = self.view_node(at) else {
            return false;
        };
        // A side op holds nothing the plan does not know of: no constants, and no value
        // that cannot be rebuilt unless nothing reads it.
        let side = &self.sides[k];
        let holds_nothing = entry.fixed_bytes == 0 && (entry.replayable || side.free);
        side.name == entry.name && side.bytes == entry.bytes && holds_nothing
    }
}

impl Follow {
    /// Whether the step that followed this plan to the end can carry out the plan's
    /// backward: the plan is of the pass's graph (`signature`) under its budget, and the
    /// values `held` when the pass starts (view indices) are those the plan's forward part
    /// leaves held.
    pub(super) fn applies(&self, signature: u64, budget: u64, held: &[u32]) -> bool {
        if self.plan.signature != signature || self.plan.budget_bytes != budget {
            return false;
        }
        let mut now = held.to_vec();
        now.sort_unstable();
        held_after_forward(&self.plan).is_some_and(|expected| expected == now)
    }
}

/// The values a plan holds when its forward part ends (view indices, ascending); `None`
/// for a plan without a backward part.
pub(super) fn held_after_forward(plan: &CachedPlan) -> Option<Vec<u32>> {
    let start = plan.index.backward(0)?.start;
    let mut held: Vec<u32> = Vec::new();
    for action in &plan.schedule.actions()[..start] {
        match *action {
            Action::Keep(v) => held.push(v),
            Action::Free(v) => held.retain(|&x| x != v),
            _ => {}
        }
    }
    held.sort_unstable();
    held.dedup();
    Some(held)
}

/// The ops recorded under a budget on one thread (see NOTE \[budget\]).
pub(super) struct Session {
    pub(super) budget_id: u32,
    budget: u64,
    /// The bytes the online planner works within: the budget, or more once the forward
    /// pass went over it (NOTE \[forward-overflow\]).
    raised: u64,
    dtr: Dtr<'static>,
    /// Recorded nodes, by session index.
    pub(super) handles: Vec<Weak<dyn BudgetNode>>,
    /// The planner's node of each index (for compaction and measured costs; NOTE
    /// \[followed-entries\] in `entries.rs`).
    pub(super) nodes: Entries,
    /// The recorded nodes' ids, by session index: ascending (NOTE \[session-ids\]).
    pub(super) ids: Vec<NodeId>,
    /// Whether each op's backward step reads no value (NOTE \[side-ops\] in `state.rs`).
    pub(super) quiet: Vec<bool>,
    /// The ops whose value an op recorded outside the session (under another policy) reads.
    pub(super) read_outside: Vec<u32>,
    /// The op being recorded keeps a value the followed plan does not count: the step
    /// departs from the plan there.
    depart: bool,
    /// An op of this step read a value recorded as a free side op, retaining nothing (NOTE
    /// \[side-view\] in `state.rs`); taken by the step's backward pass.
    pub(super) free_side_read: bool,
    /// Compact when this many nodes are listed.
    compact_at: usize,
    /// The cached plan this step follows (planned mode), while its ops match.
    pub(super) follow: Option<Follow>,
}

// NOTE [session-ids]: a session finds an op's index from its id by a binary search of
// `ids`, which is ascending: ids are minted from one counter as each node is made
// (`finish_node` in `ops/record.rs`, just before the session records it), a thread records
// its ops one after another, and compaction keeps their order. A hash map from id to index
// cost tens of bytes an op more (with its growth), heap that no budget counts
// (docs/BUDGET.md).

impl Session {
    /// The session index of op `id`, if the session recorded it (NOTE \[session-ids\]).
    pub(super) fn position(&self, id: NodeId) -> Option<u32> {
        self.ids.binary_search(&id).ok().map(|at| at as u32)
    }

    fn new(budget_id: u32) -> Self {
        let budget = bytes_of(budget_id);
        LAST_BUDGET.store(budget, Ordering::Relaxed);
        Self {
            budget_id,
            budget,
            raised: budget,
            dtr: Dtr::new(budget),
            handles: Vec::new(),
            nodes: Entries::default(),
            ids: Vec::new(),
            quiet: Vec::new(),
            read_outside: Vec::new(),
            depart: false,
            free_side_read: false,
            compact_at: 1024,
            follow: None,
        }
    }

    /// Forgets nodes that died or were consumed; the live ones are taken over by a resumed
    /// [`Dtr`] (under `budget_id`, which may be a new budget), as they stand. Linear in the
    /// session.
    ///
    /// # Errors
    /// When the live values that cannot be rebuilt pass the budget (the session is then
    /// empty).
    ///
    /// `left_out` (by session position, when given) marks the ops a backward pass did not
    /// claim: the others are consumed, so not looked at (NOTE \[pass-index\] in `pass.rs`).
    pub(super) fn compact(
        &mut self,
        budget_id: u32,
        left_out: Option<&[bool]>,
    ) -> Result<(), planner::Error> {
        let left_out = left_out.filter(|l| l.len() == self.handles.len());
        let live: Vec<(usize, Arc<dyn BudgetNode>)> = self
            .handles
            .iter()
            .enumerate()
            .filter(|&(i, _)| left_out.is_none_or(|l| l[i]))
            .filter_map(|(i, h)| h.upgrade().map(|n| (i, n)))
            .filter(|(_, n)| !n.is_consumed())
            .collect();
        let same_budget = budget_id == self.budget_id;
        // NOTE [no-op-compaction]: a session that grew with nothing to forget (a long forward
        // pass) is kept as it is. Rebuilt, it was copied twice more beside itself (the
        // entries, and the planner resumed on a copy of them): 2.1 MB at the forward pass's
        // peak of Burn's `Lstm` under a budget (128 steps; SaveAll's step peaks at 6.1 MB).
        if same_budget && live.len() == self.handles.len() {
            self.compact_at = (2 * live.len()).max(1024);
            return Ok(());
        }
        // Freed before the new one is made.
        self.release_planner();
        // NOTE [compaction-entries]: the live entries are taken one by one. Listing them
        // all first made a step that followed its plan list every node of its view at its
        // backward pass, which compacts the session to the few side ops still live: 0.52
        // MB of a 6.4 MB heap peak on Burn's `Lstm` under half of K (128 steps).
        let recorded = self.nodes.len();
        let mut fresh = Session::new(budget_id);
        fresh.compact_at = (2 * live.len()).max(1024);
        fresh.free_side_read = self.free_side_read;
        if same_budget {
            fresh.raised = self.raised;
        }
        if live.is_empty() {
            *self = fresh;
            return Ok(());
        }
        let mut remap = vec![u32::MAX; recorded];
        for (new, (old, _)) in live.iter().enumerate() {
            remap[*old] = new as u32;
        }
        let keep = |list: &[u32]| -> planner::Ids {
            list.iter()
                .map(|&v| remap[v as usize])
                .filter(|&v| v != u32::MAX)
                .collect()
        };
        let mut prefix = Vec::with_capacity(live.len());
        let mut held = Vec::new();
        for (new, (old, node)) in live.iter().enumerate() {
            let mut entry = self.nodes.take(*old);
            entry.inputs = keep(&entry.inputs);
            entry.step_reads = keep(&entry.step_reads);
            prefix.push(entry);
            if node.is_held() {
                held.push(new as u32);
            }
            fresh.handles.push(Arc::downgrade(node));
            fresh.ids.push(self.ids[*old]);
            fresh.quiet.push(self.quiet[*old]);
        }
        // NOTE [lent-entries]: the live entries' nodes go to the resumed planner, not a copy.
        let len = prefix.len();
        fresh.dtr = match Dtr::resume_or_return(fresh.raised, prefix, &held) {
            Ok(dtr) => dtr,
            Err((_, prefix)) => {
                // The live graphs hold more than the (new) budget: evict what can be rebuilt
                // and take over from there.
                let mut pinned = Vec::new();
                for &v in &held {
                    let node = &live[v as usize].1;
                    if prefix[v as usize].replayable {
                        node.scheduled_free();
                    }
                    if node.is_held() {
                        pinned.push(v);
                    }
                }
                match Dtr::resume_or_return(fresh.raised, prefix, &pinned) {
                    Ok(dtr) => dtr,
                    // NOTE [forward-overflow]: the step's own forward pass goes on.
                    Err((error, prefix)) if same_budget => {
                        fresh.raise(need_of(&error));
                        fresh.resumed(prefix, &pinned)
                    }
                    Err((error, _)) => {
                        *self = Session::new(budget_id);
                        return Err(error);
                    }
                }
            }
        };
        fresh.nodes = Entries::lent(len);
        fresh.read_outside = keep(&self.read_outside).into_vec();
        // A step following a plan is never rebuilt here: with nothing forgotten under the
        // same budget, the session is kept as it is (above), and otherwise it stops
        // following.
        *self = fresh;
        Ok(())
    }
}

/// Compacts a thread's session (`slot`): forgets the nodes a backward pass consumed and
/// those that died. With `step_ended`, the bound the step's forward pass raised ends first
/// (NOTE \[forward-overflow\]: the next step starts within the budget). When the live graphs
/// pass the budget the session is dropped, and the next op recorded under it reports it.
/// `left_out`: the ops a backward pass did not claim, by session position
/// ([`Session::compact`]).
pub(super) fn compact_slot(
    slot: &mut Option<Session>,
    step_ended: bool,
    left_out: Option<&[bool]>,
) {
    if let Some(session) = slot.as_mut() {
        if step_ended {
            session.lower_raised();
        }
        let budget_id = session.budget_id;
        if session.compact(budget_id, left_out).is_err() {
            *slot = None;
        }
    }
}

// NOTE [forward-overflow]: online, before the step's graph is known, the forward pass can
// find that the values it cannot drop pass the budget: constants, values that cannot be
// rebuilt, or what online eviction cannot avoid (Burn's `Lstm` at a tenth of its bytes: the
// zeros tensor its output chain writes into, held for a replay no step asks for, NOTE
// [side-ops]). It used to stop there, naming what the part recorded so far needed ("at
// least X so far"): a user following it retried once per kilobyte (issue 34), and a
// budget its plan fits stopped too. The forward pass now goes on within a raised bound
// (what it must hold, and a quarter more each time it must raise, so that raising is rare
// and the online planner still drops what it can), and the step is decided at `backward()`,
// where the whole graph is known: when the graph fits the budget from the lean state the
// step runs (its backward within the budget, its forward pass over it: `stats()` shows the
// peak) and the next steps follow its plan; else the step stops there, before any backward
// step runs, naming the smallest budget the whole step runs with.

impl Session {
    /// Raises the bytes the online planner works within to at least `need`, and by a quarter
    /// (NOTE \[forward-overflow\]).
    fn raise(&mut self, need: u64) {
        let step = self.raised.saturating_add(self.raised / 4);
        self.raised = need.max(step).max(self.budget);
    }

    /// Frees the online planner of a session whose ops a backward pass claimed: the pass does
    /// not record, and [`Session::compact`] resumes a planner on the nodes still live (NOTE
    /// \[pass-compaction\] in `pass.rs`).
    pub(super) fn release_planner(&mut self) {
        let spent = std::mem::replace(&mut self.dtr, Dtr::new(self.raised));
        if self.nodes.is_lent() {
            // NOTE [lent-entries]: the entries' nodes come back from it.
            self.nodes.reclaim(spent.into_nodes());
        }
    }

    /// Goes online from the state the session holds now (`held`): the entries' nodes are
    /// lent to a planner resumed on them (NOTE \[lent-entries\] in `entries.rs`).
    fn go_online(&mut self, held: &[u32]) {
        self.release_planner();
        let prefix = std::mem::take(self.nodes.listed());
        let len = prefix.len();
        self.dtr = self.resumed(prefix, held);
        self.nodes = Entries::lent(len);
    }

    /// Lowers the raised bound back to the budget, once the step that raised it has ended
    /// (NOTE \[forward-overflow\]: the step after a first step that went over the budget
    /// ran online within the raised bound, 3.82 MB under a budget of 3.06 MB).
    fn lower_raised(&mut self) {
        self.raised = self.budget;
    }

    /// An online planner resumed on `prefix` holding `held`, within the raised bytes (raised
    /// further until what is held fits).
    fn resumed(&mut self, mut prefix: Vec<planner::Node>, held: &[u32]) -> Dtr<'static> {
        loop {
            match Dtr::resume_or_return(self.raised, prefix, held) {
                Ok(dtr) => return dtr,
                Err((error, back)) => {
                    self.raise(need_of(&error));
                    prefix = back;
                }
            }
        }
    }

    /// The values held now, by session index.
    fn held_now(&self) -> Vec<u32> {
        (0..self.handles.len() as u32)
            .filter(|&v| {
                self.handles[v as usize]
                    .upgrade()
                    .is_some_and(|n| n.is_held())
            })
            .collect()
    }
}

impl Session {
    /// Online (no plan followed), before an op with `inputs` is recorded: the producers among
    /// them that the online planner may keep at that op, or `None` (hold every needed input)
    /// where recording it may first compact the session or pick a plan, which decide anew
    /// (NOTE \[in-place-forward\]).
    fn online_keeps(&self, inputs: &[InputRead]) -> Option<SmallVec<[NodeId; 2]>> {
        let recorded = self.nodes.len();
        let alive = |h: Option<&Weak<dyn BudgetNode>>| h.is_some_and(|h| h.strong_count() > 0);
        let settled = recorded > 0
            && self.dtr.recorded() == recorded
            && self.handles.len() < self.compact_at
            && (alive(self.handles.first()) || alive(self.handles.last()));
        if !settled {
            return None;
        }
        let mut keeps = SmallVec::new();
        for (k, input) in inputs.iter().enumerate() {
            if inputs[..k].iter().any(|i| i.producer == input.producer) {
                continue;
            }
            let Some(at) = self.position(input.producer) else {
                continue;
            };
            // One producer may feed several of the op's inputs (`x * x`).
            let (by_step, by_replay) = inputs
                .iter()
                .filter(|i| i.producer == input.producer)
                .fold((false, false), |(s, r), i| {
                    (s || i.by_step, r || i.by_replay)
                });
            if self.dtr.may_keep_at_next(at, by_step, by_replay) {
                keeps.push(input.producer);
            }
        }
        Some(keeps)
    }

    /// The planner's forward actions for op `index` (session positions), as what to carry
    /// out on the nodes.
    fn to_apply(&self, actions: impl IntoIterator<Item = Action>, index: u32) -> Answer {
        actions
            .into_iter()
            .filter_map(|action| match action {
                Action::Keep(v) if v == index => Some(Apply::KeepOutput),
                Action::Keep(v) => Some(Apply::KeepInput(self.ids[v as usize])),
                Action::Free(v) => Some(Apply::Evict(self.handles[v as usize].clone())),
                _ => None,
            })
            .collect()
    }
}

// NOTE [in-place-forward]: the recording site holds a clone of each needed input of an op
// recorded under a budget while the op runs, so that the planner's answer may keep it. A
// clone makes the input's buffer shared, and an inner kernel that works in place on a
// buffer it alone holds (Flex's `slice_assign`, binary ops on a dead operand) then copies:
// Burn's `Lstm` writes each hidden state into a `[batch, seq, hidden]` tensor with
// `slice_assign`, in place under SaveAll (whose backward does not read that tensor) and
// copied at every step under a budget. Following a plan, the answer is known before the
// op runs: only the inputs the plan keeps at this op are held in hand. Online, the session
// asks its planner first (`Dtr::may_keep_at_next`): an input it has decided on already, or
// would not want with the counts the op adds, is not held in hand. On that `Lstm` (batch 32,
// hidden 256, 64 steps) the graph's first step under half of K held a copy of the stacked
// output beside the one being written, 0.81x SaveAll's heap peak; now 0.70x. Where a
// recording may first compact the session or pick a plan, every needed input is held.

/// What the plan a step follows says of the op about to be recorded under a budget (NOTE
/// \[in-place-forward\], \[side-ops\] in `state.rs`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Upcoming {
    /// The producers among its inputs whose values the plan keeps at this op, or `None`
    /// when no plan is followed (then every needed input is held in hand).
    pub(crate) keeps: Option<SmallVec<[NodeId; 2]>>,
    /// The op is a side op of the step that nothing reads (NOTE \[side-ops\] in `state.rs`):
    /// it is recorded retaining nothing when its own step reads nothing.
    pub(crate) free_side: bool,
}

/// One input of an op about to be recorded, as [`Session::upcoming`] weighs it: its
/// producer, whether the op's backward step reads it, and whether a replay of the op reads
/// it.
pub(crate) struct InputRead {
    pub(crate) producer: NodeId,
    pub(crate) by_step: bool,
    pub(crate) by_replay: bool,
}

/// What an op recorded under a budget reads and produces: plain facts, no tensor.
pub(crate) struct OpFacts {
    pub(crate) name: &'static str,
    /// Its output's bytes.
    pub(crate) bytes: u64,
    /// Its forward time, measured or estimated.
    pub(crate) cost_ns: f64,
    /// The engine can rebuild its value (the inputs a replay reads are retained).
    pub(crate) replayable: bool,
    /// Recorded in a checkpoint region: never kept in the forward pass.
    pub(crate) in_region: bool,
    /// Its backward step reads its own output.
    pub(crate) reads_output: bool,
    /// The constants on its edges the budget charges to it.
    pub(crate) fixed_bytes: u64,
    /// Producers a replay reads (in place for up to two: no allocation per op).
    pub(crate) inputs: SmallVec<[NodeId; 2]>,
    /// Producers the backward step reads.
    pub(crate) step_reads: SmallVec<[NodeId; 2]>,
    /// Its backward step reads no value (NOTE \[side-ops\] in `state.rs`).
    pub(crate) quiet: bool,
}

/// What the engine carries out on the nodes after an op is recorded (in place for up to two
/// actions: no allocation per op on a planned step).
pub(crate) type Answer = SmallVec<[Apply; 2]>;

/// An op recorded under a budget, as the session sees it.
pub(super) struct OpRecord {
    /// The node's id (above every id the session recorded: NOTE \[session-ids\]).
    pub(super) id: NodeId,
    /// The node, for the session to drop its value later.
    pub(super) handle: Weak<dyn BudgetNode>,
    /// The budget it was recorded under.
    pub(super) budget_id: u32,
    pub(super) facts: OpFacts,
}

/// What to carry out after the session answered, outside its borrow, in this order (a plan
/// may keep a value and drop it again before the next op to make room for that op's
/// constants).
#[derive(Debug)]
pub(super) enum Apply {
    /// Store the recorded op's output.
    KeepOutput,
    /// Store the value of this input of the op (the recording site has it in hand).
    KeepInput(NodeId),
    /// Drop this node's value (it stays rebuildable).
    Evict(Weak<dyn BudgetNode>),
}

impl Session {
    /// Before an op recorded under `budget_id` holds `bytes` of constants on its edges (they
    /// are counted from then on): the values the online planner drops to make room. `None`
    /// when the session is under another budget, follows a plan (the plan made that room at
    /// the previous op), or nothing can make room (the op's recording reports it).
    pub(super) fn make_room(
        &mut self,
        budget_id: u32,
        bytes: u64,
    ) -> Option<Vec<Weak<dyn BudgetNode>>> {
        if bytes == 0 || self.budget_id != budget_id || self.follow.is_some() {
            return None;
        }
        let victims = self.dtr.victims(bytes).ok()?;
        Some(
            victims
                .into_iter()
                .map(|v| self.handles[v as usize].clone())
                .collect(),
        )
    }

    /// What the followed plan says of the op named `name` about to be recorded (see
    /// [`Upcoming`]); online, which of its `inputs` the online planner may keep at it (NOTE
    /// \[in-place-forward\]).
    pub(super) fn upcoming(&self, name: &'static str, inputs: &[InputRead]) -> Upcoming {
        let Some(follow) = self.follow.as_ref() else {
            return Upcoming {
                keeps: self.online_keeps(inputs),
                free_side: false,
            };
        };
        let at = self.nodes.len() as u32;
        match follow.view_node(at) {
            Err(k) => Upcoming {
                keeps: Some(SmallVec::new()),
                free_side: follow.sides[k].free && follow.sides[k].name == name,
            },
            Ok(v) => Upcoming {
                keeps: follow.plan.index.forward(v as usize).map(|range| {
                    follow.plan.schedule.actions()[range]
                        .iter()
                        .filter_map(|action| match *action {
                            Action::Keep(u) if u < v => {
                                self.ids.get(follow.position(u) as usize).copied()
                            }
                            _ => None,
                        })
                        .collect()
                }),
                free_side: false,
            },
        }
    }

    /// Notes that an op reads the value of node `id` where the session does not expect it
    /// (NOTE \[side-ops\] in `state.rs`): an op recorded outside the session (under another
    /// policy), whose reads the session does not see, so that value is never free; or, with
    /// `kept`, any op reading a free side op, which keeps its value: the followed plan does
    /// not count it, and the step departs from the plan at that op.
    pub(super) fn read_outside(&mut self, id: NodeId, kept: bool) {
        if let Some(at) = self.position(id) {
            self.read_outside.push(at);
            self.depart |= kept;
            self.free_side_read |= kept;
        }
    }

    /// The bytes the session's live nodes hold now, counted from the values themselves, and
    /// the bound they must keep within (the budget, or the raised bound of NOTE
    /// \[forward-overflow\]). Linear in the session.
    pub(super) fn held_and_bound(&self) -> (u64, u64) {
        let held = self
            .handles
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|n| !n.is_consumed())
            .map(|n| n.budget_bytes_now())
            .sum::<u64>();
        (held, self.raised)
    }

    /// The values the session dropped that a backward step (or a replay) will read: rebuilt
    /// when read.
    pub(super) fn dropped(&self) -> Vec<crate::report_items::DroppedValue> {
        self.handles
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|n| !n.is_consumed())
            .filter_map(|n| {
                n.evicted_bytes()
                    .map(|bytes| crate::report_items::DroppedValue {
                        op: n.name(),
                        bytes,
                    })
            })
            .collect()
    }
}

/// Lists a recorded op's node, id and quietness at the session's next index.
fn push_handle(session: &mut Session, handle: Weak<dyn BudgetNode>, id: NodeId, quiet: bool) {
    // NOTE [gentle-growth] in `planner/grow.rs`.
    grow::push(&mut session.handles, handle);
    debug_assert!(
        session.ids.last().is_none_or(|&last| last < id),
        "remat internal error: a session's ops are recorded in the order of their ids"
    );
    grow::push(&mut session.ids, id);
    grow::push(&mut session.quiet, quiet);
}

/// The process's plan under a budget whose view starts like an op, with its side ops (NOTE
/// \[plans-across-threads\] in `state.rs`).
pub(super) type PlansElsewhere<'a> =
    dyn Fn(&planner::Node, u64) -> Option<(CachedPlan, Arc<[Side]>)> + 'a;

/// Feeds a newly recorded op to a thread's session (`slot`, started if need be) and answers
/// what to carry out on the nodes (NOTE \[budget\]). `memory` holds the plans a new step may
/// follow; on a thread that has run no pass under a budget, `elsewhere` offers the process's
/// plan starting like the step's first op under its budget, with its side ops (NOTE
/// \[plans-across-threads\] in `state.rs`).
///
/// # Errors
/// The budget and the planner's error when values that cannot be rebuilt no longer fit the
/// budget (the session is then dropped).
pub(super) fn record(
    slot: &mut Option<Session>,
    memory: &mut Memory,
    op: OpRecord,
    elsewhere: &PlansElsewhere<'_>,
) -> Result<Answer, (u64, planner::Error)> {
    let OpRecord {
        id,
        handle,
        budget_id,
        facts,
    } = op;
    let OpFacts {
        name,
        bytes,
        cost_ns,
        replayable,
        in_region,
        reads_output,
        fixed_bytes,
        inputs,
        step_reads,
        quiet,
    } = facts;
    let session = slot.get_or_insert_with(|| Session::new(budget_id));
    // A new graph after the ones recorded before were all dropped without backward (an
    // evaluation pass, say): start over now, so that a step starting here finds an empty
    // session and follows its plan. The oldest and the newest node are checked first; the
    // scan stops at the first live node.
    let dead = |h: &Weak<dyn BudgetNode>| h.strong_count() == 0;
    let dropped_before = session.handles.first().is_some_and(dead)
        && session.handles.last().is_some_and(dead)
        && inputs
            .iter()
            .chain(&step_reads)
            .all(|&id| session.position(id).is_none())
        && session.handles.iter().all(dead);
    // A step following its plan is not compacted as it grows: it records the plan's view,
    // whose length bounds it (NOTE [followed-entries] in `entries.rs`).
    let grown = session.handles.len() >= session.compact_at && session.follow.is_none();
    if session.budget_id != budget_id || grown || dropped_before {
        let budget = bytes_of(budget_id);
        if let Err(error) = session.compact(budget_id, None) {
            *slot = None;
            return Err((budget, error));
        }
    }
    let index = session.nodes.len() as u32;
    let forced = (in_region && replayable).then_some(planner::Forced::Recompute);
    // The planner's node of the op: its producers as session positions.
    let entry_of = |session: &Session| {
        let map = |ids: &[NodeId]| -> Vec<u32> {
            ids.iter().filter_map(|&id| session.position(id)).collect()
        };
        let mut reads = map(&step_reads);
        if reads_output {
            reads.push(index);
        }
        planner::Node::new(name, bytes, cost_ns)
            .inputs(map(&inputs))
            .step_reads(reads)
            .replayable(replayable)
            .fixed_bytes(fixed_bytes)
            .forced(forced)
    };
    if index == 0 && session.follow.is_none() {
        // A new step: follow a plan from its first op, if there is one (NOTE [plan-ahead],
        // [next-graph] in `state.rs`).
        let first = entry_of(session);
        session.follow = match memory.plan_to_follow(&first, session.budget) {
            Some(plan) => Some(Follow::new(plan, memory)),
            None if !memory.has_run() => {
                elsewhere(&first, session.budget).map(|(plan, sides)| Follow { plan, sides })
            }
            None => None,
        };
        if let Some(follow) = &session.follow {
            session
                .nodes
                .follow(follow.plan.view.clone(), follow.sides.clone());
        }
    }
    // NOTE [followed-facts]: following a plan, an op recorded where the view has its next
    // node is matched with that node from its facts (as `recorded_as` matches a node: the
    // same structure, its constants at most the view's, its lists renumbered past the side
    // ops) and answered from the plan's actions, without making its planner node, which
    // the followed entries drop anyway (NOTE [followed-entries] in `entries.rs`): two lists
    // and a node an op less on the per-op path of every planned step.
    let depart = std::mem::take(&mut session.depart);
    let fast = session
        .follow
        .as_ref()
        .filter(|_| !depart)
        .and_then(|follow| {
            let v = follow.view_node(index).ok()?;
            let node = follow.plan.view.nodes().get(v as usize)?;
            // The op's list (positions of the session's producers, then `own`) is the
            // node's (view indices).
            let same = |ids: &[NodeId], own: Option<u32>, theirs: &[u32]| {
                let mut ours = ids.iter().filter_map(|&id| session.position(id)).chain(own);
                theirs
                    .iter()
                    .all(|&w| ours.next().is_some_and(|u| follow.view_node(u) == Ok(w)))
                    && ours.next().is_none()
            };
            let matches = name == node.name
                && bytes == node.bytes
                && replayable == node.replayable
                && fixed_bytes <= node.fixed_bytes
                && forced == node.forced
                && same(&inputs, None, &node.inputs)
                && same(&step_reads, reads_output.then_some(index), &node.step_reads);
            if !matches {
                return None;
            }
            follow.plan.index.forward(v as usize)
        });
    if let Some(range) = fast {
        session.nodes.push_view_node(fixed_bytes);
        push_handle(session, handle, id, quiet);
        let follow = session.follow.as_ref().expect("the step follows its plan");
        let actions = follow.plan.schedule.actions()[range]
            .iter()
            .map(|a| a.with_node(follow.position(a.node())));
        return Ok(session.to_apply(actions, index));
    }
    let entry = entry_of(session);
    let side = session
        .follow
        .as_ref()
        .filter(|_| !depart)
        .is_some_and(|follow| follow.expects_side_op(&entry, index));
    if !side && session.follow.take().is_some() && index > 0 {
        // The step departs from the plan: online from here, from the state the plan left
        // (over the budget if it holds more: NOTE [forward-overflow]).
        let held = session.held_now();
        session.go_online(&held);
    }
    let replayable = entry.replayable;
    // NOTE [lent-entries] in `entries.rs`: online, the planner holds the entry.
    let online = if side {
        session.nodes.push(entry);
        None
    } else if session.nodes.lendable() && session.dtr.recorded() == session.nodes.len() {
        session.nodes.push_lent();
        Some(entry)
    } else {
        session.nodes.push(entry.clone());
        Some(entry)
    };
    push_handle(session, handle, id, quiet);
    if side {
        return Ok(Answer::new());
    }
    let entry = online.expect("an op the plan does not cover is planned online");
    match session.dtr.on_compute_forgetting(entry) {
        Ok(actions) => {
            let actions = actions.to_vec();
            Ok(session.to_apply(actions, index))
        }
        Err(error) => {
            // Graphs that died (dropped without backward) may still be counted: forget them
            // and take over the live ones as they stand, the new op included. When none
            // died, the op does not fit: the forward pass goes over the budget (NOTE
            // [forward-overflow]).
            let before = session.handles.len();
            let budget = session.budget;
            if let Err(error) = session.compact(budget_id, None) {
                *slot = None;
                return Err((budget, error));
            }
            // The op's output, when it cannot be rebuilt, is kept as the planner would.
            let newest = session.nodes.len() as u32 - 1;
            let keep_new = !replayable;
            let fits = session.handles.len() < before;
            if !fits {
                session.raise(need_of(&error));
            }
            if !fits || keep_new {
                let mut held = session.held_now();
                if keep_new {
                    held.push(newest);
                }
                session.go_online(&held);
            }
            Ok(if keep_new {
                smallvec::smallvec![Apply::KeepOutput]
            } else {
                Answer::new()
            })
        }
    }
}
