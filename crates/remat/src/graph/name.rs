//! Op names as two-byte indices into the process's table of names (NOTE [op-names]). Names
//! nothing else of the crate.

use std::cell::{Cell, RefCell};
use std::sync::RwLock;

/// A node's op name (`"matmul"`, `"exp"`, ..., or a leaf) as an index into the process's
/// table of the names recorded so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OpName(u16);

// NOTE [op-names]: every node carried its op's name as a `&'static str`, 16 of its bytes, and
// a node is paid once per recorded op: on graphs of small ops (an unrolled RNN of 4 KiB
// values) the nodes are most of what a step holds beyond its values (FIXME [tape-bytes] in
// ARCHITECTURE.md). A name is now two bytes: index 0 is a leaf, any other index an entry of
// one process-wide table, appended to under a lock the first time a name is seen and never
// shrunk. Recording looks a name up in a small per-thread cache keyed by the string's
// address, and reading a name looks it up in the thread's copy of the table, so the table's
// lock is taken once per name and thread, not once per op (a backward pass reads each node's
// name for its planner view). Two literals with the same text are one entry (the table
// compares text), and an op named "leaf" is an op, not a leaf. A process that records more
// than 65,534 distinct names (only leaked strings could) reads the later ones as `"op"`:
// names label statistics and group op times, and no decision reads them.

/// The table behind every [`OpName`] above 0: entry `i - 1` is name `i`.
static NAMES: RwLock<Vec<&'static str>> = RwLock::new(Vec::new());

/// The index names take once the table is full.
const FULL: u16 = u16::MAX;

/// Entries of the per-thread cache (a power of two).
const CACHE: usize = 64;

thread_local! {
    /// Recently seen names by address and length: a direct-mapped cache.
    static SEEN: [Cell<(usize, usize, u16)>; CACHE] =
        const { [const { Cell::new((0, 0, 0)) }; CACHE] };
    /// This thread's copy of the table, brought up to date when it lacks a name read.
    static KNOWN: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

impl OpName {
    /// A leaf's name, `"leaf"`.
    pub(crate) const LEAF: OpName = OpName(0);

    /// The index of `name`, added to the table if it is new.
    pub(crate) fn of(name: &'static str) -> OpName {
        let key = (name.as_ptr() as usize, name.len());
        let at = (key.0 >> 3 ^ key.1) % CACHE;
        let cached = SEEN
            .try_with(|seen| {
                let (ptr, len, index) = seen[at].get();
                ((ptr, len) == key && index != 0).then_some(OpName(index))
            })
            .ok()
            .flatten();
        if let Some(found) = cached {
            return found;
        }
        let found = intern(name);
        let _ = SEEN.try_with(|seen| seen[at].set((key.0, key.1, found.0)));
        found
    }

    /// The name's text.
    pub(crate) fn as_str(self) -> &'static str {
        match self.0 {
            0 => "leaf",
            FULL => "op",
            index => {
                let at = index as usize - 1;
                let table = || NAMES.read().unwrap_or_else(|p| p.into_inner());
                KNOWN
                    .try_with(|known| {
                        let mut known = known.borrow_mut();
                        if known.len() <= at {
                            known.clone_from(&table());
                        }
                        known[at]
                    })
                    .unwrap_or_else(|_| table()[at])
            }
        }
    }

    /// Whether this is a leaf's name.
    pub(crate) fn is_leaf(self) -> bool {
        self == OpName::LEAF
    }
}

/// The index of `name` in the table, appended if its text is new ([`FULL`] once the table
/// is full).
fn intern(name: &'static str) -> OpName {
    let find = |names: &[&'static str]| names.iter().position(|&known| known == name);
    if let Some(at) = find(&NAMES.read().unwrap_or_else(|p| p.into_inner())) {
        return OpName(at as u16 + 1);
    }
    let mut names = NAMES.write().unwrap_or_else(|p| p.into_inner());
    if let Some(at) = find(&names) {
        return OpName(at as u16 + 1);
    }
    if names.len() + 1 >= FULL as usize {
        return OpName(FULL);
    }
    names.push(name);
    OpName(names.len() as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name reads back as its text; equal texts are one name, whatever their address; a
    /// leaf is no op's name, "leaf" included.
    #[test]
    fn names_read_back() {
        let exp = OpName::of("exp");
        assert_eq!(exp.as_str(), "exp");
        assert_eq!(OpName::of("exp"), exp);
        let leaked: &'static str = Box::leak(String::from("exp").into_boxed_str());
        assert_eq!(OpName::of(leaked), exp);
        let custom = OpName::of("leaf");
        assert_ne!(custom, OpName::LEAF);
        assert_eq!(custom.as_str(), "leaf");
        assert!(!custom.is_leaf() && OpName::LEAF.is_leaf());
        assert_ne!(OpName::of("log"), exp);
        // From another thread: its own cache, the same table.
        let there = std::thread::spawn(|| OpName::of("exp")).join().unwrap();
        assert_eq!(there, exp);
        assert_eq!(core::mem::size_of::<OpName>(), 2);
    }
}
