//! Engines x policies, the step measurement and the per-op micro-benchmark.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use burn_autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, TensorData};
use remat::Policy;
use serde::{Deserialize, Serialize};

use crate::alloc;
use crate::models::{self, Hook, Spec};

/// One engine with one policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// `burn_autodiff::Autodiff<B>` (NoCheckpointing).
    BurnNone,
    /// `burn_autodiff::Autodiff<B, BalancedCheckpointing>`.
    BurnBalanced,
    /// `remat::Autodiff<B>` under `with_policy(SaveAll)`.
    RematSaveAll,
    /// `remat::Autodiff<B>` under `with_policy(Balanced)`.
    RematBalanced,
    /// `remat::Autodiff<B>` under `with_policy(RecomputeAll)`.
    RematRecomputeAll,
    /// `remat::Autodiff<B>` (SaveAll) with each layer in a `remat::checkpoint` region.
    RematRegions,
    /// `remat::Autodiff<B>` under `with_policy(Budget(bytes))`.
    RematBudget(BudgetPoint),
}

/// A point of the budget curve: the budget a step runs under and what it was derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetPoint {
    /// The budget the step runs under (bytes, as `remat::stats()` counts them).
    pub bytes: u64,
    /// What the budget was asked as.
    pub target: BudgetTarget,
}

/// How a budget point was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetTarget {
    /// This percentage of remat SaveAll's peak of held bytes (`remat::stats().peak_bytes`).
    Percent(u32),
    /// `u64::MAX`: a budget that forces no eviction.
    Unbounded,
    /// The per-layer regions' peak of held bytes (`remat::stats().peak_bytes`).
    RegionsPeak,
    /// The smallest budget: `remat::tradeoff()`'s first row, or what `remat::check_budget`
    /// reported for a point that was too small.
    Smallest,
    /// The smallest budget whose plan replays at most 4 forward passes
    /// (`remat::Tradeoff::smallest_budget_within(4.0)`: past the cliff at the smallest one,
    /// NOTE [budget-cliff] in `remat`'s `planner/tradeoff.rs`).
    PastCliff,
}

impl BudgetTarget {
    /// The policy's name in the tables.
    pub fn name(self) -> String {
        match self {
            BudgetTarget::Percent(p) => format!("Budget {p}%"),
            BudgetTarget::Unbounded => "Budget u64::MAX".into(),
            BudgetTarget::RegionsPeak => "Budget per-layer peak".into(),
            BudgetTarget::Smallest => "Budget smallest".into(),
            BudgetTarget::PastCliff => "Budget smallest within 4 fwd".into(),
        }
    }
}

impl Engine {
    /// Every engine, in table order.
    pub const ALL: [Engine; 6] = [
        Engine::BurnNone,
        Engine::BurnBalanced,
        Engine::RematSaveAll,
        Engine::RematBalanced,
        Engine::RematRecomputeAll,
        Engine::RematRegions,
    ];

    /// The short name `--engines` takes.
    pub fn short(self) -> &'static str {
        match self {
            Engine::BurnNone => "burn",
            Engine::BurnBalanced => "burn-balanced",
            Engine::RematSaveAll => "saveall",
            Engine::RematBalanced => "balanced",
            Engine::RematRecomputeAll => "recomputeall",
            Engine::RematRegions => "regions",
            Engine::RematBudget(_) => "budget",
        }
    }

    /// Parses a short name.
    pub fn parse(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.short() == name)
    }

    /// `burn` or `remat`.
    pub fn engine(self) -> &'static str {
        match self {
            Engine::BurnNone | Engine::BurnBalanced => "burn",
            _ => "remat",
        }
    }

    /// The policy's name.
    pub fn policy(self) -> String {
        match self {
            Engine::BurnNone => "NoCheckpointing".into(),
            Engine::BurnBalanced => "BalancedCheckpointing".into(),
            Engine::RematSaveAll => "SaveAll".into(),
            Engine::RematBalanced => "Balanced".into(),
            Engine::RematRecomputeAll => "RecomputeAll".into(),
            Engine::RematRegions => "per-layer checkpoint".into(),
            Engine::RematBudget(point) => point.target.name(),
        }
    }

    /// `engine/policy`.
    pub fn label(self) -> String {
        format!("{}/{}", self.engine(), self.policy())
    }

    fn remat_policy(self) -> Option<Policy> {
        match self {
            Engine::RematSaveAll | Engine::RematRegions => Some(Policy::SaveAll),
            Engine::RematBalanced => Some(Policy::Balanced),
            Engine::RematRecomputeAll => Some(Policy::RecomputeAll),
            Engine::RematBudget(point) => Some(Policy::Budget(point.bytes)),
            Engine::BurnNone | Engine::BurnBalanced => None,
        }
    }

    fn regions(self) -> bool {
        self == Engine::RematRegions
    }
}

