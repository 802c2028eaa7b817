//! A counting global allocator for the measured thread: the live bytes it allocated and their
//! peak. The test harness allocates on its own threads while a test runs (output capture, the
//! results of finished tests), and Flex, as remat's tests build it, runs every kernel on the
//! calling thread: only the thread that turned [`set_measured`] on is counted.
//!
//! A test binary installs it with
//! `#[global_allocator] static GLOBAL: support::heap::Heap = support::heap::Heap;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// The allocator (see the module docs).
pub struct Heap;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    static MEASURED: Cell<bool> = const { Cell::new(false) };
}

fn account(bytes: isize) {
    if MEASURED.try_with(Cell::get).unwrap_or(false) {
        let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
        PEAK.fetch_max(live, Ordering::Relaxed);
        if bytes > 0 {
            ALLOCATED.fetch_add(bytes, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call forwards to `System` unchanged; the counters never allocate.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        account(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        account(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        account(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        account(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Counts this thread's allocations from now on (`true`) or stops (`false`); returns whether
/// it was counted before.
pub fn set_measured(on: bool) -> bool {
    MEASURED.with(|m| m.replace(on))
}

/// Bytes the measured threads hold.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Bytes the measured threads allocated so far (never decreases).
#[allow(dead_code)]
pub fn allocated() -> isize {
    ALLOCATED.load(Ordering::Relaxed)
}

/// The most [`live`] bytes since the last [`reset_peak`].
pub fn peak() -> isize {
    PEAK.load(Ordering::Relaxed)
}

/// Restarts the peak at `bytes` (usually [`live`]).
pub fn reset_peak(bytes: isize) {
    PEAK.store(bytes, Ordering::Relaxed);
}

/// One measured test at a time in a test binary (the counters are shared).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Counts this thread's allocations until dropped, one measured test at a time.
pub struct Measuring(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

/// Starts measuring this thread (see [`Measuring`]).
#[allow(dead_code)]
pub fn measure() -> Measuring {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    set_measured(true);
    Measuring(serial)
}

impl Drop for Measuring {
    fn drop(&mut self) {
        // Before the lock is released (fields drop after this).
        set_measured(false);
    }
}
