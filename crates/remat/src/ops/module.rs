//! Neural-network module ops other than convolutions, pools and attention: embedding,
//! linear, interpolation (and its backward kernel), unfold/fold, batch and layer norm, CTC
//! loss. All are [`Cost::Compute`].
//!
//! Linear-in-`x` ops (embedding, interpolate, unfold, fold) read nothing in backward: their
//! inner backward kernels take `x` only for its shape (NOTE [shape-only-arguments] in
//! `common`), and unfold and fold are each other's adjoint.

use burn_backend::ops::{InterpolateOptions, UnfoldOptions};
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, TensorMetadata};
use burn_std::Shape;
use smallvec::{SmallVec, smallvec};

use super::common::{scalar, sum_to_channels};
use super::conv::take2_opt;
use super::record::{record, record_computed};
use super::unary::{take1, take2};
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// A module op with its parameters; the inputs are listed on each variant.
#[derive(Debug)]
enum Module<B: Backend> {
    /// `[weights]`: rows of the weights picked by `indices`.
    Embedding {
        indices: IntTensor<B>,
        weight_shape: Shape,
    },
    /// `[x, weight, bias?]`: `x @ weight + bias`.
    Linear { has_bias: bool },
    /// `[x]`: resampled to `output_size`.
    Interpolate {
        output_size: [usize; 2],
        options: InterpolateOptions,
        x_shape: Shape,
    },
    /// `[x, grad]`: the backward kernel of `Interpolate`, linear in `grad`.
    InterpolateBackward {
        output_size: [usize; 2],
        options: InterpolateOptions,
    },
    /// `[x]`: sliding blocks of an image of spatial size `size`, as columns.
    Unfold {
        kernel_size: [usize; 2],
        options: UnfoldOptions,
        size: [usize; 2],
    },
    /// `[columns]`: the adjoint of `Unfold`, summing overlapping blocks into an image.
    Fold {
        output_size: [usize; 2],
        kernel_size: [usize; 2],
        options: UnfoldOptions,
    },
    /// `[x, gamma, beta]`: normalised with the batch statistics, which are kept (`[channels]`
    /// each, small) as the forward computed them.
    BatchNormTrain {
        epsilon: f64,
        mean: FloatTensor<B>,
        variance: FloatTensor<B>,
    },
    /// `[x, gamma, beta?]`: normalised over the last dim.
    LayerNorm { epsilon: f64, has_beta: bool },
    /// `[log_probs]`: per-sample CTC loss, differentiated by the inner backend's kernel.
    CtcLoss {
        targets: IntTensor<B>,
        input_lengths: IntTensor<B>,
        target_lengths: IntTensor<B>,
        blank: usize,
    },
}

/// Records an embedding lookup.
pub(crate) fn embedding<B: Backend>(
    balanced: bool,
    weights: AutodiffTensor<B>,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    let weight_shape = weights.primitive.shape();
    let op = Module::Embedding {
        indices,
        weight_shape,
    };
    record(op, smallvec![weights], balanced)
}

/// Records `x @ weight + bias`.
pub(crate) fn linear<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    weight: AutodiffTensor<B>,
    bias: Option<AutodiffTensor<B>>,
) -> AutodiffTensor<B> {
    let op = Module::Linear {
        has_bias: bias.is_some(),
    };
    let mut inputs = smallvec![x, weight];
    inputs.extend(bias);
    record(op, inputs, balanced)
}

/// Records an interpolation of `x` to `output_size`.
pub(crate) fn interpolate<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    output_size: [usize; 2],
    options: InterpolateOptions,
) -> AutodiffTensor<B> {
    let x_shape = x.primitive.shape();
    let op = Module::Interpolate {
        output_size,
        options,
        x_shape,
    };
    record(op, smallvec![x], balanced)
}

/// Records the interpolation backward kernel applied to `grad`. `x` gets no gradient: the
/// result does not depend on its values.
pub(crate) fn interpolate_backward<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    grad: AutodiffTensor<B>,
    output_size: [usize; 2],
    options: InterpolateOptions,
) -> AutodiffTensor<B> {
    let op = Module::InterpolateBackward {
        output_size,
        options,
    };
    record(op, smallvec![x, grad], balanced)
}

