//! Small helpers shared by the backward rules of several families.

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Scalar, TensorMetadata, get_or_init_device_settings};
use burn_std::{BoolDType, Shape};

/// A float scalar.
pub(crate) fn scalar(value: f64) -> Scalar {
    Scalar::Float(value)
}

/// The default bool dtype of `tensor`'s device (for masks built in backward).
pub(crate) fn bool_dtype<B: Backend>(tensor: &FloatTensor<B>) -> BoolDType {
    get_or_init_device_settings::<B>(&tensor.device()).bool_dtype
}

/// Zeros with the shape, device and dtype of `like`.
pub(crate) fn zeros_like<B: Backend>(like: &FloatTensor<B>) -> FloatTensor<B> {
    B::float_zeros(like.shape(), &like.device(), like.dtype().into())
}

/// The input shapes of a two-input op whose inputs may broadcast, kept only where a
/// broadcast may have happened: one word in the op's rule, the shapes boxed (FIXME
/// \[tape-bytes\] in ARCHITECTURE.md: most binary ops and products broadcast nothing, and
/// two shapes in place are 96 bytes of every such node).
#[derive(Debug)]
pub(crate) struct Broadcast(Option<Box<(Shape, Shape)>>);

impl Broadcast {
    /// The shapes `lhs` and `rhs`, kept when `may_broadcast`.
    pub(crate) fn new(lhs: Shape, rhs: Shape, may_broadcast: bool) -> Self {
        Self(may_broadcast.then(|| Box::new((lhs, rhs))))
    }

    /// `grad`, the gradient of input `side` (0 or 1), summed down to that input's shape
    /// ([`unbroadcast`]); as it is where nothing broadcast.
    pub(crate) fn undo<B: Backend>(&self, grad: FloatTensor<B>, side: usize) -> FloatTensor<B> {
        match &self.0 {
            None => grad,
            Some(shapes) => unbroadcast::<B>(grad, if side == 0 { &shapes.0 } else { &shapes.1 }),
        }
    }
}

/// Sums `grad` down to `shape`, undoing broadcasting: dims of size 1 in `shape` that are
/// larger in `grad` are summed (kept as size 1), and leading dims `shape` lacks are summed
/// away.
pub(crate) fn unbroadcast<B: Backend>(grad: FloatTensor<B>, shape: &Shape) -> FloatTensor<B> {
    let grad_shape = grad.shape();
    if &grad_shape == shape {
        return grad;
    }
    let rank = grad_shape.num_dims();
    let target_rank = shape.num_dims();
    let mut grad = grad;
    let offset = rank - target_rank;
    for dim in 0..rank {
        let target = if dim < offset { 1 } else { shape[dim - offset] };
        if grad_shape[dim] != target {
            debug_assert_eq!(target, 1, "remat internal error: not a broadcast");
            grad = B::float_sum_dim(grad, dim);
        }
    }
    if offset > 0 {
        grad = B::float_reshape(grad, shape.clone());
    }
    grad
}

/// Slices selecting all of `shape` except `slice` along `dim`.
pub(crate) fn along(shape: &Shape, dim: usize, slice: burn_std::Slice) -> Vec<burn_std::Slice> {
    shape
        .iter()
        .enumerate()
        .map(|(axis, &size)| {
            if axis == dim {
                slice
            } else {
                burn_std::Slice::new(0, Some(size as isize), 1)
            }
        })
        .collect()
}

// NOTE [shape-only-arguments]: several inner backward kernels take a tensor whose values the
// gradient does not depend on: `conv*_x_backward` takes `x` and `conv*_weight_backward` the
// weight (Burn's default kernels, which Flex and NdArray use, and CubeCL's read only their
// shape), the pool backwards take `x` (Flex, NdArray and CubeCL read its shape; Flex's 2d
// kernels reshape it and CubeCL's permute it into a contiguous buffer), `interpolate_backward`
// takes `x` and `embedding_backward` the weights (shape only). Rules do not save such a
// value for its shape, and do not allocate an input-sized buffer for it either
// ([`Vjp::shape_arg`](crate::graph::Vjp::shape_arg)): they pass the value itself when it is
// kept anyway (stored for another reader, or held on the edge), otherwise one element
// broadcast to the shape. On Flex and CubeCL a broadcast is a view (no input-sized
// allocation); where a kernel or a backend copies it into a contiguous buffer (Flex's 2d
// pools, CubeCL's pools, NdArray's `float_expand`), it costs what a stand-in buffer cost.

/// Sums `grad` over every dim but dim 1, giving shape `[channels]`: the gradient of a
/// per-channel bias or shift.
pub(crate) fn sum_to_channels<B: Backend>(grad: FloatTensor<B>) -> FloatTensor<B> {
    let shape = grad.shape();
    let channels = shape[1];
    let rest = shape.num_elements() / channels.max(1);
    let flat = B::float_reshape(B::float_swap_dims(grad, 0, 1), Shape::new([channels, rest]));
    B::float_reshape(B::float_sum_dim(flat, 1), Shape::new([channels]))
}

/// The default int dtype of `tensor`'s device (for indices built in forward or backward).
pub(crate) fn int_dtype<B: Backend>(tensor: &FloatTensor<B>) -> burn_std::IntDType {
    get_or_init_device_settings::<B>(&tensor.device()).int_dtype
}
