//! Peak bytes of one training step (forward, loss and backward, gradients included), measured
//! with a counting global allocator: remat peaks at or below Burn's own autodiff, side by side
//! in one process, on Flex, under both strategies (Burn's `NoCheckpointing` against remat's
//! SaveAll, `BalancedCheckpointing` against Balanced).
//!
//! - A tiny MLP (4 x 256 wide, batch 64), written the way `burn::nn::Linear` runs (`linear`
//!   with a bias, then GELU) and the way `bench/` writes it (`matmul`, a broadcast bias
//!   `add`, GELU). Its peak is the four weight gradients plus a few activations, so a
//!   few hundred bytes of bookkeeping decide the comparison.
//! - A mid-size residual convnet (4 blocks of conv3x3 -> relu -> conv3x3 -> add -> relu,
//!   32 channels, 32 x 32, batch 8, then a 2 x 2 max pool).
//!
//! Deterministic: Flex is built here without its `rayon` feature, so every kernel runs on the
//! calling thread, and the allocator counts only that thread (the harness allocates on its
//! own threads). Each engine runs once before it is measured (lazily initialised state).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData};
use remat_oracle::programs::synthetic;

type Flex = burn_flex::Flex;
type BurnNo = burn_autodiff::Autodiff<Flex>;
type BurnBalanced =
    burn_autodiff::Autodiff<Flex, burn_autodiff::checkpoint::strategy::BalancedCheckpointing>;
type RematNo = remat::Autodiff<Flex>;
type RematBalanced = remat::Autodiff<Flex, remat::checkpoint::strategy::BalancedCheckpointing>;

/// Counts the allocations of the measuring thread only.
struct Counting;

thread_local! {
    static MEASURED: Cell<bool> = const { Cell::new(false) };
}
static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

fn measured() -> bool {
    MEASURED.try_with(Cell::get).unwrap_or(false)
}

fn grow(bytes: usize) {
    if measured() {
        let live = LIVE.fetch_add(bytes as i64, Relaxed) + bytes as i64;
        PEAK.fetch_max(live, Relaxed);
    }
}

fn shrink(bytes: usize) {
    if measured() {
        LIVE.fetch_sub(bytes as i64, Relaxed);
    }
}

