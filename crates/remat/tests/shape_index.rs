//! Shape and indexing rules, checked from several sides (see `support`).

mod support;

use burn_backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn_backend::tensor::{BoolTensor, IntTensor};
use burn_backend::{TensorData, TensorMetadata};
use burn_std::{
    GridSampleOptions, GridSamplePaddingMode, IndexingUpdateOp, PadMode, Scalar, Shape, Slice,
};
use support::{A, Fd, Input, Rng, T, check};

fn ints(values: &[i64], shape: &[usize]) -> IntTensor<A> {
    A::int_from_data(
        TensorData::new(values.to_vec(), shape.to_vec()),
        &Default::default(),
    )
}

fn bools(values: &[bool], shape: &[usize]) -> BoolTensor<A> {
    A::bool_from_data(
        TensorData::new(values.to_vec(), shape.to_vec()),
        &Default::default(),
    )
}

fn s(start: isize, end: isize, step: isize) -> Slice {
    Slice::new(start, Some(end), step)
}

/// How an indexed update is checked against finite differences: `Min`/`Max` keep one of two
/// values, with a kink where they tie; the other updates are smooth.
fn update_fd(op: IndexingUpdateOp) -> Fd {
    match op {
        IndexingUpdateOp::Min | IndexingUpdateOp::Max => {
            Fd::Kinked("min/max of the old and new value: a kink where they tie")
        }
        _ => Fd::Smooth,
    }
}

fn dims(t: &T) -> Vec<usize> {
    t.shape().to_vec()
}

#[test]
fn layout_rules() {
    let mut rng = Rng::new(11);
    let x = Input::random(&mut rng, &[2, 3, 4], 0.0);
    let ops: Vec<(&str, support::Op1)> = vec![
        ("reshape", |t| A::float_reshape(t, Shape::new([6, 4]))),
        ("swap_dims", |t| A::float_swap_dims(t, 0, 2)),
        ("permute", |t| A::float_permute(t, &[1, 2, 0])),
        ("transpose", A::float_transpose),
        ("flip", |t| A::float_flip(t, &[0, 2])),
        ("repeat_dim", |t| A::float_repeat_dim(t, 1, 3)),
        ("unfold_overlapping", |t| A::float_unfold(t, 2, 3, 1)),
        ("unfold_strided", |t| A::float_unfold(t, 1, 2, 2)),
        ("to_device", |t| A::float_to_device(t, &Default::default())),
        // Layout ops chained: reshape of a permuted (non-contiguous) view.
        ("reshape_non_contiguous", |t| {
            A::float_reshape(A::float_permute(t, &[2, 0, 1]), Shape::new([4, 6]))
        }),
    ];
    for (name, op) in ops {
        let g = check(
            name,
            std::slice::from_ref(&x),
            |xs| op(xs[0].clone()),
            Fd::Smooth,
        );
        assert_eq!(g[0].len(), 24, "{name}: one gradient per input element");
    }
}

#[test]
fn layout_shapes_match_burn() {
    let x = support::tensor(vec![0.0; 24], &[2, 3, 4]);
    assert_eq!(dims(&A::float_unfold(x.clone(), 2, 3, 1)), [2, 3, 2, 3]);
    assert_eq!(dims(&A::float_repeat_dim(x.clone(), 1, 3)), [2, 9, 4]);
    assert_eq!(dims(&A::float_transpose(x)), [2, 4, 3]);
}

#[test]
fn expand_sums_the_broadcast_copies() {
    let mut rng = Rng::new(12);
    let x = Input::random(&mut rng, &[3, 1], 0.0);
    check(
        "expand",
        std::slice::from_ref(&x),
        |xs| A::float_expand(xs[0].clone(), Shape::new([2, 3, 4])),
        Fd::Smooth,
    );
    // With a plain sum as the loss, every element gets the number of its copies.
    let leaf = A::float_set_require_grad(support::tensor(x.values.clone(), &[3, 1]), true);
    let out = A::float_sum(A::float_expand(leaf.clone(), Shape::new([2, 3, 4])));
    let grads = <A as burn_backend::AutodiffBackend>::backward(out);
    let g = support::values(<A as burn_backend::AutodiffBackend>::grad(&leaf, &grads).unwrap());
    assert_eq!(g, vec![8.0; 3]);
}

