//! Reductions (sum, mean, prod), cumulative ops and selections (max/min, sort, topk). All
//! are [`Cost::Compute`]: Burn keeps their outputs.
//!
//! Selections find their indices once on the inner backend and record a gather by those
//! indices: gathering reproduces the selected values bit for bit (NOTE [one-rule]), a
//! replay needs no second sort, and the backward scatters the gradient to the selected
//! positions (on ties, to the index the inner backend's arg-reduction chose).
//!
//! # Invariants
//! - Reductions keep the reduced dims with size 1 (Burn's contract); global reductions
//!   return shape `[1]`.

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, TensorMetadata};
use burn_std::{IndexingUpdateOp, IntDType, Shape, Slice};
use smallvec::smallvec;

use super::common::{Dims, bool_dtype, int_dtype, scalar, zeros_like};
use super::record::{record, record_computed};
use super::unary::take1;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// A reduction or cumulative op of one tensor (with its dims).
#[derive(Clone, Debug)]
enum Reduce {
    Sum,
    SumDim(usize),
    SumDims(Box<[usize]>),
    Mean,
    MeanDim(usize),
    Prod,
    ProdDim(usize),
    CumSum(usize),
    CumProd(usize),
    CumMin(usize),
    CumMax(usize),
}

/// A reduction with the input shape its backward broadcasts back to.
#[derive(Debug)]
struct ReduceRule {
    op: Reduce,
    shape: Dims,
}

fn reduce<B: Backend>(balanced: bool, op: Reduce, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    let shape = tensor.primitive.shape().into();
    record(ReduceRule { op, shape }, smallvec![tensor], balanced)
}

/// Sum of all elements (shape `[1]`).
pub(crate) fn sum<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::Sum, tensor)
}

/// Sum along `dim`, kept with size 1.
pub(crate) fn sum_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::SumDim(dim), tensor)
}

/// Sum along each of `dims`, kept with size 1.
pub(crate) fn sum_dims<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dims: &[usize],
) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::SumDims(dims.into()), tensor)
}

/// Product of all elements (shape `[1]`).
pub(crate) fn prod<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::Prod, tensor)
}

/// Product along `dim`, kept with size 1.
pub(crate) fn prod_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::ProdDim(dim), tensor)
}

/// Mean of all elements (shape `[1]`).
pub(crate) fn mean<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::Mean, tensor)
}

/// Mean along `dim`, kept with size 1.
pub(crate) fn mean_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::MeanDim(dim), tensor)
}

/// Running sum along `dim`.
pub(crate) fn cumsum<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::CumSum(dim), tensor)
}

/// Running product along `dim`.
pub(crate) fn cumprod<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::CumProd(dim), tensor)
}

/// Running minimum along `dim`.
pub(crate) fn cummin<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::CumMin(dim), tensor)
}

/// Running maximum along `dim`.
pub(crate) fn cummax<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    reduce(balanced, Reduce::CumMax(dim), tensor)
}

impl Reduce {
    fn name(&self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::SumDim(_) => "sum_dim",
            Reduce::SumDims(_) => "sum_dims",
            Reduce::Mean => "mean",
            Reduce::MeanDim(_) => "mean_dim",
            Reduce::Prod => "prod",
            Reduce::ProdDim(_) => "prod_dim",
            Reduce::CumSum(_) => "cumsum",
            Reduce::CumProd(_) => "cumprod",
            Reduce::CumMin(_) => "cummin",
            Reduce::CumMax(_) => "cummax",
        }
    }
}

