//! The state the budget's files share: the interned budgets, what a thread remembers of
//! the steps it ran ([`Memory`]: its plans, the graph it ran last and the one after each,
//! side ops; NOTE \[plan-ahead\], \[next-graph\]), what the process remembers for
//! reports, and the cost estimate of an op not measured yet. Names none of its sibling
//! files.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::checkpoint::policy::Cost;
use crate::planner::{self, CachedPlan, GradProfile, GraphView, PlanCache, recorded_as};

/// The budgets in use, by id (id `i + 1` is `BUDGETS[i]`); a handful per process.
static BUDGETS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The budget of the step recorded last (for [`Stats`](crate::Stats)); 0 before any.
pub(super) static LAST_BUDGET: AtomicU64 = AtomicU64::new(0);

// NOTE [plan-ahead]: the first step under a budget used to run its forward pass online
// (DTR), even where the thread had run the same graph under another budget: online eviction
// needs more than a plan does, so the smallest budget `tradeoff()` names after a step under
// `Budget(u64::MAX)` stopped in the forward pass (Burn's `Lstm`, 128 steps: 560 KiB named,
// the forward pass stopped under it). A step starts from the graph the thread ran last when
// its first op matches (its plan under this budget, or else a plan made now from its view,
// cached and followed), then from the most recent plan under this budget whose first op
// matches, then from the most recent cached view whose first op matches (planned now). The
// smallest budget `tradeoff()` names then runs (`tests/recurrent.rs`,
// `the_smallest_budget_tradeoff_names_runs`), and the first step under a budget replays
// what its plan predicts (`tests/chains.rs`). The graph that ran last comes first: a
// 1,000-block chain run after a 100-block one under the same budget followed the short
// chain's plan and departed from it at its 500th op. A step that departs from the view
// continues online, as with any plan.
//
// NOTE [next-graph]: a loop that alternates graphs starting with the same op (a GAN's two
// steps, two losses trained in turn, Burn's `Lstm` and `Gru` on one input) followed the
// other graph's plan at every step, the graph that ran last coming first: each step
// departed from it (Burn's `Gru` with the loss on every output, alternating with the one on
// its last output: 8,082 replays a step where its own plan replays 1,763; the `Lstm` on
// every output held 1.17x the budget at every step). The thread notes, for each graph, the
// one that ran right after it the last time, and a step starts from that graph's plan when
// its first op matches (planned under this budget if need be); from nothing (online) when
// that graph has no cached plan (a view not planned, NOTE [side-view], or one the cache
// dropped); else as above. A loop of one graph, and one that changes budget, have that
// graph after itself, as before; a step that stopped as too small has itself after it (it
// is retried).
//
// NOTE [stopped-view]: a step that stops at `backward()` as too small is the graph the
// thread ran last all the same, so the step after it plans ahead from its own graph. It was
// not: a thread that ran Burn's `Gru` with the loss on its last output and then the same
// `Gru` with the loss on every output followed the first graph's plan at every step of the
// second, departed at the loss and stopped each time.
//
// NOTE [departed-step]: what a departed step cannot do. Following another graph's plan, the
// forward pass holds what that plan holds; from the departure on, online eviction may drop
// a value the backward pass of this graph reads first (the `Gru`'s stacked output, which
// the other graph's loss did not need kept), and rebuilding it from the lean state needs
// more than this graph's own plan does (the output is rebuilt beside the zeros tensor it is
// written into). Such a first step stops with `TooSmall` (the `Gru` at a quarter of K,
// 128 steps), naming a budget it runs under; the next step under the same budget follows
// this graph's plan (NOTE [stopped-view]) and runs
// (`modules_on_every_output_after_their_last_output_run_from_their_first_steps`).