#[test]
fn cat_of_several_and_many_inputs() {
    let mut rng = Rng::new(13);
    let a = Input::random(&mut rng, &[2, 3], 0.0);
    let b = Input::random(&mut rng, &[3, 2], 0.0);
    // The same input twice accumulates; `b` is transposed (non-contiguous).
    check(
        "cat",
        &[a.clone(), b],
        |xs| {
            let bt = A::float_swap_dims(xs[1].clone(), 0, 1);
            A::float_cat(vec![xs[0].clone(), bt, xs[0].clone()], 1)
        },
        Fd::Smooth,
    );
    // 40 inputs in one recorded op: more than the 32 its input sets hold inline.
    let g = check(
        "cat_many",
        std::slice::from_ref(&a),
        |xs| {
            let parts =
                (0..40).map(|i| A::float_mul_scalar(xs[0].clone(), Scalar::Float(i as f64)));
            A::float_cat(parts.collect(), 0)
        },
        Fd::Smooth,
    );
    assert_eq!(g[0].len(), 6);
}

#[test]
fn pad_modes() {
    let mut rng = Rng::new(14);
    let x = Input::random(&mut rng, &[3, 4], 0.0);
    for (name, mode) in [
        ("pad_constant", PadMode::Constant(2.5)),
        ("pad_reflect", PadMode::Reflect),
        ("pad_edge", PadMode::Edge),
    ] {
        let g = check(
            name,
            std::slice::from_ref(&x),
            |xs| A::float_pad(xs[0].clone(), &[(2, 1), (1, 3)], mode),
            Fd::Smooth,
        );
        assert_eq!(g[0].len(), 12);
    }
    // Edge padding of a non-contiguous input along one dim only.
    check(
        "pad_edge_transposed",
        std::slice::from_ref(&x),
        |xs| {
            A::float_pad(
                A::float_transpose(xs[0].clone()),
                &[(0, 0), (2, 2)],
                PadMode::Edge,
            )
        },
        Fd::Smooth,
    );
}

#[test]
fn slices_with_steps_and_non_contiguous_inputs() {
    let mut rng = Rng::new(15);
    let x = Input::random(&mut rng, &[4, 6], 0.0);
    let g = check(
        "slice_step",
        std::slice::from_ref(&x),
        |xs| A::float_slice(xs[0].clone(), &[s(1, 4, 1), s(0, 6, 2)]),
        Fd::Smooth,
    );
    // Positions outside the slice get no gradient.
    for row in 0..4 {
        for col in 0..6 {
            let inside = (1..4).contains(&row) && col % 2 == 0;
            assert_eq!(g[0][row * 6 + col] != 0.0, inside, "slice ({row}, {col})");
        }
    }
    check(
        "slice_non_contiguous",
        std::slice::from_ref(&x),
        |xs| {
            let t = A::float_swap_dims(xs[0].clone(), 0, 1);
            A::float_slice(t, &[s(1, 6, 2), s(0, 3, 1)])
        },
        Fd::Smooth,
    );
    check(
        "slice_of_flip",
        std::slice::from_ref(&x),
        |xs| {
            let t = A::float_flip(xs[0].clone(), &[0, 1]);
            A::float_slice(t, &[s(0, 3, 1), s(1, 6, 3)])
        },
        Fd::Smooth,
    );
    check(
        "slice_negative_step",
        std::slice::from_ref(&x),
        |xs| A::float_slice(xs[0].clone(), &[s(0, 4, -1), s(0, 6, 1)]),
        Fd::Smooth,
    );
}

#[test]
fn slice_assign_two_tracked_inputs() {
    let mut rng = Rng::new(16);
    let x = Input::random(&mut rng, &[4, 6], 0.0);
    let v = Input::random(&mut rng, &[2, 3], 0.0);
    let g = check(
        "slice_assign",
        &[x, v],
        |xs| A::float_slice_assign(xs[0].clone(), &[s(1, 3, 1), s(0, 6, 2)], xs[1].clone()),
        Fd::Smooth,
    );
    // Overwritten positions pass nothing back to the tensor.
    for row in 1..3 {
        for col in (0..6).step_by(2) {
            assert_eq!(g[0][row * 6 + col], 0.0);
        }
    }
    assert!(g[1].iter().all(|v| *v != 0.0));
}

