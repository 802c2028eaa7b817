//! A character-level sequence model: Embedding + LSTM + Linear; next-token cross-entropy.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig, Lstm, LstmConfig};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::{LEARNING_RATE, TrainReport, synthetic_labels};

const BATCH: usize = 4;
const SEQ: usize = 7;
const VOCAB: usize = 12;
const EMBED: usize = 8;
const HIDDEN: usize = 16;

/// The model.
#[derive(Module, Debug)]
pub struct SeqModel {
    /// Token embedding.
    pub embedding: Embedding,
    /// The recurrent layer.
    pub lstm: Lstm,
    /// Read-out to token logits.
    pub head: Linear,
}

impl SeqModel {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            embedding: EmbeddingConfig::new(VOCAB, EMBED).init(device),
            lstm: LstmConfig::new(EMBED, HIDDEN, true).init(device),
            head: LinearConfig::new(HIDDEN, VOCAB).init(device),
        }
    }

    /// Token ids `[batch, seq]` -> logits `[batch * seq, VOCAB]`.
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<2> {
        let x = self.embedding.forward(tokens);
        let (hidden, _) = self.lstm.forward(x, None);
        self.head.forward(hidden).reshape([BATCH * SEQ, VOCAB])
    }
}

/// Trains the sequence model for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(17);
    let model = SeqModel::new(device);
    let tokens = synthetic_labels(BATCH * (SEQ + 1), VOCAB, 8);
    let mut inputs = Vec::with_capacity(BATCH * SEQ);
    let mut targets = Vec::with_capacity(BATCH * SEQ);
    for row in tokens.chunks(SEQ + 1) {
        inputs.extend_from_slice(&row[..SEQ]);
        targets.extend_from_slice(&row[1..]);
    }
    let inputs = Tensor::<2, Int>::from_data(TensorData::new(inputs, [BATCH, SEQ]), device);
    let targets = Tensor::<1, Int>::from_data(TensorData::new(targets, [BATCH * SEQ]), device);
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let optim = AdamConfig::new().init();
    super::train(model, optim, LEARNING_RATE, |model| {
        loss_fn.forward(model.forward(inputs.clone()), targets.clone())
    })
}
