//! Op times for the budget's planner (NOTE [op-times]).
//!
//! NOTE [op-times]: the planner weighs a replay by the op's forward time. On an asynchronous
//! inner backend (a GPU backend, or one that fuses ops lazily) the wall time around a call is
//! only its launch: every op would look equally cheap, and the planner would rebuild a
//! matmul as readily as an addition. So an op recorded under a budget is timed between two
//! `Backend::sync` calls (free on a synchronous CPU backend), but only for its first runs
//! per kind (the inner backend, the op's name, the bytes and count of its inputs) on the
//! thread: at most [`SAMPLES`], within a window (NOTE [timing-window]); afterwards its
//! time is the lower median of those samples and no sync is made. A training loop therefore
//! syncs only in its first two steps (a sync waits for the device: a GPU's queue must not
//! be drained at every op), and a recurring op costs the same in every view (equal ops must
//! look equal for Revolve's path).
//!
//! NOTE [timing-window]: a kind is timed on its first runs only while they come within two
//! periods of its first run, a period being the gap (in timed runs of any kind on the
//! thread) between its first and second runs. An op that runs once per training step is
//! timed in steps 1 and 2 and never again, so from step 3 on a budget makes no sync for it;
//! one that runs in every layer gets its samples (up to [`SAMPLES`]) in step 1. Its time is
//! then the lower median of its samples: on a GPU backend the first run of a kind includes
//! compiling its kernel (seconds on Mesa's llvmpipe), which the lower of two samples skips.
//!
//! NOTE [new-sizes]: a loop whose shapes change every step (variable sequence lengths) makes
//! new kinds every step. Only the first [`SIZES`] sizes (input bytes) of an op (the inner
//! backend, its name and number of inputs) are timed; a later size is estimated from them
//! without a sync (linear between the two timed sizes around it, proportional beyond the
//! smallest or largest), so such a loop stops syncing once every op has seen [`SIZES`]
//! sizes. An estimate in bytes can be far off (a matmul's time follows its shapes, not its
//! input bytes: the benchmark's residual MLP, run after three other models when the limit
//! was 4, had its matmul estimated at 611.7 us against 332 us timed alone), so the limit is
//! set well above the sizes one model has of an op (a transformer's matmuls come in several),
//! at the price of syncing in the first [`SIZES`] steps rather than 4 of a loop whose shapes
//! change every step. Replays likewise: the first [`SIZES`] output sizes of an op are timed, others
//! are costed as their forward op. A thread remembers at most [`MAX_KINDS`] kinds: past
//! that, the tables start over.
//!
//! NOTE [replay-times]: a replay does not always cost its op's forward time. A custom op's
//! replay runs its `retro_forward`, which may cost anything; and a replay that cannot take
//! its input runs out of place where the forward op ran in place (on NdArray, whose softmax
//! and layer norm are several passes over their input, replays took 3x and 7x the forward
//! pass's times before replays took the inputs they read last, NOTE \[hand-over\] in
//! `graph/node.rs`; since then 1.0x and 1.05x on the benchmark's transformer at 50%). So
//! replays under a budget are timed too, the same way (between two syncs, the first runs
//! per kind within the window: the inner backend, the op's name and output bytes, as the
//! planner's view tells ops apart), and where a kind has replay samples their lower median
//! is the planner's
//! cost for it: the plan made after the first step (which replays online) weighs what a
//! replay really costs.
//!
//! NOTE [estimated-costs]: measured times differ between processes (timer noise, caches, the
//! machine's load), and a plan is a discontinuous function of its costs: two processes of
//! one program under one budget planned different schedules (Burn's `Lstm` at a quarter of
//! SaveAll's bytes replayed 2,950 to 3,151 ops a step over five processes). So by default
//! ([`OpCosts::Estimated`]) an op's cost is a model of its work computed from the graph
//! alone: a fixed launch cost, the bytes it reads and writes, and its arithmetic where that
//! dominates (matmul, linear, convolutions, attention: from their shapes; see [`Work`]).
//! The same program then plans the same schedule in every process, and no op or replay is
//! timed, so a budget makes no `sync` at all. [`OpCosts::Measured`] (set with
//! [`set_op_costs`]) times ops and replays as described above: plans follow the machine
//! (a softmax's several passes over its input, an out-of-place replay), at the price of
//! plans that can differ from run to run.
//!
//! # Invariants
//! - At most `2 * SAMPLES` syncs per kind of op per thread while the table holds it, and at
//!   most [`SIZES`] kinds timed per op (and per replayed op): a thread's syncs are bounded
//!   by its op names, not by its steps or shapes.

