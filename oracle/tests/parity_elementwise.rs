//! Backend-level parity of element-wise ops: arithmetic (tensor and scalar forms, with
//! broadcasting and non-contiguous operands), unary math, powers, clamp, masks and casts.
//! Each case runs on Burn's autodiff and on remat over Flex and NdArray under both
//! checkpointing strategies (see `remat_oracle::backend::compare`).

use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorMetadata};
use burn_backend::{FloatDType, Scalar};
use burn_flex::Flex;
use remat_oracle::backend::{Leaf, RTOL, bools, check_fd, compare, compare_on, ints};
use remat_oracle::program;

fn s(v: f64) -> Scalar {
    Scalar::Float(v)
}

/// Leaf 0 is stored as `[2, 4, 3]` and read transposed (`[2, 3, 4]`, non-contiguous).
fn lhs<B: AutodiffBackend>(x: &[FloatTensor<B>]) -> FloatTensor<B> {
    B::float_swap_dims(x[0].clone(), 1, 2)
}

const BINARY: [&str; 9] = [
    "add",
    "sub",
    "mul",
    "div",
    "powf",
    "atan2",
    "hypot",
    "remainder",
    "add (swapped)",
];

fn binary<B: AutodiffBackend>(k: usize, a: FloatTensor<B>, b: FloatTensor<B>) -> FloatTensor<B> {
    match k {
        0 => B::float_add(a, b),
        1 => B::float_sub(a, b),
        2 => B::float_mul(a, b),
        3 => B::float_div(a, b),
        4 => B::float_powf(a, b),
        5 => B::float_atan2(a, b),
        6 => B::float_hypot(a, b),
        7 => B::float_remainder(a, b),
        _ => B::float_add(b, a),
    }
}

#[test]
fn binary_ops_broadcast_and_transposed() {
    for (k, name) in BINARY.iter().enumerate() {
        // Positive operands away from zero keep powf, div and remainder well defined.
        let (off0, off1) = match *name {
            "powf" | "div" | "remainder" => (2.0, 1.5),
            _ => (0.0, 0.3),
        };
        let leaves = [
            Leaf::synthetic(&[2, 4, 3], 10 + k as u64, off0),
            Leaf::synthetic(&[1, 3, 1], 30 + k as u64, off1),
        ];
        compare(
            &format!("{name} broadcast"),
            &program!(k: usize = k; |B, x| binary::<B>(*k, lhs::<B>(x), x[1].clone())),
            &leaves,
        );
        // Same shapes, both sides tracked through a slice (non-contiguous).
        let leaves = [
            Leaf::synthetic(&[3, 5], 50 + k as u64, off0),
            Leaf::synthetic(&[3, 4], 70 + k as u64, off1),
        ];
        compare(
            &format!("{name} sliced"),
            &program!(k: usize = k; |B, x| {
                let a = B::float_slice(x[0].clone(), &[(0..3).into(), (1..5).into()]);
                binary::<B>(*k, a, x[1].clone())
            }),
            &leaves,
        );
    }
}

#[test]
fn binary_ops_same_tensor_on_both_sides() {
    for (k, name) in BINARY.iter().enumerate() {
        let off = if matches!(*name, "powf" | "div" | "remainder") {
            2.0
        } else {
            0.0
        };
        // op(x, flip(x)): one leaf on both sides (op(x, x) has a zero gradient for several
        // ops, which would compare rounding noise).
        compare(
            &format!("{name}(x, flip(x))"),
            &program!(k: usize = k; |B, x| {
                binary::<B>(*k, x[0].clone(), B::float_flip(x[0].clone(), &[1]))
            }),
            &[Leaf::synthetic(&[3, 4], 90 + k as u64, off)],
        );
    }
}

const SCALAR: [&str; 11] = [
    "add_scalar",
    "sub_scalar",
    "mul_scalar",
    "div_scalar",
    "remainder_scalar",
    "powf_scalar",
    "powf_scalar_impl",
    "powi_scalar",
    "powi_scalar 3",
    "powi_scalar -2",
    "powi (int tensor)",
];

fn scalar_op<B: AutodiffBackend>(k: usize, a: FloatTensor<B>) -> FloatTensor<B> {
    match k {
        0 => B::float_add_scalar(a, s(0.7)),
        1 => B::float_sub_scalar(a, s(-1.3)),
        2 => B::float_mul_scalar(a, s(-2.5)),
        3 => B::float_div_scalar(a, s(0.3)),
        4 => B::float_remainder_scalar(a, s(0.7)),
        5 => B::float_powf_scalar(a, s(1.7)),
        6 => B::float_powf_scalar_impl(a, s(-0.6)),
        7 => B::float_powi_scalar(a, Scalar::Int(2)),
        8 => B::float_powi_scalar(a, Scalar::Int(3)),
        9 => B::float_powi_scalar(a, Scalar::Int(-2)),
        _ => {
            let shape = a.shape().to_vec();
            let n = shape.iter().product::<usize>();
            let exps = (0..n as i64).map(|i| i % 4 - 1).collect();
            B::float_powi(a, ints::<B>(exps, &shape))
        }
    }
}