impl<B: Backend> Rule<B> for ReduceRule {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.op.name(),
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        match self.op {
            Reduce::Sum => B::float_sum(x),
            Reduce::SumDim(d) => B::float_sum_dim(x, d),
            Reduce::SumDims(ref dims) => B::float_sum_dims(x, dims),
            Reduce::Mean => B::float_mean(x),
            Reduce::MeanDim(d) => B::float_mean_dim(x, d),
            Reduce::Prod => B::float_prod(x),
            Reduce::ProdDim(d) => B::float_prod_dim(x, d),
            Reduce::CumSum(d) => B::float_cumsum(x, d),
            Reduce::CumProd(d) => B::float_cumprod(x, d),
            Reduce::CumMin(d) => B::float_cummin(x, d),
            Reduce::CumMax(d) => B::float_cummax(x, d),
        }
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        match self.op {
            Reduce::Sum
            | Reduce::SumDim(_)
            | Reduce::SumDims(_)
            | Reduce::Mean
            | Reduce::MeanDim(_)
            | Reduce::CumSum(_) => Reads::NOTHING,
            Reduce::Prod | Reduce::ProdDim(_) | Reduce::CumProd(_) => Reads::input(0),
            Reduce::CumMin(_) | Reduce::CumMax(_) => Reads::input(0).with_output_if(true),
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let shape = &self.shape.shape();
        let grad = match self.op {
            // d/dx_i sum(x) = 1
            Reduce::Sum => expand_global::<B>(g, shape),
            Reduce::SumDim(_) | Reduce::SumDims(_) => B::float_expand(g, shape.clone()),
            // d/dx_i mean(x) = 1/n
            Reduce::Mean => {
                let n = shape.num_elements() as f64;
                expand_global::<B>(B::float_div_scalar(g, scalar(n)), shape)
            }
            Reduce::MeanDim(d) => {
                let n = shape[d] as f64;
                B::float_expand(B::float_div_scalar(g, scalar(n)), shape.clone())
            }
            // d/dx_i prod(x) = prod_{j != i} x_j
            Reduce::Prod => {
                let flat = B::float_reshape(cx.input(0), Shape::new([shape.num_elements()]));
                let grad = B::float_mul(g, product_of_others::<B>(flat, 0));
                B::float_reshape(grad, shape.clone())
            }
            Reduce::ProdDim(d) => B::float_mul(g, product_of_others::<B>(cx.input(0), d)),
            // d y_j / d x_i = [i <= j]: the gradient is a reverse running sum.
            Reduce::CumSum(d) => reverse_cumsum::<B>(g, d),
            Reduce::CumProd(d) => cumprod_grad::<B>(cx.input(0), g, d),
            // Each running extreme is a copy of one earlier input.
            Reduce::CumMin(d) | Reduce::CumMax(d) => {
                let x = cx.input(0);
                let sources = running_extreme_sources::<B>(&x, cx.output(), d);
                B::float_scatter(d, zeros_like::<B>(&x), sources, g, IndexingUpdateOp::Add)
            }
        };
        cx.set(0, grad);
    }
}

/// Broadcasts the `[1]`-shaped gradient of a global reduction to `shape`.
fn expand_global<B: Backend>(g: FloatTensor<B>, shape: &Shape) -> FloatTensor<B> {
    let ones: Shape = shape.iter().map(|_| 1usize).collect();
    B::float_expand(B::float_reshape(g, ones), shape.clone())
}

/// `flip(cumsum(flip(t)))` along `dim`: sums over the positions at and after each one.
fn reverse_cumsum<B: Backend>(t: FloatTensor<B>, dim: usize) -> FloatTensor<B> {
    B::float_flip(B::float_cumsum(B::float_flip(t, &[dim]), dim), &[dim])
}

/// The product of the other elements along `dim` at each position, as the exclusive running
/// products from both ends: no division, so it is exact where `x` has zeros.
fn product_of_others<B: Backend>(x: FloatTensor<B>, dim: usize) -> FloatTensor<B> {
    let before = shift_in_one::<B>(B::float_cumprod(x.clone(), dim), dim);
    let flipped = B::float_cumprod(B::float_flip(x, &[dim]), dim);
    let after = B::float_flip(shift_in_one::<B>(flipped, dim), &[dim]);
    B::float_mul(before, after)
}

/// Shifts `t` by one position along `dim`, with a one coming in at the start (turns an
/// inclusive running product into an exclusive one).
fn shift_in_one<B: Backend>(t: FloatTensor<B>, dim: usize) -> FloatTensor<B> {
    let shape = t.shape();
    let n = shape[dim];
    let mut one_shape = shape.clone();
    one_shape[dim] = 1;
    let one = B::float_ones(one_shape, &t.device(), t.dtype().into());
    if n == 1 {
        return one;
    }
    let mut slices = vec![Slice::full(); shape.num_dims()];
    slices[dim] = Slice::new(0, Some(n as isize - 1), 1);
    B::float_cat(vec![one, B::float_slice(t, &slices)], dim)
}

