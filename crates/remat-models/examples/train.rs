//! The main example: a Burn model trained on remat.
//!
//! ```sh
//! cargo run --release -p remat-models --example train
//! ```
//!
//! Nothing here mentions remat except the statistics at the end: the model, the optimizer and
//! the training loop are plain Burn. The workspace's `[patch.crates-io] burn-autodiff` line
//! makes `Device::autodiff()` run on remat, and `.gradient_checkpointing()` selects Burn's
//! balanced strategy, under which remat drops cheap element-wise activations and replays
//! them during backward.

use std::time::Instant;

use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Gelu, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};

const SAMPLES: usize = 256;
const HIDDEN: usize = 64;
const STEPS: usize = 200;

/// A two-hidden-layer perceptron regressing `y = sin(3 x0) * cos(2 x1)`.
#[derive(Module, Debug)]
struct Regressor {
    input: Linear,
    hidden: Linear,
    output: Linear,
    activation: Gelu,
}

impl Regressor {
    fn new(device: &Device) -> Self {
        Self {
            input: LinearConfig::new(2, HIDDEN).init(device),
            hidden: LinearConfig::new(HIDDEN, HIDDEN).init(device),
            output: LinearConfig::new(HIDDEN, 1).init(device),
            activation: Gelu::new(),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let x = self.activation.forward(self.input.forward(x));
        let x = self.activation.forward(self.hidden.forward(x));
        self.output.forward(x)
    }
}

fn main() {
    let device = Device::flex().autodiff().gradient_checkpointing();
    device.seed(42);

    // A fixed grid of inputs in [-1, 1]^2 and the target function.
    let side = (SAMPLES as f64).sqrt() as usize;
    let mut xs = Vec::with_capacity(side * side * 2);
    let mut ys = Vec::with_capacity(side * side);
    for i in 0..side {
        for j in 0..side {
            let (a, b) = (
                i as f32 / (side - 1) as f32 * 2.0 - 1.0,
                j as f32 / (side - 1) as f32 * 2.0 - 1.0,
            );
            xs.extend([a, b]);
            ys.push((3.0 * a).sin() * (2.0 * b).cos());
        }
    }
    let n = side * side;
    let x = Tensor::<2>::from_data(TensorData::new(xs, [n, 2]), &device);
    let y = Tensor::<2>::from_data(TensorData::new(ys, [n, 1]), &device);

    let mut model = Regressor::new(&device);
    let mut optim = AdamConfig::new().init();
    remat::reset_stats();
    let start = Instant::now();
    let mut first = None;
    let mut last = f32::NAN;
    for step in 1..=STEPS {
        let loss = MseLoss::new().forward(model.forward(x.clone()), y.clone(), Reduction::Mean);
        last = loss.clone().into_scalar::<f32>();
        first.get_or_insert(last);
        if step == 1 || step % 20 == 0 {
            println!("step {step:>4}  loss {last:.6}");
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(5e-3, model, grads);
    }
    let stats = remat::stats();
    println!(
        "trained {STEPS} steps in {:.2?}: loss {:.6} -> {last:.6}",
        start.elapsed(),
        first.unwrap_or(f32::NAN)
    );
    println!(
        "remat: peak saved activations {} bytes, {} values replayed during backward",
        stats.peak_bytes, stats.replays
    );
}
