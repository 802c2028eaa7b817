//! The budget's session and thread memory as values, without tensors (issue 35): ops are
//! recorded into a [`Session`] with nodes that only count bytes ([`Fake`]), the answers
//! are carried out on them as the engine does, and a [`Memory`] picks the plan a step
//! follows. What the engine adds around them (the nodes' values, the thread's handle) is
//! covered by `tests/budget.rs`, `tests/chains.rs` and `tests/recurrent.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use super::session::{self, Apply, InputRead, OpFacts, OpRecord, Session, held_after_forward};
use super::state::{Memory, Side, bytes_of};
use super::thread::intern;
use crate::graph::{BudgetNode, NodeId};
use crate::planner::{self, Action, GraphView};

/// A recorded node that holds no tensor: whether its value is held, and whether it was
/// dropped while rebuildable.
struct Fake {
    name: &'static str,
    bytes: u64,
    held: AtomicBool,
    evicted: AtomicBool,
    consumed: AtomicBool,
}

impl BudgetNode for Fake {
    fn scheduled_free(&self) -> u64 {
        if self.held.swap(false, Ordering::Relaxed) {
            self.evicted.store(true, Ordering::Relaxed);
            self.bytes
        } else {
            0
        }
    }

    fn is_consumed(&self) -> bool {
        self.consumed.load(Ordering::Relaxed)
    }

    fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn evicted_bytes(&self) -> Option<u64> {
        (self.evicted.load(Ordering::Relaxed) && !self.is_held()).then_some(self.bytes)
    }

    fn budget_bytes_now(&self) -> u64 {
        if self.is_held() { self.bytes } else { 0 }
    }
}

/// One op of a test graph: its name, output bytes, and the ops (by position) a replay and
/// its backward step read. Every op is replayable unless `pinned`.
#[derive(Clone, Copy)]
struct Op {
    name: &'static str,
    bytes: u64,
    reads: Option<usize>,
    pinned: bool,
}

/// A chain of `n` ops of 100 bytes, each reading the one before (as `sin` does: its replay
/// and its backward step read its input).
fn chain(n: usize) -> Vec<Op> {
    (0..n)
        .map(|i| Op {
            name: if i == 0 { "first" } else { "sin" },
            bytes: 100,
            reads: i.checked_sub(1),
            pinned: false,
        })
        .collect()
}

/// The planner's view of `ops`, as a backward pass over them describes it.
fn view_of(ops: &[Op]) -> GraphView {
    let nodes = ops
        .iter()
        .map(|op| {
            let reads: Vec<u32> = op.reads.map(|r| r as u32).into_iter().collect();
            planner::Node::new(op.name, op.bytes, 1000.0)
                .inputs(reads.clone())
                .step_reads(reads)
                .replayable(!op.pinned)
        })
        .collect();
    GraphView::new(nodes).expect("a valid view")
}

/// A thread's budget state, and the nodes of the step it records.
struct Thread {
    session: Option<Session>,
    memory: Memory,
    /// What the process offers (NOTE [plans-across-threads] in `state.rs`).
    elsewhere: Option<(planner::CachedPlan, Arc<[Side]>)>,
    nodes: Vec<Arc<Fake>>,
    ids: Vec<NodeId>,
}

impl Thread {
    fn new() -> Self {
        Self {
            session: None,
            memory: Memory::default(),
            elsewhere: None,
            nodes: Vec::new(),
            ids: Vec::new(),
        }
    }

    /// A thread whose last step under a budget ran `ops`, with that step's view and its
    /// signature (no plan made yet).
    fn after(ops: &[Op]) -> (Self, Arc<GraphView>, u64) {
        let view = Arc::new(view_of(ops));
        let signature = planner::signature(&view);
        let mut thread = Self::new();
        thread
            .memory
            .ran_last(view.clone(), signature, Arc::from([]), false, false, None);
        (thread, view, signature)
    }

    /// A new step: the last one's nodes were consumed by its backward pass (and the session
    /// compacted, as after a pass).
    fn next_step(&mut self) {
        for node in &self.nodes {
            node.consumed.store(true, Ordering::Relaxed);
            node.held.store(false, Ordering::Relaxed);
        }
        session::compact_slot(&mut self.session, true, None);
        self.nodes.clear();
        self.ids.clear();
    }

