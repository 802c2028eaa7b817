//! Layout ops of one tensor (reshape, swap_dims, permute, transpose, flip, expand, unfold),
//! copies (repeat_dim, pad, cat) and transfers between devices of one backend.
//!
//! Every rule here reads no value in backward: the gradient is a function of the output
//! gradient and of shapes stored in the rule. Views are [`Cost::Alias`]; ops that copy
//! (repeat_dim, pad, cat, to_device) are [`Cost::Cheap`].

use burn_backend::tensor::{Device, FloatTensor};
use burn_backend::{Backend, TensorData, TensorMetadata, get_or_init_device_settings};
use burn_std::{IndexingUpdateOp, PadMode, Shape, Slice};
use smallvec::{SmallVec, smallvec};

use super::common::{Dims, along, unbroadcast};
use super::record::record;
use super::unary::take1;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// A layout op, copy or transfer of one tensor, with what its backward needs.
#[derive(Debug)]
enum Layout<B: Backend> {
    /// Reshape from the input shape to `to`.
    Reshape { from: Dims, to: Dims },
    /// Swap two dims.
    SwapDims(usize, usize),
    /// Swap the last two dims.
    Transpose,
    /// Reorder dims: output dim `i` is input dim `axes[i]`.
    Permute(Vec<usize>),
    /// Reverse the order of elements along the axes.
    Flip(Vec<usize>),
    /// Broadcast from the input shape to `to`.
    Expand { from: Dims, to: Dims },
    /// Windows of `size` every `step` along `dim`, appended as the last dim.
    Unfold {
        from: Dims,
        dim: usize,
        size: usize,
        step: usize,
    },
    /// Tile `times` copies along `dim`.
    RepeatDim {
        from: Dims,
        dim: usize,
        times: usize,
    },
    /// Pad with one `(before, after)` pair per dim.
    Pad {
        from: Dims,
        padding: Vec<(usize, usize)>,
        mode: PadMode,
    },
    /// Move to `to` from `from` (same backend).
    ToDevice { from: Device<B>, to: Device<B> },
}

/// Records `op` applied to `tensor`.
fn apply<B: Backend>(
    balanced: bool,
    op: Layout<B>,
    tensor: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    record(op, smallvec![tensor], balanced)
}

/// Moves `tensor` to `device`; its gradient moves back.
pub(crate) fn to_device<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    device: &Device<B>,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.device();
    let op = Layout::ToDevice {
        from,
        to: device.clone(),
    };
    apply(balanced, op, tensor)
}

/// Tiles `times` copies of `tensor` along `dim`.
pub(crate) fn repeat_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    times: usize,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape().into();
    apply(balanced, Layout::RepeatDim { from, dim, times }, tensor)
}

/// Swaps the last two dims.
pub(crate) fn transpose<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    apply(balanced, Layout::Transpose, tensor)
}

/// Swaps `dim1` and `dim2`.
pub(crate) fn swap_dims<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim1: usize,
    dim2: usize,
) -> AutodiffTensor<B> {
    apply(balanced, Layout::SwapDims(dim1, dim2), tensor)
}

/// Reorders the dims of `tensor` (output dim `i` is input dim `axes[i]`).
pub(crate) fn permute<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    axes: &[usize],
) -> AutodiffTensor<B> {
    apply(balanced, Layout::Permute(axes.to_vec()), tensor)
}

/// Reverses `tensor` along `axes`.
pub(crate) fn flip<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    axes: &[usize],
) -> AutodiffTensor<B> {
    apply(balanced, Layout::Flip(axes.to_vec()), tensor)
}

/// Reshapes `tensor` to `shape`.
pub(crate) fn reshape<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    shape: Shape,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape().into();
    let to = shape.into();
    apply(balanced, Layout::Reshape { from, to }, tensor)
}

/// Concatenates `tensors` along `dim`: one recorded op, whatever the number of inputs.
pub(crate) fn cat<B: Backend>(
    balanced: bool,
    tensors: Vec<AutodiffTensor<B>>,
    dim: usize,
) -> AutodiffTensor<B> {
    let sizes = tensors.iter().map(|t| t.primitive.shape()[dim]).collect();
    let inputs: SmallVec<[AutodiffTensor<B>; 2]> = tensors.into_iter().collect();
    record(Cat { dim, sizes }, inputs, balanced)
}

/// Broadcasts `tensor` to `shape`.
pub(crate) fn expand<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    shape: Shape,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape().into();
    let to = shape.into();
    apply(balanced, Layout::Expand { from, to }, tensor)
}

/// Windows of `size` every `step` along `dim`.
pub(crate) fn unfold<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    size: usize,
    step: usize,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape().into();
    let op = Layout::Unfold {
        from,
        dim,
        size,
        step,
    };
    apply(balanced, op, tensor)
}

