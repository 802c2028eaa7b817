//! Distributed training hooks (being written).

use burn_backend::Backend;
use burn_backend::distributed::{DistributedOps, DistributedParamId, DistributedParams};

use crate::backend::Autodiff;
use crate::checkpoint::strategy::CheckpointStrategy;
use crate::tensor::AutodiffTensor;

impl<B: Backend, C: CheckpointStrategy> DistributedOps<Self> for Autodiff<B, C> {}

pub(crate) fn set_params<B: Backend>(
    tensor: AutodiffTensor<B>,
    _id: DistributedParamId,
) -> AutodiffTensor<B> {
    tensor
}

pub(crate) fn params<B: Backend>(_tensor: &AutodiffTensor<B>) -> Option<DistributedParams> {
    None
}
