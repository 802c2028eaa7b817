//! [`Policy::Budget`](super::policy::Policy::Budget): the engine's side of the planner.
//!
//! NOTE \[budget\]: the bytes remat holds for a training step recorded under a budget (saved,
//! rebuilt and constant values; leaves are the user's) never pass the budget, in the forward
//! pass or in backward. The planner (`crate::planner`, which never sees a tensor) decides;
//! this module tells it what happens and carries out what it says.
//! - **Forward** (online, DTR): every op recorded under a budget on a thread is fed to that
//!   thread's [`Session`], a [`Dtr`] over the ops recorded so far. The op's inputs that a
//!   step or a replay reads are marked needed (rebuildable ones evicted, the rest kept, as
//!   `require_value` does); the planner's `Keep`s then store the values it keeps (they are
//!   in hand: the op's inputs and output) and its `Free`s evict earlier values. Every input a
//!   replay reads is retained, so any value it kept may be evicted later.
//! - **Backward** (planned before any step runs): the pass builds a
//!   [`GraphView`](crate::planner::GraphView) of the nodes it claimed, as they stand (held
//!   or not, bytes, measured forward times, what each replay and step reads), resumes a
//!   [`Dtr`] on it, and collects the whole pass's actions: a budget the graph cannot fit
//!   panics before any step runs, naming the smallest budget that works. The pass then
//!   carries the actions out: `Replay` rebuilds a value from held inputs, `Free` drops one
//!   (still rebuildable while its op can replay), `Step` runs a backward step whose reads
//!   the schedule holds. The nodes are marked `scheduled`: reads hand out clones and never
//!   free, so a value lives exactly as long as the schedule says. In debug builds (and with
//!   `export_tests`) the held bytes, counted from the values themselves, are checked
//!   against the budget before every op.
//! - **Other live graphs** of the thread recorded under a budget (a second loss whose
//!   backward runs later) hold their values and constants through the pass: it plans within
//!   what they leave of the budget, and when that is too little, their values that can be
//!   rebuilt are dropped first (their own pass rebuilds them). A value that cannot be
//!   rebuilt is never dropped, here or when a smaller budget takes over the session.
//! - After a pass, the view (with measured op times) is kept for [`tradeoff`], and the
//!   thread's session forgets consumed nodes.
//!
//! Recorded nodes are listed by the session in recording order; a backward view orders its
//! nodes by id, which is the recording order (ids are minted as ops are recorded).
//!
//! # Invariants
//! - Neither the session nor a schedule runs user code under a borrow of the session: the
//!   actions are computed under the borrow and carried out after it is released.
//! - The session's memory is bounded by the live graph: nodes that died or were consumed are
//!   dropped from it when it doubles (and after every backward pass).

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;
use smallvec::SmallVec;

use crate::checkpoint::cost;
use crate::checkpoint::policy::Cost;
use crate::graph::{GraphNode, IdBuildHasher, Kept, Node, NodeId, ScheduleEntry, Slot};
use crate::planner::{
    self, Action, CachedPlan, Dtr, GraphView, PlanCache, ScheduleIndex, Tradeoff, same_structure,
};
use crate::stats::KeepReason;

/// The budgets in use, by id (id `i + 1` is `BUDGETS[i]`); a handful per process.
static BUDGETS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The budget of the step recorded last (for [`Stats`](crate::Stats)); 0 before any.
static LAST_BUDGET: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last budget interned on this thread, to skip the lock per recorded op.
    static LAST_INTERNED: core::cell::Cell<(u64, u32)> = const { core::cell::Cell::new((0, 0)) };
    static SESSION: RefCell<Option<Session>> = const { RefCell::new(None) };
    /// The view of the last pass under a budget run on this thread.
    static THREAD_VIEW: RefCell<Option<Arc<GraphView>>> = const { RefCell::new(None) };
    /// What a step under a budget was found to need when it stopped as too small, in its
    /// forward pass or at `backward()` (see [`check_budget`]); 0 once a pass under a budget
    /// completes.
    static FAILED_NEED: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
    /// Plans for the steps this thread ran under a budget, by graph signature.
    static PLANS: RefCell<PlanCache> = RefCell::new(PlanCache::new(PLANS_KEPT));
}

/// How many plans a thread keeps (a training loop has one graph per step; a few more cover
/// evaluation graphs and several losses).
const PLANS_KEPT: usize = 8;

/// A cached plan the thread's current step follows while its ops match the plan's view.
struct Follow {
    plan: CachedPlan,
    index: ScheduleIndex,
}

/// The id of budget `bytes` (never 0).
pub(crate) fn intern(bytes: u64) -> u32 {
    let (last, id) = LAST_INTERNED.with(|c| c.get());
    if id != 0 && last == bytes {
        return id;
    }
    let mut budgets = BUDGETS.lock().unwrap_or_else(|p| p.into_inner());
    let id = match budgets.iter().position(|&b| b == bytes) {
        Some(i) => i as u32 + 1,
        None => {
            budgets.push(bytes);
            budgets.len() as u32
        }
    };
    drop(budgets);
    LAST_INTERNED.with(|c| c.set((bytes, id)));
    id
}

/// The bytes of budget `id`.
fn bytes_of(id: u32) -> u64 {
    BUDGETS.lock().unwrap_or_else(|p| p.into_inner())[id as usize - 1]
}

/// The budget of the step recorded last, if one was.
pub(crate) fn last_budget() -> Option<u64> {
    match LAST_BUDGET.load(Ordering::Relaxed) {
        0 => None,
        bytes => Some(bytes),
    }
}

/// A forward-time estimate of an op's cost (ns) before it is measured: a fixed launch cost
/// plus a rate per output byte by cost class.
pub(crate) fn estimate(cost: Cost, bytes: u64) -> f64 {
    let per_byte = match cost {
        Cost::Alias => 0.0,
        Cost::Cheap | Cost::Random => 0.25,
        Cost::Compute => 2.0,
    };
    200.0 + per_byte * bytes as f64
}