// NOTE [side-ops]: a step may record ops under a budget that its backward pass never
// reaches: Burn's `Lstm` writes each hidden state into a `[batch, seq, hidden]` output with
// `reshape` and `slice_assign`, and a loss on the last hidden state never reads that
// output. A pass's view holds only the ops the pass claimed, so the session's op `i` and the
// view's node `i` parted at the first such op, and every later step departed from its plan
// there (op 37 of the Lstm) and ran online. The ops of a step that its pass did not claim
// are its side ops: the pass lists them ([`Side`], by position in the session) with its
// view, and a step following that view's plan expects them at their positions: a side op
// matches by name and size when it holds nothing the plan does not know of (no constants,
// and no value that cannot be rebuilt unless nothing reads it), gets no actions, and the
// view's nodes around it match as before, their inputs renumbered past the side ops; a
// side op that holds something is a departure (online from there). A *free* side op (its
// step reads no value, and only free side ops read its value) is recorded retaining
// nothing, as under `SaveAll`: the first `slice_assign` then no longer holds the 512 KiB
// zeros tensor it writes into (the Lstm's forward pass needed 517 KiB where its plan needs
// 156), and Flex writes in place. Should it be read after all (a second loss on the
// output, a changed program), it cannot be rebuilt, and what reads it keeps it, as for a
// random op: exact gradients, more bytes.

// NOTE [side-view]: a step that follows another graph's plan records that graph's free side
// ops retaining nothing; when an op of its own reads one after all (Burn's `Lstm` with the
// loss on every output, run after the `Lstm` with the loss on its last state: the loss reads
// the stacked output), the step's view has those ops as values that cannot be rebuilt,
// which is not how the graph records when it follows a plan of its own. The next step
// followed a plan made of that view, and its ops held what the plan did not count: on 128
// steps at half of K it held 3.82 MB against a budget of 3.06 MB. Such a view is the graph
// the thread ran last (for `tradeoff()` and NOTE [stopped-view]), but no plan is made of it,
// and a step starting like it runs online (its view then is the graph's own, planned for
// the steps after it).

/// An op of a step that the step's backward pass did not reach (NOTE \[side-ops\]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Side {
    /// Its position in the step's session.
    pub(super) at: u32,
    /// The view's nodes recorded before it.
    pub(super) before: u32,
    pub(super) name: &'static str,
    pub(super) bytes: u64,
    /// Its step reads no value, and only free side ops read its value: it may be recorded
    /// retaining nothing.
    pub(super) free: bool,
}

/// The graph a thread ran last under a budget (NOTE \[plan-ahead\]).
#[derive(Clone, Debug)]
struct LastRun {
    view: Arc<GraphView>,
    /// The view's signature ([`planner::signature`]).
    signature: u64,
    /// An op of the step read a free side op (NOTE \[side-view\]).
    side_read: bool,
}

/// What a thread remembers of the steps it ran under a budget, across steps: its plans by
/// graph and budget, the graph it ran last and the one that ran after each (NOTE
/// \[plan-ahead\], \[next-graph\]), the side ops of recent views (NOTE \[side-ops\]) and
/// the gradients of its last completed pass (NOTE \[grads-in-flight\] in
/// `planner/grads.rs`). A plain value: the thread's handle (`thread.rs`) owns one, and the
/// unit tests make their own.
#[derive(Debug)]
pub(super) struct Memory {
    last: Option<LastRun>,
    grads: Option<(u64, Arc<GradProfile>)>,
    /// The side ops of recent views, by signature, oldest first: only views that had some,
    /// at most [`PLANS_KEPT`].
    sides: Vec<(u64, Arc<[Side]>)>,
    /// For graphs run under a budget, by signature: the graph that ran right after it the
    /// last time, at most [`PLANS_KEPT`].
    next: Vec<(u64, u64)>,
    /// Plans for the steps run under a budget, by graph signature and budget.
    plans: PlanCache,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            last: None,
            grads: None,
            sides: Vec::new(),
            next: Vec::new(),
            plans: PlanCache::new(PLANS_KEPT),
        }
    }
}

impl Memory {
    /// The side ops of the view with `signature` (NOTE \[side-ops\]); none when it had none
    /// or is forgotten.
    pub(super) fn sides_of(&self, signature: u64) -> Arc<[Side]> {
        self.sides
            .iter()
            .find(|(s, _)| *s == signature)
            .map_or_else(|| Arc::from([]), |(_, list)| list.clone())
    }

    /// The graph that ran right after the graph with signature `after` the last time it ran
    /// (NOTE \[next-graph\]).
    pub(super) fn next_of(&self, after: u64) -> Option<u64> {
        self.next
            .iter()
            .find(|(s, _)| *s == after)
            .map(|&(_, next)| next)
    }

    /// Notes that the graph with signature `then` ran right after the one with `after`.
    fn set_next(&mut self, after: u64, then: u64) {
        self.next.retain(|(s, _)| *s != after);
        if self.next.len() == PLANS_KEPT {
            self.next.remove(0);
        }
        self.next.push((after, then));
    }

