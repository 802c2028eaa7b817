//! linalg ops (being written).

use burn_backend::Backend;
use burn_backend::ops::GridSampleOptions;
use burn_backend::tensor::{BoolTensor, Device, IntTensor};
use burn_std::{FloatDType, IndexingUpdateOp, IntDType, PadMode, Scalar, Shape, Slice};

use crate::tensor::AutodiffTensor;

pub(crate) fn matmul<B: Backend>(
    balanced: bool,
    lhs: AutodiffTensor<B>,
    rhs: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    todo!()
}

pub(crate) fn cross<B: Backend>(
    balanced: bool,
    lhs: AutodiffTensor<B>,
    rhs: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    todo!()
}
