//! Model-level parity with Burn's own autodiff.
//!
//! The `oracle/` workspace (unpatched) runs the same programs on Burn's autodiff and writes
//! reference files (`cargo run --manifest-path oracle/Cargo.toml`, see `scripts/test.sh`).
//! Here the programs run on remat and must match: losses and final parameters within 1e-4
//! relative, step-1 gradients within 1e-4 relative with a floor tied to the model's gradient
//! size (some gradients are mathematically zero, e.g. the attention key bias, and compare
//! rounding noise otherwise).
//!
//! Missing reference files fail the test when `REMAT_REQUIRE_ORACLE` is set (CI), and skip
//! it with a message otherwise.

// Comparisons are written `!(x <= tol)` on purpose: a NaN must count as a failure.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use burn::tensor::Device;
use remat_models::programs::{self, Named, TrainReport};

const RTOL: f32 = 1e-4;
/// Gradient floor, as a fraction of the RMS of all of the model's step-1 gradients.
const GRAD_FLOOR: f32 = 1e-2;

fn rms(values: &[f32]) -> f32 {
    (values.iter().map(|v| v * v).sum::<f32>() / values.len().max(1) as f32).sqrt()
}

fn reference(name: &str) -> Option<TrainReport> {
    let path = remat_models::oracle_dir().join(format!("{name}.txt"));
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(
            programs::from_text(&text)
                .unwrap_or_else(|e| panic!("{}: malformed reference: {e}", path.display())),
        ),
        Err(e) => {
            let message = format!(
                "{}: no oracle reference ({e}); run `cargo run --manifest-path oracle/Cargo.toml` \
                 (or ./scripts/test.sh) first",
                path.display()
            );
            if std::env::var_os("REMAT_REQUIRE_ORACLE").is_some() {
                panic!("{message}");
            }
            eprintln!("SKIPPED {name}: {message}");
            None
        }
    }
}

/// Compares two lists of named vectors: `|a - b| <= RTOL * max(|b|, rms(b), floor)`.
fn compare(what: &str, ours: &[Named], reference: &[Named], floor: f32) -> Vec<String> {
    let names = |v: &[Named]| v.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(ours),
        names(reference),
        "{what}: parameter names differ"
    );
    let mut failures = Vec::new();
    for (a, b) in ours.iter().zip(reference) {
        assert_eq!(a.values.len(), b.values.len(), "{what} {}: length", a.name);
        let scale = rms(&b.values).max(floor);
        let mut worst: Option<(usize, f32, f32, f32)> = None;
        for (i, (x, y)) in a.values.iter().zip(&b.values).enumerate() {
            let excess = (x - y).abs() / (RTOL * y.abs().max(scale).max(f32::MIN_POSITIVE));
            if !(excess <= 1.0) && worst.is_none_or(|w| excess > w.3) {
                worst = Some((i, *x, *y, excess));
            }
        }
        if let Some((i, x, y, excess)) = worst {
            failures.push(format!(
                "{what} {}[{i}]: remat {x} vs burn {y} ({excess:.1}x the tolerance)",
                a.name
            ));
        }
    }
    failures
}

fn check(name: &str, program: programs::Program) {
    let Some(expected) = reference(name) else {
        return;
    };
    let actual = program(&Device::flex().autodiff());
    let mut failures = Vec::new();
    assert_eq!(actual.losses.len(), expected.losses.len(), "{name}: steps");
    for (step, (a, b)) in actual.losses.iter().zip(&expected.losses).enumerate() {
        if !((a - b).abs() <= RTOL * b.abs()) {
            failures.push(format!("{name} loss at step {step}: remat {a} vs burn {b}"));
        }
    }
    let all: Vec<f32> = expected
        .grads
        .iter()
        .flat_map(|g| g.values.iter().copied())
        .collect();
    let floor = GRAD_FLOOR * rms(&all);
    failures.extend(compare(
        &format!("{name} step-1 grad"),
        &actual.grads,
        &expected.grads,
        floor,
    ));
    failures.extend(compare(
        &format!("{name} param"),
        &actual.params,
        &expected.params,
        0.0,
    ));
    assert!(
        failures.is_empty(),
        "{name}: remat differs from Burn's autodiff:\n  {}",
        failures.join("\n  ")
    );
}

#[test]
fn mlp_matches_burn() {
    check("mlp", programs::mlp::run);
}

#[test]
fn cnn_matches_burn() {
    check("cnn", programs::cnn::run);
}

#[test]
fn transformer_matches_burn() {
    check("transformer", programs::transformer::run);
}

#[test]
fn lstm_matches_burn() {
    check("lstm", programs::lstm::run);
}

#[test]
fn conv1d_matches_burn() {
    check("conv1d", programs::conv1d::run);
}

#[test]
fn recurrent_matches_burn() {
    check("recurrent", programs::recurrent::run);
}

#[test]
fn decoder_matches_burn() {
    check("decoder", programs::decoder::run);
}

#[test]
fn vision_matches_burn() {
    check("vision", programs::vision::run);
}

#[test]
fn losses_matches_burn() {
    check("losses", programs::losses::run);
}

#[test]
fn lora_matches_burn() {
    check("lora", programs::finetune::run_lora);
}

#[test]
fn qlora_matches_burn() {
    check("qlora", programs::finetune::run_qlora);
}

#[test]
fn spectral_matches_burn() {
    check("spectral", programs::spectral::run);
}

#[cfg(feature = "learner")]
#[test]
fn learner_matches_burn() {
    check("learner", programs::learner::run);
}

/// The Learner on a gradient-checkpointing device (`SupervisedTraining::gradient_checkpointing()`):
/// Burn's `BalancedCheckpointing` against remat's under its default process-wide policy
/// (`Balanced`; `tests/learner.rs` runs the others).
#[cfg(feature = "learner")]
#[test]
fn learner_checkpointing_matches_burn() {
    check(
        "learner_checkpointing",
        programs::learner::run_checkpointing,
    );
}

/// One `remat::checkpoint` region per layer, opened inside the model's forward (so on whatever
/// thread the Learner runs the step), against Burn's plain run.
#[cfg(feature = "learner")]
#[test]
fn learner_with_regions_matches_burn() {
    check("learner", |device| {
        let _exclusive = programs::exclusive();
        programs::learner::train(device, |layer| remat::checkpoint(layer), 1)
    });
}
