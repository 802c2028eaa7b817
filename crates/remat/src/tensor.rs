//! The float tensor primitive of [`Autodiff`](crate::Autodiff): an inner-backend tensor and,
//! when it is tracked, its node.
//!
//! The primitive does not depend on the checkpoint strategy: Burn's dispatch stores
//! `FloatTensor<Autodiff<B>>` and runs `Autodiff<B, BalancedCheckpointing>` ops on it.
//!
//! NOTE [untracked-ids]: Burn's custom-op API names tensors by id ([`AutodiffTensor::id`]):
//! a custom op saves its inputs' ids in its state and reads their values back under them.
//! A tracked tensor's id is its node's. An untracked tensor has no node (untracked ops record
//! nothing and allocate nothing), so its id lives in the tensor itself: minted the first time
//! it is asked for, or the first time the tensor is cloned, whichever comes first, and copied
//! into every clone from then on. The same tensor and its clones therefore give one id, and
//! an untracked op result that is never cloned nor asked for its id costs no mint.
//!
//! # Invariants
//! - `node` is `None` exactly when the tensor is untracked: ops on untracked tensors record
//!   nothing.
//! - `untracked_id` is unminted (zero) on tracked tensors; on an untracked tensor, once
//!   minted it never changes, and a clone carries the same id.
//! - An id with a [`Fill`] tag is minted only by [`AutodiffTensor::filled`], on a tensor
//!   that constructor of the fill made (NOTE [fill-constants]).
//!
//! NOTE [fill-constants]: an untracked tensor made by `zeros`, `ones` or `empty` is a
//! constant whose value any replay can make again for free. When a replay reads one and the
//! op's backward step does not, the op's edge keeps the recipe (the fill, the shape, the
//! dtype, the device), not the buffer (`Kept::fill` in `graph/node.rs`): the budget's model
//! charges it nothing, and the op's inner call owns the buffer, so an inner kernel may write
//! into it in place. A fill a backward step reads stays held (`edge` in `ops/record.rs`). Burn's `Lstm`
//! and `Gru` write their stacked output into an `empty` tensor of the whole output's size:
//! under a budget its first `slice_assign` held that buffer on its edge for a replay, 2 MiB
//! on a batch of 32 over 64 steps of 256 features, and Flex copied it, since the buffer was
//! shared. The tensor carries its fill in the top bits of its id (minted when it is made),
//! so that it stays two words: ops make new tensors, so a tensor never changes its value
//! under an id.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use burn_backend::{Backend, BackendTypes, TensorMetadata, tensor::FloatTensor};
use burn_std::{DType, Shape};

use burn_backend::distributed::{DistributedParamId, DistributedParams, TensorRef};

use crate::grads::{GradKey, Gradients};
use crate::graph::{Fill, GraphNode, Node, NodeId, NodeKind, PassHooks, ScheduledPass, backward};
use crate::leaves;

/// A float tensor of [`Autodiff`](crate::Autodiff) over inner backend `B`.
#[derive(Debug)]
pub struct AutodiffTensor<B: BackendTypes> {
    /// The inner backend's tensor.
    pub primitive: FloatTensor<B>,
    pub(crate) node: Option<Arc<Node<B>>>,
    /// The id of an untracked tensor, once minted (NOTE [untracked-ids]).
    untracked_id: UntrackedId,
}

impl<B: BackendTypes> Clone for AutodiffTensor<B> {
    fn clone(&self) -> Self {
        let untracked_id = match self.node {
            Some(_) => UntrackedId::unminted(),
            // INVARIANT: a clone carries the original's id, minted now if it was not yet.
            None => UntrackedId::minted(self.untracked_id.get()),
        };
        Self {
            primitive: self.primitive.clone(),
            node: self.node.clone(),
            untracked_id,
        }
    }
}

/// The id of an untracked tensor, minted on first use (NOTE [untracked-ids]). Zero means
/// not minted yet: [`NodeId::new`] never hands out zero.
#[derive(Debug)]
struct UntrackedId(AtomicU64);

impl UntrackedId {
    fn unminted() -> Self {
        Self(AtomicU64::new(0))
    }

    fn minted(id: NodeId) -> Self {
        Self(AtomicU64::new(id.value))
    }

    /// The id, minted now if it was not yet. Two threads asking at once get the same one.
    fn get(&self) -> NodeId {
        let value = self.0.load(Ordering::Relaxed);
        if value != 0 {
            return NodeId { value };
        }
        let fresh = NodeId::new();
        match self
            .0
            .compare_exchange(0, fresh.value, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => fresh,
            Err(value) => NodeId { value },
        }
    }
}

/// Where [`Fill`]'s tag sits in an untracked id: the top two bits, which ids minted by a
/// counter from 1 never reach.
const FILL_SHIFT: u32 = 62;

