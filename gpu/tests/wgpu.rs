//! remat on Burn's wgpu backend (CubeCL, wrapped in burn-fusion unless built with
//! `--no-default-features`), through the `[patch.crates-io]` a user adds. One test binary:
//! llvmpipe (Mesa's CPU Vulkan driver, what CI runs this on) is slow, and every test process
//! compiles its kernels anew.
//!
//! - **Parity:** the model programs of `crates/remat-models` train on a wgpu device and match
//!   Burn's own autodiff on the same device within 1e-4 (the oracle workspace writes the
//!   references: `cargo run --manifest-path oracle/Cargo.toml --bin remat-gpu-oracle`, as
//!   `scripts/test.sh` does first).
//! - **Controls:** under `Balanced`, `RecomputeAll`, a region, and `Policy::Budget` at 50% and
//!   25% of SaveAll's held peak, a program's losses, step-1 gradients and final parameters
//!   equal SaveAll's bit for bit without fusion; with fusion within [`FUSED_RTOL`] (NOTE
//!   [fused-replays] below). A budget holds at most its bytes, and plans the same under
//!   either Burn strategy.
//! - **Device memory:** what remat counts as held is what the device holds for it
//!   (`Device::memory_pool_usage`, CubeCL's pools), within 5%; a budget lowers the device's
//!   bytes in use as it lowers remat's.
//!
//! NOTE [fused-replays]: a replay runs the op's own inner call again, through the same
//! backend (here burn-fusion over CubeCL), so it is fused with whatever the fusion stream
//! holds when it runs: in the forward pass an element-wise op may be fused with its
//! neighbours into one kernel, its replay in backward with other neighbours. A fused kernel
//! keeps intermediates in registers (f32, as in memory), but the shader compiler may contract
//! a multiply and an add into one FMA in one kernel and not in another, so a rebuilt value may
//! differ from the forward pass's in the last bits. Without fusion each op is its own kernel
//! and a replay is bit-identical.

// Comparisons are written `!(x <= tol)` on purpose: a NaN must count as a failure.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use std::sync::{Mutex, MutexGuard, OnceLock};

use burn::module::Module;
use burn::nn::{Gelu, Linear, LinearConfig};
use burn::tensor::{Device, Tensor, TensorData};
use remat::{KeepReason, Policy};
use remat_gpu::programs::{self, Named, TrainReport, synthetic};

/// Parity with Burn's autodiff: relative tolerance (as `crates/remat-models`' oracle test).
const RTOL: f32 = 1e-4;
/// Gradient floor, as a fraction of the RMS of all of the model's step-1 gradients (some
/// gradients are mathematically zero, e.g. the attention key bias, and compare noise).
const GRAD_FLOOR: f32 = 1e-2;

/// How far a control's results may be from SaveAll's (relative, with the same floor as
/// parity): 0 without fusion (bit for bit); with fusion, NOTE [fused-replays].
#[cfg(feature = "fusion")]
const FUSED_RTOL: f32 = 1e-5;
#[cfg(not(feature = "fusion"))]
const FUSED_RTOL: f32 = 0.0;

/// One test at a time: `remat::stats` and the device's pools are process-wide.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The wgpu device with autodiff (Burn's `NoCheckpointing` strategy).
fn wgpu() -> Device {
    remat_gpu::device().autodiff()
}

fn rms(values: &[f32]) -> f32 {
    (values.iter().map(|v| v * v).sum::<f32>() / values.len().max(1) as f32).sqrt()
}

/// Burn's run of `name` on the device, written by the GPU oracle; `None` (the parity check is
/// skipped, saying so) when it has not been run and `REMAT_REQUIRE_ORACLE` is unset. The test
/// command sets it and runs the oracle first, so there a missing file fails.
fn reference(name: &str) -> Option<TrainReport> {
    let path = remat_gpu::reference::dir().join(format!("{name}.txt"));
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            let how = "run `cargo run --manifest-path oracle/Cargo.toml --bin remat-gpu-oracle` \
                       (or ./scripts/test.sh) first";
            if std::env::var_os("REMAT_REQUIRE_ORACLE").is_some() {
                panic!("{}: no GPU oracle reference ({e}); {how}", path.display());
            }
            eprintln!(
                "{name}: parity with Burn SKIPPED: no GPU oracle reference at {} ({e}); {how}",
                path.display()
            );
            return None;
        }
    };
    Some(
        programs::from_text(&text)
            .unwrap_or_else(|e| panic!("{}: malformed reference: {e}", path.display())),
    )
}