/// Records the unfolding of `x` (`[batch, channels, h, w]`) into columns.
pub(crate) fn unfold4d<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    kernel_size: [usize; 2],
    options: UnfoldOptions,
) -> AutodiffTensor<B> {
    let dims = x.primitive.shape();
    let op = Module::Unfold {
        kernel_size,
        options,
        size: [dims[2], dims[3]],
    };
    record(op, smallvec![x], balanced)
}

/// Records the folding of columns `x` into an image of spatial size `output_size`.
pub(crate) fn fold4d<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    output_size: [usize; 2],
    kernel_size: [usize; 2],
    options: UnfoldOptions,
) -> AutodiffTensor<B> {
    let op = Module::Fold {
        output_size,
        kernel_size,
        options,
    };
    record(op, smallvec![x], balanced)
}

/// Records batch normalisation with batch statistics; returns the output, the mean and the
/// biased variance (`[channels]`, untracked, as in Burn's autodiff).
pub(crate) fn batch_norm_train<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    gamma: AutodiffTensor<B>,
    beta: AutodiffTensor<B>,
    epsilon: f64,
) -> [AutodiffTensor<B>; 3] {
    let out = B::batch_norm_train(
        x.primitive.clone(),
        gamma.primitive.clone(),
        beta.primitive.clone(),
        epsilon,
    );
    let op = Module::BatchNormTrain {
        epsilon,
        mean: out.mean.clone(),
        variance: out.variance.clone(),
    };
    let output = record_computed(op, smallvec![x, gamma, beta], balanced, out.output);
    [
        output,
        AutodiffTensor::new(out.mean),
        AutodiffTensor::new(out.variance),
    ]
}

/// Records layer normalisation over the last dim.
pub(crate) fn layer_norm<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    gamma: AutodiffTensor<B>,
    beta: Option<AutodiffTensor<B>>,
    epsilon: f64,
) -> AutodiffTensor<B> {
    let op = Module::LayerNorm {
        epsilon,
        has_beta: beta.is_some(),
    };
    let mut inputs = smallvec![x, gamma];
    inputs.extend(beta);
    record(op, inputs, balanced)
}

/// Records the CTC loss. Only for inner backends with a CTC backward kernel
/// (`B::has_ctc_loss_backward()`).
pub(crate) fn ctc_loss<B: Backend>(
    balanced: bool,
    log_probs: AutodiffTensor<B>,
    targets: IntTensor<B>,
    input_lengths: IntTensor<B>,
    target_lengths: IntTensor<B>,
    blank: usize,
) -> AutodiffTensor<B> {
    let op = Module::CtcLoss {
        targets,
        input_lengths,
        target_lengths,
        blank,
    };
    record(op, smallvec![log_probs], balanced)
}

impl<B: Backend> Module<B> {
    fn name(&self) -> &'static str {
        match self {
            Module::Embedding { .. } => "embedding",
            Module::Linear { .. } => "linear",
            Module::Interpolate { .. } => "interpolate",
            Module::InterpolateBackward { .. } => "interpolate_backward",
            Module::Unfold { .. } => "unfold4d",
            Module::Fold { .. } => "fold4d",
            Module::BatchNormTrain { .. } => "batch_norm_train",
            Module::LayerNorm { .. } => "layer_norm",
            Module::CtcLoss { .. } => "ctc_loss",
        }
    }
}

