//! Policies: which recorded values are kept for backward and which are rebuilt.
//!
//! A policy is consulted once per recorded op, when the op is recorded, and answers one
//! question: may this op's output be dropped and rebuilt later by replaying the op? The
//! engine then keeps exactly the values that the backward pass (and the replays) will read
//! (NOTE [what-is-kept]).
//!
//! # Invariants
//! - A policy never sees a tensor, only an [`OpInfo`].
//! - Ops that cannot be replayed bit-identically ([`Cost::Random`], transfers between
//!   backends) and leaves are never rebuilt, whatever the policy says.

use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, RwLock};

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

/// A policy's answer for one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep the output if backward needs it.
    Keep,
    /// Drop the output and rebuild it by replay when backward needs it.
    Recompute,
}

/// A user rule for [`Policy::Selective`].
#[derive(Clone)]
pub struct Selector(Arc<dyn Fn(&OpInfo) -> Decision + Send + Sync>);

impl Selector {
    /// Wraps a rule over the op name and cost class.
    pub fn new(rule: impl Fn(&OpInfo) -> Decision + Send + Sync + 'static) -> Self {
        Self(Arc::new(rule))
    }

    /// Keeps the outputs of ops whose cost class is in `keep`, recomputes the rest.
    pub fn keep_costs(keep: &'static [Cost]) -> Self {
        Self::new(move |op| {
            if keep.contains(&op.cost) {
                Decision::Keep
            } else {
                Decision::Recompute
            }
        })
    }

    /// Keeps the outputs of ops whose name is in `names`, recomputes the rest.
    pub fn keep_names(names: &'static [&'static str]) -> Self {
        Self::new(move |op| {
            if names.contains(&op.name) {
                Decision::Keep
            } else {
                Decision::Recompute
            }
        })
    }

    fn decide(&self, op: &OpInfo) -> Decision {
        (self.0)(op)
    }
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Selector(..)")
    }
}

/// Which values the forward pass keeps for backward.
///
/// Whatever the policy, gradients are bit-identical: a rebuilt value is produced by the same
/// inner-backend calls as in the forward pass.
#[derive(Clone, Debug, Default)]
pub enum Policy {
    /// Keep every value a backward step reads (Burn's `NoCheckpointing`).
    SaveAll,
    /// Burn's `BalancedCheckpointing`: rebuild the outputs of cheap and alias ops, keep the
    /// outputs of compute-bound ops; except that a cheap output is kept when rebuilding it
    /// would keep at least as many bytes of inputs that nothing else keeps (a relu after a
    /// conv): the same memory without the replays.
    #[default]
    Balanced,
    /// A user rule decides per op, from its name and cost class.
    Selective(Selector),
    /// Keep only what cannot be rebuilt: leaves, constants and outputs of random ops.
    RecomputeAll,
}

impl Policy {
    /// Whether this policy recomputes the output of `op` (before the never-rebuilt rule).
    pub fn recomputes(&self, op: &OpInfo) -> bool {
        match self {
            Policy::SaveAll => false,
            Policy::Balanced => matches!(op.cost, Cost::Alias | Cost::Cheap),
            Policy::Selective(selector) => selector.decide(op) == Decision::Recompute,
            Policy::RecomputeAll => true,
        }
    }
}

static DEFAULT_BALANCED: RwLock<Policy> = RwLock::new(Policy::Balanced);

thread_local! {
    static CONTEXT: RefCell<Context> = const { RefCell::new(Context { scoped: Vec::new(), regions: Vec::new() }) };
}

struct Context {
    /// `with_policy` overrides, innermost last.
    scoped: Vec<Policy>,
    /// Active region instances, innermost last.
    regions: Vec<u64>,
}

/// Sets the policy used by graphs recorded under Burn's `BalancedCheckpointing` setting
/// (`device.autodiff().gradient_checkpointing()`), process-wide.
///
/// Graphs recorded under `NoCheckpointing` (plain `device.autodiff()`) always use
/// [`Policy::SaveAll`], unless a [`with_policy`] scope or a [`checkpoint`](crate::checkpoint())
/// region asks otherwise. Values already recorded keep the decision made when they were
/// recorded.
pub fn set_policy(policy: Policy) {
    *DEFAULT_BALANCED
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = policy;
}

