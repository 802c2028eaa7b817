//! Every policy, scope and region gives gradients bit-identical to `SaveAll` on real Burn
//! models (`burn::nn`): an MLP of Linear + GELU layers and a pre-norm TransformerEncoder with
//! dropout, and remat is drained after each step (`stats().live_bytes` back to its value
//! before the step).
//!
//! Every run seeds the device identically before building the model, so the weights and the
//! dropout masks are the same in every run (the Flex RNG is process-wide: runs hold
//! [`programs::exclusive`], which also serialises `remat::set_policy`).

use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderLayer};
use burn::nn::{Gelu, Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use remat::{Cost, Policy, Selector};
use remat_models::programs::{self, Named, collect_grads, collect_params, synthetic};

/// A stack of layers that can be run one layer at a time.
trait Stack: Module + Sized {
    fn new(device: &Device) -> Self;
    fn len(&self) -> usize;
    fn input(device: &Device) -> Tensor<3>;
    fn target(device: &Device) -> Tensor<3>;
    /// Layer `i`.
    fn layer(&self, i: usize, x: Tensor<3>) -> Tensor<3>;
    /// After the last layer (outside any region).
    fn head(&self, x: Tensor<3>) -> Tensor<3>;
}

/// A multi-layer perceptron: `LAYERS` x (Linear + GELU), then a Linear read-out.
#[derive(Module, Debug)]
struct Mlp {
    layers: Vec<Linear>,
    gelu: Gelu,
    out: Linear,
}

const MLP_BATCH: usize = 16;
const MLP_WIDTH: usize = 32;
const MLP_LAYERS: usize = 4;

impl Stack for Mlp {
    fn new(device: &Device) -> Self {
        Self {
            layers: (0..MLP_LAYERS)
                .map(|_| LinearConfig::new(MLP_WIDTH, MLP_WIDTH).init(device))
                .collect(),
            gelu: Gelu::new(),
            out: LinearConfig::new(MLP_WIDTH, 4).init(device),
        }
    }

    fn len(&self) -> usize {
        self.layers.len()
    }

    fn input(device: &Device) -> Tensor<3> {
        Tensor::from_data(
            TensorData::new(
                synthetic(MLP_BATCH * MLP_WIDTH, 21),
                [1, MLP_BATCH, MLP_WIDTH],
            ),
            device,
        )
    }

    fn target(device: &Device) -> Tensor<3> {
        Tensor::from_data(
            TensorData::new(synthetic(MLP_BATCH * 4, 22), [1, MLP_BATCH, 4]),
            device,
        )
    }

    fn layer(&self, i: usize, x: Tensor<3>) -> Tensor<3> {
        self.gelu.forward(self.layers[i].forward(x))
    }

    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        self.out.forward(x)
    }
}

/// A pre-norm transformer encoder (dropout 0.1), its layers run one by one, and a read-out.
#[derive(Module, Debug)]
struct Encoder {
    layers: Vec<TransformerEncoderLayer>,
    out: Linear,
}

const TF_BATCH: usize = 3;
const TF_SEQ: usize = 5;
const TF_D_MODEL: usize = 16;
const TF_D_FF: usize = 32;
const TF_HEADS: usize = 2;
const TF_LAYERS: usize = 4;

impl Stack for Encoder {
    fn new(device: &Device) -> Self {
        let encoder = TransformerEncoderConfig::new(TF_D_MODEL, TF_D_FF, TF_HEADS, TF_LAYERS)
            .with_norm_first(true)
            .with_dropout(0.1)
            .init(device);
        Self {
            layers: encoder.layers,
            out: LinearConfig::new(TF_D_MODEL, 1).init(device),
        }
    }

    fn len(&self) -> usize {
        self.layers.len()
    }

    fn input(device: &Device) -> Tensor<3> {
        Tensor::from_data(
            TensorData::new(
                synthetic(TF_BATCH * TF_SEQ * TF_D_MODEL, 23),
                [TF_BATCH, TF_SEQ, TF_D_MODEL],
            ),
            device,
        )
    }

