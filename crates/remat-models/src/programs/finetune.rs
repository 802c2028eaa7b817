//! Fine-tuning with LoRA or QLoRA adapters (`Module::apply_lora` / `apply_qlora`: frozen,
//! possibly quantized base weights; only the adapter factors train), gradient accumulation
//! over two micro-batches (`GradientsAccumulator`), a stop-gradient branch (`detach`),
//! dropout, Adam with gradient clipping by value, and a validation loss through
//! `Module::valid` (the inner backend) after every step.

use burn::module::{Lora, Module, QLora, Quantizer};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Dropout, DropoutConfig, Gelu, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamConfig, GradientsAccumulator, GradientsParams};
use burn::tensor::quantization::{Calibration, QuantValue};
use burn::tensor::{Device, Tensor, TensorData};

use super::{LEARNING_RATE, STEPS, TrainReport, collect_grads, collect_params, scalar, synthetic};

const MICRO_BATCH: usize = 4;
const D_IN: usize = 8;
const HIDDEN: usize = 16;
const D_OUT: usize = 3;

/// The model the adapters attach to.
#[derive(Module, Debug)]
pub struct Net {
    /// `D_IN -> HIDDEN`.
    pub hidden: Linear,
    /// Normalises the hidden features.
    pub norm: LayerNorm,
    /// `HIDDEN -> D_OUT`.
    pub head: Linear,
    dropout: Dropout,
    gelu: Gelu,
}

impl Net {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            hidden: LinearConfig::new(D_IN, HIDDEN).init(device),
            norm: LayerNormConfig::new(HIDDEN).init(device),
            head: LinearConfig::new(HIDDEN, D_OUT).init(device),
            dropout: DropoutConfig::new(0.1).init(),
            gelu: Gelu::new(),
        }
    }

    /// `[batch, D_IN] -> [batch, D_OUT]`; a tenth of the hidden features join the output
    /// path without a gradient.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let h = self.hidden.forward(x);
        let skip = h.clone().detach().mul_scalar(0.1);
        let h = self
            .dropout
            .forward(self.gelu.forward(self.norm.forward(h)))
            + skip;
        self.head.forward(h)
    }
}

fn data(rows: usize, cols: usize, seed: u64, device: &Device) -> Tensor<2> {
    Tensor::<2>::from_data(
        TensorData::new(synthetic(rows * cols, seed), [rows, cols]),
        device,
    )
}

fn train(device: &Device, quantized: bool) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(if quantized { 53 } else { 47 });
    let lora = Lora::new(2, 4.0);
    let mut model = if quantized {
        let scheme = device
            .settings()
            .quantization
            .scheme
            .with_value(QuantValue::Q8S);
        Net::new(device).apply_qlora(QLora::new(
            lora,
            Quantizer::new(Calibration::MinMax, scheme),
        ))
    } else {
        Net::new(device).apply_lora(lora)
    };
    let batches: Vec<(Tensor<2>, Tensor<2>)> = (0..2)
        .map(|i| {
            (
                data(MICRO_BATCH, D_IN, 60 + i, device),
                data(MICRO_BATCH, D_OUT, 70 + i, device),
            )
        })
        .collect();
    let (x_valid, y_valid) = (
        data(MICRO_BATCH, D_IN, 80, device),
        data(MICRO_BATCH, D_OUT, 81, device),
    );
    let mut optim = AdamConfig::new()
        .with_grad_clipping(Some(GradientClippingConfig::Value(0.5)))
        .init();
    let mut report = TrainReport::default();
    for step in 0..STEPS {
        let mut accumulator = GradientsAccumulator::new();
        for (x, y) in &batches {
            let loss = MseLoss::new().forward(model.forward(x.clone()), y.clone(), Reduction::Mean);
            report.losses.push(scalar(&loss));
            accumulator.accumulate(&model, GradientsParams::from_grads(loss.backward(), &model));
        }
        let grads = accumulator.grads();
        if step == 0 {
            report.grads = collect_grads(&model, &grads);
        }
        model = optim.step(LEARNING_RATE, model, grads);
        let valid = model.valid();
        let out = valid.forward(x_valid.clone().inner());
        let loss = MseLoss::new().forward(out, y_valid.clone().inner(), Reduction::Mean);
        report.losses.push(scalar(&loss));
    }
    report.params = collect_params(&model);
    report
}

/// Trains LoRA adapters for [`STEPS`] steps on `device` (an autodiff device).
pub fn run_lora(device: &Device) -> TrainReport {
    train(device, false)
}

/// Trains QLoRA adapters (8-bit base weights) for [`STEPS`] steps on `device`.
pub fn run_qlora(device: &Device) -> TrainReport {
    train(device, true)
}
