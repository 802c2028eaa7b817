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

/// A shape a rule keeps for its backward step or its replay, in 24 bytes where Burn's
/// [`Shape`] takes 48 (NOTE [compact-shapes]): up to five dims that each fit in a `u32` in
/// place, any other shape boxed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dims {
    /// `dims[..rank]`.
    Small { rank: u8, dims: [u32; SMALL_RANK] },
    /// Any other shape.
    Large(Box<[usize]>),
}

/// The largest rank [`Dims`] keeps in place.
const SMALL_RANK: usize = 5;

// NOTE [compact-shapes]: every recorded op keeps its rule until its backward step, so a
// rule's bytes are paid once per op of the graph, and on graphs of small ops (an unrolled
// RNN of 4 KiB values) the graph's bookkeeping is most of what a step holds under a budget
// (FIXME [tape-bytes] in ARCHITECTURE.md). A reshape kept two `Shape`s (104 bytes of rule),
// a broadcasting binary op a boxed pair (96 bytes). `Dims` keeps the same dims in half the
// bytes and rebuilds a `Shape` (in place up to five dims, no allocation) when the backward
// step or a replay needs one. The conversion is exact: a dim that does not fit in a `u32`
// sends the shape to the boxed form (`dims_round_trip`).

impl Dims {
    /// The dims of `shape`.
    pub(crate) fn new(shape: &Shape) -> Self {
        let rank = shape.num_dims();
        if rank <= SMALL_RANK {
            let mut dims = [0u32; SMALL_RANK];
            let fits = shape
                .iter()
                .zip(&mut dims)
                .all(|(&dim, small)| u32::try_from(dim).map(|d| *small = d).is_ok());
            if fits {
                return Dims::Small {
                    rank: rank as u8,
                    dims,
                };
            }
        }
        Dims::Large(shape.iter().copied().collect())
    }

    /// The shape, as Burn's kernels take it.
    pub(crate) fn shape(&self) -> Shape {
        match self {
            Dims::Small { rank, dims } => dims[..*rank as usize]
                .iter()
                .map(|&dim| dim as usize)
                .collect(),
            Dims::Large(dims) => dims.iter().copied().collect(),
        }
    }
}

impl From<Shape> for Dims {
    fn from(shape: Shape) -> Self {
        Dims::new(&shape)
    }
}

/// The input shapes of a two-input op whose inputs may broadcast, kept only where a
/// broadcast may have happened: one word in the op's rule, the shapes boxed (FIXME
/// \[tape-bytes\] in ARCHITECTURE.md: most binary ops and products broadcast nothing; NOTE
/// [compact-shapes]).
#[derive(Debug)]
pub(crate) struct Broadcast(Option<Box<[Dims; 2]>>);

impl Broadcast {
    /// The shapes `lhs` and `rhs`, kept when `may_broadcast`.
    pub(crate) fn new(lhs: Shape, rhs: Shape, may_broadcast: bool) -> Self {
        Self(may_broadcast.then(|| Box::new([Dims::new(&lhs), Dims::new(&rhs)])))
    }

    /// `grad`, the gradient of input `side` (0 or 1), summed down to that input's shape
    /// ([`unbroadcast`]); as it is where nothing broadcast.
    pub(crate) fn undo<B: Backend>(&self, grad: FloatTensor<B>, side: usize) -> FloatTensor<B> {
        match &self.0 {
            None => grad,
            Some(shapes) => unbroadcast::<B>(grad, &shapes[side].shape()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept shape is the shape it was made from, in place or boxed (NOTE
    /// [compact-shapes]), and half the bytes of Burn's.
    #[test]
    fn dims_round_trip() {
        let shapes = [
            Shape::new([]),
            Shape::new([3]),
            Shape::new([16, 64]),
            Shape::new([2, 3, 4, 5, 6]),
            Shape::new([2, 3, 4, 5, 6, 7]),
            Shape::new([1 << 33, 2]),
            Shape::new([u32::MAX as usize, 0, 1]),
        ];
        for shape in shapes {
            let dims = Dims::new(&shape);
            assert_eq!(dims.shape(), shape);
            let small =
                shape.num_dims() <= SMALL_RANK && shape.iter().all(|&d| d <= u32::MAX as usize);
            assert_eq!(matches!(dims, Dims::Small { .. }), small, "{shape:?}");
        }
        assert_eq!(core::mem::size_of::<Dims>(), 24);
        assert_eq!(core::mem::size_of::<Broadcast>(), 8);
    }
}
