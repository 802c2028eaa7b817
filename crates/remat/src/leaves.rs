//! A leaf's gradient handed out as soon as it is complete, in the middle of a backward pass
//! (NOTE \[complete-leaves\]): what an optimizer step inside backward is built on.
//!
//! # Invariants
//! - `on_leaf` runs once per leaf of the loss's inner backend that got a gradient, after every
//!   consumer of the leaf ran its step, on the thread of the pass.
//! - While it runs, that gradient, and no other, is the one pending: `grad` and `grad_remove`
//!   on the leaf's tensor return it from any `Gradients`. What it leaves pending goes back to
//!   the pass's gradients.

use core::any::Any;
use core::cell::RefCell;

use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

use crate::grads::Gradients;
use crate::graph::NodeId;

// NOTE [complete-leaves]: a parameter's gradient is final once every op that read the
// parameter ran its backward step; in the pass's order (consumers first) that is the leaf's
// own position. A user who steps the optimizer there and drops the gradient (PyTorch's
// "optimizer in backward") never holds every gradient at once, which is the step's peak on
// models whose activations a budget keeps small (issue 36). Burn's `Gradients` seen by user
// code is opaque (its constructor is private to burn-tensor), so the leaf's gradient cannot be
// handed over in a new container; instead it is *pending* while `on_leaf` runs, and every
// `grad`/`grad_remove` of that leaf's tensor (Burn's `GradientsParams::from_module`, say)
// finds it whatever `Gradients` it is given.

/// A callback of [`with_complete_leaves`].
type Sink = Box<dyn FnMut()>;

thread_local! {
    /// The innermost [`with_complete_leaves`]'s callback on this thread; taken out while it
    /// runs.
    static SINK: RefCell<Option<Sink>> = const { RefCell::new(None) };
    static PENDING: RefCell<Option<(NodeId, Box<dyn Any>)>> = const { RefCell::new(None) };
}

/// Runs `pass` (a backward pass: `loss.backward()`) calling `on_leaf` as each leaf's gradient
/// becomes complete, on this thread.
///
/// While `on_leaf` runs, the complete gradient of that one leaf is *pending*: reading the
/// leaf tensor's gradient (`Tensor::grad`, `Tensor::grad_remove`, Burn's
/// `GradientsParams::from_module` with any `Gradients`) returns it, and a `grad_remove` takes
/// it out of the pass. Whatever `on_leaf` leaves pending is in the `Gradients` the pass
/// returns, as without this function. A backward pass run inside `on_leaf` does not call it.
/// Only leaves on the loss's inner backend are reported. `on_leaf` owns what it changes (an
/// `Rc<RefCell<_>>` shared with the caller, say): it is kept in a thread-local while `pass`
/// runs, and dropped when `pass` returns or panics.
///
/// ```
/// # use std::{cell::RefCell, rc::Rc};
/// # use burn_backend::Backend;
/// # fn demo<B: Backend>(loss: remat::AutodiffTensor<B>, weight: remat::AutodiffTensor<B>) {
/// let taken = Rc::new(RefCell::new(None));
/// let sink = taken.clone();
/// let _rest = remat::with_complete_leaves(
///     move || {
///         if let Some(grad) = weight.grad_remove(&mut remat::grads::Gradients::new()) {
///             *sink.borrow_mut() = Some(grad); // step the optimizer here, drop the gradient
///         }
///     },
///     || loss.backward(),
/// );
/// # }
/// ```
pub fn with_complete_leaves<R>(on_leaf: impl FnMut() + 'static, pass: impl FnOnce() -> R) -> R {
    /// Restores the outer callback, also when `pass` panics.
    struct Restore(Option<Sink>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            SINK.with(|sink| *sink.borrow_mut() = outer);
        }
    }
    let outer = SINK.with(|sink| sink.borrow_mut().replace(Box::new(on_leaf)));
    let _restore = Restore(outer);
    pass()
}

/// Called by a backward pass on inner backend `B` when `leaf`'s gradient in `grads` is
/// complete: hands it to this thread's callback, if any (NOTE \[complete-leaves\]).
pub(crate) fn complete<B: Backend>(leaf: NodeId, grads: &mut Gradients) {
    // Taken out while it runs: a pass inside it does not call it again.
    let Some(sink) = SINK.with(|sink| sink.borrow_mut().take()) else {
        return;
    };
    /// Ends the callback: the sink back in place, the pending gradient back in the pass.
    struct Done<'a, B: Backend> {
        sink: Option<Sink>,
        grads: &'a mut Gradients,
        backend: core::marker::PhantomData<fn() -> B>,
    }
    impl<B: Backend> Drop for Done<'_, B> {
        fn drop(&mut self) {
            let sink = self.sink.take();
            SINK.with(|s| *s.borrow_mut() = sink);
            if let Some((leaf, grad)) = PENDING.with(|p| p.borrow_mut().take()) {
                let grad = grad
                    .downcast::<FloatTensor<B>>()
                    .expect("remat internal error: a pending gradient of another backend");
                self.grads.register::<B>(leaf, *grad);
            }
        }
    }
    let Some(grad) = grads.remove::<B>(leaf) else {
        SINK.with(|s| *s.borrow_mut() = Some(sink));
        return;
    };
    PENDING.with(|p| *p.borrow_mut() = Some((leaf, Box::new(grad))));
    // Restores the sink and the pass's gradient also when the callback panics.
    let mut done = Done::<B> {
        sink: Some(sink),
        grads,
        backend: core::marker::PhantomData,
    };
    if let Some(sink) = done.sink.as_mut() {
        sink();
    }
}

/// The pending gradient of `leaf` (NOTE \[complete-leaves\]), taken with `take`, else cloned.
pub(crate) fn pending<B: Backend>(leaf: NodeId, take: bool) -> Option<FloatTensor<B>> {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        match p.as_ref() {
            Some((id, _)) if *id == leaf => {}
            _ => return None,
        }
        if take {
            let (_, grad) = p.take()?;
            grad.downcast::<FloatTensor<B>>().ok().map(|g| *g)
        } else {
            p.as_ref()?.1.downcast_ref::<FloatTensor<B>>().cloned()
        }
    })
}

/// Replaces the pending gradient of `leaf`, if it is the pending one; gives `grad` back
/// otherwise.
pub(crate) fn replace_pending<B: Backend>(
    leaf: NodeId,
    grad: FloatTensor<B>,
) -> Option<FloatTensor<B>> {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        match p.as_mut() {
            Some((id, pending)) if *id == leaf => {
                *pending = Box::new(grad);
                None
            }
            _ => Some(grad),
        }
    })
}
