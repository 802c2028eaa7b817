//! Indexing ops: reads at indices (gather, select, gather_nd, slice, mask_select), updates at
//! indices (scatter, select_assign, scatter_nd, slice_assign), masking (mask_where,
//! mask_fill). Grid sampling has no rule of its own: `backend/float.rs` composes it of the
//! backend's differentiable ops.
//!
//! Indices, masks and slices are not float values: rules store them. Reads and updates at
//! indices are [`Cost::Cheap`], `slice` is [`Cost::Alias`].
//!
//! # Invariants
//! - The gradient of a read at indices is the matching update with `Add` into zeros, so
//!   duplicate indices accumulate.
//! - `Mul` updates assume unique indices (as Burn's autodiff does); `Min`/`Max` updates
//!   compare inputs with the output, so ties pass the gradient to every winner.

use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{Backend, TensorMetadata, get_or_init_device_settings};
use burn_std::{IndexingUpdateOp, Scalar, Shape, Slice};
use smallvec::smallvec;

use super::common::{Dims, bool_dtype, scalar, unbroadcast};
use super::record::record;
use super::unary::{take1, take2};
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// How indices address a tensor; each has a read and a matching update.
#[derive(Clone, Copy, Debug)]
enum Pick {
    /// `gather`/`scatter` along a dim: indices have the shape of the values.
    Along(usize),
    /// `select`/`select_assign` along a dim: a 1-D list of positions.
    Select(usize),
    /// `gather_nd`/`scatter_nd`: the last index dim addresses the leading data dims.
    Nd,
}

impl Pick {
    /// The values of `tensor` at the indices.
    fn read<B: Backend>(self, tensor: FloatTensor<B>, indices: IntTensor<B>) -> FloatTensor<B> {
        match self {
            Pick::Along(dim) => B::float_gather(dim, tensor, indices),
            Pick::Select(dim) => B::float_select(tensor, dim, indices),
            Pick::Nd => B::float_gather_nd(tensor, indices),
        }
    }

    /// `tensor` with `values` combined in at the indices by `op`.
    fn update<B: Backend>(
        self,
        tensor: FloatTensor<B>,
        indices: IntTensor<B>,
        values: FloatTensor<B>,
        op: IndexingUpdateOp,
    ) -> FloatTensor<B> {
        match self {
            Pick::Along(dim) => B::float_scatter(dim, tensor, indices, values, op),
            Pick::Select(dim) => B::float_select_assign(tensor, dim, indices, values, op),
            Pick::Nd => B::float_scatter_nd(tensor, indices, values, op),
        }
    }
}

/// A read at indices of an input of shape `from`.
#[derive(Debug)]
struct Read<B: Backend> {
    pick: Pick,
    indices: IntTensor<B>,
    from: Shape,
}

/// An update at indices: input 0 is the tensor, input 1 the values.
#[derive(Debug)]
struct Update<B: Backend> {
    pick: Pick,
    indices: IntTensor<B>,
    op: IndexingUpdateOp,
    values_shape: Shape,
}

/// Gathers along `dim` at `indices`.
pub(crate) fn gather<B: Backend>(
    balanced: bool,
    dim: usize,
    tensor: AutodiffTensor<B>,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    read(balanced, Pick::Along(dim), tensor, indices)
}

/// Scatters `value` along `dim` at `indices` into `tensor`.
pub(crate) fn scatter<B: Backend>(
    balanced: bool,
    dim: usize,
    tensor: AutodiffTensor<B>,
    indices: IntTensor<B>,
    value: AutodiffTensor<B>,
    update: IndexingUpdateOp,
) -> AutodiffTensor<B> {
    write(balanced, Pick::Along(dim), tensor, indices, value, update)
}

/// Scatters `values` into `data` at the multi-dimensional `indices`.
pub(crate) fn scatter_nd<B: Backend>(
    balanced: bool,
    data: AutodiffTensor<B>,
    indices: IntTensor<B>,
    values: AutodiffTensor<B>,
    reduction: IndexingUpdateOp,
) -> AutodiffTensor<B> {
    write(balanced, Pick::Nd, data, indices, values, reduction)
}

