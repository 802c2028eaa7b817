//! Pooling: average, adaptive average and max pools (1d, 2d, 3d), and the backward kernels of
//! the 2d pools taken as ops in their own right. All are [`Cost::Compute`].
//!
//! Every pool is linear in `x` once the max positions are fixed, so no backward reads a saved
//! value: the inner backward kernels take `x` only for its shape (NOTE
//! [shape-only-arguments] in `common`), and max pools keep their argmax indices as a rule
//! parameter. The backward kernels are in turn linear in the incoming gradient, and their
//! adjoint is the forward pool (for max pools, a gather at the indices).

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, TensorMetadata, get_or_init_device_settings};
use burn_std::{IntDType, Shape};
use smallvec::smallvec;

use super::record::{record, record_computed};
use super::unary::{take1, take2};
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// A pooling window over `N` spatial dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window<const N: usize> {
    pub(crate) kernel_size: [usize; N],
    pub(crate) stride: [usize; N],
    pub(crate) padding: [usize; N],
    /// Always 1 for average pools.
    pub(crate) dilation: [usize; N],
    pub(crate) ceil_mode: bool,
}

/// A pool with its parameters. Input: `[x]`.
#[derive(Debug)]
pub(crate) enum Pool<B: Backend> {
    /// Average pool; the flag is `count_include_pad`.
    Avg1d(Window<1>, bool),
    Avg2d(Window<2>, bool),
    AdaptiveAvg1d(usize),
    AdaptiveAvg2d([usize; 2]),
    AdaptiveAvg3d([usize; 3]),
    /// Max pool with the flat (per-channel) indices of its maxima.
    Max1d(Window<1>, IntTensor<B>),
    Max2d(Window<2>, IntTensor<B>),
}

/// A pool and the input shape its backward kernel takes (NOTE [shape-only-arguments]).
#[derive(Debug)]
struct PoolRule<B: Backend> {
    op: Pool<B>,
    x_shape: Shape,
}

/// Records pool `op` of `x`. Max pools go through [`max_pool1d_with_indices`] or
/// [`max_pool2d_with_indices`], which produce the indices.
pub(crate) fn pool<B: Backend>(
    balanced: bool,
    op: Pool<B>,
    x: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    let x_shape = x.primitive.shape();
    record(PoolRule { op, x_shape }, smallvec![x], balanced)
}

/// A 1d max pool and its indices.
pub(crate) fn max_pool1d_with_indices<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    w: Window<1>,
    indices_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    let out = B::max_pool1d_with_indices(
        x.primitive.clone(),
        w.kernel_size[0],
        w.stride[0],
        w.padding[0],
        w.dilation[0],
        w.ceil_mode,
        indices_dtype,
    );
    let x_shape = x.primitive.shape();
    let op = Pool::Max1d(w, out.indices.clone());
    let rule = PoolRule { op, x_shape };
    let output = record_computed(rule, smallvec![x], balanced, out.output);
    (output, out.indices)
}

/// A 2d max pool and its indices.
pub(crate) fn max_pool2d_with_indices<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    w: Window<2>,
    indices_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    let out = B::max_pool2d_with_indices(
        x.primitive.clone(),
        w.kernel_size,
        w.stride,
        w.padding,
        w.dilation,
        w.ceil_mode,
        indices_dtype,
    );
    let x_shape = x.primitive.shape();
    let op = Pool::Max2d(w, out.indices.clone());
    let rule = PoolRule { op, x_shape };
    let output = record_computed(rule, smallvec![x], balanced, out.output);
    (output, out.indices)
}

/// A 1d max pool: untracked inputs skip the indices.
pub(crate) fn max_pool1d<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    w: Window<1>,
) -> AutodiffTensor<B> {
    if !x.is_tracked() {
        let [k, s, p, d] = [w.kernel_size, w.stride, w.padding, w.dilation].map(|a| a[0]);
        return AutodiffTensor::new(B::max_pool1d(x.primitive, k, s, p, d, w.ceil_mode));
    }
    let dtype = index_dtype::<B>(&x.primitive);
    max_pool1d_with_indices(balanced, x, w, dtype).0
}

