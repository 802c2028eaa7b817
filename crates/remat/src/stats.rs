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
//!
//! This module only reports (the top of the engine's layers). The counting itself
//! (tickets, counters, the sharded registry) is `crate::counters`, a bottom module the graph
//! counts through; the items the budget fills in for the reports (`DroppedValue`,
//! `format_bytes`) are `crate::report_items`, a bottom module too. The reports also ask the
//! budget (`checkpoint::budget`) what it dropped and which budget ran last.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;

use burn_std::DType;

pub use crate::counters::KeepReason;
use crate::counters::{COUNTERS, activation_bytes, registry};
pub use crate::report_items::{DroppedValue, format_bytes};

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

/// Lists every value currently kept for backward (see [`SavedValues`]). Walks every
/// thread's shard of the registry (NOTE [registry-shards]).
pub fn saved_values() -> SavedValues {
    let registry = registry();
    let mut values: Vec<(u64, SavedValue)> = Vec::new();
    for shard in &registry.shards {
        values.extend(shard.values().iter().map(|(e, dtype)| {
            let value = SavedValue {
                op: e.op,
                shape: e.dims.to_vec(),
                dtype,
                bytes: e.bytes,
                reason: e.reason,
            };
            (e.id, value)
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
    /// Wall time spent running those replays, in ns: each replay's op timed on the
    /// replaying thread's clock (on an asynchronous backend, the time to enqueue it, except
    /// for the replays timed between two syncs to learn their cost). What a budget's
    /// recompute cost measured, beside the planner's estimate of it.
    pub replay_ns: u64,
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
        replay_ns: COUNTERS.replay_ns.load(Ordering::Relaxed),
        budget: crate::checkpoint::budget::last_budget(),
    }
}

/// Resets the peak to the current live bytes and the replay counters to zero.
///
/// Live counts are not reset: they describe values that still exist.
pub fn reset_stats() {
    COUNTERS.peak.store(activation_bytes(), Ordering::Relaxed);
    COUNTERS.replays.store(0, Ordering::Relaxed);
    COUNTERS.replay_ns.store(0, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Ticket;
    use crate::counters::tests::tensor;

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
