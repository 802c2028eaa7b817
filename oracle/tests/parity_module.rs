//! Backend-level parity of module ops: convolutions (1d/2d/3d, transposed, deformable),
//! pools (avg/max/adaptive, 1d/2d/3d), interpolation, grid sampling, embedding, linear,
//! attention (masks, bias, softcap, causal), layer norm and batch norm (the inference form
//! through `ModuleOps`' default and the training form). Sizes are tiny: NdArray's
//! convolution backward is a direct loop.

use burn_backend::AutodiffBackend;
use burn_backend::IntDType;
use burn_backend::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConvOptions,
    GridSampleOptions, GridSamplePaddingMode, InterpolateMode, InterpolateOptions, UnfoldOptions,
};
use burn_backend::tensor::FloatTensor;
use burn_flex::Flex;
use remat_oracle::backend::{
    Leaf, RTOL, bools, compare, compare_ndarray_nondeterministic, compare_on, ints,
};
use remat_oracle::program;

fn leaves(seed: u64, shapes: &[&[usize]]) -> Vec<Leaf> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| Leaf::synthetic(s, seed + i as u64, 0.0))
        .collect()
}

/// Leaf 0 read with its last two dims swapped (a non-contiguous input).
fn xt<B: AutodiffBackend>(x: &[FloatTensor<B>]) -> FloatTensor<B> {
    let rank = burn_backend::TensorMetadata::shape(&x[0]).num_dims();
    B::float_swap_dims(x[0].clone(), rank - 2, rank - 1)
}

#[test]
fn conv1d_2d_3d() {
    compare(
        "conv1d stride/pad/dilation + bias",
        &program!(|B, x| {
            let o = ConvOptions::new([2], [1], [2], 1);
            B::conv1d(xt::<B>(x), x[1].clone(), Some(x[2].clone()), o)
        }),
        &leaves(1000, &[&[2, 6, 2], &[3, 2, 2], &[3]]),
    );
    for (i, (name, options, groups, bias)) in [
        (
            "conv2d plain + bias",
            ConvOptions::new([1, 1], [0, 0], [1, 1], 1),
            1,
            true,
        ),
        (
            "conv2d stride 2 pad 1",
            ConvOptions::new([2, 2], [1, 1], [1, 1], 1),
            1,
            false,
        ),
        (
            "conv2d dilation 2 groups 2",
            ConvOptions::new([1, 1], [1, 1], [2, 2], 2),
            2,
            true,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let weight = [2, 2 / groups, 2, 2];
        let mut shapes: Vec<&[usize]> = vec![&[1, 2, 4, 4], &weight];
        if bias {
            shapes.push(&[2]);
        }
        compare(
            name,
            &program!(o: ConvOptions<2> = options; |B, x| {
                B::conv2d(xt::<B>(x), x[1].clone(), x.get(2).cloned(), o.clone())
            }),
            &leaves(1010 + 5 * i as u64, &shapes),
        );
    }
    compare(
        "conv3d",
        &program!(|B, x| {
            let o = ConvOptions::new([1, 1, 1], [1, 0, 0], [1, 1, 1], 1);
            B::conv3d(x[0].clone(), x[1].clone(), Some(x[2].clone()), o)
        }),
        &leaves(1030, &[&[1, 1, 2, 3, 3], &[2, 1, 2, 2, 2], &[2]]),
    );
}

#[test]
fn transposed_convolutions() {
    compare(
        "conv_transpose1d",
        &program!(|B, x| {
            let o = ConvTransposeOptions::new([2], [1], [1], [1], 1);
            B::conv_transpose1d(x[0].clone(), x[1].clone(), Some(x[2].clone()), o)
        }),
        &leaves(1040, &[&[1, 2, 4], &[2, 3, 3], &[3]]),
    );
    compare(
        "conv_transpose2d stride/pad/out-pad + bias",
        &program!(|B, x| {
            let o = ConvTransposeOptions::new([2, 2], [1, 1], [1, 0], [1, 1], 1);
            B::conv_transpose2d(xt::<B>(x), x[1].clone(), Some(x[2].clone()), o)
        }),
        &leaves(1045, &[&[1, 2, 3, 3], &[2, 2, 2, 2], &[2]]),
    );
    compare(
        "conv_transpose2d groups dilation",
        &program!(|B, x| {
            let o = ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [2, 1], 2);
            B::conv_transpose2d(x[0].clone(), x[1].clone(), None, o)
        }),
        &leaves(1050, &[&[1, 2, 3, 3], &[2, 1, 2, 2]]),
    );
    compare(
        "conv_transpose3d",
        &program!(|B, x| {
            let o = ConvTransposeOptions::new([2, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1], 1);
            B::conv_transpose3d(x[0].clone(), x[1].clone(), Some(x[2].clone()), o)
        }),
        &leaves(1055, &[&[1, 1, 2, 2, 2], &[1, 2, 2, 2, 2], &[2]]),
    );
}

