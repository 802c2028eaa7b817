//! Reductions, cumulative ops, selections (max/min, sort, topk) and linear algebra (matmul,
//! cross), checked from several sides (see `support`).

mod support;

use burn_backend::ops::FloatTensorOps;
use burn_backend::{AutodiffBackend, TensorMetadata, read_sync};
use burn_std::IntDType;
use support::{A, Fd, I, Input, Rng, T, check, tensor, values};

/// Gradients of `program` on one input, checked (see `support::check`).
fn check1(name: &str, x: &Input, program: impl Fn(T) -> T) -> Vec<f64> {
    check(
        name,
        std::slice::from_ref(x),
        |xs| program(xs[0].clone()),
        Fd::Smooth,
    )
    .pop()
    .unwrap()
}

/// [`check1`] for an op that selects elements (max/min, sort, top-k, running extremes): it
/// is piecewise linear, with kinks where two elements tie.
fn check1_ties(name: &str, x: &Input, program: impl Fn(T) -> T) -> Vec<f64> {
    check(
        name,
        std::slice::from_ref(x),
        |xs| program(xs[0].clone()),
        Fd::Kinked("selects elements: kinks where two elements tie"),
    )
    .pop()
    .unwrap()
}

/// Random values in [-1, 1) shifted by `offset`, distinct with probability one.
fn random(seed: u64, shape: &[usize], offset: f64) -> Input {
    Input::random(&mut Rng::new(seed), shape, offset)
}

/// The loss weight of a one-element output (the harness seeds backward with fixed weights).
fn unit_weight() -> f64 {
    let g = check(
        "weight",
        &[input(&[1.0], &[1])],
        |xs| xs[0].clone(),
        Fd::Smooth,
    );
    g[0][0]
}

/// Asserts `got` equals `want` up to rounding.
fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

fn input(values: &[f64], shape: &[usize]) -> Input {
    Input {
        values: values.to_vec(),
        shape: shape.to_vec(),
    }
}

fn shape_of(t: &T) -> Vec<usize> {
    t.shape().to_vec()
}

fn ints(t: burn_backend::tensor::IntTensor<I>) -> Vec<i64> {
    let data = read_sync(<I as burn_backend::ops::IntTensorOps<I>>::int_into_data(t)).unwrap();
    data.convert::<i64>().try_to_vec::<i64>().unwrap()
}

/// A swap of dims 0 and 2 (a non-contiguous view) of a `[4, 3, 2]` input gives `[2, 3, 4]`.
fn swapped(t: T) -> T {
    A::float_swap_dims(t, 0, 2)
}