    fn target(device: &Device) -> Tensor<3> {
        Tensor::from_data(
            TensorData::new(synthetic(TF_BATCH * TF_SEQ, 24), [TF_BATCH, TF_SEQ, 1]),
            device,
        )
    }

    fn layer(&self, i: usize, x: Tensor<3>) -> Tensor<3> {
        self.layers[i].forward(x, None, None)
    }

    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        self.out.forward(x)
    }
}

/// How the layers are run.
#[derive(Clone, Copy, Debug)]
enum Regions {
    /// Plainly.
    None,
    /// One `checkpoint` region per layer.
    PerLayer,
    /// One region per pair of layers, one region per layer inside it.
    Nested,
    /// One region around the whole stack, one region per layer inside it.
    Whole,
}

fn run_layers<M: Stack>(model: &M, x: Tensor<3>, regions: Regions) -> Tensor<3> {
    let per_layer = |range: std::ops::Range<usize>, mut x: Tensor<3>| {
        for i in range {
            x = remat::checkpoint(|| model.layer(i, x.clone()));
        }
        x
    };
    match regions {
        Regions::None => (0..model.len()).fold(x, |x, i| model.layer(i, x)),
        Regions::PerLayer => per_layer(0..model.len(), x),
        Regions::Nested => {
            let mut x = x;
            for start in (0..model.len()).step_by(2) {
                let end = (start + 2).min(model.len());
                x = remat::checkpoint(|| per_layer(start..end, x.clone()));
            }
            x
        }
        Regions::Whole => remat::checkpoint(|| per_layer(0..model.len(), x.clone())),
    }
}

/// One configuration of a step.
#[derive(Clone, Debug)]
struct Setup {
    /// `device.autodiff().gradient_checkpointing()` rather than `device.autodiff()`.
    checkpointing: bool,
    /// `remat::set_policy` for the step (`remat::reset_policy` afterwards).
    set: Option<Policy>,
    /// A `remat::with_policy` scope around the forward pass.
    scoped: Option<Policy>,
    regions: Regions,
    /// Whether backward must replay something (the configuration drops values).
    replays: bool,
}

const SEED: u64 = 42;

/// Gradients of step 1 under `setup`; asserts remat is drained after the step.
fn step<M: Stack>(setup: &Setup) -> Vec<Named> {
    let _exclusive = programs::exclusive();
    let device = if setup.checkpointing {
        Device::flex().autodiff().gradient_checkpointing()
    } else {
        Device::flex().autodiff()
    };
    device.seed(SEED);
    let model = M::new(&device);
    let x = M::input(&device);
    let y = M::target(&device);
    if let Some(policy) = &setup.set {
        remat::set_policy(policy.clone());
    }
    remat::reset_stats();
    let before = remat::stats().live_bytes;
    let forward = || {
        let out = model.head(run_layers(&model, x.clone(), setup.regions));
        MseLoss::new().forward(out, y.clone(), Reduction::Mean)
    };
    let loss = match &setup.scoped {
        Some(policy) => remat::with_policy(policy.clone(), forward),
        None => forward(),
    };
    assert!(
        remat::stats().live_bytes > before,
        "{setup:?}: the forward pass kept nothing"
    );
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let named = collect_grads(&model, &grads);
    assert_eq!(
        named.len(),
        collect_params(&model).len(),
        "{setup:?}: parameters without a gradient"
    );
    drop(grads);
    let stats = remat::stats();
    remat::reset_policy();
    assert_eq!(
        stats.live_bytes,
        before,
        "{setup:?}: remat not drained after the step:\n{stats}\n{}",
        remat::saved_values()
    );
    assert_eq!(
        stats.replays > 0,
        setup.replays,
        "{setup:?}: unexpected replays:\n{stats}"
    );
    named
}