/// The gradient of `cumprod(x)` along `dim`, exact where `x` has zeros.
///
/// `d y_j / d x_i = prod_{k <= j, k != i} x_k` for `j >= i`. Split each lane at its first
/// zero: before it, that product is `y_j / x_i` (no zero divisor); at it, it is the running
/// product with that zero replaced by one; after it, every product holds that zero.
fn cumprod_grad<B: Backend>(x: FloatTensor<B>, g: FloatTensor<B>, dim: usize) -> FloatTensor<B> {
    let (fdt, bdt) = (x.dtype().into(), bool_dtype::<B>(&x));
    let as_float = |mask| B::bool_into_float(mask, fdt);
    let zero = as_float(B::float_equal_elem(x.clone(), scalar(0.0), bdt));
    // Running zero counts are whole numbers: compare at half-way points, not for equality.
    let zeros_so_far = B::float_cumsum(zero.clone(), dim);
    let before = as_float(B::float_lower_elem(zeros_so_far.clone(), scalar(0.5), bdt));
    let first = B::float_mul(
        zero.clone(),
        as_float(B::float_lower_elem(zeros_so_far, scalar(1.5), bdt)),
    );
    let y_first_as_one = B::float_cumprod(B::float_add(x.clone(), first.clone()), dim);
    let y_before = B::float_mul(y_first_as_one.clone(), before.clone());
    let divisor = B::float_add(x, zero);
    let ordinary = B::float_div(
        reverse_cumsum::<B>(B::float_mul(g.clone(), y_before), dim),
        divisor,
    );
    let at_first = reverse_cumsum::<B>(B::float_mul(g, y_first_as_one), dim);
    B::float_add(
        B::float_mul(ordinary, before),
        B::float_mul(at_first, first),
    )
}

/// For a running extreme `y` of `x` along `dim`, the index of the input each `y_j` copies:
/// the last position `i <= j` where `y_i == x_i` (where the extreme was last renewed).
fn running_extreme_sources<B: Backend>(
    x: &FloatTensor<B>,
    y: FloatTensor<B>,
    dim: usize,
) -> IntTensor<B> {
    let shape = x.shape();
    let idt = int_dtype::<B>(x);
    let mut lane: Shape = shape.iter().map(|_| 1usize).collect();
    lane[dim] = shape[dim];
    let positions = B::int_arange(0..shape[dim] as i64, &x.device(), idt);
    let positions = B::int_expand(B::int_reshape(positions, lane), shape);
    let renewed = B::bool_into_int(B::float_equal(y, x.clone(), bool_dtype::<B>(x)), idt);
    B::int_cummax(B::int_mul(positions, renewed), dim)
}

/// A selection: picks input values at indices found once in the forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Select {
    Max,
    Min,
    MaxDim,
    MinDim,
    MaxAbs,
    MaxAbsDim,
    Sort,
    Topk,
}

/// A selection with its indices along `dim` (of the flattened input for global ones).
#[derive(Debug)]
struct SelectRule<B: Backend> {
    op: Select,
    dim: usize,
    indices: IntTensor<B>,
    shape: Shape,
}

impl Select {
    fn name(self) -> &'static str {
        match self {
            Select::Max => "max",
            Select::Min => "min",
            Select::MaxDim => "max_dim",
            Select::MinDim => "min_dim",
            Select::MaxAbs => "max_abs",
            Select::MaxAbsDim => "max_abs_dim",
            Select::Sort => "sort",
            Select::Topk => "topk",
        }
    }

    /// Whether the selection is over all elements (of the input flattened to 1-D).
    fn global(self) -> bool {
        matches!(self, Select::Max | Select::Min | Select::MaxAbs)
    }
}

impl<B: Backend> SelectRule<B> {
    /// The input as the selection indexes it: flattened for global selections.
    fn view(&self, x: FloatTensor<B>) -> FloatTensor<B> {
        if self.op.global() {
            B::float_reshape(x, Shape::new([self.shape.num_elements()]))
        } else {
            x
        }
    }
}

