//! Backend-level parity of shape and indexing ops: reshape, transpose/swap_dims/permute,
//! flip, expand, unfold, repeat_dim, cat, pad; gather/scatter (also the n-d forms),
//! select/select_assign, slice/slice_assign (steps, non-contiguous operands) and mask_select.

use burn_backend::ops::PadMode;
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{AutodiffBackend, Shape, Slice};
use burn_tensor::IndexingUpdateOp;
use remat_oracle::backend::{Leaf, bools, compare, ints};
use remat_oracle::program;

/// Leaf 0 is stored as `[2, 4, 3]` and read transposed (`[2, 3, 4]`, non-contiguous).
fn lhs<B: AutodiffBackend>(x: &[FloatTensor<B>]) -> FloatTensor<B> {
    B::float_swap_dims(x[0].clone(), 1, 2)
}

fn leaves(seed: u64) -> [Leaf; 1] {
    [Leaf::synthetic(&[2, 4, 3], seed, 0.0)]
}

const SHAPE: [&str; 18] = [
    "reshape",
    "transpose",
    "swap_dims 0 2",
    "permute",
    "flip 0 2",
    "expand",
    "unfold dim 2",
    "unfold dim 1 overlapping",
    "repeat_dim 1",
    "repeat_dim 0",
    "pad constant",
    "pad reflect",
    "pad edge",
    "slice",
    "slice step 2",
    "slice negative step",
    "reshape of a permute",
    "expand then sum",
];

fn shape_op<B: AutodiffBackend>(k: usize, a: FloatTensor<B>) -> FloatTensor<B> {
    match k {
        0 => B::float_reshape(a, Shape::new([6, 4])),
        1 => B::float_transpose(a),
        2 => B::float_swap_dims(a, 0, 2),
        3 => B::float_permute(a, &[2, 0, 1]),
        4 => B::float_flip(a, &[0, 2]),
        5 => B::float_expand(
            B::float_reshape(a, Shape::new([2, 1, 3, 4])),
            Shape::new([2, 3, 3, 4]),
        ),
        6 => B::float_unfold(a, 2, 2, 2),
        7 => B::float_unfold(a, 1, 2, 1),
        8 => B::float_repeat_dim(a, 1, 2),
        9 => B::float_repeat_dim(a, 0, 3),
        10 => B::float_pad(a, &[(0, 0), (1, 2), (0, 1)], PadMode::Constant(0.5)),
        11 => B::float_pad(a, &[(1, 0), (1, 2), (2, 1)], PadMode::Reflect),
        12 => B::float_pad(a, &[(0, 1), (2, 1), (1, 0)], PadMode::Edge),
        13 => B::float_slice(a, &[(0..2).into(), (1..3).into(), (1..4).into()]),
        14 => B::float_slice(
            a,
            &[
                Slice::new(0, None, 1),
                Slice::new(0, None, 2),
                Slice::new(1, None, 2),
            ],
        ),
        15 => B::float_slice(
            a,
            &[
                Slice::new(0, None, 1),
                Slice::new(0, None, -1),
                Slice::new(0, Some(3), -2),
            ],
        ),
        16 => B::float_reshape(B::float_permute(a, &[1, 2, 0]), Shape::new([12, 2])),
        _ => B::float_sum_dim(B::float_expand(a, Shape::new([2, 3, 4])), 0),
    }
}

#[test]
fn shape_ops() {
    for (k, name) in SHAPE.iter().enumerate() {
        compare(
            name,
            &program!(k: usize = k; |B, x| {
                // Through exp so the op's input is a rebuildable intermediate.
                shape_op::<B>(*k, B::float_exp(lhs::<B>(x)))
            }),
            &leaves(900 + k as u64),
        );
    }
}

#[test]
fn expand_a_leaf_with_broadcast_dims() {
    compare(
        "expand leaf",
        &program!(|B, x| B::float_expand(x[0].clone(), Shape::new([2, 3, 4]))),
        &[Leaf::synthetic(&[1, 3, 1], 930, 0.0)],
    );
}

#[test]
fn cat_several_inputs() {
    let leaves = [
        Leaf::synthetic(&[2, 4, 3], 940, 0.0),
        Leaf::synthetic(&[2, 1, 4], 941, 0.0),
        Leaf::synthetic(&[2, 2, 4], 942, 0.0),
    ];
    compare(
        "cat dim 1",
        &program!(|B, x| B::float_cat(
            vec![lhs::<B>(x), x[1].clone(), x[2].clone(), x[1].clone()],
            1
        )),
        &leaves,
    );
    compare(
        "cat dim 0",
        &program!(|B, x| {
            let b = B::float_slice(lhs::<B>(x), &[(0..1).into(), (0..3).into(), (0..4).into()]);
            B::float_cat(vec![b, lhs::<B>(x)], 0)
        }),
        &leaves,
    );
}

fn idx<B: AutodiffBackend>(values: &[i64], shape: &[usize]) -> IntTensor<B> {
    ints::<B>(values.to_vec(), shape)
}

/// Indices into dimension 1 (size 3) of a `[2, 3, 4]` tensor, shaped `[2, 2, 4]`, with
/// repeats.
fn gather_indices<B: AutodiffBackend>() -> IntTensor<B> {
    idx::<B>(
        &[0, 2, 1, 1, 2, 2, 0, 1, 1, 0, 0, 2, 2, 1, 1, 0],
        &[2, 2, 4],
    )
}

