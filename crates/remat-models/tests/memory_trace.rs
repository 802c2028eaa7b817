//! Memory asserted with exact numbers on the model programs' own models
//! (`crates/remat-models/src/programs`): the MLP (`mlp::Mlp`, its MSE loss) and the CNN
//! (`cnn::Cnn`: Conv2d + BatchNorm + ReLU + MaxPool2d + Linear, its cross-entropy loss), at
//! the programs' shapes, one forward + backward step under each control (SaveAll, Balanced,
//! RecomputeAll, one `remat::checkpoint` region per layer):
//! - the bytes kept after forward (`remat::stats().live_bytes`), computed from the shapes,
//!   value by value;
//! - the peak kept during backward (`remat::stats().peak_bytes` after `reset_stats`), computed
//!   from the shapes;
//! - the heap (a counting global allocator) agrees: forward grows it by at least the kept
//!   bytes, backward frees every kept value (afterwards the heap holds the parameters'
//!   gradients and nothing else, within [`HEAP_SLACK`]), and the heap's growth during
//!   backward is at least what the kept peak adds to the kept bytes (the rebuilt values) and
//!   at most that plus the gradients and [`TRANSIENT`] activation-sized temporaries.
//!
//! The values each rule reads are in `crates/remat/src/ops` (relu reads its output, GELU and
//! square their inputs, matmul its inputs, BatchNorm (training) the convolution's output,
//! cross-entropy the log-softmax); an input that needs no gradient (the data, the targets) is
//! kept as a constant where a rule or a replay reads it; leaves (the parameters) are the
//! user's and not counted.
//!
//! The held-bytes trace during backward (nothing held past its last read) is checked below
//! the Burn API, where a counting inner backend sees each backward step:
//! `crates/remat/tests/memory_trace.rs`.
//!
//! The allocator (the engine's tests' `support/heap.rs`) counts the test thread and rayon's
//! pool (Flex runs some kernels there; pinned to one thread here, as in
//! tests/memory_models.rs), not the harness's other threads; its counters are shared, so the
//! tests of this file run one at a time.

use std::sync::{Mutex, MutexGuard};

use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::nn::{Gelu, Relu};
use burn::tensor::{Device, Int, Tensor, TensorData};
use remat_models::programs::cnn::Cnn;
use remat_models::programs::mlp::Mlp;
use remat_models::programs::{synthetic, synthetic_labels};

// The engine's tests' counting allocator.
#[path = "../../remat/tests/support/heap.rs"]
mod heap;

#[path = "support/one_thread.rs"]
mod one_thread;

#[global_allocator]
static GLOBAL: heap::Heap = heap::Heap;

/// Graph bookkeeping (nodes, edges, the gradients' map) and the harness's own allocations
/// while a test runs: far below the smallest activation measured here (8 KiB).
const HEAP_SLACK: isize = 4096;

/// How many activation-sized temporaries backward may hold besides the kept values and the
/// gradients: the incoming gradient, the outgoing one, an intermediate of the rule, and a
/// rebuilt value that moved to the step reading it last (no longer counted as kept).
const TRANSIENT: isize = 4;

/// One test at a time (the counters are process-wide); Flex's rayon pool pinned to one
/// thread, so that its per-thread buffers are made in the warm-up.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    one_thread::one_measured_thread();
    guard
}

#[derive(Clone, Copy, Debug)]
enum Control {
    SaveAll,
    Balanced,
    RecomputeAll,
    /// The default policy, each layer in its own `remat::checkpoint` region.
    Regions,
}

/// Runs a whole forward pass `f` under `control`'s policy (the default for regions).
fn under<R>(control: Control, f: impl FnOnce() -> R) -> R {
    match control {
        Control::SaveAll => remat::with_policy(remat::Policy::SaveAll, f),
        Control::Balanced => remat::with_policy(remat::Policy::Balanced, f),
        Control::RecomputeAll => remat::with_policy(remat::Policy::RecomputeAll, f),
        Control::Regions => f(),
    }
}

/// Runs one layer `f`: in its own `remat::checkpoint` region under [`Control::Regions`].
fn layer<R>(control: Control, f: impl FnOnce() -> R) -> R {
    match control {
        Control::Regions => remat::checkpoint(f),
        _ => f(),
    }
}

/// What one step kept, in bytes.
#[derive(Debug, PartialEq, Eq)]
struct Measured {
    /// `stats().live_bytes` after forward.
    kept: u64,
    /// `stats().peak_bytes` during backward.
    peak: u64,
}

