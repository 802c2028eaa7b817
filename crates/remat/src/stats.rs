//! Memory and replay statistics: typed counters, not strings.
//!
//! Counters are process-wide atomics updated where values are stored, freed and replayed.
//! The list of kept values behind [`saved_values`] and the replay counts by op are sharded by
//! thread (NOTE [registry-shards]): keeping or releasing a value takes no process-wide lock.
//! They count the values *remat* keeps for backward (saved activations and captured
//! constants), not the user's own tensors: a leaf (a parameter) is the user's, and is
//! reported separately as `leaf_bytes` when a backward step holds on to it.
//!
//! # Invariants
//! - `live_bytes()` is the sum of the sizes of every value currently kept, by reason.
//! - `peak_bytes` is the maximum of that sum since the last [`reset_stats`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use burn_backend::{BackendTypes, TensorMetadata, tensor::FloatTensor};
use burn_std::DType;

/// Why a value is kept for backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeepReason {
    /// A backward step reads it and the policy keeps it.
    Saved,
    /// It was rebuilt by replay during backward and waits for its remaining reads.
    Rebuilt,
    /// An untracked input a backward step or a replay reads (captured with the op).
    Constant,
    /// A leaf (a parameter or input that requires a gradient) read by a backward step, or a
    /// view of leaves (e.g. a reshaped weight): its memory is the user's.
    Leaf,
}

impl KeepReason {
    const ALL: [KeepReason; 4] = [
        KeepReason::Saved,
        KeepReason::Rebuilt,
        KeepReason::Constant,
        KeepReason::Leaf,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

struct Counters {
    live: [AtomicU64; 4],
    count: [AtomicU64; 4],
    peak: AtomicU64,
    replays: AtomicU64,
}

static COUNTERS: Counters = Counters {
    live: [const { AtomicU64::new(0) }; 4],
    count: [const { AtomicU64::new(0) }; 4],
    peak: AtomicU64::new(0),
    replays: AtomicU64::new(0),
};

/// One value currently kept, as listed by [`saved_values`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedValue {
    /// The op the value belongs to: its producer, or for leaves and constants the op that
    /// holds it as an input.
    pub op: &'static str,
    /// The value's shape.
    pub shape: Vec<usize>,
    /// The value's element type.
    pub dtype: DType,
    /// Its size in bytes.
    pub bytes: u64,
    /// Why it is kept.
    pub reason: KeepReason,
}

/// Every value currently kept for backward, in the order they were kept (like JAX's
/// saved-residuals view). `Display` prints a table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedValues(pub Vec<SavedValue>, Vec<DroppedValue>);

/// A value a [`Policy::Budget`](crate::Policy::Budget) dropped on this thread: a backward
/// step (or a replay) will read it, and it is rebuilt then. Listed by
/// [`SavedValues::dropped`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedValue {
    /// The op that produced it.
    pub op: &'static str,
    /// Its size in bytes.
    pub bytes: u64,
}

static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

// NOTE [registry-shards]: every kept value is listed for `saved_values` in a registry sharded
// by thread. A value is entered in the shard of the thread that keeps it and removed from that
// same shard when it is released, on whichever thread. Each shard has its own mutex, taken on
// the hot path by its own thread (contended only when another thread releases one of its
// values at the same instant). The process-wide lock (the list of shards) is taken once per
// thread, when the thread keeps its first value or counts its first replay, and by the
// reports (`saved_values`, `stats`, `reset_stats`), which walk every shard.

/// One kept value, as its shard lists it. The shape is stored inline (no allocation for up
/// to five dims).
struct Entry {
    op: &'static str,
    shape: burn_std::Shape,
    dtype: DType,
    bytes: u64,
    reason: KeepReason,
}

