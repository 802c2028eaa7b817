//! Module ops (convolutions, pools, interpolation, attention, norms ...) and activations,
//! checked from several sides (see `support`).

mod support;

use burn_backend::ops::{
    ActivationOps, AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConvOptions,
    InterpolateMode, InterpolateOptions, ModuleOps, UnfoldOptions,
};
use burn_backend::tensor::{BoolTensor, IntTensor};
use burn_backend::{
    AutodiffBackend, TensorData, TensorMetadata,
    ops::{BoolTensorOps, FloatTensorOps, IntTensorOps},
};
use burn_std::{IntDType, Scalar};
use support::{A, Fd, Input, Rng, T, check, tensor, values};

/// Max pooling picks one element per window: kinks where two elements of a window tie.
const MAX_POOL: Fd = Fd::Kinked("the max of a window: kinks where two elements tie");

/// Flex's f64 `deform_conv2d_backward` runs its kernel in f32 (burn-flex 0.22.0,
/// `ops/module.rs`: "f64 backward computed via f32"): every gradient, even the bias's (a plain
/// sum), is off by about 1e-7 relative. The bilinear sampling also has kinks where a point
/// crosses a pixel center; the offsets below keep the sample points away from them.
const DEFORM: Fd = Fd::Within(
    1e-6,
    "Flex computes the f64 deform_conv2d backward in f32 (measured: up to 2.5e-7)",
);

/// A one-tensor op under test.
type Unary = fn(T) -> T;

/// Random inputs with the given shapes.
fn inputs(seed: u64, shapes: &[&[usize]]) -> Vec<Input> {
    let mut rng = Rng::new(seed);
    shapes
        .iter()
        .map(|s| Input::random(&mut rng, s, 0.0))
        .collect()
}

/// An int tensor of the backend under test.
fn ints(values: Vec<i64>, shape: &[usize]) -> IntTensor<A> {
    A::int_from_data(TensorData::new(values, shape.to_vec()), &Default::default())
}

/// A bool tensor of the backend under test.
fn bools(values: Vec<bool>, shape: &[usize]) -> BoolTensor<A> {
    A::bool_from_data(TensorData::new(values, shape.to_vec()), &Default::default())
}

/// Whether every gradient has a non-zero entry (the op passed something back).
fn all_nonzero(grads: &[Vec<f64>]) -> bool {
    grads.iter().all(|g| g.iter().any(|v| *v != 0.0))
}

#[test]
fn conv2d_strides_padding_dilation_groups_bias() {
    let cases: Vec<(&str, ConvOptions<2>, usize, bool)> = vec![
        (
            "plain+bias",
            ConvOptions::new([1, 1], [0, 0], [1, 1], 1),
            1,
            true,
        ),
        (
            "stride2 pad1",
            ConvOptions::new([2, 2], [1, 1], [1, 1], 1),
            1,
            false,
        ),
        (
            "dilation2 groups2",
            ConvOptions::new([1, 1], [1, 1], [2, 2], 2),
            2,
            true,
        ),
        (
            "asymmetric padding",
            ConvOptions::new_with_padding([1, 2], [(1, 0), (0, 1)], [1, 1], 1),
            1,
            true,
        ),
    ];
    for (name, options, groups, bias) in cases {
        let weight = [2, 2 / groups, 3, 3];
        let mut shapes: Vec<&[usize]> = vec![&[1, 2, 5, 5], &weight];
        if bias {
            shapes.push(&[2]);
        }
        let grads = check(
            name,
            &inputs(10, &shapes),
            |xs| {
                A::conv2d(
                    xs[0].clone(),
                    xs[1].clone(),
                    xs.get(2).cloned(),
                    options.clone(),
                )
            },
            Fd::Smooth,
        );
        assert!(all_nonzero(&grads), "{name}: every input gets a gradient");
    }
}

