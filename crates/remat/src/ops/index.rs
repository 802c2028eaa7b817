//! index ops (being written).

use burn_backend::Backend;
use burn_backend::ops::GridSampleOptions;
use burn_backend::tensor::{BoolTensor, Device, IntTensor};
use burn_std::{FloatDType, IndexingUpdateOp, IntDType, PadMode, Scalar, Shape, Slice};

use crate::tensor::AutodiffTensor;

pub(crate) fn gather<B: Backend>(
    balanced: bool,
    dim: usize,
    tensor: AutodiffTensor<B>,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn scatter<B: Backend>(
    balanced: bool,
    dim: usize,
    tensor: AutodiffTensor<B>,
    indices: IntTensor<B>,
    value: AutodiffTensor<B>,
    update: IndexingUpdateOp,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn scatter_nd<B: Backend>(
    balanced: bool,
    data: AutodiffTensor<B>,
    indices: IntTensor<B>,
    values: AutodiffTensor<B>,
    reduction: IndexingUpdateOp,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn gather_nd<B: Backend>(
    balanced: bool,
    data: AutodiffTensor<B>,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn select<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    indices: IntTensor<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn select_assign<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    indices: IntTensor<B>,
    value: AutodiffTensor<B>,
    update: IndexingUpdateOp,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn slice<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    slices: &[Slice],
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn slice_assign<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    slices: &[Slice],
    value: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn mask_where<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    mask: BoolTensor<B>,
    value: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn mask_fill<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    mask: BoolTensor<B>,
    value: Scalar,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) async fn mask_select<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    mask: BoolTensor<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn grid_sample_2d<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    grid: AutodiffTensor<B>,
    options: GridSampleOptions,
) -> AutodiffTensor<B> {
    todo!()
}
