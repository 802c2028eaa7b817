//! A pre-norm transformer encoder (`norm_first = true`, dropout 0.1) with a linear read-out;
//! mean squared error against a fixed target (not a plain mean of the output, see
//! BURN-NOTES: a post-norm encoder under a plain mean has analytically zero gradients).

use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Tensor, TensorData};

use super::{LEARNING_RATE, TrainReport, synthetic};

const BATCH: usize = 4;
const SEQ: usize = 6;
const D_MODEL: usize = 16;
const D_FF: usize = 32;
const HEADS: usize = 2;
const LAYERS: usize = 2;

/// The model.
#[derive(Module, Debug)]
pub struct Transformer {
    /// The encoder stack.
    pub encoder: TransformerEncoder,
    /// Per-position read-out to one value.
    pub head: Linear,
}

impl Transformer {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            encoder: TransformerEncoderConfig::new(D_MODEL, D_FF, HEADS, LAYERS)
                .with_norm_first(true)
                .with_dropout(0.1)
                .init(device),
            head: LinearConfig::new(D_MODEL, 1).init(device),
        }
    }

    /// `[batch, SEQ, D_MODEL] -> [batch, SEQ, 1]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.head
            .forward(self.encoder.forward(TransformerEncoderInput::new(x)))
    }
}

/// Trains the transformer for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(13);
    let model = Transformer::new(device);
    let x = Tensor::<3>::from_data(
        TensorData::new(synthetic(BATCH * SEQ * D_MODEL, 5), [BATCH, SEQ, D_MODEL]),
        device,
    );
    let y = Tensor::<3>::from_data(
        TensorData::new(synthetic(BATCH * SEQ, 6), [BATCH, SEQ, 1]),
        device,
    );
    let optim = AdamConfig::new().init();
    super::train(model, optim, LEARNING_RATE, |model| {
        MseLoss::new().forward(model.forward(x.clone()), y.clone(), Reduction::Mean)
    })
}