#[test]
fn sums_and_means() {
    let x = random(1, &[2, 3, 4], 0.0);
    // The loss is sum(r * out) with fixed weights r, so the gradient of sum is r[0] everywhere.
    let g = check1("sum", &x, A::float_sum);
    assert!(g.iter().all(|v| *v == g[0]), "sum spreads one weight");
    let g = check1("mean", &x, A::float_mean);
    let w = unit_weight();
    assert!(g.iter().all(|v| *v == w / 24.0));
    for dim in 0..3 {
        let g = check1("sum_dim", &x, |t| A::float_sum_dim(t, dim));
        assert_eq!(g.len(), 24);
        check1("mean_dim", &x, |t| A::float_mean_dim(t, dim));
    }
    check1("sum_dims", &x, |t| A::float_sum_dims(t, &[0, 2]));
    check1("sum_dims one", &x, |t| A::float_sum_dims(t, &[1]));

    // Burn keeps reduced dims with size 1; global reductions give shape [1].
    let t = tensor(x.values.clone(), &x.shape);
    assert_eq!(shape_of(&A::float_sum_dim(t.clone(), 1)), vec![2, 1, 4]);
    assert_eq!(shape_of(&A::float_mean_dim(t.clone(), 2)), vec![2, 3, 1]);
    assert_eq!(
        shape_of(&A::float_sum_dims(t.clone(), &[0, 2])),
        vec![1, 3, 1]
    );
    assert_eq!(shape_of(&A::float_sum(t.clone())), vec![1]);
    assert_eq!(shape_of(&A::float_mean(t)), vec![1]);

    // Non-contiguous inputs.
    let y = random(2, &[4, 3, 2], 0.0);
    for dim in 0..3 {
        check1("sum_dim of swapped", &y, |t| {
            A::float_sum_dim(swapped(t), dim)
        });
        check1("mean_dim of swapped", &y, |t| {
            A::float_mean_dim(swapped(t), dim)
        });
    }
    check1("sum of swapped", &y, |t| A::float_sum(swapped(t)));

    // A tensor used directly and through a reduction: gradients accumulate.
    check1("x * sum_dim(x)", &x, |t| {
        A::float_mul(t.clone(), A::float_sum_dim(t, 1))
    });
    check1("x * mean(x)", &x, |t| {
        A::float_mul(t.clone(), A::float_mean(t))
    });
    check1_ties("x * max_dim(x)", &x, |t| {
        A::float_mul(t.clone(), A::float_max_dim(t, 2))
    });

    // sum(sum_dim(x, 1)) and sum(mean_dim(x, 1)): every element gets the weight (over 3).
    let w = unit_weight();
    let g = check1("sum_dim exact", &x, |t| {
        A::float_sum(A::float_sum_dim(t, 1))
    });
    assert!(g.iter().all(|v| *v == w));
    let g = check1("mean_dim exact", &x, |t| {
        A::float_sum(A::float_mean_dim(t, 1))
    });
    assert!(g.iter().all(|v| *v == w / 3.0));
}

#[test]
fn products() {
    let x = random(3, &[2, 3, 4], 0.5);
    check1("prod", &x, A::float_prod);
    for dim in 0..3 {
        check1("prod_dim", &x, |t| A::float_prod_dim(t, dim));
    }
    let y = random(4, &[4, 3, 2], 0.5);
    check1("prod_dim of swapped", &y, |t| {
        A::float_prod_dim(swapped(t), 1)
    });
    check1("prod of swapped", &y, |t| A::float_prod(swapped(t)));

    // Zeros: the gradient is the product of the others, with no NaN.
    let z = input(&[2.0, 0.0, 3.0, 0.0, 5.0, 0.0, 7.0, 1.0, 0.5], &[3, 3]);
    let g = check(
        "prod_dim with zeros",
        std::slice::from_ref(&z),
        |xs| A::float_sum(A::float_prod_dim(xs[0].clone(), 1)),
        Fd::Smooth,
    );
    let w = g[0][7] / 3.5; // the loss weight: d/dx[2,1] = 7 * 0.5 = 3.5
    let expected = [0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.5, 3.5, 7.0];
    for (got, want) in g[0].iter().zip(expected) {
        assert!((got - w * want).abs() < 1e-12, "{got} vs {}", w * want);
    }
    let w = unit_weight();
    let g = check1(
        "prod with one zero",
        &input(&[2.0, 0.0, 3.0], &[3]),
        A::float_prod,
    );
    assert_eq!(g, vec![0.0, 6.0 * w, 0.0]);
    let g = check1(
        "prod with two zeros",
        &input(&[0.0, 2.0, 0.0], &[3]),
        A::float_prod,
    );
    assert!(g.iter().all(|v| *v == 0.0));
    let g = check1("prod of one", &input(&[4.0], &[1]), A::float_prod);
    assert_eq!(g, vec![w]);
}

