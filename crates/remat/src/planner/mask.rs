//! [`Mask`]: a set of a view's nodes, one bit each, for the exact solvers (`exact.rs`,
//! `search.rs`).

use std::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Not};

/// 64-bit words in a [`Mask`]. Two: the search (`search.rs`) does not solve the 184 ops of
/// the benchmark's transformer view at any budget within 4M states (its bound stays below
/// the min-cut bound's), and a wider mask slows every search (four words: the MLP at 10%,
/// 7.6 s -> 8.8 s).
const WORDS: usize = 2;

/// A set of node indices below [`Mask::CAPACITY`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub(super) struct Mask([u64; WORDS]);

impl Mask {
    /// The most nodes a mask holds.
    pub(super) const CAPACITY: usize = 64 * WORDS;

    /// No node.
    pub(super) const EMPTY: Mask = Mask([0; WORDS]);

    /// Node `i` alone.
    pub(super) fn bit(i: u32) -> Mask {
        let mut m = Mask::EMPTY;
        m.0[i as usize / 64] = 1 << (i % 64);
        m
    }

    /// Nodes `0..i`.
    pub(super) fn below(i: usize) -> Mask {
        let mut m = Mask::EMPTY;
        for (w, word) in m.0.iter_mut().enumerate() {
            let start = 64 * w;
            *word = if i >= start + 64 {
                u64::MAX
            } else if i > start {
                (1 << (i - start)) - 1
            } else {
                0
            };
        }
        m
    }

    /// The nodes in `list`.
    pub(super) fn of(list: &[u32]) -> Mask {
        list.iter().fold(Mask::EMPTY, |m, &v| m | Mask::bit(v))
    }

    pub(super) fn is_empty(self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    pub(super) fn has(self, i: u32) -> bool {
        self.0[i as usize / 64] & (1 << (i % 64)) != 0
    }

    pub(super) fn count(self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// The lowest node, if any.
    pub(super) fn first(self) -> Option<u32> {
        self.0
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| 64 * i as u32 + w.trailing_zeros())
    }

    /// The nodes, lowest first.
    pub(super) fn iter(self) -> impl Iterator<Item = u32> {
        let mut rest = self;
        std::iter::from_fn(move || {
            let v = rest.first()?;
            rest.0[v as usize / 64] &= !(1 << (v % 64));
            Some(v)
        })
    }

    /// The next smaller subset of `within` (`(self - 1) & within` on one wide integer):
    /// from `within` itself down to the empty set, every subset once.
    pub(super) fn prev_subset(self, within: Mask) -> Mask {
        let mut m = self;
        for word in m.0.iter_mut() {
            let (less, borrow) = word.overflowing_sub(1);
            *word = less;
            if !borrow {
                break;
            }
        }
        m & within
    }

    /// The set as an index into a dense table (its first 64 nodes).
    pub(super) fn low(self) -> usize {
        self.0[0] as usize
    }

    /// The set of the first 64 nodes given by `bits`.
    pub(super) fn from_low(bits: usize) -> Mask {
        let mut m = Mask::EMPTY;
        m.0[0] = bits as u64;
        m
    }
}

impl BitAnd for Mask {
    type Output = Mask;
    fn bitand(mut self, other: Mask) -> Mask {
        self &= other;
        self
    }
}

impl BitOr for Mask {
    type Output = Mask;
    fn bitor(mut self, other: Mask) -> Mask {
        self |= other;
        self
    }
}

impl BitAndAssign for Mask {
    fn bitand_assign(&mut self, other: Mask) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a &= b;
        }
    }
}

impl BitOrAssign for Mask {
    fn bitor_assign(&mut self, other: Mask) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
    }
}

impl Not for Mask {
    type Output = Mask;
    fn not(mut self) -> Mask {
        for w in self.0.iter_mut() {
            *w = !*w;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mask_is_a_wide_integer_of_bits() {
        let m = Mask::of(&[0, 63, 64, 120]);
        assert_eq!(m.iter().collect::<Vec<_>>(), [0, 63, 64, 120]);
        assert_eq!(m.count(), 4);
        assert!(m.has(64) && !m.has(65));
        assert_eq!((m & Mask::below(64)).iter().collect::<Vec<_>>(), [0, 63]);
        assert_eq!(Mask::below(70).count(), 70);
        assert_eq!(Mask::below(Mask::CAPACITY).count(), 128);
        assert_eq!((!Mask::below(100)).first(), Some(100));
        // Every subset of a set that spans two words, once each.
        let within = Mask::of(&[3, 64, 110]);
        let mut seen = Vec::new();
        let mut sub = within;
        loop {
            seen.push(sub);
            if sub.is_empty() {
                break;
            }
            sub = sub.prev_subset(within);
        }
        assert_eq!(seen.len(), 8);
        assert_eq!(seen[1], Mask::of(&[64, 110]), "the lowest bit leaves first");
        assert_eq!(Mask::from_low(5).low(), 5);
    }
}
