//! Burn's optimizers stepped inside remat's backward pass.
//!
//! A training step usually runs backward, holds every parameter's gradient, then steps the
//! optimizer. On models whose activations a budget keeps small, those gradients are the step's
//! peak. [`backward_and_step`] steps the optimizer on each parameter as soon as its gradient
//! is complete (every op that read the parameter ran its backward step) and drops the
//! gradient there, so that the gradients are never all alive at once (PyTorch's "optimizer in
//! backward").
//!
//! ```no_run
//! # use burn::module::Module;
//! # use burn::optim::{AdamConfig, ModuleOptimizer};
//! # use burn::tensor::Tensor;
//! # fn demo<M: Module + 'static>(mut model: M, loss_of: impl Fn(&M) -> Tensor<1>) {
//! let mut optim: ModuleOptimizer = AdamConfig::new().init();
//! for _ in 0..10 {
//!     let loss = loss_of(&model);
//!     // Instead of `optim.step(lr, model, GradientsParams::from_grads(loss.backward(), &model))`:
//!     model = remat_optim::backward_and_step(&loss, model, &mut optim, 1e-3);
//! }
//! # }
//! ```
//!
//! # What it does not combine with
//! - **Gradient accumulation** across micro-batches (`GradientsAccumulator`): each call steps
//!   the optimizer, so there is no gradient to accumulate. Accumulate losses into one loss
//!   before the call instead, or use the separate step.
//! - **Several devices' gradients** (`ModuleOptimizer::step_multi`): each parameter is stepped
//!   from the one pass's gradient.
//! - **A step that reads every gradient at once**, such as clipping by the norm of all
//!   gradients together: Burn's `GradientClipping` is per parameter and works.
//! - **Gradients of other leaves**: the gradients of tensors that are not parameters of
//!   `model` (an input that requires a gradient, say) are dropped; use `loss.backward()` where
//!   they are needed.
//!
//! # Invariants
//! - The model returned and the optimizer's state are those of `optim.step(lr, model,
//!   GradientsParams::from_grads(loss.backward(), &model))`, bit for bit, under every remat
//!   policy (`tests/step_in_backward.rs`).

#![deny(missing_docs)]

use std::cell::RefCell;
use std::rc::Rc;

use burn::module::Module;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::{Gradients, Tensor};

/// Runs backward from `loss` and steps `optim` on each parameter of `model` as soon as that
/// parameter's gradient is complete, dropping the gradient; returns the updated model.
///
/// The result, and `optim`'s state, are those of
/// `optim.step(lr, model, GradientsParams::from_grads(loss.backward(), &model))`: parameter
/// groups, per-parameter learning rates and gradient clipping apply as they do there, and a
/// parameter without a gradient is left as it is. What this cannot be combined with is in the
/// crate docs.
///
/// # Panics
/// As `loss.backward()`: when `loss` is not tracked, or its graph was consumed by an earlier
/// backward pass.
pub fn backward_and_step<M: Module + 'static, const D: usize>(
    loss: &Tensor<D>,
    model: M,
    optim: &mut ModuleOptimizer,
    lr: impl Into<ModuleLearningRate>,
) -> M {
    /// What the callback steps, shared with this frame (the callback must own what it
    /// changes: it is kept by remat while the pass runs).
    struct Stepping<M> {
        model: Option<M>,
        optim: ModuleOptimizer,
        lr: ModuleLearningRate,
        holder: Gradients,
    }
    /// Puts the optimizer back in the caller's hands, also when the pass panics.
    struct Return<'a, M> {
        shared: Rc<RefCell<Stepping<M>>>,
        optim: &'a mut ModuleOptimizer,
    }
    impl<M> Drop for Return<'_, M> {
        fn drop(&mut self) {
            let mut shared = self.shared.borrow_mut();
            std::mem::swap(&mut shared.optim, self.optim);
        }
    }
    // Burn's `Gradients` can only be made by a backward pass: a lone leaf's holds just that
    // leaf's gradient, and records no op under the thread's policy. The complete parameter's
    // gradient is read through it (remat hands the pending gradient to any `Gradients`).
    let device = loss.device();
    let holder = Tensor::<1>::zeros([1], &device).require_grad().backward();
    // The caller's optimizer is moved into the shared state for the pass (a cheap one holds
    // its place) and back after it.
    let placeholder = SgdConfig::new().init();
    let shared = Rc::new(RefCell::new(Stepping {
        model: Some(model),
        optim: std::mem::replace(optim, placeholder),
        lr: lr.into(),
        holder,
    }));
    let back = Return {
        shared: shared.clone(),
        optim,
    };
    let stepping = shared.clone();
    let on_leaf = move || {
        let mut state = stepping.borrow_mut();
        let state = &mut *state;
        let current = state
            .model
            .take()
            .expect("remat-optim internal error: the model is stepped once at a time");
        let grads = GradientsParams::from_module(&mut state.holder, &current);
        state.model = Some(if grads.is_empty() {
            current
        } else {
            state.optim.step(state.lr.clone(), current, grads)
        });
    };
    let _others = remat::with_complete_leaves(on_leaf, || loss.backward());
    drop(back);
    let model = shared.borrow_mut().model.take();
    model.expect("remat-optim internal error: the model is back after the pass")
}
