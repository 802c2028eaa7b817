//! What a recorded op declares to the engine: its name and cost class ([`OpInfo`], [`Cost`]),
//! what its backward step reads ([`Reads`], given which inputs are [`Tracked`]), the
//! [`Values`] its forward takes, and [`Placement`], the plain data a node carries about what
//! the decision layer (`checkpoint/`) decided for it when it was recorded. The op trait
//! itself ([`Rule`](super::Rule), NOTE \[one-rule\]) is in `node.rs`, beside the node that
//! holds it. Names nothing else of the graph.
//!
//! # Invariants
//! - Nothing here decides what is kept: a [`Placement`] is read, never computed, in `graph/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use burn_backend::tensor::FloatTensor;
use smallvec::SmallVec;

/// How expensive an op is to replay, relative to keeping its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cost {
    /// A view or layout change (reshape, transpose, slice, expand): no arithmetic.
    Alias,
    /// Element-wise or otherwise memory-bound work (add, exp, relu, mask ...).
    Cheap,
    /// Compute-bound work: matmul, convolution, reductions, pooling, attention.
    Compute,
    /// Draws random numbers: never replayed, its output is always kept.
    Random,
}

/// What a policy knows about a recorded op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// The op's name, e.g. `"matmul"`, `"exp"`, `"conv2d"`.
    pub name: &'static str,
    /// Its cost class.
    pub cost: Cost,
}

/// What the decision layer decided for one recorded op, as plain data the node carries:
/// whether its output may be rebuilt, and while which region is open (NOTE [regions] in
/// `checkpoint/policy.rs`).
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    pub(crate) recompute: bool,
    /// The output is a view (an [`Cost::Alias`] op) of leaves only: keeping it holds the
    /// leaves' memory, which is the user's, so it is counted with the leaves.
    pub(crate) leaf_view: bool,
    /// The "open" flag of the outermost checkpoint region open when the op was recorded,
    /// cleared by the region when it closes; `None` outside any region. The value stays
    /// rebuildable for later consumers only while it is set.
    pub(crate) region: Option<Arc<AtomicBool>>,
    /// The `Policy::Budget` the op was recorded under (an id from `budget::intern`), 0
    /// for none: which planner's pass the node joins. graph/ only carries it.
    pub(crate) budget: u32,
    /// A planner decides at backward time whether the value is kept or rebuilt (the
    /// decision layer sets it for ops recorded under a budget, NOTE \[budget\]): every input
    /// a replay needs was retained when the op was recorded, so while `recompute` is set the
    /// value is rebuildable whatever its region or its slot.
    pub(crate) planned: bool,
}

impl Placement {
    /// A leaf's placement: kept, in no region, under no budget.
    pub(crate) const LEAF: Placement = Placement {
        recompute: false,
        leaf_view: false,
        region: None,
        budget: 0,
        planned: false,
    };

    /// Whether the region the op was recorded in (if any) is still open.
    pub(crate) fn region_open(&self) -> bool {
        self.region
            .as_ref()
            .is_none_or(|open| open.load(Ordering::Acquire))
    }
}

/// The float values an op reads: its inputs in order.
pub(crate) type Values<B> = SmallVec<[FloatTensor<B>; 2]>;

/// Input indices from [`INLINE`] on, one bit each: bit `i - INLINE` of word
/// `(i - INLINE) / 64` for input `i`. Only ops with more inputs than that have one (`cat`,
/// custom ops with many parents or checkpoints); boxed, so that the common case costs one
/// word (`graph::node`'s `a_node_is_small`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Spill(Vec<u64>);

/// Inputs below this index are one bit each of a `u32`; the rest go to a [`Spill`].
const INLINE: usize = 32;

/// Whether input `i` is in the set stored as `low` (inputs below [`INLINE`]) and `high`.
fn contains(low: u32, high: &Option<Box<Spill>>, i: usize) -> bool {
    if i < INLINE {
        return low & (1 << i) != 0;
    }
    let i = i - INLINE;
    high.as_ref()
        .and_then(|spill| spill.0.get(i / 64))
        .is_some_and(|word| word & (1 << (i % 64)) != 0)
}

/// Adds input `i` to the set stored as `low` and `high`.
fn insert(low: &mut u32, high: &mut Option<Box<Spill>>, i: usize) {
    if i < INLINE {
        *low |= 1 << i;
        return;
    }
    let i = i - INLINE;
    let words = &mut high.get_or_insert_with(Box::default).0;
    if words.len() <= i / 64 {
        words.resize(i / 64 + 1, 0);
    }
    words[i / 64] |= 1 << (i % 64);
}

/// Which values a backward step reads: a set of inputs (any number of them) and maybe the
/// output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    /// Inputs `0..INLINE`, bit `i` for input `i`.
    low: u32,
    pub(crate) output: bool,
    /// Inputs from `INLINE` on; `None` when none of them is read.
    high: Option<Box<Spill>>,
}

impl Reads {
    /// Reads nothing.
    pub(crate) const NOTHING: Reads = Reads {
        low: 0,
        output: false,
        high: None,
    };
    /// Reads the output.
    pub(crate) const OUTPUT: Reads = Reads {
        low: 0,
        output: true,
        high: None,
    };

    /// Reads input `i`.
    pub(crate) fn input(i: usize) -> Reads {
        Reads::NOTHING.with_input_if(i, true)
    }

    /// Also reads input `i` when `cond` holds.
    pub(crate) fn with_input_if(mut self, i: usize, cond: bool) -> Reads {
        if cond {
            self.insert(i);
        }
        self
    }

    /// Also reads the output when `cond` holds.
    pub(crate) fn with_output_if(mut self, cond: bool) -> Reads {
        self.output |= cond;
        self
    }

    /// Whether input `i` is read.
    pub(crate) fn has_input(&self, i: usize) -> bool {
        contains(self.low, &self.high, i)
    }

    /// Adds input `i`.
    pub(crate) fn insert(&mut self, i: usize) {
        insert(&mut self.low, &mut self.high, i);
    }
}

/// Which inputs of an op are tracked (need a gradient): any number of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tracked {
    low: u32,
    high: Option<Box<Spill>>,
}

impl Tracked {
    /// The tracked inputs of `inputs`, where `tracked(input)` says whether one is.
    pub(crate) fn of<T>(inputs: &[T], tracked: impl Fn(&T) -> bool) -> Self {
        let mut set = Tracked::default();
        for (i, input) in inputs.iter().enumerate() {
            if tracked(input) {
                insert(&mut set.low, &mut set.high, i);
            }
        }
        set
    }

    /// Whether input `i` is tracked.
    pub(crate) fn get(&self, i: usize) -> bool {
        contains(self.low, &self.high, i)
    }

    /// Whether no input is tracked.
    pub(crate) fn is_empty(&self) -> bool {
        self.low == 0 && self.high.is_none()
    }
}