    /// Records `op` under `budget_id` and carries the answer out on the nodes, as the
    /// engine does (every input is in hand).
    fn record(
        &mut self,
        op: Op,
        budget_id: u32,
    ) -> Result<Vec<&'static str>, (u64, planner::Error)> {
        let node = Arc::new(Fake {
            name: op.name,
            bytes: op.bytes,
            held: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            consumed: AtomicBool::new(false),
        });
        let id = NodeId::new();
        let reads: smallvec::SmallVec<[NodeId; 2]> =
            op.reads.map(|r| self.ids[r]).into_iter().collect();
        let handle: Weak<dyn BudgetNode> = Arc::downgrade(&(node.clone() as Arc<dyn BudgetNode>));
        let record = OpRecord {
            id,
            handle,
            budget_id,
            facts: OpFacts {
                name: op.name,
                bytes: op.bytes,
                cost_ns: 1000.0,
                replayable: !op.pinned,
                in_region: false,
                reads_output: false,
                fixed_bytes: 0,
                inputs: reads.clone(),
                step_reads: reads,
                quiet: false,
            },
        };
        self.nodes.push(node.clone());
        self.ids.push(id);
        let elsewhere = self.elsewhere.clone();
        let actions =
            session::record(&mut self.session, &mut self.memory, record, &move |_, _| {
                elsewhere.clone()
            })?;
        let mut done = Vec::new();
        for action in actions {
            match action {
                Apply::KeepOutput => {
                    node.held.store(true, Ordering::Relaxed);
                    done.push("keep output");
                }
                Apply::KeepInput(producer) => {
                    let at = self.ids.iter().position(|&i| i == producer).unwrap();
                    self.nodes[at].held.store(true, Ordering::Relaxed);
                    done.push("keep input");
                }
                Apply::Evict(victim) => {
                    victim.upgrade().unwrap().scheduled_free();
                    done.push("evict");
                }
            }
        }
        Ok(done)
    }

    /// The bytes held now, counted from the nodes.
    fn held_bytes(&self) -> u64 {
        self.nodes.iter().map(|n| n.budget_bytes_now()).sum()
    }

    /// The positions of the nodes held now.
    fn held(&self) -> Vec<u32> {
        (0..self.nodes.len() as u32)
            .filter(|&v| self.nodes[v as usize].is_held())
            .collect()
    }

    fn following(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.follow.is_some())
    }
}

#[test]
fn an_online_session_keeps_a_chain_within_its_budget_and_lists_what_it_dropped() {
    let budget = intern(450);
    let mut thread = Thread::new();
    let mut evictions = 0;
    for op in chain(24) {
        let done = thread.record(op, budget).expect("a chain fits 450 bytes");
        evictions += done.iter().filter(|&&d| d == "evict").count();
        let (held, bound) = thread.session.as_ref().unwrap().held_and_bound();
        assert_eq!(
            held,
            thread.held_bytes(),
            "the session counts what the nodes hold"
        );
        assert!(held <= 450, "{held} bytes held under a budget of 450");
        assert_eq!(bound, 450, "a chain never raises the bound");
    }
    assert!(
        evictions > 0,
        "24 x 100 bytes do not fit 450 without dropping"
    );
    assert!(!thread.following(), "the thread ran nothing before: online");
    let dropped = thread.session.as_ref().unwrap().dropped();
    assert!(!dropped.is_empty());
    assert!(
        dropped
            .iter()
            .all(|d| d.bytes == 100 && ["first", "sin"].contains(&d.op))
    );
    // Making room for 300 bytes of constants drops held values worth at least that much
    // beyond what the budget has left.
    let before = thread.held_bytes();
    let victims = thread
        .session
        .as_mut()
        .unwrap()
        .make_room(budget, 300)
        .expect("held values can be dropped");
    for victim in &victims {
        victim.upgrade().unwrap().scheduled_free();
    }
    assert!(thread.held_bytes() + 300 <= 450 || before == 0);
    // Not under another budget.
    assert!(
        thread
            .session
            .as_mut()
            .unwrap()
            .make_room(intern(451), 300)
            .is_none()
    );
}