use std::any::TypeId;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::graph::Cost;

/// Where the budget's planner takes op costs from (NOTE [estimated-costs]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpCosts {
    /// A model of each op's work from its shapes alone: launch, bytes moved, arithmetic.
    /// The same program under the same budget plans the same schedule in every process,
    /// and a budget never syncs the device to time an op.
    #[default]
    Estimated,
    /// Each op's forward time and each replay's time, measured on the thread between two
    /// `Backend::sync`s for their first runs per kind. Plans weigh what the machine really
    /// spends, but two processes of one program may plan differently (a budget that ran
    /// still runs: every plan is checked against the budget before a step runs).
    Measured,
}

static MEASURED: AtomicBool = AtomicBool::new(false);

/// Chooses, for the whole process, where the budget's planner takes op costs from
/// ([`OpCosts::Estimated`] by default). Plans already cached on a thread keep the costs
/// they were made with; steps recorded from now on use the new choice.
pub fn set_op_costs(costs: OpCosts) {
    MEASURED.store(costs == OpCosts::Measured, Ordering::Relaxed);
}

/// Where the budget's planner takes op costs from now (see [`set_op_costs`]).
pub fn op_costs() -> OpCosts {
    if MEASURED.load(Ordering::Relaxed) {
        OpCosts::Measured
    } else {
        OpCosts::Estimated
    }
}

/// Nanoseconds an op is modelled to take before any byte moves (a kernel launch, the
/// engine's dispatch).
const LAUNCH_NS: f64 = 200.0;
/// Nanoseconds per byte an op reads or writes (10 GB/s).
const NS_PER_BYTE: f64 = 0.1;
/// Nanoseconds per floating-point operation (20 GFLOP/s).
const NS_PER_FLOP: f64 = 0.05;

/// An op's work for its estimated cost (NOTE [estimated-costs]), taken from its inputs'
/// shapes before it runs; [`Work::ns`] completes it with the output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Work {
    class: Cost,
    input_bytes: u64,
    /// Arithmetic per output element, where the op's work is counted per output element.
    flops_per_output: f64,
    /// Arithmetic in all, where it follows from the inputs alone.
    flops: f64,
}