#[test]
fn cumulative_ops() {
    let x = random(5, &[3, 4], 0.5);
    let y = random(6, &[4, 3, 2], 0.0);
    for dim in 0..2 {
        check1("cumsum", &x, |t| A::float_cumsum(t, dim));
        check1("cumprod", &x, |t| A::float_cumprod(t, dim));
        check1_ties("cummin", &x, |t| A::float_cummin(t, dim));
        check1_ties("cummax", &x, |t| A::float_cummax(t, dim));
    }
    for dim in 0..3 {
        check1("cumsum of swapped", &y, |t| {
            A::float_cumsum(swapped(t), dim)
        });
        check1("cumprod of swapped", &y, |t| {
            A::float_cumprod(swapped(t), dim)
        });
        check1_ties("cummax of swapped", &y, |t| {
            A::float_cummax(swapped(t), dim)
        });
        check1_ties("cummin of swapped", &y, |t| {
            A::float_cummin(swapped(t), dim)
        });
    }

    // cumsum with unit weights: element i gets n - i.
    let g = check(
        "cumsum exact",
        &[input(&[1.0, 2.0, 3.0, 4.0], &[4])],
        |xs| A::float_sum(A::float_cumsum(xs[0].clone(), 0)),
        Fd::Smooth,
    );
    let w = unit_weight();
    assert_eq!(g[0], vec![4.0 * w, 3.0 * w, 2.0 * w, w]);

    // cumprod through zeros (a polynomial: finite differences still apply).
    let z = input(
        &[2.0, 0.0, 3.0, 0.5, 0.0, 1.5, 0.0, 2.0, 0.0, -1.0, 0.0, 0.0],
        &[3, 4],
    );
    let g = check1("cumprod with zeros", &z, |t| A::float_cumprod(t, 1));
    assert!(g.iter().all(|v| v.is_finite()), "no NaN at zeros: {g:?}");
    // In a lane, after its first zero the gradient is exactly zero.
    assert_eq!(&g[5..8], &[0.0, 0.0, 0.0]);
    assert_eq!(g[11], 0.0);
    assert!(g[4] != 0.0 && g[1] != 0.0);
    // Unit weights on [2, 0, 3, 0.5]: d/dx0 = 1 (y0) + 0 ... = 1; d/dx1 = 2 + 6 + 3 = 11.
    let g = check(
        "cumprod with zeros exact",
        &[input(&[2.0, 0.0, 3.0, 0.5], &[4])],
        |xs| A::float_sum(A::float_cumprod(xs[0].clone(), 0)),
        Fd::Smooth,
    );
    let w = unit_weight();
    assert_close(&g[0], &[w, 11.0 * w, 0.0, 0.0]);

    // cummax of [1, 3, 2, 5, 4]: outputs copy x0, x1, x1, x3, x3.
    let g = check(
        "cummax exact",
        &[input(&[1.0, 3.0, 2.0, 5.0, 4.0], &[5])],
        |xs| A::float_sum(A::float_cummax(xs[0].clone(), 0)),
        Fd::Kinked("a running extreme: kinks where an element ties it"),
    );
    let w = unit_weight();
    assert_eq!(g[0], vec![w, 2.0 * w, 0.0, 2.0 * w, 0.0]);
    let g = check(
        "cummin exact",
        &[input(&[3.0, 1.0, 2.0, 0.0, 4.0], &[5])],
        |xs| A::float_sum(A::float_cummin(xs[0].clone(), 0)),
        Fd::Kinked("a running extreme: kinks where an element ties it"),
    );
    let w = unit_weight();
    assert_eq!(g[0], vec![w, 2.0 * w, 0.0, 2.0 * w, 0.0]);
}

