//! Backend-level parity: Burn's autodiff and remat run the same programs in one process and
//! must agree on outputs and gradients. To compare another op, add a program struct and a
//! `#[test]` calling [`compare`].

use burn_backend::AutodiffBackend;
use burn_backend::tensor::FloatTensor;
use remat_oracle::backend::{
    BurnFlex, BurnNdArray, Leaf, Program, RematFlex, RematNdArray, assert_close, run,
};

const RTOL: f32 = 1e-5;

/// Runs `program` on both engines, over Flex and over NdArray, and compares.
fn compare(name: &str, program: &impl Program, leaves: &[Leaf]) {
    let burn = run::<BurnFlex>(program, leaves);
    let ours = run::<RematFlex>(program, leaves);
    assert_close(&format!("{name} (Flex)"), &ours, &burn, RTOL);
    let burn = run::<BurnNdArray>(program, leaves);
    let ours = run::<RematNdArray>(program, leaves);
    assert_close(&format!("{name} (NdArray)"), &ours, &burn, RTOL);
}

struct Exp;
impl Program for Exp {
    fn forward<B: AutodiffBackend>(&self, x: &[FloatTensor<B>]) -> FloatTensor<B> {
        B::float_exp(x[0].clone())
    }
}

struct Mul;
impl Program for Mul {
    fn forward<B: AutodiffBackend>(&self, x: &[FloatTensor<B>]) -> FloatTensor<B> {
        B::float_mul(x[0].clone(), x[1].clone())
    }
}

/// `x + y` with `y` broadcast along the first dimension.
struct AddBroadcast;
impl Program for AddBroadcast {
    fn forward<B: AutodiffBackend>(&self, x: &[FloatTensor<B>]) -> FloatTensor<B> {
        B::float_add(x[0].clone(), x[1].clone())
    }
}

struct Matmul;
impl Program for Matmul {
    fn forward<B: AutodiffBackend>(&self, x: &[FloatTensor<B>]) -> FloatTensor<B> {
        B::float_matmul(x[0].clone(), x[1].clone())
    }
}

/// `matmul(exp(x) * x + b, w)`: the ops above composed, with a shared parent.
struct Composite;
impl Program for Composite {
    fn forward<B: AutodiffBackend>(&self, x: &[FloatTensor<B>]) -> FloatTensor<B> {
        let h = B::float_mul(B::float_exp(x[0].clone()), x[0].clone());
        B::float_matmul(B::float_add(h, x[1].clone()), x[2].clone())
    }
}

#[test]
fn exp_matches_burn() {
    compare("exp", &Exp, &[Leaf::synthetic(&[3, 4], 1, 0.0)]);
}

#[test]
fn mul_matches_burn() {
    compare(
        "mul",
        &Mul,
        &[
            Leaf::synthetic(&[3, 4], 2, 0.0),
            Leaf::synthetic(&[3, 4], 3, 0.5),
        ],
    );
}

#[test]
fn add_with_broadcasting_matches_burn() {
    compare(
        "add (broadcast)",
        &AddBroadcast,
        &[
            Leaf::synthetic(&[3, 4], 4, 0.0),
            Leaf::synthetic(&[1, 4], 5, 0.0),
        ],
    );
}

#[test]
fn matmul_matches_burn() {
    compare(
        "matmul",
        &Matmul,
        &[
            Leaf::synthetic(&[3, 5], 6, 0.0),
            Leaf::synthetic(&[5, 2], 7, 0.0),
        ],
    );
}

#[test]
fn composite_matches_burn() {
    compare(
        "matmul(exp(x) * x + b, w)",
        &Composite,
        &[
            Leaf::synthetic(&[4, 3], 8, 0.0),
            Leaf::synthetic(&[1, 3], 9, 0.0),
            Leaf::synthetic(&[3, 2], 10, 0.0),
        ],
    );
}