/// Gathers from `data` at the multi-dimensional `indices`.
pub(crate) fn gather_nd<B: Backend>(
    balanced: bool,
    data: AutodiffTensor<B>,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    read(balanced, Pick::Nd, data, indices)
}

/// Selects the positions `indices` along `dim`.
pub(crate) fn select<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    read(balanced, Pick::Select(dim), tensor, indices)
}

/// Combines `value` into `tensor` at the positions `indices` along `dim`.
pub(crate) fn select_assign<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    indices: IntTensor<B>,
    value: AutodiffTensor<B>,
    update: IndexingUpdateOp,
) -> AutodiffTensor<B> {
    write(balanced, Pick::Select(dim), tensor, indices, value, update)
}

fn read<B: Backend>(
    balanced: bool,
    pick: Pick,
    tensor: AutodiffTensor<B>,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape();
    let rule = Read {
        pick,
        indices,
        from,
    };
    record(rule, smallvec![tensor], balanced)
}

fn write<B: Backend>(
    balanced: bool,
    pick: Pick,
    tensor: AutodiffTensor<B>,
    indices: IntTensor<B>,
    values: AutodiffTensor<B>,
    op: IndexingUpdateOp,
) -> AutodiffTensor<B> {
    let values_shape = values.primitive.shape();
    let rule = Update {
        pick,
        indices,
        op,
        values_shape,
    };
    record(rule, smallvec![tensor, values], balanced)
}

/// The slice of `tensor` at `slices` (steps allowed).
pub(crate) fn slice<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    slices: &[Slice],
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape().into();
    let rule = SliceRead {
        slices: slices.to_vec(),
        from,
    };
    record(rule, smallvec![tensor], balanced)
}

/// `tensor` with `value` written at `slices`.
pub(crate) fn slice_assign<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    slices: &[Slice],
    value: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    let value_shape = value.primitive.shape().into();
    let rule = SliceAssign {
        slices: slices.to_vec(),
        value_shape,
    };
    record(rule, smallvec![tensor, value], balanced)
}

/// `value` where `mask` holds, `tensor` elsewhere (with broadcasting).
pub(crate) fn mask_where<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    mask: BoolTensor<B>,
    value: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    let shapes = (tensor.primitive.shape(), value.primitive.shape());
    let rule = Masked::Where { mask, shapes };
    record(rule, smallvec![tensor, value], balanced)
}

/// `value` where `mask` holds, `tensor` elsewhere.
pub(crate) fn mask_fill<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    mask: BoolTensor<B>,
    value: Scalar,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape();
    let rule = Masked::Fill { mask, value, from };
    record(rule, smallvec![tensor], balanced)
}

/// The elements of `tensor` where `mask` holds, in row-major order, as a 1-D tensor.
///
/// The mask's true positions are found first (the only data-dependent step); the op is then
/// recorded as a select of those positions from the flattened tensor, so its replay does
/// not depend on the mask.
pub(crate) async fn mask_select<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    mask: BoolTensor<B>,
) -> AutodiffTensor<B> {
    let from = tensor.primitive.shape();
    let n = from.num_elements();
    let int_dtype = get_or_init_device_settings::<B>(&mask.device()).int_dtype;
    let mask = B::bool_reshape(mask, Shape::new([n]));
    let positions = B::bool_argwhere(mask, int_dtype).await;
    let count = positions.shape()[0];
    let indices = B::int_reshape(positions, Shape::new([count]));
    let rule = Masked::Select { indices, from };
    record(rule, smallvec![tensor], balanced)
}