#[test]
fn gather_scatter_select() {
    let leaves = [
        Leaf::synthetic(&[2, 4, 3], 950, 0.0),
        Leaf::synthetic(&[2, 2, 4], 951, 0.0),
        Leaf::synthetic(&[2, 2, 4], 952, 0.0),
    ];
    compare(
        "gather dim 1",
        &program!(|B, x| B::float_gather(1, lhs::<B>(x), gather_indices::<B>())),
        &leaves,
    );
    compare(
        "scatter add dim 1",
        &program!(|B, x| {
            B::float_scatter(
                1,
                lhs::<B>(x),
                gather_indices::<B>(),
                x[1].clone(),
                IndexingUpdateOp::Add,
            )
        }),
        &leaves,
    );
    compare(
        "select dim 1 (repeats)",
        &program!(|B, x| B::float_select(lhs::<B>(x), 1, idx::<B>(&[2, 0, 2], &[3]))),
        &leaves,
    );
    compare(
        "select dim 2",
        &program!(|B, x| B::float_select(lhs::<B>(x), 2, idx::<B>(&[3, 1], &[2]))),
        &leaves,
    );
    compare(
        "select_assign add dim 1",
        &program!(|B, x| {
            B::float_select_assign(
                lhs::<B>(x),
                1,
                idx::<B>(&[2, 0], &[2]),
                x[2].clone(),
                IndexingUpdateOp::Add,
            )
        }),
        &leaves,
    );
}

#[test]
fn gather_and_scatter_nd() {
    // Indices `[3, 2]` into the first two dims of a `[2, 3, 4]` tensor: rows of 4. The data
    // is contiguous here: NdArray's own gather_nd rejects strided data.
    let leaves = [
        Leaf::synthetic(&[2, 3, 4], 960, 0.0),
        Leaf::synthetic(&[3, 4], 961, 0.0),
    ];
    compare(
        "gather_nd",
        &program!(|B, x| B::float_gather_nd(
            B::float_exp(x[0].clone()),
            idx::<B>(&[1, 2, 0, 0, 1, 2], &[3, 2])
        )),
        &leaves,
    );
    compare(
        "scatter_nd add",
        &program!(|B, x| {
            B::float_scatter_nd(
                B::float_exp(x[0].clone()),
                idx::<B>(&[1, 2, 0, 0, 1, 1], &[3, 2]),
                x[1].clone(),
                IndexingUpdateOp::Add,
            )
        }),
        &leaves,
    );
}

#[test]
fn slice_assign() {
    let leaves = [
        Leaf::synthetic(&[2, 4, 3], 970, 0.0),
        Leaf::synthetic(&[2, 2, 2], 971, 0.0),
        Leaf::synthetic(&[2, 4, 3], 972, 0.0),
    ];
    compare(
        "slice_assign",
        &program!(|B, x| {
            B::float_slice_assign(
                lhs::<B>(x),
                &[(0..2).into(), (1..3).into(), (1..3).into()],
                x[1].clone(),
            )
        }),
        &leaves,
    );
    compare(
        "slice_assign step 2 value transposed",
        &program!(|B, x| {
            let v = B::float_swap_dims(x[2].clone(), 1, 2);
            B::float_slice_assign(
                lhs::<B>(x),
                &[
                    Slice::new(0, None, 1),
                    Slice::new(0, None, 2),
                    Slice::new(0, None, 1),
                ],
                B::float_slice(v, &[(0..2).into(), (1..3).into(), (0..4).into()]),
            )
        }),
        &leaves,
    );
}

#[test]
fn mask_select() {
    compare(
        "mask_select",
        &program!(|B, x| {
            let mask = bools::<B>((0..24).map(|i| i % 5 != 1).collect(), &[2, 3, 4]);
            burn_backend::read_sync(B::float_mask_select(lhs::<B>(x), mask))
        }),
        &leaves(980),
    );
}

/// Indices into dimension 1 (size 3) of a `[2, 3, 4]` tensor, shaped `[2, 2, 4]`, unique
/// along dimension 1 (so overwriting and combining updates are order-independent).
fn unique_indices<B: AutodiffBackend>() -> IntTensor<B> {
    idx::<B>(
        &[0, 2, 1, 1, 2, 0, 0, 2, 1, 1, 2, 0, 0, 2, 1, 2],
        &[2, 2, 4],
    )
}

const UPDATES: [(&str, IndexingUpdateOp); 5] = [
    ("add", IndexingUpdateOp::Add),
    ("assign", IndexingUpdateOp::Assign),
    ("mul", IndexingUpdateOp::Mul),
    ("min", IndexingUpdateOp::Min),
    ("max", IndexingUpdateOp::Max),
];

#[test]
fn scatter_every_update_op() {
    let leaves = [
        Leaf::synthetic(&[2, 4, 3], 990, 0.0),
        Leaf::synthetic(&[2, 2, 4], 991, 0.0),
    ];
    for (name, op) in UPDATES {
        compare(
            &format!("scatter {name}"),
            &program!(op: IndexingUpdateOp = op; |B, x| {
                B::float_scatter(1, lhs::<B>(x), unique_indices::<B>(), x[1].clone(), *op)
            }),
            &leaves,
        );
    }
}

#[test]
fn select_assign_every_update_op() {
    let leaves = [
        Leaf::synthetic(&[2, 4, 3], 995, 0.0),
        Leaf::synthetic(&[2, 2, 4], 996, 0.0),
    ];
    for (name, op) in UPDATES {
        compare(
            &format!("select_assign {name}"),
            &program!(op: IndexingUpdateOp = op; |B, x| {
                B::float_select_assign(lhs::<B>(x), 1, idx::<B>(&[2, 0], &[2]), x[1].clone(), *op)
            }),
            &leaves,
        );
    }
}
