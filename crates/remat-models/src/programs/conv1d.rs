//! A 1-D convolutional network over sequences: Conv1d + GroupNorm + LeakyReLU + MaxPool1d,
//! ConvTranspose1d + InstanceNorm + SiLU, AvgPool1d + AdaptiveAvgPool1d, then Linear; Huber
//! loss against a fixed target; SGD with Nesterov momentum, weight decay and gradient
//! clipping by norm.

use burn::module::Module;
use burn::nn::activation::SiLU;
use burn::nn::conv::{Conv1d, Conv1dConfig, ConvTranspose1d, ConvTranspose1dConfig};
use burn::nn::loss::{HuberLossConfig, Reduction};
use burn::nn::pool::{
    AdaptiveAvgPool1d, AdaptiveAvgPool1dConfig, AvgPool1d, AvgPool1dConfig, MaxPool1d,
    MaxPool1dConfig,
};
use burn::nn::{
    GroupNorm, GroupNormConfig, InstanceNorm, InstanceNormConfig, LeakyRelu, LeakyReluConfig,
    Linear, LinearConfig, PaddingConfig1d,
};
use burn::optim::SgdConfig;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::momentum::MomentumConfig;
use burn::tensor::{Device, Tensor, TensorData};

use super::{TrainReport, synthetic};

const BATCH: usize = 4;
const CHANNELS: usize = 3;
const LENGTH: usize = 16;
const FILTERS: usize = 6;
const OUT: usize = 3;

/// The model.
#[derive(Module, Debug)]
pub struct SeqConv {
    /// Kernel 3, `Same` padding.
    pub conv: Conv1d,
    /// Two groups of three channels.
    pub group_norm: GroupNorm,
    /// Halves the length.
    pub max_pool: MaxPool1d,
    /// Doubles the length back (stride 2); no bias (InstanceNorm follows).
    pub up: ConvTranspose1d,
    /// Per-channel normalisation.
    pub instance_norm: InstanceNorm,
    /// Window 2, stride 1, padded.
    pub avg_pool: AvgPool1d,
    /// Down to 4 positions.
    pub adaptive: AdaptiveAvgPool1d,
    /// Read-out.
    pub head: Linear,
    leaky: LeakyRelu,
    silu: SiLU,
}

impl SeqConv {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            conv: Conv1dConfig::new(CHANNELS, FILTERS, 3)
                .with_padding(PaddingConfig1d::Same)
                .init(device),
            group_norm: GroupNormConfig::new(2, FILTERS).init(device),
            max_pool: MaxPool1dConfig::new(2).init(),
            up: ConvTranspose1dConfig::new([FILTERS, 4], 3)
                .with_stride(2)
                .with_padding(1)
                .with_padding_out(1)
                .with_bias(false)
                .init(device),
            instance_norm: InstanceNormConfig::new(4).init(device),
            avg_pool: AvgPool1dConfig::new(2)
                .with_stride(1)
                .with_padding(PaddingConfig1d::Explicit(1, 0))
                .with_count_include_pad(false)
                .init(),
            adaptive: AdaptiveAvgPool1dConfig::new(4).init(),
            head: LinearConfig::new(4 * 4, OUT).init(device),
            leaky: LeakyReluConfig::new().with_negative_slope(0.1).init(),
            silu: SiLU::new(),
        }
    }

    /// `[batch, CHANNELS, LENGTH] -> [batch, OUT]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        let x = self
            .leaky
            .forward(self.group_norm.forward(self.conv.forward(x)));
        let x = self.max_pool.forward(x);
        let x = self
            .silu
            .forward(self.instance_norm.forward(self.up.forward(x)));
        let x = self.adaptive.forward(self.avg_pool.forward(x));
        self.head.forward(x.flatten(1, 2))
    }
}

/// Trains the network for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(19);
    let model = SeqConv::new(device);
    let x = Tensor::<3>::from_data(
        TensorData::new(
            synthetic(BATCH * CHANNELS * LENGTH, 21),
            [BATCH, CHANNELS, LENGTH],
        ),
        device,
    );
    let y = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * OUT, 22), [BATCH, OUT]),
        device,
    );
    let loss_fn = HuberLossConfig::new(0.5).init();
    let optim = SgdConfig::new()
        .with_momentum(Some(
            MomentumConfig::new()
                .with_nesterov(true)
                .with_dampening(0.0),
        ))
        .with_weight_decay(Some(WeightDecayConfig::new(1e-3)))
        .with_gradient_clipping(Some(GradientClippingConfig::Norm(1.0)))
        .init();
    super::train(model, optim, 0.05, |model| {
        loss_fn.forward(model.forward(x.clone()), y.clone(), Reduction::Mean)
    })
}