/// Pads `tensor` with one `(before, after)` pair per dim.
pub(crate) fn pad<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    padding: &[(usize, usize)],
    mode: PadMode,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape().into();
    let op = Layout::Pad {
        from,
        padding: padding.to_vec(),
        mode,
    };
    apply(balanced, op, tensor)
}

impl<B: Backend> Layout<B> {
    fn name(&self) -> &'static str {
        match self {
            Layout::Reshape { .. } => "reshape",
            Layout::SwapDims(..) => "swap_dims",
            Layout::Transpose => "transpose",
            Layout::Permute(_) => "permute",
            Layout::Flip(_) => "flip",
            Layout::Expand { .. } => "expand",
            Layout::Unfold { .. } => "unfold",
            Layout::RepeatDim { .. } => "repeat_dim",
            Layout::Pad { .. } => "pad",
            Layout::ToDevice { .. } => "to_device",
        }
    }

    fn cost(&self) -> Cost {
        match self {
            Layout::Reshape { .. }
            | Layout::SwapDims(..)
            | Layout::Transpose
            | Layout::Permute(_)
            | Layout::Flip(_)
            | Layout::Expand { .. }
            | Layout::Unfold { .. } => Cost::Alias,
            Layout::RepeatDim { .. } | Layout::Pad { .. } | Layout::ToDevice { .. } => Cost::Cheap,
        }
    }
}

impl<B: Backend> Rule<B> for Layout<B> {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.name(),
            cost: self.cost(),
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        match self {
            Layout::Reshape { to, .. } => B::float_reshape(x, to.shape()),
            Layout::SwapDims(a, b) => B::float_swap_dims(x, *a, *b),
            Layout::Transpose => B::float_transpose(x),
            Layout::Permute(axes) => B::float_permute(x, axes),
            Layout::Flip(axes) => B::float_flip(x, axes),
            Layout::Expand { to, .. } => B::float_expand(x, to.shape()),
            Layout::Unfold {
                dim, size, step, ..
            } => B::float_unfold(x, *dim, *size, *step),
            Layout::RepeatDim { dim, times, .. } => B::float_repeat_dim(x, *dim, *times),
            Layout::Pad { padding, mode, .. } => B::float_pad(x, padding, *mode),
            Layout::ToDevice { to, .. } => B::float_to_device(x, to),
        }
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        match self {
            Layout::Reshape { .. }
            | Layout::SwapDims(..)
            | Layout::Transpose
            | Layout::Permute(_)
            | Layout::Flip(_)
            | Layout::Expand { .. }
            | Layout::Unfold { .. }
            | Layout::RepeatDim { .. }
            | Layout::Pad { .. }
            | Layout::ToDevice { .. } => Reads::NOTHING,
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let grad = match self {
            Layout::Reshape { from, .. } => B::float_reshape(g, from.shape()),
            // Swapping and reversing are their own inverses.
            Layout::SwapDims(a, b) => B::float_swap_dims(g, *a, *b),
            Layout::Transpose => B::float_transpose(g),
            Layout::Permute(axes) => B::float_permute(g, &inverse_permutation(axes)),
            Layout::Flip(axes) => B::float_flip(g, axes),
            // Every broadcast copy of an element contributes to its gradient.
            Layout::Expand { from, .. } => unbroadcast::<B>(g, &from.shape()),
            Layout::Unfold {
                from,
                dim,
                size,
                step,
            } => unfold_vjp::<B>(g, &from.shape(), *dim, *size, *step),
            // Split the tiled dim into (times, size) and sum the copies.
            Layout::RepeatDim { from, dim, times } => {
                let from = from.shape();
                let mut split = from.to_vec();
                split.insert(*dim, *times);
                let g = B::float_reshape(g, Shape::from(split));
                B::float_reshape(B::float_sum_dim(g, *dim), from)
            }
            Layout::Pad {
                from,
                padding,
                mode,
            } => pad_vjp::<B>(g, &from.shape(), padding, *mode),
            Layout::ToDevice { from, .. } => B::float_to_device(g, from),
        };
        cx.set(0, grad);
    }
}

/// The permutation that undoes `axes`.
fn inverse_permutation(axes: &[usize]) -> Vec<usize> {
    let mut inverse = vec![0; axes.len()];
    for (i, &axis) in axes.iter().enumerate() {
        inverse[axis] = i;
    }
    inverse
}