#[test]
fn a_step_follows_the_plan_of_the_graph_it_ran_last_op_for_op() {
    let (bytes, budget, ops) = (450, intern(450), chain(24));
    let (mut thread, view, signature) = Thread::after(&ops);
    let mut upcoming_keeps = 0;
    for (i, &op) in ops.iter().enumerate() {
        if let Some(session) = &thread.session {
            // What the plan keeps at this op is known before it runs (NOTE
            // [in-place-forward]).
            let reads: Vec<InputRead> = op
                .reads
                .map(|r| InputRead {
                    producer: thread.ids[r],
                    by_step: true,
                    by_replay: true,
                })
                .into_iter()
                .collect();
            let upcoming = session.upcoming(op.name, &reads);
            let keeps = upcoming.keeps.expect("a followed plan knows its keeps");
            upcoming_keeps += keeps.len();
            assert!(!upcoming.free_side);
        }
        thread.record(op, budget).unwrap();
        assert!(thread.following(), "op {i}: the step follows the plan");
        assert!(thread.held_bytes() <= bytes);
    }
    // The plan was made (planning ahead) and cached, and the step holds what it holds.
    assert!(thread.memory.has_plan(signature, bytes));
    let plan = thread
        .memory
        .plan_to_follow(&view.nodes()[0], bytes)
        .unwrap();
    assert_eq!(plan.signature, signature);
    assert_eq!(Some(thread.held()), held_after_forward(&plan));
    // So the pass carries out the plan's backward; not another graph's, another budget's,
    // or from other values held.
    let follow = thread.session.as_mut().unwrap().follow.take().unwrap();
    let held = thread.held();
    assert!(follow.applies(signature, bytes, &held));
    assert!(!follow.applies(signature ^ 1, bytes, &held));
    assert!(!follow.applies(signature, bytes + 1, &held));
    let fewer = &held[1..];
    assert!(!held.is_empty() && !follow.applies(signature, bytes, fewer));
    // Before each op, `upcoming` named the inputs the plan keeps at it: every `Keep` of an
    // earlier value in the op's forward actions.
    let kept_inputs: usize = (1..ops.len())
        .filter_map(|v| plan.index.forward(v).map(|range| (v, range)))
        .map(|(v, range)| {
            plan.schedule.actions()[range]
                .iter()
                .filter(|a| matches!(a, Action::Keep(u) if (*u as usize) < v))
                .count()
        })
        .sum();
    assert_eq!(upcoming_keeps, kept_inputs);
}

#[test]
fn a_step_that_departs_from_its_plan_goes_on_online_from_where_it_left() {
    let (bytes, budget, ops) = (450, intern(450), chain(24));
    let (mut thread, ..) = Thread::after(&ops);
    for (i, &op) in ops.iter().enumerate() {
        // Op 12 is not the view's op 12 (another size): the step departs there.
        let op = if i == 12 { Op { bytes: 120, ..op } } else { op };
        thread.record(op, budget).unwrap();
        assert_eq!(thread.following(), i < 12, "op {i}");
        let (held, bound) = thread.session.as_ref().unwrap().held_and_bound();
        assert_eq!(held, thread.held_bytes());
        assert!(
            held <= bound && bound >= bytes,
            "op {i}: {held} held, bound {bound}"
        );
    }
}

#[test]
fn values_that_cannot_be_rebuilt_stop_a_smaller_budget_naming_what_they_need() {
    let large = intern(1 << 30);
    let mut thread = Thread::new();
    // Five values that cannot be rebuilt (random draws), each read by the op after it.
    for i in 0..5 {
        let random = Op {
            name: "random",
            bytes: 100,
            reads: None,
            pinned: true,
        };
        thread.record(random, large).unwrap();
        let reader = Op {
            name: "sin",
            bytes: 100,
            reads: Some(2 * i),
            pinned: false,
        };
        thread.record(reader, large).unwrap();
        assert!(
            thread.nodes[2 * i].is_held(),
            "op {i}: a value that cannot be rebuilt is kept"
        );
    }
    let pinned_bytes = |thread: &Thread| -> u64 {
        thread
            .nodes
            .iter()
            .step_by(2)
            .map(|n| n.budget_bytes_now())
            .sum()
    };
    assert_eq!(pinned_bytes(&thread), 500);
    // The next op comes under a budget the five cannot fit.
    let small = intern(250);
    let Err((budget, error)) = thread.record(chain(1)[0], small) else {
        panic!("500 bytes that cannot be rebuilt do not fit 250");
    };
    assert_eq!(budget, bytes_of(small));
    match error {
        planner::Error::Infeasible {
            min_budget_bytes, ..
        } => assert!(min_budget_bytes >= 500, "{min_budget_bytes}"),
        other => panic!("{other}"),
    }
    assert!(thread.session.is_none(), "the session is dropped");
    // None of those was dropped: they cannot be rebuilt.
    assert_eq!(pinned_bytes(&thread), 500);
}