impl Work {
    /// The work of op `name` (of cost class `class`) over inputs of shapes `shapes`
    /// (`input_bytes` in all).
    pub(crate) fn of(name: &str, class: Cost, shapes: &[&[usize]], input_bytes: u64) -> Self {
        let elements = |i: usize| shapes.get(i).map_or(0, |s| s.iter().product::<usize>()) as f64;
        let last = |i: usize| shapes.get(i).and_then(|s| s.last()).copied().unwrap_or(1) as f64;
        let dim = |i: usize, d: usize| shapes.get(i).and_then(|s| s.get(d)).copied().unwrap_or(1);
        // A convolution's weight: elements per output (or, transposed, per input) channel.
        let per_channel = |w: usize| elements(w) / dim(w, 0).max(1) as f64;
        let (flops_per_output, flops) = match name {
            // [.., m, k] x [.., k, n]; linear's weight is [k, n].
            "matmul" | "linear" => (2.0 * last(0), 0.0),
            "conv1d" | "conv2d" | "conv3d" => (2.0 * per_channel(1), 0.0),
            "deform_conv2d" => (2.0 * per_channel(2) + 12.0, 0.0),
            "conv_transpose1d" | "conv_transpose2d" | "conv_transpose3d" => {
                (0.0, 2.0 * elements(0) * per_channel(1))
            }
            "attention" => {
                // q [.., s, d], k [.., t, d], v [.., t, dv]: scores, softmax, weighted sum.
                let d = last(0);
                let t = dim(1, shapes.get(1).map_or(0, |k| k.len()).saturating_sub(2));
                let rows = elements(0) / d.max(1.0);
                (0.0, rows * t as f64 * (2.0 * d + 2.0 * last(2) + 5.0))
            }
            _ => match class {
                Cost::Alias => (0.0, 0.0),
                Cost::Cheap | Cost::Random => (1.0, 0.0),
                Cost::Compute => (0.0, 4.0 * elements(0)),
            },
        };
        Self {
            class,
            input_bytes,
            flops_per_output,
            flops,
        }
    }

    /// The op's estimated time (ns) given its output's elements and bytes.
    pub(crate) fn ns(&self, output_elements: u64, output_bytes: u64) -> f64 {
        if self.class == Cost::Alias {
            return LAUNCH_NS;
        }
        let flops = self.flops + self.flops_per_output * output_elements as f64;
        LAUNCH_NS + NS_PER_BYTE * (self.input_bytes + output_bytes) as f64 + NS_PER_FLOP * flops
    }
}

/// Timed runs per kind of op before its median is used.
pub(crate) const SAMPLES: usize = 5;

/// Sizes of one op timed before new sizes are estimated from them (NOTE [new-sizes]).
pub(crate) const SIZES: usize = 16;

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

    /// The op whatever its size (NOTE [new-sizes]).
    fn op(&self) -> (TypeId, &'static str, u32) {
        (self.backend, self.name, self.inputs)
    }
}

/// What identifies a kind of replay: the inner backend, the op's name and its output bytes
/// (as the planner's view tells ops apart).
pub(crate) type ReplayKind = (TypeId, &'static str, u64);

/// The samples of one kind, and its time once they are complete (NOTE [timing-window]).
struct Times {
    samples: Vec<f64>,
    /// The thread's clock at the kind's first run.
    first: u64,
    /// Clock ticks between its first and second runs.
    period: Option<u64>,
    /// The lower median of the samples, once no more are taken.
    settled: Option<f64>,
}

impl Times {
    fn new(clock: u64) -> Self {
        Self {
            samples: Vec::new(),
            first: clock,
            period: None,
            settled: None,
        }
    }

    /// Whether this run of the kind (at `clock`) is to be timed; settles the kind's time
    /// when it is not (NOTE [timing-window]).
    fn wants(&mut self, clock: u64) -> bool {
        if self.settled.is_some() {
            return false;
        }
        if self.period.is_none() && clock > self.first {
            self.period = Some(clock - self.first);
        }
        let in_window = self
            .period
            .is_none_or(|period| clock < self.first.saturating_add(2 * period));
        if in_window && self.samples.len() < SAMPLES {
            return true;
        }
        self.settled = self.time();
        false
    }

    /// The lower median of the samples (the first run's kernel compilation skipped from two
    /// samples on); `None` before any.
    fn time(&self) -> Option<f64> {
        if let Some(time) = self.settled {
            return Some(time);
        }
        let mut sorted = self.samples.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len().saturating_sub(1) / 2).copied()
    }
}

/// The op times of one thread.
struct Table<K, O> {
    kinds: HashMap<K, Times>,
    /// The sizes timed per op, at most [`SIZES`] each (NOTE [new-sizes]).
    sizes: HashMap<O, Vec<(u64, K)>>,
    /// Runs of any kind so far (NOTE [timing-window]).
    clock: u64,
}

