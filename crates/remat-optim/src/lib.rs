//! Burn's optimizers stepped inside remat's backward pass.
//!
//! A training step usually runs backward, holds every parameter's gradient, then steps the
//! optimizer. On models whose activations a budget keeps small, those gradients are the step's
//! peak. [`backward_and_step`] steps the optimizer on the parameters as soon as their
//! gradients are complete (every op that read a parameter ran its backward step), in groups
//! of at most a sixteenth of the parameters' bytes, and drops the gradients there, so that
//! they are never all alive at once (PyTorch's "optimizer in backward").
//!
//! ```no_run
//! # use burn::module::{Module, ModuleVisitor, Param};
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
//! With burn-train's `Learner`, a `TrainStep` calls [`stash_loss`] in `step` and
//! [`step_stashed`] in `optimize` (see [`stash_loss`]; single-device strategy).
//!
//! # What it does not combine with
//! - **Gradient accumulation** across micro-batches (`GradientsAccumulator`, the Learner's
//!   `grads_accumulation`): each call steps the optimizer, so there is no gradient to
//!   accumulate; [`stash_loss`] panics saying so. Accumulate losses into one loss before the
//!   call instead, or use the separate step.
//! - **burn-train's multi-device strategy**: its steps run on worker threads, their
//!   `optimize` on another; [`step_stashed`] panics saying so.
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

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::{Gradients, Tensor};

// NOTE [step-groups]: each complete gradient was handed to `ModuleOptimizer::step` alone,
// and both `GradientsParams::from_module` and `step` walk the whole module: quadratic in the
// number of parameters. On 400 Linear layers (800 parameters, width 16) a step took 334 ms
// against 10 ms for the separate step. Now each parameter's gradient is found by a list made
// in one walk before the pass (searched from its end: the last layers' gradients complete
// first), and the optimizer steps once a group of complete gradients reaches a sixteenth of
// the parameters' bytes (a larger one alone): at most about 16 walks more than the separate
// step, and at most a sixteenth of the gradients (or the largest one) held at a time. The
// same 400 layers: 17-20 ms a step against 12 ms (release, Flex; layers this small are all
// overhead).

/// The share of the parameters' bytes whose complete gradients are stepped together
/// (NOTE \[step-groups\]).
const GROUPS: u64 = 16;

/// Takes one parameter's gradient out of a pass (the pending one, if it is this parameter's)
/// into a `GradientsParams`; returns its bytes.
type Extract = Box<dyn FnMut(&mut Gradients, &mut GradientsParams) -> Option<u64>>;

/// Lists how to take each float parameter's gradient, and sums the parameters' bytes.
#[derive(Default)]
struct Extractors {
    list: Vec<Extract>,
    bytes: u64,
}

impl ModuleVisitor for Extractors {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let tensor = param.val();
        let id = param.id;
        self.bytes += bytes_of(&tensor);
        self.list.push(Box::new(move |grads, into| {
            let grad = tensor.grad_remove(grads)?;
            let bytes = bytes_of(&grad);
            into.register::<D>(id, grad);
            Some(bytes)
        }));
    }
}

/// The bytes of a tensor's elements.
fn bytes_of<const D: usize>(tensor: &Tensor<D>) -> u64 {
    (tensor.shape().num_elements() * tensor.dtype().size()) as u64
}

/// Runs backward from `loss` and steps `optim` on each parameter of `model` as soon as that
/// parameter's gradient is complete, dropping the gradient; returns the updated model.
///
/// The result, and `optim`'s state, are those of
/// `optim.step(lr, model, GradientsParams::from_grads(loss.backward(), &model))`: parameter
/// groups, per-parameter learning rates and gradient clipping apply as they do there, and a
/// parameter without a gradient is left as it is. Complete gradients are stepped in groups of
/// a sixteenth of the parameters' bytes (a larger one alone), so that the module is walked a
/// few times, not once per parameter (NOTE \[step-groups\]). What this cannot be combined
/// with is in the crate docs.
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
        /// How to take each parameter's gradient not taken yet.
        extract: Vec<Extract>,
        /// Complete gradients not stepped yet, and their bytes.
        group: GradientsParams,
        group_bytes: u64,
        /// The bytes at which a group is stepped.
        group_at: u64,
    }
    impl<M: Module> Stepping<M> {
        /// Steps the optimizer on the gradients grouped so far.
        fn step_group(&mut self) {
            if self.group.is_empty() {
                return;
            }
            let current = self
                .model
                .take()
                .expect("remat-optim internal error: the model is stepped once at a time");
            let group = std::mem::take(&mut self.group);
            self.group_bytes = 0;
            self.model = Some(self.optim.step(self.lr.clone(), current, group));
        }
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
    let mut extractors = Extractors::default();
    model.visit(&mut extractors);
    // The caller's optimizer is moved into the shared state for the pass (a cheap one holds
    // its place) and back after it.
    let placeholder = SgdConfig::new().init();
    let shared = Rc::new(RefCell::new(Stepping {
        model: Some(model),
        optim: std::mem::replace(optim, placeholder),
        lr: lr.into(),
        holder,
        extract: extractors.list,
        group: GradientsParams::new(),
        group_bytes: 0,
        group_at: (extractors.bytes / GROUPS).max(1),
    }));
    let back = Return {
        shared: shared.clone(),
        optim,
    };
    let stepping = shared.clone();
    let on_leaf = move || {
        let mut state = stepping.borrow_mut();
        let state = &mut *state;
        // The parameter whose gradient is pending; none for a leaf of another module.
        let found = (0..state.extract.len()).rev().find_map(|k| {
            let bytes = (state.extract[k])(&mut state.holder, &mut state.group)?;
            Some((k, bytes))
        });
        let Some((k, bytes)) = found else {
            return;
        };
        drop(state.extract.remove(k));
        state.group_bytes += bytes;
        if state.group_bytes >= state.group_at {
            state.step_group();
        }
    };
    let _others = remat::with_complete_leaves(on_leaf, || loss.backward());
    shared.borrow_mut().step_group();
    drop(back);
    let model = shared.borrow_mut().model.take();
    model.expect("remat-optim internal error: the model is back after the pass")
}

