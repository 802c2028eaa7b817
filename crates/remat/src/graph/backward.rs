//! The backward pass: a topological order by dependency counts, two planning passes over
//! the saved values, then each node's step, consumers before producers.
//!
//! Cost: linear in nodes + edges. No recursion; no lock is held across steps (each node
//! locks only itself, and its inputs child-first while it reads them).
//!
//! The layers above reach into a pass only through [`PassHooks`]: a schedule that carries
//! the pass out instead of counted reads (the budget's, NOTE \[budget\] in
//! `checkpoint/budget/`), and a callback for each distributed leaf whose gradient is
//! complete (NOTE [distributed-backward] in `backend/distributed.rs`).

use core::any::TypeId;
use std::collections::HashMap;
use std::sync::Arc;

use burn_backend::distributed::DistributedParams;
use burn_backend::{Backend, TensorMetadata, tensor::FloatTensor};

use super::grads::Gradients;
use super::{GraphNode, IdBuildHasher, Node, NodeId};

/// What the layers above the graph give a backward pass.
pub(crate) trait PassHooks {
    /// Called once the pass's nodes are claimed and ordered, before any value is read or any
    /// distributed parameter registered: a schedule that carries the pass out, or `None` for
    /// the counted reads of the plain pass. May panic (a graph that cannot fit a budget):
    /// nothing has run then.
    fn schedule(&mut self, order: &[Arc<dyn GraphNode>]) -> Option<Box<dyn ScheduledPass>>;

    /// The gradient of distributed leaf `leaf` is complete: submit it under `params`. Every
    /// distributed leaf lives on the loss's inner backend (checked before the pass starts).
    fn leaf_gradient(&mut self, leaf: NodeId, params: &DistributedParams, grads: &mut Gradients);

    /// The gradient of leaf `leaf`, of the loss's inner backend, is complete (every consumer
    /// of the leaf has run its step), after any distributed submission (NOTE
    /// [complete-leaves] in `leaves.rs`).
    fn leaf_complete(&mut self, leaf: NodeId, grads: &mut Gradients);
}

/// A backward pass carried out by a schedule (see [`PassHooks::schedule`]).
pub(crate) trait ScheduledPass {
    /// Runs what the schedule does before node `i` of the order is finished (the node's
    /// step among it); `order` holds the nodes not finished yet.
    fn before_finish(
        &mut self,
        i: usize,
        order: &[Option<Arc<dyn GraphNode>>],
        grads: &mut Gradients,
    );

    /// After the last node was finished.
    fn after_pass(&mut self);
}

/// Runs backward from `root`, the value of `node` (`None`: untracked, no gradient).
///
/// # Panics
/// If the pass reaches a node an earlier pass consumed (NOTE [no-retain-graph]), or a
/// distributed parameter on another inner backend than the loss.
pub(crate) fn backward<B: Backend>(
    node: Option<Arc<Node<B>>>,
    primitive: FloatTensor<B>,
    hooks: &mut dyn PassHooks,
) -> Gradients {
    let device = primitive.device();
    let mut grads = match node {
        Some(node) => run::<B>(node, primitive, &device, hooks),
        // Untracked: nothing to differentiate.
        None => Gradients::new(),
    };
    // NOTE [distributed-backward] in `backend/distributed.rs`: every pass ends with the sync
    // collective, after its all-reduced gradients are synchronised (NOTE [lazy-collectives]).
    grads.synchronise_all();
    B::submit_sync_collective(&device);
    grads
}

/// The pass proper, from a tracked root.
fn run<B: Backend>(
    node: Arc<Node<B>>,
    root: FloatTensor<B>,
    device: &B::Device,
    hooks: &mut dyn PassHooks,
) -> Gradients {
    let mut grads = Gradients::new();
    let ones = B::float_ones(root.shape(), device, root.dtype().into());
    drop(root);
    grads.register::<B>(node.id, ones);

    let order = topological_order(node);
    // The distributed leaves, by position in the order, read once: what is registered is
    // what is submitted (NOTE [distributed-backward]).
    let distributed: Vec<(usize, DistributedParams)> = order
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.distributed().map(|params| (i, params)))
        .collect();
    if let Some((i, _)) = distributed
        .iter()
        .find(|(i, _)| order[*i].backend() != TypeId::of::<B>())
    {
        for n in &order {
            n.unclaim();
        }
        panic!(
            "remat: distributed parameter {} is a tensor of another inner backend than the \
             loss ({}); gradient synchronisation runs on the loss's backend, so every \
             distributed parameter must live there (as in Burn)",
            order[*i].describe(),
            core::any::type_name::<B>()
        );
    }
    // NOTE [budget] in `checkpoint/budget/`: a pass over nodes recorded under a budget is
    // planned whole before any step runs (a graph that cannot fit panics here), then carried
    // out node by node.
    let scheduled = hooks.schedule(&order);
    if !distributed.is_empty() {
        let params = distributed.iter().map(|(_, p)| p.clone()).collect();
        B::register_sync_parameters(device, params);
    }
    if let Some(mut scheduled) = scheduled {
        let mut slots: Vec<Option<Arc<dyn GraphNode>>> = order.into_iter().map(Some).collect();
        let mut marked = distributed.iter().peekable();
        let mut undrained = Vec::new();
        for i in 0..slots.len() {
            scheduled.before_finish(i, &slots, &mut grads);
            let n = slots[i].take().expect("each node is finished once");
            if let Some((_, params)) = marked.next_if(|(at, _)| *at == i) {
                hooks.leaf_gradient(n.id(), params, &mut grads);
            }
            if n.is_leaf() && n.backend() == TypeId::of::<B>() {
                hooks.leaf_complete(n.id(), &mut grads);
            }
            if !n.finish() {
                undrained.push(n.describe());
            }
        }
        scheduled.after_pass();
        check_drained(&undrained);
        return grads;
    }
    for n in &order {
        n.plan_reads();
    }
    for n in &order {
        n.plan_rebuild();
    }
    // Each node is finished, and released, as soon as its step has run: every read of its
    // value (its consumers' steps and replays, and its own step) is behind it, and a node
    // the user no longer holds is freed before the steps that follow.
    let mut marked = distributed.iter().peekable();
    let mut undrained = Vec::new();
    for (i, n) in order.into_iter().enumerate() {
        n.step(&mut grads);
        if let Some((_, params)) = marked.next_if(|(at, _)| *at == i) {
            // A leaf comes after all of its consumers: its gradient is complete.
            hooks.leaf_gradient(n.id(), params, &mut grads);
        }
        if n.is_leaf() && n.backend() == TypeId::of::<B>() {
            hooks.leaf_complete(n.id(), &mut grads);
        }
        if !n.finish() {
            undrained.push(n.describe());
        }
    }
    check_drained(&undrained);
    grads
}