#[test]
fn conv2d_with_one_side_constant() {
    // Only x tracked (the weight is a constant), then only the weight.
    let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
    let mut rng = Rng::new(11);
    let w = rng.vec(2 * 2 * 3 * 3);
    let x = rng.vec(2 * 5 * 5);
    let gx = check(
        "conv2d x only",
        &inputs(12, &[&[1, 2, 5, 5]]),
        |xs| {
            let w = tensor(w.clone(), &[2, 2, 3, 3]);
            A::conv2d(xs[0].clone(), w, None, options.clone())
        },
        Fd::Smooth,
    );
    let gw = check(
        "conv2d weight only",
        &inputs(13, &[&[2, 2, 3, 3]]),
        |xs| {
            let x = tensor(x.clone(), &[1, 2, 5, 5]);
            A::conv2d(x, xs[0].clone(), None, options.clone())
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&gx) && all_nonzero(&gw));
}

#[test]
fn conv1d_conv3d_and_transposed() {
    let g = check(
        "conv1d",
        &inputs(20, &[&[1, 2, 6], &[3, 2, 3], &[3]]),
        |xs| {
            let o = ConvOptions::new([2], [1], [1], 1);
            A::conv1d(xs[0].clone(), xs[1].clone(), Some(xs[2].clone()), o)
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "conv3d",
        &inputs(21, &[&[1, 1, 3, 3, 3], &[2, 1, 2, 2, 2], &[2]]),
        |xs| {
            let o = ConvOptions::new([1, 1, 1], [1, 0, 0], [1, 1, 1], 1);
            A::conv3d(xs[0].clone(), xs[1].clone(), Some(xs[2].clone()), o)
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "conv_transpose1d",
        &inputs(22, &[&[1, 2, 4], &[2, 3, 3], &[3]]),
        |xs| {
            let o = ConvTransposeOptions::new([2], [1], [1], [1], 1);
            A::conv_transpose1d(xs[0].clone(), xs[1].clone(), Some(xs[2].clone()), o)
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    for (name, options, bias) in [
        (
            "conv_transpose2d",
            ConvTransposeOptions::new([2, 2], [1, 1], [1, 0], [1, 1], 1),
            true,
        ),
        (
            "conv_transpose2d groups",
            ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [2, 1], 2),
            false,
        ),
    ] {
        let mut shapes: Vec<&[usize]> = vec![&[1, 2, 3, 3], &[2, 2, 3, 3]];
        if bias {
            shapes.push(&[2]);
        }
        let g = check(
            name,
            &inputs(23, &shapes),
            |xs| {
                A::conv_transpose2d(
                    xs[0].clone(),
                    xs[1].clone(),
                    xs.get(2).cloned(),
                    options.clone(),
                )
            },
            Fd::Smooth,
        );
        assert!(all_nonzero(&g), "{name}");
    }
    let g = check(
        "conv_transpose3d",
        &inputs(24, &[&[1, 1, 2, 2, 2], &[1, 2, 2, 2, 2], &[2]]),
        |xs| {
            let o = ConvTransposeOptions::new([2, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1], 1);
            A::conv_transpose3d(xs[0].clone(), xs[1].clone(), Some(xs[2].clone()), o)
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
}

#[test]
fn deform_conv2d_all_inputs() {
    // Offsets in (0.1, 0.5) keep the sample points away from pixel centers, where the
    // bilinear sampling is not differentiable.
    let mut ins = inputs(
        30,
        &[
            &[1, 1, 4, 4],
            &[1, 8, 3, 3],
            &[1, 1, 2, 2],
            &[1, 4, 3, 3],
            &[1],
        ],
    );
    for v in &mut ins[1].values {
        *v = 0.3 + 0.2 * *v;
    }
    let options = DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1);
    let g = check(
        "deform_conv2d",
        &ins,
        |xs| {
            A::deform_conv2d(
                xs[0].clone(),
                xs[1].clone(),
                xs[2].clone(),
                Some(xs[3].clone()),
                Some(xs[4].clone()),
                options.clone(),
            )
        },
        DEFORM,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "deform_conv2d no mask/bias",
        &ins[..3],
        |xs| {
            A::deform_conv2d(
                xs[0].clone(),
                xs[1].clone(),
                xs[2].clone(),
                None,
                None,
                options.clone(),
            )
        },
        DEFORM,
    );
    assert!(all_nonzero(&g));
}

#[test]
fn deform_conv2d_backward_untracked_delegates() {
    let ins = inputs(
        31,
        &[&[1, 1, 4, 4], &[1, 8, 3, 3], &[1, 1, 2, 2], &[1, 1, 3, 3]],
    );
    let t: Vec<T> = ins
        .iter()
        .map(|i| tensor(i.values.clone(), &i.shape))
        .collect();
    let options = DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1);
    let out = A::deform_conv2d_backward(
        t[0].clone(),
        t[1].clone(),
        t[2].clone(),
        None,
        None,
        t[3].clone(),
        options,
    );
    assert!(!out.x_grad.is_tracked() && !out.weight_grad.is_tracked());
    assert_eq!(out.weight_grad.shape().dims::<4>(), [1, 1, 2, 2]);
    assert!(values(A::inner(out.x_grad)).iter().any(|v| *v != 0.0));
}

#[test]
#[should_panic(expected = "double backward through deform_conv2d is not supported")]
fn deform_conv2d_backward_tracked_panics() {
    let ins = inputs(
        32,
        &[&[1, 1, 4, 4], &[1, 8, 3, 3], &[1, 1, 2, 2], &[1, 1, 3, 3]],
    );
    let t: Vec<T> = ins
        .iter()
        .map(|i| tensor(i.values.clone(), &i.shape))
        .collect();
    let grad = A::float_set_require_grad(t[3].clone(), true);
    let options = DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1);
    let _ = A::deform_conv2d_backward(
        t[0].clone(),
        t[1].clone(),
        t[2].clone(),
        None,
        None,
        grad,
        options,
    );
}

#[test]
fn avg_and_adaptive_pools() {
    for (name, cip) in [
        ("avg_pool2d incl pad", true),
        ("avg_pool2d excl pad", false),
    ] {
        let g = check(
            name,
            &inputs(40, &[&[1, 2, 5, 5]]),
            |xs| A::avg_pool2d(xs[0].clone(), [3, 2], [2, 1], [1, 1], cip, false),
            Fd::Smooth,
        );
        assert!(all_nonzero(&g), "{name}");
    }
    let g = check(
        "avg_pool1d",
        &inputs(41, &[&[1, 2, 7]]),
        |xs| A::avg_pool1d(xs[0].clone(), 3, 2, 1, true, false),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "adaptive_avg_pool1d",
        &inputs(42, &[&[1, 2, 7]]),
        |xs| A::adaptive_avg_pool1d(xs[0].clone(), 3),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "adaptive_avg_pool2d",
        &inputs(43, &[&[1, 2, 5, 5]]),
        |xs| A::adaptive_avg_pool2d(xs[0].clone(), [2, 3]),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "adaptive_avg_pool3d",
        &inputs(44, &[&[1, 1, 3, 4, 5]]),
        |xs| A::adaptive_avg_pool3d(xs[0].clone(), [2, 2, 3]),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
}

#[test]
fn max_pools() {
    let g = check(
        "max_pool2d",
        &inputs(50, &[&[1, 2, 5, 5]]),
        |xs| A::max_pool2d(xs[0].clone(), [2, 2], [2, 2], [1, 1], [1, 1], false),
        MAX_POOL,
    );
    // Each window sends its gradient to one position.
    let hits = g[0].iter().filter(|v| **v != 0.0).count();
    assert_eq!(hits, 2 * 3 * 3, "one position per window");
    let g = check(
        "max_pool2d dilated",
        &inputs(51, &[&[1, 1, 6, 6]]),
        |xs| A::max_pool2d(xs[0].clone(), [2, 2], [1, 1], [0, 0], [2, 2], false),
        MAX_POOL,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "max_pool2d_with_indices",
        &inputs(52, &[&[1, 2, 4, 4]]),
        |xs| {
            let out = A::max_pool2d_with_indices(
                xs[0].clone(),
                [2, 2],
                [1, 1],
                [0, 0],
                [1, 1],
                false,
                IntDType::I64,
            );
            assert_eq!(out.indices.shape().dims::<4>(), [1, 2, 3, 3]);
            out.output
        },
        MAX_POOL,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "max_pool1d",
        &inputs(53, &[&[1, 2, 7]]),
        |xs| A::max_pool1d(xs[0].clone(), 3, 2, 1, 1, false),
        MAX_POOL,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "max_pool1d_with_indices",
        &inputs(54, &[&[1, 2, 7]]),
        |xs| A::max_pool1d_with_indices(xs[0].clone(), 2, 1, 0, 2, false, IntDType::I64).output,
        MAX_POOL,
    );
    assert!(all_nonzero(&g));
}

#[test]
fn pool_backward_kernels_are_differentiable_in_grad() {
    // x only shapes the result: it is an untracked constant here; grad is the checked input.
    let mut rng = Rng::new(60);
    let x = rng.vec(2 * 5 * 5);
    let xt = || tensor(x.clone(), &[1, 2, 5, 5]);
    let g = check(
        "avg_pool2d_backward",
        &inputs(61, &[&[1, 2, 3, 3]]),
        |xs| A::avg_pool2d_backward(xt(), xs[0].clone(), [3, 3], [2, 2], [1, 1], false, false),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "adaptive_avg_pool2d_backward",
        &inputs(62, &[&[1, 2, 2, 3]]),
        |xs| A::adaptive_avg_pool2d_backward(xt(), xs[0].clone()),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let x3 = rng.vec(3 * 4 * 5);
    let g = check(
        "adaptive_avg_pool3d_backward",
        &inputs(63, &[&[1, 1, 2, 2, 3]]),
        |xs| A::adaptive_avg_pool3d_backward(tensor(x3.clone(), &[1, 1, 3, 4, 5]), xs[0].clone()),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let pooled =
        A::max_pool2d_with_indices(xt(), [2, 2], [2, 2], [0, 0], [1, 1], false, IntDType::I64);
    let g = check(
        "max_pool2d_with_indices_backward",
        &inputs(64, &[&[1, 2, 2, 2]]),
        |xs| {
            A::max_pool2d_with_indices_backward(
                xt(),
                [2, 2],
                [2, 2],
                [0, 0],
                [1, 1],
                false,
                xs[0].clone(),
                pooled.indices.clone(),
            )
            .x_grad
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    for mode in [InterpolateMode::Nearest, InterpolateMode::Bilinear] {
        let g = check(
            "interpolate_backward",
            &inputs(65, &[&[1, 2, 7, 3]]),
            |xs| {
                A::interpolate_backward(
                    xt(),
                    xs[0].clone(),
                    [7, 3],
                    InterpolateOptions::new(mode.clone()),
                )
            },
            Fd::Smooth,
        );
        assert!(all_nonzero(&g), "{mode:?}");
    }
    // Untracked arguments: the inner kernel's result, untracked.
    let out = A::avg_pool2d_backward(
        xt(),
        tensor(vec![1.0; 18], &[1, 2, 3, 3]),
        [3, 3],
        [2, 2],
        [1, 1],
        true,
        false,
    );
    assert!(!out.is_tracked());
}

#[test]
fn interpolate_modes() {
    for mode in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
    ] {
        for align_corners in [true, false] {
            let mut options = InterpolateOptions::new(mode.clone());
            options.align_corners = align_corners;
            let name = format!("interpolate {mode:?} align={align_corners}");
            let g = check(
                &name,
                &inputs(70, &[&[1, 2, 3, 4]]),
                |xs| A::interpolate(xs[0].clone(), [5, 3], options.clone()),
                Fd::Smooth,
            );
            assert!(all_nonzero(&g), "{name}");
        }
    }
}

#[test]
fn unfold_and_fold() {
    for (name, options) in [
        ("plain", UnfoldOptions::new([1, 1], [0, 0], [1, 1])),
        (
            "strided padded dilated",
            UnfoldOptions::new([2, 1], [1, 1], [1, 2]),
        ),
    ] {
        let g = check(
            &format!("unfold4d {name}"),
            &inputs(80, &[&[1, 2, 5, 5]]),
            |xs| A::unfold4d(xs[0].clone(), [2, 3], options.clone()),
            Fd::Smooth,
        );
        assert!(all_nonzero(&g), "{name}");
    }
    // 2 channels x 2x2 kernel = 8 rows; a 4x4 output with stride 2 has 4 blocks.
    let g = check(
        "fold4d",
        &inputs(81, &[&[1, 8, 4]]),
        |xs| {
            A::fold4d(
                xs[0].clone(),
                [4, 4],
                [2, 2],
                UnfoldOptions::new([2, 2], [0, 0], [1, 1]),
            )
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "fold4d overlapping",
        &inputs(82, &[&[1, 4, 9]]),
        |xs| {
            A::fold4d(
                xs[0].clone(),
                [4, 4],
                [2, 2],
                UnfoldOptions::new([1, 1], [0, 0], [1, 1]),
            )
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
}

#[test]
fn attention_variants() {
    let shapes: Vec<&[usize]> = vec![&[1, 2, 3, 4], &[1, 2, 5, 4], &[1, 2, 5, 4]];
    let plain = AttentionModuleOptions::default();
    let g = check(
        "attention",
        &inputs(90, &shapes),
        |xs| {
            A::attention(
                xs[0].clone(),
                xs[1].clone(),
                xs[2].clone(),
                None,
                None,
                plain,
            )
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    // Mask out the last two keys of every row, and one whole row of head 1.
    let mut mask = vec![false; 2 * 3 * 5];
    for (i, m) in mask.iter_mut().enumerate() {
        let (head, row, col) = (i / 15, (i / 5) % 3, i % 5);
        *m = col >= 3 || (head == 1 && row == 0);
    }
    let g = check(
        "attention masked",
        &inputs(91, &shapes),
        |xs| {
            let mask = bools(mask.clone(), &[1, 2, 3, 5]);
            A::attention(
                xs[0].clone(),
                xs[1].clone(),
                xs[2].clone(),
                Some(mask),
                None,
                plain,
            )
        },
        Fd::Smooth,
    );
    // Masked keys get no gradient for k and v.
    for (h, j) in [(0, 3), (0, 4), (1, 3), (1, 4)] {
        for d in 0..4 {
            assert_eq!(
                g[1][(h * 5 + j) * 4 + d],
                0.0,
                "masked key gets no gradient"
            );
            assert_eq!(
                g[2][(h * 5 + j) * 4 + d],
                0.0,
                "masked value gets no gradient"
            );
        }
    }
    // A fully masked row yields zeros, so its query gets no gradient.
    assert!(g[0][12..16].iter().all(|v| *v == 0.0));
    let biased = AttentionModuleOptions {
        scale: Some(0.7),
        softcap: Some(2.0),
        is_causal: false,
    };
    let mut with_bias = shapes.clone();
    with_bias.push(&[1, 2, 3, 5]);
    let g = check(
        "attention bias softcap",
        &inputs(92, &with_bias),
        |xs| {
            A::attention(
                xs[0].clone(),
                xs[1].clone(),
                xs[2].clone(),
                None,
                Some(xs[3].clone()),
                biased,
            )
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let causal = AttentionModuleOptions {
        is_causal: true,
        ..Default::default()
    };
    let g = check(
        "attention causal",
        &inputs(93, &shapes),
        |xs| {
            A::attention(
                xs[0].clone(),
                xs[1].clone(),
                xs[2].clone(),
                None,
                None,
                causal,
            )
        },
        Fd::Smooth,
    );
    // With 3 queries over 5 keys aligned bottom-right, query 0 sees keys 0..=2: key 4 is
    // seen only by query 2, and every key is seen by someone.
    assert!(all_nonzero(&g));
}

#[test]
fn embedding_and_linear() {
    let g = check(
        "embedding",
        &inputs(100, &[&[5, 3]]),
        |xs| A::embedding(xs[0].clone(), ints(vec![0, 2, 2, 4, 1, 0], &[2, 3])),
        Fd::Smooth,
    );
    // Row 3 is never looked up.
    assert!(g[0][9..12].iter().all(|v| *v == 0.0));
    assert!(g[0][6..9].iter().all(|v| *v != 0.0));
    let g = check(
        "linear+bias",
        &inputs(101, &[&[2, 2, 3], &[3, 4], &[4]]),
        |xs| A::linear(xs[0].clone(), xs[1].clone(), Some(xs[2].clone())),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "linear",
        &inputs(102, &[&[2, 3], &[3, 4]]),
        |xs| A::linear(xs[0].clone(), xs[1].clone(), None),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
}

#[test]
fn norms() {
    let g = check(
        "batch_norm_train",
        &inputs(110, &[&[3, 2, 4], &[2], &[2]]),
        |xs| {
            let out = A::batch_norm_train(xs[0].clone(), xs[1].clone(), xs[2].clone(), 1e-5);
            assert!(!out.mean.is_tracked() && !out.variance.is_tracked());
            out.output
        },
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "layer_norm+beta",
        &inputs(111, &[&[2, 3, 4], &[4], &[4]]),
        |xs| A::layer_norm(xs[0].clone(), xs[1].clone(), Some(xs[2].clone()), 1e-5),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
    let g = check(
        "layer_norm",
        &inputs(112, &[&[3, 5], &[5]]),
        |xs| A::layer_norm(xs[0].clone(), xs[1].clone(), None, 1e-5),
        Fd::Smooth,
    );
    assert!(all_nonzero(&g));
}

#[test]
fn activations() {
    let x = inputs(120, &[&[3, 4]]);
    const SMOOTH: Fd = Fd::Smooth;
    const AT_ZERO: Fd = Fd::Kinked("a kink at 0");
    let ops: Vec<(&str, Unary, Fd)> = vec![
        ("relu", A::relu, AT_ZERO),
        ("gelu", A::gelu, SMOOTH),
        ("sigmoid", A::sigmoid, SMOOTH),
        ("log_sigmoid", A::log_sigmoid, SMOOTH),
        (
            "leaky_relu",
            |t| A::leaky_relu(t, Scalar::Float(0.1)),
            AT_ZERO,
        ),
        (
            "hard_sigmoid",
            |t| A::hard_sigmoid(t, Scalar::Float(0.8), Scalar::Float(0.5)),
            Fd::Kinked("kinks where 0.8 x + 0.5 reaches 0 or 1"),
        ),
        ("softmax", |t| A::softmax(t, 1), SMOOTH),
        ("softmax dim0", |t| A::softmax(t, 0), SMOOTH),
        ("log_softmax", |t| A::log_softmax(t, 1), SMOOTH),
    ];
    for (name, op, fd) in ops {
        let g = check(name, &x, |xs| op(xs[0].clone()), fd);
        assert!(all_nonzero(&g), "{name}");
    }
    // relu passes the gradient exactly where the input is positive.
    let g = check("relu mask", &x, |xs| A::relu(xs[0].clone()), AT_ZERO);
    for (v, d) in x[0].values.iter().zip(&g[0]) {
        assert_eq!(*v > 0.0, *d != 0.0);
    }
}