/// A 2d max pool: untracked inputs skip the indices.
pub(crate) fn max_pool2d<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    w: Window<2>,
) -> AutodiffTensor<B> {
    if !x.is_tracked() {
        return AutodiffTensor::new(B::max_pool2d(
            x.primitive,
            w.kernel_size,
            w.stride,
            w.padding,
            w.dilation,
            w.ceil_mode,
        ));
    }
    let dtype = index_dtype::<B>(&x.primitive);
    max_pool2d_with_indices(balanced, x, w, dtype).0
}

/// The default int dtype of `x`'s device, for indices the caller never sees.
fn index_dtype<B: Backend>(x: &FloatTensor<B>) -> IntDType {
    get_or_init_device_settings::<B>(&x.device()).int_dtype
}

impl<B: Backend> Pool<B> {
    fn name(&self) -> &'static str {
        match self {
            Pool::Avg1d(..) => "avg_pool1d",
            Pool::Avg2d(..) => "avg_pool2d",
            Pool::AdaptiveAvg1d(_) => "adaptive_avg_pool1d",
            Pool::AdaptiveAvg2d(_) => "adaptive_avg_pool2d",
            Pool::AdaptiveAvg3d(_) => "adaptive_avg_pool3d",
            Pool::Max1d(..) => "max_pool1d",
            Pool::Max2d(..) => "max_pool2d",
        }
    }
}

impl<B: Backend> Rule<B> for PoolRule<B> {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.op.name(),
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        match &self.op {
            Pool::Avg1d(w, cip) => B::avg_pool1d(
                x,
                w.kernel_size[0],
                w.stride[0],
                w.padding[0],
                *cip,
                w.ceil_mode,
            ),
            Pool::Avg2d(w, cip) => {
                B::avg_pool2d(x, w.kernel_size, w.stride, w.padding, *cip, w.ceil_mode)
            }
            Pool::AdaptiveAvg1d(size) => B::adaptive_avg_pool1d(x, *size),
            Pool::AdaptiveAvg2d(size) => B::adaptive_avg_pool2d(x, *size),
            Pool::AdaptiveAvg3d(size) => B::adaptive_avg_pool3d(x, *size),
            // Replays recompute the maxima only; the indices are already known.
            Pool::Max1d(w, _) => B::max_pool1d(
                x,
                w.kernel_size[0],
                w.stride[0],
                w.padding[0],
                w.dilation[0],
                w.ceil_mode,
            ),
            Pool::Max2d(w, _) => B::max_pool2d(
                x,
                w.kernel_size,
                w.stride,
                w.padding,
                w.dilation,
                w.ceil_mode,
            ),
        }
    }

    fn reads(&self, _t: Tracked) -> Reads {
        match self.op {
            Pool::Avg1d(..)
            | Pool::Avg2d(..)
            | Pool::AdaptiveAvg1d(_)
            | Pool::AdaptiveAvg2d(_)
            | Pool::AdaptiveAvg3d(_)
            | Pool::Max1d(..)
            | Pool::Max2d(..) => Reads::NOTHING,
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let x = cx.shape_arg(0, &self.x_shape, &g);
        let grad = match &self.op {
            // Each output spreads its gradient evenly over its window.
            Pool::Avg1d(w, cip) => B::avg_pool1d_backward(
                x,
                g,
                w.kernel_size[0],
                w.stride[0],
                w.padding[0],
                *cip,
                w.ceil_mode,
            ),
            Pool::Avg2d(w, cip) => {
                B::avg_pool2d_backward(x, g, w.kernel_size, w.stride, w.padding, *cip, w.ceil_mode)
            }
            Pool::AdaptiveAvg1d(_) => B::adaptive_avg_pool1d_backward(x, g),
            Pool::AdaptiveAvg2d(_) => B::adaptive_avg_pool2d_backward(x, g),
            Pool::AdaptiveAvg3d(_) => B::adaptive_avg_pool3d_backward(x, g),
            // Each output sends its gradient to the position of its maximum.
            Pool::Max1d(w, indices) => {
                B::max_pool1d_with_indices_backward(
                    x,
                    w.kernel_size[0],
                    w.stride[0],
                    w.padding[0],
                    w.dilation[0],
                    w.ceil_mode,
                    g,
                    indices.clone(),
                )
                .x_grad
            }
            Pool::Max2d(w, indices) => {
                B::max_pool2d_with_indices_backward(
                    x,
                    w.kernel_size,
                    w.stride,
                    w.padding,
                    w.dilation,
                    w.ceil_mode,
                    g,
                    indices.clone(),
                )
                .x_grad
            }
        };
        cx.set(0, grad);
    }
}

