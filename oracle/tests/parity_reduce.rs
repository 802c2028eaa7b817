//! Backend-level parity of reductions, scans, sorting and linear algebra: sum/mean/prod (whole
//! and per dimension), max/min (whole, per dimension, with indices), max_abs, cumulative
//! sum/product/min/max, sort/topk, matmul (batch broadcasting, transposed operands) and cross.

use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, IntDType};
use remat_oracle::backend::{Leaf, check_fd, compare};
use remat_oracle::program;

/// Leaf 0 is stored as `[2, 4, 3]` and read transposed (`[2, 3, 4]`, non-contiguous).
fn lhs<B: AutodiffBackend>(x: &[FloatTensor<B>]) -> FloatTensor<B> {
    B::float_swap_dims(x[0].clone(), 1, 2)
}

const REDUCE: [&str; 22] = [
    "sum",
    "sum_dim 0",
    "sum_dim 2",
    "sum_dims [0, 2]",
    "mean",
    "mean_dim 1",
    "prod",
    "prod_dim 2",
    "max",
    "min",
    "max_dim 1",
    "min_dim 2",
    "max_dim_with_indices 0",
    "min_dim_with_indices 1",
    "max_abs",
    "max_abs_dim 2",
    "cumsum 2",
    "cumsum 0",
    "cumprod 2",
    "cummin 1",
    "cummax 2",
    "cummax 0",
];

fn reduce<B: AutodiffBackend>(k: usize, a: FloatTensor<B>) -> FloatTensor<B> {
    match k {
        0 => B::float_sum(a),
        1 => B::float_sum_dim(a, 0),
        2 => B::float_sum_dim(a, 2),
        3 => B::float_sum_dims(a, &[0, 2]),
        4 => B::float_mean(a),
        5 => B::float_mean_dim(a, 1),
        6 => B::float_prod(a),
        7 => B::float_prod_dim(a, 2),
        8 => B::float_max(a),
        9 => B::float_min(a),
        10 => B::float_max_dim(a, 1),
        11 => B::float_min_dim(a, 2),
        12 => B::float_max_dim_with_indices(a, 0, IntDType::I64).0,
        13 => B::float_min_dim_with_indices(a, 1, IntDType::I64).0,
        14 => B::float_max_abs(a),
        15 => B::float_max_abs_dim(a, 2),
        16 => B::float_cumsum(a, 2),
        17 => B::float_cumsum(a, 0),
        18 => B::float_cumprod(a, 2),
        19 => B::float_cummin(a, 1),
        20 => B::float_cummax(a, 2),
        _ => B::float_cummax(a, 0),
    }
}

#[test]
fn reductions_and_scans() {
    for (k, name) in REDUCE.iter().enumerate() {
        // Products stay away from zero (Burn's product rule divides by the input; zeros are
        // covered against finite differences below).
        let leaf = if name.contains("prod") {
            Leaf::synthetic(&[2, 4, 3], 700 + k as u64, 0.0).map(|v| 0.6 + 0.5 * v.abs())
        } else {
            Leaf::synthetic(&[2, 4, 3], 700 + k as u64, 0.0)
        };
        compare(
            name,
            &program!(k: usize = k; |B, x| reduce::<B>(*k, lhs::<B>(x))),
            &[leaf],
        );
    }
}

#[test]
fn reduction_of_a_rebuilt_value() {
    // sum_dim(exp(x) * y) with mean over a broadcast: the reduced input is an evicted
    // intermediate under checkpointing.
    compare(
        "mean_dim(exp(x) * y)",
        &program!(|B, x| {
            let h = B::float_mul(B::float_exp(x[0].clone()), x[1].clone());
            B::float_add(B::float_mean_dim(h.clone(), 1), B::float_max_dim(h, 1))
        }),
        &[
            Leaf::synthetic(&[3, 4], 720, 0.0),
            Leaf::synthetic(&[1, 4], 721, 0.0),
        ],
    );
}

#[test]
fn products_with_zeros_against_finite_differences() {
    // Burn's autodiff differentiates prod/prod_dim/cumprod as `out / x`, which is NaN where
    // an input is zero. remat's gradient is checked against finite differences instead: one
    // exact zero per row (the product is linear in it, so central differences are exact).
    let mut leaf = Leaf::synthetic(&[3, 4], 730, 0.0).map(|v| 0.5 + 0.5 * v);
    leaf.values[1] = 0.0;
    leaf.values[4] = 0.0;
    leaf.values[6] = 0.0;
    leaf.values[11] = 0.0;
    for (name, k) in [
        ("prod", 0usize),
        ("prod_dim 1", 1),
        ("cumprod 1", 2),
        ("prod_dim 0", 3),
    ] {
        check_fd(
            name,
            &program!(k: usize = k; |B, x| match *k {
                0 => B::float_prod(x[0].clone()),
                1 => B::float_prod_dim(x[0].clone(), 1),
                2 => B::float_cumprod(x[0].clone(), 1),
                _ => B::float_prod_dim(x[0].clone(), 0),
            }),
            std::slice::from_ref(&leaf),
            &[0],
            1e-6,
        );
    }
}

