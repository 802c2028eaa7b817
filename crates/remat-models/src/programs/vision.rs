//! A small vision network over the less common 2-D modules: a dilated grouped Conv2d, PReLU,
//! Mish and HardSwish, PixelUnshuffle, bilinear Interpolate2d, ConvTranspose2d, AvgPool2d,
//! LocalResponseNorm, Unfold4d and AdaptiveAvgPool2d; binary cross-entropy on logits over
//! multi-label targets; Adam.

use burn::module::Module;
use burn::nn::activation::{HardSwish, Mish};
use burn::nn::conv::{Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};
use burn::nn::interpolate::{Interpolate2d, Interpolate2dConfig, InterpolateMode};
use burn::nn::loss::BinaryCrossEntropyLossConfig;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, AvgPool2d, AvgPool2dConfig};
use burn::nn::{
    Linear, LinearConfig, LocalResponseNorm, LocalResponseNormConfig, PRelu, PReluConfig,
    PaddingConfig2d, PixelUnshuffle, PixelUnshuffleConfig, Unfold4d, Unfold4dConfig,
};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::{LEARNING_RATE, TrainReport, synthetic, synthetic_labels};

const BATCH: usize = 2;
const CHANNELS: usize = 3;
const SIDE: usize = 8;
const LABELS: usize = 4;

/// The model.
#[derive(Module, Debug)]
pub struct Vision {
    /// 3x3, `Same` padding, 3 -> 8 channels.
    pub stem: Conv2d,
    /// One learned negative slope per channel.
    pub prelu: PRelu,
    /// 3x3, dilation 2, two groups, 8 -> 8 channels.
    pub grouped: Conv2d,
    /// `[8, 8, 8] -> [32, 4, 4]`.
    pub unshuffle: PixelUnshuffle,
    /// 1x1, 32 -> 6 channels.
    pub squeeze: Conv2d,
    /// Bilinear, back to 8x8.
    pub upsample: Interpolate2d,
    /// Kernel 2, stride 2: 8x8 -> 16x16, 6 -> 4 channels.
    pub up: ConvTranspose2d,
    /// 2x2 average, stride 2.
    pub avg_pool: AvgPool2d,
    /// Across-channel normalisation.
    pub lrn: LocalResponseNorm,
    /// 3x3 patches of the 8x8 map, stride 2.
    pub unfold: Unfold4d,
    /// Pools the patch map down.
    pub adaptive: AdaptiveAvgPool2d,
    /// Read-out to label logits.
    pub head: Linear,
    mish: Mish,
    hard_swish: HardSwish,
}

impl Vision {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            stem: Conv2dConfig::new([CHANNELS, 8], [3, 3])
                .with_padding(PaddingConfig2d::Same)
                .init(device),
            prelu: PReluConfig::new().with_num_parameters(8).init(device),
            grouped: Conv2dConfig::new([8, 8], [3, 3])
                .with_dilation([2, 2])
                .with_groups(2)
                .with_padding(PaddingConfig2d::Explicit(2, 2, 2, 2))
                .init(device),
            unshuffle: PixelUnshuffleConfig::new(2).init(),
            squeeze: Conv2dConfig::new([32, 6], [1, 1]).init(device),
            upsample: Interpolate2dConfig::new()
                .with_output_size(Some([SIDE, SIDE]))
                .with_mode(InterpolateMode::Linear)
                .init(),
            up: ConvTranspose2dConfig::new([6, 4], [2, 2])
                .with_stride([2, 2])
                .init(device),
            avg_pool: AvgPool2dConfig::new([2, 2]).init(),
            lrn: LocalResponseNormConfig::new(3).with_alpha(0.1).init(),
            unfold: Unfold4dConfig::new([3, 3]).with_stride([2, 2]).init(),
            adaptive: AdaptiveAvgPool2dConfig::new([2, 2]).init(),
            head: LinearConfig::new(4 * 9 * 4, LABELS).init(device),
            mish: Mish::new(),
            hard_swish: HardSwish::new(),
        }
    }

    /// `[batch, CHANNELS, SIDE, SIDE] -> [batch, LABELS]`.
    pub fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let x = self.prelu.forward(self.stem.forward(x));
        let x = self.mish.forward(self.grouped.forward(x));
        let x = self.squeeze.forward(self.unshuffle.forward(x));
        let x = self.hard_swish.forward(self.upsample.forward(x));
        let x = self.avg_pool.forward(self.up.forward(x));
        let x = self.lrn.forward(x);
        // [batch, 4 * 9, 9] patches, viewed as a [batch, 36, 3, 3] map.
        let patches = self.unfold.forward(x).reshape([BATCH, 36, 3, 3]);
        let x = self.adaptive.forward(patches);
        self.head.forward(x.flatten(1, 3))
    }
}

/// Trains the network for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(37);
    let model = Vision::new(device);
    let x = Tensor::<4>::from_data(
        TensorData::new(
            synthetic(BATCH * CHANNELS * SIDE * SIDE, 38),
            [BATCH, CHANNELS, SIDE, SIDE],
        ),
        device,
    );
    let labels = Tensor::<2, Int>::from_data(
        TensorData::new(synthetic_labels(BATCH * LABELS, 2, 39), [BATCH, LABELS]),
        device,
    );
    let loss_fn = BinaryCrossEntropyLossConfig::new()
        .with_logits(true)
        .with_smoothing(Some(0.05))
        .init(device);
    let optim = AdamConfig::new().init();
    super::train(model, optim, LEARNING_RATE, |model| {
        loss_fn.forward(model.forward(x.clone()), labels.clone())
    })
}
