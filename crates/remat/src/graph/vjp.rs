//! The context of one backward step ([`Vjp`], NOTE \[one-rule\] in `node.rs`): it reads the
//! values the rule declared (stored, or rebuilt through `retrieve.rs`), sets the inputs'
//! gradients and releases the declared reads the rule did not make.

use burn_backend::{Backend, TensorMetadata, tensor::FloatTensor};
use burn_std::Shape;

use super::grads::Gradients;
use super::id::NodeId;
use super::node::{Input, Node, NodeKind, Slot, Vjp};
use super::op::Reads;
use super::retrieve;

impl<'a, B: Backend> Vjp<'a, B> {
    pub(crate) fn new(
        node: &'a Node<B>,
        inputs: &'a [Input<B>],
        reads: &'a Reads,
        grads: &'a mut Gradients,
    ) -> Self {
        Self {
            node,
            inputs,
            reads,
            done: Reads::NOTHING,
            grads,
        }
    }

    /// Whether input `i` needs a gradient.
    pub(crate) fn needs_grad(&self, i: usize) -> bool {
        self.inputs[i].node.is_some()
    }

    /// The value of input `i`, which the rule declared it reads.
    pub(crate) fn input(&mut self, i: usize) -> FloatTensor<B> {
        debug_assert!(
            self.reads.has_input(i) && !self.done.has_input(i),
            "remat internal error: op `{}` reads input {i} without declaring it (or twice)",
            self.node.name()
        );
        self.done.insert(i);
        retrieve::read_input(&self.inputs[i])
    }

    /// The op's output, which the rule declared it reads.
    pub(crate) fn output(&mut self) -> FloatTensor<B> {
        debug_assert!(
            self.reads.output && !self.done.output,
            "remat internal error: op `{}` reads its output without declaring it (or twice)",
            self.node.name()
        );
        self.done.output = true;
        retrieve::read_value(self.node)
    }

    /// An argument with input `i`'s shape for a kernel that reads only its shape
    /// (NOTE [shape-only-arguments]): the input's value when it is kept anyway (stored in its
    /// producer's slot for a read still to come, or held on the edge), else one element
    /// broadcast to `shape`. Makes no read, rebuilds nothing and allocates no input-sized
    /// buffer.
    pub(crate) fn shape_arg(
        &self,
        i: usize,
        shape: &Shape,
        like: &FloatTensor<B>,
    ) -> FloatTensor<B> {
        let input = &self.inputs[i];
        let kept = match input.producer() {
            Some(producer) => match &producer.lock().slot {
                Slot::Stored(kept) => Some(kept.get().clone()),
                Slot::Evicted(_) | Slot::Unneeded => None,
            },
            // A fill's recipe holds no buffer (NOTE [fill-constants]).
            None => input.held.as_ref().and_then(|kept| kept.buffer()).cloned(),
        };
        kept.unwrap_or_else(|| shape_only::<B>(shape.clone(), like))
    }

    /// Sets the gradient of input `i` (accumulated with other gradients of the same node).
    /// Dropped when the input needs none.
    pub(crate) fn set(&mut self, i: usize, grad: FloatTensor<B>) {
        if let Some(node) = &self.inputs[i].node {
            self.grads.register::<B>(node.id, grad);
        }
    }

    /// Like [`set`](Self::set), with a gradient a collective wrote that is not synchronised
    /// yet: it is synchronised before it is first read (NOTE [lazy-collectives] in
    /// `backend/distributed.rs`).
    pub(crate) fn set_unsynced(&mut self, i: usize, grad: FloatTensor<B>) {
        match &self.inputs[i].node {
            Some(node) => self.grads.register_unsynced::<B>(node.id, grad),
            // Nothing will read it: synchronise before its buffer is released.
            None => B::sync_collective(&grad.device()),
        }
    }

    /// The id of the node whose step this is.
    pub(crate) fn node_id(&self) -> NodeId {
        self.node.id
    }

    /// The id of input `i`'s node and whether it is a leaf, when it needs a gradient.
    pub(crate) fn input_node(&self, i: usize) -> Option<(NodeId, bool)> {
        self.inputs[i]
            .node
            .as_ref()
            .map(|n| (n.id, n.kind() == NodeKind::Leaf))
    }

    /// The gradients container, for rules whose parents live on another backend.
    pub(crate) fn grads(&mut self) -> &mut Gradients {
        self.grads
    }

    /// Releases the declared reads the rule did not make, so that counts drain, without
    /// rebuilding the values they would have read (NOTE [release-without-rebuild]).
    pub(crate) fn release_unread(&mut self) {
        for i in 0..self.inputs.len() {
            if self.reads.has_input(i) && !self.done.has_input(i) {
                self.done.insert(i);
                retrieve::release_input(&self.inputs[i]);
            }
        }
        if self.reads.output && !self.done.output {
            self.done.output = true;
            retrieve::release(self.node);
        }
    }
}

/// One element broadcast to `shape`, with the device and dtype of `like`: an argument whose
/// values a kernel does not read (NOTE [shape-only-arguments] in `ops/common.rs`).
fn shape_only<B: Backend>(shape: Shape, like: &FloatTensor<B>) -> FloatTensor<B> {
    let one = Shape::from(vec![1; shape.num_dims()]);
    let zero = B::float_zeros(one, &like.device(), like.dtype().into());
    B::float_expand(zero, shape)
}
