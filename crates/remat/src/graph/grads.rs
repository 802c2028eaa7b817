//! The gradients container returned by backward.
//!
//! Gradients are keyed by node id. A graph may span several inner backends (see
//! `to_backend`), so the container erases the tensor type; this is the one place in the
//! crate that does (`Box<dyn Any>`), and a lookup with the wrong backend type is a miss.
//!
//! # Invariants
//! - At most one gradient per node: registering a second one adds it to the first.
//! - A gradient listed in `unsynced` is synchronised before anything reads it, through any
//!   method of the container (NOTE [lazy-collectives] in `backend/distributed.rs`).

use std::any::Any;
use std::collections::HashMap;

use burn_backend::{Backend, TensorMetadata, tensor::FloatTensor};

use super::NodeId;

/// What a gradient is looked up by: a node id, or a tensor (as Burn's
/// `Gradients::get(&tensor)`; an untracked tensor has no gradient).
pub trait GradKey {
    /// The node whose gradient is meant, if any.
    fn grad_id(&self) -> Option<NodeId>;
}

impl GradKey for NodeId {
    fn grad_id(&self) -> Option<NodeId> {
        Some(*self)
    }
}

/// Gradients computed by a backward pass, keyed by node.
///
/// Read a tensor's gradient with `Autodiff::grad` (Burn's `Tensor::grad`). Leaves keep their
/// gradient here after backward; intermediate gradients are released during the pass, as
/// soon as their node's step has used them.
#[derive(Default)]
pub struct Gradients {
    map: HashMap<NodeId, Box<dyn Any + Send>>,
    /// Gradients a collective wrote that are not synchronised yet, each with the
    /// synchronisation to run before it is read. Empty unless a backward pass all-reduced a
    /// gradient; emptied when the pass ends.
    unsynced: Vec<(NodeId, Synchronise)>,
}

/// A collective's synchronisation on one device (the inner backend's `sync_collective`).
type Synchronise = Box<dyn Fn() + Send>;

impl core::fmt::Debug for Gradients {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Gradients")
            .field("len", &self.map.len())
            .finish()
    }
}

impl Gradients {
    /// An empty container.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of gradients held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no gradient is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Adds `grad` to the gradient of `id` (or sets it).
    pub fn register<B: Backend>(&mut self, id: NodeId, grad: FloatTensor<B>) {
        let grad = match self.remove::<B>(id) {
            Some(previous) => B::float_add(previous, grad),
            None => grad,
        };
        self.map.insert(id, Box::new(grad));
    }

    /// The gradient of a node (by id, or by tensor: `grads.get::<B>(&tensor)`), if any.
    pub fn get<B: Backend>(&self, key: impl GradKey) -> Option<FloatTensor<B>> {
        let id = key.grad_id()?;
        // INVARIANT: synchronised before it is read; it stays listed (this borrow cannot
        // take it off), and a second synchronisation is harmless.
        for (_, synchronise) in self.unsynced.iter().filter(|(at, _)| *at == id) {
            synchronise();
        }
        self.map
            .get(&id)
            .and_then(|g| g.downcast_ref::<FloatTensor<B>>())
            .cloned()
    }

    /// Removes and returns the gradient of a node (by id or by tensor), if any.
    pub fn remove<B: Backend>(&mut self, key: impl GradKey) -> Option<FloatTensor<B>> {
        let id = key.grad_id()?;
        self.synchronise(id);
        match self.map.remove(&id)?.downcast::<FloatTensor<B>>() {
            Ok(grad) => Some(*grad),
            Err(other) => {
                // Another backend's gradient under this id: leave it where it was.
                self.map.insert(id, other);
                None
            }
        }
    }

    /// A mutable reference to the gradient of `id` (its address is stable while it stays in
    /// the container: gradients are boxed).
    pub(crate) fn get_mut<B: Backend>(&mut self, id: NodeId) -> Option<&mut FloatTensor<B>> {
        self.synchronise(id);
        self.map
            .get_mut(&id)
            .and_then(|g| g.downcast_mut::<FloatTensor<B>>())
    }

    /// Registers (adds) a gradient that a collective wrote and that is not synchronised yet:
    /// it is synchronised when it is first read, or by [`synchronise_all`] at the latest
    /// (NOTE [lazy-collectives] in `backend/distributed.rs`).
    ///
    /// [`synchronise_all`]: Self::synchronise_all
    pub(crate) fn register_unsynced<B: Backend>(&mut self, id: NodeId, grad: FloatTensor<B>) {
        let device = grad.device();
        if self.map.contains_key(&id) {
            // Adding it to the gradient already there reads it now.
            B::sync_collective(&device);
            self.register::<B>(id, grad);
            return;
        }
        self.map.insert(id, Box::new(grad));
        self.unsynced
            .push((id, Box::new(move || B::sync_collective(&device))));
    }

    /// Synchronises every gradient still waiting for its collective.
    pub(crate) fn synchronise_all(&mut self) {
        for (_, synchronise) in self.unsynced.drain(..) {
            synchronise();
        }
    }

    /// Synchronises the gradient of `id` if a collective wrote it and it is not yet.
    fn synchronise(&mut self, id: NodeId) {
        if self.unsynced.is_empty() {
            return;
        }
        while let Some(at) = self.unsynced.iter().position(|(waiting, _)| *waiting == id) {
            let (_, synchronise) = self.unsynced.swap_remove(at);
            synchronise();
        }
    }
}