/// The policy currently set with [`set_policy`].
pub fn policy() -> Policy {
    DEFAULT_BALANCED
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

/// Runs `f` with `policy` for every op recorded on this thread inside it, whatever the
/// checkpointing strategy of the tensors.
///
/// Scopes nest: the innermost wins. Outside any autodiff computation this is a no-op that
/// just runs `f`.
pub fn with_policy<R>(policy: Policy, f: impl FnOnce() -> R) -> R {
    CONTEXT.with(|cx| cx.borrow_mut().scoped.push(policy));
    let _guard = PopOnDrop(|cx: &mut Context| {
        cx.scoped.pop();
    });
    f()
}

/// Pops a context entry when dropped, also when `f` unwinds.
struct PopOnDrop<F: Fn(&mut Context)>(F);

impl<F: Fn(&mut Context)> Drop for PopOnDrop<F> {
    fn drop(&mut self) {
        // The thread-local may already be gone during thread teardown: nothing to pop then.
        let _ = CONTEXT.try_with(|cx| (self.0)(&mut cx.borrow_mut()));
    }
}

/// Runs `f` as a checkpoint region (see [`checkpoint`](crate::checkpoint)).
pub(crate) fn in_region<R>(f: impl FnOnce() -> R) -> R {
    use core::sync::atomic::{AtomicU64, Ordering};
    static NEXT_REGION: AtomicU64 = AtomicU64::new(1);
    let region = NEXT_REGION.fetch_add(1, Ordering::Relaxed);
    CONTEXT.with(|cx| cx.borrow_mut().regions.push(region));
    let _guard = PopOnDrop(|cx: &mut Context| {
        cx.regions.pop();
    });
    f()
}

/// The decision for one recorded op: whether its output may be rebuilt, and the region
/// instance it was recorded in (0 outside any region).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement {
    pub(crate) recompute: bool,
    /// The output is a view (an [`Cost::Alias`] op) of leaves only: keeping it holds the
    /// leaves' memory, which is the user's, so it is counted with the leaves.
    pub(crate) leaf_view: bool,
    pub(crate) region: u64,
    /// The recompute decision came from [`Policy::Balanced`], which also weighs bytes: the
    /// output is kept after all when rebuilding it would keep as many new bytes (NOTE
    /// [thrifty-balanced] in `ops/rule.rs`).
    pub(crate) thrifty: bool,
}

/// Decides, at record time, whether an op's output is rebuilt rather than kept.
///
/// `balanced` is true for graphs recorded under Burn's `BalancedCheckpointing`.
pub(crate) fn place(op: &OpInfo, replayable: bool, balanced: bool) -> Placement {
    CONTEXT.with(|cx| {
        let cx = cx.borrow();
        let region = cx.regions.last().copied().unwrap_or(0);
        if !replayable {
            return Placement {
                recompute: false,
                leaf_view: false,
                region,
                thrifty: false,
            };
        }
        let decide = |policy: &Policy| {
            let recompute = policy.recomputes(op);
            (recompute, recompute && matches!(policy, Policy::Balanced))
        };
        let (recompute, thrifty) = if region != 0 {
            // NOTE [regions]: inside a region every replayable value is rebuilt.
            (true, false)
        } else if let Some(scoped) = cx.scoped.last() {
            decide(scoped)
        } else if balanced {
            decide(
                &DEFAULT_BALANCED
                    .read()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            )
        } else {
            (false, false)
        };
        Placement {
            recompute,
            leaf_view: false,
            region,
            thrifty,
        }
    })
}

/// Whether region instance `region` is active on this thread now (0 means "no region").
pub(crate) fn region_active(region: u64) -> bool {
    region == 0 || CONTEXT.with(|cx| cx.borrow().regions.contains(&region))
}
