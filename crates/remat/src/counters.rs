//! The counting part of the statistics: what is kept now, by reason, the peak, the replays,
//! and the registry of kept values sharded by thread (NOTE [registry-shards]).
//!
//! A bottom module: the graph counts through it (a [`Ticket`] per kept value,
//! [`on_replay`] per replay) and it names nothing else of the crate. The reports
//! (`stats()`, `saved_values()`, in `crate::stats`) read it.
//!
//! # Invariants
//! - The live bytes by reason are the sums of the sizes of the values kept now.
//! - The peak is the maximum of the non-leaf live bytes since the last reset.

use std::collections::BTreeMap;
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
    pub(crate) const ALL: [KeepReason; 4] = [
        KeepReason::Saved,
        KeepReason::Rebuilt,
        KeepReason::Constant,
        KeepReason::Leaf,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

pub(crate) struct Counters {
    pub(crate) live: [AtomicU64; 4],
    pub(crate) count: [AtomicU64; 4],
    pub(crate) peak: AtomicU64,
    pub(crate) replays: AtomicU64,
    pub(crate) replay_ns: AtomicU64,
}

pub(crate) static COUNTERS: Counters = Counters {
    live: [const { AtomicU64::new(0) }; 4],
    count: [const { AtomicU64::new(0) }; 4],
    peak: AtomicU64::new(0),
    replays: AtomicU64::new(0),
    replay_ns: AtomicU64::new(0),
};

static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

// NOTE [registry-shards]: every kept value is listed for `saved_values` in a registry sharded
// by thread. A value is entered in the shard of the thread that keeps it and removed from that
// same shard when it is released, on whichever thread. Each shard has its own mutex, taken on
// the hot path by its own thread (contended only when another thread releases one of its
// values at the same instant). The process-wide lock (the list of shards) is taken once per
// thread, when the thread keeps its first value or counts its first replay, and by the
// reports (`saved_values`, `stats`, `reset_stats`), which walk every shard.

/// One kept value, as its shard lists it: 64 bytes (NOTE [registry-slab]).
pub(crate) struct Entry {
    /// The ticket's number: keep order, process-wide.
    pub(crate) id: u64,
    pub(crate) op: &'static str,
    pub(crate) dims: Dims,
    /// Index in the shard's table of element types.
    dtype: u16,
    pub(crate) bytes: u64,
    pub(crate) reason: KeepReason,
}

/// A shape, inline when it has at most four dimensions of at most `u32::MAX`.
pub(crate) enum Dims {
    Inline { dims: [u32; 4], rank: u8 },
    Heap(Box<[usize]>),
}

impl Dims {
    fn of(shape: &[usize]) -> Self {
        match shape {
            s if s.len() <= 4 && s.iter().all(|&d| u32::try_from(d).is_ok()) => {
                let mut dims = [0u32; 4];
                for (slot, &d) in dims.iter_mut().zip(s) {
                    *slot = d as u32;
                }
                Dims::Inline {
                    dims,
                    rank: s.len() as u8,
                }
            }
            s => Dims::Heap(s.into()),
        }
    }

    /// The dimensions.
    pub(crate) fn to_vec(&self) -> Vec<usize> {
        match self {
            Dims::Inline { dims, rank } => {
                dims[..*rank as usize].iter().map(|&d| d as usize).collect()
            }
            Dims::Heap(dims) => dims.to_vec(),
        }
    }
}

// NOTE [registry-slab]: a shard lists its kept values in a slab (a vector of slots, the free
// ones chained), each ticket holding its slot. It was a `BTreeMap` by ticket id of
// 120-byte entries (the shape and the element type inline, 48 and 32 bytes): with leaves of
// 1,336 bytes about 60% full, about 220 bytes a kept value, a third of SaveAll's
// bookkeeping per op (2026-12-05, measured by allocation size on a 2,000-op chain). An entry
// is now 64 bytes (a shape of up to four `u32` dimensions inline, the element type an index
// in the shard's table of the few it saw), in a slab that reuses freed slots and gives its
// memory back when it empties. `saved_values` sorts by ticket id (keep order).

/// The kept values of one shard (NOTE [registry-slab]).
pub(crate) struct Slab {
    slots: Vec<Slot>,
    /// The first free slot (`u32::MAX`: none).
    free: u32,
    len: usize,
    /// The element types seen, by index.
    dtypes: Vec<DType>,
}

enum Slot {
    Used(Entry),
    /// A free slot, and the next free one.
    Free(u32),
}

impl Slab {
    const NONE: u32 = u32::MAX;

    fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Self::NONE,
            len: 0,
            dtypes: Vec::new(),
        }
    }

    /// Lists a value; returns its slot.
    fn insert(
        &mut self,
        id: u64,
        op: &'static str,
        shape: &[usize],
        dtype: DType,
        bytes: u64,
        reason: KeepReason,
    ) -> u32 {
        let dtype = match self.dtypes.iter().position(|d| *d == dtype) {
            Some(i) => i as u16,
            None => {
                self.dtypes.push(dtype);
                u16::try_from(self.dtypes.len() - 1)
                    .expect("remat internal error: more than 65,536 element types on a thread")
            }
        };
        let entry = Entry {
            id,
            op,
            dims: Dims::of(shape),
            dtype,
            bytes,
            reason,
        };
        self.len += 1;
        if self.free != Self::NONE {
            let slot = self.free;
            match std::mem::replace(&mut self.slots[slot as usize], Slot::Used(entry)) {
                Slot::Free(next) => self.free = next,
                Slot::Used(_) => unreachable!("remat internal error: a used slot on the free list"),
            }
            return slot;
        }
        self.slots.push(Slot::Used(entry));
        u32::try_from(self.slots.len() - 1)
            .expect("remat internal error: more than 4 billion kept values on a thread")
    }

    /// Unlists the value in `slot`: its reason and bytes.
    fn remove(&mut self, slot: u32) -> Option<(KeepReason, u64)> {
        let removed = match self.slots.get_mut(slot as usize)? {
            Slot::Free(_) => return None,
            used => std::mem::replace(used, Slot::Free(self.free)),
        };
        self.free = slot;
        self.len -= 1;
        if self.len == 0 {
            // Empty (a step's values all released): its memory goes back.
            self.slots = Vec::new();
            self.free = Self::NONE;
        }
        match removed {
            Slot::Used(entry) => Some((entry.reason, entry.bytes)),
            Slot::Free(_) => None,
        }
    }

    /// Whether no value is listed.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The listed values, in slot order, with their element types.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Entry, DType)> + '_ {
        self.slots.iter().filter_map(|slot| match slot {
            Slot::Used(entry) => Some((entry, self.dtypes[entry.dtype as usize])),
            Slot::Free(_) => None,
        })
    }
}

