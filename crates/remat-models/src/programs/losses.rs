//! Burn's loss functions, summed over the slices of one linear model's output: KL divergence,
//! Poisson NLL, smooth L1, cosine embedding, margin ranking, triplet margin, Gaussian NLL,
//! Lp (p = 3), soft margin, multi-class margin and hinge embedding; plain SGD.

use burn::module::Module;
use burn::nn::loss::{
    CosineEmbeddingLossConfig, GaussianNLLLossConfig, HingeEmbeddingLossConfig, KLDivLossConfig,
    LpLossConfig, MarginRankingLossConfig, MultiMarginLossConfig, PoissonNllLossConfig, Reduction,
    SmoothL1LossConfig, SoftMarginLoss, TripletMarginLossConfig,
};
use burn::nn::{Linear, LinearConfig};
use burn::optim::SgdConfig;
use burn::tensor::activation::{log_softmax, softmax, softplus};
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::{TrainReport, synthetic, synthetic_labels};

const BATCH: usize = 6;
const FEATURES: usize = 8;
/// Width of each output slice.
const SLICE: usize = 5;

/// The model: one linear map whose output is cut into four slices.
#[derive(Module, Debug)]
pub struct Scorer {
    /// `FEATURES -> 4 * SLICE`.
    pub linear: Linear,
}

/// Fixed targets of every loss.
struct Targets {
    distribution: Tensor<2>,
    counts: Tensor<2>,
    values: Tensor<2>,
    signs_int: Tensor<1, Int>,
    signs: Tensor<1>,
    signs_2d: Tensor<2>,
    classes: Tensor<1, Int>,
}

fn float2(values: Vec<f32>, device: &Device) -> Tensor<2> {
    Tensor::<2>::from_data(TensorData::new(values, [BATCH, SLICE]), device)
}

fn signs(len: usize, seed: u64) -> Vec<i64> {
    synthetic_labels(len, 2, seed)
        .into_iter()
        .map(|l| 2 * l - 1)
        .collect()
}

impl Targets {
    fn new(device: &Device) -> Self {
        let n = BATCH * SLICE;
        let s = signs(BATCH, 45);
        Self {
            distribution: softmax(float2(synthetic(n, 41), device), 1),
            counts: float2(
                synthetic(n, 42)
                    .into_iter()
                    .map(|v| (v + 1.0) * 2.0)
                    .collect(),
                device,
            ),
            values: float2(synthetic(n, 43), device),
            signs_int: Tensor::<1, Int>::from_data(TensorData::new(s.clone(), [BATCH]), device),
            signs: Tensor::<1>::from_data(
                TensorData::new(s.iter().map(|&v| v as f32).collect::<Vec<_>>(), [BATCH]),
                device,
            ),
            signs_2d: float2(signs(n, 46).into_iter().map(|v| v as f32).collect(), device),
            classes: Tensor::<1, Int>::from_data(
                TensorData::new(synthetic_labels(BATCH, SLICE, 47), [BATCH]),
                device,
            ),
        }
    }
}

impl Scorer {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            linear: LinearConfig::new(FEATURES, 4 * SLICE).init(device),
        }
    }

    /// The sum of every loss on `x: [BATCH, FEATURES]`.
    fn loss(&self, x: Tensor<2>, t: &Targets) -> Tensor<1> {
        let out = self.linear.forward(x);
        let slice = |k: usize| out.clone().slice([0..BATCH, k * SLICE..(k + 1) * SLICE]);
        let (a, b, c, d) = (slice(0), slice(1), slice(2), slice(3));
        let mean = Reduction::Mean;
        let mut total = KLDivLossConfig::new().init().forward(
            log_softmax(a.clone(), 1),
            t.distribution.clone(),
            Reduction::BatchMean,
        );
        total = total
            + PoissonNllLossConfig::new()
                .init()
                .forward(b.clone(), t.counts.clone(), mean.clone());
        total = total
            + SmoothL1LossConfig::new()
                .with_beta(0.5)
                .init()
                .forward(c.clone(), t.values.clone())
                .mean()
                .reshape([1]);
        total = total
            + CosineEmbeddingLossConfig::new()
                .with_margin(0.2)
                .init()
                .forward(a.clone(), c.clone(), t.signs_int.clone());
        total = total
            + MarginRankingLossConfig::new()
                .with_margin(0.1)
                .init()
                .forward(
                    b.clone().sum_dim(1).squeeze_dim(1),
                    d.clone().sum_dim(1).squeeze_dim(1),
                    t.signs.clone(),
                    mean.clone(),
                );
        total = total
            + TripletMarginLossConfig::new().init().forward(
                a.clone(),
                b.clone(),
                c.clone(),
                mean.clone(),
            );
        total = total
            + GaussianNLLLossConfig::new().init().forward(
                d.clone(),
                t.values.clone(),
                softplus(b.clone(), 1.0).add_scalar(0.1),
                mean.clone(),
            );
        total = total
            + LpLossConfig::new(3.0)
                .init()
                .forward(c.clone(), t.values.clone(), mean.clone());
        total = total + SoftMarginLoss::new().forward(d.clone(), t.signs_2d.clone(), mean.clone());
        total = total
            + MultiMarginLossConfig::new()
                .init()
                .forward(a, t.classes.clone(), mean.clone());
        total
            + HingeEmbeddingLossConfig::new()
                .init()
                .forward(d.abs(), t.signs_2d.clone(), mean)
    }
}

/// Trains the scorer for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(41);
    let model = Scorer::new(device);
    let x = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * FEATURES, 40), [BATCH, FEATURES]),
        device,
    );
    let targets = Targets::new(device);
    let optim = SgdConfig::new().init();
    super::train(model, optim, 0.05, |model| model.loss(x.clone(), &targets))
}
