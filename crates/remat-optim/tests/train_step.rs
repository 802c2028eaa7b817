//! burn-train's `TrainStep` with the optimizer stepped inside backward (`stash_loss` in
//! `step`, `step_stashed` in `optimize`), called as the Learner's single-device strategy calls
//! them (step, then the learning rate, then optimize): the same weights as the default
//! `TrainStep` over 10 steps; and the clear errors of what does not combine.

mod support;

use support::bits;

use std::sync::Mutex;

use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use burn::train::{RegressionOutput, TrainOutput, TrainStep};

static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Module, Debug)]
struct Model {
    first: Linear,
    second: Linear,
    #[module(skip)]
    inside: bool,
}

impl Model {
    fn regression(&self, (x, y): (Tensor<2>, Tensor<2>)) -> RegressionOutput {
        let output = self.second.forward(self.first.forward(x).tanh());
        let loss = MseLoss::new().forward(output.clone(), y.clone(), Reduction::Mean);
        RegressionOutput::new(loss, output, y)
    }
}

impl TrainStep for Model {
    type Input = (Tensor<2>, Tensor<2>);
    type Output = RegressionOutput;

    fn step(&self, batch: Self::Input) -> TrainOutput<RegressionOutput> {
        let item = self.regression(batch);
        if self.inside {
            remat_optim::stash_loss(item.loss.clone());
            return TrainOutput {
                grads: GradientsParams::new(),
                item,
            };
        }
        let grads = GradientsParams::from_grads(item.loss.backward(), self);
        TrainOutput { grads, item }
    }

    fn optimize(
        self,
        optim: &mut ModuleOptimizer,
        lr: ModuleLearningRate,
        grads: GradientsParams,
    ) -> Self {
        if self.inside {
            remat_optim::step_stashed(self, optim, lr, grads)
        } else {
            optim.step(lr, self, grads)
        }
    }
}

fn setup() -> (Model, (Tensor<2>, Tensor<2>)) {
    let device = Device::flex().autodiff();
    device.seed(17);
    let model = Model {
        first: LinearConfig::new(6, 12).init(&device),
        second: LinearConfig::new(12, 3).init(&device),
        inside: false,
    };
    // Parameters are initialised lazily: read them once, so that copies share them.
    assert!(!bits(&model).is_empty());
    let x: Vec<f32> = (0..60)
        .map(|i| ((i * 37) % 17) as f32 / 17.0 - 0.5)
        .collect();
    let y: Vec<f32> = (0..30).map(|i| ((i * 11) % 7) as f32 / 7.0 - 0.5).collect();
    let batch = (
        Tensor::<2>::from_data(TensorData::new(x, [10, 6]), &device),
        Tensor::<2>::from_data(TensorData::new(y, [10, 3]), &device),
    );
    (model, batch)
}

#[test]
fn a_train_step_that_steps_inside_backward_trains_as_the_default_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (model, batch) = setup();
    let mut separate = model.clone();
    let mut inside = Model {
        inside: true,
        ..model
    };
    let (mut optim_a, mut optim_b): (ModuleOptimizer, ModuleOptimizer) =
        (AdamConfig::new().init(), AdamConfig::new().init());
    for step in 0..10 {
        let lr = 0.01 / (1.0 + step as f64);
        let out = TrainStep::step(&separate, batch.clone());
        separate = TrainStep::optimize(separate, &mut optim_a, lr.into(), out.grads);
        let out = TrainStep::step(&inside, batch.clone());
        inside = TrainStep::optimize(inside, &mut optim_b, lr.into(), out.grads);
        assert!(
            bits(&separate) == bits(&inside),
            "step {step}: the weights differ"
        );
    }
}

#[test]
fn accumulating_or_another_thread_s_step_is_refused_with_a_message() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (model, batch) = setup();
    let inside = Model {
        inside: true,
        ..model
    };
    // Gradient accumulation: two steps before an optimize.
    let _ = TrainStep::step(&inside, batch.clone());
    let twice = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        TrainStep::step(&inside, batch.clone())
    }));
    let message = message_of(twice.err().expect("a second stash panics"));
    assert!(message.contains("accumulates gradients"), "{message}");
    // That loss is stepped; then an optimize with nothing stashed on its thread.
    let mut optim: ModuleOptimizer = AdamConfig::new().init();
    let model = TrainStep::optimize(inside, &mut optim, 0.01.into(), GradientsParams::new());
    let orphan = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut optim: ModuleOptimizer = AdamConfig::new().init();
                    TrainStep::optimize(
                        model.clone(),
                        &mut optim,
                        0.01.into(),
                        GradientsParams::new(),
                    )
                }))
            })
            .join()
            .unwrap()
    });
    let message = message_of(orphan.expect_err("an optimize without a stash panics"));
    assert!(
        message.contains("no loss was stashed on this thread"),
        "{message}"
    );
}

/// A panic's message.
fn message_of(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast::<&str>()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    }
}
