//! A Burn training run through burn-train's `Learner`: an in-memory synthetic regression
//! dataset, a `Batcher`, `SupervisedTraining::launch`, an MLP of `LAYERS` Linear + GELU
//! layers and a read-out; Adam on mean squared error, 4 epochs of 5 batches.
//!
//! The engine's controls are not named here (these files compile in the oracle too, where
//! there is no remat): each layer's forward runs through a [`Layer`] wrapper stored in the
//! model, the identity in [`run`]; the patched build passes `|f| remat::checkpoint(f)` to
//! [`train`] and gets one region per layer on whatever thread the Learner runs the step.
//!
//! A gradient-checkpointing device (`.autodiff().gradient_checkpointing()`) is trained with
//! `SupervisedTraining::gradient_checkpointing()`, the model created on that device. Burn
//! 0.22 needs the model's device: the Learner trains on the device of the model's parameters
//! and moves the batches there with `gradient_checkpointing()` applied, but does not change
//! the strategy of parameters already on that device, so a model created on a plain
//! `.autodiff()` device panics at its first op ("Gradient checkpointing strategy mismatch:
//! Balanced vs Disabled").
//!
//! # Invariants
//! - Fixed data order (no shuffling), batches built on the calling thread (no dataloader
//!   workers), one device: the run is deterministic and its steps are those of the other
//!   programs' hand-written loops.
//! - Nothing is printed (a silent renderer, no application logger, an in-memory metric
//!   logger) and the Learner's directory is removed afterwards.

use std::sync::{Arc, Mutex};

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Gelu, Linear, LinearConfig};
use burn::optim::lr_scheduler::constant::ConstantLr;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, GradientCheckpointingStrategy, Tensor, TensorData};
use burn::train::logger::{EvaluationProgressLogger, InMemoryMetricLogger, TrainingProgressLogger};
use burn::train::metric::MetricDefinition;
use burn::train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};
use burn::train::{
    ExecutionStrategy, InferenceStep, Learner, MultiDeviceOptim, RegressionOutput,
    SupervisedTraining, TrainOutput, TrainStep,
};

use super::{LEARNING_RATE, STEPS, TrainReport, collect_grads, collect_params, scalar, synthetic};

const INPUT: usize = 16;
const WIDTH: usize = 32;
const OUTPUT: usize = 4;
const LAYERS: usize = 3;
const BATCH: usize = 8;
/// Training batches per epoch; `STEPS / BATCHES` epochs.
const BATCHES: usize = 5;
const EPOCHS: usize = STEPS / BATCHES;
const VALID_ITEMS: usize = 2 * BATCH;

/// How a layer's forward is run: given the layer as a closure, returns its output. The
/// identity ([`plain`]) on any engine; `|f| remat::checkpoint(f)` for one remat region per
/// layer.
pub type Layer = fn(&dyn Fn() -> Tensor<2>) -> Tensor<2>;

/// Runs the layer as is.
pub fn plain(layer: &dyn Fn() -> Tensor<2>) -> Tensor<2> {
    layer()
}

/// What the training steps saw, shared by every copy of the model the Learner makes.
#[derive(Clone, Debug, Default)]
struct Recorder(Arc<Mutex<TrainReport>>);

impl Recorder {
    fn record(&self, loss: f32, first_grads: impl FnOnce() -> Vec<super::Named>) {
        let mut report = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if report.losses.is_empty() {
            report.grads = first_grads();
        }
        report.losses.push(loss);
    }

    fn take(&self) -> TrainReport {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The model.
#[derive(Module, Debug)]
pub struct Mlp {
    /// Hidden layers (Linear + GELU), one region each when run on remat with regions.
    pub layers: Vec<Linear>,
    /// Read-out.
    pub head: Linear,
    gelu: Gelu,
    #[module(skip)]
    layer: Layer,
    #[module(skip)]
    recorder: Recorder,
}

impl Mlp {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device, layer: Layer) -> Self {
        Self {
            layers: (0..LAYERS)
                .map(|i| LinearConfig::new(if i == 0 { INPUT } else { WIDTH }, WIDTH).init(device))
                .collect(),
            head: LinearConfig::new(WIDTH, OUTPUT).init(device),
            gelu: Gelu::new(),
            layer,
            recorder: Recorder::default(),
        }
    }

    /// `[batch, INPUT] -> [batch, OUTPUT]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let x = self.layers.iter().fold(x, |x, linear| {
            (self.layer)(&|| self.gelu.forward(linear.forward(x.clone())))
        });
        self.head.forward(x)
    }

    fn regression(&self, batch: Batch) -> RegressionOutput {
        let output = self.forward(batch.x);
        let loss = MseLoss::new().forward(output.clone(), batch.y.clone(), Reduction::Mean);
        RegressionOutput::new(loss, output, batch.y)
    }
}

impl TrainStep for Mlp {
    type Input = Batch;
    type Output = RegressionOutput;

    fn step(&self, batch: Batch) -> TrainOutput<RegressionOutput> {
        let item = self.regression(batch);
        let grads = GradientsParams::from_grads(item.loss.backward(), self);
        self.recorder
            .record(scalar(&item.loss), || collect_grads(self, &grads));
        TrainOutput { grads, item }
    }
}

impl InferenceStep for Mlp {
    type Input = Batch;
    type Output = RegressionOutput;

    fn step(&self, batch: Batch) -> RegressionOutput {
        self.regression(batch)
    }
}

/// One example: features and target.
#[derive(Clone, Debug)]
pub struct Item {
    x: Vec<f32>,
    y: Vec<f32>,
}

