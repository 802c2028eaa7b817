//! Op times for the budget's planner (NOTE [op-times]).
//!
//! NOTE [op-times]: the planner weighs a replay by the op's forward time. On an asynchronous
//! inner backend (a GPU backend, or one that fuses ops lazily) the wall time around a call is
//! only its launch: every op would look equally cheap, and the planner would rebuild a
//! matmul as readily as an addition. So an op recorded under a budget is timed between two
//! `Backend::sync` calls (free on a synchronous CPU backend), but only for its first
//! [`SAMPLES`] runs per kind (the op's name, the bytes and count of its inputs) on the
//! thread; afterwards its time is the median of those samples and no sync is made. A
//! training loop therefore syncs only in its first step(s), and a recurring op costs the
//! same in every view (equal ops must look equal for Revolve's path).
//!
//! # Invariants
//! - At most `2 * SAMPLES` syncs per kind of op per thread, ever.

use std::cell::RefCell;
use std::collections::HashMap;

/// Timed runs per kind of op before its median is used.
pub(crate) const SAMPLES: usize = 5;

/// What identifies a kind of op before it runs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Kind {
    name: &'static str,
    input_bytes: u64,
    inputs: u32,
}

impl Kind {
    pub(crate) fn new(name: &'static str, input_bytes: u64, inputs: usize) -> Self {
        Self {
            name,
            input_bytes,
            inputs: inputs as u32,
        }
    }
}

thread_local! {
    static TIMES: RefCell<HashMap<Kind, Vec<f64>>> = RefCell::new(HashMap::new());
}

/// The op's time: runs `forward`, timed between `sync`s while the kind has fewer than
/// [`SAMPLES`] samples, else untimed with the samples' median.
pub(crate) fn timed<T>(kind: Kind, sync: impl Fn(), forward: impl FnOnce() -> T) -> (T, f64) {
    let known = TIMES.with(|t| {
        let times = t.borrow();
        times
            .get(&kind)
            .filter(|samples| samples.len() >= SAMPLES)
            .map(|samples| median(samples))
    });
    if let Some(ns) = known {
        return (forward(), ns);
    }
    sync();
    let start = std::time::Instant::now();
    let out = forward();
    sync();
    let ns = start.elapsed().as_nanos() as f64;
    TIMES.with(|t| t.borrow_mut().entry(kind).or_default().push(ns));
    (out, ns)
}

fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}