impl<K, O> Default for Table<K, O> {
    fn default() -> Self {
        Self {
            kinds: HashMap::new(),
            sizes: HashMap::new(),
            clock: 0,
        }
    }
}

/// What a table says about a run of a kind.
enum Run {
    /// Time it (between syncs) and record the sample.
    Time,
    /// Do not time it; its time is known.
    Known(f64),
    /// Do not time it: an op past [`SIZES`] sizes, estimated (`Some`) or not (replays).
    Untimed(Option<f64>),
}

impl<K: Copy + Eq + core::hash::Hash, O: Copy + Eq + core::hash::Hash> Table<K, O> {
    /// Counts a run of `kind` (of `op`, of `bytes`) and says whether to time it.
    fn run(&mut self, kind: K, op: O, bytes: u64) -> Run {
        self.clock += 1;
        let clock = self.clock;
        if let Some(times) = self.kinds.get_mut(&kind) {
            return if times.wants(clock) {
                Run::Time
            } else {
                Run::Known(times.time().unwrap_or(0.0))
            };
        }
        let timed = self.sizes.get(&op).map_or(0, Vec::len);
        if timed >= SIZES {
            return Run::Untimed(self.estimate(op, bytes));
        }
        if self.kinds.len() >= MAX_KINDS {
            self.kinds.clear();
            self.sizes.clear();
        }
        self.kinds.insert(kind, Times::new(clock));
        self.sizes.entry(op).or_default().push((bytes, kind));
        Run::Time
    }

    /// Records a timed run's sample.
    fn record(&mut self, kind: K, ns: f64) -> bool {
        match self.kinds.get_mut(&kind) {
            Some(times) if times.settled.is_none() && times.samples.len() < SAMPLES => {
                times.samples.push(ns);
                true
            }
            _ => false,
        }
    }