/// The gradient of `unfold`: each window element adds into the input position it came from.
///
/// The output gradient `[pre, windows, post, size]` is laid out as `[pre, windows * size,
/// post]` and scatter-added along `dim` with index `w * step + k` at position `w * size + k`.
fn unfold_vjp<B: Backend>(
    g: FloatTensor<B>,
    from: &Shape,
    dim: usize,
    size: usize,
    step: usize,
) -> FloatTensor<B> {
    let rank = from.num_dims();
    let windows = g.shape()[dim];
    if windows == 0 || size == 0 {
        return B::float_zeros(from.clone(), &g.device(), g.dtype().into());
    }
    // Move the window-element axis (last) next to the window axis.
    let mut axes: Vec<usize> = (0..=dim).collect();
    axes.push(rank);
    axes.extend(dim + 1..rank);
    let g = B::float_permute(g, &axes);
    let mut flat = from.to_vec();
    flat[dim] = windows * size;
    let g = B::float_reshape(g, Shape::from(flat.clone()));

    let positions: Vec<i64> = (0..windows)
        .flat_map(|w| (0..size).map(move |k| (w * step + k) as i64))
        .collect();
    let device = g.device();
    let int_dtype = get_or_init_device_settings::<B>(&device).int_dtype;
    let mut line = vec![1; rank];
    line[dim] = windows * size;
    let data = TensorData::new(positions, line).convert_dtype(int_dtype.into());
    let indices = B::int_expand(B::int_from_data(data, &device), Shape::from(flat));
    let zeros = B::float_zeros(from.clone(), &device, g.dtype().into());
    B::float_scatter(dim, zeros, indices, g, IndexingUpdateOp::Add)
}

/// The gradient of `pad`: the centre, plus (for reflect and edge modes) what the padded
/// copies received, added back to the elements they copied.
///
/// The forward pads dims in order, so the backward undoes them in reverse order.
fn pad_vjp<B: Backend>(
    g: FloatTensor<B>,
    from: &Shape,
    padding: &[(usize, usize)],
    mode: PadMode,
) -> FloatTensor<B> {
    if let PadMode::Constant(_) = mode {
        let centre: Vec<Slice> = padding
            .iter()
            .zip(from.iter())
            .map(|(&(before, _), &n)| range(before, before + n))
            .collect();
        return B::float_slice(g, &centre);
    }
    let mut g = g;
    for (dim, &(before, after)) in padding.iter().enumerate().rev() {
        if before == 0 && after == 0 {
            continue;
        }
        let shape = g.shape();
        let n = from[dim];
        let mut inner = B::float_slice(g.clone(), &along(&shape, dim, range(before, before + n)));
        if before > 0 {
            let left = B::float_slice(g.clone(), &along(&shape, dim, range(0, before)));
            inner = match mode {
                // Padded position j copied element before - j.
                PadMode::Reflect => add_at::<B>(inner, dim, 1, B::float_flip(left, &[dim])),
                _ => add_at::<B>(inner, dim, 0, B::float_sum_dim(left, dim)),
            };
        }
        if after > 0 {
            let total = shape[dim];
            let right = B::float_slice(g, &along(&shape, dim, range(before + n, total)));
            inner = match mode {
                // Padded position n + j copied element n - 2 - j.
                PadMode::Reflect => {
                    add_at::<B>(inner, dim, n - 1 - after, B::float_flip(right, &[dim]))
                }
                _ => add_at::<B>(inner, dim, n - 1, B::float_sum_dim(right, dim)),
            };
        }
        g = inner;
    }
    g
}

/// `tensor` with `value` added at `start..start + len` along `dim`.
fn add_at<B: Backend>(
    tensor: FloatTensor<B>,
    dim: usize,
    start: usize,
    value: FloatTensor<B>,
) -> FloatTensor<B> {
    let len = value.shape()[dim];
    let slices = along(&tensor.shape(), dim, range(start, start + len));
    let current = B::float_slice(tensor.clone(), &slices);
    B::float_slice_assign(tensor, &slices, B::float_add(current, value))
}

/// The slice `start..end` with step 1.
fn range(start: usize, end: usize) -> Slice {
    Slice::new(start as isize, Some(end as isize), 1)
}

/// Concatenation along `dim` of inputs with `sizes` along `dim`.
#[derive(Debug)]
struct Cat {
    dim: usize,
    sizes: Vec<usize>,
}

impl<B: Backend> Rule<B> for Cat {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: "cat",
            cost: Cost::Cheap,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        B::float_cat(inputs.into_vec(), self.dim)
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        Reads::NOTHING
    }

    // Each input's gradient is its own range of the output gradient.
    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let shape = g.shape();
        let mut start = 0;
        for (i, &size) in self.sizes.iter().enumerate() {
            if cx.needs_grad(i) {
                let part = along(&shape, self.dim, range(start, start + size));
                cx.set(i, B::float_slice(g.clone(), &part));
            }
            start += size;
        }
    }
}