/// One thread's part of the registry.
pub(crate) struct Shard {
    /// Kept values (NOTE [registry-slab]).
    values: Mutex<Slab>,
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
            values: Mutex::new(Slab::new()),
            replays: Mutex::new(BTreeMap::new()),
            thread_alive: AtomicBool::new(true),
        }
    }

    pub(crate) fn values(&self) -> MutexGuard<'_, Slab> {
        self.values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn replays(&self) -> MutexGuard<'_, BTreeMap<&'static str, u64>> {
        self.replays
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The list of shards (NOTE [registry-shards]).
pub(crate) struct Registry {
    pub(crate) shards: Vec<Arc<Shard>>,
    /// Replay counts of the shards of ended threads, merged when they were dropped.
    pub(crate) retired_replays: BTreeMap<&'static str, u64>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    shards: Vec::new(),
    retired_replays: BTreeMap::new(),
});

/// Takes the process-wide lock: never on the hot path (NOTE [registry-shards]).
pub(crate) fn registry() -> MutexGuard<'static, Registry> {
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
    slot: u32,
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
        let shard = with_shard(Arc::clone);
        let slot = shard.values().insert(id, op, &shape, dtype, bytes, reason);
        Self { slot, shard }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let entry = self.shard.values().remove(self.slot);
        match entry {
            Some((reason, bytes)) => on_release(reason, bytes),
            None => debug_assert!(false, "remat internal error: a kept value left its shard"),
        }
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
pub(crate) fn on_replay(name: &'static str, ns: u64) {
    COUNTERS.replays.fetch_add(1, Ordering::Relaxed);
    COUNTERS.replay_ns.fetch_add(ns, Ordering::Relaxed);
    with_shard(|shard| *shard.replays().entry(name).or_insert(0) += 1);
}

pub(crate) fn activation_bytes() -> u64 {
    KeepReason::ALL
        .iter()
        .filter(|r| **r != KeepReason::Leaf)
        .map(|r| COUNTERS.live[r.index()].load(Ordering::Relaxed))
        .sum()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use burn_backend::tensor::FloatTensor;
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

    pub(crate) fn tensor(n: usize) -> FloatTensor<burn_flex::Flex> {
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
            on_replay("warm-up", 1);
            let before = global_locks();
            let tickets: Vec<Ticket> = (0..100)
                .map(|_| Ticket::keep::<burn_flex::Flex>(&value, KeepReason::Saved, "hot"))
                .collect();
            for _ in 0..100 {
                on_replay("hot", 1);
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
}

#[cfg(test)]
mod slab_tests {
    use super::*;

    /// NOTE [registry-slab]: slots are reused, each listing keeps its id, shape (inline up to
    /// four dimensions, else on the heap) and element type, and an emptied slab lets its
    /// memory go.
    #[test]
    fn a_slab_reuses_freed_slots_and_keeps_what_it_lists() {
        let mut slab = Slab::new();
        let a = slab.insert(1, "exp", &[2, 3], DType::F32, 24, KeepReason::Saved);
        let b = slab.insert(
            2,
            "matmul",
            &[1, 2, 3, 4, 5],
            DType::F64,
            960,
            KeepReason::Rebuilt,
        );
        let big = [1usize << 33];
        let c = slab.insert(3, "sum", &big, DType::F16, 1 << 34, KeepReason::Constant);
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(slab.remove(b), Some((KeepReason::Rebuilt, 960)));
        assert_eq!(slab.remove(b), None, "a slot freed twice");
        let d = slab.insert(4, "exp", &[7], DType::F32, 28, KeepReason::Saved);
        assert_eq!(d, b, "the freed slot is reused");
        let listed: Vec<(u64, &str, Vec<usize>, DType)> = slab
            .iter()
            .map(|(e, dtype)| (e.id, e.op, e.dims.to_vec(), dtype))
            .collect();
        assert_eq!(
            listed,
            [
                (1, "exp", vec![2, 3], DType::F32),
                (4, "exp", vec![7], DType::F32),
                (3, "sum", big.to_vec(), DType::F16),
            ]
        );
        assert_eq!(slab.dtypes.len(), 3, "one table entry per element type");
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        for slot in [a, c, d] {
            assert!(slab.remove(slot).is_some());
        }
        assert!(slab.is_empty());
        assert_eq!(slab.slots.capacity(), 0, "an empty slab holds no memory");
        assert_eq!(
            slab.insert(5, "exp", &[1], DType::F32, 4, KeepReason::Saved),
            0
        );
    }
}
