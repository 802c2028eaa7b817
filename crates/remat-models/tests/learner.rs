//! burn-train's `Learner` on remat: which controls reach the training steps.
//!
//! The program (`programs::learner`, compared with Burn's autodiff in `oracle_parity`) trains
//! through `SupervisedTraining::launch`. burn-train 0.22's single-device strategy runs every
//! step on the thread that calls `launch`; its multi-device strategy runs each step on a
//! worker thread per device. Each run here checks, through `remat::stats()`, whether remat
//! replayed anything (so whether the control reached the steps), that losses, step-1
//! gradients and final parameters are bit-identical to the plain run (single device), and
//! that remat holds nothing once the Learner is done.
//!
//! Every test holds [`programs::exclusive`] for its whole run: `stats()` and `set_policy`
//! are process-wide.

#![cfg(feature = "learner")]

use burn::tensor::Device;
use remat::Policy;
use remat_models::programs::learner::{self, Layer};
use remat_models::programs::{self, TrainReport};

/// A per-layer `remat::checkpoint` region.
fn region(layer: &dyn Fn() -> burn::tensor::Tensor<2>) -> burn::tensor::Tensor<2> {
    remat::checkpoint(layer)
}

/// A `remat::with_policy(RecomputeAll)` scope around each layer, inside the model's forward.
fn scoped(layer: &dyn Fn() -> burn::tensor::Tensor<2>) -> burn::tensor::Tensor<2> {
    remat::with_policy(Policy::RecomputeAll, layer)
}

/// How a run is set up.
struct Run {
    checkpointing: bool,
    layer: Layer,
    workers: usize,
    /// `remat::set_policy` before the run (`remat::reset_policy` afterwards).
    set: Option<Policy>,
    /// A `remat::with_policy` scope around `launch`.
    scoped: Option<Policy>,
}

const PLAIN: Run = Run {
    checkpointing: false,
    layer: learner::plain,
    workers: 1,
    set: None,
    scoped: None,
};

/// Trains as `run` says (the caller holds `exclusive`); returns the report and remat's
/// replay count, and asserts that remat holds no value afterwards.
fn train(run: &Run) -> (TrainReport, u64) {
    let device = if run.checkpointing {
        Device::flex().autodiff().gradient_checkpointing()
    } else {
        Device::flex().autodiff()
    };
    if let Some(policy) = &run.set {
        remat::set_policy(policy.clone());
    }
    remat::reset_stats();
    let before = remat::stats().live_bytes;
    let go = || learner::train(&device, run.layer, run.workers);
    let report = match &run.scoped {
        Some(policy) => remat::with_policy(policy.clone(), go),
        None => go(),
    };
    let stats = remat::stats();
    remat::reset_policy();
    assert_eq!(
        stats.live_bytes, before,
        "remat still holds values after the Learner finished:\n{stats}"
    );
    assert!(
        report.losses.iter().all(|l| l.is_finite()),
        "non-finite losses: {:?}",
        report.losses
    );
    (report, stats.replays)
}

fn assert_bits(what: &str, got: &TrainReport, want: &TrainReport) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got.losses), bits(&want.losses), "{what}: losses");
    for (kind, got, want) in [
        ("step-1 gradient", &got.grads, &want.grads),
        ("final parameter", &got.params, &want.params),
    ] {
        assert_eq!(got.len(), want.len(), "{what}: {kind} count");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.name, w.name, "{what}: {kind} names");
            assert_eq!(
                bits(&g.values),
                bits(&w.values),
                "{what}: {kind} {}",
                g.name
            );
        }
    }
}

