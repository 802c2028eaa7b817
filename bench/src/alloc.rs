//! A counting global allocator: live bytes, a resettable peak, allocation counts, and an
//! optional cap on the live bytes (the capacity trials).
//!
//! Every thread's allocations count (the inner backends may use worker threads).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Wraps the system allocator and counts.
pub struct Counting;

static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
/// The highest `LIVE` since the process started (never reset).
static PROCESS_PEAK: AtomicU64 = AtomicU64::new(0);
/// The most live bytes an allocation may bring the process to ([`set_cap`]).
static CAP: AtomicU64 = AtomicU64::new(u64::MAX);

/// Counts `bytes` more; returns the new peak if they set one.
fn grow(bytes: usize, new_allocation: bool) -> Option<u64> {
    if new_allocation {
        ALLOCS.fetch_add(1, Relaxed);
    }
    ALLOCATED.fetch_add(bytes as u64, Relaxed);
    let live = LIVE.fetch_add(bytes as u64, Relaxed) + bytes as u64;
    PROCESS_PEAK.fetch_max(live, Relaxed);
    (PEAK.fetch_max(live, Relaxed) < live).then_some(live)
}

/// Whether `bytes` more would take the live heap past the cap. Threads racing past the check
/// together can overshoot it by their allocations' sizes; a trial's cap is far larger.
fn over_cap(bytes: usize) -> bool {
    LIVE.load(Relaxed).saturating_add(bytes as u64) > CAP.load(Relaxed)
}

fn shrink(bytes: usize) {
    LIVE.fetch_sub(bytes as u64, Relaxed);
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged, or returns
// null (an allocation failure, which the contract allows) past the cap; the counters are plain
// atomics and never allocate. The peak tracer (off unless asked) allocates, and does not
// recurse: it ignores allocations made while it runs on the same thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if over_cap(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as ours.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let peak = grow(layout.size(), true);
            crate::peak_trace::allocated(ptr as usize, layout.size(), peak);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if over_cap(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as ours.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            let peak = grow(layout.size(), true);
            crate::peak_trace::allocated(ptr as usize, layout.size(), peak);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
        crate::peak_trace::freed(ptr as usize, layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && over_cap(new_size - layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as ours.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            ALLOCS.fetch_add(1, Relaxed);
            if new_size >= layout.size() {
                let _ = grow(new_size - layout.size(), false);
            } else {
                shrink(layout.size() - new_size);
            }
        }
        new
    }
}

/// Bytes allocated and not yet freed.
pub fn live() -> u64 {
    LIVE.load(Relaxed)
}

/// Highest `live()` since the last [`reset_peak`].
pub fn peak() -> u64 {
    PEAK.load(Relaxed)
}

/// The highest live bytes since the process started.
pub fn process_peak() -> u64 {
    PROCESS_PEAK.load(Relaxed)
}

/// From now on, an allocation that would take the live heap past `bytes` fails (returns null:
/// Rust's allocation-error handler then aborts the process). For the capacity trials, each in
/// a process of its own.
pub fn set_cap(bytes: u64) {
    CAP.store(bytes, Relaxed);
}

/// Sets the peak to the current live bytes.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
}

/// Counters at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot {
    /// Live bytes.
    pub live: u64,
    /// Allocations (and reallocations) so far.
    pub allocs: u64,
    /// Bytes ever allocated so far.
    pub allocated: u64,
}

/// Reads every counter.
pub fn snapshot() -> Snapshot {
    Snapshot {
        live: LIVE.load(Relaxed),
        allocs: ALLOCS.load(Relaxed),
        allocated: ALLOCATED.load(Relaxed),
    }
}
