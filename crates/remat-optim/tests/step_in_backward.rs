//! `backward_and_step` against Burn's separate step: over 20 steps of a small MLP, for SGD
//! (momentum, weight decay), Adam and AdamW, each with and without gradient clipping, and with
//! two parameter groups at their own learning rates, under SaveAll, Balanced, a checkpoint
//! region and a budget, the parameters after every step are bit-identical, and so are the
//! optimizers' states (they step alike afterwards).

mod support;

use support::bits;

use burn::module::{Module, ParamGroup};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{
    AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer, SgdConfig, decay::WeightDecayConfig,
    momentum::MomentumConfig,
};
use burn::tensor::{Device, Tensor, TensorData};
use remat::Policy;

const STEPS: usize = 20;
const LR: f64 = 0.02;

#[derive(Module, Debug)]
struct Mlp {
    first: Linear,
    middle: Linear,
    last: Linear,
    relu: Relu,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        device.seed(11);
        Self {
            first: LinearConfig::new(8, 32).init(device),
            middle: LinearConfig::new(32, 32).init(device),
            last: LinearConfig::new(32, 4).init(device),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<2>, region: bool) -> Tensor<2> {
        let h = self.relu.forward(self.first.forward(x));
        let block = || self.relu.forward(self.middle.forward(h).tanh() * 2.0);
        let h = if region {
            remat::checkpoint(block)
        } else {
            block()
        };
        self.last.forward(h)
    }
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Run {
    SaveAll,
    Balanced,
    Region,
    Budget,
}

/// Makes a fresh optimizer of one configuration.
type Make = Box<dyn Fn() -> ModuleOptimizer>;

fn optimizers(model: &Mlp) -> Vec<(&'static str, Make)> {
    let last = model.last.clone();
    vec![
        (
            "sgd",
            Box::new(|| {
                SgdConfig::new()
                    .with_momentum(Some(MomentumConfig::new().with_nesterov(true)))
                    .with_weight_decay(Some(WeightDecayConfig::new(1e-3)))
                    .init()
            }),
        ),
        (
            "sgd, clipped by norm",
            Box::new(|| {
                SgdConfig::new()
                    .with_gradient_clipping(Some(GradientClippingConfig::Norm(0.05)))
                    .init()
            }),
        ),
        ("adam", Box::new(|| AdamConfig::new().init())),
        (
            "adam, clipped by value",
            Box::new(|| {
                AdamConfig::new()
                    .with_grad_clipping(Some(GradientClippingConfig::Value(0.01)))
                    .init()
            }),
        ),
        (
            "adamw",
            Box::new(|| AdamWConfig::new().with_weight_decay(0.05).init()),
        ),
        (
            "adamw, clipped by norm, the last layer in a group of its own",
            Box::new(move || {
                AdamWConfig::new()
                    .with_grad_clipping(Some(GradientClippingConfig::Norm(0.1)))
                    .init()
                    .with_group(
                        ParamGroup::ids_from_module(last.clone()),
                        SgdConfig::new().build(),
                        None,
                    )
            }),
        ),
    ]
}

/// The loss of one step.
fn loss(model: &Mlp, x: &Tensor<2>, y: &Tensor<2>, region: bool) -> Tensor<1> {
    let diff = model.forward(x.clone(), region) - y.clone();
    (diff.clone() * diff).mean()
}

#[test]
fn stepping_in_backward_trains_as_the_separate_step_does() {
    let device = Device::flex().autodiff();
    let x = Tensor::<2>::from_data(TensorData::new(values(64 * 8, 1), [64, 8]), &device);
    let y = Tensor::<2>::from_data(TensorData::new(values(64 * 4, 2), [64, 4]), &device);
    let template = Mlp::new(&device);
    // Burn initializes parameters lazily, at their first read: read them once, so that both
    // copies share them.
    let start = bits(&template);
    assert!(!start.is_empty());
    // A budget of half of what SaveAll keeps after the forward pass, or the smallest the
    // planner names for this step where that is more.
    remat::reset_stats();
    let probe = loss(&template, &x, &y, false);
    let kept = remat::stats().live_bytes;
    drop(probe);
    let probe = remat::with_policy(Policy::Budget(u64::MAX), || loss(&template, &x, &y, false));
    probe.backward();
    let smallest = match remat::check_budget(0) {
        Err(remat::BudgetError::TooSmall {
            min_budget_bytes, ..
        }) => min_budget_bytes,
        other => panic!("check_budget(0) answered {other:?}"),
    };
    let budget = (kept / 2).max(smallest);
    assert!(
        budget < kept,
        "the budget {budget} keeps less than SaveAll's {kept} bytes"
    );
    for (name, make) in optimizers(&template) {
        for run in [Run::SaveAll, Run::Balanced, Run::Region, Run::Budget] {
            let policy = match run {
                Run::SaveAll | Run::Region => Policy::SaveAll,
                Run::Balanced => Policy::Balanced,
                Run::Budget => Policy::Budget(budget),
            };
            let region = matches!(run, Run::Region);
            let (mut separate, mut inside) = (template.clone(), template.clone());
            let (mut optim_a, mut optim_b) = (make(), make());
            assert!(
                bits(&separate) == bits(&inside),
                "the two models start alike"
            );
            let mut replays = 0;
            for step in 0..STEPS {
                // Learning rate schedule: the rate changes every step.
                let lr = LR / (1.0 + step as f64);
                let l = remat::with_policy(policy.clone(), || loss(&separate, &x, &y, region));
                let grads = GradientsParams::from_grads(l.backward(), &separate);
                separate = optim_a.step(lr, separate, grads);
                remat::reset_stats();
                let l = remat::with_policy(policy.clone(), || loss(&inside, &x, &y, region));
                inside = remat::with_policy(policy.clone(), || {
                    remat_optim::backward_and_step(&l, inside, &mut optim_b, lr)
                });
                replays += remat::stats().replays;
                assert!(
                    bits(&separate) == bits(&inside),
                    "{name}, {run:?}, step {step}: the parameters differ from the separate step's"
                );
            }
            // The region and the budget replay; SaveAll does not.
            match run {
                Run::SaveAll => assert_eq!(replays, 0, "{name}: SaveAll replayed"),
                Run::Region | Run::Budget => {
                    assert!(replays > 0, "{name}, {run:?}: no replay in {STEPS} steps")
                }
                Run::Balanced => {}
            }
            // The optimizer states: both optimizers go on with Burn's separate step from the
            // same model, and must step alike (their records list the parameters in hash
            // order, so their bytes are not compared).
            for step in 0..3 {
                let l = loss(&separate, &x, &y, false);
                let grads = GradientsParams::from_grads(l.backward(), &separate);
                separate = optim_a.step(LR, separate, grads);
                let l = loss(&inside, &x, &y, false);
                let grads = GradientsParams::from_grads(l.backward(), &inside);
                inside = optim_b.step(LR, inside, grads);
                assert!(
                    bits(&separate) == bits(&inside),
                    "{name}, {run:?}: the optimizer states differ ({} steps after)",
                    step + 1
                );
            }
            assert!(
                bits(&inside) != start,
                "{name}, {run:?}: nothing was trained"
            );
        }
    }
}