/// Runs `loss` (forward) then backward, measures what remat kept, and checks the heap
/// against it (see the module docs). `grad_bytes`: the gradients backward returns;
/// `activation`: the largest activation, the unit of [`TRANSIENT`].
fn measure(
    what: &str,
    grad_bytes: u64,
    activation: u64,
    loss: impl FnOnce() -> Tensor<1>,
) -> Measured {
    let base = remat::stats().live_bytes;
    let heap_start = heap::live();
    let loss = loss();
    let kept = remat::stats().live_bytes - base;
    let grown = heap::live() - heap_start;
    assert!(
        grown >= kept as isize,
        "{what}: forward grew the heap by {grown} bytes, less than the {kept} bytes kept"
    );
    remat::reset_stats();
    let heap_before = heap::live();
    heap::reset_peak(heap_before);
    let grads = loss.backward();
    let heap_peak = heap::peak() - heap_before;
    let peak = remat::stats().peak_bytes - base;
    assert_eq!(
        remat::stats().live_bytes,
        base,
        "{what}: kept after backward"
    );
    // The heap above the step's start now holds the gradients, nothing kept.
    let held = heap::live() - heap_start - grad_bytes as isize;
    assert!(
        held.abs() <= HEAP_SLACK,
        "{what}: after backward the heap holds {held} bytes besides the {grad_bytes} bytes of \
         gradients: a kept value was not freed"
    );
    // During backward the heap held the kept values (all of them at the start) and the
    // gradients, and at most TRANSIENT activations more.
    let low = peak as isize - kept as isize;
    let high = low + grad_bytes as isize + TRANSIENT * activation as isize + HEAP_SLACK;
    assert!(
        heap_peak >= low && heap_peak <= high,
        "{what}: the heap peaked {heap_peak} bytes above backward's start; with {kept} bytes \
         kept after forward and a kept peak of {peak}, expected between {low} and {high}"
    );
    drop(grads);
    Measured { kept, peak }
}

fn f32_bytes(dims: &[usize]) -> u64 {
    dims.iter().product::<usize>() as u64 * 4
}

/// The MLP program's model and shapes (`programs/mlp.rs`: batch 32, 16 -> 32 -> 32 -> 4).
/// One test: the allocator counts every thread, and a second test's thread (starting, or
/// ending and freeing its thread-locals) would be counted in the other's measurements.
#[test]
fn kept_and_peak_bytes_under_every_control() {
    let _s = serial();
    mlp_kept_and_peak_bytes_under_every_control();
    cnn_kept_and_peak_bytes_under_every_control();
}

fn mlp_kept_and_peak_bytes_under_every_control() {
    const BATCH: usize = 32;
    const INPUT: usize = 16;
    const HIDDEN: usize = 32;
    const OUTPUT: usize = 4;
    let device = Device::flex().autodiff();
    device.seed(7);
    let model = Mlp::new(&device);
    let x = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * INPUT, 1), [BATCH, INPUT]),
        &device,
    );
    let y = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * OUTPUT, 2), [BATCH, OUTPUT]),
        &device,
    );
    let (relu, gelu) = (Relu::new(), Gelu::new());
    let loss = |control| {
        under(control, || {
            let h = layer(control, || relu.forward(model.l1.forward(x.clone())));
            let h = layer(control, || gelu.forward(model.l2.forward(h)));
            let out = layer(control, || model.l3.forward(h));
            MseLoss::new().forward(out, y.clone(), Reduction::Mean)
        })
    };
    // Warm-up: the parameters, lazily initialised, and the kernels' buffers.
    drop(loss(Control::SaveAll).backward());

    let params =
        f32_bytes(&[INPUT * HIDDEN + HIDDEN + HIDDEN * HIDDEN + HIDDEN + HIDDEN * OUTPUT + OUTPUT]);
    // The input x (a constant: layer 1's matmul reads it for W1's gradient), a hidden
    // activation, a `[BATCH, OUTPUT]` value (the targets, the difference MSE squares).
    let x = f32_bytes(&[BATCH, INPUT]);
    let h = f32_bytes(&[BATCH, HIDDEN]);
    let d = f32_bytes(&[BATCH, OUTPUT]);
    let cases = [
        // relu's output (read by relu and layer 2's matmul), layer 2's pre-activation (GELU),
        // GELU's output (layer 3's matmul), the difference (square).
        (Control::SaveAll, x + 3 * h + d, x + 3 * h + d),
        // GELU's output is one cheap op from a kept value: rebuilt, and held with the others
        // while layer 3's matmul reads it (the difference already freed).
        (Control::Balanced, x + 2 * h + d, x + 3 * h),
        // Only the constants, x and the targets. Backward rebuilds the difference, then the
        // chain up to GELU's output (relu's output, the pre-activation, GELU's output held
        // together). The rebuilt `[1, OUTPUT]` view of layer 3's bias is a view of a leaf:
        // the user's memory, rebuilt or kept, as in forward.
        (Control::RecomputeAll, x + d, x + d + d + 3 * h),
        // The regions' outputs (relu's and GELU's) and the difference; inside layer 2's
        // region the pre-activation is rebuilt and moves straight to GELU's backward.
        (Control::Regions, x + 2 * h + d, x + 2 * h + d),
    ];
    for (control, kept, peak) in cases {
        let what = format!("mlp {control:?}");
        let got = measure(&what, params, h, || loss(control));
        assert_eq!(
            got,
            Measured { kept, peak },
            "{what}: bytes kept after forward and peak during backward"
        );
    }
}