/// Panics (test and debug builds) when a node kept a value or a count after its step.
fn check_drained(undrained: &[String]) {
    if cfg!(any(feature = "export_tests", debug_assertions)) && !undrained.is_empty() {
        panic!(
            "remat internal error: the checkpointer is not drained after backward: {}",
            undrained.join(", ")
        );
    }
}

/// NOTE [no-retain-graph]: as in Burn, a backward pass consumes the ops it runs through: their
/// inputs and saved values are released as it goes, so a second pass through them cannot
/// work and panics with a message that says so. The panic comes before anything changes, so
/// a graph whose ancestry is partly consumed is refused whole and its fresh branches stay
/// usable.
///
/// Burn serialises whole backward passes under one global lock; remat does not, so two passes
/// racing on two threads through a shared recorded op are told apart by the traversal: it
/// claims each op node as it expands it (leaves are shared freely: each graph that reads a
/// parameter has its own pass). A pass that meets a node claimed before (by an earlier pass,
/// or by one running now) hands its own claims back and panics, before it has read or
/// released any value; the other pass runs to the end with exact gradients. Traversals claim
/// under one process-wide lock, held for the traversal only (linear in the graph, never across
/// a step), so that of two racing passes exactly one wins.
static CLAIMS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Every node reachable from `root`, each after all of its consumers (Kahn's algorithm),
/// each op node claimed for this pass (NOTE [no-retain-graph]).
fn topological_order(root: Arc<dyn GraphNode>) -> Vec<Arc<dyn GraphNode>> {
    // Positions are `u32` and each list goes once it is of no more use: the traversal runs
    // where a step under a budget holds the most, beside every kept value and the budget
    // session's online planner (0.58 MB of usize lists and a map kept to the end on Burn's
    // `Lstm` over 128 steps, 4,737 ops, where SaveAll's step peaks at 6.0 MB).
    let at = |i: usize| u32::try_from(i).expect("remat: a graph of more than u32::MAX nodes");
    let mut index: HashMap<NodeId, u32, IdBuildHasher> = HashMap::default();
    let mut nodes: Vec<Arc<dyn GraphNode>> = Vec::new();
    // Parents of node i are `edges[starts[i]..starts[i + 1]]` (nodes are expanded in index
    // order, so each node's parents are contiguous).
    let mut edges: Vec<u32> = Vec::new();
    let mut starts: Vec<u32> = Vec::new();
    let mut consumers: Vec<u32> = Vec::new();

    index.insert(root.id(), 0);
    nodes.push(root);
    consumers.push(0);

    let mut scratch: Vec<Arc<dyn GraphNode>> = Vec::new();
    let claiming = CLAIMS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut next = 0;
    while next < nodes.len() {
        starts.push(at(edges.len()));
        if !nodes[next].claim_and_push_parents(&mut scratch) {
            for claimed in &nodes[..next] {
                claimed.unclaim();
            }
            drop(claiming);
            panic!(
                "remat: backward reached {}, which an earlier backward pass already consumed \
                 (or one running at the same time on another thread). Graphs are not retained \
                 after backward (as in Burn): run the forward pass again before the next \
                 backward, or call backward once on the sum of the losses.",
                nodes[next].describe()
            );
        }
        for parent in scratch.drain(..) {
            let i = *index.entry(parent.id()).or_insert_with(|| {
                nodes.push(parent);
                consumers.push(0);
                at(nodes.len() - 1)
            });
            consumers[i as usize] += 1;
            edges.push(i);
        }
        next += 1;
    }
    drop(claiming);
    drop(index);
    starts.push(at(edges.len()));

    let mut order: Vec<u32> = Vec::with_capacity(nodes.len());
    let mut ready = vec![0u32];
    while let Some(i) = ready.pop() {
        order.push(i);
        let i = i as usize;
        for &p in &edges[starts[i] as usize..starts[i + 1] as usize] {
            consumers[p as usize] -= 1;
            if consumers[p as usize] == 0 {
                ready.push(p);
            }
        }
    }
    drop((edges, starts, consumers, ready));
    debug_assert_eq!(
        order.len(),
        nodes.len(),
        "remat internal error: cycle in graph"
    );
    let mut slots: Vec<Option<Arc<dyn GraphNode>>> = nodes.into_iter().map(Some).collect();
    order
        .into_iter()
        .map(|i| slots[i as usize].take().expect("each node appears once"))
        .collect()
}