/// Whether this machine has a wgpu device. Without one, a test passes saying it was SKIPPED
/// when `REMAT_REQUIRE_GPU` is unset (a plain `cargo test --workspace` on a machine without a
/// Vulkan driver), and fails when it is set (the test command sets it, after installing
/// Mesa's llvmpipe where no device is).
fn has_device(test: &str) -> bool {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    let probe = PROBE.get_or_init(|| {
        std::panic::catch_unwind(|| {
            Tensor::<1>::zeros([1], &remat_gpu::device()).into_data();
        })
        .map_err(|payload| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into())
        })
    });
    let Err(why) = probe else { return true };
    let how = "install a Vulkan driver (Debian/Ubuntu, with no GPU: sudo apt-get install \
               mesa-vulkan-drivers vulkan-tools), or run ./scripts/test.sh, which does";
    if std::env::var_os("REMAT_REQUIRE_GPU").is_some() {
        panic!("{test}: no wgpu device ({why}); {how}");
    }
    eprintln!("{test}: SKIPPED, no wgpu device ({why}); {how}");
    false
}

/// The worst difference between two lists of named vectors, relative to
/// `max(|b|, rms(b), floor)`: `(relative difference, where)`; `(0, "")` when bit-identical.
/// A NaN on either side is infinitely far.
fn worst(ours: &[Named], theirs: &[Named], floor: f32) -> (f32, String) {
    let names = |v: &[Named]| v.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(ours), names(theirs), "parameter names differ");
    let mut worst = (0.0f32, String::new());
    for (a, b) in ours.iter().zip(theirs) {
        assert_eq!(a.values.len(), b.values.len(), "{}: length", a.name);
        let scale = rms(&b.values).max(floor).max(f32::MIN_POSITIVE);
        for (i, (x, y)) in a.values.iter().zip(&b.values).enumerate() {
            if x.to_bits() == y.to_bits() {
                continue;
            }
            let diff = (x - y).abs() / y.abs().max(scale);
            let diff = if diff.is_nan() { f32::INFINITY } else { diff };
            if diff >= worst.0 {
                worst = (diff, format!("{}[{i}]: {x} vs {y}", a.name));
            }
        }
    }
    worst
}

/// The worst difference of losses, step-1 gradients and final parameters.
fn difference(ours: &TrainReport, theirs: &TrainReport) -> (f32, String) {
    assert_eq!(ours.losses.len(), theirs.losses.len(), "steps");
    let loss = |r: &TrainReport| {
        vec![Named {
            name: "loss".into(),
            values: r.losses.clone(),
        }]
    };
    let all: Vec<f32> = theirs
        .grads
        .iter()
        .flat_map(|g| g.values.iter().copied())
        .collect();
    let floor = GRAD_FLOOR * rms(&all);
    [
        worst(&loss(ours), &loss(theirs), 0.0),
        worst(&ours.grads, &theirs.grads, floor),
        worst(&ours.params, &theirs.params, 0.0),
    ]
    .into_iter()
    .fold((0.0, String::new()), |a, b| if b.0 > a.0 { b } else { a })
}

/// remat's run of `name` matches Burn's autodiff on the same device within [`RTOL`].
fn assert_matches_burn(name: &str, ours: &TrainReport) {
    let Some(theirs) = reference(name) else {
        return;
    };
    let (diff, at) = difference(ours, &theirs);
    eprintln!(
        "{name}: remat vs Burn's autodiff on wgpu: worst relative difference {diff:.2e} {at}"
    );
    assert!(
        diff <= RTOL,
        "{name}: remat differs from Burn's autodiff on wgpu by {diff:.2e} (> {RTOL:.0e}): {at}"
    );
}

/// A control's run equals SaveAll's: bit for bit without fusion, within [`FUSED_RTOL`] with.
fn assert_matches_save_all(what: &str, ours: &TrainReport, save_all: &TrainReport) {
    let (diff, at) = difference(ours, save_all);
    eprintln!("{what}: vs SaveAll: worst relative difference {diff:.2e} {at}");
    assert!(
        diff <= FUSED_RTOL,
        "{what}: differs from SaveAll by {diff:.2e} (> {FUSED_RTOL:.0e}): {at}"
    );
}