impl<B: Backend> Rule<B> for Module<B> {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.name(),
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        match self {
            Module::Embedding { indices, .. } => {
                let [w] = take1::<B>(inputs);
                B::embedding(w, indices.clone())
            }
            Module::Linear { .. } => {
                let (x, w, b) = take2_opt::<B>(inputs);
                B::linear(x, w, b)
            }
            Module::Interpolate {
                output_size,
                options,
                ..
            } => {
                let [x] = take1::<B>(inputs);
                B::interpolate(x, *output_size, options.clone())
            }
            Module::InterpolateBackward {
                output_size,
                options,
            } => {
                let [x, g] = take2::<B>(inputs);
                B::interpolate_backward(x, g, *output_size, options.clone())
            }
            Module::Unfold {
                kernel_size,
                options,
                ..
            } => {
                let [x] = take1::<B>(inputs);
                B::unfold4d(x, *kernel_size, options.clone())
            }
            Module::Fold {
                output_size,
                kernel_size,
                options,
            } => {
                let [x] = take1::<B>(inputs);
                B::fold4d(x, *output_size, *kernel_size, options.clone())
            }
            Module::BatchNormTrain { epsilon, .. } => {
                let [x, gamma, beta] = take3::<B>(inputs);
                B::batch_norm_train(x, gamma, beta, *epsilon).output
            }
            Module::LayerNorm { epsilon, .. } => {
                let (x, gamma, beta) = take2_opt::<B>(inputs);
                B::layer_norm(x, gamma, beta, *epsilon)
            }
            Module::CtcLoss {
                targets,
                input_lengths,
                target_lengths,
                blank,
            } => {
                let [lp] = take1::<B>(inputs);
                B::ctc_loss(
                    lp,
                    targets.clone(),
                    input_lengths.clone(),
                    target_lengths.clone(),
                    *blank,
                )
            }
        }
    }

    fn reads(&self, t: Tracked) -> Reads {
        match self {
            Module::Embedding { .. }
            | Module::Interpolate { .. }
            | Module::InterpolateBackward { .. }
            | Module::Unfold { .. }
            | Module::Fold { .. } => Reads::NOTHING,
            // Bilinear in (x, weight); the bias gradient reads nothing.
            Module::Linear { .. } => Reads::NOTHING
                .with_input_if(1, t.get(0))
                .with_input_if(0, t.get(1)),
            // The inner kernel reads x and gamma for either gradient; beta's reads nothing.
            Module::BatchNormTrain { .. } => {
                let either = t.get(0) || t.get(1);
                Reads::NOTHING
                    .with_input_if(0, either)
                    .with_input_if(1, either)
            }
            // x (for the normalised values) for either gradient, gamma only for x's.
            Module::LayerNorm { .. } => Reads::NOTHING
                .with_input_if(0, t.get(0) || t.get(1))
                .with_input_if(1, t.get(0)),
            Module::CtcLoss { .. } => Reads::input(0),
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        match self {
            // Scatter-add of the output rows back to the rows they came from.
            Module::Embedding {
                indices,
                weight_shape,
            } => {
                let w = cx.shape_arg(0, weight_shape, &g);
                cx.set(0, B::embedding_backward(w, g, indices.clone()));
            }
            // d/dx = g W^T ; d/dW = x^T g (summed over leading dims) ; d/db = sum g.
            // The bias gradient last: it is small, and held it would only add to the peak
            // of the two products.
            Module::Linear { has_bias } => {
                if cx.needs_grad(1) {
                    let x = cx.input(0);
                    cx.set(1, B::linear_weight_backward(x, g.clone()));
                }
                if cx.needs_grad(0) {
                    let w = cx.input(1);
                    cx.set(0, B::linear_x_backward(w, g.clone()));
                }
                if *has_bias && cx.needs_grad(2) {
                    cx.set(2, B::linear_bias_backward(g));
                }
            }
            Module::Interpolate {
                output_size,
                options,
                x_shape,
            } => {
                let x = cx.shape_arg(0, x_shape, &g);
                let grad = B::interpolate_backward(x, g, *output_size, options.clone());
                cx.set(0, grad);
            }
            // The adjoint of interpolate's backward is interpolate; x gets no gradient.
            Module::InterpolateBackward {
                output_size,
                options,
            } => {
                if cx.needs_grad(1) {
                    cx.set(1, B::interpolate(g, *output_size, options.clone()));
                }
            }
            Module::Unfold {
                kernel_size,
                options,
                size,
            } => cx.set(0, B::fold4d(g, *size, *kernel_size, options.clone())),
            Module::Fold {
                kernel_size,
                options,
                ..
            } => cx.set(0, B::unfold4d(g, *kernel_size, options.clone())),
            Module::BatchNormTrain {
                epsilon,
                mean,
                variance,
            } => {
                if cx.needs_grad(0) || cx.needs_grad(1) {
                    let (x, gamma) = (cx.input(0), cx.input(1));
                    let grads = B::batch_norm_train_backward(
                        x,
                        gamma,
                        mean.clone(),
                        variance.clone(),
                        *epsilon,
                        g.clone(),
                    );
                    cx.set(0, grads.x_grad);
                    cx.set(1, grads.gamma_grad);
                }
                // d/dbeta = sum of g over everything but channels.
                if cx.needs_grad(2) {
                    cx.set(2, sum_to_channels::<B>(g));
                }
            }
            Module::LayerNorm { epsilon, has_beta } => {
                layer_norm_vjp(cx, g, *epsilon, *has_beta);
            }
            Module::CtcLoss {
                targets,
                input_lengths,
                target_lengths,
                blank,
            } => {
                let grad = B::ctc_loss_backward(
                    cx.input(0),
                    targets.clone(),
                    input_lengths.clone(),
                    target_lengths.clone(),
                    g,
                    *blank,
                );
                cx.set(0, grad);
            }
        }
    }
}