fn policies() -> Vec<Policy> {
    vec![
        Policy::SaveAll,
        Policy::Balanced,
        Policy::RecomputeAll,
        Policy::Selective(Selector::keep_costs(&[Cost::Compute])),
        Policy::Budget(u64::MAX),
    ]
}

/// Runs `f` under `Policy::Budget(budget)`, raised to the smallest budget that fits the
/// last step when it is below (`remat::check_budget`). A forward pass may hold values of
/// side computations that the last step's graph does not show: when `f` stops as too small
/// (`remat::try_with_budget`'s `Err`), it runs again under the least budget the error names.
fn under_budget<R>(budget: u64, f: impl Fn() -> R) -> R {
    let mut budget = budget;
    for _ in 0..16 {
        match remat::check_budget(budget) {
            Ok(()) | Err(remat::BudgetError::NoStep) => {}
            Err(remat::BudgetError::TooSmall {
                min_budget_bytes, ..
            }) => budget = min_budget_bytes,
        }
        match remat::try_with_budget(budget, &f) {
            Ok(result) => return result,
            Err(remat::BudgetError::TooSmall {
                min_budget_bytes, ..
            }) => budget = budget.max(min_budget_bytes),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("remat's smallest budgets did not work, up to {budget} bytes");
}

fn setups() -> Vec<Setup> {
    let plain = Setup {
        checkpointing: false,
        set: None,
        scoped: None,
        regions: Regions::None,
        replays: false,
    };
    let mut all = Vec::new();
    for policy in policies() {
        let drops = !matches!(policy, Policy::SaveAll | Policy::Budget(_));
        // A scope, under either strategy.
        for checkpointing in [false, true] {
            all.push(Setup {
                checkpointing,
                scoped: Some(policy.clone()),
                replays: drops,
                ..plain.clone()
            });
        }
        // The process-wide policy, under either strategy.
        for checkpointing in [false, true] {
            all.push(Setup {
                checkpointing,
                set: Some(policy.clone()),
                replays: drops,
                ..plain.clone()
            });
        }
        // Regions inside a scope: the region's rule wins.
        all.push(Setup {
            scoped: Some(policy.clone()),
            regions: Regions::PerLayer,
            replays: true,
            ..plain.clone()
        });
        all.push(Setup {
            checkpointing: true,
            set: Some(policy.clone()),
            regions: Regions::Nested,
            replays: true,
            ..plain.clone()
        });
    }
    for regions in [Regions::PerLayer, Regions::Nested, Regions::Whole] {
        for checkpointing in [false, true] {
            all.push(Setup {
                checkpointing,
                regions,
                replays: true,
                ..plain.clone()
            });
        }
    }
    all
}

fn assert_bit_identical(what: &str, want: &[Named], got: &[Named]) {
    assert_eq!(
        want.iter().map(|g| &g.name).collect::<Vec<_>>(),
        got.iter().map(|g| &g.name).collect::<Vec<_>>(),
        "{what}: not the same parameters have gradients"
    );
    for (w, g) in want.iter().zip(got) {
        assert_eq!(w.values.len(), g.values.len(), "{what}: {}", w.name);
        let differ = w
            .values
            .iter()
            .zip(&g.values)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        if let Some(i) = differ {
            panic!(
                "{what}: gradient of {} differs at {i}: {} vs {} (SaveAll first)",
                w.name, w.values[i], g.values[i]
            );
        }
    }
}

fn check<M: Stack>(name: &str) {
    let reference = step::<M>(&Setup {
        checkpointing: false,
        set: None,
        scoped: Some(Policy::SaveAll),
        regions: Regions::None,
        replays: false,
    });
    assert!(
        reference.iter().any(|g| g.values.iter().any(|v| *v != 0.0)),
        "{name}: all gradients are zero"
    );
    for setup in setups() {
        let got = step::<M>(&setup);
        assert_bit_identical(&format!("{name} {setup:?}"), &reference, &got);
    }
}

/// The same seed gives the same dropout masks: two SaveAll runs agree, and a different seed
/// changes the gradients (so the comparison above does see the masks).
#[test]
fn dropout_masks_follow_the_seed() {
    let setup = Setup {
        checkpointing: false,
        set: None,
        scoped: None,
        regions: Regions::None,
        replays: false,
    };
    let a = step::<Encoder>(&setup);
    let b = step::<Encoder>(&setup);
    assert_bit_identical("encoder, same seed", &a, &b);
    let c = {
        let _exclusive = programs::exclusive();
        let device = Device::flex().autodiff();
        device.seed(SEED);
        let model = Encoder::new(&device);
        device.seed(SEED + 1);
        let out = model.head(run_layers(&model, Encoder::input(&device), Regions::None));
        let loss = MseLoss::new().forward(out, Encoder::target(&device), Reduction::Mean);
        collect_grads(
            &model,
            &GradientsParams::from_grads(loss.backward(), &model),
        )
    };
    assert!(
        a.iter().zip(&c).any(|(x, y)| x.values != y.values),
        "other dropout masks did not change the gradients"
    );
}

#[test]
fn mlp_policies_and_regions_are_bit_identical() {
    check::<Mlp>("mlp");
}

#[test]
fn transformer_policies_and_regions_are_bit_identical() {
    check::<Encoder>("transformer");
}

/// Every model program (the ones compared with Burn in `oracle_parity`: MLP, CNN with
/// BatchNorm, transformer encoder and decoder with dropout, LSTM, GRU + BiLSTM, 1-D and 2-D
/// convolution zoos, the loss functions) trains 20 steps to bit-identical losses, gradients
/// and parameters under every policy and on a gradient-checkpointing device (remat's own check that every pass drains runs after
/// each backward in this debug build; `stats()` is process-wide, so it is not read here,
/// concurrently with the other tests).
#[test]
fn every_program_is_bit_identical_under_every_policy() {
    let device = Device::flex().autodiff();
    for (name, program) in programs::all() {
        let reference = remat::with_policy(Policy::SaveAll, || program(&device));
        // After the unbounded budget (the last policy), the smallest budget and a middle one
        // for this program, from the trade-off report of its last step.
        let mut runs: Vec<(String, Box<dyn Fn() -> _>)> = Vec::new();
        for policy in policies().into_iter().skip(1) {
            let what = format!("{name} under {policy:?}");
            let device = device.clone();
            runs.push((
                what,
                Box::new(move || remat::with_policy(policy.clone(), || program(&device))),
            ));
        }
        for (label, pick) in [("smallest", 0u64), ("middle", 1)] {
            let device = device.clone();
            runs.push((
                format!("{name} under the {label} budget"),
                Box::new(move || {
                    let report = remat::tradeoff().expect("the unbounded budget ran a step");
                    let min = report.min_budget_bytes;
                    let budget = if pick == 0 {
                        min
                    } else {
                        min.midpoint(report.keep_all_bytes.max(min))
                    };
                    under_budget(budget, || program(&device))
                }),
            ));
        }
        for (what, run) in runs {
            let report = run();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&report.losses),
                bits(&reference.losses),
                "{what}: losses"
            );
            assert_bit_identical(
                &format!("{what}: step-1 gradients"),
                &reference.grads,
                &report.grads,
            );
            assert_bit_identical(
                &format!("{what}: final parameters"),
                &reference.params,
                &report.params,
            );
        }
        // Burn's own switch: a gradient-checkpointing device (BalancedCheckpointing, which
        // follows the process-wide policy, `Balanced` unless set).
        let what = format!("{name} on a gradient-checkpointing device");
        let report = program(&Device::flex().autodiff().gradient_checkpointing());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&report.losses),
            bits(&reference.losses),
            "{what}: losses"
        );
        assert_bit_identical(
            &format!("{what}: step-1 gradients"),
            &reference.grads,
            &report.grads,
        );
        assert_bit_identical(
            &format!("{what}: final parameters"),
            &reference.params,
            &report.params,
        );
    }
}
