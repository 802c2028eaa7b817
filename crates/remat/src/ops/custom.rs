//! Burn's API for ops with a hand-written backward (`burn_autodiff::ops::Backward` and
//! friends), on remat's engine: crates that extend Burn with their own differentiable ops
//! (Burn's custom-kernel guide, `burn-signal`'s FFTs) compile and run unchanged.
//!
//! ```text
//! let guard = x.node();                                   // before x is consumed
//! let out = inner_kernel(x.into_primitive());
//! match MyOp.prepare::<C>([guard]).compute_bound().stateful() {
//!     OpsKind::Tracked(mut prep) => { let id = prep.checkpoint(&y); prep.finish(state, out) }
//!     OpsKind::UnTracked(prep) => prep.finish(out),
//! }
//! ```
//!
//! The op becomes a node of remat's graph whose rule calls the user's
//! [`Backward::backward`]: the output's gradient is placed in the [`Gradients`] container
//! under the op's node for [`Gradients::consume`], and what the backward registers for its
//! parents flows on through the engine. Values checkpointed with [`OpsPrep::checkpoint`] are
//! read in backward like any rule's saved values and handed out by
//! [`Checkpointer::retrieve_node_output`].
//!
//! NOTE [custom-ops-are-kept]: remat cannot replay a custom op's forward (it is the caller's
//! code). A `compute_bound()` op is therefore not replayable: its output is kept when a later
//! op reads it, under every policy and inside regions. A `memory_bound()` op whose
//! `retro_forward(..)` reads `parents([..])` that are all tracked tensors of the op's backend
//! is replayable: the policy places it like a built-in cheap op (Balanced, RecomputeAll and
//! regions drop its output), and a replay runs the retro-forward on the parents' values,
//! rebuilt first if they were dropped. With an untracked parent it is compute-bound, as in
//! Burn. What an op checkpoints for its own backward is read like any saved value: kept, or
//! rebuilt when its producer was dropped.

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Shape};

use crate::checkpoint::strategy::CheckpointStrategy;
use crate::grads::Gradients;
use crate::graph::{self, Reads, Rule, Values, Vjp};
use crate::graph::{Cost, OpInfo};
use crate::graph::{Node as EngineNode, NodeId};
use crate::ops::record::{self, CustomInput};
use crate::tensor::AutodiffTensor;

/// Whether a node's gradient is wanted, as Burn's backward steps see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// A leaf that requires a gradient: its gradient is kept in the result.
    Grad,
    /// An op output on the way to a leaf: its gradient is consumed in backward.
    GradInBackward,
    /// No gradient.
    None,
}

impl Requirement {
    /// Whether no gradient is wanted.
    pub fn is_none(&self) -> bool {
        matches!(self, Requirement::None)
    }

    /// The requirement of an op's output from its inputs': none when no input wants a
    /// gradient, otherwise a gradient on the way to a leaf.
    pub fn from_nodes(nodes: &[NodeRef]) -> Self {
        if nodes.iter().all(|node| node.requirement.is_none()) {
            Requirement::None
        } else {
            Requirement::GradInBackward
        }
    }
}

/// A node as a custom op's backward sees it: its id (the key of its gradient in
/// [`Gradients`]) and whether its gradient is wanted.
#[derive(Debug)]
pub struct Node {
    /// The node's id.
    pub id: NodeId,
    /// Whether its gradient is wanted.
    pub requirement: Requirement,
}

/// A shared reference to a [`Node`] (Burn's `NodeRef`).
pub type NodeRef = Arc<Node>;

impl Node {
    /// The node, when its gradient is wanted.
    pub fn clone_if_require_grad(self: &Arc<Self>) -> Option<NodeRef> {
        (!self.requirement.is_none()).then(|| self.clone())
    }
}

/// A tensor's place in the graph, taken with [`AutodiffTensor::node`] before the tensor is
/// consumed and handed to [`Backward::prepare`].
#[derive(Debug)]
pub struct NodeGuard {
    id: NodeId,
    /// remat's node (an `EngineNode<B>`, type-erased so that the guard is backend-free).
    node: Option<Arc<dyn Any + Send + Sync>>,
}

