//! [`Autodiff<B, C>`]: the `Backend` and `AutodiffBackend` implementations.
//!
//! Float ops record (see `ops`); int, bool, quantized and transaction ops are delegated to
//! the inner backend, method by method, so that its specialised kernels are used.
//!
//! # Invariants
//! - `FloatTensorPrimitive` does not depend on `C` (Burn's dispatch relies on it).

mod activation;
mod bool;
mod distributed;
mod float;
mod int;
mod module;
mod qtensor;
mod transaction;
mod transfer;

use core::marker::PhantomData;

use burn_backend::backend::{
    AutodiffBackend, Backend, BackendTypes, ExecutionError, MemoryPoolUsage, ProfileDuration,
    ProfileOptions, ProfileToken, SlicedPoolReport,
};
use burn_backend::distributed::{DistributedParamId, DistributedParams};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor, QuantizedTensor};

use crate::checkpoint::strategy::{CheckpointStrategy, NoCheckpointing};
use crate::grads::Gradients;
use crate::tensor::AutodiffTensor;

/// Reverse-mode automatic differentiation over inner backend `B`, with checkpointing.
///
/// `C` is Burn's type-level strategy ([`NoCheckpointing`] by default, or
/// [`BalancedCheckpointing`](crate::checkpoint::strategy::BalancedCheckpointing)); it only
/// selects the default [`Policy`](crate::Policy) of the graphs it records.
#[derive(Clone, Copy, Debug, Default)]
pub struct Autodiff<B, C = NoCheckpointing> {
    _backend: PhantomData<B>,
    _strategy: PhantomData<C>,
}

impl<B: BackendTypes, C: CheckpointStrategy> BackendTypes for Autodiff<B, C> {
    type Device = B::Device;
    type FloatTensorPrimitive = AutodiffTensor<B>;
    type IntTensorPrimitive = B::IntTensorPrimitive;
    type BoolTensorPrimitive = B::BoolTensorPrimitive;
    type QuantizedTensorPrimitive = B::QuantizedTensorPrimitive;
    type GraphPrimitive = burn_backend::GraphUnsupported;
}

impl<B: Backend, C: CheckpointStrategy> Backend for Autodiff<B, C> {
    fn ad_enabled(_device: &Self::Device) -> bool {
        true
    }

    /// Burn's name for an autodiff backend (`autodiff<inner>`), kept for code that matches
    /// on it.
    fn name(device: &Self::Device) -> String {
        format!("autodiff<{}>", B::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        B::seed(device, seed)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        B::sync(device)
    }

    fn profile<O: Send + 'static>(
        device: &Self::Device,
        options: ProfileOptions,
        func: impl FnOnce() -> O + Send,
    ) -> Result<(O, ProfileDuration), ExecutionError> {
        B::profile(device, options, func)
    }

    fn profile_start(device: &Self::Device) -> Result<Option<ProfileToken>, ExecutionError> {
        B::profile_start(device)
    }

    fn profile_end(
        device: &Self::Device,
        token: ProfileToken,
        options: ProfileOptions,
    ) -> Result<ProfileDuration, ExecutionError> {
        B::profile_end(device, token, options)
    }

    fn profile_abandon(device: &Self::Device, token: ProfileToken) {
        B::profile_abandon(device, token)
    }

    fn memory_persistent_allocations<
        Output: Send,
        Input: Send,
        Func: Fn(Input) -> Output + Send,
    >(
        device: &Self::Device,
        input: Input,
        func: Func,
    ) -> Output {
        B::memory_persistent_allocations(device, input, func)
    }

    fn memory_cleanup(device: &Self::Device) {
        B::memory_cleanup(device)
    }

    fn memory_pool_report(device: &Self::Device) -> Option<Vec<SlicedPoolReport>> {
        B::memory_pool_report(device)
    }

    fn memory_pool_usage(device: &Self::Device) -> Option<MemoryPoolUsage> {
        B::memory_pool_usage(device)
    }

    fn flush(device: &Self::Device) -> Result<(), ExecutionError> {
        B::flush(device)
    }

    fn staging<'a, Iter>(data: Iter, device: &Self::Device)
    where
        Iter: Iterator<Item = &'a mut burn_backend::TensorData>,
    {
        B::staging(data, device)
    }

    fn supports_dtype(device: &Self::Device, dtype: burn_std::DType) -> bool {
        B::supports_dtype(device, dtype)
    }

    fn dtype_usage(device: &Self::Device, dtype: burn_std::DType) -> burn_backend::DTypeUsageSet {
        B::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        B::device_count(type_id)
    }
}

impl<B: Backend, C: CheckpointStrategy> AutodiffBackend for Autodiff<B, C> {
    type InnerBackend = B;
    type Gradients = Gradients;

    fn backward(tensor: FloatTensor<Self>) -> Gradients {
        tensor.backward()
    }

    fn grad(tensor: &FloatTensor<Self>, grads: &Gradients) -> Option<FloatTensor<B>> {
        tensor.grad(grads)
    }

    fn grad_remove(tensor: &FloatTensor<Self>, grads: &mut Gradients) -> Option<FloatTensor<B>> {
        tensor.grad_remove(grads)
    }

    fn grad_replace(tensor: &FloatTensor<Self>, grads: &mut Gradients, grad: FloatTensor<B>) {
        tensor.grad_replace(grads, grad)
    }

    fn inner(tensor: FloatTensor<Self>) -> FloatTensor<B> {
        tensor.primitive
    }

    fn int_inner(tensor: IntTensor<Self>) -> IntTensor<B> {
        tensor
    }

    fn bool_inner(tensor: BoolTensor<Self>) -> BoolTensor<B> {
        tensor
    }

    fn q_inner(tensor: QuantizedTensor<Self>) -> QuantizedTensor<B> {
        tensor
    }

    fn from_inner(tensor: FloatTensor<B>) -> FloatTensor<Self> {
        AutodiffTensor::new(tensor)
    }

    fn int_from_inner(tensor: IntTensor<B>) -> IntTensor<Self> {
        tensor
    }

    fn bool_from_inner(tensor: BoolTensor<B>) -> BoolTensor<Self> {
        tensor
    }

    fn q_from_inner(tensor: QuantizedTensor<B>) -> QuantizedTensor<Self> {
        tensor
    }

    fn set_distributed_params(
        tensor: FloatTensor<Self>,
        param_id: DistributedParamId,
    ) -> FloatTensor<Self> {
        tensor.grad_distributed(param_id)
    }

    fn distributed_params(tensor: &FloatTensor<Self>) -> Option<DistributedParams> {
        tensor.distributed_params()
    }

    fn is_distributed(tensor: &FloatTensor<Self>) -> bool {
        tensor.distributed_params().is_some()
    }
}