/// The tag of `fill` in an untracked id.
fn fill_tag(fill: Fill) -> u64 {
    match fill {
        Fill::Zeros => 1 << FILL_SHIFT,
        Fill::Ones => 2 << FILL_SHIFT,
        Fill::Empty => 3 << FILL_SHIFT,
    }
}

/// The fill an untracked id's tag names, if any.
fn fill_of_id(value: u64) -> Option<Fill> {
    match value >> FILL_SHIFT {
        1 => Some(Fill::Zeros),
        2 => Some(Fill::Ones),
        3 => Some(Fill::Empty),
        _ => None,
    }
}

impl<B: BackendTypes> AutodiffTensor<B> {
    /// A tracked tensor: `primitive` is the value of `node`.
    pub(crate) fn tracked(primitive: FloatTensor<B>, node: Arc<Node<B>>) -> Self {
        Self {
            primitive,
            node: Some(node),
            untracked_id: UntrackedId::unminted(),
        }
    }

    /// The id of the tensor (Burn's `AutodiffTensor::id`): its node's when it is tracked,
    /// otherwise its own, the same on every call and on every clone (NOTE [untracked-ids]).
    /// It is the key of the tensor's gradient, and what a custom op saves and reads the
    /// tensor's value under.
    pub fn id(&self) -> NodeId {
        match &self.node {
            Some(node) => node.id,
            None => self.untracked_id.get(),
        }
    }
}

impl<B: Backend> AutodiffTensor<B> {
    /// An untracked tensor (no gradient is computed for it or from it).
    pub fn new(primitive: FloatTensor<B>) -> Self {
        Self {
            primitive,
            node: None,
            untracked_id: UntrackedId::unminted(),
        }
    }

    /// An untracked tensor every element of which is `fill` (NOTE [fill-constants]); its id
    /// is minted now, with the fill's tag.
    pub(crate) fn filled(primitive: FloatTensor<B>, fill: Fill) -> Self {
        let id = NodeId::new();
        debug_assert!(
            id.value >> FILL_SHIFT == 0,
            "remat internal error: ids ran out"
        );
        Self {
            primitive,
            node: None,
            untracked_id: UntrackedId::minted(NodeId {
                value: id.value | fill_tag(fill),
            }),
        }
    }

    /// The fill of an untracked tensor made by `zeros`, `ones` or `empty`, or a clone of one
    /// (NOTE [fill-constants]); `None` for any other tensor. Mints nothing.
    pub(crate) fn fill(&self) -> Option<Fill> {
        match self.node {
            Some(_) => None,
            None => fill_of_id(self.untracked_id.0.load(Ordering::Relaxed)),
        }
    }

    /// Whether the tensor takes part in a graph (requires a gradient or depends on one that
    /// does).
    pub fn is_tracked(&self) -> bool {
        self.node.is_some()
    }

    /// Whether the tensor is a leaf that requires a gradient.
    pub fn is_leaf(&self) -> bool {
        self.node
            .as_ref()
            .is_some_and(|n| n.kind() == NodeKind::Leaf)
    }

    /// The id of the tensor's node, when tracked.
    pub fn node_id(&self) -> Option<NodeId> {
        self.node.as_ref().map(|n| n.id)
    }

    /// Marks the tensor as requiring a gradient: it becomes a leaf of the graphs that use it.
    ///
    /// # Panics
    /// If the tensor is the output of a recorded op: only leaves can require a gradient;
    /// detach it first to start a new leaf from its value.
    pub fn require_grad(self) -> Self {
        match &self.node {
            None => Self::tracked(self.primitive, Node::leaf()),
            Some(node) if node.kind() == NodeKind::Leaf => self,
            Some(node) => panic!(
                "remat: require_grad on the output of op `{}`, which is not a leaf. Call \
                 detach() first to make a new leaf from its value.",
                node.name()
            ),
        }
    }

    /// The same value, cut from the graph (Burn's `detach`).
    ///
    /// A leaf that requires a gradient stays a leaf that requires one (a new leaf, with the
    /// same distributed parameters); any other tensor becomes untracked.
    pub fn detach(self) -> Self {
        match self.node {
            Some(node) if node.kind() == NodeKind::Leaf => Self::tracked(
                self.primitive,
                Node::leaf_with(NodeId::new(), node.distributed_params()),
            ),
            _ => Self::new(self.primitive),
        }
    }

    /// The inner tensor, dropping the node.
    pub fn into_primitive(self) -> FloatTensor<B> {
        self.primitive
    }

    /// Runs the backward pass from this tensor and returns the gradients.
    ///
    /// # Panics
    /// If the pass reaches a node that an earlier backward pass consumed (graphs are not
    /// retained after backward, as in Burn).
    pub fn backward(self) -> Gradients {
        let Self {
            primitive, node, ..
        } = self;
        backward(node, primitive, &mut Hooks::<B>(core::marker::PhantomData))
    }

    /// The gradient of this tensor in `grads`, if any (the pending one while a
    /// [`with_complete_leaves`](crate::with_complete_leaves) callback runs for this leaf).
    pub fn grad(&self, grads: &Gradients) -> Option<FloatTensor<B>> {
        let id = self.node_id()?;
        leaves::pending::<B>(id, false).or_else(|| grads.get::<B>(id))
    }