thread_local! {
    /// The loss [`stash_loss`] kept for the [`step_stashed`] that follows on this thread.
    static STASHED: RefCell<Option<Tensor<1>>> = const { RefCell::new(None) };
}

/// For burn-train's `TrainStep::step`: keeps the step's `loss` for [`step_stashed`], which
/// the Learner's `TrainStep::optimize` calls next on this thread. The step then returns no
/// gradients (`TrainOutput { grads: GradientsParams::new(), item }`).
///
/// ```no_run
/// # use burn::module::{Module, ModuleVisitor, Param};
/// # use burn::optim::{GradientsParams, ModuleOptimizer};
/// # use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
/// # use burn::tensor::Tensor;
/// # use burn::train::{RegressionOutput, TrainOutput, TrainStep};
/// # #[derive(Module, Debug)]
/// # struct Model { linear: burn::nn::Linear }
/// # impl Model { fn regression(&self, batch: (Tensor<2>, Tensor<2>)) -> RegressionOutput { todo!() } }
/// impl TrainStep for Model {
///     type Input = (Tensor<2>, Tensor<2>);
///     type Output = RegressionOutput;
///
///     fn step(&self, batch: Self::Input) -> TrainOutput<RegressionOutput> {
///         let item = self.regression(batch);
///         remat_optim::stash_loss(item.loss.clone());
///         TrainOutput { grads: GradientsParams::new(), item }
///     }
///
///     fn optimize(
///         self,
///         optim: &mut ModuleOptimizer,
///         lr: ModuleLearningRate,
///         grads: GradientsParams,
///     ) -> Self {
///         remat_optim::step_stashed(self, optim, lr, grads)
///     }
/// }
/// ```
///
/// This works with burn-train's single-device strategy, which runs each step and its
/// `optimize` on one thread, without gradient accumulation.
///
/// # Panics
/// When a loss is stashed already: its `optimize` did not run, which is what the Learner does
/// when it accumulates gradients over several steps (`grads_accumulation`): each micro-batch's
/// gradients would be lost. Step inside backward without accumulation, or use the separate
/// step.
pub fn stash_loss(loss: Tensor<1>) {
    STASHED.with(|stashed| {
        let mut stashed = stashed.borrow_mut();
        assert!(
            stashed.is_none(),
            "remat_optim::stash_loss: the last step's loss was never stepped. The Learner \
             accumulates gradients over several steps (grads_accumulation), which stepping \
             inside backward cannot do: train without accumulation, or return the step's \
             gradients and let the Learner step"
        );
        *stashed = Some(loss);
    });
}

/// For burn-train's `TrainStep::optimize`: runs [`backward_and_step`] on the loss
/// [`stash_loss`] kept on this thread, and returns the updated model.
///
/// # Panics
/// When no loss is stashed on this thread (the step ran on another thread: burn-train's
/// multi-device strategy runs steps on worker threads; or the step did not call
/// [`stash_loss`]), or when `grads` holds gradients (the step also ran backward).
pub fn step_stashed<M: Module + 'static>(
    model: M,
    optim: &mut ModuleOptimizer,
    lr: impl Into<ModuleLearningRate>,
    grads: GradientsParams,
) -> M {
    assert!(
        grads.is_empty(),
        "remat_optim::step_stashed: the step returned {} gradients; with the optimizer stepped \
         inside backward it returns none (GradientsParams::new()) and runs no backward itself",
        grads.len()
    );
    let loss = STASHED.with(|stashed| stashed.borrow_mut().take());
    let loss = loss.unwrap_or_else(|| {
        panic!(
            "remat_optim::step_stashed: no loss was stashed on this thread. Call \
             remat_optim::stash_loss in TrainStep::step; burn-train's multi-device strategy \
             runs steps on worker threads, where stepping inside backward does not reach"
        )
    });
    backward_and_step(&loss, model, optim, lr)
}