/// The ops recorded under a budget on one thread (see NOTE \[budget\]).
struct Session {
    budget_id: u32,
    budget: u64,
    dtr: Dtr,
    /// Recorded nodes, by session index.
    handles: Vec<Weak<dyn GraphNode>>,
    /// The planner's node of each index (for compaction and measured costs).
    nodes: Vec<planner::Node>,
    ids: Vec<NodeId>,
    index: HashMap<NodeId, u32, IdBuildHasher>,
    /// Compact when this many nodes are listed.
    compact_at: usize,
    /// The cached plan this step follows (planned mode), while its ops match.
    follow: Option<Follow>,
}

impl Session {
    fn new(budget_id: u32) -> Self {
        let budget = bytes_of(budget_id);
        LAST_BUDGET.store(budget, Ordering::Relaxed);
        Self {
            budget_id,
            budget,
            dtr: Dtr::new(budget),
            handles: Vec::new(),
            nodes: Vec::new(),
            ids: Vec::new(),
            index: HashMap::default(),
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
    fn compact(&mut self, budget_id: u32) -> Result<(), planner::Error> {
        let live: Vec<(usize, Arc<dyn GraphNode>)> = self
            .handles
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.upgrade().map(|n| (i, n)))
            .filter(|(_, n)| !n.is_consumed())
            .collect();
        let mut fresh = Session::new(budget_id);
        fresh.compact_at = (2 * live.len()).max(1024);
        if live.is_empty() {
            *self = fresh;
            return Ok(());
        }
        let mut remap = vec![u32::MAX; self.nodes.len()];
        for (new, (old, _)) in live.iter().enumerate() {
            remap[*old] = new as u32;
        }
        let keep = |list: &[u32]| -> Vec<u32> {
            list.iter()
                .map(|&v| remap[v as usize])
                .filter(|&v| v != u32::MAX)
                .collect()
        };
        let mut prefix = Vec::with_capacity(live.len());
        let mut held = Vec::new();
        for (new, (old, node)) in live.iter().enumerate() {
            let mut entry = self.nodes[*old].clone();
            entry.inputs = keep(&entry.inputs);
            entry.step_reads = keep(&entry.step_reads);
            prefix.push(entry);
            if node.is_held() {
                held.push(new as u32);
            }
            fresh.handles.push(Arc::downgrade(node));
            fresh.ids.push(self.ids[*old]);
            fresh.index.insert(self.ids[*old], new as u32);
        }
        fresh.dtr = match Dtr::resume(fresh.budget, prefix.clone(), &held) {
            Ok(dtr) => dtr,
            Err(_) => {
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
                match Dtr::resume(fresh.budget, prefix.clone(), &pinned) {
                    Ok(dtr) => dtr,
                    Err(error) => {
                        *self = Session::new(budget_id);
                        return Err(error);
                    }
                }
            }
        };
        fresh.nodes = prefix;
        // A step following a plan keeps following it when nothing was forgotten (the
        // indices, the plan's node numbers, are unchanged) under the same budget.
        if live.len() == self.handles.len() && budget_id == self.budget_id {
            fresh.follow = self.follow.take();
        }
        *self = fresh;
        Ok(())
    }
}

impl Session {
    /// The planner's forward actions for op `index`, as what to carry out on the nodes.
    fn to_apply(&self, actions: &[Action], index: u32) -> Vec<Apply> {
        actions
            .iter()
            .filter_map(|action| match *action {
                Action::Keep(v) if v == index => Some(Apply::KeepOutput),
                Action::Keep(v) => Some(Apply::KeepInput(self.ids[v as usize])),
                Action::Free(v) => Some(Apply::Evict(self.handles[v as usize].clone())),
                _ => None,
            })
            .collect()
    }
}

/// What an op recorded under a budget reads and produces, before its node exists.
pub(crate) struct Recorded<B: Backend> {
    pub(crate) name: &'static str,
    pub(crate) bytes: u64,
    pub(crate) cost_ns: f64,
    pub(crate) replayable: bool,
    /// Recorded in a checkpoint region: never kept in the forward pass.
    pub(crate) in_region: bool,
    pub(crate) reads_output: bool,
    pub(crate) fixed_bytes: u64,
    /// Producers a replay reads.
    pub(crate) inputs: Vec<NodeId>,
    /// Producers the backward step reads.
    pub(crate) step_reads: Vec<NodeId>,
    /// Producers whose value this op has in hand (they may be kept now).
    pub(crate) in_hand: Vec<(Arc<Node<B>>, FloatTensor<B>)>,
}

/// Makes room, before an op recorded under budget `budget_id` holds `bytes` of constants on
/// its edges (they are counted from then on): the planner's online eviction drops values
/// until they fit. Following a plan, the plan made that room at the previous op.
pub(crate) fn reserve(budget_id: u32, bytes: u64) {
    if bytes == 0 {
        return;
    }
    let victims = SESSION.with(|cell| {
        let mut cell = cell.borrow_mut();
        let session = cell.as_mut()?;
        if session.budget_id != budget_id || session.follow.is_some() {
            return None;
        }
        // When nothing can make room, the op's recording reports it.
        let victims = session.dtr.victims(bytes).ok()?;
        Some(
            victims
                .into_iter()
                .map(|v| session.handles[v as usize].clone())
                .collect::<Vec<_>>(),
        )
    });
    for node in victims.into_iter().flatten() {
        if let Some(node) = node.upgrade() {
            node.scheduled_free();
        }
    }
}

/// What to carry out after the planner answered, outside the session's borrow.
enum Apply {
    KeepOutput,
    KeepInput(NodeId),
    Evict(Weak<dyn GraphNode>),
}

/// Feeds a newly recorded op to this thread's session and carries out the planner's answer
/// (NOTE \[budget\]). `node` was recorded with `output`.
///
/// # Panics
/// When values that cannot be rebuilt no longer fit the budget.
pub(crate) fn on_record<B: Backend>(
    node: &Arc<Node<B>>,
    recorded: Recorded<B>,
    output: &FloatTensor<B>,
) {
    let budget_id = node.placement.budget;
    let id = node.id;
    let handle: Weak<dyn GraphNode> = Arc::downgrade(&(node.clone() as Arc<dyn GraphNode>));
    let Recorded {
        name,
        bytes,
        cost_ns,
        replayable,
        in_region,
        reads_output,
        fixed_bytes,
        inputs,
        step_reads,
        in_hand,
    } = recorded;
    let answer = SESSION.with(|cell| {
        let mut cell = cell.borrow_mut();
        let session = cell.get_or_insert_with(|| Session::new(budget_id));
        // A new graph after the ones recorded before were all dropped without backward (an
        // evaluation pass, say): start over now, so that a step starting here finds an
        // empty session and follows its plan. The oldest and the newest node are checked
        // first; the scan stops at the first live node.
        let dead = |h: &Weak<dyn GraphNode>| h.strong_count() == 0;
        let dropped_before = session.handles.first().is_some_and(dead)
            && session.handles.last().is_some_and(dead)
            && inputs
                .iter()
                .chain(&step_reads)
                .all(|id| !session.index.contains_key(id))
            && session.handles.iter().all(dead);
        if session.budget_id != budget_id
            || session.handles.len() >= session.compact_at
            || dropped_before
        {
            let budget = bytes_of(budget_id);
            if let Err(error) = session.compact(budget_id) {
                *cell = None;
                return Err((budget, error));
            }
        }
        let map = |ids: &[NodeId]| -> Vec<u32> {
            ids.iter()
                .filter_map(|id| session.index.get(id).copied())
                .collect()
        };
        let index = session.nodes.len() as u32;
        let mut reads = map(&step_reads);
        if reads_output {
            reads.push(index);
        }
        let entry = planner::Node::new(name, bytes, cost_ns)
            .inputs(map(&inputs))
            .step_reads(reads)
            .replayable(replayable)
            .fixed_bytes(fixed_bytes)
            .forced((in_region && replayable).then_some(planner::Forced::Recompute));
        if index == 0 && session.follow.is_none() {
            // A new step: follow the plan of the last step run under this budget, if any.
            session.follow = PLANS.with(|plans| {
                let plans = plans.borrow();
                let plan = plans
                    .most_recent_starting_with(session.budget, &entry)?
                    .clone();
                let index = plan.schedule.index();
                Some(Follow { plan, index })
            });
        }
        let planned = session.follow.as_ref().and_then(|follow| {
            let view = &follow.plan.view;
            let same = (index as usize) < view.len() && same_structure(&entry, view.node(index));
            same.then(|| follow.index.forward(index as usize))
                .flatten()
                .map(|range| follow.plan.schedule.actions()[range].to_vec())
        });
        if planned.is_none() && session.follow.take().is_some() && index > 0 {
            // The step departs from the plan: online from here, from the state the plan left.
            let held: Vec<u32> = (0..index)
                .filter(|&v| {
                    session.handles[v as usize]
                        .upgrade()
                        .is_some_and(|n| n.is_held())
                })
                .collect();
            match Dtr::resume(session.budget, session.nodes.clone(), &held) {
                Ok(dtr) => session.dtr = dtr,
                Err(error) => {
                    let budget = session.budget;
                    *cell = None;
                    return Err((budget, error));
                }
            }
        }
        session.nodes.push(entry.clone());
        session.handles.push(handle);
        session.ids.push(id);
        session.index.insert(id, index);
        if let Some(actions) = planned {
            return Ok(session.to_apply(&actions, index));
        }
        match session.dtr.on_compute(entry) {
            Ok(actions) => {
                let actions = actions.to_vec();
                Ok(session.to_apply(&actions, index))
            }
            Err(_) => {
                // Graphs that died (dropped without backward) may still be counted: forget
                // them and take over the live ones as they stand, the new op included.
                let budget = session.budget;
                match session.compact(budget_id) {
                    Ok(()) => Ok(Vec::new()),
                    Err(error) => {
                        *cell = None;
                        Err((budget, error))
                    }
                }
            }
        }
    });
    let actions = match answer {
        Ok(actions) => actions,
        Err((budget, error)) => too_small(budget, &error, Some(name)),
    };
    // In the planner's order (a plan may keep a value and drop it again before the next op
    // to make room for that op's constants).
    for action in actions {
        match action {
            Apply::KeepOutput => keep(node, output),
            Apply::KeepInput(producer) => {
                if let Some((node, value)) = in_hand.iter().find(|(n, _)| n.id == producer) {
                    keep(node, value);
                }
            }
            Apply::Evict(node) => {
                if let Some(node) = node.upgrade() {
                    node.scheduled_free();
                }
            }
        }
    }
    if cfg!(any(debug_assertions, feature = "export_tests")) {
        check_forward(budget_id);
    }
}

/// Test and debug builds: the bytes the thread's session holds now, counted from the values
/// themselves, are within the budget (for sessions of up to 4096 ops: the count is linear).
fn check_forward(budget_id: u32) {
    let held = SESSION.with(|cell| {
        let cell = cell.borrow();
        let session = cell.as_ref()?;
        (session.handles.len() <= 4096 && session.budget_id == budget_id).then(|| {
            session
                .handles
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|n| !n.is_consumed())
                .map(|n| n.budget_bytes_now())
                .sum::<u64>()
        })
    });
    let budget = bytes_of(budget_id);
    if let Some(held) = held {
        assert!(
            held <= budget,
            "remat internal error: the forward pass holds {held} bytes under a budget of {budget}"
        );
    }
}