    /// Removes and returns the gradient of this tensor in `grads`, if any (the pending one
    /// while a [`with_complete_leaves`](crate::with_complete_leaves) callback runs for this
    /// leaf).
    pub fn grad_remove(&self, grads: &mut Gradients) -> Option<FloatTensor<B>> {
        let id = self.node_id()?;
        leaves::pending::<B>(id, true).or_else(|| grads.remove::<B>(id))
    }

    /// Replaces (or sets) the gradient of this tensor in `grads` (the pending one while a
    /// [`with_complete_leaves`](crate::with_complete_leaves) callback runs for this leaf).
    pub fn grad_replace(&self, grads: &mut Gradients, grad: FloatTensor<B>) {
        if let Some(id) = self.node_id()
            && let Some(grad) = leaves::replace_pending::<B>(id, grad)
        {
            grads.remove::<B>(id);
            grads.register::<B>(id, grad);
        }
    }

    /// Marks a parameter as distributed (Burn's `AutodiffTensor::grad_distributed`, what
    /// `AutodiffBackend::set_distributed_params` does), in place: its gradient is
    /// synchronised across devices after each backward pass, in the graphs that already read
    /// it too (NOTE [distributed-backward] in `backend/distributed.rs`). Marking it again
    /// replaces its parameters. An untracked tensor is returned unchanged (it has no gradient
    /// to synchronise).
    ///
    /// # Panics
    /// If the tensor is the output of a recorded op: only parameters can be distributed.
    pub fn grad_distributed(self, param_id: DistributedParamId) -> Self {
        match &self.node {
            // A tensor that requires no gradient has nothing to synchronise; marking it must
            // not make it require one.
            None => {}
            Some(node) if node.kind() == NodeKind::Leaf => {
                node.set_distributed(DistributedParams { param_id });
            }
            Some(node) => panic!(
                "remat: set_distributed_params on the output of op `{}`; only parameters \
                 (leaf tensors) can be distributed",
                node.name()
            ),
        }
        self
    }

    /// The distributed parameters of this tensor, if it is a distributed parameter.
    pub(crate) fn distributed_params(&self) -> Option<DistributedParams> {
        let node = self.node.as_ref()?;
        if node.kind() != NodeKind::Leaf {
            return None;
        }
        node.distributed_params()
    }
}

/// What the layers above the graph give a backward pass on inner backend `B`: the budget's
/// schedule (`checkpoint/pass.rs`) and the distributed leaves' gradient submission (NOTE
/// [distributed-backward] in `backend/distributed.rs`).
struct Hooks<B>(core::marker::PhantomData<fn() -> B>);

impl<B: Backend> PassHooks for Hooks<B> {
    fn schedule(&mut self, order: &[Arc<dyn GraphNode>]) -> Option<Box<dyn ScheduledPass>> {
        crate::checkpoint::pass::schedule(order)
    }

    /// Hands a complete leaf gradient to this thread's callback (NOTE [complete-leaves] in
    /// `leaves.rs`).
    fn leaf_complete(&mut self, leaf: NodeId, grads: &mut Gradients) {
        leaves::complete::<B>(leaf, grads);
    }

    /// Submits the complete gradient of a distributed leaf for synchronisation.
    fn leaf_gradient(&mut self, leaf: NodeId, params: &DistributedParams, grads: &mut Gradients) {
        if let Some(grad) = grads.get_mut::<B>(leaf) {
            B::submit_gradient_sync(TensorRef(grad as *mut FloatTensor<B>), params.clone());
        }
    }
}

impl<B: BackendTypes> GradKey for &AutodiffTensor<B> {
    fn grad_id(&self) -> Option<NodeId> {
        self.node.as_ref().map(|node| node.id)
    }
}

impl<B: BackendTypes> TensorMetadata for AutodiffTensor<B> {
    type Device = B::Device;

    fn dtype(&self) -> DType {
        self.primitive.dtype()
    }

    fn shape(&self) -> Shape {
        self.primitive.shape()
    }

    fn rank(&self) -> usize {
        self.primitive.rank()
    }

    fn device(&self) -> Self::Device {
        self.primitive.device()
    }

    fn can_mut(&self) -> bool {
        self.primitive.can_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What tracking adds to every float tensor: the node pointer and the untracked id, one
    /// word each (NOTE [untracked-ids]); nothing is allocated for an untracked tensor.
    #[test]
    fn a_tensor_is_its_inner_tensor_and_two_words() {
        type F = burn_flex::Flex;
        let inner = core::mem::size_of::<FloatTensor<F>>();
        let tensor = core::mem::size_of::<AutodiffTensor<F>>();
        assert_eq!(
            tensor,
            inner + 16,
            "inner {inner} bytes, autodiff {tensor} bytes"
        );
    }
}