/// One thread's part of the registry.
struct Shard {
    /// Kept values by ticket id (ids grow in keep order, process-wide).
    values: Mutex<BTreeMap<u64, Entry>>,
    /// Replays counted on this thread since the last [`reset_stats`], by op name.
    replays: Mutex<BTreeMap<&'static str, u64>>,
    /// False once the owning thread has ended: the shard is then dropped from the list as
    /// soon as it holds no value (its replay counts move to [`Registry::retired_replays`]).
    // INVARIANT: only the shard that serves threads whose thread-local was already destroyed
    // (see `with_shard`) is never marked ended.
    thread_alive: AtomicBool,
}

impl Shard {
    fn new() -> Self {
        Self {
            values: Mutex::new(BTreeMap::new()),
            replays: Mutex::new(BTreeMap::new()),
            thread_alive: AtomicBool::new(true),
        }
    }

    fn values(&self) -> MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn replays(&self) -> MutexGuard<'_, BTreeMap<&'static str, u64>> {
        self.replays
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The list of shards (NOTE [registry-shards]).
struct Registry {
    shards: Vec<Arc<Shard>>,
    /// Replay counts of the shards of ended threads, merged when they were dropped.
    retired_replays: BTreeMap<&'static str, u64>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    shards: Vec::new(),
    retired_replays: BTreeMap::new(),
});

/// Takes the process-wide lock: never on the hot path (NOTE [registry-shards]).
fn registry() -> MutexGuard<'static, Registry> {
    #[cfg(test)]
    tests::count_global_lock();
    let mut registry = REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    registry.prune();
    registry
}

impl Registry {
    /// Drops the shards of ended threads that hold no value.
    fn prune(&mut self) {
        let Registry {
            shards,
            retired_replays,
        } = self;
        shards.retain(|shard| {
            if shard.thread_alive.load(Ordering::Acquire) || !shard.values().is_empty() {
                return true;
            }
            for (op, n) in core::mem::take(&mut *shard.replays()) {
                *retired_replays.entry(op).or_insert(0) += n;
            }
            false
        });
    }
}

/// A thread's handle on its shard; marks the shard ended when the thread ends.
struct LocalShard(Arc<Shard>);

impl Drop for LocalShard {
    fn drop(&mut self) {
        self.0.thread_alive.store(false, Ordering::Release);
    }
}

thread_local! {
    static LOCAL: LocalShard = {
        let shard = Arc::new(Shard::new());
        registry().shards.push(shard.clone());
        LocalShard(shard)
    };
}

/// Runs `f` on this thread's shard, or, while the thread's locals are being destroyed, on
/// one shared shard that is never dropped.
fn with_shard<R>(f: impl Fn(&Arc<Shard>) -> R) -> R {
    LOCAL.try_with(|local| f(&local.0)).unwrap_or_else(|_| {
        static ORPHANS: std::sync::OnceLock<Arc<Shard>> = std::sync::OnceLock::new();
        f(ORPHANS.get_or_init(|| {
            let shard = Arc::new(Shard::new());
            registry().shards.push(shard.clone());
            shard
        }))
    })
}

/// The bookkeeping of one kept value: counted from creation to drop, listed in the shard of
/// the thread that kept it (NOTE [registry-shards]).
pub(crate) struct Ticket {
    id: u64,
    shard: Arc<Shard>,
}

impl Ticket {
    /// Counts `value` as kept for `reason` by op `op`.
    pub(crate) fn keep<B: BackendTypes>(
        value: &FloatTensor<B>,
        reason: KeepReason,
        op: &'static str,
    ) -> Self {
        let shape = value.shape();
        let dtype = value.dtype();
        let bytes = (shape.num_elements() * dtype.size()) as u64;
        let id = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
        on_keep(reason, bytes);
        let entry = Entry {
            op,
            shape,
            dtype,
            bytes,
            reason,
        };
        let shard = with_shard(Arc::clone);
        shard.values().insert(id, entry);
        Self { id, shard }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let entry = self.shard.values().remove(&self.id);
        match entry {
            Some(entry) => on_release(entry.reason, entry.bytes),
            None => debug_assert!(false, "remat internal error: a kept value left its shard"),
        }
    }
}

