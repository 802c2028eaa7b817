//! Real bytes, measured with a counting global allocator: after backward and dropping
//! everything, and after dropping a graph without backward, the heap returns to its
//! baseline; `remat::stats()` agrees with the allocator about what a forward pass keeps.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicIsize, Ordering};

use burn_backend::ops::FloatTensorOps;
use burn_backend::{AutodiffBackend, TensorData};
use burn_flex::Flex;
use remat::{Autodiff, Policy};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

type A = Autodiff<Flex>;

/// The allocator counts the whole process: tests run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The test harness allocates a few bytes on its own threads (output capture): compare
/// with a tolerance far below the size of one tensor (256 KiB).
fn assert_near(got: isize, want: isize, what: &str) {
    assert!(
        (got - want).abs() < 4096,
        "{what}: {got} bytes live, expected {want}"
    );
}

const N: usize = 64 * 1024; // 256 KiB per f32 tensor

fn leaf() -> <A as burn_backend::BackendTypes>::FloatTensorPrimitive {
    let x = A::float_from_data(TensorData::new(vec![0.5f32; N], [N]), &Default::default());
    A::float_set_require_grad(x, true)
}

fn forward(
    x: <A as burn_backend::BackendTypes>::FloatTensorPrimitive,
    depth: usize,
) -> <A as burn_backend::BackendTypes>::FloatTensorPrimitive {
    let mut y = x;
    for _ in 0..depth {
        let a = A::float_sin(y.clone());
        y = A::float_mul(a, y);
    }
    y
}

/// Warms up lazily-initialised state (thread-locals, device settings) so that it does not
/// count as a leak.
fn warm_up() {
    let x = leaf();
    let y = remat::with_policy(Policy::RecomputeAll, || {
        remat::checkpoint(|| forward(x.clone(), 2))
    });
    let g = A::backward(y);
    drop(A::grad(&x, &g));
}

#[test]
fn heap_returns_to_baseline() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    warm_up();
    for policy in [Policy::SaveAll, Policy::Balanced, Policy::RecomputeAll] {
        let baseline = live();
        {
            let x = leaf();
            let y = remat::with_policy(policy.clone(), || forward(x.clone(), 20));
            let grads = A::backward(y);
            assert!(A::grad(&x, &grads).is_some());
        }
        assert_near(
            live(),
            baseline,
            &format!("{policy:?}: after backward and drop"),
        );

        let x = leaf();
        let with_leaf = live();
        let y = remat::with_policy(policy.clone(), || forward(x.clone(), 20));
        assert!(live() > with_leaf);
        drop(y);
        assert_near(
            live(),
            with_leaf,
            &format!("{policy:?}: after dropping a graph"),
        );
        drop(x);
        assert_near(
            live(),
            baseline,
            &format!("{policy:?}: after dropping the leaf"),
        );
    }
}

#[test]
fn stats_agree_with_the_allocator() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    warm_up();
    for policy in [Policy::SaveAll, Policy::Balanced, Policy::RecomputeAll] {
        let x = leaf();
        let heap_before = live();
        let kept_before = remat::stats().live_bytes;
        let y = remat::with_policy(policy.clone(), || forward(x.clone(), 20));
        // The output itself is the user's, not kept by remat.
        let heap = (live() - heap_before) as f64 - (N * 4) as f64;
        let kept = (remat::stats().live_bytes - kept_before) as f64;
        let diff = (heap - kept).abs() / heap.max(kept).max(1.0);
        assert!(
            diff < 0.05 || (heap - kept).abs() < 64.0 * 1024.0,
            "{policy:?}: allocator says {heap} bytes, stats say {kept}"
        );
        drop(y);
    }
}