/// The CNN program's model and shapes (`programs/cnn.rs`: batch 8, 3 x 8 x 8 images, 6
/// filters, 10 classes); the layers: conv + BatchNorm + ReLU, max pooling, the classifier.
fn cnn_kept_and_peak_bytes_under_every_control() {
    const BATCH: usize = 8;
    const CHANNELS: usize = 3;
    const SIDE: usize = 8;
    const FILTERS: usize = 6;
    const CLASSES: usize = 10;
    let device = Device::flex().autodiff();
    device.seed(11);
    let model = Cnn::new(&device);
    let x = Tensor::<4>::from_data(
        TensorData::new(
            synthetic(BATCH * CHANNELS * SIDE * SIDE, 3),
            [BATCH, CHANNELS, SIDE, SIDE],
        ),
        &device,
    );
    let labels = Tensor::<1, Int>::from_data(
        TensorData::new(synthetic_labels(BATCH, CLASSES, 4), [BATCH]),
        &device,
    );
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let relu = Relu::new();
    let loss = |control| {
        under(control, || {
            let h = layer(control, || {
                relu.forward(model.norm.forward(model.conv.forward(x.clone())))
            });
            let h = layer(control, || model.pool.forward(h));
            let logits = layer(control, || model.head.forward(h.flatten(1, 3)));
            loss_fn.forward(logits, labels.clone())
        })
    };
    drop(loss(Control::SaveAll).backward());

    let params = f32_bytes(&[FILTERS * CHANNELS * 9
        + 2 * FILTERS
        + FILTERS * (SIDE / 2) * (SIDE / 2) * CLASSES
        + CLASSES]);
    // The images (a constant: the convolution reads them for its weight's gradient), a
    // `[BATCH, FILTERS, SIDE, SIDE]` activation, the pooled and flattened features, the
    // log-probabilities.
    let x = f32_bytes(&[BATCH, CHANNELS, SIDE, SIDE]);
    let a = f32_bytes(&[BATCH, FILTERS, SIDE, SIDE]);
    let p = f32_bytes(&[BATCH, FILTERS * (SIDE / 2) * (SIDE / 2)]);
    let l = f32_bytes(&[BATCH, CLASSES]);
    let cases = [
        // The convolution's output (BatchNorm), relu's output (relu; max pooling), the
        // flattened features (the classifier's matmul), the log-probabilities.
        (Control::SaveAll, x + 2 * a + p + l, x + 2 * a + p + l),
        // Nothing here is a cheap op from a kept value: the same as SaveAll.
        (Control::Balanced, x + 2 * a + p + l, x + 2 * a + p + l),
        // Only the images. Backward rebuilds everything above (the `[1, CLASSES]` view of
        // the classifier's bias is the user's memory, as in the MLP's test).
        (Control::RecomputeAll, x, x + 2 * a + p + l),
        // The regions' outputs (relu's, the pooled features) and the log-probabilities; the
        // convolution's output, inside the first region, is rebuilt and moves straight to
        // BatchNorm's backward.
        (Control::Regions, x + a + p + l, x + a + p + l),
    ];
    for (control, kept, peak) in cases {
        let what = format!("cnn {control:?}");
        let got = measure(&what, params, a, || loss(control));
        assert_eq!(
            got,
            Measured { kept, peak },
            "{what}: bytes kept after forward and peak during backward"
        );
    }
}
