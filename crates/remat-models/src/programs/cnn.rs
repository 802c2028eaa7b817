//! A small convolutional network: Conv2d + BatchNorm + ReLU + MaxPool2d, then Linear;
//! cross-entropy over 10 classes.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::{LEARNING_RATE, TrainReport, synthetic, synthetic_labels};

const BATCH: usize = 8;
const CHANNELS: usize = 3;
const SIDE: usize = 8;
const FILTERS: usize = 6;
const CLASSES: usize = 10;

/// The model.
#[derive(Module, Debug)]
pub struct Cnn {
    /// 3x3 convolution, padding 1.
    pub conv: Conv2d,
    /// Batch normalisation over the filters.
    pub norm: BatchNorm,
    /// 2x2 max pooling.
    pub pool: MaxPool2d,
    /// Classifier.
    pub head: Linear,
    relu: Relu,
}

impl Cnn {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            // No bias before BatchNorm: its gradient is analytically zero there, so Adam would
            // amplify rounding noise into real steps and compare noise between engines.
            conv: Conv2dConfig::new([CHANNELS, FILTERS], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .with_bias(false)
                .init(device),
            norm: BatchNormConfig::new(FILTERS).init(device),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            head: LinearConfig::new(FILTERS * (SIDE / 2) * (SIDE / 2), CLASSES).init(device),
            relu: Relu::new(),
        }
    }

    /// `[batch, CHANNELS, SIDE, SIDE] -> [batch, CLASSES]`.
    pub fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let x = self.relu.forward(self.norm.forward(self.conv.forward(x)));
        let x = self.pool.forward(x);
        self.head.forward(x.flatten(1, 3))
    }
}

/// Trains the CNN for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(11);
    let model = Cnn::new(device);
    let x = Tensor::<4>::from_data(
        TensorData::new(
            synthetic(BATCH * CHANNELS * SIDE * SIDE, 3),
            [BATCH, CHANNELS, SIDE, SIDE],
        ),
        device,
    );
    let labels = Tensor::<1, Int>::from_data(
        TensorData::new(synthetic_labels(BATCH, CLASSES, 4), [BATCH]),
        device,
    );
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let optim = AdamConfig::new().init();
    super::train(model, optim, LEARNING_RATE, |model| {
        loss_fn.forward(model.forward(x.clone()), labels.clone())
    })
}
