//! Memory asserted with exact numbers, not only gradients: for a chain and an MLP written
//! with backend ops, under every control (SaveAll, Balanced, RecomputeAll, one checkpoint
//! region per layer),
//! - the bytes kept after forward (`remat::stats().live_bytes`), computed from the shapes;
//! - the peak kept during backward (`remat::stats().peak_bytes` after `reset_stats`), computed
//!   from the shapes, and the heap after backward (a counting global allocator): every kept
//!   value is freed, only the gradients remain;
//! - a trace of the bytes kept while backward runs, sampled at inner backend calls through
//!   the counting wrapper (`support::counting::observe`): under SaveAll each backward step
//!   frees the value it read last before the next step starts, so nothing is held past its
//!   last read.
//!
//! `remat::stats()` and the allocator's counters are process-wide: the tests of this file run
//! one at a time ([`serial`]).

mod support;

use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard};

use burn_backend::ops::{ActivationOps, FloatTensorOps};
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData};
use burn_flex::Flex;
use remat::{Autodiff, Policy};
use support::counting::{Counting, observe};

type C = Autodiff<Counting<Flex>>;
type T = FloatTensor<C>;

/// Heap bytes allocated by the measured thread (`support::heap`).
fn heap() -> isize {
    support::heap::live()
}

#[global_allocator]
static GLOBAL: support::heap::Heap = support::heap::Heap;