impl<B: Backend> Rule<B> for SelectRule<B> {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.op.name(),
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        let picked = B::float_gather(self.dim, self.view(x), self.indices.clone());
        match self.op {
            Select::MaxAbs | Select::MaxAbsDim => B::float_abs(picked),
            Select::Max
            | Select::Min
            | Select::MaxDim
            | Select::MinDim
            | Select::Sort
            | Select::Topk => picked,
        }
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        match self.op {
            Select::MaxAbs | Select::MaxAbsDim => Reads::input(0),
            Select::Max
            | Select::Min
            | Select::MaxDim
            | Select::MinDim
            | Select::Sort
            | Select::Topk => Reads::NOTHING,
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let g = match self.op {
            // d/dx |x| = sign(x), at the selected position
            Select::MaxAbs | Select::MaxAbsDim => {
                let x = self.view(cx.input(0));
                let picked = B::float_gather(self.dim, x, self.indices.clone());
                B::float_mul(g, B::float_sign(picked))
            }
            Select::Max
            | Select::Min
            | Select::MaxDim
            | Select::MinDim
            | Select::Sort
            | Select::Topk => g,
        };
        // Each output is a copy of one input: its gradient goes back there.
        let zeros = self.view(B::float_zeros(
            self.shape.clone(),
            &g.device(),
            g.dtype().into(),
        ));
        let grad = B::float_scatter(
            self.dim,
            zeros,
            self.indices.clone(),
            g,
            IndexingUpdateOp::Add,
        );
        let grad = if self.op.global() {
            B::float_reshape(grad, self.shape.clone())
        } else {
            grad
        };
        cx.set(0, grad);
    }
}

/// Records selection `op` of `tensor` along `dim`, whose `values` and `indices` the inner
/// backend computed together.
fn select<B: Backend>(
    balanced: bool,
    op: Select,
    tensor: AutodiffTensor<B>,
    dim: usize,
    (values, indices): (FloatTensor<B>, IntTensor<B>),
) -> AutodiffTensor<B> {
    let shape = tensor.primitive.shape();
    let rule = SelectRule {
        op,
        dim,
        indices,
        shape,
    };
    record_computed(rule, smallvec![tensor], balanced, values)
}

/// Records selection `op` of `tensor` along `dim` at `indices`; the values are the rule's
/// gather.
fn select_at<B: Backend>(
    balanced: bool,
    op: Select,
    tensor: AutodiffTensor<B>,
    dim: usize,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    let shape = tensor.primitive.shape();
    let rule = SelectRule {
        op,
        dim,
        indices,
        shape,
    };
    record(rule, smallvec![tensor], balanced)
}

/// `tensor` flattened to 1-D.
fn flat<B: Backend>(tensor: &AutodiffTensor<B>) -> FloatTensor<B> {
    let n = tensor.primitive.shape().num_elements();
    B::float_reshape(tensor.primitive.clone(), Shape::new([n]))
}

/// Largest `k` values along `dim`, in descending order.
pub(crate) fn topk<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    k: usize,
) -> AutodiffTensor<B> {
    if !tensor.is_tracked() {
        return AutodiffTensor::new(B::float_topk(tensor.primitive, dim, k));
    }
    let idt = int_dtype::<B>(&tensor.primitive);
    let picked = B::float_topk_with_indices(tensor.primitive.clone(), dim, k, idt);
    select(balanced, Select::Topk, tensor, dim, picked)
}

/// Largest `k` values along `dim` and their indices.
pub(crate) fn topk_with_indices<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    k: usize,
    out_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    let (values, indices) = B::float_topk_with_indices(tensor.primitive.clone(), dim, k, out_dtype);
    let picked = (values, indices.clone());
    (select(balanced, Select::Topk, tensor, dim, picked), indices)
}

/// Which extreme a max/min selection picks: the inner backend's calls that find it, and the
/// selections it records.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Extreme {
    /// The largest.
    Max,
    /// The smallest.
    Min,
}

impl Extreme {
    /// The selection over all elements ("max", "min").
    fn global(self) -> Select {
        match self {
            Extreme::Max => Select::Max,
            Extreme::Min => Select::Min,
        }
    }

    /// The selection along one dim ("max_dim", "min_dim").
    fn along(self) -> Select {
        match self {
            Extreme::Max => Select::MaxDim,
            Extreme::Min => Select::MinDim,
        }
    }

