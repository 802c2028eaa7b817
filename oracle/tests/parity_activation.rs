//! Backend-level parity of `ActivationOps`: relu, gelu, sigmoid, log_sigmoid, softmax,
//! log_softmax, softmin, leaky_relu, hard_sigmoid and prelu (scalar-like and per-channel
//! broadcast slopes), on non-contiguous inputs and on rebuilt intermediates.

use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Scalar};
use remat_oracle::backend::{Leaf, compare};
use remat_oracle::program;

/// Leaf 0 is stored as `[2, 4, 3]` and read transposed (`[2, 3, 4]`, non-contiguous).
fn lhs<B: AutodiffBackend>(x: &[FloatTensor<B>]) -> FloatTensor<B> {
    B::float_swap_dims(x[0].clone(), 1, 2)
}

const ACTIVATIONS: [&str; 14] = [
    "relu",
    "gelu",
    "sigmoid",
    "log_sigmoid",
    "softmax dim 2",
    "softmax dim 0",
    "log_softmax dim 2",
    "log_softmax dim 1",
    "softmin dim 2",
    "leaky_relu",
    "hard_sigmoid",
    "prelu per channel",
    "prelu scalar slope",
    "prelu full slope",
];

fn activation<B: AutodiffBackend>(
    k: usize,
    a: FloatTensor<B>,
    x: &[FloatTensor<B>],
) -> FloatTensor<B> {
    match k {
        0 => B::relu(a),
        1 => B::gelu(a),
        2 => B::sigmoid(a),
        3 => B::log_sigmoid(a),
        4 => B::softmax(a, 2),
        5 => B::softmax(a, 0),
        6 => B::log_softmax(a, 2),
        7 => B::log_softmax(a, 1),
        8 => B::softmin(a, 2),
        9 => B::leaky_relu(a, Scalar::Float(0.1)),
        10 => B::hard_sigmoid(a, Scalar::Float(0.8), Scalar::Float(0.5)),
        11 => B::prelu(a, x[1].clone()),
        12 => B::prelu(a, x[2].clone()),
        _ => B::prelu(a, B::float_swap_dims(x[3].clone(), 1, 2)),
    }
}

#[test]
fn activations() {
    for (k, name) in ACTIVATIONS.iter().enumerate() {
        // Scaled by 3 so hard_sigmoid's saturation and the ReLU family's kinks are crossed
        // (values are never exactly 0).
        let leaves = [
            Leaf::synthetic(&[2, 4, 3], 1600 + k as u64, 0.0).map(|v| 3.0 * v + 0.0101),
            Leaf::synthetic(&[1, 3, 1], 1620 + k as u64, 0.0),
            Leaf::synthetic(&[1, 1, 1], 1640 + k as u64, 0.0),
            Leaf::synthetic(&[2, 4, 3], 1660 + k as u64, 0.0),
        ];
        compare(
            name,
            &program!(k: usize = k; |B, x| activation::<B>(*k, lhs::<B>(x), x)),
            &leaves,
        );
        // On a rebuilt intermediate (exp(x) - 1 is evicted under checkpointing), with the
        // leaf used again afterwards.
        compare(
            &format!("{name} of a rebuilt value"),
            &program!(k: usize = k; |B, x| {
                let h = B::float_sub_scalar(B::float_exp(lhs::<B>(x)), Scalar::Float(1.0));
                B::float_mul(activation::<B>(*k, h, x), lhs::<B>(x))
            }),
            &leaves,
        );
    }
}
