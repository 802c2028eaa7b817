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
    map: HashMap<NodeId, Entry>,
    /// Bytes of the gradients held (NOTE [grads-in-flight] in `planner/grads.rs`).
    bytes: u64,
    /// The most of `bytes` since [`Gradients::take_peak`].
    peak: u64,
    /// Bytes of the gradient a running step took ([`Gradients::take_for_step`]), counted
    /// in `bytes` until the step ends.
    stepping: u64,
    /// Gradients a collective wrote that are not synchronised yet, each with the
    /// synchronisation to run before it is read. Empty unless a backward pass all-reduced a
    /// gradient; emptied when the pass ends.
    unsynced: Vec<(NodeId, Synchronise)>,
}

/// A collective's synchronisation on one device (the inner backend's `sync_collective`).
type Synchronise = Box<dyn Fn() + Send>;

/// One gradient, type-erased, with its size.
struct Entry {
    grad: Box<dyn Any + Send>,
    bytes: u64,
}

/// Bytes of a tensor's elements.
fn bytes_of<B: Backend>(grad: &FloatTensor<B>) -> u64 {
    (grad.shape().num_elements() * grad.dtype().size()) as u64
}

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
        self.insert::<B>(id, grad);
    }

    /// Stores `grad` under `id` (nothing is there) and counts its bytes.
    fn insert<B: Backend>(&mut self, id: NodeId, grad: FloatTensor<B>) {
        let bytes = bytes_of::<B>(&grad);
        self.bytes += bytes;
        self.peak = self.peak.max(self.bytes);
        let entry = Entry {
            grad: Box::new(grad),
            bytes,
        };
        if let Some(replaced) = self.map.insert(id, entry) {
            self.bytes -= replaced.bytes;
        }
    }

    /// Removes and returns the gradient of `id` for its node's step, which holds it while
    /// it runs: its bytes stay counted until [`Gradients::step_done`] (NOTE
    /// [grads-in-flight] in `planner/grads.rs`).
    pub(crate) fn take_for_step<B: Backend>(&mut self, id: NodeId) -> Option<FloatTensor<B>> {
        let before = self.bytes;
        let grad = self.remove::<B>(id)?;
        let bytes = before - self.bytes;
        self.bytes = before;
        self.stepping += bytes;
        Some(grad)
    }

    /// The step that took a gradient ([`Gradients::take_for_step`]) ended: it no longer
    /// holds it.
    pub(crate) fn step_done(&mut self) {
        self.bytes -= std::mem::take(&mut self.stepping);
    }

    /// Bytes of the gradients held now (NOTE [grads-in-flight] in `planner/grads.rs`).
    pub(crate) fn live_bytes(&self) -> u64 {
        self.bytes
    }

    /// The most bytes held since the last call (or since the container was made); the count
    /// starts again from the bytes held now.
    pub(crate) fn take_peak(&mut self) -> u64 {
        std::mem::replace(&mut self.peak, self.bytes)
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
            .and_then(|e| e.grad.downcast_ref::<FloatTensor<B>>())
            .cloned()
    }

    /// Removes and returns the gradient of a node (by id or by tensor), if any.
    pub fn remove<B: Backend>(&mut self, key: impl GradKey) -> Option<FloatTensor<B>> {
        let id = key.grad_id()?;
        self.synchronise(id);
        let entry = self.map.remove(&id)?;
        match entry.grad.downcast::<FloatTensor<B>>() {
            Ok(grad) => {
                self.bytes -= entry.bytes;
                Some(*grad)
            }
            Err(other) => {
                // Another backend's gradient under this id: leave it where it was.
                let entry = Entry {
                    grad: other,
                    bytes: entry.bytes,
                };
                self.map.insert(id, entry);
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
            .and_then(|e| e.grad.downcast_mut::<FloatTensor<B>>())
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
        self.insert::<B>(id, grad);
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