impl NodeGuard {
    /// The input's node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    fn tracked(&self) -> bool {
        self.node.is_some()
    }

    fn engine_node<B: Backend>(self) -> Option<Arc<EngineNode<B>>> {
        self.node.map(|node| {
            node.downcast::<EngineNode<B>>().unwrap_or_else(|_| {
                panic!(
                    "remat: a custom op's input node {:?} belongs to another backend than the \
                     op; take each guard with `tensor.node()` from a tensor of the op's backend",
                    self.id
                )
            })
        })
    }
}

impl<B: Backend> AutodiffTensor<B> {
    /// The tensor's graph node, for a custom op's [`Backward::prepare`] (take it before the
    /// tensor is consumed). An untracked tensor has no node; the guard carries its
    /// [`id`](AutodiffTensor::id).
    pub fn node(&self) -> NodeGuard {
        NodeGuard {
            id: self.id(),
            node: self
                .node
                .clone()
                .map(|node| node as Arc<dyn Any + Send + Sync>),
        }
    }

    /// The inner tensor and the graph node.
    pub fn into_parts(self) -> (FloatTensor<B>, NodeGuard) {
        let guard = self.node();
        (self.primitive, guard)
    }

    /// The inner backend's tensor, borrowed.
    pub fn primitive(&self) -> &FloatTensor<B> {
        &self.primitive
    }
}

/// The state of a custom op in its backward step: its parents (`None` for those that need no
/// gradient), its own node and what its forward saved.
#[derive(Debug)]
pub struct Ops<S, const N: usize> {
    /// Parent nodes, `None` where no gradient is wanted.
    pub parents: [Option<NodeRef>; N],
    /// The op's own node: its gradient is `grads.consume::<B>(&ops.node)`.
    pub node: NodeRef,
    /// What the forward saved.
    pub state: S,
}

/// An op with a hand-written backward over `N` inputs (Burn's `Backward` trait).
pub trait Backward<B: Backend, const N: usize>: Send + core::fmt::Debug + Sized + 'static {
    /// What the forward saves for the backward.
    type State: Clone + Send + core::fmt::Debug + 'static;

    /// Consumes the op's gradient (`grads.consume::<B>(&ops.node)`) and registers its
    /// parents' (`grads.register::<B>(parent.id, grad)`).
    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    );

    /// Starts recording the op over its inputs' nodes.
    fn prepare<C: CheckpointStrategy>(
        self,
        nodes: [NodeGuard; N],
    ) -> OpsPrep<Self, B, Self::State, C, N> {
        OpsPrep {
            nodes,
            backward: self,
            cost: Cost::Compute,
            checkpoints: Vec::new(),
            retro: None,
            _types: PhantomData,
        }
    }
}

/// [`OpsPrep`] mode: nothing chosen yet.
#[derive(Debug)]
pub struct Init;
/// [`OpsPrep`] mode: memory-bound, waiting for its retro-forward.
#[derive(Debug)]
pub struct MemoryBound;
/// [`OpsPrep`] mode: memory-bound with a retro-forward, waiting for its parents.
#[derive(Debug)]
pub struct MemoryBoundRetroForward;
/// [`OpsPrep`] mode: ready for `stateful` / `stateless`.
#[derive(Debug)]
pub struct ComputePropertyDone;
/// [`OpsPrep`] mode: some input is tracked, the op is recorded.
#[derive(Debug)]
pub struct Tracked;
/// [`OpsPrep`] mode: no input is tracked, nothing is recorded.
#[derive(Debug)]
pub struct UnTracked;

/// The type parameters an [`OpsPrep`] carries only in its type.
type Marker<S, C, Mode> = PhantomData<fn() -> (S, C, Mode)>;

/// A custom op being recorded; `Mode` is the builder's state.
pub struct OpsPrep<BO, B: Backend, S, C, const N: usize, Mode = Init> {
    nodes: [NodeGuard; N],
    backward: BO,
    cost: Cost,
    checkpoints: Vec<(NodeId, AutodiffTensor<B>)>,
    /// The retro-forward and the tensors it reads, once both are known to be usable.
    retro: Option<Retro<B>>,
    _types: Marker<S, C, Mode>,
}