#[test]
fn scalar_ops() {
    for (k, name) in SCALAR.iter().enumerate() {
        // Positive bases keep the fractional powers real; remainder avoids its jumps by
        // staying inside one period per element (values in [1.5, 3.5)).
        compare(
            name,
            &program!(k: usize = k; |B, x| scalar_op::<B>(*k, lhs::<B>(x))),
            &[Leaf::synthetic(&[2, 4, 3], 110 + k as u64, 2.5)],
        );
    }
}

const UNARY: [(&str, f32, f32); 26] = [
    // (name, scale, offset) of the input values `scale * u + offset`, u in [-1, 1).
    ("exp", 1.0, 0.0),
    ("log", 1.0, 2.0),
    ("log1p", 0.5, 0.0),
    ("sqrt", 1.0, 2.0),
    ("abs", 1.0, 0.0),
    ("cos", 2.0, 0.0),
    ("sin", 2.0, 0.0),
    ("tan", 1.0, 0.0),
    ("cosh", 1.0, 0.0),
    ("sinh", 1.0, 0.0),
    ("tanh", 2.0, 0.0),
    ("acos", 0.9, 0.0),
    ("acosh", 1.0, 2.5),
    ("asin", 0.9, 0.0),
    ("asinh", 2.0, 0.0),
    ("atan", 2.0, 0.0),
    ("atanh", 0.9, 0.0),
    ("erf", 1.5, 0.0),
    ("neg", 1.0, 0.0),
    ("recip", 1.0, 2.0),
    ("round", 3.0, 0.0),
    ("floor", 3.0, 0.0),
    ("ceil", 3.0, 0.0),
    ("trunc", 3.0, 0.0),
    ("sign", 1.0, 0.0),
    ("cast f64 and back", 1.0, 0.0),
];

fn unary<B: AutodiffBackend>(k: usize, a: FloatTensor<B>) -> FloatTensor<B> {
    match k {
        0 => B::float_exp(a),
        1 => B::float_log(a),
        2 => B::float_log1p(a),
        3 => B::float_sqrt(a),
        4 => B::float_abs(a),
        5 => B::float_cos(a),
        6 => B::float_sin(a),
        7 => B::float_tan(a),
        8 => B::float_cosh(a),
        9 => B::float_sinh(a),
        10 => B::float_tanh(a),
        11 => B::float_acos(a),
        12 => B::float_acosh(a),
        13 => B::float_asin(a),
        14 => B::float_asinh(a),
        15 => B::float_atan(a),
        16 => B::float_atanh(a),
        17 => B::float_erf(a),
        18 => B::float_neg(a),
        19 => B::float_recip(a),
        20 => B::float_round(a),
        21 => B::float_floor(a),
        22 => B::float_ceil(a),
        23 => B::float_trunc(a),
        24 => B::float_sign(a),
        _ => B::float_cast(B::float_cast(a, FloatDType::F64), FloatDType::F32),
    }
}

#[test]
fn unary_math() {
    for (k, (name, scale, offset)) in UNARY.iter().enumerate() {
        let leaf = Leaf::synthetic(&[2, 4, 3], 200 + k as u64, 0.0).map(|v| v * scale + offset);
        // Through a transpose, then a second use of the leaf: the op's input is rebuilt
        // under checkpointing, and its result meets another path at the leaf.
        compare(
            name,
            &program!(k: usize = k; |B, x| {
                let y = unary::<B>(*k, lhs::<B>(x));
                B::float_add(y, B::float_mul_scalar(lhs::<B>(x), s(0.5)))
            }),
            &[leaf],
        );
    }
}

#[test]
fn unary_chain_rebuilt_under_checkpointing() {
    // exp(sin(x)) * tanh(x) / sqrt(x*x + 1): a chain of cheap ops whose intermediates are
    // evicted and rebuilt under the balanced and recompute-all policies.
    compare(
        "unary chain",
        &program!(|B, x| {
            let a = B::float_exp(B::float_sin(x[0].clone()));
            let b = B::float_tanh(x[0].clone());
            let d = B::float_sqrt(B::float_add_scalar(
                B::float_mul(x[0].clone(), x[0].clone()),
                s(1.0),
            ));
            B::float_div(B::float_mul(a, b), d)
        }),
        &[Leaf::synthetic(&[4, 5], 300, 0.0)],
    );
}