    /// Notes the side ops of the view with `signature` (none: forgets any).
    fn set_sides(&mut self, signature: u64, list: Arc<[Side]>) {
        self.sides.retain(|(s, _)| *s != signature);
        if !list.is_empty() {
            if self.sides.len() == PLANS_KEPT {
                self.sides.remove(0);
            }
            self.sides.push((signature, list));
        }
    }

    /// Makes `view` (with its side ops) the graph run last, which the next step starting
    /// like it plans ahead from (NOTE \[plan-ahead\]). `signature`: the view's
    /// ([`planner::signature`]); `side_read`: an op of the step read a free side op (NOTE
    /// \[side-view\]); `stopped`: the step stopped as too small (NOTE \[stopped-view\]);
    /// `grads`: the gradients of a pass that completed, kept with the view (those of an
    /// earlier pass of the same graph stay).
    pub(super) fn ran_last(
        &mut self,
        view: Arc<GraphView>,
        signature: u64,
        sides: Arc<[Side]>,
        side_read: bool,
        stopped: bool,
        grads: Option<Arc<GradProfile>>,
    ) {
        debug_assert_eq!(signature, planner::signature(&view), "remat internal error");
        keep_grads(&mut self.grads, signature, grads);
        self.set_sides(signature, sides);
        if let Some(before) = self.last.as_ref().map(|last| last.signature) {
            // NOTE [next-graph].
            self.set_next(before, signature);
        }
        if stopped {
            // A step that stopped is retried (NOTE [next-graph]).
            self.set_next(signature, signature);
        }
        self.last = Some(LastRun {
            view,
            signature,
            side_read,
        });
    }

    /// Whether a pass under a budget ran on this thread (stopped or not).
    pub(super) fn has_run(&self) -> bool {
        self.last.is_some()
    }

    /// The view of the graph run last, if any.
    pub(super) fn last_view(&self) -> Option<Arc<GraphView>> {
        self.last.as_ref().map(|last| last.view.clone())
    }

    /// The gradients of the last completed pass, when it was of the graph with `signature`.
    pub(super) fn grads_of(&self, signature: u64) -> Option<Arc<GradProfile>> {
        self.grads
            .as_ref()
            .filter(|(s, _)| *s == signature)
            .map(|(_, grads)| grads.clone())
    }

    /// The plan a step whose first op is `first` follows under `budget`, from its first op
    /// on: the plan of the graph that ran after the graph run last the last time (NOTE
    /// \[next-graph\]), else of the graph run last, where it starts like `first` (planned
    /// now if need be: NOTE \[plan-ahead\]), else the most recent plan under `budget` that
    /// starts like it, else one made now for the most recent view that does. `None`: the
    /// step runs online (no such graph, a view not planned (NOTE \[side-view\]), or a
    /// budget too small for its plan).
    pub(super) fn plan_to_follow(
        &mut self,
        first: &planner::Node,
        budget: u64,
    ) -> Option<CachedPlan> {
        let starts_like = |view: &GraphView| !view.is_empty() && recorded_as(first, view.node(0));
        if let Some(last) = &self.last
            && let Some(next) = self.next_of(last.signature)
        {
            let view = if next == last.signature {
                (!last.side_read).then(|| last.view.clone())
            } else {
                self.plans.view_of(next)
            };
            match view {
                Some(view) if starts_like(&view) => {
                    return self.plans.get_or_plan_signed(&view, next, budget).ok();
                }
                Some(_) => {}
                None => return None,
            }
        }
        match self.last.as_ref().filter(|last| starts_like(&last.view)) {
            // NOTE [side-view]: that view is not this graph as recorded online.
            Some(last) if last.side_read => None,
            Some(last) => {
                let (view, signature) = (last.view.clone(), last.signature);
                self.plans.get_or_plan_signed(&view, signature, budget).ok()
            }
            None => match self.plans.most_recent_starting_with(budget, first) {
                Some(plan) => Some(plan.clone()),
                None => {
                    let view = self.plans.most_recent_view_starting_with(first)?;
                    self.plans.get_or_plan_shared(&view, budget).ok()
                }
            },
        }
    }

    /// Whether a plan of the graph with `signature` under `budget` is cached.
    pub(super) fn has_plan(&mut self, signature: u64, budget: u64) -> bool {
        self.plans.get(signature, budget).is_some()
    }

