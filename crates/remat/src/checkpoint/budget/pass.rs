//! Planning one backward pass under a budget (NOTE \[budget\]), before any of its steps
//! runs: [`plan_pass`] describes the pass's nodes to the planner as they stand (a
//! [`GraphView`]), drops held values nothing of the pass reads, and takes the cached plan
//! the step followed, if it still applies; otherwise the planner chooses
//! ([`planner::plan_backward`]: an online plan resumed on the current state, or one from the
//! lean state, whose values this file drops as it asks), and a graph that still cannot fit
//! panics, naming the smallest budget it runs with. The planner's answer becomes the
//! pass's actions cut per node of the order ([`PassActions`]).
//!
//! # Invariants
//! - Planning runs no op: a budget too small panics before any step or replay.
//! - The actions returned name positions in the pass's order, not the view's indices.

use std::any::TypeId;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::entries::Entries;
use super::session::Follow;
use super::state::{LAST_BUDGET, Side, bytes_of, estimate, shared_plans};
use super::thread::{compact_thread_session, ran_last, stop, with_thread};
use crate::checkpoint::cost;
use crate::graph::{BudgetNode, GraphNode, NodeId, ScheduleFacts};
use crate::planner::{self, Action, BackwardPlan, GraphView, ScheduleIndex};