#[test]
fn max_and_min() {
    let x = random(7, &[3, 4, 2], 0.0);
    let g = check1_ties("max", &x, A::float_max);
    assert_eq!(g.iter().filter(|v| **v != 0.0).count(), 1);
    check1_ties("min", &x, A::float_min);
    check1_ties("max_abs", &x, A::float_max_abs);
    for dim in 0..3 {
        let g = check1_ties("max_dim", &x, |t| A::float_max_dim(t, dim));
        assert_eq!(g.iter().filter(|v| **v != 0.0).count(), 24 / x.shape[dim]);
        check1_ties("min_dim", &x, |t| A::float_min_dim(t, dim));
        check1_ties("max_abs_dim", &x, |t| A::float_max_abs_dim(t, dim));
        check1_ties("max_dim_with_indices", &x, |t| {
            A::float_max_dim_with_indices(t, dim, IntDType::I64).0
        });
        check1_ties("min_dim_with_indices", &x, |t| {
            A::float_min_dim_with_indices(t, dim, IntDType::I32).0
        });
    }
    let y = random(8, &[4, 3, 2], 0.0);
    for dim in 0..3 {
        check1_ties("max_dim of swapped", &y, |t| {
            A::float_max_dim(swapped(t), dim)
        });
        check1_ties("min_dim of swapped", &y, |t| {
            A::float_min_dim(swapped(t), dim)
        });
        check1_ties("max_abs_dim of swapped", &y, |t| {
            A::float_max_abs_dim(swapped(t), dim)
        });
    }
    check1_ties("max of swapped", &y, |t| A::float_max(swapped(t)));
    check1_ties("min of swapped", &y, |t| A::float_min(swapped(t)));
    check1_ties("max_abs of swapped", &y, |t| A::float_max_abs(swapped(t)));

    // Values, shapes and indices match the inner backend.
    let t = tensor(x.values.clone(), &x.shape);
    let inner = support::inner(x.values.clone(), &x.shape);
    let (v, i) =
        A::float_max_dim_with_indices(A::float_set_require_grad(t.clone(), true), 1, IntDType::I64);
    let (iv, ii) = I::float_max_dim_with_indices(inner.clone(), 1, IntDType::I64);
    assert_eq!(shape_of(&v), vec![3, 1, 2]);
    assert_eq!(values(A::inner(v)), values(iv));
    assert_eq!(ints(i), ints(ii));
    assert_eq!(shape_of(&A::float_max(t.clone())), vec![1]);
    assert_eq!(
        values(A::inner(A::float_max_abs(A::float_set_require_grad(
            t, true
        )))),
        values(I::float_max_abs(inner))
    );

    // The gradient of |x| at the selected position carries sign(x).
    let g = check1_ties(
        "max_abs negative",
        &input(&[0.5, -2.0, 1.0], &[3]),
        A::float_max_abs,
    );
    assert!(g[0] == 0.0 && g[2] == 0.0 && g[1] != 0.0);
    let g_max = check1_ties("max plain", &input(&[0.5, 2.0, 1.0], &[3]), A::float_max);
    assert_eq!(g[1], -g_max[1]);

    // Ties: the gradient goes, whole, to the index the inner argmax/argmin chooses.
    let tied = input(&[1.0, 3.0, 3.0, -1.0, -1.0, 0.0], &[6]);
    let argmax = ints(I::float_argmax(
        support::inner(tied.values.clone(), &[6]),
        0,
        IntDType::I64,
    ));
    let g = check(
        "max tie",
        std::slice::from_ref(&tied),
        |xs| A::float_max(xs[0].clone()),
        Fd::Skip("at a tie max is not differentiable (its one-sided derivatives differ)"),
    );
    assert_eq!(g[0].iter().filter(|v| **v != 0.0).count(), 1);
    assert!(g[0][argmax[0] as usize] != 0.0);
    let argmin = ints(I::float_argmin(
        support::inner(tied.values.clone(), &[6]),
        0,
        IntDType::I64,
    ));
    let g = check(
        "min tie",
        std::slice::from_ref(&tied),
        |xs| A::float_min(xs[0].clone()),
        Fd::Skip("at a tie min is not differentiable (its one-sided derivatives differ)"),
    );
    assert_eq!(g[0].iter().filter(|v| **v != 0.0).count(), 1);
    assert!(g[0][argmin[0] as usize] != 0.0);
}