/// A memory-bound op's retro-forward and the tracked tensors it reads (under their node ids).
struct Retro<B: Backend> {
    forward: Box<dyn RetroForward>,
    parents: Vec<AutodiffTensor<B>>,
}

impl<BO, B: Backend, S, C, const N: usize, Mode> OpsPrep<BO, B, S, C, N, Mode> {
    fn into_mode<M>(self) -> OpsPrep<BO, B, S, C, N, M> {
        OpsPrep {
            nodes: self.nodes,
            backward: self.backward,
            cost: self.cost,
            checkpoints: self.checkpoints,
            retro: self.retro,
            _types: PhantomData,
        }
    }
}

impl<BO, B: Backend, S, C, const N: usize> OpsPrep<BO, B, S, C, N, Init> {
    /// The op is compute-bound (its output is kept when a later op reads it).
    pub fn compute_bound(self) -> OpsPrep<BO, B, S, C, N, ComputePropertyDone> {
        self.into_mode()
    }

    /// The op is memory-bound (cheap to recompute); give its retro-forward next.
    pub fn memory_bound(mut self) -> OpsPrep<BO, B, S, C, N, MemoryBound> {
        self.cost = Cost::Cheap;
        self.into_mode()
    }
}

impl<BO, B: Backend, S, C, const N: usize> OpsPrep<BO, B, S, C, N, MemoryBound> {
    /// The op's retro-forward: recomputes its output from the values of the tensors given
    /// next to [`parents`](OpsPrep::parents), when a policy dropped it (NOTE
    /// [custom-ops-are-kept]).
    pub fn retro_forward<R: RetroForward>(
        mut self,
        retro_forward: R,
    ) -> OpsPrep<BO, B, S, C, N, MemoryBoundRetroForward> {
        self.retro = Some(Retro {
            forward: Box::new(retro_forward),
            parents: Vec::new(),
        });
        self.into_mode()
    }
}

impl<BO, B: Backend, S, C, const N: usize> OpsPrep<BO, B, S, C, N, MemoryBoundRetroForward> {
    /// The tensors the retro-forward reads, under their node ids. When one of them needs no
    /// gradient (or lives on another backend) the op is compute-bound, as in Burn: its output
    /// is kept rather than recomputed.
    pub fn parents<'a, B2, A>(mut self, parents: A) -> OpsPrep<BO, B, S, C, N, ComputePropertyDone>
    where
        B2: Backend,
        A: IntoIterator<Item = &'a AutodiffTensor<B2>>,
    {
        let mut usable = Vec::new();
        for parent in parents {
            let same_backend = (parent as &dyn Any).downcast_ref::<AutodiffTensor<B>>();
            match same_backend.filter(|t| t.is_tracked()) {
                Some(tracked) => usable.push(tracked.clone()),
                None => {
                    self.retro = None;
                    self.cost = Cost::Compute;
                    return self.into_mode();
                }
            }
        }
        if let Some(retro) = &mut self.retro {
            retro.parents = usable;
        }
        self.into_mode()
    }
}

impl<BO, B, C, const N: usize> OpsPrep<BO, B, (), C, N, ComputePropertyDone>
where
    B: Backend,
    C: CheckpointStrategy,
    BO: Backward<B, N, State = ()>,
{
    /// Finishes an op without state.
    pub fn stateless(self, output: FloatTensor<B>) -> AutodiffTensor<B> {
        match self.stateful() {
            OpsKind::Tracked(prep) => prep.finish((), output),
            OpsKind::UnTracked(prep) => prep.finish(output),
        }
    }
}