/// Sums over every weight gradient.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Sum of all gradient elements.
    pub sum: f64,
    /// Sum of absolute values (the tolerance scale for `sum`).
    pub sum_abs: f64,
    /// Sum of squares.
    pub sum_sq: f64,
    /// FNV-1a hash of every gradient's bits, in weight order (bit-for-bit comparisons).
    pub hash: String,
    /// Weights without a gradient.
    pub missing: usize,
}

/// Live bytes over one step, sampled by a background thread.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Trace {
    /// Milliseconds since the step started.
    pub t_ms: Vec<f64>,
    /// Live bytes above the pre-step baseline.
    pub bytes: Vec<i64>,
    /// `(ms, bytes)` at each layer boundary of the forward pass.
    pub layers: Vec<(f64, i64)>,
    /// When the forward pass and loss ended, ms.
    pub forward_end_ms: f64,
}

/// One measured step.
pub struct Sample {
    /// Step time (forward + loss + backward).
    pub ns: u64,
    /// Forward + loss time.
    pub forward_ns: u64,
    /// Peak live bytes above the baseline, during the step.
    pub peak: u64,
    /// Live bytes above the baseline after forward + loss.
    pub kept: i64,
    /// remat's own count of kept bytes after forward (`stats().live_bytes`).
    pub remat_kept: Option<u64>,
    /// remat's own peak of held bytes over the step (`stats().peak_bytes`).
    pub remat_peak: Option<u64>,
    /// remat replays during the step.
    pub replays: Option<u64>,
    /// Their time (`remat::stats().replay_ns`).
    pub replay_ns: Option<u64>,
    /// Minor page faults of the process during the step (fresh pages the allocator's
    /// memory touched; `None` where `/proc/self/stat` cannot be read).
    pub faults: Option<u64>,
    /// Of the weight gradients.
    pub fingerprint: Fingerprint,
    /// With `trace`.
    pub trace: Option<Trace>,
}

/// A prepared engine: weights and input already on the device; each call runs one step.
pub type Runner = Box<dyn FnMut(bool) -> Sample>;

/// Builds the runner of `engine` on inner backend `I`.
pub fn runner<I: Backend>(engine: Engine, spec: Arc<Spec>) -> Runner {
    match engine {
        Engine::BurnNone => prepare::<burn_autodiff::Autodiff<I>>(engine, spec),
        Engine::BurnBalanced => {
            prepare::<burn_autodiff::Autodiff<I, BalancedCheckpointing>>(engine, spec)
        }
        _ => prepare::<remat::Autodiff<I>>(engine, spec),
    }
}

fn prepare<B: AutodiffBackend>(engine: Engine, spec: Arc<Spec>) -> Runner {
    let device = B::Device::default();
    let weights: Vec<FloatTensor<B>> = spec
        .params
        .iter()
        .map(|leaf| B::float_set_require_grad(B::float_from_data(leaf.data(), &device), true))
        .collect();
    let input = B::float_from_data(spec.input.data(), &device);
    Box::new(move |trace| step::<B>(engine, &spec, &weights, &input, trace))
}

/// Samples the allocator's live bytes every ~50 us until stopped, once the step's baseline
/// is set (so that the sampler's own buffer is not counted).
struct Sampler {
    stop: Arc<AtomicBool>,
    base: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<Vec<(u64, i64)>>,
}

