//! The budget's state on one thread, behind one handle ([`with_thread`]): the session of the
//! ops being recorded ([`Session`]), what the thread remembers of the steps it ran
//! ([`Memory`]), and what a stop as too small left. Every engine call of the forward pass
//! under a budget comes here ([`on_record`], [`reserve`], [`upcoming`], [`read_outside`]):
//! it turns the op into plain facts, asks the session under its borrow, and carries the
//! answer out on the nodes after the borrow is released.
//!
//! Process-wide (`state.rs`), only what reports read from other threads (the last view and
//! gradients, the last budget), the table of budgets by id, and the plans offered to threads
//! that have none (NOTE \[plans-across-threads\]).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

use super::session::{self, Apply, InputRead, OpFacts, OpRecord, Session, Upcoming};
use super::state::{Memory, Side, intern_cached, ran_last_in_process, shared_plans};
use super::stop::too_small;
use crate::counters::KeepReason;
use crate::graph::{BudgetNode, Kept, Node, NodeId, Slot};
use crate::planner::{self, GraphView};

/// The budget's state on one thread.
pub(super) struct Thread {
    /// The ops recorded under a budget (NOTE \[budget\]).
    pub(super) session: RefCell<Option<Session>>,
    /// What the thread remembers of the steps it ran under a budget.
    pub(super) memory: RefCell<Memory>,
    /// What a step under a budget was found to need when it stopped as too small, in its
    /// forward pass or at `backward()` (see [`check_budget`](super::check_budget)); 0 once
    /// a pass under a budget completes.
    pub(super) failed_need: Cell<u64>,
    /// How many `try_with_budget` calls the thread is inside.
    pub(super) trying: Cell<u32>,
    /// The last budget interned on this thread, to skip the table's lock per recorded op.
    interned: Cell<(u64, u32)>,
}

thread_local! {
    static THREAD: Thread = Thread {
        session: const { RefCell::new(None) },
        memory: RefCell::new(Memory::default()),
        failed_need: const { Cell::new(0) },
        trying: const { Cell::new(0) },
        interned: const { Cell::new((0, 0)) },
    };
}

/// Runs `f` on this thread's budget state.
pub(super) fn with_thread<R>(f: impl FnOnce(&Thread) -> R) -> R {
    THREAD.with(f)
}

/// The id of budget `bytes` (never 0).
pub(crate) fn intern(bytes: u64) -> u32 {
    with_thread(|thread| intern_cached(bytes, &thread.interned))
}

/// The user-facing stop for a budget the graph cannot fit: notes what the step needed (for
/// `check_budget`) and panics, or unwinds to `try_with_budget`.
pub(super) fn stop(budget: u64, error: &planner::Error, op: Option<&str>) -> ! {
    let trying = with_thread(|thread| {
        let min = super::stop::need_of(error);
        thread.failed_need.set(thread.failed_need.get().max(min));
        thread.trying.get() > 0
    });
    too_small(budget, error, op, trying)
}

/// Makes `view` (with its side ops) the graph this thread ran last, which the next step
/// starting like it plans ahead from (NOTE \[plan-ahead\] in `state.rs`), and the one
/// [`tradeoff`](super::tradeoff) reads, on this thread and (for other threads) in the
/// process; see [`Memory::ran_last`].
pub(super) fn ran_last(
    view: Arc<GraphView>,
    signature: u64,
    sides: Arc<[Side]>,
    side_read: bool,
    stopped: bool,
    grads: Option<planner::GradProfile>,
) {
    let grads = grads.map(Arc::new);
    with_thread(|thread| {
        thread.memory.borrow_mut().ran_last(
            view.clone(),
            signature,
            sides,
            side_read,
            stopped,
            grads.clone(),
        );
    });
    ran_last_in_process(view, signature, grads);
}

/// Compacts this thread's session (see [`session::compact_slot`]).
pub(super) fn compact_thread_session(step_ended: bool, left_out: Option<&[bool]>) {
    with_thread(|thread| {
        session::compact_slot(&mut thread.session.borrow_mut(), step_ended, left_out)
    });
}