/// The values this thread's budget dropped that a backward step (or a replay) will read:
/// rebuilt when read.
pub(crate) fn dropped() -> Vec<crate::stats::DroppedValue> {
    SESSION.with(|cell| {
        let cell = cell.borrow();
        let Some(session) = cell.as_ref() else {
            return Vec::new();
        };
        session
            .handles
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|n| !n.is_consumed())
            .filter_map(|n| {
                n.evicted_bytes().map(|bytes| crate::stats::DroppedValue {
                    op: n.name(),
                    bytes,
                })
            })
            .collect()
    })
}

/// Stores `value` in `node`'s slot unless it is stored (a value the planner keeps before
/// its first reader is recorded is not marked needed yet).
fn keep<B: Backend>(node: &Node<B>, value: &FloatTensor<B>) {
    let mut state = node.lock();
    if !matches!(state.slot, Slot::Stored(_)) {
        let reason = if node.placement.leaf_view {
            KeepReason::Leaf
        } else {
            KeepReason::Saved
        };
        state.slot = Slot::Stored(Kept::new(value.clone(), reason, node.name));
    }
}

/// The user-facing panic for a budget the graph cannot fit.
fn too_small(budget: u64, error: &planner::Error, op: Option<&str>) -> ! {
    let (min, lower) = match error {
        planner::Error::Infeasible {
            min_budget_bytes,
            lower_bound,
            ..
        } => (*min_budget_bytes, *lower_bound),
        other => panic!("remat internal error: the budget's planner refused a step: {other}"),
    };
    let at = op.map_or(String::new(), |op| {
        format!(" (at op `{op}`, in the forward pass)")
    });
    FAILED_NEED.with(|need| need.set(need.get().max(min)));
    if lower {
        // The rest of the forward pass is not recorded yet: `min` may not be enough.
        panic!(
            "remat: Policy::Budget({budget}) is too small for this training step{at}: the \
             values that cannot be rebuilt and the op running need at least {min} bytes ({}) \
             so far, and the rest of the forward pass is not recorded yet. To find the \
             smallest budget that works, run one step under Policy::Budget(u64::MAX) (it \
             keeps what SaveAll keeps) and print remat::tradeoff(): its first row is the \
             smallest budget (`min_budget_bytes`), each row with its extra compute. The \
             least to try: remat::Policy::Budget({min}).",
            crate::stats::format_bytes(min)
        )
    }
    panic!(
        "remat: Policy::Budget({budget}) is too small for this training step{at}: it needs \
         (the smallest budget the planner guarantees) {min} bytes ({}). Set a larger budget, \
         e.g. remat::set_policy(remat::Policy::Budget({min})), or print remat::tradeoff() \
         after one step under a larger budget to choose one.",
        crate::stats::format_bytes(min)
    )
}