    /// Caches `schedule`, the plan of `view` under `budget`, for the next steps, and returns
    /// it.
    pub(super) fn remember_plan(
        &mut self,
        view: Arc<GraphView>,
        budget: u64,
        schedule: planner::Schedule,
    ) -> CachedPlan {
        self.plans.insert_shared(view, budget, schedule)
    }
}

/// Keeps in `slot` the gradients of a pass of the graph with `signature`: `grads` when the
/// pass completed; else those of an earlier pass of the same graph stay, another graph's go.
fn keep_grads(
    slot: &mut Option<(u64, Arc<GradProfile>)>,
    signature: u64,
    grads: Option<Arc<GradProfile>>,
) {
    match grads {
        Some(grads) => *slot = Some((signature, grads)),
        None if slot.as_ref().is_some_and(|(s, _)| *s != signature) => *slot = None,
        None => {}
    }
}

/// Notes in the process's memory, for [`tradeoff`](super::tradeoff) and
/// [`check_budget`](super::check_budget) on other threads, the view of a pass run last
/// with its gradients (`grads`: a completed pass's; `None` forgets those of another graph).
pub(super) fn ran_last_in_process(
    view: Arc<GraphView>,
    signature: u64,
    grads: Option<Arc<GradProfile>>,
) {
    keep_grads(
        &mut LAST_GRADS.lock().unwrap_or_else(|p| p.into_inner()),
        signature,
        grads,
    );
    *LAST_VIEW.lock().unwrap_or_else(|p| p.into_inner()) = Some(view);
}

// NOTE [plans-across-threads]: a thread's plans are its own (no lock per op), so a step
// whose backward pass ran on another thread (the loss moved to a worker thread) followed no
// plan: the backward thread planned and cached the plan where the recording thread never
// looked, and every step ran online (69 replays a step where the plan makes 30,
// `tests/budget.rs`, `a_backward_on_another_thread_follows_the_plan`). Every plan made after
// a pass is also offered to the process ([`SharedPlans`], locked once a pass and once at a
// step's first op), and used two ways:
// - a pass whose ops another thread recorded carries out the backward of the process's
//   plan of its graph under its budget whose forward part leaves what it holds (the plan
//   the recording thread followed; views matched by structure, their costs aside);
// - a thread that has run no pass under a budget starts a step from the most recent plan
//   that a pass on another thread than the recording one made (with its side ops), under
//   its budget and starting like the step. Only those: a thread's first step stays online
//   in a process whose other threads train on their own (each test of a test binary runs
//   on a thread of its own, and its first step is not another test's plan).
// A thread's own plans come first: a loop on one thread is not changed by this. What does
// not cross: side ops (NOTE [side-ops]). The backward thread sees only the nodes its pass
// claims, so a plan it makes lists none, and a fresh recording thread following it departs
// at the graph's first side op (Burn's `Lstm` with the loss on its last state, 32 steps at
// half of K: 688 replays every step, online, where the plan makes 400; after steps of its
// own on the recording thread, 400).

/// The plans made on any thread, with their views' side ops and whether another thread
/// than the pass's recorded its ops, most recently used last (NOTE
/// \[plans-across-threads\]).
#[derive(Debug, Default)]
pub(super) struct SharedPlans {
    entries: std::collections::VecDeque<(CachedPlan, Arc<[Side]>, bool)>,
}

impl SharedPlans {
    /// Offers `plan` (with its view's side ops; `crossed`: its pass ran on another thread
    /// than the one that recorded it), replacing one of the same graph and budget.
    pub(super) fn offer(&mut self, plan: CachedPlan, sides: Arc<[Side]>, crossed: bool) {
        self.entries.retain(|(p, ..)| {
            !(p.signature == plan.signature && p.budget_bytes == plan.budget_bytes)
        });
        if self.entries.len() == PLANS_KEPT {
            self.entries.pop_front();
        }
        self.entries.push_back((plan, sides, crossed));
    }

