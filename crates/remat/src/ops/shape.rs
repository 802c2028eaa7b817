//! shape ops (being written).

use burn_backend::Backend;
use burn_backend::ops::GridSampleOptions;
use burn_backend::tensor::{BoolTensor, Device, IntTensor};
use burn_std::{FloatDType, IndexingUpdateOp, IntDType, PadMode, Scalar, Shape, Slice};

use crate::tensor::AutodiffTensor;

pub(crate) fn to_device<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    device: &Device<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn repeat_dim<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    times: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn transpose<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn swap_dims<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim1: usize,
    dim2: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn permute<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    axes: &[usize],
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn flip<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    axes: &[usize],
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn reshape<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    shape: Shape,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn cat<B: Backend>(
    balanced: bool,
    tensors: Vec<AutodiffTensor<B>>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn expand<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    shape: Shape,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn unfold<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dim: usize,
    size: usize,
    step: usize,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn pad<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    padding: &[(usize, usize)],
    mode: PadMode,
) -> AutodiffTensor<B> {
    todo!()
}