#[test]
fn clamp_family() {
    // Values avoid the exact bounds (the gradient's convention at a bound is compared in
    // `clamp_at_bounds` below).
    let leaf = Leaf::synthetic(&[2, 4, 3], 400, 0.0).map(|v| v * 1.5 + 0.013);
    compare(
        "clamp",
        &program!(|B, x| B::float_clamp(lhs::<B>(x), s(-0.5), s(0.6))),
        std::slice::from_ref(&leaf),
    );
    compare(
        "clamp_min",
        &program!(|B, x| B::float_clamp_min(lhs::<B>(x), s(-0.4))),
        std::slice::from_ref(&leaf),
    );
    compare(
        "clamp_max",
        &program!(|B, x| B::float_clamp_max(lhs::<B>(x), s(0.2))),
        &[leaf],
    );
}

#[test]
fn clamp_at_bounds() {
    // Elements exactly on a bound: both engines must pick the same side.
    let leaf = Leaf {
        values: vec![-0.5, 0.5, 0.0, -1.0, 1.0, 0.25],
        shape: vec![2, 3],
    };
    compare(
        "clamp at bounds",
        &program!(|B, x| B::float_clamp(x[0].clone(), s(-0.5), s(0.5))),
        std::slice::from_ref(&leaf),
    );
    compare(
        "clamp_min at bound",
        &program!(|B, x| B::float_clamp_min(x[0].clone(), s(0.0))),
        std::slice::from_ref(&leaf),
    );
    compare(
        "clamp_max at bound",
        &program!(|B, x| B::float_clamp_max(x[0].clone(), s(0.5))),
        &[leaf],
    );
}

fn mask<B: AutodiffBackend>(shape: &[usize]) -> burn_backend::tensor::BoolTensor<B> {
    let n = shape.iter().product::<usize>();
    bools::<B>((0..n).map(|i| (i * 7) % 3 == 0).collect(), shape)
}

#[test]
fn mask_where_and_fill() {
    let leaves = [
        Leaf::synthetic(&[2, 4, 3], 500, 0.0),
        Leaf::synthetic(&[2, 3, 4], 501, 0.0),
        Leaf::synthetic(&[1, 3, 1], 502, 0.0),
    ];
    compare(
        "mask_where",
        &program!(|B, x| B::float_mask_where(lhs::<B>(x), mask::<B>(&[2, 3, 4]), x[1].clone())),
        &leaves,
    );
    // NdArray's own mask_where cannot broadcast its operands (its forward panics, whichever
    // engine is on top): the broadcasting cases run over Flex only.
    compare_on::<Flex>(
        "mask_where broadcast value",
        &program!(|B, x| B::float_mask_where(lhs::<B>(x), mask::<B>(&[2, 3, 4]), x[2].clone())),
        &leaves,
        RTOL,
    );
    compare_on::<Flex>(
        "mask_where broadcast mask",
        &program!(|B, x| B::float_mask_where(lhs::<B>(x), mask::<B>(&[1, 3, 4]), x[1].clone())),
        &leaves,
        RTOL,
    );
    compare(
        "mask_fill",
        &program!(|B, x| B::float_mask_fill(lhs::<B>(x), mask::<B>(&[2, 3, 4]), s(0.25))),
        &leaves,
    );
}

#[test]
fn remainder_against_finite_differences() {
    // The remainder's gradient with respect to the divisor (-floor(a / b)) checked from
    // first principles as well, with values away from the jumps.
    let leaves = [
        Leaf::synthetic(&[3, 4], 600, 0.0).map(|v| 3.0 * v + 0.05),
        Leaf::synthetic(&[3, 4], 601, 1.4),
    ];
    check_fd(
        "remainder",
        &program!(|B, x| B::float_remainder(x[0].clone(), x[1].clone())),
        &leaves,
        &[0, 1],
        1e-6,
    );
}

/// Mixed precision: f32 leaves computed in f16 (element-wise, a matmul, a reduction) and cast
/// back; gradients reach the leaves in f32 through the cast rule. Over Flex (NdArray has no
/// f16 kernels); the f16 arithmetic is identical on both engines.
#[test]
fn mixed_precision_f16() {
    let leaves = [
        Leaf::synthetic(&[3, 4], 900, 0.0),
        Leaf::synthetic(&[4, 2], 901, 0.0),
    ];
    compare_on::<Flex>(
        "f16 compute",
        &program!(|B, x| {
            let a = B::float_cast(x[0].clone(), FloatDType::F16);
            let b = B::float_cast(x[1].clone(), FloatDType::F16);
            let h = B::float_mul(B::float_exp(a.clone()), a);
            let h = B::float_matmul(h, b);
            let h = B::float_add(h.clone(), B::float_sum_dim(B::float_tanh(h), 1));
            B::float_cast(h, FloatDType::F32)
        }),
        &leaves,
        1e-3,
    );
}