/// The budget of a backward pass: the smallest of the budgets its nodes were recorded
/// under; `None` when no node was recorded under one.
pub(crate) fn pass_budget(order: &[Arc<dyn GraphNode>]) -> Option<u64> {
    order
        .iter()
        .map(|n| n.budget())
        .filter(|&b| b != 0)
        .map(bytes_of)
        .min()
}

/// Replaces each measured op time by the mean over the ops of the same name and output size:
/// one op's time is noisy (a few hundred nanoseconds of timer and cache effects), and equal
/// ops planned with unequal costs lose the structure the planner exploits (Revolve's optimum
/// for a chain of equal ops). Where replays of such a kind were timed, their median is its
/// cost instead (NOTE [replay-times] in `cost.rs`), when the pass ran on one inner backend
/// (`backend`; a pass spanning backends keeps the means). Idempotent.
fn smooth_costs(nodes: &mut [planner::Node], backend: Option<TypeId>) {
    let mut sums: HashMap<(&'static str, u64), (f64, u32)> = HashMap::new();
    for node in nodes.iter() {
        let entry = sums.entry((node.name, node.bytes)).or_insert((0.0, 0));
        entry.0 += node.cost;
        entry.1 += 1;
    }
    let costs: HashMap<(&'static str, u64), f64> = sums
        .into_iter()
        .map(|((name, bytes), (sum, n))| {
            let replayed = backend.and_then(|b| cost::replay_time((b, name, bytes)));
            let cost = replayed.unwrap_or(sum / f64::from(n));
            ((name, bytes), cost)
        })
        .collect();
    for node in nodes.iter_mut() {
        node.cost = costs[&(node.name, node.bytes)];
    }
}

/// The replay time of `actions`' `Replay`s, at the nodes' costs.
fn replay_cost(nodes: &[planner::Node], actions: &[Action]) -> f64 {
    actions
        .iter()
        .filter_map(|a| match *a {
            Action::Replay(v) => Some(nodes[v as usize].cost),
            _ => None,
        })
        .sum()
}

/// The last backward pass's view under a budget, for [`tradeoff`].
static LAST_VIEW: Mutex<Option<Arc<GraphView>>> = Mutex::new(None);

/// A backward pass planned and run under `budget` (NOTE \[budget\]): returns, for each node
/// of `order`, the actions to carry out before finishing it (in `order`'s order; empty for
/// leaves), the bytes held when the pass starts, the budget the pass runs within, and the
/// pass's view, for [`after_pass`].
///
/// # Panics
/// When the graph cannot fit the budget, before anything ran.
pub(crate) fn plan_pass(
    order: &[Arc<dyn GraphNode>],
    budget: u64,
) -> (Vec<Vec<Action>>, u64, u64, Pending) {
    let full_budget = budget;
    let entries: Vec<(usize, ScheduleEntry)> = order
        .iter()
        .enumerate()
        .filter_map(|(pos, n)| n.schedule_entry().map(|e| (pos, e)))
        .collect();
    let mut by_id: Vec<usize> = (0..entries.len()).collect();
    by_id.sort_unstable_by_key(|&k| entries[k].1.id);
    let mut index: HashMap<NodeId, u32, IdBuildHasher> = HashMap::default();
    for (i, &k) in by_id.iter().enumerate() {
        index.insert(entries[k].1.id, i as u32);
    }
    let measured = |id: NodeId| -> Option<f64> {
        SESSION.with(|cell| {
            let cell = cell.borrow();
            let session = cell.as_ref()?;
            let i = *session.index.get(&id)?;
            Some(session.nodes[i as usize].cost)
        })
    };
    let to_index = |ids: &[NodeId]| -> Vec<u32> {
        ids.iter()
            .map(|id| {
                *index.get(id).unwrap_or_else(|| {
                    panic!("remat internal error: a producer of a pass is not in the pass")
                })
            })
            .collect()
    };
    let mut nodes: Vec<planner::Node> = Vec::with_capacity(by_id.len());
    let mut held = Vec::new();
    let mut held_bytes = 0;
    for (i, &k) in by_id.iter().enumerate() {
        let e = &entries[k].1;
        let mut reads = to_index(&e.step_reads);
        if e.reads_output {
            reads.push(i as u32);
        }
        let cost = measured(e.id).unwrap_or_else(|| estimate(e.cost, e.bytes));
        nodes.push(
            planner::Node::new(e.name, e.bytes, cost)
                .inputs(to_index(&e.inputs))
                .step_reads(reads)
                .replayable(e.replayable)
                .fixed_bytes(e.fixed_bytes),
        );
        if e.held {
            held.push(i as u32);
            held_bytes += e.bytes;
        }
        held_bytes += e.fixed_bytes;
    }
    let step_order: Vec<u32> = entries.iter().map(|(_, e)| index[&e.id]).collect();
    // When this thread's session recorded exactly the pass's ops, its nodes are the view:
    // they carry the forward pass's measured times and marks, and match the plan the step
    // may have followed (the pass's own description agrees with them on everything else).
    // When it recorded the pass's first ops and the rest came under another policy (a
    // forward pass under `with_policy(Budget(..))` and the loss outside it, say), the plan
    // the step followed still applies: its view was this pass's, and the signature and the
    // held values are checked below.
    let (session_view, follow) = SESSION.with(|cell| {
        let mut cell = cell.borrow_mut();
        let Some(session) = cell.as_mut() else {
            return (None, None);
        };
        let prefix = session.ids.len() <= by_id.len()
            && by_id
                .iter()
                .zip(&session.ids)
                .all(|(&k, id)| entries[k].1.id == *id);
        let aligned = prefix && session.ids.len() == by_id.len();
        let follow = session.follow.take();
        (
            aligned.then(|| session.nodes.clone()),
            follow.filter(|_| prefix),
        )
    });
    if let Some(session_nodes) = session_view {
        nodes = session_nodes;
    }
    // The pass's inner backend, when it has one (a graph may span backends: NOTE
    // [op-times] in `cost.rs`, replay times are per backend).
    let mut backends = order.iter().map(|n| n.backend());
    let first = backends.next();
    let backend = first.filter(|&b| backends.all(|other| other == b));
    smooth_costs(&mut nodes, backend);
    let view = GraphView::with_step_order(nodes.clone(), step_order.clone()).unwrap_or_else(|e| {
        panic!("remat internal error: a backward pass gave the planner an invalid view: {e}")
    });
    // Held values that no step and no replay of this pass reads (kept for a graph that was
    // dropped, say) are dropped now, as every pass drops unneeded backups.
    let mut read = vec![false; nodes.len()];
    for node in &nodes {
        for &v in &node.step_reads {
            read[v as usize] = true;
        }
        if node.replayable {
            for &v in &node.inputs {
                read[v as usize] = true;
            }
        }
    }
    held.retain(|&v| {
        if read[v as usize] {
            return true;
        }
        held_bytes -= order[entries[by_id[v as usize]].0].scheduled_free();
        false
    });
    // Other graphs of this thread recorded under a budget and still alive (a second loss
    // whose backward runs later, say) hold bytes the whole time: the pass plans within what
    // they leave. When that is too little, the values of theirs that can be rebuilt go
    // first (their own passes rebuild them).
    let attempt_within = |budget: u64, held: &[u32], limit: f64| {
        attempt_plan(
            &nodes,
            &step_order,
            &entries,
            order.len(),
            budget,
            held,
            limit,
        )
    };
    let attempt_under = |budget: u64, held: &[u32]| -> Result<Vec<Vec<Action>>, planner::Error> {
        let plan = attempt_within(budget, held, f64::INFINITY)?;
        Ok(plan.expect("a plan without a limit is never abandoned"))
    };
    let mut outside = outside_bytes(&index, false);
    let mut room = budget.saturating_sub(outside);
    // The online plan within what they leave, made once: it also says whether that is enough.
    let mut within_outside = None;
    if outside > 0 {
        match attempt_under(room, &held) {
            Ok(per_node) => within_outside = Some(per_node),
            Err(_) => {
                outside = outside_bytes(&index, true);
                room = budget.saturating_sub(outside);
            }
        }
    }
    let budget = room;
    let attempt = |held: &[u32]| attempt_under(budget, held);
    let signature = planner::signature(&view);
    // Planned mode: the step followed a cached plan for this very graph through its forward
    // pass, and holds what the plan holds: carry out the plan's backward.
    let followed = follow
        .filter(|f| {
            f.plan.signature == signature && f.plan.budget_bytes == full_budget && outside == 0
        })
        .and_then(|f| {
            let start = f.index.backward(0)?.start;
            let mut expected: Vec<u32> = Vec::new();
            for action in &f.plan.schedule.actions()[..start] {
                match *action {
                    Action::Keep(v) => expected.push(v),
                    Action::Free(v) => expected.retain(|&x| x != v),
                    _ => {}
                }
            }
            expected.sort_unstable();
            expected.dedup();
            let mut now = held.clone();
            now.sort_unstable();
            (expected == now).then_some(f)
        })
        .map(|f| {
            backward_chunks(
                f.plan.schedule.actions(),
                &f.index,
                &entries,
                order.len(),
                false,
            )
        });
    let online = |held: &[u32]| -> Result<Vec<Vec<Action>>, planner::Error> {
        // NOTE [resume-chain] in `planner/revolve.rs`: on a chain, Revolve per segment from
        // this state; the online plan is abandoned once it replays more.
        // NOTE [rotor] in `planner/rotor.rs`: on a long chain of blocks, the chain's DP from
        // this state with the held values dropped, when it replays less (on a short one the
        // online plan is near it, and the DP's tables would be planner memory held beside
        // every kept value: `memory.rs`, `a_budget_bounds_what_the_allocator_sees`).
        let resumed = planner::revolve::resume(&view, held, budget);
        let chain = (view.len() > planner::rotor::LONG_CHAIN)
            .then(|| planner::rotor::resume(&view, held, budget))
            .flatten();
        let resumed = match (resumed, chain) {
            (Some(r), Some(c)) => Some(if c.1 < r.1 { c } else { r }),
            (r, c) => r.or(c),
        };
        let limit = resumed.as_ref().map_or(f64::INFINITY, |(_, cost)| *cost);
        let attempt = match within_outside {
            // Made above for this state and this budget, without a limit.
            Some(per_node) => {
                let replayed: f64 = per_node.iter().map(|a| replay_cost(&nodes, a)).sum();
                Ok((replayed <= limit).then_some(per_node))
            }
            None => attempt_within(budget, held, limit),
        };
        let schedule = match (attempt, resumed) {
            (Ok(Some(per_node)), _) => return Ok(per_node),
            (Err(error), None) => return Err(error),
            (Ok(None), None) => unreachable!("only a limit abandons a plan"),
            (_, Some((schedule, _))) => schedule,
        };
        let index = schedule.index();
        Ok(backward_chunks(
            schedule.actions(),
            &index,
            &entries,
            order.len(),
            true,
        ))
    };
    let mut per_node = match followed.map_or_else(|| online(&held), Ok) {
        Ok(per_node) => per_node,
        Err(_) => {
            // The forward pass left a state the backward pass cannot continue from within
            // the budget: drop every value that can be rebuilt (the lean state, from which
            // any budget at or above the planner's smallest one works) and plan again.
            let mut pinned = Vec::new();
            for &v in &held {
                let (pos, entry) = &entries[by_id[v as usize]];
                if entry.replayable {
                    held_bytes -= order[*pos].scheduled_free();
                } else {
                    pinned.push(v);
                }
            }
            let chain = || {
                // A chain of blocks from the lean state (NOTE [rotor]): its smallest budget
                // does not grow with the chain's length, the online eviction's does.
                let (schedule, _) = planner::rotor::resume(&view, &pinned, budget)?;
                let index = schedule.index();
                Some(backward_chunks(
                    schedule.actions(),
                    &index,
                    &entries,
                    order.len(),
                    true,
                ))
            };
            attempt(&pinned)
                .or_else(|e| chain().ok_or(e))
                .unwrap_or_else(|_| {
                    // Name a budget this engine runs from the lean state: the planner's smallest
                    // (a guarantee for its own schedules) if that works, else the smallest that
                    // does, by bisection (planning only: nothing runs).
                    let works = |b: u64| {
                        attempt_under(b, &pinned).is_ok()
                            || planner::rotor::resume(&view, &pinned, b).is_some()
                    };
                    let mut low = planner::smallest_budget(&view).max(budget);
                    let mut high = view
                        .nodes()
                        .iter()
                        .map(|n| n.bytes + n.fixed_bytes)
                        .sum::<u64>()
                        .max(low);
                    if works(low) {
                        high = low;
                    } else {
                        while high - low > 1 {
                            let mid = low.midpoint(high);
                            if works(mid) {
                                high = mid;
                            } else {
                                low = mid;
                            }
                        }
                    }
                    too_small(
                        full_budget,
                        &planner::Error::Infeasible {
                            budget_bytes: full_budget,
                            min_budget_bytes: high + outside,
                            lower_bound: false,
                        },
                        None,
                    )
                })
        }
    };
    // Map view indices back to positions in `order`.
    let position: Vec<usize> = by_id.iter().map(|&k| entries[k].0).collect();
    for actions in &mut per_node {
        for action in actions.iter_mut() {
            *action = match *action {
                Action::Replay(v) => Action::Replay(position[v as usize] as u32),
                Action::Free(v) => Action::Free(position[v as usize] as u32),
                Action::Step(v) => Action::Step(position[v as usize] as u32),
                Action::Keep(v) => Action::Keep(position[v as usize] as u32),
                Action::Compute(v) => Action::Compute(position[v as usize] as u32),
            };
        }
    }
    LAST_BUDGET.store(full_budget, Ordering::Relaxed);
    // Plan the next steps of this graph once (planned mode; they follow the plan from their
    // first op), after this pass: its replays are timed by then (NOTE [replay-times]).
    let cached = PLANS.with(|plans| plans.borrow_mut().get(signature, full_budget).is_some());
    let pending = Pending {
        view,
        backend,
        budget: full_budget,
        plan: !cached,
        samples: cost::replay_samples(),
    };
    (per_node, held_bytes, budget, pending)
}

/// A pass's view, kept by the pass until it ends ([`after_pass`]): then it is planned for
/// the next steps (when `plan`) and kept for [`tradeoff`]; its costs are brought up to date
/// first if the pass timed replays (`cost::replay_samples` passed `samples`). The pass owns
/// it: a backward pass run inside another one (in a custom op's backward, say) has its own.
pub(crate) struct Pending {
    view: GraphView,
    /// The pass's inner backend, when it ran on one.
    backend: Option<TypeId>,
    budget: u64,
    plan: bool,
    samples: u64,
}

/// A whole-step schedule's backward cut into the pass's per-node chunks: the actions before
/// and at each step, at the step's position in the order (`entries`, `len` positions). With
/// `forward_ran`, the drops right after the last forward op are the backward's (a schedule
/// made after that forward pass ran, which carried out only its keeps).
fn backward_chunks(
    actions: &[Action],
    index: &ScheduleIndex,
    entries: &[(usize, ScheduleEntry)],
    len: usize,
    forward_ran: bool,
) -> Vec<Vec<Action>> {
    let mut chunks: Vec<Vec<Action>> = vec![Vec::new(); len];
    for (p, (pos, _)) in entries.iter().enumerate() {
        if let Some(mut range) = index.backward(p) {
            if p == 0 && forward_ran {
                let last = actions
                    .iter()
                    .rposition(|a| matches!(a, Action::Compute(_)));
                range.start = last.map_or(0, |k| k + 1);
                while matches!(actions.get(range.start), Some(Action::Keep(_))) {
                    range.start += 1;
                }
            }
            chunks[*pos] = actions[range].to_vec();
        }
    }
    chunks
}

/// The planner's actions for a pass (see [`plan_pass`]): for each position of the order
/// (`len` of them), what to carry out before finishing that node; abandoned (`Ok(None)`)
/// once its replays cost more than `limit`.
fn attempt_plan(
    nodes: &[planner::Node],
    step_order: &[u32],
    entries: &[(usize, ScheduleEntry)],
    len: usize,
    budget: u64,
    held: &[u32],
    limit: f64,
) -> Result<Option<Vec<Vec<Action>>>, planner::Error> {
    let mut dtr = Dtr::resume(budget, nodes.to_vec(), held)?;
    let mut per_node: Vec<Vec<Action>> = vec![Vec::new(); len];
    let mut pending = dtr.begin_backward(step_order.to_vec())?.to_vec();
    let mut replayed = 0.0;
    for (pos, _) in entries {
        pending.extend_from_slice(dtr.on_step()?);
        replayed += replay_cost(nodes, &pending);
        if replayed > limit {
            return Ok(None);
        }
        per_node[*pos] = core::mem::take(&mut pending);
    }
    Ok(Some(per_node))
}

/// The bytes held by this thread's live graphs recorded under a budget, outside the pass
/// whose nodes `in_pass` indexes: values held and the constants of nodes not yet stepped.
/// With `evict`, the values among them that can be rebuilt are dropped first.
fn outside_bytes(in_pass: &HashMap<NodeId, u32, IdBuildHasher>, evict: bool) -> u64 {
    let outside: Vec<(Arc<dyn GraphNode>, u64, u64, bool)> = SESSION.with(|cell| {
        let cell = cell.borrow();
        let Some(session) = cell.as_ref() else {
            return Vec::new();
        };
        session
            .handles
            .iter()
            .zip(&session.ids)
            .zip(&session.nodes)
            .filter(|((_, id), _)| !in_pass.contains_key(*id))
            .filter_map(|((handle, _), entry)| {
                let node = handle.upgrade()?;
                (!node.is_consumed()).then_some((
                    node,
                    entry.bytes,
                    entry.fixed_bytes,
                    entry.replayable,
                ))
            })
            .collect()
    });
    // Dropping values runs no user code, but not under the session's borrow either.
    outside
        .iter()
        .map(|(node, bytes, fixed, replayable)| {
            if evict && *replayable {
                node.scheduled_free();
            }
            fixed + if node.is_held() { *bytes } else { 0 }
        })
        .sum()
}

/// Carries out one node's actions (positions in `order`; see [`plan_pass`]); `held` counts
/// the bytes the schedule holds, checked against `budget` before every op in debug builds.
pub(crate) fn carry_out(
    order: &[Option<Arc<dyn GraphNode>>],
    actions: &[Action],
    grads: &mut crate::grads::Gradients,
    held: &mut u64,
    budget: u64,
) {
    let node = |v: u32| {
        order[v as usize].as_ref().unwrap_or_else(|| {
            panic!("remat internal error: the budget's schedule refers to a finished node")
        })
    };
    let check = |held: u64| {
        assert!(
            !cfg!(any(debug_assertions, feature = "export_tests")) || held <= budget,
            "remat internal error: a budget's schedule holds {held} bytes, over the budget of \
             {budget}"
        );
    };
    let mut k = 0;
    while k < actions.len() {
        let action = actions[k];
        k += 1;
        if action.is_op() {
            // The inputs the previous op was the last to read have left (the planner's one
            // exception is the op running).
            check(*held);
        }
        let frees = actions[k..]
            .iter()
            .take_while(|a| matches!(a, Action::Free(_)))
            .count();
        let frees = &actions[k..k + frees];
        match action {
            Action::Replay(v) => {
                // The `Free`s right after a replay are the values it read last: they leave
                // before its output arrives, as the planner counts them; the replay's last
                // read of each takes it (NOTE [hand-over] in `graph/node.rs`: the op owns
                // it and may work in place, as in the forward pass). (A `Free` of the
                // replayed value itself comes after it is stored.)
                let replaying = node(v);
                let handed = hand_over(frees, |a| {
                    let u = node(a);
                    let reads = if a == v {
                        0
                    } else {
                        replaying.replay_reads_of(u.id())
                    };
                    (u, reads)
                });
                let mut freed = 0;
                // NOTE [replay-times] in `cost.rs`: the first replays of each kind are timed.
                let kind = (
                    replaying.backend(),
                    replaying.name(),
                    replaying.evicted_bytes().unwrap_or(0),
                );
                let synced = cost::replay_wanted(kind);
                let (bytes, ns) = replaying.scheduled_replay(
                    &mut || {
                        for (a, handed) in frees.iter().zip(&handed).filter(|(a, _)| a.node() != v)
                        {
                            freed += node(a.node()).scheduled_free().max(*handed);
                        }
                    },
                    synced,
                );
                if synced && let Some(ns) = ns {
                    cost::record_replay(kind, ns);
                }
                if frees.iter().any(|a| a.node() == v) {
                    freed += node(v).scheduled_free();
                }
                *held = (*held + bytes).saturating_sub(freed);
                k += frees.len();
            }
            Action::Free(v) => *held = held.saturating_sub(node(v).scheduled_free()),
            Action::Step(v) => {
                // NOTE [hand-over] in `graph/node.rs`: the values the step reads last leave
                // at their last read (the step owns them); the `Free`s that follow count
                // them out.
                let stepping = node(v);
                let handed = hand_over(frees, |a| {
                    let u = node(a);
                    (u, stepping.step_reads_of(u.id()))
                });
                *held = held.saturating_sub(stepping.scheduled_step(grads));
                for (a, handed) in frees.iter().zip(handed) {
                    let freed = node(a.node()).scheduled_free();
                    *held = held.saturating_sub(freed.max(handed));
                }
                k += frees.len();
            }
            Action::Keep(_) | Action::Compute(_) => {}
        }
    }
    check(*held);
}

/// NOTE [hand-over] in `graph/node.rs`: `frees` follow an op (a step or a replay); `reads`
/// gives each freed value's node and how many times the op reads it. The op's last read of
/// each value it reads takes it; returns the bytes each value hands over (0 where the op
/// does not read it), for the held count.
fn hand_over<'n>(
    frees: &[Action],
    reads: impl Fn(u32) -> (&'n Arc<dyn GraphNode>, u32),
) -> SmallVec<[u64; 4]> {
    frees
        .iter()
        .map(|a| match reads(a.node()) {
            (_, 0) => 0,
            (u, reads) => u.scheduled_hand_over(reads),
        })
        .collect()
}

/// After a backward pass: its graph is planned for the next steps and its view kept for
/// [`tradeoff`] (`pending`), and the thread's session forgets consumed nodes.
///
/// A pass that panicked midway (a custom op's backward, say) passes `completed: false`: its
/// view is still kept for [`tradeoff`], but nothing is planned (the planner does not run
/// while a panic unwinds; the next pass plans the graph).
pub(crate) fn after_pass(pending: Pending, completed: bool) {
    {
        let view = if cost::replay_samples() == pending.samples {
            pending.view
        } else {
            let mut nodes = pending.view.nodes().to_vec();
            smooth_costs(&mut nodes, pending.backend);
            GraphView::with_step_order(nodes, pending.view.step_order().to_vec())
                .unwrap_or(pending.view)
        };
        if completed
            && pending.plan
            && let Ok(schedule) = planner::plan(&view, pending.budget)
        {
            PLANS.with(|plans| {
                plans
                    .borrow_mut()
                    .insert(view.clone(), pending.budget, schedule)
            });
        }
        let view = Arc::new(view);
        THREAD_VIEW.with(|v| *v.borrow_mut() = Some(view.clone()));
        *LAST_VIEW.lock().unwrap_or_else(|p| p.into_inner()) = Some(view);
    }
    if !completed {
        return;
    }
    FAILED_NEED.with(|need| need.set(0));
    SESSION.with(|cell| {
        let mut cell = cell.borrow_mut();
        if let Some(session) = cell.as_mut() {
            let budget_id = session.budget_id;
            if session.compact(budget_id).is_err() {
                // Live graphs of this thread pass the budget: the next op recorded under it
                // reports it.
                *cell = None;
            }
        }
    });
}

/// The trade-off between budget and extra compute for the last training step run under a
/// [`Policy::Budget`](super::policy::Policy::Budget), predicted by the planner from the
/// recorded graph and the op times measured in its forward pass; `Display` prints a table
/// (budget, predicted peak, predicted extra compute and replays). `None` before any such
/// step. The step is the last one this thread ran backward on under a budget, else the last
/// one in the process (a training loop's worker thread, say).
///
/// To pick a budget for a model: run one step under `Policy::Budget(u64::MAX)` (which keeps
/// what [`Policy::SaveAll`](super::policy::Policy::SaveAll) keeps), print this, and set the
/// budget whose extra compute you accept.
pub fn tradeoff() -> Option<Tradeoff> {
    last_view().map(planner::tradeoff_shared)
}

/// The view of the last step run under a budget (see [`tradeoff`]).
fn last_view() -> Option<Arc<GraphView>> {
    THREAD_VIEW
        .with(|v| v.borrow().clone())
        .or_else(|| LAST_VIEW.lock().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Why [`check_budget`] refused a budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetError {
    /// No training step has run backward under a [`Policy::Budget`] yet, so there is no
    /// graph to check against: run one step under `Policy::Budget(u64::MAX)` (it keeps what
    /// [`Policy::SaveAll`](super::policy::Policy::SaveAll) keeps) first.
    ///
    /// [`Policy::Budget`]: super::policy::Policy::Budget
    NoStep,
    /// The budget is below the smallest one the planner guarantees for that step.
    TooSmall {
        /// The budget asked about.
        budget_bytes: u64,
        /// The smallest budget that fits the step: the first row of [`tradeoff`], or more
        /// when a step stopped as too small needed more (see [`check_budget`]).
        min_budget_bytes: u64,
    },
}

impl std::fmt::Display for BudgetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoStep => write!(
                f,
                "no training step has run under a Policy::Budget yet: run one under \
                 Policy::Budget(u64::MAX) (it keeps what SaveAll keeps), then check a budget"
            ),
            Self::TooSmall {
                budget_bytes,
                min_budget_bytes,
            } => write!(
                f,
                "Policy::Budget({budget_bytes}) is too small for the last training step: the \
                 smallest budget it fits is {min_budget_bytes} bytes ({})",
                crate::stats::format_bytes(*min_budget_bytes)
            ),
        }
    }
}

impl std::error::Error for BudgetError {}

/// Whether `Policy::Budget(budget_bytes)` fits the last training step run under a budget
/// (the step [`tradeoff`] reports on), without running it: `Ok` when the planner guarantees
/// a schedule within it, so a step of the same graph under it will not panic as too small.
///
/// This is the fallible form of the check `backward()` makes (whose signature is Burn's, so
/// it can only panic). It costs what finding the smallest budget costs (one lean schedule,
/// and the chain's when the graph is one), not the whole trade-off table.
///
/// The step's graph is what its backward pass reached. A forward pass may also hold values
/// of side computations that backward never reads (dropped before it), and a program may
/// run several graphs a step (gradient accumulation, a second loss), the last not the
/// largest: when a step under a budget stopped as too small (in its forward pass, or at
/// `backward()` on another graph), what it was found to need counts too, until a pass under
/// a budget completes.
///
/// # Errors
/// [`BudgetError::NoStep`] before any step under a budget; [`BudgetError::TooSmall`], with
/// the smallest budget that fits, when `budget_bytes` is below it.
///
/// ```
/// use burn_flex::Flex;
/// use burn_backend::{Backend, TensorData, ops::FloatTensorOps};
/// use remat::{Autodiff, BudgetError, Policy, check_budget, with_policy};
/// type B = Autodiff<Flex>;
///
/// let step = || {
///     let x = B::float_from_data(TensorData::from([1.0f32, 2.0, 3.0]), &Default::default());
///     let x = B::float_set_require_grad(x, true);
///     let y = B::float_exp(B::float_sin(B::float_exp(x)));
///     B::float_sum(y).backward()
/// };
/// with_policy(Policy::Budget(u64::MAX), step);
/// let budget = match check_budget(1) {
///     Ok(()) => 1,
///     Err(BudgetError::TooSmall { min_budget_bytes, .. }) => min_budget_bytes,
///     Err(e) => panic!("{e}"),
/// };
/// assert_eq!(check_budget(budget), Ok(()));
/// with_policy(Policy::Budget(budget), step);
/// ```
pub fn check_budget(budget_bytes: u64) -> Result<(), BudgetError> {
    let failed = FAILED_NEED.with(core::cell::Cell::get);
    let graph = match last_view() {
        Some(view) => planner::smallest_budget(&view),
        None if failed > 0 => 0,
        None => return Err(BudgetError::NoStep),
    };
    let min_budget_bytes = graph.max(failed);
    if budget_bytes >= min_budget_bytes {
        Ok(())
    } else {
        Err(BudgetError::TooSmall {
            budget_bytes,
            min_budget_bytes,
        })
    }
}