#[test]
fn a_pass_compaction_forgets_consumed_nodes_and_starts_the_next_step_from_a_plan() {
    let bytes = 450;
    let budget = intern(bytes);
    let ops = chain(24);
    let mut thread = Thread::new();
    for &op in &ops {
        thread.record(op, budget).unwrap();
    }
    assert!(!thread.following());
    // As after the step's backward pass: its view is the graph run last.
    let view = Arc::new(view_of(&ops));
    let signature = planner::signature(&view);
    let schedule = planner::plan(&view, bytes).unwrap();
    thread.memory.remember_plan(view.clone(), bytes, schedule);
    thread
        .memory
        .ran_last(view, signature, Arc::from([]), false, false, None);
    thread.next_step();
    assert!(thread.session.as_ref().is_none_or(|s| s.handles.is_empty()));
    for &op in &ops {
        thread.record(op, budget).unwrap();
        assert!(thread.following());
    }
}

/// Two graphs that start alike (a loop alternating them), views `a` and `b`.
fn two_graphs() -> (Arc<GraphView>, u64, Arc<GraphView>, u64) {
    let a = Arc::new(view_of(&chain(12)));
    let mut ops = chain(12);
    ops[6].bytes = 300;
    let b = Arc::new(view_of(&ops));
    let (sa, sb) = (planner::signature(&a), planner::signature(&b));
    assert_ne!(sa, sb);
    (a, sa, b, sb)
}

#[test]
fn memory_follows_the_graph_that_ran_after_the_last_one_the_last_time() {
    let (a, sa, b, sb) = two_graphs();
    let first = a.nodes()[0].clone();
    let mut memory = Memory::default();
    for (view, signature) in [(&a, sa), (&b, sb), (&a, sa)] {
        let plan = planner::plan(view, 600).unwrap();
        memory.remember_plan(view.clone(), 600, plan);
        memory.ran_last(view.clone(), signature, Arc::from([]), false, false, None);
    }
    // `a` ran last, and `b` ran after it the last time: `b` comes next.
    assert_eq!(memory.next_of(sa), Some(sb));
    assert_eq!(memory.plan_to_follow(&first, 600).unwrap().signature, sb);
    memory.ran_last(b.clone(), sb, Arc::from([]), false, false, None);
    assert_eq!(memory.plan_to_follow(&first, 600).unwrap().signature, sa);
    // Under another budget, the graph that comes next is planned now and cached.
    assert!(!memory.has_plan(sa, 700));
    let plan = memory.plan_to_follow(&first, 700).unwrap();
    assert_eq!((plan.signature, plan.budget_bytes), (sa, 700));
    assert!(memory.has_plan(sa, 700));
    // A step that starts like neither runs online.
    let other = planner::Node::new("cos", 100, 1000.0);
    assert!(memory.plan_to_follow(&other, 600).is_none());
}

#[test]
fn memory_retries_a_step_that_stopped_and_does_not_plan_a_view_read_off_its_side_ops() {
    let (a, sa, b, sb) = two_graphs();
    let first = a.nodes()[0].clone();
    let mut memory = Memory::default();
    memory.remember_plan(b.clone(), 600, planner::plan(&b, 600).unwrap());
    memory.ran_last(b.clone(), sb, Arc::from([]), false, false, None);
    // `a` stopped as too small: the next step is `a` again, not `b`.
    memory.ran_last(a.clone(), sa, Arc::from([]), false, true, None);
    assert_eq!(memory.next_of(sa), Some(sa));
    assert_eq!(memory.plan_to_follow(&first, 600).unwrap().signature, sa);
    // A view in which an op read a free side op (NOTE [side-view]) is not followed.
    let mut fresh = Memory::default();
    fresh.ran_last(a.clone(), sa, Arc::from([]), true, false, None);
    assert!(fresh.plan_to_follow(&first, 600).is_none());
    fresh.ran_last(a, sa, Arc::from([]), true, false, None);
    assert_eq!(fresh.next_of(sa), Some(sa));
    assert!(fresh.plan_to_follow(&first, 600).is_none());
}