/// Far below one tensor of these tests (4 KiB and more): lazily initialised state and the
/// graph's own bookkeeping (nodes, edges) stay under it.
const HEAP_SLACK: isize = 2048;

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time, its thread's allocations counted until the guard drops.
struct Serial(#[allow(dead_code)] MutexGuard<'static, ()>);

fn serial() -> Serial {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    support::heap::set_measured(true);
    Serial(guard)
}

impl Drop for Serial {
    fn drop(&mut self) {
        support::heap::set_measured(false);
        observe(None);
    }
}

// ---- The trace of kept bytes during backward ----

thread_local! {
    static TRACE: RefCell<Vec<(&'static str, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Records the bytes remat keeps at every inner call (before the call runs).
fn sample(op: &'static str) {
    // Not counted on the heap: the sample's own allocations are the test's, not remat's.
    let was = support::heap::set_measured(false);
    let live = remat::stats().live_bytes;
    TRACE.with(|t| t.borrow_mut().push((op, live)));
    support::heap::set_measured(was);
}

/// Runs `f` with [`sample`] observing the inner calls; returns `f`'s result and the kept
/// bytes (above `base`) at each call of inner op `at`, in order.
fn trace<R>(at: &str, base: u64, f: impl FnOnce() -> R) -> (R, Vec<u64>) {
    TRACE.with(|t| t.borrow_mut().clear());
    observe(Some(sample));
    let out = f();
    observe(None);
    let samples = TRACE.with(|t| {
        t.borrow()
            .iter()
            .filter(|(op, _)| *op == at)
            .map(|(_, live)| live - base)
            .collect()
    });
    (out, samples)
}

// ---- Programs ----

fn leaf(shape: [usize; 2], seed: usize) -> T {
    let n = shape[0] * shape[1];
    let values: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 97) as f32 / 97.0 - 0.45)
        .collect();
    let x = C::float_from_data(TensorData::new(values, shape), &Default::default());
    C::float_set_require_grad(x, true)
}

/// The controls every program runs under.
#[derive(Clone, Copy, Debug)]
enum Control {
    SaveAll,
    Balanced,
    RecomputeAll,
    /// The default policy, each layer in its own `remat::checkpoint` region.
    Regions,
}

const CONTROLS: [Control; 4] = [
    Control::SaveAll,
    Control::Balanced,
    Control::RecomputeAll,
    Control::Regions,
];

/// Runs `layers` under `control`: each layer is called once, in a region for
/// [`Control::Regions`].
fn run(control: Control, x: T, layers: &[&dyn Fn(T) -> T]) -> T {
    let chain = |x: T| layers.iter().fold(x, |y, layer| layer(y));
    match control {
        Control::SaveAll => remat::with_policy(Policy::SaveAll, || chain(x)),
        Control::Balanced => remat::with_policy(Policy::Balanced, || chain(x)),
        Control::RecomputeAll => remat::with_policy(Policy::RecomputeAll, || chain(x)),
        Control::Regions => layers
            .iter()
            .fold(x, |y, layer| remat::checkpoint(|| layer(y))),
    }
}

/// What one forward + backward did, in bytes above where it started.
#[derive(Debug, PartialEq, Eq)]
struct Measured {
    /// `stats().live_bytes` after forward.
    kept: u64,
    /// `stats().peak_bytes` during backward (reset after forward).
    peak: u64,
}

/// Runs `forward` (on leaves of `leaf_bytes` in all, made by the caller), then backward on
/// its output, and measures both. Checks on the way that the heap after forward holds the
/// kept values and the output (graph bookkeeping aside), that backward frees every kept
/// value (the heap then holds the gradients, one per leaf, and nothing else) and that
/// dropping the gradients returns the heap to where it started. Also returns the kept bytes
/// at each inner call of op `at` during backward.
fn measure(
    what: &str,
    leaf_bytes: u64,
    at: &str,
    forward: impl FnOnce() -> T,
) -> (Measured, Vec<u64>) {
    let base = remat::stats().live_bytes;
    let heap_start = heap();
    let y = forward();
    let kept = remat::stats().live_bytes - base;
    let out_bytes = bytes_of(&y) as isize;
    let heap_forward = heap() - heap_start;
    assert!(
        heap_forward >= kept as isize + out_bytes,
        "{what}: the heap grew by {heap_forward} bytes in forward, less than the {kept} bytes \
         stats say are kept plus the {out_bytes}-byte output"
    );
    remat::reset_stats();
    let (grads, samples) = trace(at, base, || C::backward(y));
    let peak = remat::stats().peak_bytes - base;
    assert_eq!(
        remat::stats().live_bytes,
        base,
        "{what}: kept after backward"
    );
    let held = heap() - heap_start - leaf_bytes as isize;
    assert!(
        held.abs() <= HEAP_SLACK,
        "{what}: after backward the heap holds {held} bytes more than the gradients \
         ({leaf_bytes} bytes): a kept value was not freed"
    );
    drop(grads);
    let left = heap() - heap_start;
    assert!(
        left.abs() <= HEAP_SLACK,
        "{what}: {left} bytes left after dropping the gradients"
    );
    (Measured { kept, peak }, samples)
}

fn bytes_of(tensor: &T) -> usize {
    use burn_backend::TensorMetadata;
    tensor.shape().num_elements() * tensor.dtype().size()
}

const BATCH: usize = 64;
const INPUT: usize = 32;
const HIDDEN: usize = 48;
const OUTPUT: usize = 16;
/// One hidden activation, `[BATCH, HIDDEN]` f32.
const H: u64 = (BATCH * HIDDEN * 4) as u64;

/// An MLP of three layers, `x [64, 32] -> relu(x W1) -> tanh(tanh(. W2)) -> . W3 [64, 16]`,
/// every input a leaf (the user's: not counted as kept). The values a backward step reads
/// (the rules in `src/ops`): relu and tanh read their outputs, a matmul its two inputs. So
/// the activations backward can need are `h1 = relu(x W1)`, `u = tanh(h1 W2)` and
/// `t = tanh(u)`, all `[64, 48]` (H bytes each); the matmuls' outputs are read by nothing.
///
/// Under each control, the bytes kept after forward and the peak during backward, and the
/// bytes kept when each inner `float_matmul` call starts during backward. Backward runs
/// layer 3's matmul backward (`g W3^T`, then `t^T g`), tanh(u)'s (reads t last), tanh's (reads
/// u last), layer 2's matmul backward (reads h1), relu's (reads h1 last), layer 1's matmul
/// backward; a replay shows up as a forward op in between.
#[test]
fn mlp_kept_peak_and_trace_under_every_control() {
    let _s = serial();
    let leaf_bytes =
        ((BATCH * INPUT + INPUT * HIDDEN + HIDDEN * HIDDEN + HIDDEN * OUTPUT) * 4) as u64;
    // Warm-up: lazily initialised state (thread-locals, the registry's shard of this
    // thread, the matmul kernel's buffers) must not count as held.
    for control in CONTROLS {
        let x = leaf([BATCH, INPUT], 1);
        let w = leaf([INPUT, OUTPUT], 2);
        let y = run(
            control,
            x,
            &[&|h| C::float_tanh(C::float_matmul(h, w.clone()))],
        );
        drop(C::backward(y));
    }
    let cases: [(Control, Measured, Vec<u64>); 4] = [
        // Everything read is kept: h1, u, t. Each is freed by the step that reads it last:
        // t before layer 2's matmul backward (by tanh(u)'s), u by tanh's, h1 by relu's,
        // before layer 1's.
        (
            Control::SaveAll,
            Measured {
                kept: 3 * H,
                peak: 3 * H,
            },
            vec![3 * H, 3 * H, H, H, 0, 0],
        ),
        // t is one cheap op from a kept value (u): Balanced rebuilds it (the `float_tanh`
        // replay, before the second matmul call), and keeps h1 and u, whose rebuilds would
        // replay a matmul.
        (
            Control::Balanced,
            Measured {
                kept: 2 * H,
                peak: 3 * H,
            },
            vec![2 * H, 3 * H, H, H, 0, 0],
        ),
        // Nothing kept; layer 3's first matmul call (`g W3^T`) needs no activation, then the
        // whole chain is replayed (matmuls x W1 and h1 W2, at 0 and H kept) to rebuild t,
        // and h1, u, t are held while layer 3's backward reads t.
        (
            Control::RecomputeAll,
            Measured {
                kept: 0,
                peak: 3 * H,
            },
            vec![0, 0, H, 3 * H, H, H, 0, 0],
        ),
        // One region per layer: the regions' outputs h1 and t are kept, u (inside layer 2's
        // region) is rebuilt by replaying `h1 W2` (the matmul call at H) and tanh, and moves
        // straight to tanh's backward, its only read: never more than h1 and t at once.
        (
            Control::Regions,
            Measured {
                kept: 2 * H,
                peak: 2 * H,
            },
            vec![2 * H, 2 * H, H, H, H, 0, 0],
        ),
    ];
    for (control, want, want_at_matmul) in cases {
        let x = leaf([BATCH, INPUT], 1);
        let w1 = leaf([INPUT, HIDDEN], 2);
        let w2 = leaf([HIDDEN, HIDDEN], 3);
        let w3 = leaf([HIDDEN, OUTPUT], 4);
        let l1 = |h: T| C::relu(C::float_matmul(h, w1.clone()));
        let l2 = |h: T| C::float_tanh(C::float_tanh(C::float_matmul(h, w2.clone())));
        let l3 = |h: T| C::float_matmul(h, w3.clone());
        let what = format!("mlp {control:?}");
        let (got, at_matmul) = measure(&what, leaf_bytes, "float_matmul", || {
            run(control, x.clone(), &[&l1, &l2, &l3])
        });
        assert_eq!(
            got, want,
            "{what}: bytes kept after forward and peak in backward"
        );
        assert_eq!(
            at_matmul, want_at_matmul,
            "{what}: bytes kept at each inner matmul call in backward (H = {H}): a value is \
             held past its last read, or rebuilt too early"
        );
    }
}

#[test]
fn chain_save_all_frees_each_value_at_its_last_read() {
    let _s = serial();
    const DEPTH: usize = 8;
    const BYTES: u64 = 1024 * 4; // one [1, 1024] f32 value
    let x = leaf([1, 1024], 1);
    let base = remat::stats().live_bytes;
    let y = remat::with_policy(Policy::SaveAll, || {
        (0..DEPTH).fold(x.clone(), |y, _| C::float_sin(y))
    });
    // sin's backward reads its input: the DEPTH - 1 values between x (a leaf, the user's)
    // and the output are kept.
    assert_eq!(remat::stats().live_bytes - base, (DEPTH as u64 - 1) * BYTES);
    let (grads, at_cos) = trace("float_cos", base, || C::backward(y));
    assert!(C::grad(&x, &grads).is_some());
    // The step of the k-th sin (k = DEPTH..1) computes the cosine of y_{k-1} after reading
    // it; that read is its last, so y_{k-1} is no longer kept by then: y_1 .. y_{k-2} are,
    // (k - 2) values (none for the first two sins; y_0 is the leaf).
    let want: Vec<u64> = (1..=DEPTH as u64)
        .rev()
        .map(|k| k.saturating_sub(2) * BYTES)
        .collect();
    assert_eq!(
        at_cos, want,
        "bytes kept at each backward step's cos (SaveAll): a value is held past its last read"
    );
    assert_eq!(remat::stats().live_bytes, base);
}

/// NOTE [hand-over]: under a budget the schedule frees a value right after the step that
/// reads it last, and that read takes it: the step owns the value (an inner kernel may work
/// in place) and the held bytes at each step's cos are SaveAll's, exactly.
#[test]
fn chain_under_a_budget_hands_each_value_over_at_its_last_read() {
    let _s = serial();
    const DEPTH: usize = 8;
    const BYTES: u64 = 1024 * 4;
    let want: Vec<u64> = (1..=DEPTH as u64)
        .rev()
        .map(|k| k.saturating_sub(2) * BYTES)
        .collect();
    // The unbounded budget keeps what SaveAll keeps; 4 values make the schedule rebuild.
    for budget in [u64::MAX, 4 * BYTES] {
        let x = leaf([1, 1024], 1);
        let base = remat::stats().live_bytes;
        let y = remat::with_policy(Policy::Budget(budget), || {
            (0..DEPTH).fold(x.clone(), |y, _| C::float_sin(y))
        });
        let (grads, at_cos) = trace("float_cos", base, || C::backward(y));
        assert!(C::grad(&x, &grads).is_some());
        if budget == u64::MAX {
            assert_eq!(
                at_cos, want,
                "bytes held at each step's cos under Budget(u64::MAX): a value is held past \
                 its last read"
            );
        } else {
            // Never more than the budget minus the value being read (it left at its read).
            assert!(
                at_cos.iter().all(|&b| b < budget),
                "{at_cos:?} under a budget of {budget}"
            );
        }
        assert_eq!(remat::stats().live_bytes, base);
    }
}