impl Sampler {
    fn start(start: Instant) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let base = Arc::new(AtomicU64::new(u64::MAX));
        let (flag, baseline) = (stop.clone(), base.clone());
        let handle = std::thread::spawn(move || {
            let mut points = Vec::with_capacity(1 << 18);
            while !flag.load(Ordering::Relaxed) && points.len() < points.capacity() {
                let base = baseline.load(Ordering::Relaxed);
                if base != u64::MAX {
                    let live = alloc::live() as i64 - base as i64;
                    points.push((start.elapsed().as_nanos() as u64, live));
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            points
        });
        Sampler { stop, base, handle }
    }

    fn finish(self) -> Vec<(u64, i64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

fn step<B: AutodiffBackend>(
    engine: Engine,
    spec: &Spec,
    weights: &[FloatTensor<B>],
    input: &FloatTensor<B>,
    trace: bool,
) -> Sample {
    // The sampler's buffer is allocated before the baseline.
    let prestart = Instant::now();
    let sampler = trace.then(|| Sampler::start(prestart));
    if trace {
        std::thread::sleep(Duration::from_millis(2));
    }
    let device = B::Device::default();
    // On a device backend (CubeCL's pools) memory is the device's: bytes in use, read after a
    // sync (queued ops allocate when they run). Host backends have no pools.
    let device_base = device_in_use::<B>(&device);
    remat::reset_stats();
    let base = alloc::live();
    alloc::reset_peak();
    if let Some(sampler) = &sampler {
        sampler.base.store(base, Ordering::Relaxed);
    }
    let faults_before = minor_faults();
    let start = Instant::now();
    let hook = Hook::new(engine.regions(), start, base);
    let run = || {
        let out = models::forward::<B>(&spec.config, weights, input.clone(), &hook);
        let loss = B::float_mean(B::float_mul(out.clone(), out));
        // On an asynchronous backend this waits for the forward pass to run (a no-op on
        // host backends), so that its time and the bytes it keeps are measured.
        let device_kept = device_in_use::<B>(&device);
        let forward_ns = start.elapsed().as_nanos() as u64;
        let kept = match (device_base, device_kept) {
            (Some(before), Some(after)) => after as i64 - before as i64,
            _ => alloc::live() as i64 - base as i64,
        };
        let remat_kept = remat::stats().live_bytes;
        hook.mark();
        let grads = B::backward(loss);
        (grads, forward_ns, kept, remat_kept)
    };
    let (grads, forward_ns, kept, remat_kept) = match engine.remat_policy() {
        Some(policy) => remat::with_policy(policy, run),
        None => run(),
    };
    let device_after = device_in_use::<B>(&device);
    let ns = start.elapsed().as_nanos() as u64;
    let faults = faults_before
        .zip(minor_faults())
        .map(|(before, after)| after.saturating_sub(before));
    // The device has no peak counter: its larger of the two samples (after the forward pass,
    // after backward with the gradients) stands for it.
    let peak = match (device_base, device_after) {
        (Some(before), Some(after)) => (after.saturating_sub(before)).max(kept.max(0) as u64),
        _ => alloc::peak().saturating_sub(base),
    };
    let is_remat = engine.engine() == "remat";
    let after = remat::stats();
    let replays = is_remat.then_some(after.replays);
    let replay_ns = is_remat.then_some(after.replay_ns);
    let remat_peak = is_remat.then_some(after.peak_bytes);
    let offset = start.duration_since(prestart).as_nanos() as i64;
    let trace = sampler.map(|sampler| {
        let points = sampler.finish();
        let ms = |ns: i64| ns as f64 / 1e6;
        let (t_ms, bytes) = points
            .iter()
            .filter(|(t, _)| (*t as i64) >= offset)
            .map(|&(t, live)| (ms(t as i64 - offset), live))
            .unzip();
        Trace {
            t_ms,
            bytes,
            layers: hook
                .marks
                .borrow()
                .iter()
                .map(|&(t, b)| (ms(t as i64), b))
                .collect(),
            forward_end_ms: ms(forward_ns as i64),
        }
    });
    let fingerprint = fingerprint::<B>(weights, &grads);
    drop(grads);
    Sample {
        ns,
        forward_ns,
        peak,
        kept,
        remat_kept: is_remat.then_some(remat_kept),
        remat_peak,
        replays,
        replay_ns,
        faults,
        fingerprint,
        trace,
    }
}

/// The device's bytes in use after a sync, on a backend with memory pools (wgpu, CUDA);
/// `None` on host backends (their memory is the counting allocator's).
fn device_in_use<B: AutodiffBackend>(device: &B::Device) -> Option<u64> {
    B::sync(device).expect("the device syncs");
    B::memory_pool_usage(device).map(|usage| usage.bytes_in_use)
}

fn fingerprint<B: AutodiffBackend>(
    weights: &[FloatTensor<B>],
    grads: &B::Gradients,
) -> Fingerprint {
    let mut fp = Fingerprint::default();
    let mut hash = FNV_START;
    for w in weights {
        let Some(grad) = B::grad(w, grads) else {
            fp.missing += 1;
            continue;
        };
        let data =
            burn_backend::read_sync(B::InnerBackend::float_into_data(grad)).expect("gradient data");
        let values = data
            .convert::<f32>()
            .try_to_vec::<f32>()
            .expect("f32 gradient");
        for v in values {
            let v64 = v as f64;
            fp.sum += v64;
            fp.sum_abs += v64.abs();
            fp.sum_sq += v64 * v64;
            fnv1a(&mut hash, v);
        }
    }
    fp.hash = format!("{hash:016x}");
    fp
}

/// FNV-1a's offset basis: the hash of nothing.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Adds `v`'s bits to an FNV-1a hash (bit-for-bit comparisons of gradients and weights).
pub fn fnv1a(hash: &mut u64, v: f32) {
    for byte in v.to_bits().to_le_bytes() {
        *hash ^= byte as u64;
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

/// Per-op bookkeeping figures of one run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Micro {
    /// Forward ns per recorded op.
    pub forward_ns: f64,
    /// Backward ns per recorded op.
    pub backward_ns: f64,
    /// Live bytes per op after forward (what the engine keeps per op).
    pub kept_bytes: f64,
    /// Bytes allocated per op during forward.
    pub alloc_bytes: f64,
    /// Allocations per op during forward.
    pub allocs: f64,
    /// Allocations per op during backward.
    pub backward_allocs: f64,
}

/// The micro-benchmark on one engine: `ops` alternating `mul_scalar` / `add_scalar` on a
/// 16-element tensor that requires grad, then backward.
pub fn micro<I: Backend>(engine: Engine, ops: usize) -> Micro {
    match engine {
        Engine::BurnNone => micro_on::<burn_autodiff::Autodiff<I>>(engine, ops),
        Engine::BurnBalanced => {
            micro_on::<burn_autodiff::Autodiff<I, BalancedCheckpointing>>(engine, ops)
        }
        _ => micro_on::<remat::Autodiff<I>>(engine, ops),
    }
}

fn micro_on<B: AutodiffBackend>(engine: Engine, ops: usize) -> Micro {
    let device = B::Device::default();
    let x = B::float_set_require_grad(
        B::float_from_data(TensorData::new(vec![0.5f32; 16], vec![16]), &device),
        true,
    );
    let run = || {
        let before = alloc::snapshot();
        let start = Instant::now();
        let mut y = x.clone();
        for i in 0..ops {
            y = if i % 2 == 0 {
                B::float_mul_scalar(y, 1.0001f32.into())
            } else {
                B::float_add_scalar(y, 0.001f32.into())
            };
        }
        let forward = start.elapsed();
        let after_forward = alloc::snapshot();
        let loss = B::float_sum(y);
        let start = Instant::now();
        let grads = B::backward(loss);
        let backward = start.elapsed();
        let after_backward = alloc::snapshot();
        assert!(B::grad(&x, &grads).is_some(), "micro: no gradient for x");
        drop(grads);
        let n = ops as f64;
        Micro {
            forward_ns: forward.as_nanos() as f64 / n,
            backward_ns: backward.as_nanos() as f64 / n,
            kept_bytes: (after_forward.live as f64 - before.live as f64) / n,
            alloc_bytes: (after_forward.allocated - before.allocated) as f64 / n,
            allocs: (after_forward.allocs - before.allocs) as f64 / n,
            backward_allocs: (after_backward.allocs - after_forward.allocs) as f64 / n,
        }
    };
    match engine.remat_policy() {
        Some(policy) => remat::with_policy(policy, run),
        None => run(),
    }
}

/// The process's minor page faults so far (field 10 of `/proc/self/stat`, every thread's);
/// `None` off Linux or where it cannot be read.
fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(7)?.parse().ok()
}
