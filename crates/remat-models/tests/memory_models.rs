//! Bytes a forward pass keeps for backward on real Burn models, measured with a counting
//! global allocator: with one `remat::checkpoint` region per layer, a Burn MLP
//! (24 x (Linear(1024) + GELU), batch 512) keeps at most 0.55x what `SaveAll` keeps (one input
//! per layer instead of two values), and a TransformerEncoder (6 layers, d_model 256, 8 heads,
//! d_ff 1024, seq 256, batch 8, dropout 0) at most 0.05x (only the layer inputs remain);
//! `remat::stats().live_bytes` agrees with the allocator within 5% in every configuration.
//!
//! Forward only: the ratio is decided by what the forward pass keeps, and the graph is
//! dropped without backward (the heap then returns to where it was).

use std::sync::Mutex;
use std::time::Instant;

use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderLayer};
use burn::nn::{Gelu, Linear, LinearConfig};
use burn::tensor::{Device, Tensor, TensorData};
use remat_models::programs::synthetic;

// The engine's tests' counting allocator (not all of it is used here).
#[allow(dead_code)]
#[path = "../../remat/tests/support/heap.rs"]
mod heap;

#[path = "support/one_thread.rs"]
mod one_thread;

#[global_allocator]
static GLOBAL: heap::Heap = heap::Heap;

/// The allocator counts the measuring thread and rayon's (shared counters): the tests of
/// this binary run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

use heap::live;

/// What one forward pass kept, by the allocator and by `remat::stats()`.
#[derive(Debug)]
struct Kept {
    /// Allocator: live bytes after the forward pass minus before, minus the output.
    heap: f64,
    /// `remat::stats().live_bytes` after the forward pass minus before.
    stats: f64,
}

/// Runs `forward` once on an input of the measured shape: lazily-initialised state
/// (thread-locals, device settings, the parameters, which Burn initialises at their first
/// use, and the inner kernels' per-thread buffers, sized by the shapes they see) must not
/// count as kept.
///
/// Flex is built with its default features here (burn-train requires them): large matmuls
/// and batched kernels run on rayon's global pool, whose threads keep per-thread packing
/// buffers from their first job on. With several threads, which one first takes a job
/// varies from run to run, so this binary pins the pool to one thread: every such buffer is
/// then created here, before the measured window.
fn warm_up<const D: usize>(
    device: &Device,
    shape: [usize; D],
    forward: impl FnOnce(Tensor<D>) -> Tensor<D>,
) {
    one_thread::one_measured_thread();
    let len = shape.iter().product::<usize>();
    let x = Tensor::<D>::from_data(TensorData::new(synthetic(len, 3), shape), device);
    drop(forward(x.require_grad()));
}

/// Runs `forward` on the user's input (a leaf created before the measured window, like a
/// parameter: neither the allocator nor `stats` counts it) and measures what the forward pass
/// keeps; the output is the user's and is not counted. The graph is then dropped without
/// backward, and the heap must return to where it was.
fn measure<const D: usize>(
    what: &str,
    device: &Device,
    shape: [usize; D],
    forward: impl FnOnce(Tensor<D>) -> Tensor<D>,
) -> Kept {
    let len = shape.iter().product::<usize>();
    let x =
        Tensor::<D>::from_data(TensorData::new(synthetic(len, 3), shape), device).require_grad();
    let start = Instant::now();
    let heap_before = live();
    let kept_before = remat::stats().live_bytes;
    let y = forward(x.clone());
    let out_bytes = (y.shape().num_elements() * std::mem::size_of::<f32>()) as f64;
    let kept = Kept {
        heap: (live() - heap_before) as f64 - out_bytes,
        stats: (remat::stats().live_bytes - kept_before) as f64,
    };
    drop(y);
    let left = live() - heap_before;
    let mib = |bytes: f64| bytes / (1 << 20) as f64;
    eprintln!(
        "{what}: allocator {:.2} MiB, stats {:.2} MiB ({:.1?})",
        mib(kept.heap),
        mib(kept.stats),
        start.elapsed()
    );
    // A kept view of a parameter (Burn's `linear` on a rank-3 input keeps
    // `weight.reshape([1, d_in, d_out])` for the matmul's backward) shares the parameter's
    // storage: remat counts it with the leaves, so it is in neither number.
    let diff = (kept.heap - kept.stats).abs() / kept.heap.max(kept.stats);
    assert!(
        diff < 0.05,
        "{what}: allocator says {} bytes kept, stats say {} ({:.1}% apart)",
        kept.heap,
        kept.stats,
        diff * 100.0
    );
    assert!(
        left.abs() < 64 * 1024,
        "{what}: {left} bytes still allocated after dropping the graph"
    );
    assert_eq!(
        remat::stats().live_bytes,
        kept_before,
        "{what}: remat still keeps values after dropping the graph"
    );
    kept
}

