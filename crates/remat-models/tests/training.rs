//! End-to-end training on remat through Burn (the patched `burn-autodiff`): every program
//! learns, and Burn's gradient-checkpointing strategy gives bit-identical results (remat
//! replays are deterministic).

use burn::tensor::Device;
use remat_models::programs::{self, TrainReport};

fn assert_learns(name: &str, report: &TrainReport) {
    assert_eq!(report.losses.len(), programs::STEPS, "{name}: steps");
    assert!(
        report.losses.iter().all(|l| l.is_finite()),
        "{name}: non-finite loss {:?}",
        report.losses
    );
    let (first, last) = (report.losses[0], report.losses[programs::STEPS - 1]);
    assert!(
        last < first,
        "{name}: loss did not go down: {first} -> {last}"
    );
    assert!(!report.grads.is_empty(), "{name}: no gradients at step 1");
    assert!(
        report
            .grads
            .iter()
            .any(|g| g.values.iter().any(|v| *v != 0.0)),
        "{name}: all step-1 gradients are zero"
    );
}

fn check(name: &str, program: programs::Program) {
    let plain = program(&Device::flex().autodiff());
    assert_learns(name, &plain);
    let balanced = program(&Device::flex().autodiff().gradient_checkpointing());
    assert!(
        plain == balanced,
        "{name}: gradient checkpointing changed the results (losses {:?} vs {:?})",
        plain.losses,
        balanced.losses
    );
}

#[test]
fn mlp_trains() {
    check("mlp", programs::mlp::run);
}

#[test]
fn cnn_trains() {
    check("cnn", programs::cnn::run);
}

#[test]
fn transformer_trains() {
    check("transformer", programs::transformer::run);
}

#[test]
fn lstm_trains() {
    check("lstm", programs::lstm::run);
}

#[test]
fn reports_round_trip_through_text() {
    let report = TrainReport {
        losses: vec![1.5, 0.1 + 0.2, f32::MIN_POSITIVE],
        grads: vec![programs::Named {
            name: "l1.weight".into(),
            values: vec![-0.0, 1e-30, 3.4e38],
        }],
        params: vec![programs::Named {
            name: "l1.bias".into(),
            values: vec![0.333_333_34],
        }],
    };
    assert_eq!(programs::from_text(&programs::to_text(&report)), Ok(report));
}