#[test]
fn deform_conv2d() {
    // Offsets scaled small and shifted keep sampling points inside cells (bilinear sampling
    // is not differentiable across cell borders).
    let mut ls = leaves(
        1060,
        &[
            &[1, 1, 4, 4],
            &[1, 8, 3, 3],
            &[1, 1, 2, 2],
            &[1, 4, 3, 3],
            &[1],
        ],
    );
    ls[1] = ls[1].clone().map(|v| 0.3 + 0.2 * v);
    compare_ndarray_nondeterministic(
        "deform_conv2d mask + bias",
        &program!(|B, x| {
            B::deform_conv2d(
                x[0].clone(),
                x[1].clone(),
                x[2].clone(),
                Some(x[3].clone()),
                Some(x[4].clone()),
                DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1),
            )
        }),
        &ls,
        RTOL,
    );
    compare_ndarray_nondeterministic(
        "deform_conv2d plain",
        &program!(|B, x| {
            B::deform_conv2d(
                x[0].clone(),
                x[1].clone(),
                x[2].clone(),
                None,
                None,
                DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1),
            )
        }),
        &ls[..3],
        RTOL,
    );
}

const POOLS: [&str; 14] = [
    "avg_pool1d",
    "avg_pool1d excl pad ceil",
    "avg_pool2d incl pad",
    "avg_pool2d excl pad",
    "avg_pool2d ceil",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "max_pool1d",
    "max_pool1d_with_indices dilated",
    "max_pool2d padded",
    "max_pool2d dilated",
    "max_pool2d_with_indices",
    "max_pool2d ceil",
];

fn pool<B: AutodiffBackend>(k: usize, x: &[FloatTensor<B>]) -> FloatTensor<B> {
    // x[0]: [1, 2, 5, 5] (read transposed), x[1]: [1, 2, 7], x[2]: [1, 1, 3, 4, 5].
    let a = xt::<B>(x);
    let l = x[1].clone();
    match k {
        0 => B::avg_pool1d(l, 3, 2, 1, true, false),
        1 => B::avg_pool1d(l, 3, 2, 1, false, true),
        2 => B::avg_pool2d(a, [3, 2], [2, 1], [1, 1], true, false),
        3 => B::avg_pool2d(a, [3, 2], [2, 1], [1, 1], false, false),
        4 => B::avg_pool2d(a, [2, 2], [2, 2], [0, 0], true, true),
        5 => B::adaptive_avg_pool1d(l, 3),
        6 => B::adaptive_avg_pool2d(a, [2, 3]),
        7 => B::adaptive_avg_pool3d(x[2].clone(), [2, 2, 3]),
        8 => B::max_pool1d(l, 3, 2, 1, 1, false),
        9 => B::max_pool1d_with_indices(l, 2, 1, 0, 2, false, IntDType::I64).output,
        10 => B::max_pool2d(a, [2, 2], [2, 2], [1, 1], [1, 1], false),
        11 => B::max_pool2d(a, [2, 2], [1, 1], [0, 0], [2, 2], false),
        12 => {
            B::max_pool2d_with_indices(a, [2, 2], [1, 1], [0, 0], [1, 1], false, IntDType::I64)
                .output
        }
        _ => B::max_pool2d(a, [2, 2], [2, 2], [0, 0], [1, 1], true),
    }
}

#[test]
fn pools() {
    for (k, name) in POOLS.iter().enumerate() {
        compare(
            name,
            &program!(k: usize = k; |B, x| pool::<B>(*k, x)),
            &leaves(
                1100 + 3 * k as u64,
                &[&[1, 2, 5, 5], &[1, 2, 7], &[1, 1, 3, 4, 5]],
            ),
        );
    }
}