// SAFETY: every call forwards to `System` unchanged; the counters never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grow(new_size - layout.size());
        } else {
            shrink(layout.size() - new_size);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Which model a step runs.
#[derive(Clone, Copy, Debug)]
enum Model {
    /// 4 x (`linear` with bias + GELU), 256 wide, batch 64.
    MlpLinear,
    /// 4 x (`matmul` + broadcast bias `add` + GELU), 256 wide, batch 64.
    MlpMatmul,
    /// 4 residual conv blocks, 32 channels, 32 x 32, batch 8, then a max pool.
    Convnet,
}

const MLP: (usize, usize, usize) = (4, 256, 64);
const CONVNET: (usize, usize, usize, usize) = (4, 32, 32, 8);

fn tensor<B: AutodiffBackend>(shape: &[usize], seed: u64, scale: f32) -> FloatTensor<B> {
    let n = shape.iter().product();
    let values: Vec<f32> = synthetic(n, seed).into_iter().map(|v| v * scale).collect();
    B::float_from_data(TensorData::new(values, shape.to_vec()), &Default::default())
}

fn param<B: AutodiffBackend>(shape: &[usize], seed: u64, scale: f32) -> FloatTensor<B> {
    B::float_set_require_grad(tensor::<B>(shape, seed, scale), true)
}

/// The parameters (created before the measured window, as a model's are) and the input.
fn prepare<B: AutodiffBackend>(model: Model) -> (Vec<FloatTensor<B>>, FloatTensor<B>) {
    match model {
        Model::MlpLinear | Model::MlpMatmul => {
            let (layers, width, batch) = MLP;
            let scale = 1.0 / (width as f32).sqrt();
            let bias_shape: &[usize] = match model {
                Model::MlpLinear => &[width],
                _ => &[1, width],
            };
            let params = (0..layers as u64)
                .flat_map(|i| {
                    [
                        param::<B>(&[width, width], 2 * i, scale),
                        param::<B>(bias_shape, 2 * i + 1, 0.1),
                    ]
                })
                .collect();
            (params, tensor::<B>(&[batch, width], 99, 1.0))
        }
        Model::Convnet => {
            let (blocks, ch, hw, batch) = CONVNET;
            let scale = 1.0 / ((ch * 9) as f32).sqrt();
            let params = (0..blocks as u64)
                .flat_map(|i| {
                    [
                        param::<B>(&[ch, ch, 3, 3], 4 * i, scale),
                        param::<B>(&[ch], 4 * i + 1, 0.1),
                        param::<B>(&[ch, ch, 3, 3], 4 * i + 2, scale),
                        param::<B>(&[ch], 4 * i + 3, 0.1),
                    ]
                })
                .collect();
            (params, tensor::<B>(&[batch, ch, hw, hw], 99, 1.0))
        }
    }
}

fn forward<B: AutodiffBackend>(
    model: Model,
    p: &[FloatTensor<B>],
    x: FloatTensor<B>,
) -> FloatTensor<B> {
    let mut y = x;
    match model {
        Model::MlpLinear => {
            for w in p.chunks(2) {
                y = B::gelu(B::linear(y, w[0].clone(), Some(w[1].clone())));
            }
        }
        Model::MlpMatmul => {
            for w in p.chunks(2) {
                y = B::gelu(B::float_add(B::float_matmul(y, w[0].clone()), w[1].clone()));
            }
        }
        Model::Convnet => {
            let conv = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
            for w in p.chunks(4) {
                let h = B::conv2d(y.clone(), w[0].clone(), Some(w[1].clone()), conv.clone());
                let h = B::conv2d(B::relu(h), w[2].clone(), Some(w[3].clone()), conv.clone());
                y = B::relu(B::float_add(y, h));
            }
            y = B::max_pool2d(y, [2, 2], [2, 2], [0, 0], [1, 1], false);
        }
    }
    y
}

/// One training step of `model` on engine `B`: the peak of live bytes during forward, loss
/// and backward (the gradients included) above the live bytes before it.
fn step_peak<B: AutodiffBackend>(model: Model) -> i64 {
    let (params, input) = prepare::<B>(model);
    MEASURED.with(|m| m.set(true));
    let start = LIVE.load(Relaxed);
    PEAK.store(start, Relaxed);
    let y = forward::<B>(model, &params, input);
    let loss = B::float_mean(B::float_mul(y.clone(), y));
    let grads = B::backward(loss);
    let peak = PEAK.load(Relaxed) - start;
    for p in &params {
        assert!(
            B::grad(p, &grads).is_some(),
            "{model:?}: a parameter has no gradient"
        );
    }
    drop(grads);
    MEASURED.with(|m| m.set(false));
    peak
}

/// Runs `B` once to initialise what it initialises lazily, then measures a step.
fn measured_peak<B: AutodiffBackend>(model: Model) -> i64 {
    step_peak::<B>(model);
    step_peak::<B>(model)
}

#[test]
fn remat_peaks_at_or_below_burn() {
    let mut report = Vec::new();
    let mut above = false;
    for model in [Model::MlpLinear, Model::MlpMatmul, Model::Convnet] {
        let pairs = [
            (
                "NoCheckpointing / SaveAll",
                measured_peak::<BurnNo>(model),
                measured_peak::<RematNo>(model),
            ),
            (
                "BalancedCheckpointing / Balanced",
                measured_peak::<BurnBalanced>(model),
                measured_peak::<RematBalanced>(model),
            ),
        ];
        for (strategy, burn, ours) in pairs {
            above |= ours > burn;
            report.push(format!(
                "{model:?}, {strategy}: Burn {burn} bytes, remat {ours} bytes ({:+})",
                ours - burn
            ));
        }
    }
    assert!(
        !above,
        "remat's step peak is above Burn's:\n{}",
        report.join("\n")
    );
}
