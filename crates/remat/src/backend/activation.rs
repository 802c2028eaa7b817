//! Activation ops with direct backward rules (see `ops::activation`). Methods not overridden
//! here (`prelu`, `softmin`, the `*_backward` kernels) keep Burn's default, which composes
//! differentiable ops.

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Scalar, ops::ActivationOps};

use crate::backend::Autodiff;
use crate::checkpoint::strategy::CheckpointStrategy;
use crate::ops::activation::{self, Activation};

impl<B: Backend, C: CheckpointStrategy> ActivationOps<Self> for Autodiff<B, C> {
    fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self> {
        activation::apply(C::BALANCED, Activation::LeakyRelu(negative_slope), tensor)
    }

    fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        activation::apply(C::BALANCED, Activation::Relu, tensor)
    }

    fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        activation::apply(C::BALANCED, Activation::Gelu, tensor)
    }

    fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        activation::apply(C::BALANCED, Activation::Sigmoid, tensor)
    }

    fn hard_sigmoid(tensor: FloatTensor<Self>, alpha: Scalar, beta: Scalar) -> FloatTensor<Self> {
        activation::apply(C::BALANCED, Activation::HardSigmoid { alpha, beta }, tensor)
    }

    fn log_sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        activation::apply(C::BALANCED, Activation::LogSigmoid, tensor)
    }

    fn softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        activation::apply(C::BALANCED, Activation::Softmax(dim), tensor)
    }

    fn log_softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        activation::apply(C::BALANCED, Activation::LogSoftmax(dim), tensor)
    }
}