    /// The most recent plan under `budget` whose pass crossed threads and whose view starts
    /// like `first`, with its side ops.
    pub(super) fn starting_with(
        &self,
        first: &planner::Node,
        budget: u64,
    ) -> Option<(CachedPlan, Arc<[Side]>)> {
        self.entries
            .iter()
            .rev()
            .find(|(p, _, crossed)| {
                *crossed
                    && p.budget_bytes == budget
                    && !p.view.is_empty()
                    && recorded_as(first, p.view.node(0))
            })
            .map(|(p, sides, _)| (p.clone(), sides.clone()))
    }

    /// The plans under `budget`, most recent first.
    pub(super) fn under(&self, budget: u64) -> Vec<CachedPlan> {
        self.entries
            .iter()
            .rev()
            .filter(|(p, ..)| p.budget_bytes == budget)
            .map(|(p, ..)| p.clone())
            .collect()
    }
}

/// The process's plans (NOTE \[plans-across-threads\]).
pub(super) static SHARED_PLANS: Mutex<SharedPlans> = Mutex::new(SharedPlans {
    entries: std::collections::VecDeque::new(),
});

/// Runs `f` on the process's plans.
pub(super) fn shared_plans<R>(f: impl FnOnce(&mut SharedPlans) -> R) -> R {
    f(&mut SHARED_PLANS.lock().unwrap_or_else(|p| p.into_inner()))
}

/// How many plans a thread keeps (a training loop has one graph per step; more cover
/// evaluation graphs, several losses, and a loop that cycles through budgets: the bench's
/// rounds run nine budget points of one model in turn, and with 8 plans kept every plan was
/// evicted just before its next use, so those steps ran online; the MLP at 10% of its bytes
/// measured 2.99x SaveAll's step where its plan makes 1.82x). A plan is its view and
/// schedule; a cycle of graphs larger than this replans each step.
const PLANS_KEPT: usize = 16;

/// The last backward pass's view under a budget, for [`tradeoff`].
pub(super) static LAST_VIEW: Mutex<Option<Arc<GraphView>>> = Mutex::new(None);

/// The gradients of the last completed pass under a budget on any thread, with its view's
/// signature (NOTE \[grads-in-flight\] in `planner/grads.rs`).
pub(super) static LAST_GRADS: Mutex<Option<(u64, Arc<GradProfile>)>> = Mutex::new(None);

/// The id of budget `bytes` (never 0) in the process-wide table; `cache` is the thread's
/// last answer, which skips the table's lock per recorded op.
pub(super) fn intern_cached(bytes: u64, cache: &core::cell::Cell<(u64, u32)>) -> u32 {
    let (last, id) = cache.get();
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
    cache.set((bytes, id));
    id
}

/// The bytes of budget `id`.
pub(super) fn bytes_of(id: u32) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_interns_to_one_id_that_gives_its_bytes_back() {
        // Bytes no other test of the process uses: the table is process-wide.
        let (a, b) = (0x5EED_0001_u64, 0x5EED_0002_u64);
        let cache = core::cell::Cell::new((0, 0));
        let id_a = intern_cached(a, &cache);
        let id_b = intern_cached(b, &cache);
        assert_ne!(id_a, 0, "0 means no budget");
        assert_ne!(id_a, id_b);
        // Again after another budget (the one-entry cache no longer holds `a`), and with
        // another cache (another thread's): the same id.
        assert_eq!(intern_cached(a, &cache), id_a);
        let other = core::cell::Cell::new((0, 0));
        assert_eq!(intern_cached(a, &other), id_a);
        assert_eq!(intern_cached(b, &cache), id_b);
        assert_eq!(bytes_of(id_a), a);
        assert_eq!(bytes_of(id_b), b);
        // The cache answers without the table: a stale entry would be a wrong id.
        assert_eq!(cache.get(), (b, id_b));
    }

    #[test]
    fn an_estimate_is_a_launch_cost_plus_a_rate_per_byte_by_cost_class() {
        // A view costs nothing per byte; the launch cost is the floor of every class.
        assert_eq!(estimate(Cost::Alias, 1 << 20), 200.0);
        assert_eq!(estimate(Cost::Compute, 0), 200.0);
        assert_eq!(estimate(Cost::Cheap, 1000), 450.0);
        assert_eq!(estimate(Cost::Random, 1000), estimate(Cost::Cheap, 1000));
        assert_eq!(estimate(Cost::Compute, 1000), 2200.0);
        // Replaying compute is always weighed dearer than an element-wise op of that size.
        assert!(estimate(Cost::Compute, 4096) > estimate(Cost::Cheap, 4096));
    }
}
