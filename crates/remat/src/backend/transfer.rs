//! Differentiable transfer between inner backends (`Autodiff::to_backend`): the rule is
//! `ops/transfer.rs`'s.

use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

use crate::backend::Autodiff;
use crate::checkpoint::strategy::CheckpointStrategy;
use crate::ops::DifferentiableTransfer;
use crate::ops::transfer::transfer;

impl<Src: Backend, C: CheckpointStrategy> Autodiff<Src, C> {
    /// Moves `tensor` to `device` of inner backend `Dst`, differentiably: gradients flow back
    /// to the source backend through `Adapter::backward`.
    pub fn to_backend<Dst, Adapter>(
        tensor: FloatTensor<Self>,
        device: &Dst::Device,
    ) -> FloatTensor<Autodiff<Dst, C>>
    where
        Dst: Backend,
        Adapter: DifferentiableTransfer<Src, Dst>,
    {
        transfer::<Src, Dst, Adapter>(tensor, device, C::BALANCED)
    }
}