#[test]
fn interpolate_modes() {
    for (i, mode) in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
    ]
    .into_iter()
    .enumerate()
    {
        for align_corners in [true, false] {
            let mut options = InterpolateOptions::new(mode.clone());
            options.align_corners = align_corners;
            for (j, size) in [[5, 3], [2, 7]].into_iter().enumerate() {
                let name = format!("interpolate {mode:?} align={align_corners} to {size:?}");
                let program = program!(p: (InterpolateOptions, [usize; 2]) = (options.clone(), size); |B, x| {
                    B::interpolate(xt::<B>(x), p.1, p.0.clone())
                });
                let leaves = leaves(1150 + 10 * i as u64 + j as u64, &[&[1, 2, 4, 3]]);
                // NdArray's own interpolate backward supports nearest only (it panics for
                // bilinear and bicubic, whichever engine is on top).
                if matches!(mode, InterpolateMode::Nearest) {
                    compare(&name, &program, &leaves);
                } else {
                    compare_on::<Flex>(&format!("{name} (Flex)"), &program, &leaves, RTOL);
                }
            }
        }
    }
}

#[test]
fn grid_sample_2d() {
    // Grid points in (-0.95, 0.95), away from pixel centres (where bilinear weights kink)
    // for both align_corners settings, plus a few points outside [-1, 1] to exercise padding.
    let mut grid = Leaf::synthetic(&[1, 3, 2, 2], 1200, 0.0).map(|v| 0.95 * v + 0.013);
    grid.values[0] = 1.17;
    grid.values[5] = -1.21;
    for (name, padding) in [
        ("zeros", GridSamplePaddingMode::Zeros),
        ("border", GridSamplePaddingMode::Border),
        ("reflection", GridSamplePaddingMode::Reflection),
    ] {
        for align_corners in [true, false] {
            let mut options =
                GridSampleOptions::new(InterpolateMode::Bilinear).with_padding_mode(padding);
            options.align_corners = align_corners;
            compare(
                &format!("grid_sample_2d bilinear {name} align={align_corners}"),
                &program!(o: GridSampleOptions = options; |B, x| {
                    B::float_grid_sample_2d(xt::<B>(x), x[1].clone(), o.clone())
                }),
                &[Leaf::synthetic(&[1, 2, 4, 3], 1201, 0.0), grid.clone()],
            );
        }
    }
}

#[test]
fn embedding_and_linear() {
    compare(
        "embedding (repeated ids)",
        &program!(|B, x| B::embedding(x[0].clone(), ints::<B>(vec![0, 2, 2, 4, 1, 0], &[2, 3]))),
        &leaves(1300, &[&[5, 3]]),
    );
    compare(
        "linear + bias",
        &program!(|B, x| B::linear(x[0].clone(), x[1].clone(), Some(x[2].clone()))),
        &leaves(1305, &[&[2, 2, 3], &[3, 4], &[4]]),
    );
    compare(
        "linear transposed input, transposed weight",
        &program!(|B, x| B::linear(xt::<B>(x), B::float_transpose(x[1].clone()), None)),
        &leaves(1310, &[&[3, 2], &[4, 3]]),
    );
}

#[test]
fn attention() {
    let shapes: &[&[usize]] = &[&[1, 2, 3, 4], &[1, 2, 5, 4], &[1, 2, 5, 4], &[1, 2, 3, 5]];
    compare(
        "attention",
        &program!(|B, x| {
            B::attention(
                x[0].clone(),
                x[1].clone(),
                x[2].clone(),
                None,
                None,
                Default::default(),
            )
        }),
        &leaves(1400, &shapes[..3]),
    );
    compare(
        "attention masked",
        &program!(|B, x| {
            // Masks out the last key everywhere and key 1 for head 1 (no row fully masked).
            let mask = (0..30)
                .map(|i| i % 5 == 4 || (i >= 15 && i % 5 == 1))
                .collect();
            let mask = bools::<B>(mask, &[1, 2, 3, 5]);
            B::attention(
                x[0].clone(),
                x[1].clone(),
                x[2].clone(),
                Some(mask),
                None,
                Default::default(),
            )
        }),
        &leaves(1410, &shapes[..3]),
    );
    compare(
        "attention bias scale softcap",
        &program!(|B, x| {
            let o = AttentionModuleOptions {
                scale: Some(0.7),
                softcap: Some(2.0),
                is_causal: false,
            };
            B::attention(
                x[0].clone(),
                x[1].clone(),
                x[2].clone(),
                None,
                Some(x[3].clone()),
                o,
            )
        }),
        &leaves(1420, shapes),
    );
    compare(
        "attention causal, transposed query",
        &program!(|B, x| {
            let o = AttentionModuleOptions {
                is_causal: true,
                ..Default::default()
            };
            let q = B::float_swap_dims(x[0].clone(), 2, 3);
            B::attention(q, x[1].clone(), x[2].clone(), None, None, o)
        }),
        &leaves(1430, &[&[1, 2, 4, 3], &[1, 2, 5, 4], &[1, 2, 5, 4]]),
    );
}

