//! Node ids: [`NodeId`], minted once per node in the process, and the hasher of the maps
//! and sets keyed by them. Names nothing else of the graph.

use core::sync::atomic::{AtomicU64, Ordering};

/// Identifier of a recorded node, unique in the process.
///
/// Gradients are keyed by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    /// The integer behind the id (public, as in Burn's `NodeId`).
    pub value: u64,
}

impl NodeId {
    /// A fresh id, never handed out before in this process.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(1);
        Self {
            value: COUNTER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The raw value, for display and hashing.
    pub fn value(self) -> u64 {
        self.value
    }
}

impl core::fmt::Display for NodeId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "#{}", self.value)
    }
}

/// A fast hasher for maps and sets keyed by [`NodeId`] (ids are sequential integers: one
/// multiply spreads them well; no need for SipHash's DoS resistance on our own ids).
#[derive(Clone, Copy, Default)]
pub(crate) struct IdHasher(u64);

impl core::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// `BuildHasher` for [`IdHasher`].
pub(crate) type IdBuildHasher = core::hash::BuildHasherDefault<IdHasher>;