impl<B: Backend> Rule<B> for Read<B> {
    fn info(&self) -> OpInfo {
        let name = match self.pick {
            Pick::Along(_) => "gather",
            Pick::Select(_) => "select",
            Pick::Nd => "gather_nd",
        };
        OpInfo {
            name,
            cost: Cost::Cheap,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        self.pick.read::<B>(x, self.indices.clone())
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        Reads::NOTHING
    }

    // Each read element sends its gradient back to where it was read (duplicates add).
    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let zeros = B::float_zeros(self.from.clone(), &g.device(), g.dtype().into());
        let indices = self.indices.clone();
        cx.set(
            0,
            self.pick
                .update::<B>(zeros, indices, g, IndexingUpdateOp::Add),
        );
    }
}

impl<B: Backend> Rule<B> for Update<B> {
    fn info(&self) -> OpInfo {
        let name = match self.pick {
            Pick::Along(_) => "scatter",
            Pick::Select(_) => "select_assign",
            Pick::Nd => "scatter_nd",
        };
        OpInfo {
            name,
            cost: Cost::Cheap,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [tensor, values] = take2::<B>(inputs);
        self.pick
            .update::<B>(tensor, self.indices.clone(), values, self.op)
    }

    fn reads(&self, t: Tracked) -> Reads {
        let (tt, tv) = (t.get(0), t.get(1));
        match self.op {
            IndexingUpdateOp::Add | IndexingUpdateOp::Assign => Reads::NOTHING,
            IndexingUpdateOp::Mul => Reads::NOTHING.with_input_if(1, tt).with_input_if(0, tv),
            IndexingUpdateOp::Min | IndexingUpdateOp::Max => {
                Reads::OUTPUT.with_input_if(0, tt).with_input_if(1, tv)
            }
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let (tt, tv) = (cx.needs_grad(0), cx.needs_grad(1));
        let (pick, idx) = (self.pick, || self.indices.clone());
        let (gt, gv): (Option<FloatTensor<B>>, Option<FloatTensor<B>>) = match self.op {
            IndexingUpdateOp::Add => (tt.then(|| g.clone()), tv.then(|| pick.read::<B>(g, idx()))),
            // Overwritten positions pass nothing back to the tensor.
            IndexingUpdateOp::Assign => {
                let gt = tt.then(|| {
                    let zeros =
                        B::float_zeros(self.values_shape.clone(), &g.device(), g.dtype().into());
                    pick.update::<B>(g.clone(), idx(), zeros, IndexingUpdateOp::Assign)
                });
                (gt, tv.then(|| pick.read::<B>(g, idx())))
            }
            // out = t * v at the indices (unique indices).
            IndexingUpdateOp::Mul => {
                let gt = tt.then(|| {
                    pick.update::<B>(g.clone(), idx(), cx.input(1), IndexingUpdateOp::Mul)
                });
                let gv = tv.then(|| {
                    let t = pick.read::<B>(cx.input(0), idx());
                    B::float_mul(pick.read::<B>(g, idx()), t)
                });
                (gt, gv)
            }
            // The gradient goes to whichever side equals the output.
            IndexingUpdateOp::Min | IndexingUpdateOp::Max => {
                let out = cx.output();
                let dtype = bool_dtype::<B>(&out);
                let gt = tt.then(|| {
                    let lost = B::float_not_equal(cx.input(0), out.clone(), dtype);
                    B::float_mask_fill(g.clone(), lost, scalar(0.0))
                });
                let gv = tv.then(|| {
                    let lost = B::float_not_equal(cx.input(1), pick.read::<B>(out, idx()), dtype);
                    B::float_mask_fill(pick.read::<B>(g, idx()), lost, scalar(0.0))
                });
                (gt, gv)
            }
        };
        if let Some(gt) = gt {
            cx.set(0, gt);
        }
        if let Some(gv) = gv {
            cx.set(1, gv);
        }
    }
}

/// A slice of an input of shape `from`.
#[derive(Debug)]
struct SliceRead {
    slices: Vec<Slice>,
    from: Dims,
}

impl<B: Backend> Rule<B> for SliceRead {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: "slice",
            cost: Cost::Alias,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        B::float_slice(x, &self.slices)
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        Reads::NOTHING
    }

    // The gradient lands in the sliced positions, zero elsewhere.
    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let zeros = B::float_zeros(self.from.shape(), &g.device(), g.dtype().into());
        cx.set(0, B::float_slice_assign(zeros, &self.slices, g));
    }
}

