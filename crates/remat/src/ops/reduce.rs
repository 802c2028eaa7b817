//! reduce ops (being written).

use burn_backend::Backend;
use burn_backend::ops::GridSampleOptions;
use burn_backend::tensor::{BoolTensor, Device, IntTensor};
use burn_std::{FloatDType, IndexingUpdateOp, IntDType, PadMode, Scalar, Shape, Slice};

use crate::tensor::AutodiffTensor;

pub(crate) fn sum<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn sum_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn sum_dims<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dims: &[usize],
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn prod<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn prod_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn mean<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn mean_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn cumsum<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn cumprod<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn cummin<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn cummax<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn topk<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    k: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn topk_with_indices<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    k: usize,
    out_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    todo!()
}

pub(crate) fn max<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn max_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn max_dim_with_indices<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    indices_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    todo!()
}

pub(crate) fn min<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn min_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn min_dim_with_indices<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    indices_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    todo!()
}

pub(crate) fn max_abs<B: Backend>(balanced: bool, tensor: AutodiffTensor<B>) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn max_abs_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn sort<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    descending: bool,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn sort_with_indices<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    descending: bool,
    indices_dtype: IntDType,
) -> (AutodiffTensor<B>, IntTensor<B>) {
    todo!()
}