    /// An op's time at a size it was not timed at, from the sizes it was (NOTE [new-sizes]).
    fn estimate(&self, op: O, bytes: u64) -> Option<f64> {
        let mut points: Vec<(f64, f64)> = self
            .sizes
            .get(&op)?
            .iter()
            .filter_map(|(b, kind)| Some((*b as f64, self.kinds.get(kind)?.time()?)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let x = bytes as f64;
        let below = points.iter().rev().find(|p| p.0 <= x).copied();
        let above = points.iter().find(|p| p.0 >= x).copied();
        let scaled = |(b, t): (f64, f64)| if b > 0.0 { t * x / b } else { t };
        match (below, above) {
            (Some(lo), Some(hi)) if hi.0 > lo.0 => {
                Some(lo.1 + (hi.1 - lo.1) * (x - lo.0) / (hi.0 - lo.0))
            }
            (Some(p), Some(_)) => Some(p.1),
            (Some(p), None) | (None, Some(p)) => Some(scaled(p)),
            (None, None) => None,
        }
    }
}

thread_local! {
    static TIMES: RefCell<Table<Kind, (TypeId, &'static str, u32)>> =
        RefCell::new(Table::default());
}

/// The op's time: runs `forward`, timed between two `sync`s of `device` while the kind is
/// still sampled (NOTE [timing-window]), else untimed with its known or estimated time
/// (NOTE [new-sizes]).
pub(crate) fn timed<D, T>(
    kind: Kind,
    device: Option<D>,
    sync: impl Fn(&D),
    forward: impl FnOnce() -> T,
) -> (T, f64) {
    let run = TIMES.with(|t| t.borrow_mut().run(kind, kind.op(), kind.input_bytes));
    match run {
        Run::Known(ns) | Run::Untimed(Some(ns)) => return (forward(), ns),
        Run::Untimed(None) | Run::Time => {}
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
    TIMES.with(|t| t.borrow_mut().record(kind, ns));
    (out, ns)
}

thread_local! {
    static REPLAYS: RefCell<Table<ReplayKind, (TypeId, &'static str)>> =
        RefCell::new(Table::default());
    /// Replay samples this thread recorded, ever.
    static REPLAY_SAMPLES: Cell<u64> = const { Cell::new(0) };
}

/// How many replay samples this thread recorded so far: unchanged, no kind's replay time
/// changed.
pub(crate) fn replay_samples() -> u64 {
    REPLAY_SAMPLES.with(Cell::get)
}

/// Counts a replay of this kind about to run, and says whether to time it between syncs
/// (NOTE [replay-times]): while the kind is sampled (NOTE [timing-window]) and among the
/// first [`SIZES`] sizes of its op (NOTE [new-sizes]). Called once per replay.
pub(crate) fn replay_wanted(kind: ReplayKind) -> bool {
    if op_costs() == OpCosts::Estimated {
        return false;
    }
    REPLAYS.with(|r| {
        matches!(
            r.borrow_mut().run(kind, (kind.0, kind.1), kind.2),
            Run::Time
        )
    })
}

/// Records a timed replay of this kind.
pub(crate) fn record_replay(kind: ReplayKind, ns: f64) {
    if REPLAYS.with(|r| r.borrow_mut().record(kind, ns)) {
        REPLAY_SAMPLES.with(|n| n.set(n.get() + 1));
    }
}

/// The lower median of the kind's timed replays, if it has any (NOTE [replay-times]).
pub(crate) fn replay_time(kind: ReplayKind) -> Option<f64> {
    if op_costs() == OpCosts::Estimated {
        return None;
    }
    REPLAYS.with(|r| r.borrow().kinds.get(&kind)?.time())
}

/// Timed runs the thread's tables hold, for tests: `(op kinds, replay kinds)`.
#[cfg(test)]
fn kinds() -> (usize, usize) {
    (
        TIMES.with(|t| t.borrow().kinds.len()),
        REPLAYS.with(|r| r.borrow().kinds.len()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(bytes: u64) -> Kind {
        Kind::new(TypeId::of::<u8>(), "op", bytes, 1)
    }

    /// Runs `kind` once untimed-or-timed and returns whether it was timed.
    fn run(kind: Kind) -> bool {
        let timed = Cell::new(false);
        let _ = super::timed(kind, Some(()), |_| timed.set(true), || ());
        timed.get()
    }

    /// NOTE [timing-window]: once a step, a kind is timed in two steps; in every layer of a
    /// step, up to [`SAMPLES`] times within two periods.
    #[test]
    fn a_kind_is_timed_within_two_periods_of_its_first_run() {
        std::thread::spawn(|| {
            let (once, other) = (kind(8), kind(16));
            // One `once` and three `other`s a step.
            let step = || [run(once), run(other), run(other), run(other)];
            assert_eq!(step(), [true, true, true, false]);
            assert_eq!(step(), [true, false, false, false]);
            for _ in 0..5 {
                assert_eq!(step(), [false; 4]);
            }
            assert_eq!(kinds().0, 2);
        })
        .join()
        .unwrap();
    }

    /// NOTE [new-sizes]: past [`SIZES`] sizes of an op, a new size is estimated, not timed.
    #[test]
    fn an_op_is_timed_at_its_first_sizes_only() {
        std::thread::spawn(|| {
            for bytes in 1..=SIZES as u64 {
                assert!(run(kind(bytes * 100)), "size {bytes} is timed");
            }
            for bytes in 100..200 {
                assert!(!run(kind(bytes * 100)), "size {bytes} is not timed");
            }
            assert_eq!(kinds().0, SIZES);
        })
        .join()
        .unwrap();
    }

    /// NOTE [estimated-costs]: launch, bytes moved and, where it dominates, arithmetic from
    /// the shapes; equal shapes cost the same, whatever the process.
    #[test]
    fn an_estimate_follows_the_shapes() {
        let ns = |name, class, shapes: &[&[usize]], out: &[usize]| {
            let elems = |s: &[usize]| s.iter().product::<usize>() as u64;
            let input_bytes = shapes.iter().map(|s| 4 * elems(s)).sum();
            Work::of(name, class, shapes, input_bytes).ns(elems(out), 4 * elems(out))
        };
        // An add of two [16, 64]: 200 ns + 0.1 ns x 12 KiB moved + 0.05 ns x 1,024 flops.
        let add = ns("add", Cost::Cheap, &[&[16, 64], &[16, 64]], &[16, 64]);
        assert_eq!(add, 200.0 + 0.1 * 12_288.0 + 0.05 * 1_024.0);
        assert_eq!(ns("reshape", Cost::Alias, &[&[16, 64]], &[1024]), 200.0);
        // [16, 64] x [64, 256]: 2 x 16 x 256 x 64 flops.
        let matmul = ns(
            "matmul",
            Cost::Compute,
            &[&[16, 64], &[64, 256]],
            &[16, 256],
        );
        let moved = 4.0 * (1_024.0 + 16_384.0 + 4_096.0);
        assert_eq!(matmul, 200.0 + 0.1 * moved + 0.05 * 524_288.0);
        // Twice the inner dimension, twice the arithmetic (the output is the same size).
        let deeper = ns(
            "matmul",
            Cost::Compute,
            &[&[16, 128], &[128, 256]],
            &[16, 256],
        );
        assert!(
            deeper > 1.9 * matmul && deeper < 2.1 * matmul,
            "{deeper} vs {matmul}"
        );
        // conv2d of [1, 8, 32, 32] by [16, 8, 3, 3]: 2 x 72 flops an output element.
        let conv = ns(
            "conv2d",
            Cost::Compute,
            &[&[1, 8, 32, 32], &[16, 8, 3, 3]],
            &[1, 16, 30, 30],
        );
        let moved = 4.0 * (8_192.0 + 1_152.0 + 14_400.0);
        assert_eq!(conv, 200.0 + 0.1 * moved + 0.05 * 144.0 * 14_400.0);
        // attention over [2, 4, 10, 8] queries and [2, 4, 12, 8] keys and values.
        let q: &[usize] = &[2, 4, 10, 8];
        let kv: &[usize] = &[2, 4, 12, 8];
        let attention = ns("attention", Cost::Compute, &[q, kv, kv], q);
        let moved = 4.0 * (640.0 + 768.0 + 768.0 + 640.0);
        assert_eq!(attention, 200.0 + 0.1 * moved + 0.05 * 80.0 * 12.0 * 37.0);
    }

    /// Estimates: linear between timed sizes, proportional beyond them.
    #[test]
    fn a_new_size_is_estimated_from_the_timed_ones() {
        let mut table: Table<u64, ()> = Table::default();
        // Four sizes, then 100 bytes and 10 ns more per size up to [`SIZES`] (2,000 bytes).
        let more = (1..=SIZES as u64 - 4).map(|k| (800 + 100 * k, 90.0 + 10.0 * k as f64));
        for (bytes, ns) in [(100, 10.0), (200, 30.0), (400, 50.0), (800, 90.0)]
            .into_iter()
            .chain(more)
        {
            assert!(matches!(table.run(bytes, (), bytes), Run::Time));
            assert!(table.record(bytes, ns));
        }
        let estimate = |table: &mut Table<u64, ()>, bytes| match table.run(bytes, (), bytes) {
            Run::Untimed(Some(ns)) => ns,
            _ => panic!("{bytes} bytes: not estimated"),
        };
        assert_eq!(estimate(&mut table, 300), 40.0);
        assert_eq!(estimate(&mut table, 50), 5.0);
        assert_eq!(estimate(&mut table, 1650), 175.0);
        assert_eq!(estimate(&mut table, 4000), 420.0);
    }
}
