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
