//! Activation functions with direct backward rules, using the inner backend's backward
//! kernels where Burn has them. All are [`Cost::Cheap`].

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Scalar, Slice, TensorMetadata};
use smallvec::smallvec;

use super::common::{bool_dtype, scalar};
use super::record::record;
use super::unary::take1;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// An activation function with its parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Activation {
    Relu,
    Gelu,
    Sigmoid,
    LogSigmoid,
    /// `x` for `x >= 0`, `slope * x` below.
    LeakyRelu(Scalar),
    /// `clamp(alpha * x + beta, 0, 1)`.
    HardSigmoid {
        alpha: Scalar,
        beta: Scalar,
    },
    /// Softmax along a dim.
    Softmax(usize),
    /// Log-softmax along a dim.
    LogSoftmax(usize),
}

/// Records activation `op` applied to `tensor`.
pub(crate) fn apply<B: Backend>(
    balanced: bool,
    op: Activation,
    tensor: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    record(op, smallvec![tensor], balanced)
}

impl Activation {
    fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::Sigmoid => "sigmoid",
            Activation::LogSigmoid => "log_sigmoid",
            Activation::LeakyRelu(_) => "leaky_relu",
            Activation::HardSigmoid { .. } => "hard_sigmoid",
            Activation::Softmax(_) => "softmax",
            Activation::LogSoftmax(_) => "log_softmax",
        }
    }
}

impl<B: Backend> Rule<B> for Activation {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.name(),
            cost: Cost::Cheap,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        match *self {
            Activation::Relu => B::relu(x),
            Activation::Gelu => B::gelu(x),
            Activation::Sigmoid => B::sigmoid(x),
            Activation::LogSigmoid => B::log_sigmoid(x),
            Activation::LeakyRelu(slope) => B::leaky_relu(x, slope),
            Activation::HardSigmoid { alpha, beta } => B::hard_sigmoid(x, alpha, beta),
            Activation::Softmax(dim) => B::softmax(x, dim),
            Activation::LogSoftmax(dim) => B::log_softmax(x, dim),
        }
    }

    fn reads(&self, _t: Tracked) -> Reads {
        match self {
            Activation::Relu
            | Activation::Sigmoid
            | Activation::HardSigmoid { .. }
            | Activation::Softmax(_)
            | Activation::LogSoftmax(_) => Reads::OUTPUT,
            Activation::Gelu | Activation::LogSigmoid | Activation::LeakyRelu(_) => Reads::input(0),
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let grad = match *self {
            // The gradient passes where the output is positive.
            Activation::Relu => B::relu_backward(cx.output(), g),
            Activation::Gelu => B::gelu_backward(cx.input(0), g),
            // d/dx s(x) = s(x) (1 - s(x))
            Activation::Sigmoid => B::sigmoid_backward(cx.output(), g),
            // d/dx log s(x) = 1 - s(x)
            Activation::LogSigmoid => B::log_sigmoid_backward(cx.input(0), g),
            Activation::LeakyRelu(slope) => {
                let x = cx.input(0);
                let below = B::float_lower_elem(x.clone(), scalar(0.0), bool_dtype::<B>(&x));
                let scaled = B::float_mul_scalar(g.clone(), slope);
                B::float_mask_where(g, below, scaled)
            }
            // alpha where the output is strictly inside (0, 1), else 0.
            Activation::HardSigmoid { alpha, .. } => {
                let y = cx.output();
                let dtype = bool_dtype::<B>(&y);
                let low = B::float_lower_equal_elem(y.clone(), scalar(0.0), dtype);
                let high = B::float_greater_equal_elem(y, scalar(1.0), dtype);
                let g = B::float_mask_fill(g, low, scalar(0.0));
                let g = B::float_mask_fill(g, high, scalar(0.0));
                B::float_mul_scalar(g, alpha)
            }
            // dx = y * (g - sum(g * y))
            Activation::Softmax(dim) => {
                let y = cx.output();
                let dot = sum_of_product::<B>(&g, &y, dim);
                B::float_mul(y, B::float_sub(g, dot))
            }
            // dx = g - exp(y) * sum(g)
            Activation::LogSoftmax(dim) => {
                let y = cx.output();
                let total = B::float_sum_dim(g.clone(), dim);
                B::float_sub(g, B::float_mul(B::float_exp(y), total))
            }
        };
        cx.set(0, grad);
    }
}

// NOTE [softmax-dot]: softmax's backward step needs `sum(g * y)` along its dim. Made whole,
// the product is a temporary as large as the output, beside the incoming gradient and the
// saved output; on attention scores (a transformer's largest tensors) that is a third
// score-sized tensor in the step. The product is now made a slab at a time along the
// outermost other dim (zero-copy slices), each slab at most `SLAB_BYTES` where that dim
// allows, and only the slabs' sums are kept: the step's peak above its start on 1 MiB fell
// from 2.02 to 1.27 MiB (`softmax_s_backward_makes_no_output_sized_product`). On the
// bench's transformer this was not what set the step's peak under a budget: that peak, 34
// MiB above the held peak at 10% and at 5%, is still in backward, elsewhere (bench/README.md,
// "Capacity"). Each element's product and each row's sum are the same operations on the
// same values as before.

/// The largest product [`sum_of_product`] makes at once, where the slab dim allows.
const SLAB_BYTES: usize = 256 * 1024;

/// `sum(a * b)` along `dim` (kept with size 1), for `a` and `b` of one shape, made a slab of
/// the outermost other dim at a time (NOTE \[softmax-dot\]).
fn sum_of_product<B: Backend>(
    a: &FloatTensor<B>,
    b: &FloatTensor<B>,
    dim: usize,
) -> FloatTensor<B> {
    let whole = || B::float_sum_dim(B::float_mul(a.clone(), b.clone()), dim);
    let shape = a.shape();
    let bytes = shape.num_elements() * a.dtype().size();
    let Some(along) = (0..shape.num_dims()).find(|&d| d != dim && shape[d] > 1) else {
        return whole();
    };
    let size = shape[along];
    let slabs = bytes.div_ceil(SLAB_BYTES).min(size);
    if slabs <= 1 {
        return whole();
    }
    let step = size.div_ceil(slabs);
    let mut slices: Vec<Slice> = (0..shape.num_dims())
        .map(|d| Slice::new(0, Some(shape[d] as isize), 1))
        .collect();
    let sums = (0..size)
        .step_by(step)
        .map(|start| {
            slices[along] = Slice::new(start as isize, Some((start + step).min(size) as isize), 1);
            let product = B::float_mul(
                B::float_slice(a.clone(), &slices),
                B::float_slice(b.clone(), &slices),
            );
            B::float_sum_dim(product, dim)
        })
        .collect();
    B::float_cat(sums, along)
}