#[test]
fn norms() {
    compare(
        "layer_norm + beta",
        &program!(|B, x| B::layer_norm(x[0].clone(), x[1].clone(), Some(x[2].clone()), 1e-5)),
        &leaves(1500, &[&[2, 3, 4], &[4], &[4]]),
    );
    compare(
        "layer_norm transposed input",
        &program!(|B, x| B::layer_norm(xt::<B>(x), x[1].clone(), None, 1e-5)),
        &leaves(1505, &[&[5, 3], &[5]]),
    );
    compare(
        "batch_norm_train",
        &program!(
            |B, x| B::batch_norm_train(x[0].clone(), x[1].clone(), x[2].clone(), 1e-5).output
        ),
        &leaves(1510, &[&[3, 2, 4], &[2], &[2]]),
    );
    compare(
        "batch_norm_train 4d",
        &program!(
            |B, x| B::batch_norm_train(x[0].clone(), x[1].clone(), x[2].clone(), 1e-5).output
        ),
        &leaves(1515, &[&[2, 3, 2, 2], &[3], &[3]]),
    );
    // Inference form (ModuleOps' default decomposition), every input tracked; variance
    // positive.
    let mut ls = leaves(1520, &[&[3, 2, 4], &[2], &[2], &[2], &[2]]);
    ls[4] = ls[4].clone().map(|v| 1.2 + v);
    compare(
        "batch_norm (inference)",
        &program!(|B, x| {
            B::batch_norm(
                x[0].clone(),
                x[1].clone(),
                x[2].clone(),
                x[3].clone(),
                x[4].clone(),
                1e-5,
            )
        }),
        &ls,
    );
}

#[test]
fn unfold4d_and_fold4d() {
    for (i, options) in [
        UnfoldOptions::new([1, 1], [0, 0], [1, 1]),
        UnfoldOptions::new([2, 1], [1, 1], [1, 2]),
    ]
    .into_iter()
    .enumerate()
    {
        compare(
            &format!("unfold4d {options:?}"),
            &program!(o: UnfoldOptions = options; |B, x| B::unfold4d(xt::<B>(x), [2, 3], o.clone())),
            &leaves(1700 + i as u64, &[&[1, 2, 5, 4]]),
        );
    }
    compare(
        "fold4d overlapping",
        &program!(|B, x| {
            B::fold4d(
                x[0].clone(),
                [4, 4],
                [2, 2],
                UnfoldOptions::new([1, 1], [0, 0], [1, 1]),
            )
        }),
        &leaves(1710, &[&[1, 4, 9]]),
    );
    compare(
        "fold4d strided padded",
        &program!(|B, x| {
            B::fold4d(
                x[0].clone(),
                [4, 4],
                [2, 2],
                UnfoldOptions::new([2, 2], [1, 1], [1, 1]),
            )
        }),
        &leaves(1711, &[&[1, 8, 9]]),
    );
}

#[test]
fn ctc_loss() {
    // log_probs [T=5, N=2, C=4] from a log_softmax of the leaf; a repeated label in the
    // second target and a shorter second input.
    compare(
        "ctc_loss",
        &program!(|B, x| {
            B::ctc_loss(
                B::log_softmax(x[0].clone(), 2),
                ints::<B>(vec![1, 2, 3, 3], &[2, 2]),
                ints::<B>(vec![5, 4], &[2]),
                ints::<B>(vec![2, 2], &[2]),
                0,
            )
        }),
        &leaves(1720, &[&[5, 2, 4]]),
    );
}