#[test]
fn gather_and_select_with_duplicates() {
    let mut rng = Rng::new(17);
    let x = Input::random(&mut rng, &[3, 4], 0.0);
    let g = check(
        "gather",
        std::slice::from_ref(&x),
        |xs| {
            let idx = ints(&[0, 0, 3, 1, 1, 1, 2, 2, 0, 3, 3, 3], &[3, 4]);
            A::float_gather(1, xs[0].clone(), idx)
        },
        Fd::Smooth,
    );
    assert_eq!(g[0][2], 0.0, "never gathered");
    let g = check(
        "select",
        std::slice::from_ref(&x),
        |xs| A::float_select(xs[0].clone(), 0, ints(&[2, 0, 2, 2], &[4])),
        Fd::Smooth,
    );
    assert!(g[0][4..8].iter().all(|v| *v == 0.0), "row 1 never selected");
    check(
        "gather_nd",
        std::slice::from_ref(&x),
        |xs| A::float_gather_nd(xs[0].clone(), ints(&[0, 1, 2, 3, 0, 1], &[3, 2])),
        Fd::Smooth,
    );
    check(
        "gather_nd_rows",
        std::slice::from_ref(&x),
        |xs| A::float_gather_nd(xs[0].clone(), ints(&[2, 0, 2], &[3, 1])),
        Fd::Smooth,
    );
    // Duplicate reads accumulate: select the same row twice and compare to twice one read.
    let leaf = A::float_set_require_grad(support::tensor(x.values.clone(), &[3, 4]), true);
    let out = A::float_sum(A::float_select(leaf.clone(), 0, ints(&[1, 1], &[2])));
    let grads = <A as burn_backend::AutodiffBackend>::backward(out);
    let g = support::values(<A as burn_backend::AutodiffBackend>::grad(&leaf, &grads).unwrap());
    assert_eq!(&g[4..8], &[2.0; 4]);
    assert_eq!(&g[0..4], &[0.0; 4]);
}

#[test]
fn scatter_updates() {
    let mut rng = Rng::new(18);
    let x = Input::random(&mut rng, &[3, 4], 0.0);
    let v = Input::random(&mut rng, &[3, 2], 0.0);
    // Duplicate indices with Add: both values reach the same position.
    let g = check(
        "scatter_add_duplicates",
        &[x.clone(), v.clone()],
        |xs| {
            let idx = ints(&[1, 1, 0, 3, 2, 2], &[3, 2]);
            A::float_scatter(1, xs[0].clone(), idx, xs[1].clone(), IndexingUpdateOp::Add)
        },
        Fd::Smooth,
    );
    assert_eq!(g[0].len(), 12);
    for op in [
        IndexingUpdateOp::Assign,
        IndexingUpdateOp::Mul,
        IndexingUpdateOp::Min,
        IndexingUpdateOp::Max,
    ] {
        let g = check(
            &format!("scatter_{op:?}"),
            &[x.clone(), v.clone()],
            |xs| {
                let idx = ints(&[1, 3, 0, 2, 2, 0], &[3, 2]);
                A::float_scatter(1, xs[0].clone(), idx, xs[1].clone(), op)
            },
            update_fd(op),
        );
        if op == IndexingUpdateOp::Assign {
            assert_eq!(g[0][1], 0.0, "an overwritten position");
        }
    }
    // Only the values tracked: the tensor is an untracked constant.
    check(
        "scatter_values_only",
        std::slice::from_ref(&v),
        |xs| {
            let base = support::tensor(x.values.clone(), &[3, 4]);
            let idx = ints(&[1, 3, 0, 2, 2, 0], &[3, 2]);
            A::float_scatter(1, base, idx, xs[0].clone(), IndexingUpdateOp::Max)
        },
        update_fd(IndexingUpdateOp::Max),
    );
}