/// Layer norm backward. With `xh = (x - mean) / sigma` over the last dim (size `d`) and
/// `gy = g * gamma`:
/// `dx = (gy - mean(gy) - xh * mean(gy * xh)) / sigma`, `dgamma = sum(g * xh)`,
/// `dbeta = sum(g)`, the sums over all leading dims.
fn layer_norm_vjp<B: Backend>(
    cx: &mut Vjp<'_, B>,
    g: FloatTensor<B>,
    epsilon: f64,
    has_beta: bool,
) {
    let shape = g.shape();
    let last = shape.num_dims() - 1;
    let d = shape[last];
    let rows = shape.num_elements() / d.max(1);
    let sum_rows = |t: FloatTensor<B>| {
        let flat = B::float_reshape(t, Shape::new([rows, d]));
        B::float_reshape(B::float_sum_dim(flat, 0), Shape::new([d]))
    };
    if has_beta && cx.needs_grad(2) {
        cx.set(2, sum_rows(g.clone()));
    }
    if !(cx.needs_grad(0) || cx.needs_grad(1)) {
        return;
    }
    let x = cx.input(0);
    let mean = B::float_mean_dim(x.clone(), last);
    let centered = B::float_sub(x, mean);
    let var = B::float_mean_dim(B::float_mul(centered.clone(), centered.clone()), last);
    let inv_std = B::float_recip(B::float_sqrt(B::float_add_scalar(var, scalar(epsilon))));
    let xh = B::float_mul(centered, inv_std.clone());
    if cx.needs_grad(1) {
        cx.set(1, sum_rows(B::float_mul(g.clone(), xh.clone())));
    }
    if cx.needs_grad(0) {
        let mut bshape: SmallVec<[usize; 4]> = smallvec![1; last + 1];
        bshape[last] = d;
        let gamma = B::float_reshape(cx.input(1), Shape::from(bshape.to_vec()));
        let gy = B::float_mul(g, gamma);
        let mean_gy = B::float_mean_dim(gy.clone(), last);
        let mean_gy_xh = B::float_mean_dim(B::float_mul(gy.clone(), xh.clone()), last);
        let inner = B::float_sub(B::float_sub(gy, mean_gy), B::float_mul(xh, mean_gy_xh));
        cx.set(0, B::float_mul(inner, inv_std));
    }
}

/// The three inputs of a three-input op.
fn take3<B: Backend>(inputs: Values<B>) -> [FloatTensor<B>; 3] {
    let mut it = inputs.into_iter();
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(a), Some(b), Some(c), None) => [a, b, c],
        _ => panic!("remat internal error: a three-input op replayed with another arity"),
    }
}
