//! A recurrent tagger: Embedding + GRU + bidirectional LSTM + RMSNorm + Linear; cross-entropy
//! with label smoothing and class weights; AdamW.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{
    BiLstm, BiLstmConfig, Embedding, EmbeddingConfig, Gru, GruConfig, Linear, LinearConfig,
    RmsNorm, RmsNormConfig,
};
use burn::optim::AdamWConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::{LEARNING_RATE, TrainReport, synthetic_labels};

const BATCH: usize = 3;
const SEQ: usize = 6;
const VOCAB: usize = 10;
const EMBED: usize = 8;
const HIDDEN: usize = 12;
const TAGS: usize = 5;

/// The model.
#[derive(Module, Debug)]
pub struct Tagger {
    /// Token embedding.
    pub embedding: Embedding,
    /// Unidirectional GRU (reset after the matrix product, Burn's default).
    pub gru: Gru,
    /// Bidirectional LSTM over the GRU's states.
    pub bilstm: BiLstm,
    /// Root-mean-square normalisation of both directions.
    pub norm: RmsNorm,
    /// Read-out to tag logits.
    pub head: Linear,
}

impl Tagger {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            embedding: EmbeddingConfig::new(VOCAB, EMBED).init(device),
            gru: GruConfig::new(EMBED, HIDDEN, true).init(device),
            bilstm: BiLstmConfig::new(HIDDEN, HIDDEN, true).init(device),
            norm: RmsNormConfig::new(2 * HIDDEN).init(device),
            head: LinearConfig::new(2 * HIDDEN, TAGS).init(device),
        }
    }

    /// Token ids `[batch, seq]` -> logits `[batch * seq, TAGS]`.
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<2> {
        let x = self.embedding.forward(tokens);
        let x = self.gru.forward(x, None);
        let (x, _) = self.bilstm.forward(x, None);
        self.head
            .forward(self.norm.forward(x))
            .reshape([BATCH * SEQ, TAGS])
    }
}

/// Trains the tagger for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(23);
    let model = Tagger::new(device);
    let tokens = Tensor::<2, Int>::from_data(
        TensorData::new(synthetic_labels(BATCH * SEQ, VOCAB, 24), [BATCH, SEQ]),
        device,
    );
    let tags = Tensor::<1, Int>::from_data(
        TensorData::new(synthetic_labels(BATCH * SEQ, TAGS, 25), [BATCH * SEQ]),
        device,
    );
    let loss_fn = CrossEntropyLossConfig::new()
        .with_smoothing(Some(0.1))
        .with_weights(Some(vec![1.0, 0.5, 2.0, 1.0, 1.5]))
        .init(device);
    let optim = AdamWConfig::new().with_weight_decay(0.05).init();
    super::train(model, optim, LEARNING_RATE, |model| {
        loss_fn.forward(model.forward(tokens.clone()), tags.clone())
    })
}