/// A write of input 1 (of shape `value_shape`) into input 0 at `slices`.
#[derive(Debug)]
struct SliceAssign {
    slices: Vec<Slice>,
    value_shape: Dims,
}

impl<B: Backend> Rule<B> for SliceAssign {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: "slice_assign",
            cost: Cost::Cheap,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [tensor, value] = take2::<B>(inputs);
        B::float_slice_assign(tensor, &self.slices, value)
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        Reads::NOTHING
    }

    // The tensor keeps the gradient outside the slice; the value gets the slice.
    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        if cx.needs_grad(1) {
            cx.set(1, B::float_slice(g.clone(), &self.slices));
        }
        if cx.needs_grad(0) {
            let zeros = B::float_zeros(self.value_shape.shape(), &g.device(), g.dtype().into());
            cx.set(0, B::float_slice_assign(g, &self.slices, zeros));
        }
    }
}

/// Ops that choose elements with a mask.
#[derive(Debug)]
enum Masked<B: Backend> {
    /// Input 1 where the mask holds, input 0 elsewhere; the input shapes, for broadcasting.
    Where {
        mask: BoolTensor<B>,
        shapes: (Shape, Shape),
    },
    /// `value` where the mask holds, the input (of shape `from`) elsewhere.
    Fill {
        mask: BoolTensor<B>,
        value: Scalar,
        from: Shape,
    },
    /// The flattened input (of shape `from`) at `indices`, the mask's true positions.
    Select { indices: IntTensor<B>, from: Shape },
}

impl<B: Backend> Rule<B> for Masked<B> {
    fn info(&self) -> OpInfo {
        let name = match self {
            Masked::Where { .. } => "mask_where",
            Masked::Fill { .. } => "mask_fill",
            Masked::Select { .. } => "mask_select",
        };
        OpInfo {
            name,
            cost: Cost::Cheap,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        match self {
            Masked::Where { mask, .. } => {
                let [tensor, value] = take2::<B>(inputs);
                B::float_mask_where(tensor, mask.clone(), value)
            }
            Masked::Fill { mask, value, .. } => {
                let [x] = take1::<B>(inputs);
                B::float_mask_fill(x, mask.clone(), *value)
            }
            Masked::Select { indices, from } => {
                let [x] = take1::<B>(inputs);
                let flat = B::float_reshape(x, Shape::new([from.num_elements()]));
                B::float_select(flat, 0, indices.clone())
            }
        }
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        match self {
            Masked::Where { .. } | Masked::Fill { .. } | Masked::Select { .. } => Reads::NOTHING,
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        match self {
            // Each side gets the gradient where it was chosen.
            Masked::Where { mask, shapes } => {
                if cx.needs_grad(1) {
                    let kept = B::bool_not(mask.clone());
                    let gv = B::float_mask_fill(g.clone(), kept, scalar(0.0));
                    cx.set(1, unbroadcast::<B>(gv, &shapes.1));
                }
                if cx.needs_grad(0) {
                    let gt = B::float_mask_fill(g, mask.clone(), scalar(0.0));
                    cx.set(0, unbroadcast::<B>(gt, &shapes.0));
                }
            }
            // Filled positions no longer depend on the input.
            Masked::Fill { mask, from, .. } => {
                let gt = B::float_mask_fill(g, mask.clone(), scalar(0.0));
                cx.set(0, unbroadcast::<B>(gt, from));
            }
            // Selected elements send their gradient back to their positions.
            Masked::Select { indices, from } => {
                let n = from.num_elements();
                let zeros = B::float_zeros(Shape::new([n]), &g.device(), g.dtype().into());
                let flat =
                    B::float_select_assign(zeros, 0, indices.clone(), g, IndexingUpdateOp::Add);
                cx.set(0, B::float_reshape(flat, from.clone()));
            }
        }
    }
}