/// Lists every value currently kept for backward (see [`SavedValues`]). Walks every
/// thread's shard of the registry (NOTE [registry-shards]).
pub fn saved_values() -> SavedValues {
    let registry = registry();
    let mut values: Vec<(u64, SavedValue)> = Vec::new();
    for shard in &registry.shards {
        values.extend(shard.values().iter().map(|(id, e)| {
            let value = SavedValue {
                op: e.op,
                shape: e.shape.iter().copied().collect(),
                dtype: e.dtype,
                bytes: e.bytes,
                reason: e.reason,
            };
            (*id, value)
        }));
    }
    drop(registry);
    values.sort_unstable_by_key(|(id, _)| *id);
    SavedValues(
        values.into_iter().map(|(_, value)| value).collect(),
        crate::checkpoint::budget::dropped(),
    )
}

impl fmt::Display for SavedValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<18} {:<22} {:<6} {:>10}  reason",
            "op", "shape", "dtype", "bytes"
        )?;
        for v in &self.0 {
            let shape = format!("{:?}", v.shape);
            let dtype = format!("{:?}", v.dtype);
            writeln!(
                f,
                "{:<18} {:<22} {:<6} {:>10}  {:?}",
                v.op,
                shape,
                dtype,
                format_bytes(v.bytes),
                v.reason
            )?;
        }
        // The same two totals as `Stats`' first line: what remat keeps, and the leaves apart.
        write!(
            f,
            "{} values: kept {}, leaves held {}",
            self.0.len(),
            format_bytes(self.kept_bytes()),
            format_bytes(self.leaf_bytes())
        )?;
        if !self.1.is_empty() {
            let mut by_op: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
            for v in &self.1 {
                let entry = by_op.entry(v.op).or_default();
                entry.0 += 1;
                entry.1 += v.bytes;
            }
            let ops: Vec<String> = by_op
                .iter()
                .map(|(op, (n, bytes))| format!("{op} x{n} ({})", format_bytes(*bytes)))
                .collect();
            write!(
                f,
                "\ndropped by the budget, rebuilt when read: {} values, {}: {}",
                self.1.len(),
                format_bytes(self.dropped_bytes()),
                ops.join(", ")
            )?;
        }
        Ok(())
    }
}

impl SavedValues {
    /// The values this thread's [`Policy::Budget`](crate::Policy::Budget) dropped when the
    /// list was taken (a backward step will read them; they are rebuilt then). Empty
    /// outside a budget.
    pub fn dropped(&self) -> &[DroppedValue] {
        &self.1
    }

    /// Bytes of [`SavedValues::dropped`].
    pub fn dropped_bytes(&self) -> u64 {
        self.1.iter().map(|v| v.bytes).sum()
    }

    /// Bytes of the listed values that remat keeps (every reason but [`KeepReason::Leaf`]):
    /// [`Stats::live_bytes`] when the list was taken.
    pub fn kept_bytes(&self) -> u64 {
        self.0
            .iter()
            .filter(|v| v.reason != KeepReason::Leaf)
            .map(|v| v.bytes)
            .sum()
    }

    /// Bytes of the listed leaves (the user's own tensors that backward steps hold on to):
    /// [`Stats::leaf_bytes`] when the list was taken.
    pub fn leaf_bytes(&self) -> u64 {
        self.0
            .iter()
            .filter(|v| v.reason == KeepReason::Leaf)
            .map(|v| v.bytes)
            .sum()
    }
}

/// Records that a value of `bytes` is now kept for `reason`.
pub(crate) fn on_keep(reason: KeepReason, bytes: u64) {
    let i = reason.index();
    COUNTERS.live[i].fetch_add(bytes, Ordering::Relaxed);
    COUNTERS.count[i].fetch_add(1, Ordering::Relaxed);
    if reason != KeepReason::Leaf {
        let live = activation_bytes();
        COUNTERS.peak.fetch_max(live, Ordering::Relaxed);
    }
}

