//! Where a step's heap peak sits: with `REMAT_BENCH_PEAK_TRACE=1`, a capacity trial
//! (`--capacity-child`) records each allocation of [`THRESHOLD`] bytes or more in its last
//! step with the frames that made it, and prints the ones still live at the step's peak.
//!
//! The snapshot is taken at the last allocation of at least [`THRESHOLD`] bytes that set a
//! new peak of the step, so smaller allocations after it can add up to a little more. The
//! tracer's own allocations (frame strings, the table) are counted by the allocator like any
//! other, and the first backtrace loads the symbols, so [`start`] takes one before the step.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// The smallest allocation traced.
pub const THRESHOLD: usize = 512 * 1024;

/// Frames kept per allocation.
const FRAMES: usize = 6;

static ON: AtomicBool = AtomicBool::new(false);
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A traced allocation: its order, bytes and frames.
#[derive(Clone)]
struct Buffer {
    order: u64,
    bytes: usize,
    frames: String,
}

/// Live traced allocations by address.
static LIVE: Mutex<Option<HashMap<usize, Buffer>>> = Mutex::new(None);
/// The live traced allocations at the step's peak, with the peak.
static AT_PEAK: Mutex<Option<(u64, Vec<Buffer>)>> = Mutex::new(None);

thread_local! {
    /// Set while the tracer itself runs on this thread (its own allocations are not traced).
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Whether `REMAT_BENCH_PEAK_TRACE` asks for the trace.
pub fn wanted() -> bool {
    std::env::var_os("REMAT_BENCH_PEAK_TRACE").is_some_and(|v| v != "0")
}

/// Runs `f` as the tracer, unless the tracer already runs on this thread.
fn as_tracer(f: impl FnOnce()) {
    if BUSY.with(|b| b.replace(true)) {
        return;
    }
    f();
    BUSY.with(|b| b.set(false));
}

/// The frames of the current backtrace that say who allocated: the innermost Burn frame
/// (the kernel), then remat's and the bench's; where no Burn frame made it (a worker
/// thread's scratch), the innermost frames outside the standard library.
fn frames() -> String {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    let names: Vec<&str> = trace
        .lines()
        .filter_map(|line| line.trim().split_once(": ").map(|(_, f)| f))
        .filter(|f| !f.contains("peak_trace") && !f.contains("alloc::Counting"))
        .collect();
    let ours = |f: &&str| f.contains("remat") || f.contains("bench::");
    let picked: Vec<&str> = match names.iter().position(|f| f.contains("burn")) {
        Some(kernel) => std::iter::once(names[kernel])
            .chain(names[kernel + 1..].iter().copied().filter(ours))
            .collect(),
        None => names
            .iter()
            .copied()
            .filter(|f| {
                !["std::", "core::", "alloc::", "<alloc::", "__rust", "rust_"]
                    .iter()
                    .any(|p| f.starts_with(p))
            })
            .collect(),
    };
    picked
        .into_iter()
        .take(FRAMES)
        .collect::<Vec<_>>()
        .join(" <- ")
}

/// Loads the symbols (the first backtrace's cost) and starts tracing.
pub fn start() {
    as_tracer(|| {
        let _ = frames();
        *LIVE.lock().unwrap_or_else(|e| e.into_inner()) = Some(HashMap::new());
        *AT_PEAK.lock().unwrap_or_else(|e| e.into_inner()) = None;
    });
    ON.store(true, Relaxed);
}

/// Stops tracing and prints what was live at the peak, oldest first.
pub fn stop_and_print(base: u64) {
    ON.store(false, Relaxed);
    as_tracer(|| {
        let at_peak = AT_PEAK.lock().unwrap_or_else(|e| e.into_inner()).take();
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some((peak, mut buffers)) = at_peak else {
            eprintln!("peak trace: no allocation of {THRESHOLD} bytes or more set the peak");
            return;
        };
        buffers.sort_by_key(|b| b.order);
        let traced: usize = buffers.iter().map(|b| b.bytes).sum();
        eprintln!(
            "peak trace: {:.1} MiB above the step's start; {} live buffers of {} KiB or more \
             hold {:.1} MiB, oldest first:",
            peak.saturating_sub(base) as f64 / 1048576.0,
            buffers.len(),
            THRESHOLD / 1024,
            traced as f64 / 1048576.0
        );
        for b in buffers {
            eprintln!(
                "  {:7.2} MiB #{:<6} {}",
                b.bytes as f64 / 1048576.0,
                b.order,
                b.frames
            );
        }
    });
}

/// An allocation of `bytes` at `ptr`; `peak` is the step's new peak it set, if it did.
pub fn allocated(ptr: usize, bytes: usize, peak: Option<u64>) {
    if bytes < THRESHOLD || !ON.load(Relaxed) {
        return;
    }
    as_tracer(|| {
        let buffer = Buffer {
            order: SEQUENCE.fetch_add(1, Relaxed),
            bytes,
            frames: frames(),
        };
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        let Some(live) = live.as_mut() else { return };
        live.insert(ptr, buffer);
        if let Some(peak) = peak {
            *AT_PEAK.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((peak, live.values().cloned().collect()));
        }
    });
}

/// A deallocation of `bytes` at `ptr`.
pub fn freed(ptr: usize, bytes: usize) {
    if bytes < THRESHOLD || !ON.load(Relaxed) {
        return;
    }
    as_tracer(|| {
        if let Some(live) = LIVE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            live.remove(&ptr);
        }
    });
}