/// The budget of a backward pass: the smallest of the budgets its nodes were recorded
/// under; `None` when no node was recorded under one.
pub(crate) fn pass_budget(order: &[Arc<dyn GraphNode>]) -> Option<u64> {
    // The distinct ids first: a pass has one or two, and each lookup locks the table.
    let mut ids: SmallVec<[u32; 2]> = SmallVec::new();
    for node in order {
        let id = node.budget();
        if id != 0 && !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids.into_iter().map(bytes_of).min()
}

/// Replaces each measured op time by the mean over the ops of the same name and output size:
/// one op's time is noisy (a few hundred nanoseconds of timer and cache effects), and equal
/// ops planned with unequal costs lose the structure the planner exploits (Revolve's optimum
/// for a chain of equal ops). Where replays of such a kind were timed, their median is its
/// cost instead (NOTE [replay-times] in `cost.rs`), when the pass ran on one inner backend
/// (`backend`; a pass spanning backends keeps the means). Idempotent.
pub(super) fn smooth_costs(nodes: &mut [planner::Node], backend: Option<TypeId>) {
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

/// The side ops (`side`) of a session's `nodes` (NOTE \[side-ops\] in `state.rs`); `quiet`:
/// which ops' steps read no value; `read_outside`: ops whose value an op outside the session
/// reads. A side op is free when its step reads no value and only free side ops read its
/// value (the last op first: readers come after what they read).
fn side_ops(nodes: &Entries, side: &[bool], quiet: &[bool], read_outside: &[u32]) -> Arc<[Side]> {
    let mut free = vec![false; nodes.len()];
    let mut read = vec![false; nodes.len()];
    for &at in read_outside {
        read[at as usize] = true;
    }
    nodes.reads_from_last(
        &mut (&mut free, &mut read),
        |(free, read), at| {
            free[at] = side[at] && quiet[at] && !read[at];
            !free[at]
        },
        |(_, read), u| read[u as usize] = true,
    );
    (0..nodes.len())
        .filter(|&at| side[at])
        .enumerate()
        .map(|(k, at)| {
            let node = nodes.get(at);
            Side {
                at: at as u32,
                before: (at - k) as u32,
                name: node.name,
                bytes: node.bytes,
                free: free[at],
            }
        })
        .collect()
}

// NOTE [shared-release]: NOTE [shared-constants] charges a constant several ops hold to the
// first of them to record it (its owner), and the model released the charge at the owner's
// step; where another holder steps later, the buffer outlived its charge (Burn's `Lstm`:
// each step's input slice is read by the four gates, whose steps do not run in reverse
// recording order; under a quarter of SaveAll's bytes `stats` peaked 28 KiB over the
// budget on 32 steps, 114 KiB on 128). The step order is known here, at `backward()`: the
// owner's constants are released by the step of the holder that steps last
// (`planner::Node::fixed_until`), so the model holds each shared constant once, from its
// owner's op to its last holder's step, as the buffer lives. An owner holding several
// shared constants holds all of its constants until the last of their holders steps (more
// than the buffers: safe). A constant whose owner is not in the pass is charged to its
// last holder. Before, that holder was charged too, and the constant counted twice from
// its op to the owner's step: the smallest budget of Burn's `Lstm` was twice its input
// plus a few values (`crates/remat-models/tests/recurrent_modules.rs`,
// `lstm_s_smallest_budget_does_not_grow_with_its_length_beyond_its_input`).

/// A node's shared constants, as its description lists them (`ScheduleEntry::shared`).
type Shared = SmallVec<[(usize, u64, bool); 1]>;

/// Releases each shared constant of the pass at the step of its holder that steps last
/// (NOTE \[shared-release\]). `nodes` are in view order (`by_id`), and `shared` in step
/// order.
fn charge_last_holders(nodes: &mut [planner::Node], shared: &[Shared], by_id: &[usize]) {
    // By constant: its owner's view index, and its last-stepping holder's step position,
    // view index and bytes.
    let mut owner: HashMap<usize, u32> = HashMap::new();
    let mut last: HashMap<usize, (usize, u32, u64)> = HashMap::new();
    for (i, &k) in by_id.iter().enumerate() {
        for &(key, bytes, owns) in &shared[k] {
            if owns {
                owner.insert(key, i as u32);
            }
            let holder = last.entry(key).or_insert((k, i as u32, bytes));
            if k > holder.0 {
                *holder = (k, i as u32, bytes);
            }
        }
    }
    // By owner: the step position and view index of the last holder of its constants.
    let mut until: HashMap<u32, (usize, u32)> = HashMap::new();
    for (key, (k, holder, bytes)) in last {
        match owner.get(&key) {
            Some(&owner) if owner == holder => {}
            Some(&owner) => {
                let latest = until.entry(owner).or_insert((k, holder));
                if k > latest.0 {
                    *latest = (k, holder);
                }
            }
            None => nodes[holder as usize].fixed_bytes += bytes,
        }
    }
    for (owner, (k, holder)) in until {
        if k > by_id[owner as usize] {
            nodes[owner as usize].fixed_until = Some(holder);
        }
    }
}

/// Takes the side ops (NOTE \[side-ops\] in `state.rs`) out of the session's `nodes`, in
/// place: `nodes` keeps the others, renumbered, and the side ops' nodes are returned in
/// order (NOTE \[split-sides\]). `None`, with `nodes` untouched, when a node reads a side op.
fn split_sides(nodes: &mut Vec<planner::Node>, sides: &[Side]) -> Option<Vec<planner::Node>> {
    let mut number = vec![u32::MAX; nodes.len()];
    let mut next = 0;
    let mut k = 0;
    for (at, slot) in number.iter_mut().enumerate() {
        if sides.get(k).is_some_and(|side| side.at as usize == at) {
            k += 1;
        } else {
            *slot = next;
            next += 1;
        }
    }
    let kept = |at: usize| number[at] != u32::MAX;
    let reads_a_side = (0..nodes.len()).filter(|&at| kept(at)).any(|at| {
        let node = &nodes[at];
        node.inputs
            .iter()
            .chain(&node.step_reads)
            .any(|&u| !kept(u as usize))
    });
    if reads_a_side {
        return None;
    }
    let side_nodes: Vec<planner::Node> = sides
        .iter()
        .map(|side| std::mem::replace(&mut nodes[side.at as usize], planner::Node::new("", 0, 0.0)))
        .collect();
    let mut at = 0;
    nodes.retain_mut(|node| {
        let keep = kept(at);
        at += 1;
        if keep {
            for u in node.inputs.iter_mut().chain(node.step_reads.iter_mut()) {
                *u = number[*u as usize];
            }
        }
        keep
    });
    Some(side_nodes)
}

// NOTE [split-sides]: where the session recorded the pass's ops and its side ops, the pass's
// view was a renumbered copy of the session's entries without the side ops, made beside
// them: 0.21 MB of a 2.0 MB first step on Burn's `Lstm` under half of K (32 steps). The
// entries are now split in place: the pass takes the list, and the session keeps the side
// ops' nodes beside the pass's view (`Entries::after_pass`), which is all its compaction
// reads (the pass's own nodes are claimed, so none of them is kept).

/// What a pass keeps of each node it claimed (NOTE \[pass-facts\]): its position in the
/// pass's order and its facts (through `Deref`).
struct Facts {
    pos: usize,
    node: ScheduleFacts,
}

impl core::ops::Deref for Facts {
    type Target = ScheduleFacts;

    fn deref(&self) -> &ScheduleFacts {
        &self.node
    }
}

// NOTE [pass-index]: a followed step's pass is planned at every `backward()`, so its cost is
// per step: under `Budget(u64::MAX)` on Burn's `Lstm` over 1,024 steps (37,905 nodes) it
// was 14 ms of a 390 ms step, a third of what the budget added to SaveAll's step. Each
// lookup of a node by id was a binary search: the step order (one per node), which of the
// session's ops the pass claimed (two per op), the reads of every entry renumbered past the
// side ops (one search per read), and the compaction looked at every node of the pass
// (upgraded and locked, to find it consumed). Now the step order is the inverse of the
// sorted order, the claimed ops come from one merge of two ascending lists of ids, the
// reads are renumbered by one table (`Entries::reads_from_last`), and the compaction skips
// the ops the pass claimed: 6.3 ms.

/// A backward pass planned and run under `budget` (NOTE \[budget\]): returns, for each node
/// of `order`, the actions to carry out before finishing it (in `order`'s order; empty for
/// leaves), the bytes held when the pass starts, the budget the pass runs within, and the
/// pass's view, for [`after_pass`](super::after_pass).
///
/// # Panics
/// When the graph cannot fit the budget, before anything ran.
pub(crate) fn plan_pass(
    order: &[Arc<dyn GraphNode>],
    budget: u64,
) -> (PassActions, u64, u64, Pending) {
    let full_budget = budget;
    // NOTE [pass-facts]: what the pass keeps of each node is a few facts; a node is
    // described in full (its reads, its shared constants) only where the pass's view is
    // built from descriptions. Holding every description through the pass (about 200 bytes
    // a node) was most of a followed step's backward peak over its forward pass: 1.0 of
    // 1.67 MB on Burn's `Lstm` at 128 steps. The facts are read without a description
    // (`GraphNode::schedule_facts`): describing every node of a followed pass to keep five
    // fields was 1.8% of a step of that `Lstm` over 1,024 steps under `Budget(u64::MAX)`.
    let mut entries: Vec<Facts> = Vec::with_capacity(order.len());
    entries.extend(
        order
            .iter()
            .enumerate()
            .filter_map(|(pos, n)| n.schedule_facts().map(|node| Facts { pos, node })),
    );
    let mut by_id: Vec<usize> = (0..entries.len()).collect();
    by_id.sort_unstable_by_key(|&k| entries[k].id);
    // The view index of a claimed node, by its id: `by_id` is sorted by id. A map of them
    // was 0.14 MB of a followed step's heap peak on Burn's `Lstm` under half of K (128
    // steps, 4,737 ops; NOTE [pass-facts]).
    let index = |id: &NodeId| -> Option<u32> {
        by_id
            .binary_search_by_key(id, |&k| entries[k].id)
            .ok()
            .map(|i| i as u32)
    };
    // NOTE [recorded-size]: the session's entry of an op it recorded: its measured time,
    // and its output's size. A node's description says 0 bytes for a value that nothing
    // needed (the slot holds no size), where the session recorded the output's size: a
    // forward pass under a budget whose loss is taken outside it (`sum` reads no value)
    // then made a view whose last node had 0 bytes, and every later step departed from
    // its plan at its last op (and listed every entry again for the online planner).
    let recorded = |id: NodeId| -> Option<(f64, u64)> {
        with_thread(|thread| {
            let cell = thread.session.borrow();
            let session = cell.as_ref()?;
            let i = session.position(id)? as usize;
            Some((session.nodes.cost(i), session.nodes.bytes(i)))
        })
    };
    let to_index = |ids: &[NodeId]| -> Vec<u32> {
        ids.iter()
            .map(|id| {
                index(id).unwrap_or_else(|| {
                    panic!("remat internal error: a producer of a pass is not in the pass")
                })
            })
            .collect()
    };
    let mut held = Vec::new();
    let mut held_bytes = 0;
    for (i, &k) in by_id.iter().enumerate() {
        let e = &entries[k];
        if e.held {
            held.push(i as u32);
            held_bytes += e.bytes;
        }
        held_bytes += e.fixed_bytes;
    }
    // NOTE [pass-index]: entry `k` is view node `i` where `by_id[i] == k`: the step order is
    // `by_id`'s inverse, made in one sweep.
    let mut step_order: Vec<u32> = vec![0; entries.len()];
    for (i, &k) in by_id.iter().enumerate() {
        step_order[k] = i as u32;
    }
    // When this thread's session recorded exactly the pass's ops, its nodes are the view:
    // they carry the forward pass's measured times and marks, and match the plan the step
    // may have followed (the pass's own description agrees with them on everything else).
    // When it recorded the pass's first ops and the rest came under another policy (a
    // forward pass under `with_policy(Budget(..))` and the loss outside it, say), the plan
    // the step followed still applies: its view was this pass's, and the signature and the
    // held values are checked below.
    // The session's ops the pass did not claim are the step's side ops (NOTE [side-ops] in
    // `state.rs`), listed when the session starts with the pass's first op.
    // NOTE [split-sides]: the side ops' nodes, where the pass took the session's list.
    let mut split = None;
    let (session_view, follow, sides, side_read, recorded_here, unclaimed_ops) =
        with_thread(|thread| {
            let mut cell = thread.session.borrow_mut();
            let Some(session) = cell.as_mut() else {
                return (None, None, Arc::from([]), false, false, Vec::new());
            };
            // Whether this thread recorded the pass's ops (its first, by id).
            let recorded_here = by_id
                .first()
                .is_some_and(|&k| session.position(entries[k].id).is_some());
            let side_read = std::mem::take(&mut session.free_side_read);
            // NOTE [pass-compaction].
            session.release_planner();
            // NOTE [pass-index]: which of the session's ops the pass claimed, by one merge of
            // two ascending lists of ids. The session's ops the pass claimed are the pass's
            // first ops (the rest, a loss taken outside the budget, say, came after) when the
            // session's first op is the pass's and no op of the pass outside the session comes
            // before one inside it.
            let (side, found) = unclaimed(&session.ids, by_id.iter().map(|&k| entries[k].id));
            let prefix = side.first().is_some_and(|&s| !s) && found.leading == found.matched;
            let sides: Arc<[Side]> = if prefix {
                side_ops(&session.nodes, &side, &session.quiet, &session.read_outside)
            } else {
                Arc::from([])
            };
            let aligned = prefix && session.ids.len() == by_id.len() + sides.len();
            let follow = session.follow.take().filter(|_| prefix);
            // NOTE [followed-view]: a step that followed its plan to the end recorded the plan's
            // view op for op: that view is the pass's, shared, not built again (on Burn's
            // `Lstm`, 4,700 ops, each copy of a view is about 0.8 MB of the step's heap).
            let followed_view = follow
                .as_ref()
                .filter(|f| {
                    aligned
                        && f.plan.view.len() == by_id.len()
                        && f.plan.view.step_order() == step_order.as_slice()
                })
                .map(|f| f.plan.view.clone());
            // NOTE [pass-compaction]: when every op of the session is the pass's, its entries
            // are taken, not copied (the compaction below forgets them).
            let view = followed_view.map(Ok).or_else(|| {
                aligned
                    .then(|| {
                        let listed = session.nodes.listed();
                        if sides.is_empty() {
                            Some(std::mem::take(listed))
                        } else {
                            // NOTE [split-sides].
                            let mut nodes = std::mem::take(listed);
                            match split_sides(&mut nodes, &sides) {
                                Some(side_nodes) => {
                                    split = Some(side_nodes);
                                    Some(nodes)
                                }
                                None => {
                                    *listed = nodes;
                                    None
                                }
                            }
                        }
                    })
                    .flatten()
                    .map(Err)
            });
            (view, follow, sides, side_read, recorded_here, side)
        });
    // The pass's inner backend, when it has one (a graph may span backends: NOTE
    // [op-times] in `cost.rs`, replay times are per backend).
    let mut backends = order.iter().map(|n| n.backend());
    let first = backends.next();
    let backend = first.filter(|&b| backends.all(|other| other == b));
    let mut view: Arc<GraphView> = match session_view {
        Some(Ok(view)) => view,
        described => {
            let describe = |e: &Facts| {
                order[e.pos].schedule_entry().unwrap_or_else(|| {
                    panic!("remat internal error: a node of a pass has no description")
                })
            };
            // NOTE [pass-facts]: of a node's description, only its shared constants are kept
            // past it (all descriptions held at once were 0.15 MB of the first step's heap
            // peak on Burn's `Lstm` under half of K, 32 steps).
            let mut shared: Vec<Shared> = Vec::with_capacity(entries.len());
            let mut nodes = match described {
                Some(Err(nodes)) => {
                    shared.extend(entries.iter().map(|e| describe(e).shared));
                    nodes
                }
                _ => {
                    let mut nodes: Vec<Option<planner::Node>> = vec![None; entries.len()];
                    for facts in &entries {
                        let e = describe(facts);
                        let i = index(&e.id).expect("a claimed node is indexed");
                        let mut reads = to_index(&e.step_reads);
                        if e.reads_output {
                            reads.push(i);
                        }
                        let (cost, bytes) =
                            recorded(e.id).unwrap_or_else(|| (estimate(e.cost, e.bytes), e.bytes));
                        nodes[i as usize] = Some(
                            planner::Node::new(e.name, bytes, cost)
                                .inputs(to_index(&e.inputs))
                                .step_reads(reads)
                                .replayable(e.replayable)
                                .fixed_bytes(e.fixed_bytes),
                        );
                        shared.push(e.shared);
                    }
                    nodes
                        .into_iter()
                        .map(|n| n.expect("every view node is described"))
                        .collect()
                }
            };
            charge_last_holders(&mut nodes, &shared, &by_id);
            smooth_costs(&mut nodes, backend);
            Arc::new(
                GraphView::with_step_order(nodes, step_order.clone()).unwrap_or_else(|e| {
                    panic!(
                        "remat internal error: a backward pass gave the planner an invalid \
                         view: {e}"
                    )
                }),
            )
        }
    };
    if let Some(side_nodes) = split {
        with_thread(|thread| {
            if let Some(session) = thread.session.borrow_mut().as_mut() {
                session.nodes = Entries::after_pass(view.clone(), sides.clone(), side_nodes);
            }
        });
    }
    // Held values that no step and no replay of this pass reads (kept for a graph that was
    // dropped, say) are dropped now, as every pass drops unneeded backups.
    let read = read_in_pass(&view);
    held.retain(|&v| {
        if read[v as usize] {
            return true;
        }
        held_bytes -= order[entries[by_id[v as usize]].pos].scheduled_free();
        false
    });
    // Other graphs of this thread recorded under a budget and still alive (a second loss
    // whose backward runs later, say) hold bytes the whole time: the pass plans within what
    // they leave. When that is too little, the values of theirs that can be rebuilt go
    // first (their own passes rebuild them).
    let mut outside = outside_bytes(&unclaimed_ops, false);
    let mut room = budget.saturating_sub(outside);
    // The online plan within what they leave, made once: it also says whether that is enough.
    let mut within_outside = None;
    if outside > 0 {
        match planner::online_steps(&view, &held, room) {
            Ok(steps) => within_outside = Some(steps),
            Err(_) => {
                outside = outside_bytes(&unclaimed_ops, true);
                room = budget.saturating_sub(outside);
            }
        }
    }
    let budget = room;
    // NOTE [pass-compaction]: the pass claimed its nodes, so the session's online planner and
    // entries of them are of no more use: the planner is freed as the pass starts, the
    // entries are taken for the pass's view where they are all the pass's, and the session
    // is compacted here, before the pass plans, not once it ends. Held beside the view and
    // the pass's own planning, they were 3.3 MB of the first step's heap on Burn's `Lstm`
    // under half of K (128 steps; SaveAll's step peaks at 6.1 MB).
    compact_thread_session(false, Some(&unclaimed_ops));
    drop(unclaimed_ops);
    // A step that followed its plan to the end has the plan's view (NOTE [followed-view]),
    // and so its signature: hashing a view of 37,900 ops twice a step (here and in
    // `ran_last`) was 2% of a followed step of Burn's `Lstm` over 1,024 steps.
    let mut signature = match &follow {
        Some(f) if Arc::ptr_eq(&f.plan.view, &view) => f.plan.signature,
        _ => planner::signature(&view),
    };
    // NOTE [plans-across-threads] in `state.rs`: ops recorded on another thread may have
    // followed one of the process's plans of this graph (a view built from other op costs,
    // so matched by structure): the one whose forward part leaves what is held. Its view is
    // the pass's from then on: shared with the plan, not the copy built here.
    let mut follow = follow;
    if follow.is_none() && !recorded_here && outside == 0 {
        follow = shared_plans(|plans| plans.under(full_budget))
            .into_iter()
            .filter(|plan| same_graph(&plan.view, &view, &read))
            .map(|plan| Follow {
                plan,
                sides: Arc::from([]),
            })
            .find(|f| f.applies(f.plan.signature, full_budget, &held));
        if let Some(f) = &follow {
            view = f.plan.view.clone();
            signature = f.plan.signature;
        }
    }
    // Planned mode: the step followed a cached plan for this very graph through its forward
    // pass, and holds what the plan holds: carry out the plan's backward.
    let followed = follow
        .filter(|f| outside == 0 && f.applies(signature, full_budget, &held))
        .map(|f| {
            backward_chunks(
                f.plan.schedule.clone(),
                &f.plan.index,
                &entries,
                order.len(),
                false,
            )
        });
    // Otherwise the planner chooses from the state the forward pass left, or from the lean
    // state, whose rebuildable values are dropped here as it asks (before it plans from
    // there).
    // NOTE [first-step-plan] in `planner/backward.rs`.
    let mut next_plan = None;
    let per_node = followed.unwrap_or_else(|| {
        let planned = planner::plan_backward(
            &view,
            &held,
            budget,
            within_outside,
            |v| entries[by_id[v as usize]].replayable,
            |v| held_bytes -= order[entries[by_id[v as usize]].pos].scheduled_free(),
            &mut next_plan,
        );
        match planned {
            Ok(BackwardPlan::Online(steps)) => step_chunks(steps, &entries, order.len()),
            Ok(BackwardPlan::Whole(schedule)) => {
                let index = schedule.index();
                backward_chunks(Arc::new(schedule), &index, &entries, order.len(), true)
            }
            Err(planner::Error::Infeasible {
                min_budget_bytes, ..
            }) => {
                // NOTE [stopped-view]: the next step plans ahead from this graph.
                ran_last(
                    view.clone(),
                    signature,
                    sides.clone(),
                    side_read,
                    true,
                    None,
                );
                stop(
                    full_budget,
                    &planner::Error::Infeasible {
                        budget_bytes: full_budget,
                        min_budget_bytes: min_budget_bytes + outside,
                        lower_bound: false,
                    },
                    None,
                )
            }
            Err(error) => panic!(
                "remat internal error: the planner failed a pass otherwise than as too small: \
                 {error}"
            ),
        }
    });
    // View indices map back to positions in `order` as each chunk is carried out.
    let position: Vec<u32> = by_id.iter().map(|&k| entries[k].pos as u32).collect();
    let per_node = PassActions {
        chunks: per_node,
        position,
    };
    LAST_BUDGET.store(full_budget, Ordering::Relaxed);
    // Plan the next steps of this graph once (planned mode; they follow the plan from their
    // first op), after this pass: its replays are timed by then (NOTE [replay-times]).
    let cached = with_thread(|thread| thread.memory.borrow_mut().has_plan(signature, full_budget));
    let pending = Pending {
        view,
        signature,
        backend,
        budget: full_budget,
        plan: !cached,
        samples: cost::replay_samples(),
        sides,
        side_read,
        grads: None,
        recorded_elsewhere: !recorded_here,
        // Made under the whole budget (no other graph held part of it).
        next_plan: next_plan.filter(|_| budget == full_budget),
    };
    (per_node, held_bytes, budget, pending)
}

/// How many of a pass's claimed ids a session's ids hold ([`unclaimed`]).
#[derive(Debug, PartialEq, Eq)]
struct Found {
    /// Held by the session.
    matched: usize,
    /// Held by the session before the first one that is not.
    leading: usize,
}

/// For each of a session's `ids` (ascending), whether the pass left it out (NOTE
/// \[pass-index\]), and how many of the pass's `claimed` ids (ascending) it holds: one merge.
fn unclaimed(ids: &[NodeId], claimed: impl Iterator<Item = NodeId>) -> (Vec<bool>, Found) {
    let mut side = vec![true; ids.len()];
    let mut found = Found {
        matched: 0,
        leading: 0,
    };
    let mut missed = false;
    let mut at = 0;
    for id in claimed {
        while at < ids.len() && ids[at] < id {
            at += 1;
        }
        if at < ids.len() && ids[at] == id {
            side[at] = false;
            found.matched += 1;
            found.leading += usize::from(!missed);
            at += 1;
        } else {
            missed = true;
        }
    }
    (side, found)
}

/// Which of `view`'s values a step or a replay of the pass reads.
fn read_in_pass(view: &GraphView) -> Vec<bool> {
    let mut read = vec![false; view.len()];
    for node in view.nodes() {
        let replay: &[u32] = if node.replayable { &node.inputs } else { &[] };
        for &v in node.step_reads.iter().chain(replay) {
            read[v as usize] = true;
        }
    }
    read
}

/// Whether two views are the same graph, their op costs aside: the same nodes in the same
/// step order. A value nothing reads in `b` (`read`: [`read_in_pass`] of `b`; the loss) is
/// compared by its op and inputs only: a pass built from descriptions sizes it 0 bytes and
/// not replayable, where the recording session has its size (NOTE \[recorded-size\]).
fn same_graph(a: &GraphView, b: &GraphView, read: &[bool]) -> bool {
    if a.len() != b.len() || a.step_order() != b.step_order() {
        return false;
    }
    a.nodes()
        .iter()
        .zip(b.nodes())
        .zip(read)
        .all(|((x, y), &read)| {
            if read {
                planner::same_structure(x, y)
            } else {
                x.name == y.name
                    && x.inputs == y.inputs
                    && x.step_reads == y.step_reads
                    && x.fixed_bytes == y.fixed_bytes
            }
        })
}

/// A pass's view, kept by the pass until it ends ([`after_pass`](super::after_pass)): then
/// it is planned for the next steps (when `plan`) and kept for
/// [`tradeoff`](super::tradeoff); its costs are brought up to date first if the pass timed
/// replays (`cost::replay_samples` passed `samples`). The pass owns it: a backward pass run
/// inside another one (in a custom op's backward, say) has its own.
pub(crate) struct Pending {
    pub(super) view: Arc<GraphView>,
    /// The view's signature ([`planner::signature`]; its costs do not count).
    pub(super) signature: u64,
    /// The pass's inner backend, when it ran on one.
    pub(super) backend: Option<TypeId>,
    pub(super) budget: u64,
    pub(super) plan: bool,
    pub(super) samples: u64,
    /// The step's ops the pass did not claim (NOTE \[side-ops\] in `state.rs`).
    pub(super) sides: Arc<[Side]>,
    /// An op of the step read a free side op: the view is not the graph as recorded
    /// online, so no plan is made of it (NOTE \[side-view\] in `state.rs`).
    pub(super) side_read: bool,
    /// The gradients the pass held, step by step, once it completed (NOTE
    /// \[grads-in-flight\] in `planner/grads.rs`).
    pub(crate) grads: Option<planner::GradProfile>,
    /// Another thread recorded the pass's ops (NOTE \[plans-across-threads\] in
    /// `state.rs`).
    pub(super) recorded_elsewhere: bool,
    /// The plan of `view` under `budget` the pass made on its way (NOTE
    /// \[first-step-plan\] in `planner/backward.rs`), cached for the next steps in place of
    /// making it again when the view is unchanged.
    pub(super) next_plan: Option<planner::Schedule>,
}

// NOTE [shared-chunks]: a pass carried out a copy of its actions cut per node (a vector
// each), in the order's positions. Following a cached plan, that copy was the plan's whole
// backward a second time: at the smallest budget of Burn's `Lstm` on 1,024 steps, 2.26M
// actions (18 MB beside the cache's). A pass's actions are now one list, the cached
// schedule itself where the step followed one, with a range of it per position of the
// order; each chunk is renumbered as it is carried out.

/// The actions of a pass in view node numbers (NOTE \[shared-chunks\]): for each position
/// of the pass's order, the range of `actions` to carry out before finishing that node.
pub(crate) struct Chunks {
    actions: Arc<planner::Schedule>,
    ranges: Vec<Range<u32>>,
}

/// A planned pass's actions (see [`plan_pass`]).
pub(crate) struct PassActions {
    chunks: Chunks,
    /// The order's position of each view node.
    position: Vec<u32>,
}

impl PassActions {
    /// The actions to carry out before finishing the node at position `pos` of the order,
    /// on positions of the order (inline for most nodes: no allocation per node).
    pub(crate) fn at(&self, pos: usize) -> SmallVec<[Action; 8]> {
        let r = &self.chunks.ranges[pos];
        self.chunks.actions.actions()[r.start as usize..r.end as usize]
            .iter()
            .map(|a| a.with_node(self.position[a.node() as usize]))
            .collect()
    }
}

/// A whole-step schedule's backward cut into the pass's per-node chunks: the actions before
/// and at each step, at the step's position in the order (`entries`, `len` positions). With
/// `forward_ran`, the drops right after the last forward op are the backward's (a schedule
/// made after that forward pass ran, which carried out only its keeps).
fn backward_chunks(
    schedule: Arc<planner::Schedule>,
    index: &ScheduleIndex,
    entries: &[Facts],
    len: usize,
    forward_ran: bool,
) -> Chunks {
    let actions = schedule.actions();
    let mut ranges: Vec<Range<u32>> = vec![0..0; len];
    for (p, Facts { pos, .. }) in entries.iter().enumerate() {
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
            ranges[*pos] = range.start as u32..range.end as u32;
        }
    }
    Chunks {
        actions: schedule,
        ranges,
    }
}

/// Online eviction's actions for a pass, a range per step, as the pass's chunks: each
/// step's range moved to the step's position in the order (`entries`, `len` positions), in
/// place.
fn step_chunks(steps: planner::OnlineSteps, entries: &[Facts], len: usize) -> Chunks {
    let planner::OnlineSteps {
        actions,
        mut ranges,
    } = steps;
    ranges.reserve_exact(len - ranges.len());
    ranges.resize(len, 0..0);
    // From the last step: a step's position is at or after its index in the step order, and
    // before the next step's position.
    for (k, Facts { pos, .. }) in entries.iter().enumerate().rev() {
        let range = std::mem::replace(&mut ranges[k], 0..0);
        ranges[*pos] = range;
    }
    Chunks {
        actions: Arc::new(actions),
        ranges,
    }
}

/// The bytes held by this thread's live graphs recorded under a budget, outside the pass:
/// of the session's ops `left_out` marks or does not list (by session position: NOTE
/// \[pass-index\]), the values held and the constants of those not yet stepped. With
/// `evict`, the values among them that can be rebuilt are dropped first.
fn outside_bytes(left_out: &[bool], evict: bool) -> u64 {
    let outside: Vec<(Arc<dyn BudgetNode>, u64, u64, bool)> = with_thread(|thread| {
        let cell = thread.session.borrow();
        let Some(session) = cell.as_ref() else {
            return Vec::new();
        };
        session
            .handles
            .iter()
            .enumerate()
            .filter(|&(at, _)| left_out.get(at) != Some(&false))
            .filter_map(|(at, handle)| {
                let node = handle.upgrade()?;
                let entries = &session.nodes;
                (!node.is_consumed()).then(|| {
                    (
                        node,
                        entries.bytes(at),
                        entries.fixed_bytes(at),
                        entries.replayable(at),
                    )
                })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// NOTE [pass-index]: the merge marks the session's ops the pass did not claim, and
    /// counts the pass's ops the session holds, and those before the first it does not.
    #[test]
    fn the_merge_finds_the_pass_s_ops_among_the_session_s() {
        let ids = |values: &[u64]| -> Vec<NodeId> {
            values.iter().map(|&value| NodeId { value }).collect()
        };
        let session = ids(&[2, 4, 6, 8]);
        let found = |claimed: &[u64]| unclaimed(&session, ids(claimed).into_iter());
        let counts = |matched, leading| Found { matched, leading };
        // The session's ops, then a loss's outside it.
        assert_eq!(
            found(&[2, 4, 8, 9, 10]),
            (vec![false, false, true, false], counts(3, 3))
        );
        // An op outside the session before some inside it.
        assert_eq!(
            found(&[1, 2, 6]),
            (vec![false, true, false, true], counts(2, 0))
        );
        assert_eq!(found(&[4, 5, 6]).1, counts(2, 1));
        assert_eq!(found(&[]), (vec![true; 4], counts(0, 0)));
    }

    #[test]
    fn equal_ops_are_costed_at_their_mean_and_the_smoothing_is_idempotent() {
        let mut nodes = vec![
            planner::Node::new("exp", 64, 100.0),
            planner::Node::new("exp", 64, 300.0),
            planner::Node::new("exp", 128, 900.0),
            planner::Node::new("sin", 64, 50.0),
            planner::Node::new("exp", 64, 200.0),
        ];
        // No inner backend: measured replay times are not asked for.
        smooth_costs(&mut nodes, None);
        let costs: Vec<f64> = nodes.iter().map(|n| n.cost).collect();
        // Same name and output size: one mean; another size or name keeps its own.
        assert_eq!(costs, [200.0, 200.0, 900.0, 50.0, 200.0]);
        smooth_costs(&mut nodes, None);
        let again: Vec<f64> = nodes.iter().map(|n| n.cost).collect();
        assert_eq!(again, costs);
    }

    /// NOTE [plans-across-threads]: a view built from descriptions is the recording
    /// thread's graph when only costs and the unread loss's size differ; any other
    /// difference, in a value something reads, is another graph.
    #[test]
    fn same_graph_ignores_costs_and_the_unread_loss_s_size_only() {
        let nodes = |loss_bytes, loss_replayable, b_bytes| {
            vec![
                planner::Node::new("a", 8, 1.0),
                planner::Node::new("b", b_bytes, 2.0)
                    .inputs([0])
                    .step_reads([0]),
                planner::Node::new("sum", loss_bytes, 3.0)
                    .inputs([1])
                    .replayable(loss_replayable),
            ]
        };
        let view = |n| GraphView::new(n).unwrap();
        let recorded = view(nodes(4, true, 8));
        let same_graph = |a: &GraphView, b: &GraphView| same_graph(a, b, &read_in_pass(b));
        let mut costs = nodes(4, true, 8);
        costs.iter_mut().for_each(|n| n.cost *= 3.0);
        assert!(same_graph(&recorded, &view(costs)));
        assert!(same_graph(&recorded, &view(nodes(0, false, 8))));
        // A value a step reads, sized otherwise: another graph.
        assert!(!same_graph(&recorded, &view(nodes(4, true, 16))));
        // Another op where the loss was, or one node more: another graph.
        let mut renamed = nodes(4, true, 8);
        renamed[2].name = "mean";
        assert!(!same_graph(&recorded, &view(renamed)));
        let mut longer = nodes(4, true, 8);
        longer.push(planner::Node::new("c", 8, 1.0).inputs([2]));
        assert!(!same_graph(&recorded, &view(longer)));
    }

    /// NOTE [split-sides]: a session `a, s1, b, s2, c` with side ops `s1` (reading `a`) and
    /// `s2` (reading `s1` and `b`): the pass takes `a, b, c` renumbered, in place, and the
    /// session keeps the side ops' nodes, read at their positions beside the view.
    #[test]
    fn side_ops_are_split_out_in_place_and_read_beside_the_view() {
        let side = |at, before| Side {
            at,
            before,
            name: "slice_assign",
            bytes: 64,
            free: true,
        };
        let sides: Arc<[Side]> = Arc::from([side(1, 1), side(3, 2)]);
        let session = vec![
            planner::Node::new("a", 8, 1.0),
            planner::Node::new("s1", 64, 0.5).inputs([0]),
            planner::Node::new("b", 8, 2.0).inputs([0]).step_reads([0]),
            planner::Node::new("s2", 64, 0.5).inputs([1, 2]),
            planner::Node::new("c", 8, 3.0).inputs([2]).step_reads([4]),
        ];
        let mut nodes = session.clone();
        let capacity = nodes.capacity();
        let side_nodes = split_sides(&mut nodes, &sides).expect("no pass node reads a side op");
        assert_eq!(
            nodes,
            [
                planner::Node::new("a", 8, 1.0),
                planner::Node::new("b", 8, 2.0).inputs([0]).step_reads([0]),
                planner::Node::new("c", 8, 3.0).inputs([1]).step_reads([2]),
            ]
        );
        assert_eq!(nodes.capacity(), capacity, "split in place, not copied");
        assert_eq!(side_nodes, [session[1].clone(), session[3].clone()]);
        let view = Arc::new(GraphView::new(nodes).unwrap());
        let entries = Entries::after_pass(view, sides.clone(), side_nodes);
        assert_eq!(entries.len(), 5);
        for (at, node) in session.iter().enumerate() {
            assert_eq!(entries.get(at).inputs, node.inputs, "entry {at}");
            assert_eq!(entries.bytes(at), node.bytes, "entry {at}");
        }
        // A pass node reading a side op: nothing is split.
        let mut reads_side = session.clone();
        reads_side[4].inputs = [3].into_iter().collect();
        let before = reads_side.clone();
        assert!(split_sides(&mut reads_side, &sides).is_none());
        assert_eq!(reads_side, before);
    }
}