impl<BO, B, S, C, const N: usize> OpsPrep<BO, B, S, C, N, ComputePropertyDone>
where
    B: Backend,
    S: Clone + Send + core::fmt::Debug + 'static,
    C: CheckpointStrategy,
    BO: Backward<B, N, State = S>,
{
    /// Tracked when some input is: then the op needs its state.
    pub fn stateful(self) -> OpsKind<BO, B, S, C, N> {
        if self.nodes.iter().any(NodeGuard::tracked) {
            OpsKind::Tracked(self.into_mode())
        } else {
            OpsKind::UnTracked(self.into_mode())
        }
    }
}

impl<BO, B: Backend, S, C, const N: usize> OpsPrep<BO, B, S, C, N, UnTracked> {
    /// The output, untracked.
    pub fn finish(self, output: FloatTensor<B>) -> AutodiffTensor<B> {
        AutodiffTensor::new(output)
    }
}

impl<BO, B, S, C, const N: usize> OpsPrep<BO, B, S, C, N, Tracked>
where
    B: Backend,
    S: Clone + Send + core::fmt::Debug + 'static,
    C: CheckpointStrategy,
    BO: Backward<B, N, State = S>,
{
    /// Keeps `tensor` for the backward, which reads it with
    /// [`Checkpointer::retrieve_node_output`] under the returned id.
    pub fn checkpoint(&mut self, tensor: &AutodiffTensor<B>) -> NodeId {
        let id = tensor.id();
        self.checkpoints.push((id, tensor.clone()));
        id
    }

    /// Records the op with its state and output.
    pub fn finish(self, state: S, output: FloatTensor<B>) -> AutodiffTensor<B> {
        let checkpoint_ids = self.checkpoints.iter().map(|(id, _)| *id).collect();
        let mut inputs: Vec<CustomInput<B>> = self
            .nodes
            .into_iter()
            .map(|guard| CustomInput::Parent(guard.engine_node::<B>()))
            .collect();
        inputs.extend(
            self.checkpoints
                .into_iter()
                .map(|(_, tensor)| CustomInput::Read(tensor)),
        );
        let retro = self.retro.map(|retro| {
            let ids = retro.parents.iter().map(AutodiffTensor::id).collect();
            inputs.extend(retro.parents.into_iter().map(CustomInput::Replay));
            (Mutex::new(Some(retro.forward)), ids)
        });
        let rule = CustomRule::<B, BO, N> {
            step: Mutex::new(Some((self.backward, state))),
            cost: self.cost,
            checkpoint_ids,
            retro,
            _backend: PhantomData,
        };
        record::record_custom(rule, inputs, C::BALANCED, output)
    }
}

/// A custom op's preparation, tracked or not.
pub enum OpsKind<BO, B: Backend, S, C, const N: usize> {
    /// Some input is tracked: finish with the state.
    Tracked(OpsPrep<BO, B, S, C, N, Tracked>),
    /// No input is tracked: finish without state.
    UnTracked(OpsPrep<BO, B, S, C, N, UnTracked>),
}

/// A retro-forward in a rule: it is `Send` only, the mutex makes the rule `Sync`. Taken out
/// while it runs, so that no lock is held over the user's code.
type SharedRetro = Mutex<Option<Box<dyn RetroForward>>>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The rule of a custom op: its backward is the user's.
struct CustomRule<B, BO: Backward<B, N>, const N: usize>
where
    B: Backend,
{
    /// Taken by the (single) backward step.
    step: Mutex<Option<(BO, BO::State)>>,
    cost: Cost,
    /// Ids of the checkpointed values, inputs `N..` in order.
    checkpoint_ids: Vec<NodeId>,
    /// The retro-forward and the ids of what it reads: the last inputs, in order.
    retro: Option<(SharedRetro, Vec<NodeId>)>,
    _backend: PhantomData<fn() -> B>,
}

