//! A post-norm transformer decoder (dropout 0.1, quiet softmax) with an autoregressive target
//! mask and a padded memory: sinusoidal positions on the target, rotary positions on the
//! memory; mean squared error against a fixed target; centered RMSProp with momentum.

use burn::module::Module;
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::transformer::{
    TransformerDecoder, TransformerDecoderConfig, TransformerDecoderInput,
};
use burn::nn::{
    Linear, LinearConfig, PositionalEncoding, PositionalEncodingConfig, RotaryEncoding,
    RotaryEncodingConfig,
};
use burn::optim::RmsPropConfig;
use burn::tensor::{Bool, Device, Tensor, TensorData};

use super::{TrainReport, synthetic};

const BATCH: usize = 2;
const TARGET: usize = 5;
const MEMORY: usize = 4;
const D_MODEL: usize = 16;
const D_FF: usize = 32;
const HEADS: usize = 2;
const LAYERS: usize = 2;

/// The model.
#[derive(Module, Debug)]
pub struct Decoder {
    /// Projects the raw memory features.
    pub memory_in: Linear,
    /// The decoder stack.
    pub decoder: TransformerDecoder,
    /// Per-position read-out to one value.
    pub head: Linear,
    /// Sinusoidal positions (a constant).
    pub positions: PositionalEncoding,
    /// Rotary positions (a constant).
    pub rotary: RotaryEncoding,
}

impl Decoder {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            memory_in: LinearConfig::new(D_MODEL, D_MODEL).init(device),
            decoder: TransformerDecoderConfig::new(D_MODEL, D_FF, HEADS, LAYERS)
                .with_dropout(0.1)
                .with_quiet_softmax(true)
                .init(device),
            head: LinearConfig::new(D_MODEL, 1).init(device),
            positions: PositionalEncodingConfig::new(D_MODEL).init(device),
            rotary: RotaryEncodingConfig::new(16, D_MODEL).init(device),
        }
    }

    /// Target `[batch, TARGET, D_MODEL]`, memory `[batch, MEMORY, D_MODEL]` and its padding
    /// mask `[batch, MEMORY]` -> `[batch, TARGET, 1]`.
    pub fn forward(&self, target: Tensor<3>, memory: Tensor<3>, pad: Tensor<2, Bool>) -> Tensor<3> {
        let device = target.device();
        let target = self.positions.forward(target);
        let memory = self.rotary.forward(self.memory_in.forward(memory));
        let input = TransformerDecoderInput::new(target, memory)
            .target_mask_attn(generate_autoregressive_mask(BATCH, TARGET, &device))
            .memory_mask_pad(pad);
        self.head.forward(self.decoder.forward(input))
    }
}

/// Trains the decoder for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(29);
    let model = Decoder::new(device);
    let target = Tensor::<3>::from_data(
        TensorData::new(
            synthetic(BATCH * TARGET * D_MODEL, 30),
            [BATCH, TARGET, D_MODEL],
        ),
        device,
    );
    let memory = Tensor::<3>::from_data(
        TensorData::new(
            synthetic(BATCH * MEMORY * D_MODEL, 31),
            [BATCH, MEMORY, D_MODEL],
        ),
        device,
    );
    // The second sequence's last memory position is padding.
    let mut padded = vec![false; BATCH * MEMORY];
    padded[2 * MEMORY - 1] = true;
    let pad = Tensor::<2, Bool>::from_data(TensorData::new(padded, [BATCH, MEMORY]), device);
    let y = Tensor::<3>::from_data(
        TensorData::new(synthetic(BATCH * TARGET, 32), [BATCH, TARGET, 1]),
        device,
    );
    let optim = RmsPropConfig::new().with_centered(true).init();
    super::train(model, optim, 3e-3, |model| {
        let out = model.forward(target.clone(), memory.clone(), pad.clone());
        MseLoss::new().forward(out, y.clone(), Reduction::Mean)
    })
}