/// The backward kernel of a 2d pool, taken as an op of `(x, grad)`: linear in `grad`, and
/// independent of the values of `x`.
#[derive(Debug)]
pub(crate) enum PoolBackward<B: Backend> {
    Avg2d(Window<2>, bool),
    AdaptiveAvg2d,
    AdaptiveAvg3d,
    Max2d(Window<2>, IntTensor<B>),
}

/// Records the backward kernel `op` applied to `grad` (for an input shaped like `x`).
///
/// When neither is tracked this is just the inner kernel. Otherwise the result is
/// differentiable in `grad` (its adjoint is the forward pool); `x` receives no gradient, since
/// the result does not depend on its values.
pub(crate) fn pool_backward<B: Backend>(
    balanced: bool,
    op: PoolBackward<B>,
    x: AutodiffTensor<B>,
    grad: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    let grad_shape = grad.primitive.shape();
    record(
        PoolBackwardRule { op, grad_shape },
        smallvec![x, grad],
        balanced,
    )
}

/// A pool backward kernel and the shape of its incoming gradient (the pool's output size).
#[derive(Debug)]
struct PoolBackwardRule<B: Backend> {
    op: PoolBackward<B>,
    grad_shape: Shape,
}

impl<B: Backend> Rule<B> for PoolBackwardRule<B> {
    fn info(&self) -> OpInfo {
        let name = match self.op {
            PoolBackward::Avg2d(..) => "avg_pool2d_backward",
            PoolBackward::AdaptiveAvg2d => "adaptive_avg_pool2d_backward",
            PoolBackward::AdaptiveAvg3d => "adaptive_avg_pool3d_backward",
            PoolBackward::Max2d(..) => "max_pool2d_with_indices_backward",
        };
        OpInfo {
            name,
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x, g] = take2::<B>(inputs);
        match &self.op {
            PoolBackward::Avg2d(w, cip) => {
                B::avg_pool2d_backward(x, g, w.kernel_size, w.stride, w.padding, *cip, w.ceil_mode)
            }
            PoolBackward::AdaptiveAvg2d => B::adaptive_avg_pool2d_backward(x, g),
            PoolBackward::AdaptiveAvg3d => B::adaptive_avg_pool3d_backward(x, g),
            PoolBackward::Max2d(w, indices) => {
                B::max_pool2d_with_indices_backward(
                    x,
                    w.kernel_size,
                    w.stride,
                    w.padding,
                    w.dilation,
                    w.ceil_mode,
                    g,
                    indices.clone(),
                )
                .x_grad
            }
        }
    }

    fn reads(&self, _t: Tracked) -> Reads {
        match self.op {
            PoolBackward::Avg2d(..)
            | PoolBackward::AdaptiveAvg2d
            | PoolBackward::AdaptiveAvg3d
            | PoolBackward::Max2d(..) => Reads::NOTHING,
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, d: FloatTensor<B>) {
        // Input 0 (x) gets no gradient: the result does not depend on its values.
        if !cx.needs_grad(1) {
            return;
        }
        let dims = self.grad_shape.clone().to_vec();
        let gg = match &self.op {
            // The adjoint of a pool's backward is the pool.
            PoolBackward::Avg2d(w, cip) => {
                B::avg_pool2d(d, w.kernel_size, w.stride, w.padding, *cip, w.ceil_mode)
            }
            PoolBackward::AdaptiveAvg2d => B::adaptive_avg_pool2d(d, [dims[2], dims[3]]),
            PoolBackward::AdaptiveAvg3d => B::adaptive_avg_pool3d(d, [dims[2], dims[3], dims[4]]),
            // The adjoint of scattering to the argmax is gathering from it.
            PoolBackward::Max2d(_, indices) => {
                let [n, c, h, w] = d.shape().dims();
                let flat = B::float_reshape(d, Shape::new([n, c, h * w]));
                let idx = B::int_reshape(indices.clone(), Shape::new([n, c, dims[2] * dims[3]]));
                B::float_reshape(B::float_gather(2, flat, idx), self.grad_shape.clone())
            }
        };
        cx.set(1, gg);
    }
}