#[test]
fn sort_and_topk() {
    let x = random(9, &[3, 5], 0.0);
    for dim in 0..2 {
        for descending in [false, true] {
            let g = check1_ties("sort", &x, |t| A::float_sort(t, dim, descending));
            assert!(
                g.iter().all(|v| *v != 0.0),
                "a permutation reaches every input"
            );
            check1_ties("sort_with_indices", &x, |t| {
                A::float_sort_with_indices(t, dim, descending, IntDType::I64).0
            });
        }
        for k in [1, 2] {
            let g = check1_ties("topk", &x, |t| A::float_topk(t, dim, k));
            let lanes = 15 / x.shape[dim];
            assert_eq!(g.iter().filter(|v| **v != 0.0).count(), lanes * k);
            check1_ties("topk_with_indices", &x, |t| {
                A::float_topk_with_indices(t, dim, k, IntDType::I64).0
            });
        }
    }
    let y = random(10, &[4, 3, 2], 0.0);
    check1_ties("sort of swapped", &y, |t| {
        A::float_sort(swapped(t), 2, true)
    });
    check1_ties("topk of swapped", &y, |t| A::float_topk(swapped(t), 1, 2));

    // Sorting [3, 1, 2]: the i-th output's weight goes to the input it came from.
    let v = input(&[3.0, 1.0, 2.0], &[3]);
    let sorted = check1_ties("sort exact", &v, |t| A::float_sort(t, 0, false));
    let out = check(
        "identity weights",
        std::slice::from_ref(&v),
        |xs| xs[0].clone(),
        Fd::Smooth,
    );
    // out[0] holds the loss weights r; sorted ascending picks x1, x2, x0.
    assert_eq!(sorted, vec![out[0][2], out[0][0], out[0][1]]);

    // Indices and values match the inner backend.
    let inner = support::inner(x.values.clone(), &x.shape);
    let t = A::float_set_require_grad(tensor(x.values.clone(), &x.shape), true);
    let (v, i) = A::float_sort_with_indices(t.clone(), 1, true, IntDType::I64);
    let (iv, ii) = I::float_sort_with_indices(inner.clone(), 1, true, IntDType::I64);
    assert_eq!(values(A::inner(v)), values(iv));
    assert_eq!(ints(i), ints(ii));
    let (v, i) = A::float_topk_with_indices(t, 1, 2, IntDType::I64);
    let (iv, ii) = I::float_topk_with_indices(inner, 1, 2, IntDType::I64);
    assert_eq!(shape_of(&v), vec![3, 2]);
    assert_eq!(values(A::inner(v)), values(iv));
    assert_eq!(ints(i), ints(ii));
}