/// Records that a value kept for `reason` was released.
pub(crate) fn on_release(reason: KeepReason, bytes: u64) {
    let i = reason.index();
    COUNTERS.live[i].fetch_sub(bytes, Ordering::Relaxed);
    COUNTERS.count[i].fetch_sub(1, Ordering::Relaxed);
}

/// Records one replay of op `name` (a rematerialization in backward).
pub(crate) fn on_replay(name: &'static str) {
    COUNTERS.replays.fetch_add(1, Ordering::Relaxed);
    with_shard(|shard| *shard.replays().entry(name).or_insert(0) += 1);
}

fn activation_bytes() -> u64 {
    KeepReason::ALL
        .iter()
        .filter(|r| **r != KeepReason::Leaf)
        .map(|r| COUNTERS.live[r.index()].load(Ordering::Relaxed))
        .sum()
}

/// A snapshot of the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes of values kept for backward now (saved, rebuilt and constants; not leaves).
    pub live_bytes: u64,
    /// Peak of `live_bytes` since the last [`reset_stats`].
    pub peak_bytes: u64,
    /// Bytes of leaves (the user's own tensors) that backward steps hold on to now.
    pub leaf_bytes: u64,
    /// Number of values kept now, by reason.
    pub kept_by_reason: BTreeMap<KeepReason, u64>,
    /// Bytes kept now, by reason.
    pub bytes_by_reason: BTreeMap<KeepReason, u64>,
    /// Number of replays since the last [`reset_stats`].
    pub replays: u64,
    /// Replays since the last [`reset_stats`], by op name.
    pub replays_by_op: BTreeMap<&'static str, u64>,
    /// The [`Policy::Budget`](crate::Policy::Budget) of the training step recorded or run
    /// last under a budget; `None` before any. Within such a step, on one thread,
    /// `peak_bytes` (after a [`reset_stats`]) never passes it.
    pub budget: Option<u64>,
}

/// Reads the counters.
pub fn stats() -> Stats {
    let mut kept_by_reason = BTreeMap::new();
    let mut bytes_by_reason = BTreeMap::new();
    for reason in KeepReason::ALL {
        kept_by_reason.insert(
            reason,
            COUNTERS.count[reason.index()].load(Ordering::Relaxed),
        );
        bytes_by_reason.insert(
            reason,
            COUNTERS.live[reason.index()].load(Ordering::Relaxed),
        );
    }
    Stats {
        live_bytes: activation_bytes(),
        peak_bytes: COUNTERS.peak.load(Ordering::Relaxed),
        leaf_bytes: COUNTERS.live[KeepReason::Leaf.index()].load(Ordering::Relaxed),
        kept_by_reason,
        bytes_by_reason,
        replays: COUNTERS.replays.load(Ordering::Relaxed),
        replays_by_op: replays_by_op(),
        budget: crate::checkpoint::budget::last_budget(),
    }
}

/// Resets the peak to the current live bytes and the replay counters to zero.
///
/// Live counts are not reset: they describe values that still exist.
pub fn reset_stats() {
    COUNTERS.peak.store(activation_bytes(), Ordering::Relaxed);
    COUNTERS.replays.store(0, Ordering::Relaxed);
    let mut registry = registry();
    registry.retired_replays.clear();
    for shard in &registry.shards {
        shard.replays().clear();
    }
}

/// Replays by op name, summed over every thread's shard (NOTE [registry-shards]).
fn replays_by_op() -> BTreeMap<&'static str, u64> {
    let registry = registry();
    let mut by_op = registry.retired_replays.clone();
    for shard in &registry.shards {
        for (op, n) in shard.replays().iter() {
            *by_op.entry(*op).or_insert(0) += n;
        }
    }
    by_op
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kept now: {} (peak {}), leaves held: {}",
            format_bytes(self.live_bytes),
            format_bytes(self.peak_bytes),
            format_bytes(self.leaf_bytes)
        )?;
        match self.budget {
            Some(budget) => writeln!(f, ", budget {}", format_bytes(budget))?,
            None => writeln!(f)?,
        }
        for (reason, count) in &self.kept_by_reason {
            let bytes = self.bytes_by_reason.get(reason).copied().unwrap_or(0);
            writeln!(f, "  {reason:?}: {count} values, {}", format_bytes(bytes))?;
        }
        write!(f, "replays: {}", self.replays)?;
        for (op, n) in &self.replays_by_op {
            write!(f, "\n  {op}: {n}")?;
        }
        if !crate::is_active() {
            write!(f, "\n{INACTIVE}")?;
        }
        Ok(())
    }
}

