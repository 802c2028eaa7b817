//! Unary and binary element-wise rules, checked from several sides (see `support`).

mod support;

use burn_backend::ops::FloatTensorOps;
use burn_std::Scalar;
use support::{A, Fd, Input, Rng, check};

#[test]
fn unary_rules() {
    let mut rng = Rng::new(1);
    // Inputs in (0.1, 0.9) keep every function (log, acos, atanh ...) in its domain.
    let x = Input {
        values: rng.vec(12).into_iter().map(|v| 0.5 + 0.4 * v).collect(),
        shape: vec![3, 4],
    };
    let ops: Vec<(&str, support::Op1)> = vec![
        ("exp", A::float_exp),
        ("log", A::float_log),
        ("log1p", A::float_log1p),
        ("sqrt", A::float_sqrt),
        // The kink of abs at 0 is outside the inputs' range (0.1, 0.9).
        ("abs", A::float_abs),
        ("cos", A::float_cos),
        ("sin", A::float_sin),
        ("tan", A::float_tan),
        ("cosh", A::float_cosh),
        ("sinh", A::float_sinh),
        ("tanh", A::float_tanh),
        ("acos", A::float_acos),
        ("asin", A::float_asin),
        ("atan", A::float_atan),
        ("asinh", A::float_asinh),
        ("atanh", A::float_atanh),
        ("erf", A::float_erf),
        ("recip", A::float_recip),
        ("neg", A::float_neg),
        ("powf_scalar", |t| {
            A::float_powf_scalar(t, Scalar::Float(2.5))
        }),
        ("powi_scalar 2", |t| A::float_powi_scalar(t, Scalar::Int(2))),
        ("powi_scalar 3", |t| A::float_powi_scalar(t, Scalar::Int(3))),
        ("powi_scalar -2", |t| {
            A::float_powi_scalar(t, Scalar::Int(-2))
        }),
        ("powi_scalar 0", |t| A::float_powi_scalar(t, Scalar::Int(0))),
        ("add_scalar", |t| A::float_add_scalar(t, Scalar::Float(2.5))),
        ("sub_scalar", |t| A::float_sub_scalar(t, Scalar::Float(2.5))),
        ("mul_scalar", |t| {
            A::float_mul_scalar(t, Scalar::Float(-1.5))
        }),
        ("div_scalar", |t| A::float_div_scalar(t, Scalar::Float(4.0))),
    ];
    for (name, op) in ops {
        check(
            name,
            std::slice::from_ref(&x),
            |xs| op(xs[0].clone()),
            Fd::Smooth,
        );
    }
    check(
        "clamp",
        std::slice::from_ref(&x),
        |xs| A::float_clamp(xs[0].clone(), Scalar::Float(0.3), Scalar::Float(0.7)),
        Fd::Kinked("kinks at the bounds 0.3 and 0.7, inside the inputs' range"),
    );
    let y = Input {
        values: rng.vec(12).into_iter().map(|v| 2.0 + 0.5 * v).collect(),
        shape: vec![3, 4],
    };
    check(
        "acosh",
        &[y],
        |xs| A::float_acosh(xs[0].clone()),
        Fd::Smooth,
    );
    for (name, op) in [
        ("round", A::float_round as fn(support::T) -> support::T),
        ("floor", A::float_floor),
        ("ceil", A::float_ceil),
        ("trunc", A::float_trunc),
        ("sign", A::float_sign),
    ] {
        let g = check(
            name,
            std::slice::from_ref(&x),
            |xs| op(xs[0].clone()),
            // Finite differences are zero on each flat piece; a direction that crosses a jump
            // sees D(h) and D(h/2) disagree and is skipped.
            Fd::Kinked("piecewise constant: jumps at integers (round: at halves; sign: at 0)"),
        );
        // The harness also asserts the gradient tensor exists: Burn's autodiff registers
        // zeros for these ops (the oracle's parity_elementwise compares presence too).
        assert!(g[0].iter().all(|v| *v == 0.0), "{name} has a zero gradient");
    }
}

#[test]
fn binary_rules_with_broadcasting() {
    let mut rng = Rng::new(2);
    let a = Input::random(&mut rng, &[2, 3, 4], 2.0);
    let b = Input::random(&mut rng, &[3, 1], 2.0);
    let ops: Vec<(&str, support::Op2)> = vec![
        ("add", A::float_add),
        ("sub", A::float_sub),
        ("mul", A::float_mul),
        ("div", A::float_div),
        ("powf", A::float_powf),
        ("atan2", A::float_atan2),
        ("hypot", A::float_hypot),
    ];
    for (name, op) in ops {
        check(
            name,
            &[a.clone(), b.clone()],
            |xs| op(xs[0].clone(), xs[1].clone()),
            Fd::Smooth,
        );
        check(
            name,
            &[b.clone(), a.clone()],
            |xs| op(xs[0].clone(), xs[1].clone()),
            Fd::Smooth,
        );
    }
    // A tensor used twice: gradients accumulate.
    check(
        "x*x",
        std::slice::from_ref(&a),
        |xs| A::float_mul(xs[0].clone(), xs[0].clone()),
        Fd::Smooth,
    );
}