    /// The extreme element on the inner backend (for untracked tensors).
    fn of_all<B: Backend>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        match self {
            Extreme::Max => B::float_max(x),
            Extreme::Min => B::float_min(x),
        }
    }

    /// The extreme along `dim` on the inner backend (for untracked tensors).
    fn of_dim<B: Backend>(self, x: FloatTensor<B>, dim: usize) -> FloatTensor<B> {
        match self {
            Extreme::Max => B::float_max_dim(x, dim),
            Extreme::Min => B::float_min_dim(x, dim),
        }
    }

    /// The extreme along `dim` and its index, on the inner backend.
    fn with_indices<B: Backend>(
        self,
        x: FloatTensor<B>,
        dim: usize,
        indices_dtype: IntDType,
    ) -> (FloatTensor<B>, IntTensor<B>) {
        match self {
            Extreme::Max => B::float_max_dim_with_indices(x, dim, indices_dtype),
            Extreme::Min => B::float_min_dim_with_indices(x, dim, indices_dtype),
        }
    }
}

/// The extreme element `which` (shape `[1]`).
pub(crate) fn extreme<B: Backend>(
    balanced: bool,
    which: Extreme,
    tensor: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    if !tensor.is_tracked() {
        return AutodiffTensor::new(which.of_all::<B>(tensor.primitive));
    }
    let idt = int_dtype::<B>(&tensor.primitive);
    let picked = which.with_indices::<B>(flat(&tensor), 0, idt);
    select(balanced, which.global(), tensor, 0, picked)
}

/// The extreme value `which` along `dim`, kept with size 1.
pub(crate) fn extreme_dim<B: Backend>(
    balanced: bool,
    which: Extreme,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    if !tensor.is_tracked() {
        return AutodiffTensor::new(which.of_dim::<B>(tensor.primitive, dim));
    }
    let idt = int_dtype::<B>(&tensor.primitive);
    extreme_dim_with_indices(balanced, which, tensor, dim, idt).0
}

/// The extreme value `which` along `dim` and its index, kept with size 1.
pub(crate) fn extreme_dim_with_indices<B: Backend>(
    balanced: bool,
    which: Extreme,
    tensor: AutodiffTensor<B>,
    dim: usize,
    indices_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    let (values, indices) = which.with_indices::<B>(tensor.primitive.clone(), dim, indices_dtype);
    let picked = (values, indices.clone());
    (
        select(balanced, which.along(), tensor, dim, picked),
        indices,
    )
}

/// Largest absolute value (shape `[1]`).
pub(crate) fn max_abs<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    if !tensor.is_tracked() {
        return AutodiffTensor::new(B::float_max_abs(tensor.primitive));
    }
    let idt = int_dtype::<B>(&tensor.primitive);
    let indices = B::float_argmax(B::float_abs(flat(&tensor)), 0, idt);
    select_at(balanced, Select::MaxAbs, tensor, 0, indices)
}

/// Largest absolute value along `dim`, kept with size 1.
pub(crate) fn max_abs_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    if !tensor.is_tracked() {
        return AutodiffTensor::new(B::float_max_abs_dim(tensor.primitive, dim));
    }
    let idt = int_dtype::<B>(&tensor.primitive);
    let indices = B::float_argmax(B::float_abs(tensor.primitive.clone()), dim, idt);
    select_at(balanced, Select::MaxAbsDim, tensor, dim, indices)
}

/// Values sorted along `dim`.
pub(crate) fn sort<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    descending: bool,
) -> AutodiffTensor<B> {
    if !tensor.is_tracked() {
        return AutodiffTensor::new(B::float_sort(tensor.primitive, dim, descending));
    }
    let idt = int_dtype::<B>(&tensor.primitive);
    sort_with_indices(balanced, tensor, dim, descending, idt).0
}

/// Values sorted along `dim` and the permutation that sorts them.
pub(crate) fn sort_with_indices<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    descending: bool,
    indices_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    let (values, indices) =
        B::float_sort_with_indices(tensor.primitive.clone(), dim, descending, indices_dtype);
    let picked = (values, indices.clone());
    (select(balanced, Select::Sort, tensor, dim, picked), indices)
}