/// A batch of examples.
#[derive(Clone, Debug)]
pub struct Batch {
    x: Tensor<2>,
    y: Tensor<2>,
}

/// Stacks items into `[n, INPUT]` and `[n, OUTPUT]` tensors.
#[derive(Clone, Debug)]
struct Stack;

impl Batcher<Item, Batch> for Stack {
    fn batch(&self, items: Vec<Item>, device: &Device) -> Batch {
        let n = items.len();
        let x = items.iter().flat_map(|i| i.x.iter().copied()).collect();
        let y = items.iter().flat_map(|i| i.y.iter().copied()).collect();
        Batch {
            x: Tensor::from_data(TensorData::new(x, [n, INPUT]), device),
            y: Tensor::from_data(TensorData::new(y, [n, OUTPUT]), device),
        }
    }
}

/// `len` synthetic examples (independent of any backend RNG).
fn dataset(len: usize, seed: u64) -> InMemDataset<Item> {
    let x = synthetic(len * INPUT, seed);
    let y = synthetic(len * OUTPUT, seed + 1);
    InMemDataset::new(
        x.chunks(INPUT)
            .zip(y.chunks(OUTPUT))
            .map(|(x, y)| Item {
                x: x.to_vec(),
                y: y.to_vec(),
            })
            .collect(),
    )
}

/// A renderer that shows nothing (burn-train's CLI renderer prints every step).
struct Silent;

impl MetricsRendererTraining for Silent {
    fn update_train(&mut self, _state: MetricState) {}
    fn update_valid(&mut self, _state: MetricState) {}
}

impl MetricsRendererEvaluation for Silent {
    fn update_test(&mut self, _name: EvaluationName, _state: MetricState) {}
}

impl TrainingProgressLogger for Silent {
    fn start(&mut self, _: usize, _: usize, _: Option<usize>, _: Option<&str>) {}
    fn update_epoch(&mut self, _epoch: usize) {}
    fn start_split(&mut self, _split: &str, _total_items: usize) {}
    fn update_split(&mut self, _items_processed: usize) {}
    fn end_split(&mut self) {}
    fn end(&mut self) {}
    fn log_event_training(&mut self, _event: String) {}
}

impl EvaluationProgressLogger for Silent {
    fn start_global_progress(&mut self, _total_tests: usize) {}
    fn start_test(&mut self, _name: &str, _total_items: usize) {}
    fn update_test_progress(&mut self, _items_processed: usize) {}
    fn end_test(&mut self) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, _event: String) {}
}

impl MetricsRenderer for Silent {
    fn manual_close(&mut self) {}
    fn register_metric(&mut self, _definition: MetricDefinition) {}
}

/// Trains through the Learner on `device` (an autodiff device) with plain layers.
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    train(device, plain, 1)
}

/// [`run`] on `device` made a gradient-checkpointing device (Burn's `BalancedCheckpointing`).
pub fn run_checkpointing(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    train(&device.clone().gradient_checkpointing(), plain, 1)
}

/// Trains through the Learner on `device`, each hidden layer run through `layer`, with
/// `workers` copies of the device: 1 trains on the calling thread (burn-train's single-device
/// strategy); more use burn-train's multi-device strategy, which runs each step's forward and
/// backward on one worker thread per device (their gradients are summed in arrival order, so
/// such a run is not bit-reproducible).
///
/// The caller holds [`exclusive`](super::exclusive) (the run seeds the device). On a
/// gradient-checkpointing device the Learner is set up with
/// `SupervisedTraining::gradient_checkpointing()`.
pub fn train(device: &Device, layer: Layer, workers: usize) -> TrainReport {
    device.seed(29);
    let model = Mlp::new(device, layer);
    let recorder = model.recorder.clone();
    let train = DataLoaderBuilder::new(Stack)
        .batch_size(BATCH)
        .build(dataset(BATCHES * BATCH, 41));
    let valid = DataLoaderBuilder::new(Stack)
        .batch_size(BATCH)
        .build(dataset(VALID_ITEMS, 43));
    // The Learner wants a directory for its logs and checkpoints: the configuration below
    // writes neither, and the directory goes when the run ends.
    let directory = Artifacts::new();
    let mut training = SupervisedTraining::new(&directory.0, train, valid)
        .num_epochs(EPOCHS)
        .renderer(Box::new(Silent))
        .with_metric_logger(InMemoryMetricLogger::new())
        .with_application_logger(None);
    if device.gradient_checkpointing_strategy() == Some(GradientCheckpointingStrategy::Balanced) {
        training = training.gradient_checkpointing();
    }
    if workers > 1 {
        training = training.with_training_strategy(
            ExecutionStrategy::multi(
                vec![device.clone(); workers],
                MultiDeviceOptim::OptimMainDevice,
            )
            .into(),
        );
    }
    let learner = Learner::new(
        model,
        AdamConfig::new().init(),
        ConstantLr::new(LEARNING_RATE),
    );
    let result = training.launch(learner);
    if let Some(error) = &result.error {
        panic!("the Learner stopped on an error: {error}");
    }
    let mut report = recorder.take();
    report.params = collect_params(&result.model);
    report
}

/// The Learner's directory, under the directory of the running executable (the target
/// directory), removed on drop.
struct Artifacts(std::path::PathBuf);

impl Artifacts {
    fn new() -> Self {
        let base = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.to_path_buf()))
            .unwrap_or_else(std::env::temp_dir);
        Self(base.join(format!("learner-artifacts-{}", std::process::id())))
    }
}

impl Drop for Artifacts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
