//! Op times for the budget's planner (NOTE [op-times]).
//!
//! NOTE [op-times]: the planner weighs a replay by the op's forward time. On an asynchronous
//! inner backend (a GPU backend, or one that fuses ops lazily) the wall time around a call is
//! only its launch: every op would look equally cheap, and the planner would rebuild a
//! matmul as readily as an addition. So an op recorded under a budget is timed between two
//! `Backend::sync` calls (free on a synchronous CPU backend), but only for its first
//! [`SAMPLES`] runs per kind (the inner backend, the op's name, the bytes and count of its
//! inputs) on the thread; afterwards its time is the median of those samples and no sync
//! is made. A training loop therefore syncs only in its first step(s), and a recurring op
//! costs the same in every view (equal ops must look equal for Revolve's path).
//!
//! A thread remembers at most [`MAX_KINDS`] kinds (a model whose shapes vary step to step
//! makes new kinds): past that, the table starts over.
//!
//! NOTE [replay-times]: a replay does not always cost its op's forward time. A custom op's
//! replay runs its `retro_forward`, which may cost anything; and a replay that cannot take
//! its input runs out of place where the forward op ran in place (on NdArray, whose softmax
//! and layer norm are several passes over their input, replays took 3x and 7x the forward
//! pass's times before replays took the inputs they read last, NOTE \[hand-over\] in
//! `budget.rs`; since then 1.0x and 1.05x on the benchmark's transformer at 50%). So
//! replays under a budget are timed too, the same way (between two syncs, the first
//! [`SAMPLES`] per kind: the inner backend, the op's name and output bytes, as the planner's
//! view tells ops apart), and where a kind has replay samples their median is the planner's
//! cost for it: the plan made after the first step (which replays online) weighs what a
//! replay really costs.
//!
//! # Invariants
//! - At most `2 * SAMPLES` syncs per kind of op per thread while the table holds it.

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;

/// Timed runs per kind of op before its median is used.
pub(crate) const SAMPLES: usize = 5;

/// Kinds a thread remembers (a few hundred bytes each).
pub(crate) const MAX_KINDS: usize = 4096;

/// What identifies a kind of op before it runs: the inner backend too, since one process
/// may run the same ops on backends of very different speeds (a CPU and a GPU backend, or
/// the benchmark's Flex and NdArray, whose softmax differ 1.5-1.9x).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Kind {
    backend: TypeId,
    name: &'static str,
    input_bytes: u64,
    inputs: u32,
}

impl Kind {
    pub(crate) fn new(
        backend: TypeId,
        name: &'static str,
        input_bytes: u64,
        inputs: usize,
    ) -> Self {
        Self {
            backend,
            name,
            input_bytes,
            inputs: inputs as u32,
        }
    }
}

/// What identifies a kind of replay: the inner backend, the op's name and its output bytes
/// (as the planner's view tells ops apart).
pub(crate) type ReplayKind = (TypeId, &'static str, u64);

/// The samples of one kind, and their median once there are [`SAMPLES`].
#[derive(Default)]
struct Times {
    samples: Vec<f64>,
    median: Option<f64>,
}

thread_local! {
    static TIMES: RefCell<HashMap<Kind, Times>> = RefCell::new(HashMap::new());
}

/// The op's time: runs `forward`, timed between two `sync`s of `device` while the kind has
/// fewer than [`SAMPLES`] samples, else untimed with the samples' median (computed once).
pub(crate) fn timed<D, T>(
    kind: Kind,
    device: Option<D>,
    sync: impl Fn(&D),
    forward: impl FnOnce() -> T,
) -> (T, f64) {
    let known = TIMES.with(|t| t.borrow().get(&kind).and_then(|times| times.median));
    if let Some(ns) = known {
        return (forward(), ns);
    }
    let sync = || {
        if let Some(device) = &device {
            sync(device);
        }
    };
    sync();
    let start = std::time::Instant::now();
    let out = forward();
    sync();
    let ns = start.elapsed().as_nanos() as f64;
    TIMES.with(|t| {
        let mut times = t.borrow_mut();
        if times.len() >= MAX_KINDS && !times.contains_key(&kind) {
            times.clear();
        }
        let entry = times.entry(kind).or_default();
        entry.samples.push(ns);
        if entry.samples.len() >= SAMPLES {
            entry.samples.sort_by(f64::total_cmp);
            entry.median = Some(entry.samples[entry.samples.len() / 2]);
        }
    });
    (out, ns)
}

thread_local! {
    static REPLAYS: RefCell<HashMap<ReplayKind, Vec<f64>>> = RefCell::new(HashMap::new());
    /// Replay samples this thread recorded, ever.
    static REPLAY_SAMPLES: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// How many replay samples this thread recorded so far: unchanged, no kind's replay time
/// changed.
pub(crate) fn replay_samples() -> u64 {
    REPLAY_SAMPLES.with(core::cell::Cell::get)
}

/// Whether the next replay of this kind is to be timed between syncs (NOTE
/// [replay-times]): while the kind has fewer than [`SAMPLES`] samples.
pub(crate) fn replay_wanted(kind: ReplayKind) -> bool {
    REPLAYS.with(|r| r.borrow().get(&kind).is_none_or(|s| s.len() < SAMPLES))
}

/// Records a timed replay of this kind.
pub(crate) fn record_replay(kind: ReplayKind, ns: f64) {
    REPLAYS.with(|r| {
        let mut replays = r.borrow_mut();
        if replays.len() >= MAX_KINDS && !replays.contains_key(&kind) {
            replays.clear();
        }
        let samples = replays.entry(kind).or_default();
        if samples.len() < SAMPLES {
            samples.push(ns);
            REPLAY_SAMPLES.with(|n| n.set(n.get() + 1));
        }
    });
}

/// The median of the kind's timed replays, if it has any (NOTE [replay-times]).
pub(crate) fn replay_time(kind: ReplayKind) -> Option<f64> {
    REPLAYS.with(|r| {
        let replays = r.borrow();
        let samples = replays.get(&kind).filter(|s| !s.is_empty())?;
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        Some(sorted[sorted.len() / 2])
    })
}
