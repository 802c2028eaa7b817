//! A multi-layer perceptron: Linear + ReLU, Linear + GELU, Linear; mean squared error.

use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Gelu, Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Tensor, TensorData};

use super::{LEARNING_RATE, TrainReport, synthetic};

const BATCH: usize = 32;
const INPUT: usize = 16;
const HIDDEN: usize = 32;
const OUTPUT: usize = 4;

/// The model.
#[derive(Module, Debug)]
pub struct Mlp {
    /// First layer.
    pub l1: Linear,
    /// Second layer.
    pub l2: Linear,
    /// Output layer.
    pub l3: Linear,
    relu: Relu,
    gelu: Gelu,
}

impl Mlp {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            l1: LinearConfig::new(INPUT, HIDDEN).init(device),
            l2: LinearConfig::new(HIDDEN, HIDDEN).init(device),
            l3: LinearConfig::new(HIDDEN, OUTPUT).init(device),
            relu: Relu::new(),
            gelu: Gelu::new(),
        }
    }

    /// `[batch, INPUT] -> [batch, OUTPUT]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let x = self.relu.forward(self.l1.forward(x));
        let x = self.gelu.forward(self.l2.forward(x));
        self.l3.forward(x)
    }
}

/// Trains the MLP for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(7);
    let model = Mlp::new(device);
    let x = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * INPUT, 1), [BATCH, INPUT]),
        device,
    );
    let y = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * OUTPUT, 2), [BATCH, OUTPUT]),
        device,
    );
    let optim = AdamConfig::new().init();
    super::train(model, optim, LEARNING_RATE, |model| {
        MseLoss::new().forward(model.forward(x.clone()), y.clone(), Reduction::Mean)
    })
}