#[test]
fn max_min_with_ties() {
    // Ties: the whole-tensor and per-dimension max/min send the gradient where the engines'
    // conventions put it; compared with Burn as is.
    let leaf = Leaf {
        values: vec![
            0.5, 0.5, -0.2, 0.1, -0.7, 0.3, -0.7, 0.3, 0.9, 0.0, 0.9, -0.1,
        ],
        shape: vec![3, 4],
    };
    for (name, k) in [
        ("max_dim ties", 0usize),
        ("min_dim ties", 1),
        ("cummax ties", 2),
        ("cummin ties", 3),
    ] {
        compare(
            name,
            &program!(k: usize = k; |B, x| match *k {
                0 => B::float_max_dim(x[0].clone(), 1),
                1 => B::float_min_dim(x[0].clone(), 1),
                2 => B::float_cummax(x[0].clone(), 1),
                _ => B::float_cummin(x[0].clone(), 1),
            }),
            std::slice::from_ref(&leaf),
        );
    }
}

const SORT: [&str; 7] = [
    "sort ascending 2",
    "sort descending 1",
    "sort_with_indices 0",
    "topk 2",
    "topk_with_indices 1",
    "sort of a broadcast sum",
    "topk all",
];

#[test]
fn sort_and_topk() {
    for (k, name) in SORT.iter().enumerate() {
        compare(
            name,
            &program!(k: usize = k; |B, x| {
                let a = lhs::<B>(x);
                match *k {
                    0 => B::float_sort(a, 2, false),
                    1 => B::float_sort(a, 1, true),
                    2 => B::float_sort_with_indices(a, 0, false, IntDType::I64).0,
                    3 => B::float_topk(a, 2, 2),
                    4 => B::float_topk_with_indices(a, 1, 2, IntDType::I64).0,
                    5 => B::float_sort(B::float_add(a, x[1].clone()), 2, true),
                    _ => B::float_topk(a, 2, 4),
                }
            }),
            &[
                Leaf::synthetic(&[2, 4, 3], 740 + k as u64, 0.0),
                Leaf::synthetic(&[2, 3, 1], 760 + k as u64, 0.0),
            ],
        );
    }
}

#[test]
fn matmul_batched_broadcast_and_transposed() {
    let cases: [(&str, &[usize], &[usize]); 4] = [
        ("matmul 2d", &[3, 5], &[5, 2]),
        ("matmul batched", &[2, 3, 5], &[2, 5, 4]),
        ("matmul broadcast rhs batch", &[2, 3, 5], &[1, 5, 4]),
        ("matmul broadcast both", &[2, 1, 3, 5], &[1, 3, 5, 2]),
    ];
    for (i, (name, a, b)) in cases.into_iter().enumerate() {
        compare(
            name,
            &program!(|B, x| B::float_matmul(x[0].clone(), x[1].clone())),
            &[
                Leaf::synthetic(a, 780 + i as u64, 0.0),
                Leaf::synthetic(b, 790 + i as u64, 0.0),
            ],
        );
    }
    // Non-contiguous operands: aᵀ·b with a stored [5, 3], and a column slice of b.
    compare(
        "matmul transposed/sliced",
        &program!(|B, x| {
            let a = B::float_swap_dims(x[0].clone(), 0, 1);
            let b = B::float_slice(x[1].clone(), &[(0..5).into(), (1..4).into()]);
            B::float_matmul(a, b)
        }),
        &[
            Leaf::synthetic(&[5, 3], 800, 0.0),
            Leaf::synthetic(&[5, 4], 801, 0.0),
        ],
    );
    // x·x: one leaf on both sides.
    compare(
        "matmul(x, x)",
        &program!(|B, x| B::float_matmul(x[0].clone(), x[0].clone())),
        &[Leaf::synthetic(&[4, 4], 802, 0.0)],
    );
}

#[test]
fn cross_product() {
    compare(
        "cross dim 1",
        &program!(|B, x| B::float_cross(x[0].clone(), x[1].clone(), 1)),
        &[
            Leaf::synthetic(&[4, 3], 810, 0.0),
            Leaf::synthetic(&[4, 3], 811, 0.0),
        ],
    );
    compare(
        "cross dim 0 transposed",
        &program!(|B, x| {
            B::float_cross(B::float_swap_dims(x[0].clone(), 0, 1), x[1].clone(), 0)
        }),
        &[
            Leaf::synthetic(&[2, 3], 812, 0.0),
            Leaf::synthetic(&[3, 2], 813, 0.0),
        ],
    );
    // With a broadcast operand, Burn's autodiff returns the rhs gradient at the output's
    // shape ([3, 2] for a [3, 1] leaf): not a gradient of the leaf. remat's (reduced to the
    // leaf's shape) is checked against finite differences instead.
    check_fd(
        "cross dim 0 broadcast",
        &program!(|B, x| {
            B::float_cross(B::float_swap_dims(x[0].clone(), 0, 1), x[1].clone(), 0)
        }),
        &[
            Leaf::synthetic(&[2, 3], 814, 0.0),
            Leaf::synthetic(&[3, 1], 815, 0.0),
        ],
        &[0, 1],
        1e-6,
    );
}