/// Single device: the steps run on the calling thread, so every control reaches them:
/// regions and scopes in the model, a `with_policy` scope around `launch`, and `set_policy`
/// on a gradient-checkpointing device. Each changes what is kept (replays), never the
/// numbers.
#[test]
fn every_control_reaches_single_device_steps() {
    let _exclusive = programs::exclusive();
    let (reference, replays) = train(&PLAIN);
    assert_eq!(replays, 0, "a plain device keeps everything");
    assert_eq!(reference.losses.len(), programs::STEPS);

    let runs = [
        (
            "regions",
            Run {
                layer: region,
                ..PLAIN
            },
            true,
        ),
        (
            "with_policy(RecomputeAll) inside the forward",
            Run {
                layer: scoped,
                ..PLAIN
            },
            true,
        ),
        (
            "with_policy(RecomputeAll) around launch",
            Run {
                scoped: Some(Policy::RecomputeAll),
                ..PLAIN
            },
            true,
        ),
        (
            "set_policy(SaveAll) on a checkpointing device",
            Run {
                checkpointing: true,
                set: Some(Policy::SaveAll),
                ..PLAIN
            },
            false,
        ),
        (
            "set_policy(RecomputeAll) on a checkpointing device",
            Run {
                checkpointing: true,
                set: Some(Policy::RecomputeAll),
                ..PLAIN
            },
            true,
        ),
        (
            "regions on a checkpointing device under set_policy(SaveAll)",
            Run {
                checkpointing: true,
                layer: region,
                set: Some(Policy::SaveAll),
                ..PLAIN
            },
            true,
        ),
    ];
    for (what, run, replays_expected) in runs {
        let (report, replays) = train(&run);
        assert_eq!(replays > 0, replays_expected, "{what}: {replays} replays");
        assert_bits(what, &report, &reference);
    }
}

/// Replays per training step (every step replays the same ops).
fn per_step(what: &str, replays: u64, report: &TrainReport) -> u64 {
    let steps = report.losses.len() as u64;
    assert!(steps > 0, "{what}: no steps");
    assert_eq!(
        replays % steps,
        0,
        "{what}: {replays} replays over {steps} steps"
    );
    replays / steps
}

/// Multi-device (two worker threads on the one Flex device): what the model's forward opens
/// (regions, `with_policy` scopes) and `set_policy` reach the workers, with as many replays
/// per step as on the calling thread; a `with_policy` scope around `launch` does not (scopes
/// are per thread, and the workers are burn-train's own threads). The workers' gradients
/// are summed in arrival order, so only what is kept is compared here.
#[test]
fn regions_scopes_in_the_model_and_set_policy_reach_worker_threads() {
    let _exclusive = programs::exclusive();
    let cases = [
        ("plain", PLAIN, false),
        (
            "regions",
            Run {
                layer: region,
                ..PLAIN
            },
            true,
        ),
        (
            "with_policy(RecomputeAll) inside the forward",
            Run {
                layer: scoped,
                ..PLAIN
            },
            true,
        ),
        (
            "set_policy(RecomputeAll) on a checkpointing device",
            Run {
                checkpointing: true,
                set: Some(Policy::RecomputeAll),
                ..PLAIN
            },
            true,
        ),
        (
            "set_policy(SaveAll) on a checkpointing device",
            Run {
                checkpointing: true,
                set: Some(Policy::SaveAll),
                ..PLAIN
            },
            true,
        ),
        // Today's behaviour, by design: a scope is thread-local and does not follow the
        // Learner onto its worker threads (the README points to regions or set_policy).
        (
            "with_policy(RecomputeAll) around launch",
            Run {
                scoped: Some(Policy::RecomputeAll),
                ..PLAIN
            },
            false,
        ),
    ];
    for (what, single, reaches_workers) in cases {
        let (report, replays) = train(&single);
        let on_caller = per_step(what, replays, &report);
        let (report, replays) = train(&Run {
            workers: 2,
            ..single
        });
        let on_workers = per_step(&format!("two workers, {what}"), replays, &report);
        let expected = if reaches_workers { on_caller } else { 0 };
        assert_eq!(
            on_workers, expected,
            "two workers, {what}: {on_workers} replays per step, {on_caller} on the calling thread"
        );
    }
}