/// Runs `f` under `Policy::Budget(budget)`; when it stops as too small
/// (`remat::try_with_budget`'s `Err`), under the least budget the error names, until one works.
/// (No check before the first try: the last step run under a budget may be another
/// program's.) Returns the budget used.
fn under_budget<R>(budget: u64, f: impl Fn() -> R) -> (R, u64) {
    let mut budget = budget;
    for _ in 0..16 {
        match remat::try_with_budget(budget, &f) {
            Ok(result) => return (result, budget),
            Err(remat::BudgetError::TooSmall {
                min_budget_bytes, ..
            }) => budget = budget.max(min_budget_bytes),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("remat's smallest budgets did not work, up to {budget} bytes");
}

/// Runs a program under SaveAll (compared with Burn), then under every other control
/// (compared with SaveAll); budgets hold at most their bytes, and a budget replays as much
/// on a `gradient_checkpointing()` device as on a plain `autodiff()` one.
fn every_control(name: &str, program: programs::Program) {
    if !has_device(name) {
        return;
    }
    let _serial = serial();
    let device = wgpu();
    remat::reset_stats();
    let save_all = remat::with_policy(Policy::SaveAll, || program(&device));
    let peak = remat::stats().peak_bytes;
    assert!(peak > 0, "{name}: SaveAll held nothing");
    assert_eq!(remat::stats().replays, 0, "{name}: SaveAll replayed");
    assert_matches_burn(name, &save_all);

    let scoped = |policy: Policy| remat::with_policy(policy, || program(&device));
    for (what, report) in [
        ("Balanced", scoped(Policy::Balanced)),
        ("RecomputeAll", scoped(Policy::RecomputeAll)),
        ("a region", remat::checkpoint(|| program(&device))),
    ] {
        assert_matches_save_all(&format!("{name} under {what}"), &report, &save_all);
    }

    // Budgets at 50% and 25% of SaveAll's held peak (or the least remat guarantees).
    let mut replays = Vec::new();
    for (percent, device) in [
        (25, wgpu()),
        (50, wgpu()),
        (50, wgpu()),
        (50, wgpu().gradient_checkpointing()),
    ] {
        remat::reset_stats();
        let (report, budget) = under_budget(peak * percent / 100, || program(&device));
        let stats = remat::stats();
        let what = format!(
            "{name} under Budget({budget}) ({percent}% of {peak}; strategy {:?})",
            device.gradient_checkpointing_strategy()
        );
        eprintln!(
            "{what}: held peak {} bytes, {} replays",
            stats.peak_bytes, stats.replays
        );
        assert!(
            stats.peak_bytes <= budget,
            "{what}: held {} bytes",
            stats.peak_bytes
        );
        assert_matches_save_all(&what, &report, &save_all);
        replays.push(stats.replays);
    }
    // The second 50% run plans with the op times the first one measured (NOTE [op-times]),
    // as does the run on a `gradient_checkpointing()` device: the strategy picks only the
    // default policy, never what a budget keeps.
    assert_eq!(
        replays[2], replays[3],
        "{name}: Budget at 50% replays differently under the two Burn strategies: {replays:?}"
    );
    assert!(
        replays[0] >= replays[2],
        "{name}: 25% replays less than 50%: {replays:?}"
    );
}

#[test]
fn mlp_matches_burn_and_every_control_matches_save_all() {
    every_control("mlp", programs::mlp::run);
}

#[test]
fn transformer_matches_burn_and_every_control_matches_save_all() {
    every_control("transformer", programs::transformer::run);
}

/// The CNN with BatchNorm, the LSTM and LoRA fine-tuning (gradient accumulation, `valid()`)
/// match Burn's autodiff on wgpu, and under a budget at 50% of SaveAll's held peak match
/// SaveAll.
#[test]
fn cnn_lstm_and_lora_match_burn_and_a_budget_matches_save_all() {
    if !has_device("cnn, lstm, lora") {
        return;
    }
    let _serial = serial();
    let device = wgpu();
    for (name, program) in remat_gpu::PARITY
        .into_iter()
        .filter(|(name, _)| !["mlp", "transformer"].contains(name))
    {
        remat::reset_stats();
        let save_all = remat::with_policy(Policy::SaveAll, || program(&device));
        let peak = remat::stats().peak_bytes;
        assert_matches_burn(name, &save_all);
        remat::reset_stats();
        let (report, budget) = under_budget(peak / 2, || program(&device));
        assert!(
            remat::stats().peak_bytes <= budget,
            "{name}: over its budget"
        );
        assert_matches_save_all(
            &format!("{name} under Budget({budget})"),
            &report,
            &save_all,
        );
    }
}

/// A stack of Linear + GELU layers, wide enough that the values remat keeps dwarf the
/// device's small allocations (kernel metadata, scalars).
#[derive(Module, Debug)]
struct Wide {
    layers: Vec<Linear>,
    gelu: Gelu,
}

const WIDE_BATCH: usize = 256;
const WIDE_WIDTH: usize = 256;
const WIDE_LAYERS: usize = 6;

impl Wide {
    fn new(device: &Device) -> Self {
        Self {
            layers: (0..WIDE_LAYERS)
                .map(|_| LinearConfig::new(WIDE_WIDTH, WIDE_WIDTH).init(device))
                .collect(),
            gelu: Gelu::new(),
        }
    }

    fn loss(&self, x: Tensor<2>) -> Tensor<1> {
        let y = self
            .layers
            .iter()
            .fold(x, |x, layer| self.gelu.forward(layer.forward(x)));
        (y.clone() * y).mean()
    }
}

/// Bytes in use in the device's pools once every queued kernel has run.
fn in_use(device: &Device) -> u64 {
    device.sync().expect("wgpu sync");
    device
        .memory_pool_usage()
        .expect("the wgpu backend reports its memory pools")
        .bytes_in_use
}

/// What one measured step held, on the device and in remat's count.
#[derive(Debug)]
struct Held {
    /// Device bytes in use after the forward pass, above those before it.
    device_after_forward: u64,
    /// What remat kept for backward then (saved and rebuilt values; constants are the
    /// model's input, already on the device before the step).
    remat_after_forward: u64,
    /// remat's held peak over the step.
    remat_peak: u64,
    /// The device's pools after the forward pass (in use, padding, reserved), absolute.
    pools: (u64, u64, u64),
}

fn measure(model: &Wide, x: &Tensor<2>, policy: &Policy) -> Held {
    let device = x.device();
    let step = || {
        let grads = model.loss(x.clone()).backward();
        drop(grads);
    };
    // Warm-up: kernels compiled, op times measured, a budget's plan made.
    for _ in 0..3 {
        remat::with_policy(policy.clone(), step);
    }
    let before = in_use(&device);
    remat::reset_stats();
    remat::with_policy(policy.clone(), || {
        let loss = model.loss(x.clone());
        let device_after_forward = in_use(&device).saturating_sub(before);
        let stats = remat::stats();
        let constants = stats.bytes_by_reason[&KeepReason::Constant];
        let remat_after_forward = stats.live_bytes - constants;
        let pools = device.memory_pool_usage().expect("pools");
        drop(loss.backward());
        Held {
            device_after_forward,
            remat_after_forward,
            remat_peak: remat::stats().peak_bytes,
            pools: (
                pools.bytes_in_use,
                pools.bytes_padding,
                pools.bytes_reserved,
            ),
        }
    })
}

/// The bytes remat counts as held are the device bytes those values occupy (CubeCL's
/// `bytes_in_use`, padding excluded) within 5%, and a budget lowers the device's bytes in
/// use after the forward pass as it lowers remat's held bytes (docs/GPU.md: what the pools
/// reserve on top).
#[test]
fn held_bytes_are_device_bytes_and_a_budget_lowers_them() {
    if !has_device("device memory") {
        return;
    }
    let _serial = serial();
    let device = wgpu();
    device.seed(3);
    let model = Wide::new(&device);
    let x = Tensor::<2>::from_data(
        TensorData::new(
            synthetic(WIDE_BATCH * WIDE_WIDTH, 9),
            [WIDE_BATCH, WIDE_WIDTH],
        ),
        &device,
    );
    let save_all = measure(&model, &x, &Policy::SaveAll);
    let half = measure(&model, &x, &Policy::Budget(save_all.remat_peak / 2));
    let quarter = measure(&model, &x, &Policy::Budget(save_all.remat_peak / 4));
    for (what, held) in [
        ("SaveAll", &save_all),
        ("Budget 50%", &half),
        ("Budget 25%", &quarter),
    ] {
        eprintln!("{what}: {held:?}");
        let (device, remat) = (
            held.device_after_forward as f64,
            held.remat_after_forward as f64,
        );
        assert!(
            (device - remat).abs() <= 0.05 * remat,
            "{what}: the device holds {device} bytes for the step, remat counts {remat}"
        );
        // What the pools reserve from the driver covers what is in use and its padding: the
        // footprint a budget leaves on top (docs/GPU.md, "A budget in device memory").
        let (in_use, padding, reserved) = held.pools;
        assert!(
            reserved >= in_use + padding,
            "{what}: the pools reserve {reserved} bytes for {in_use} in use + {padding} padding"
        );
    }
    assert!(
        quarter.device_after_forward < half.device_after_forward
            && half.device_after_forward < save_all.device_after_forward,
        "the device's bytes in use do not fall with the budget: {save_all:?} {half:?} {quarter:?}"
    );
    assert!(half.remat_peak <= save_all.remat_peak / 2);
    assert!(quarter.remat_peak <= save_all.remat_peak / 4);
}
