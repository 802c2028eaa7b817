//! Checkpoint regions, measured in bytes: what a forward pass keeps per-layer, nested and
//! whole, and the peak of the backward pass (exact, from `remat::stats()`).

use std::sync::Mutex;

use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData, ops::FloatTensorOps};
use burn_flex::Flex;
use remat::{Autodiff, Policy};

type A = Autodiff<Flex>;
type T = FloatTensor<A>;

/// Stats are process-wide: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const LEN: usize = 1000;
/// Bytes of one value (`LEN` f32).
const V: u64 = (LEN * 4) as u64;
const LAYERS: usize = 4;

/// One layer: `exp(sin(x))`; its backward reads `x` (sin) and its output (exp), and a replay
/// of `exp` reads `sin(x)`: two values of its own.
fn layer(x: T) -> T {
    A::float_exp(A::float_sin(x))
}

#[derive(Clone, Copy, Debug)]
enum Regions {
    PerLayer,
    /// One region per pair of layers, one region per layer inside it.
    Nested,
    /// One region around everything, one per layer inside it.
    Whole,
}

/// Runs the stack under `regions`; returns the bytes kept after forward and the peak of
/// the whole step.
fn step(regions: Regions) -> (u64, u64) {
    let device = Default::default();
    let x = A::float_from_data(TensorData::new(vec![0.25f32; LEN], [LEN]), &device);
    let x = A::float_set_require_grad(x, true);
    let per_layer = |range: std::ops::Range<usize>, mut y: T| {
        for _ in range {
            y = remat::checkpoint(|| layer(y.clone()));
        }
        y
    };
    remat::reset_stats();
    let before = remat::stats().live_bytes;
    let y = remat::with_policy(Policy::SaveAll, || match regions {
        Regions::PerLayer => per_layer(0..LAYERS, x.clone()),
        Regions::Nested => (0..LAYERS).step_by(2).fold(x.clone(), |y, start| {
            remat::checkpoint(|| per_layer(start..start + 2, y.clone()))
        }),
        Regions::Whole => remat::checkpoint(|| per_layer(0..LAYERS, x.clone())),
    });
    let kept = remat::stats().live_bytes - before;
    let grads = A::float_sum(y).backward();
    assert!(<A as AutodiffBackend>::grad(&x, &grads).is_some());
    (kept, remat::stats().peak_bytes - before)
}

#[test]
fn nested_regions_keep_less_than_per_layer_ones() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Per layer: the outputs of layers 0..3, read by the next layer after their region
    // closed, are kept (the first input is the leaf, the user's).
    assert_eq!(step(Regions::PerLayer).0, 3 * V);
    // Nested: an inner region's output read inside the still-open outer region is rebuilt
    // with it; only the first pair's output, read by the second pair, is kept.
    assert_eq!(step(Regions::Nested).0, V);
    assert_eq!(step(Regions::Whole).0, 0);
}

#[test]
fn a_per_layer_regions_peak_is_one_layer_plus_the_regions_inputs() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (kept, peak) = step(Regions::PerLayer);
    // The inputs kept from the forward pass, plus one layer's two values rebuilt at a time.
    assert!(peak <= kept + 2 * V, "peak {peak}, kept {kept}");
    let (kept, peak) = step(Regions::Nested);
    // A pair of layers is rebuilt at once: its four values at most.
    assert!(peak <= kept + 4 * V, "peak {peak}, kept {kept}");
}
