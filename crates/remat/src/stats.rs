//! Memory and replay statistics: typed counters, not strings.
//!
//! Counters are process-wide atomics updated where values are stored, freed and replayed.
//! They count the values *remat* keeps for backward (saved activations and captured
//! constants), not the user's own tensors: a leaf (a parameter) is the user's, and is
//! reported separately as `leaf_bytes` when a backward step holds on to it.
//!
//! # Invariants
//! - `live_bytes()` is the sum of the sizes of every value currently kept, by reason.
//! - `peak_bytes` is the maximum of that sum since the last [`reset_stats`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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
    replay_by_op: Mutex<BTreeMap<&'static str, u64>>,
}

static COUNTERS: Counters = Counters {
    live: [const { AtomicU64::new(0) }; 4],
    count: [const { AtomicU64::new(0) }; 4],
    peak: AtomicU64::new(0),
    replays: AtomicU64::new(0),
    replay_by_op: Mutex::new(BTreeMap::new()),
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
pub struct SavedValues(pub Vec<SavedValue>);

static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);
static REGISTRY: Mutex<BTreeMap<u64, SavedValue>> = Mutex::new(BTreeMap::new());

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<u64, SavedValue>> {
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The bookkeeping of one kept value: counted from creation to drop.
pub(crate) struct Ticket {
    id: u64,
    bytes: u64,
    reason: KeepReason,
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
        registry().insert(
            id,
            SavedValue {
                op,
                shape: shape.iter().copied().collect(),
                dtype,
                bytes,
                reason,
            },
        );
        Self { id, bytes, reason }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        registry().remove(&self.id);
        on_release(self.reason, self.bytes);
    }
}

/// Lists every value currently kept for backward (see [`SavedValues`]).
pub fn saved_values() -> SavedValues {
    SavedValues(registry().values().cloned().collect())
}

impl fmt::Display for SavedValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<18} {:<22} {:<6} {:>10}  reason",
            "op", "shape", "dtype", "bytes"
        )?;
        let mut total = 0;
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
            total += v.bytes;
        }
        write!(f, "{} values, {}", self.0.len(), format_bytes(total))
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
    let mut by_op = COUNTERS
        .replay_by_op
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *by_op.entry(name).or_insert(0) += 1;
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
        replays_by_op: COUNTERS
            .replay_by_op
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone(),
    }
}

/// Resets the peak to the current live bytes and the replay counters to zero.
///
/// Live counts are not reset: they describe values that still exist.
pub fn reset_stats() {
    COUNTERS.peak.store(activation_bytes(), Ordering::Relaxed);
    COUNTERS.replays.store(0, Ordering::Relaxed);
    COUNTERS
        .replay_by_op
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clear();
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kept now: {} (peak {}), leaves held: {}",
            format_bytes(self.live_bytes),
            format_bytes(self.peak_bytes),
            format_bytes(self.leaf_bytes)
        )?;
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