fn report(model: &str, save_all: &Kept, regions: &Kept, bound: f64) {
    let ratio = regions.heap / save_all.heap;
    eprintln!(
        "{model}: regions keep {:.1} MiB, SaveAll {:.1} MiB: {ratio:.3}x (bound {bound}x)",
        regions.heap / (1 << 20) as f64,
        save_all.heap / (1 << 20) as f64,
    );
    assert!(
        ratio <= bound,
        "{model}: one region per layer keeps {ratio:.3}x SaveAll's bytes, more than {bound}x \
         ({} vs {} bytes)",
        regions.heap,
        save_all.heap
    );
}

// The sizes, run as they are.
const MLP_LAYERS: usize = 24;
const MLP_WIDTH: usize = 1024;
const MLP_BATCH: usize = 512;

/// 24 x (Linear(1024) + GELU), batch 512.
#[test]
fn mlp_regions_keep_at_most_055x_save_all() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let device = Device::flex().autodiff();
    device.seed(1);
    let layers: Vec<Linear> = (0..MLP_LAYERS)
        .map(|_| LinearConfig::new(MLP_WIDTH, MLP_WIDTH).init(&device))
        .collect();
    let gelu = Gelu::new();
    let layer = |i: usize, x: Tensor<2>| gelu.forward(layers[i].forward(x));
    let shape = [MLP_BATCH, MLP_WIDTH];

    warm_up(&device, shape, |x| {
        (0..MLP_LAYERS).fold(x, |x, i| remat::checkpoint(|| layer(i, x)))
    });

    let save_all = measure("mlp SaveAll", &device, shape, |x| {
        remat::with_policy(remat::Policy::SaveAll, || {
            (0..MLP_LAYERS).fold(x, |x, i| layer(i, x))
        })
    });
    let regions = measure("mlp regions", &device, shape, |x| {
        (0..MLP_LAYERS).fold(x, |x, i| remat::checkpoint(|| layer(i, x)))
    });
    report("mlp", &save_all, &regions, 0.55);
}

// The sizes, run as they are.
const TF_LAYERS: usize = 6;
const TF_D_MODEL: usize = 256;
const TF_HEADS: usize = 8;
const TF_D_FF: usize = 1024;
const TF_SEQ: usize = 256;
const TF_BATCH: usize = 8;

/// A TransformerEncoder: 6 layers, d_model 256, 8 heads, d_ff 1024, seq 256, batch 8.
#[test]
fn transformer_regions_keep_at_most_005x_save_all() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let device = Device::flex().autodiff();
    device.seed(2);
    let layers: Vec<TransformerEncoderLayer> =
        TransformerEncoderConfig::new(TF_D_MODEL, TF_D_FF, TF_HEADS, TF_LAYERS)
            .with_norm_first(true)
            .with_dropout(0.0)
            .init(&device)
            .layers;
    let layer = |i: usize, x: Tensor<3>| layers[i].forward(x, None, None);
    let shape = [TF_BATCH, TF_SEQ, TF_D_MODEL];

    warm_up(&device, shape, |x| {
        (0..TF_LAYERS).fold(x, |x, i| remat::checkpoint(|| layer(i, x)))
    });

    let save_all = measure("transformer SaveAll", &device, shape, |x| {
        remat::with_policy(remat::Policy::SaveAll, || {
            (0..TF_LAYERS).fold(x, |x, i| layer(i, x))
        })
    });
    let regions = measure("transformer regions", &device, shape, |x| {
        (0..TF_LAYERS).fold(x, |x, i| remat::checkpoint(|| layer(i, x)))
    });
    report("transformer", &save_all, &regions, 0.05);
}