/// What an op recorded under a budget reads and produces, before its node exists: its
/// facts, and the values of its inputs it has in hand (they may be kept now).
pub(crate) struct Recorded<B: Backend> {
    pub(crate) facts: OpFacts,
    pub(crate) in_hand: InHand<B>,
}

/// The values of an op's inputs held in hand while it is recorded (NOTE \[in-place-forward\]
/// in `session.rs`), with their producers: in place for up to two, no allocation per op.
pub(crate) type InHand<B> = smallvec::SmallVec<[(Arc<Node<B>>, FloatTensor<B>); 2]>;

/// Makes room, before an op recorded under budget `budget_id` holds `bytes` of constants on
/// its edges (they are counted from then on): the planner's online eviction drops values
/// until they fit. Following a plan, the plan made that room at the previous op.
pub(crate) fn reserve(budget_id: u32, bytes: u64) {
    if bytes == 0 {
        return;
    }
    let victims = with_thread(|thread| {
        thread
            .session
            .borrow_mut()
            .as_mut()
            .and_then(|session| session.make_room(budget_id, bytes))
    });
    // Dropped outside the session's borrow.
    for node in victims.into_iter().flatten() {
        if let Some(node) = node.upgrade() {
            node.scheduled_free();
        }
    }
}

/// What the plan this thread's step follows says of the op named `name` about to be
/// recorded under `budget_id` (see [`Upcoming`]); online, which of its `inputs` the online
/// planner may keep at it (NOTE \[in-place-forward\] in `session.rs`).
pub(crate) fn upcoming(budget_id: u32, name: &'static str, inputs: &[InputRead]) -> Upcoming {
    with_thread(|thread| {
        thread
            .session
            .borrow()
            .as_ref()
            .filter(|s| s.budget_id == budget_id)
            .map_or_else(Upcoming::default, |s| s.upcoming(name, inputs))
    })
}

/// Notes that an op reads the value of node `id`, recorded under `budget_id`, where the
/// session does not expect it (see [`Session::read_outside`]).
pub(crate) fn read_outside(budget_id: u32, id: NodeId, kept: bool) {
    with_thread(|thread| {
        if let Some(session) = thread
            .session
            .borrow_mut()
            .as_mut()
            .filter(|s| s.budget_id == budget_id)
        {
            session.read_outside(id, kept);
        }
    });
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
    let Recorded { facts, in_hand } = recorded;
    let name = facts.name;
    let op = OpRecord {
        id: node.id,
        handle: Arc::downgrade(&(node.clone() as Arc<dyn BudgetNode>)),
        budget_id,
        facts,
    };
    let answer = with_thread(|thread| {
        session::record(
            &mut thread.session.borrow_mut(),
            &mut thread.memory.borrow_mut(),
            op,
            &|first, budget| shared_plans(|plans| plans.starting_with(first, budget)),
        )
    });
    let actions = match answer {
        Ok(actions) => actions,
        Err((budget, error)) => stop(budget, &error, Some(name)),
    };
    // In the session's order, outside its borrow.
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
    let held = with_thread(|thread| {
        let session = thread.session.borrow();
        let session = session.as_ref()?;
        (session.handles.len() <= 4096 && session.budget_id == budget_id)
            .then(|| session.held_and_bound())
    });
    // NOTE [forward-overflow]: within the raised bytes once the step went over its budget.
    if let Some((held, bound)) = held {
        assert!(
            held <= bound,
            "remat internal error: the forward pass holds {held} bytes under a budget of {bound}"
        );
    }
}

/// The values this thread's budget dropped that a backward step (or a replay) will read:
/// rebuilt when read.
pub(crate) fn dropped() -> Vec<crate::report_items::DroppedValue> {
    with_thread(|thread| {
        thread
            .session
            .borrow()
            .as_ref()
            .map_or_else(Vec::new, Session::dropped)
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
        state.slot = Slot::Stored(Kept::new(value.clone(), reason, node.name()));
    }
}