impl<B: Backend, BO: Backward<B, N>, const N: usize> Rule<B> for CustomRule<B, BO, N> {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: "custom",
            cost: self.cost,
        }
    }

    /// A replay: the retro-forward on the values of its parents (the engine hands over
    /// exactly the inputs `replay_input` selects).
    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let Some((retro, ids)) = &self.retro else {
            panic!("remat internal error: a custom op without a retro-forward was replayed")
        };
        let mut states = BackwardStates::default();
        for (id, value) in ids.iter().zip(inputs) {
            states.save(*id, value);
        }
        let out = NodeId::new();
        // The user's code runs with the mutex released (NOTE [replay-unlocked] in
        // `graph/retrieve.rs`): a node is replayed at most once at a time.
        let forward = lock(retro).take().unwrap_or_else(|| {
            panic!("remat internal error: a custom op's retro-forward ran twice at once")
        });
        forward.forward(&mut states, out);
        let Some(output) = states.values.take(&out) else {
            panic!(
                "remat: a custom op's retro-forward ({forward:?}) did not save its output: it \
                 must call `states.save(out_node, output)` with the `out_node` it is given and \
                 a float tensor of the op's backend"
            )
        };
        *lock(retro) = Some(forward);
        output
    }

    fn reads(&self, _tracked: graph::Tracked) -> Reads {
        (0..self.checkpoint_ids.len())
            .fold(Reads::NOTHING, |reads, k| reads.with_input_if(N + k, true))
    }

    fn replayable(&self) -> bool {
        self.retro.is_some()
    }

    fn replay_input(&self, i: usize) -> bool {
        i >= N + self.checkpoint_ids.len()
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, grad: FloatTensor<B>) {
        let step = self
            .step
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some((backward, state)) = step else {
            return;
        };
        let mut checkpointer = Checkpointer::default();
        for (k, id) in self.checkpoint_ids.iter().enumerate() {
            checkpointer.insert(*id, cx.input(N + k));
        }
        let parents = core::array::from_fn(|i| {
            cx.input_node(i).map(|(id, leaf)| {
                Arc::new(Node {
                    id,
                    requirement: if leaf {
                        Requirement::Grad
                    } else {
                        Requirement::GradInBackward
                    },
                })
            })
        });
        let id = cx.node_id();
        let node = Arc::new(Node {
            id,
            requirement: Requirement::GradInBackward,
        });
        let grads = cx.grads();
        grads.register::<B>(id, grad);
        backward.backward(
            Ops {
                parents,
                node,
                state,
            },
            grads,
            &mut checkpointer,
        );
        // A backward that did not consume the op's gradient must not leave it in the result.
        drop(grads.remove::<B>(id));
    }
}

impl Gradients {
    /// Takes the gradient of `node` in a custom op's backward: removed for an op output,
    /// copied for a leaf (whose gradient stays in the result).
    ///
    /// # Panics
    /// If no gradient was registered for `node`, or it needs none.
    pub fn consume<B: Backend>(&mut self, node: &NodeRef) -> FloatTensor<B> {
        let grad = match node.requirement {
            Requirement::Grad => self.get::<B>(node.id),
            Requirement::GradInBackward => self.remove::<B>(node.id),
            Requirement::None => panic!(
                "remat: consume() on node {:?}, which needs no gradient (check the parent is \
                 `Some` before registering or consuming)",
                node.id
            ),
        };
        grad.unwrap_or_else(|| {
            panic!(
                "remat: no gradient registered for node {:?} (on this backend) when a custom \
                 op's backward consumed it",
                node.id
            )
        })
    }
}

/// Values by node id, handed out by clone (tensors are reference-counted).
#[derive(Default)]
struct ValueMap(HashMap<NodeId, Box<dyn Any + Send>>);

impl ValueMap {
    fn insert<T: Send + 'static>(&mut self, id: NodeId, value: T) {
        self.0.insert(id, Box::new(value));
    }

    fn get<T: Clone + Send + 'static>(&self, id: &NodeId) -> Option<T> {
        self.0
            .get(id)
            .and_then(|value| value.downcast_ref::<T>())
            .cloned()
    }

    fn take<T: Send + 'static>(&mut self, id: &NodeId) -> Option<T> {
        self.0
            .remove(id)
            .and_then(|value| value.downcast::<T>().ok())
            .map(|value| *value)
    }
}

impl core::fmt::Debug for ValueMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} values", self.0.len())
    }
}