#[test]
fn memory_keeps_side_ops_and_gradients_with_their_graph() {
    let (a, sa, b, sb) = two_graphs();
    let mut memory = Memory::default();
    let side = Side {
        at: 3,
        before: 3,
        name: "slice_assign",
        bytes: 64,
        free: true,
    };
    let grads = Arc::new(planner::GradProfile {
        before_bytes: 4,
        ..Default::default()
    });
    memory.ran_last(
        a.clone(),
        sa,
        Arc::from([side]),
        false,
        false,
        Some(grads.clone()),
    );
    assert_eq!(&*memory.sides_of(sa), &[side]);
    assert!(memory.sides_of(sb).is_empty());
    assert_eq!(memory.grads_of(sa).as_deref(), Some(&*grads));
    // A pass of the same graph without gradients (it did not complete) keeps them; a pass
    // of another graph forgets them.
    memory.ran_last(a.clone(), sa, Arc::from([side]), false, false, None);
    assert!(memory.grads_of(sa).is_some());
    memory.ran_last(b.clone(), sb, Arc::from([]), false, false, None);
    assert!(memory.grads_of(sa).is_none() && memory.grads_of(sb).is_none());
    assert!(Arc::ptr_eq(&memory.last_view().unwrap(), &b));
    // Side ops are forgotten when the graph runs without any.
    memory.ran_last(a, sa, Arc::from([]), false, false, None);
    assert!(memory.sides_of(sa).is_empty());
}

#[test]
fn a_thread_that_ran_no_pass_follows_the_process_s_plan_and_one_that_ran_its_own() {
    let (bytes, budget, ops) = (450, intern(450), chain(24));
    let view = Arc::new(view_of(&ops));
    let plan =
        Memory::default().remember_plan(view.clone(), bytes, planner::plan(&view, bytes).unwrap());
    // A thread that ran no pass: the process's plan, op for op.
    let mut fresh = Thread::new();
    fresh.elsewhere = Some((plan.clone(), Arc::from([])));
    for &op in &ops {
        fresh.record(op, budget).unwrap();
        assert!(fresh.following());
    }
    assert_eq!(Some(fresh.held()), held_after_forward(&plan));
    // A thread that ran a pass of another graph (it starts otherwise): its own memory
    // decides, and it has nothing for this step, so it runs online.
    let mut other = chain(24);
    other[0].name = "cos";
    let (mut ran, ..) = Thread::after(&other);
    ran.elsewhere = Some((plan, Arc::from([])));
    for &op in &ops {
        ran.record(op, budget).unwrap();
        assert!(!ran.following());
        assert!(ran.held_bytes() <= bytes);
    }
}

#[test]
fn the_process_s_plans_replace_their_own_graph_and_offer_fresh_threads_only_crossed_ones() {
    use super::state::SharedPlans;
    let (a, _, b, _) = two_graphs();
    let first = a.nodes()[0].clone();
    let plan_of = |view: &Arc<GraphView>, budget| {
        Memory::default().remember_plan(view.clone(), budget, planner::plan(view, budget).unwrap())
    };
    let mut shared = SharedPlans::default();
    // A plan made where its ops were recorded is not offered to fresh threads.
    shared.offer(plan_of(&a, 600), Arc::from([]), false);
    assert!(shared.starting_with(&first, 600).is_none());
    assert_eq!(shared.under(600).len(), 1);
    // The same graph and budget again, its pass on another thread: replaced, and offered.
    shared.offer(plan_of(&a, 600), Arc::from([]), true);
    assert_eq!(shared.under(600).len(), 1);
    let (plan, sides) = shared.starting_with(&first, 600).unwrap();
    assert_eq!(plan.signature, planner::signature(&a));
    assert!(sides.is_empty());
    // Under another budget, or starting otherwise: none.
    assert!(shared.starting_with(&first, 700).is_none());
    assert!(
        shared
            .starting_with(&planner::Node::new("cos", 100, 1.0), 600)
            .is_none()
    );
    // The most recent first; at most as many as a thread keeps.
    shared.offer(plan_of(&b, 600), Arc::from([]), true);
    assert_eq!(
        shared.starting_with(&first, 600).unwrap().0.signature,
        planner::signature(&b)
    );
    for budget in 1000..1040 {
        shared.offer(plan_of(&a, budget), Arc::from([]), false);
    }
    let kept: usize = (0..2000).map(|budget| shared.under(budget).len()).sum();
    assert_eq!(kept, 16);
}