/// The note `Stats` prints while remat has tracked no tensor in this process.
const INACTIVE: &str = "note: remat has tracked no tensor in this process. If Burn trained a model \
    here, it ran on Burn's own autodiff: the `[patch.crates-io] burn-autodiff` line did not apply \
    (run `cargo update -p burn-autodiff`, then check `cargo tree -i burn-autodiff`; see remat's \
    README, \"Setup\").";

/// Formats a byte count with a binary unit (`512 B`, `1.5 MiB`), as the reports do.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static GLOBAL_LOCKS: Cell<u64> = const { Cell::new(0) };
    }

    /// Counts one acquisition of a process-wide lock by this thread.
    pub(super) fn count_global_lock() {
        GLOBAL_LOCKS.with(|c| c.set(c.get() + 1));
    }

    fn global_locks() -> u64 {
        GLOBAL_LOCKS.with(Cell::get)
    }

    fn tensor(n: usize) -> FloatTensor<burn_flex::Flex> {
        use burn_backend::{TensorData, ops::FloatTensorOps};
        burn_flex::Flex::float_from_data(TensorData::new(vec![0.5f32; n], [n]), &Default::default())
    }

    /// The hot path (a value kept, a value released, a replay counted) takes no process-wide
    /// lock: after a thread's first kept value, keeping and releasing 100 values and counting
    /// 100 replays on it takes none.
    #[test]
    fn keeping_and_releasing_take_no_global_lock() {
        std::thread::spawn(|| {
            let value = tensor(4);
            drop(Ticket::keep::<burn_flex::Flex>(
                &value,
                KeepReason::Saved,
                "warm-up",
            ));
            on_replay("warm-up");
            let before = global_locks();
            let tickets: Vec<Ticket> = (0..100)
                .map(|_| Ticket::keep::<burn_flex::Flex>(&value, KeepReason::Saved, "hot"))
                .collect();
            for _ in 0..100 {
                on_replay("hot");
            }
            drop(tickets);
            assert_eq!(
                global_locks() - before,
                0,
                "process-wide locks taken on the hot path"
            );
        })
        .join()
        .expect("the hot-path thread panicked");
    }

    /// `saved_values()` lists the values kept on every thread, live or finished, in the order
    /// they were kept, and forgets each one when it is released (on any thread).
    #[test]
    fn saved_values_walks_every_thread_in_keep_order() {
        let mine = |all: SavedValues| -> Vec<(&'static str, Vec<usize>)> {
            all.0
                .into_iter()
                .filter(|v| v.op.starts_with("walk-"))
                .map(|v| (v.op, v.shape))
                .collect()
        };
        let first = Ticket::keep::<burn_flex::Flex>(&tensor(3), KeepReason::Saved, "walk-a");
        // Kept on a thread that then ends; released later, here.
        let second = std::thread::spawn(|| {
            Ticket::keep::<burn_flex::Flex>(&tensor(5), KeepReason::Constant, "walk-b")
        })
        .join()
        .expect("the keeping thread panicked");
        let third = Ticket::keep::<burn_flex::Flex>(&tensor(7), KeepReason::Leaf, "walk-c");
        assert_eq!(
            mine(saved_values()),
            vec![
                ("walk-a", vec![3]),
                ("walk-b", vec![5]),
                ("walk-c", vec![7])
            ]
        );
        drop(second);
        assert_eq!(
            mine(saved_values()),
            vec![("walk-a", vec![3]), ("walk-c", vec![7])]
        );
        drop((first, third));
        assert!(mine(saved_values()).is_empty());
    }
}