/// The values a custom op checkpointed in its forward ([`OpsPrep::checkpoint`]), handed to
/// its backward.
#[derive(Debug, Default)]
pub struct Checkpointer {
    values: ValueMap,
}

impl Checkpointer {
    fn insert<T: Send + 'static>(&mut self, id: NodeId, value: T) {
        self.values.insert(id, value);
    }

    /// The value checkpointed under `node_id` (the id [`OpsPrep::checkpoint`] returned).
    ///
    /// # Panics
    /// If nothing of type `T` was checkpointed under `node_id` by this op.
    pub fn retrieve_node_output<T: Clone + Send + 'static>(&mut self, node_id: NodeId) -> T {
        self.values.get(&node_id).unwrap_or_else(|| {
            panic!(
                "remat: retrieve_node_output({node_id:?}): this custom op did not \
                 checkpoint a value of that type under that id; call \
                 `prep.checkpoint(&tensor)` in its forward and use the id it returns"
            )
        })
    }

    /// Whether nothing is checkpointed.
    pub fn is_empty(&self) -> bool {
        self.values.0.is_empty()
    }
}

/// Recomputes a memory-bound custom op's output from its parents' values (Burn's
/// `RetroForward`): run when a policy dropped the output and a backward step needs it (NOTE
/// [custom-ops-are-kept]).
pub trait RetroForward: core::fmt::Debug + Send + 'static {
    /// Reads the parents' values from `states` and saves the output under `out_node`.
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId);
}

/// Values by node, as a [`RetroForward`] reads and writes them.
#[derive(Debug, Default)]
pub struct BackwardStates {
    values: ValueMap,
}

impl BackwardStates {
    /// The value saved under `node_id`.
    ///
    /// # Panics
    /// If no value of type `T` was saved under `node_id`.
    pub fn get_state<T: Clone + Send + 'static>(&mut self, node_id: &NodeId) -> T {
        self.values
            .get(node_id)
            .unwrap_or_else(|| panic!("remat: no state of that type saved for {node_id:?}"))
    }

    /// Saves `saved_output` under `node_id`.
    pub fn save<T: Clone + Send + 'static>(&mut self, node_id: NodeId, saved_output: T) {
        self.values.insert(node_id, saved_output);
    }
}

/// A custom op's backward over one input: the op's gradient, mapped by `func`, goes to the
/// parent (when it wants one).
pub fn unary<B, F>(parents: [Option<NodeRef>; 1], node: NodeRef, grads: &mut Gradients, func: F)
where
    B: Backend,
    F: FnOnce(FloatTensor<B>) -> FloatTensor<B>,
{
    let grad = grads.consume::<B>(&node);
    let [parent] = parents;
    if let Some(parent) = parent {
        grads.register::<B>(parent.id, func(grad));
    }
}

/// A custom op's backward over two inputs: the op's gradient, mapped by `func_lhs` and
/// `func_rhs`, goes to the parents that want one.
pub fn binary<B, FLhs, FRhs>(
    parents: [Option<NodeRef>; 2],
    node: NodeRef,
    grads: &mut Gradients,
    func_lhs: FLhs,
    func_rhs: FRhs,
) where
    B: Backend,
    FLhs: FnOnce(FloatTensor<B>) -> FloatTensor<B>,
    FRhs: FnOnce(FloatTensor<B>) -> FloatTensor<B>,
{
    let grad = grads.consume::<B>(&node);
    match parents {
        [Some(lhs), Some(rhs)] => {
            grads.register::<B>(lhs.id, func_lhs(grad.clone()));
            grads.register::<B>(rhs.id, func_rhs(grad));
        }
        [Some(lhs), None] => grads.register::<B>(lhs.id, func_lhs(grad)),
        [None, Some(rhs)] => grads.register::<B>(rhs.id, func_rhs(grad)),
        [None, None] => {}
    }
}

/// Sums `grad` over the dimensions a broadcast expanded, back to `shape`.
pub fn broadcast_shape<B: Backend>(grad: FloatTensor<B>, shape: &Shape) -> FloatTensor<B> {
    crate::ops::common::unbroadcast::<B>(grad, shape)
}
