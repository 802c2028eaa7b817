//! The float tensor primitive of [`Autodiff`](crate::Autodiff): an inner-backend tensor and,
//! when it is tracked, its node.
//!
//! The primitive does not depend on the checkpoint strategy: Burn's dispatch stores
//! `FloatTensor<Autodiff<B>>` and runs `Autodiff<B, BalancedCheckpointing>` ops on it.
//!
//! # Invariants
//! - `node` is `None` exactly when the tensor is untracked: ops on untracked tensors record
//!   nothing.

use std::sync::Arc;

use burn_backend::{Backend, BackendTypes, TensorMetadata, tensor::FloatTensor};
use burn_std::{DType, Shape};

use crate::grads::Gradients;
use crate::graph::{Node, NodeId, NodeKind, backward};

/// A float tensor of [`Autodiff`](crate::Autodiff) over inner backend `B`.
#[derive(Debug, Clone)]
pub struct AutodiffTensor<B: BackendTypes> {
    /// The inner backend's tensor.
    pub primitive: FloatTensor<B>,
    pub(crate) node: Option<Arc<Node<B>>>,
}

impl<B: Backend> AutodiffTensor<B> {
    /// An untracked tensor (no gradient is computed for it or from it).
    pub fn new(primitive: FloatTensor<B>) -> Self {
        Self {
            primitive,
            node: None,
        }
    }

    /// Whether the tensor takes part in a graph (requires a gradient or depends on one that
    /// does).
    pub fn is_tracked(&self) -> bool {
        self.node.is_some()
    }

    /// Whether the tensor is a leaf that requires a gradient.
    pub fn is_leaf(&self) -> bool {
        self.node.as_ref().is_some_and(|n| n.kind == NodeKind::Leaf)
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
            None => Self {
                primitive: self.primitive,
                node: Some(Node::leaf()),
            },
            Some(node) if node.kind == NodeKind::Leaf => self,
            Some(node) => panic!(
                "remat: require_grad on the output of op `{}`, which is not a leaf. Call \
                 detach() first to make a new leaf from its value.",
                node.name
            ),
        }
    }

    /// The same value, cut from the graph (Burn's `detach`).
    ///
    /// A leaf that requires a gradient stays a leaf that requires one (a new leaf, with the
    /// same distributed parameters); any other tensor becomes untracked.
    pub fn detach(self) -> Self {
        match self.node {
            Some(node) if node.kind == NodeKind::Leaf => Self {
                primitive: self.primitive,
                node: Some(Node::leaf_with(
                    NodeId::new(),
                    node.distributed.as_deref().cloned(),
                )),
            },
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
        backward(self)
    }

    /// The gradient of this tensor in `grads`, if any.
    pub fn grad(&self, grads: &Gradients) -> Option<FloatTensor<B>> {
        grads.get::<B>(self.node_id()?)
    }

    /// Removes and returns the gradient of this tensor in `grads`, if any.
    pub fn grad_remove(&self, grads: &mut Gradients) -> Option<FloatTensor<B>> {
        grads.remove::<B>(self.node_id()?)
    }

    /// Replaces (or sets) the gradient of this tensor in `grads`.
    pub fn grad_replace(&self, grads: &mut Gradients, grad: FloatTensor<B>) {
        if let Some(id) = self.node_id() {
            grads.remove::<B>(id);
            grads.register::<B>(id, grad);
        }
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