#[test]
fn untracked_selections_and_reductions_match_the_inner_backend() {
    let x = random(11, &[3, 4], 0.0);
    let t = tensor(x.values.clone(), &x.shape);
    let inner = support::inner(x.values.clone(), &x.shape);
    type Inner = burn_backend::tensor::FloatTensor<I>;
    type Pair = (&'static str, fn(T) -> T, fn(Inner) -> Inner);
    let pairs: Vec<Pair> = vec![
        ("max", A::float_max, I::float_max),
        ("min", A::float_min, I::float_min),
        ("max_abs", A::float_max_abs, I::float_max_abs),
        ("sum", A::float_sum, I::float_sum),
        ("prod", A::float_prod, I::float_prod),
        (
            "max_dim",
            |t| A::float_max_dim(t, 1),
            |t| I::float_max_dim(t, 1),
        ),
        (
            "sort",
            |t| A::float_sort(t, 0, true),
            |t| I::float_sort(t, 0, true),
        ),
        (
            "topk",
            |t| A::float_topk(t, 1, 3),
            |t| I::float_topk(t, 1, 3),
        ),
        (
            "cummax",
            |t| A::float_cummax(t, 1),
            |t| I::float_cummax(t, 1),
        ),
    ];
    for (name, ours, theirs) in pairs {
        let out = ours(t.clone());
        assert!(!out.is_tracked(), "{name}: untracked in, untracked out");
        assert_eq!(
            values(A::inner(out)),
            values(theirs(inner.clone())),
            "{name}"
        );
    }
}

#[test]
fn matmul_with_batch_broadcasting() {
    let mut rng = Rng::new(12);
    let cases: [(&[usize], &[usize]); 5] = [
        (&[3, 4], &[4, 5]),
        (&[2, 3, 4], &[1, 4, 5]),
        (&[1, 3, 4], &[2, 4, 5]),
        (&[2, 1, 3, 4], &[3, 4, 2]),
        (&[2, 3, 4], &[2, 4, 5]),
    ];
    for (ls, rs) in cases {
        let l = Input::random(&mut rng, ls, 0.0);
        let r = Input::random(&mut rng, rs, 0.0);
        let g = check(
            "matmul",
            &[l.clone(), r.clone()],
            |xs| A::float_matmul(xs[0].clone(), xs[1].clone()),
            Fd::Smooth,
        );
        assert_eq!(g[0].len(), l.values.len());
        assert_eq!(g[1].len(), r.values.len());
        // One side constant: only the other side's gradient is computed.
        let rc = r.clone();
        let g = check(
            "matmul constant rhs",
            std::slice::from_ref(&l),
            |xs| A::float_matmul(xs[0].clone(), tensor(rc.values.clone(), &rc.shape)),
            Fd::Smooth,
        );
        assert!(g[0].iter().any(|v| *v != 0.0));
        let lc = l.clone();
        check(
            "matmul constant lhs",
            std::slice::from_ref(&r),
            |xs| A::float_matmul(tensor(lc.values.clone(), &lc.shape), xs[0].clone()),
            Fd::Smooth,
        );
    }
    // A transposed (non-contiguous) operand, and a tensor multiplied by itself.
    let a = Input::random(&mut rng, &[2, 4, 3], 0.0);
    let b = Input::random(&mut rng, &[4, 5], 0.0);
    check(
        "matmul of transposed",
        &[a.clone(), b],
        |xs| A::float_matmul(A::float_swap_dims(xs[0].clone(), 1, 2), xs[1].clone()),
        Fd::Smooth,
    );
    let sq = Input::random(&mut rng, &[4, 4], 0.0);
    check(
        "x @ x^T",
        &[sq],
        |xs| A::float_matmul(xs[0].clone(), A::float_transpose(xs[0].clone())),
        Fd::Smooth,
    );

    // Rank-mismatched operands: [2,3,4] x [4,5] (the rhs broadcasts over the batch).
    let l = Input::random(&mut rng, &[2, 3, 4], 0.0);
    let r = Input::random(&mut rng, &[4, 5], 0.0);
    let g = check(
        "matmul rank broadcast",
        &[l.clone(), r.clone()],
        |xs| A::float_matmul(xs[0].clone(), xs[1].clone()),
        Fd::Smooth,
    );
    assert_eq!(g[0].len(), l.values.len());
    assert_eq!(g[1].len(), r.values.len());
}

#[test]
fn cross_products() {
    let mut rng = Rng::new(13);
    let a = Input::random(&mut rng, &[4, 3], 0.0);
    let b = Input::random(&mut rng, &[4, 3], 0.0);
    check(
        "cross dim 1",
        &[a.clone(), b.clone()],
        |xs| A::float_cross(xs[0].clone(), xs[1].clone(), 1),
        Fd::Smooth,
    );
    let c = Input::random(&mut rng, &[3, 2, 2], 0.0);
    let d = Input::random(&mut rng, &[3, 2, 2], 0.0);
    check(
        "cross dim 0",
        &[c, d],
        |xs| A::float_cross(xs[0].clone(), xs[1].clone(), 0),
        Fd::Smooth,
    );
    let e = Input::random(&mut rng, &[3, 4], 0.0);
    check(
        "cross of transposed",
        &[e, b.clone()],
        |xs| A::float_cross(A::float_transpose(xs[0].clone()), xs[1].clone(), 1),
        Fd::Smooth,
    );
    // a x a = 0, so its gradient is zero too: b x g + g x b = 0.
    let g = check(
        "a x a",
        std::slice::from_ref(&a),
        |xs| A::float_cross(xs[0].clone(), xs[0].clone(), 1),
        Fd::Smooth,
    );
    assert!(g[0].iter().all(|v| v.abs() < 1e-15));
    // A constant side.
    let bc = b.clone();
    let g = check(
        "cross constant rhs",
        &[a],
        |xs| A::float_cross(xs[0].clone(), tensor(bc.values.clone(), &bc.shape), 1),
        Fd::Smooth,
    );
    assert!(g[0].iter().any(|v| *v != 0.0));
}