#[test]
fn select_assign_and_scatter_nd() {
    let mut rng = Rng::new(19);
    let x = Input::random(&mut rng, &[4, 3], 0.0);
    let v = Input::random(&mut rng, &[3, 3], 0.0);
    check(
        "select_assign_add_duplicates",
        &[x.clone(), v.clone()],
        |xs| {
            let idx = ints(&[2, 0, 2], &[3]);
            A::float_select_assign(xs[0].clone(), 0, idx, xs[1].clone(), IndexingUpdateOp::Add)
        },
        Fd::Smooth,
    );
    for op in [
        IndexingUpdateOp::Assign,
        IndexingUpdateOp::Mul,
        IndexingUpdateOp::Min,
        IndexingUpdateOp::Max,
    ] {
        check(
            &format!("select_assign_{op:?}"),
            &[x.clone(), v.clone()],
            |xs| {
                let idx = ints(&[3, 0, 1], &[3]);
                A::float_select_assign(xs[0].clone(), 0, idx, xs[1].clone(), op)
            },
            update_fd(op),
        );
    }
    let w = Input::random(&mut rng, &[2, 3], 0.0);
    for op in [
        IndexingUpdateOp::Add,
        IndexingUpdateOp::Assign,
        IndexingUpdateOp::Mul,
        IndexingUpdateOp::Max,
    ] {
        check(
            &format!("scatter_nd_{op:?}"),
            &[x.clone(), w.clone()],
            |xs| {
                let idx = ints(&[3, 1], &[2, 1]);
                A::float_scatter_nd(xs[0].clone(), idx, xs[1].clone(), op)
            },
            update_fd(op),
        );
    }
    check(
        "scatter_nd_add_duplicates",
        &[x, w],
        |xs| {
            let idx = ints(&[1, 1], &[2, 1]);
            A::float_scatter_nd(xs[0].clone(), idx, xs[1].clone(), IndexingUpdateOp::Add)
        },
        Fd::Smooth,
    );
}

#[test]
fn masks() {
    let mut rng = Rng::new(20);
    let x = Input::random(&mut rng, &[3, 4], 0.0);
    let y = Input::random(&mut rng, &[3, 4], 0.0);
    let row = Input::random(&mut rng, &[1, 4], 0.0);
    let pattern: Vec<bool> = (0..12).map(|i| i % 3 == 1).collect();
    let g = check(
        "mask_where",
        &[x.clone(), y],
        |xs| A::float_mask_where(xs[0].clone(), bools(&pattern, &[3, 4]), xs[1].clone()),
        Fd::Smooth,
    );
    for (i, chosen) in pattern.iter().enumerate() {
        assert_eq!(g[0][i] == 0.0, *chosen, "tensor gradient at {i}");
        assert_eq!(g[1][i] == 0.0, !*chosen, "value gradient at {i}");
    }
    check(
        "mask_where_broadcast_value",
        &[x.clone(), row],
        |xs| A::float_mask_where(xs[0].clone(), bools(&pattern, &[3, 4]), xs[1].clone()),
        Fd::Smooth,
    );
    let g = check(
        "mask_fill",
        std::slice::from_ref(&x),
        |xs| A::float_mask_fill(xs[0].clone(), bools(&pattern, &[3, 4]), Scalar::Float(-3.0)),
        Fd::Smooth,
    );
    assert!(pattern.iter().zip(&g[0]).all(|(m, g)| (*g == 0.0) == *m));
    let g = check(
        "mask_select",
        std::slice::from_ref(&x),
        |xs| {
            let t = A::float_swap_dims(xs[0].clone(), 0, 1);
            let t = A::float_reshape(t, Shape::new([3, 4]));
            burn_backend::read_sync(A::float_mask_select(t, bools(&pattern, &[3, 4])))
        },
        Fd::Smooth,
    );
    assert_eq!(g[0].iter().filter(|v| **v != 0.0).count(), 4);
}

#[test]
fn grid_sample_bilinear() {
    let mut rng = Rng::new(21);
    let x = Input::random(&mut rng, &[1, 2, 3, 4], 0.0);
    // Random sample points: bilinear interpolation is piecewise in the grid, with kinks where a
    // point crosses a pixel center.
    let grid = Input {
        values: rng.vec(2 * 3 * 2).into_iter().map(|v| 0.8 * v).collect(),
        shape: vec![1, 2, 3, 2],
    };
    for (name, options) in [
        ("grid_sample_zeros", GridSampleOptions::default()),
        (
            "grid_sample_border_aligned",
            GridSampleOptions::default()
                .with_padding_mode(GridSamplePaddingMode::Border)
                .with_align_corners(true),
        ),
    ] {
        let g = check(
            name,
            &[x.clone(), grid.clone()],
            |xs| A::float_grid_sample_2d(xs[0].clone(), xs[1].clone(), options.clone()),
            Fd::Kinked("bilinear in the grid: kinks where a point crosses a pixel center"),
        );
        assert!(
            g[1].iter().any(|v| *v != 0.0),
            "{name}: the grid gets a gradient"
        );
    }
}
