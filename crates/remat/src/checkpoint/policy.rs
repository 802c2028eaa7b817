//! Policies: which recorded values are kept for backward and which are rebuilt.
//!
//! A policy is consulted once per recorded op, when the op is recorded, and answers one
//! question: may this op's output be dropped and rebuilt later by replaying the op? The
//! engine then keeps exactly the values that the backward pass (and the replays) will read
//! (NOTE [what-is-kept]).
//!
//! What an op follows is decided on the thread that records it, first match wins:
//! 1. an open [`checkpoint`](crate::checkpoint()) region on that thread: rebuild;
//! 2. the innermost [`with_policy`] scope on that thread;
//! 3. the process-wide [`set_policy`] (NOTE [process-policy]);
//! 4. the default of the tensors' Burn strategy: [`Policy::SaveAll`] under
//!    `NoCheckpointing`, [`Policy::Balanced`] under `BalancedCheckpointing`.
//!
//! [`policy`] reports the outcome for both strategies. Cost per recorded op: one thread-local
//! borrow and one atomic load (plus a read lock and an `Arc` clone under a process-wide
//! [`Policy::Selective`]).
//!
//! # Invariants
//! - A policy never sees a tensor, only an [`OpInfo`].
//! - User code (a [`Selector`], a scope's or a region's closure) never runs while this
//!   module holds the thread's context borrowed or the process-wide policy locked.
//! - Ops that cannot be replayed bit-identically ([`Cost::Random`], transfers between
//!   backends) and leaves are never rebuilt, whatever the policy says.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use super::strategy::CheckpointStrategy;
use crate::graph::Placement;
pub use crate::graph::{Cost, OpInfo};

/// A policy's answer for one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep the output if backward needs it.
    Keep,
    /// Drop the output and rebuild it by replay when backward needs it.
    Recompute,
}

/// A user rule for [`Policy::Selective`]: a predicate over the facts of an op being
/// recorded (its name, its cost class and, for [`Selector::sized`] rules, the bytes of its
/// output) that says whether the op's output is kept or rebuilt.
///
/// Selectors compose, as JAX's checkpoint policies do: [`Selector::or`] keeps what either
/// keeps, [`Selector::and`] what both keep, and `!selector` inverts one.
///
/// ```
/// use remat::{Cost, Policy, Selector};
/// // Keep matrix products and any other output of at most 4 KiB; rebuild the rest.
/// let rule = Selector::keep_names(&["matmul"]).or(Selector::keep_at_most(4096));
/// remat::with_policy(Policy::Selective(rule), || {
///     // ... the forward pass ...
/// });
/// // Keep compute-bound outputs except convolutions.
/// let rule = Selector::keep_costs(&[Cost::Compute]).and(!Selector::keep_names(&["conv2d"]));
/// # let _ = rule;
/// ```
#[derive(Clone)]
pub struct Selector {
    rule: Arc<Rule>,
    /// Whether the rule reads the output's bytes (the recording site then asks for them).
    sized: bool,
}

/// A selector's predicate: the op's facts and its output's bytes (0 when not `sized`).
type Rule = dyn Fn(&OpInfo, u64) -> Decision + Send + Sync;

impl Selector {
    /// Wraps a rule over the op name and cost class.
    ///
    /// The rule runs once per op, when the op is recorded, on the recording thread, with no
    /// lock or borrow of remat's held: it may itself call [`set_policy`] or [`with_policy`].
    pub fn new(rule: impl Fn(&OpInfo) -> Decision + Send + Sync + 'static) -> Self {
        Self {
            rule: Arc::new(move |op, _| rule(op)),
            sized: false,
        }
    }

    /// Wraps a rule over the op name, cost class and the bytes of its output (its shape
    /// times its dtype's size, as [`stats`](crate::stats()) counts a kept value). It runs
    /// as [`Selector::new`]'s does; the output's size is found once per op.
    pub fn sized(rule: impl Fn(&OpInfo, u64) -> Decision + Send + Sync + 'static) -> Self {
        Self {
            rule: Arc::new(rule),
            sized: true,
        }
    }

    /// Keeps the outputs of ops whose cost class is in `keep`, recomputes the rest.
    pub fn keep_costs(keep: &'static [Cost]) -> Self {
        Self::new(move |op| Decision::keep_if(keep.contains(&op.cost)))
    }

    /// Keeps the outputs of ops whose name is in `names`, recomputes the rest.
    ///
    /// Names are remat's op names, as [`saved_values`](crate::saved_values()) lists them.
    /// Burn's modules record the ops they are built of: `burn::nn::Linear` records `matmul`,
    /// then a `reshape` of the bias and an `add`, so `keep_names(&["matmul"])` keeps its
    /// matrix products and rebuilds the bias additions and activations.
    pub fn keep_names(names: &'static [&'static str]) -> Self {
        Self::new(move |op| Decision::keep_if(names.contains(&op.name)))
    }

    /// Keeps outputs of at most `bytes`, recomputes larger ones: small values (a norm's
    /// statistics, a loss) cost little to keep, large activations are rebuilt.
    pub fn keep_at_most(bytes: u64) -> Self {
        Self::sized(move |_, size| Decision::keep_if(size <= bytes))
    }

    /// Keeps what `self` or `other` keeps (JAX's `save_from_both_policies`); `other` is
    /// not asked when `self` keeps.
    pub fn or(self, other: Selector) -> Self {
        let sized = self.sized || other.sized;
        Self {
            rule: Arc::new(move |op, size| match (self.rule)(op, size) {
                Decision::Keep => Decision::Keep,
                Decision::Recompute => (other.rule)(op, size),
            }),
            sized,
        }
    }

    /// Keeps only what both `self` and `other` keep; `other` is not asked when `self`
    /// recomputes.
    pub fn and(self, other: Selector) -> Self {
        let sized = self.sized || other.sized;
        Self {
            rule: Arc::new(move |op, size| match (self.rule)(op, size) {
                Decision::Keep => (other.rule)(op, size),
                Decision::Recompute => Decision::Recompute,
            }),
            sized,
        }
    }

    /// The answer for `op`; `output_bytes` is asked only by a sized rule, at most once.
    fn decide(&self, op: &OpInfo, output_bytes: &mut dyn FnMut() -> u64) -> Decision {
        let size = if self.sized { output_bytes() } else { 0 };
        (self.rule)(op, size)
    }
}

impl std::ops::Not for Selector {
    type Output = Selector;

    /// Keeps what `self` recomputes and recomputes what it keeps.
    fn not(self) -> Selector {
        let sized = self.sized;
        Selector {
            rule: Arc::new(move |op, size| match (self.rule)(op, size) {
                Decision::Keep => Decision::Recompute,
                Decision::Recompute => Decision::Keep,
            }),
            sized,
        }
    }
}

impl Decision {
    /// `Keep` when `keep` holds, else `Recompute`.
    pub fn keep_if(keep: bool) -> Self {
        if keep {
            Decision::Keep
        } else {
            Decision::Recompute
        }
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
    /// Keep every value a backward step reads (what Burn's `NoCheckpointing` does, and its
    /// default here when no policy is chosen).
    SaveAll,
    /// Burn's `BalancedCheckpointing`: rebuild the outputs of cheap and alias ops, keep the
    /// outputs of compute-bound ops; except that a cheap output is kept when rebuilding it
    /// would keep at least as many bytes of inputs that nothing else keeps (a relu after a
    /// conv): the same memory without the replays. The default under Burn's
    /// `BalancedCheckpointing` when no policy is chosen (and `Policy::default()`).
    #[default]
    Balanced,
    /// A user rule decides per op, from its name and cost class.
    Selective(Selector),
    /// Keep only what cannot be rebuilt: leaves, constants and outputs of random ops.
    RecomputeAll,
    /// Hold at most this many bytes for backward at any moment of a training step, at the
    /// least extra compute the engine finds (NOTE \[budget\] in `checkpoint/budget/`).
    ///
    /// The bytes are those [`stats`](crate::stats()) counts as kept (saved, rebuilt and
    /// constant values; not leaves, which are the user's own tensors), through the forward
    /// and the whole backward pass, rebuilt values included; the one exception is the
    /// inputs and output of the op that is running. While the forward pass runs, values a
    /// backward step will read are kept while they fit and evicted (the one whose rebuild
    /// is cheapest per byte, weighted by how long it has gone unread, first: DTR's rule)
    /// when they do not; at `backward()` the engine plans the whole pass over the recorded
    /// graph before any step runs, and carries the plan out: which values to rebuild, when,
    /// and which to drop again. Values that cannot be rebuilt (outputs of random ops,
    /// transfers, custom ops without a retro-forward) are always kept.
    ///
    /// A budget too small for the graph panics at `backward()`, before any backward step
    /// runs, with a message naming the smallest budget the planner guarantees for the whole
    /// step. The first step of a graph the thread has not run under a budget evicts online,
    /// not knowing the graph ahead; where that cannot hold the budget, its forward pass goes
    /// over it (`stats()` shows the peak) and the step is planned whole at `backward()`: it
    /// runs when the graph fits the budget, and the next steps follow its plan from their
    /// first op. [`tradeoff`](crate::tradeoff()) tabulates budgets against predicted extra compute
    /// from one recorded step. Inside a [`checkpoint`](crate::checkpoint()) region, values
    /// are never kept after forward; the budget decides everything else. `Budget(u64::MAX)`
    /// keeps what [`Policy::SaveAll`] keeps, plus the untracked inputs (the model's input
    /// batch, say) that ops hold for a replay: the same tensor, counted once per op that
    /// holds it, as `stats` counts constants.
    Budget(u64),
}

impl Policy {
    /// Whether this policy recomputes the output of `op` (before the never-rebuilt rule).
    /// A [`Selector::sized`] rule is told the output has 0 bytes: see
    /// [`Policy::recomputes_sized`].
    pub fn recomputes(&self, op: &OpInfo) -> bool {
        self.recomputes_sized(op, 0)
    }

    /// Whether this policy recomputes the output of `op`, an output of `bytes`.
    pub fn recomputes_sized(&self, op: &OpInfo, bytes: u64) -> bool {
        self.answer(op).resolve(op, &mut || bytes).0
    }

    /// The answer for `op`; a user rule is only cloned here, asked by [`Answer::resolve`].
    fn answer(&self, op: &OpInfo) -> Answer {
        match self {
            Policy::SaveAll => Answer::KEEP,
            Policy::Balanced => {
                let recompute = matches!(op.cost, Cost::Alias | Cost::Cheap);
                Answer::Given {
                    recompute,
                    thrifty: recompute,
                }
            }
            Policy::Selective(selector) => Answer::Ask(selector.clone()),
            Policy::RecomputeAll => Answer::RECOMPUTE,
            Policy::Budget(_) => Answer::RECOMPUTE,
        }
    }
}

/// NOTE [process-policy]: the policy set with [`set_policy`], process-wide; `None` when none
/// is set (or after [`reset_policy`]): each graph then follows its Burn strategy's default.
/// It is read once per recorded op, so [`KIND`] mirrors it in one atomic: no policy and the
/// built-in policies are read without a lock; only [`Policy::Selective`] takes the read lock,
/// to clone its rule out. No lock is held while a user rule runs.
static PROCESS: RwLock<Option<Policy>> = RwLock::new(None);

/// Which policy [`PROCESS`] holds (one of the `KIND_*` values).
// INVARIANT: written only under `PROCESS`'s write lock, after `PROCESS` itself.
static KIND: AtomicU8 = AtomicU8::new(KIND_NONE);
const KIND_NONE: u8 = 0;
const KIND_SAVE_ALL: u8 = 1;
const KIND_BALANCED: u8 = 2;
const KIND_RECOMPUTE_ALL: u8 = 3;
const KIND_SELECTIVE: u8 = 4;
const KIND_BUDGET: u8 = 5;

/// Sets [`PROCESS`] and [`KIND`] together.
fn store_process(policy: Option<Policy>) {
    let kind = match &policy {
        None => KIND_NONE,
        Some(Policy::SaveAll) => KIND_SAVE_ALL,
        Some(Policy::Balanced) => KIND_BALANCED,
        Some(Policy::RecomputeAll) => KIND_RECOMPUTE_ALL,
        Some(Policy::Selective(_)) => KIND_SELECTIVE,
        Some(Policy::Budget(_)) => KIND_BUDGET,
    };
    let mut process = PROCESS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // The previous policy (a user rule, perhaps) is dropped after the lock is released.
    let _previous = core::mem::replace(&mut *process, policy);
    KIND.store(kind, Ordering::Release);
    drop(process);
}

/// The answer of the process-wide policy for `op`, or `None` when none is set.
fn process_answer(op: &OpInfo) -> Option<Answer> {
    let policy = match KIND.load(Ordering::Acquire) {
        KIND_NONE => return None,
        KIND_SAVE_ALL => Policy::SaveAll,
        KIND_BALANCED => Policy::Balanced,
        KIND_RECOMPUTE_ALL => Policy::RecomputeAll,
        _ => {
            // A selector or a budget (or, racing with `set_policy`, whatever is set now):
            // cloned out, asked after the lock is released.
            return PROCESS
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .as_ref()
                .map(|policy| policy.answer(op));
        }
    };
    Some(policy.answer(op))
}

thread_local! {
    static CONTEXT: RefCell<Context> = const { RefCell::new(Context { scoped: Vec::new(), regions: Vec::new() }) };
}

/// This thread's scopes and regions.
///
/// # Invariants
/// - Borrowed only for a push, a pop or a copy: never while user code (a closure, a
///   [`Selector`]) runs, so user code may open scopes and regions of its own.
struct Context {
    /// `with_policy` overrides, innermost last.
    scoped: Vec<Policy>,
    /// The "open" flags of the active regions, innermost last (NOTE [regions]).
    regions: Vec<Arc<AtomicBool>>,
}

/// Sets the policy of every graph recorded from now on, in the whole process, whatever
/// Burn strategy its tensors carry (`device.autodiff()` or
/// `device.autodiff().gradient_checkpointing()`).
///
/// Until it is called (and after [`reset_policy`]) each graph follows its strategy's
/// default: [`Policy::SaveAll`] under Burn's `NoCheckpointing`, [`Policy::Balanced`] under
/// `BalancedCheckpointing`. A [`with_policy`] scope or a [`checkpoint`](crate::checkpoint())
/// region on the recording thread takes precedence. Values already recorded keep the
/// decision made when they were recorded.
///
/// Being process-wide, it also reaches the worker threads of a training loop (burn-train's
/// multi-device and DDP strategies, your own data-parallel code), which scopes do not: see
/// [`with_policy`].
pub fn set_policy(policy: Policy) {
    store_process(Some(policy));
}

/// Forgets the policy set with [`set_policy`]: graphs recorded from now on follow their Burn
/// strategy's default again ([`Policy::SaveAll`] under `NoCheckpointing`,
/// [`Policy::Balanced`] under `BalancedCheckpointing`).
pub fn reset_policy() {
    store_process(None);
}

/// The policy set with [`set_policy`], if any.
fn process_policy() -> Option<Policy> {
    PROCESS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

/// What the next op recorded on this thread follows, under each of Burn's two strategies,
/// and why. Returned by [`policy`].
///
/// The two policies differ only when nothing was chosen ([`PolicySource::StrategyDefault`]):
/// every control applies under both strategies.
#[derive(Clone, Debug)]
pub struct ActivePolicy {
    /// For graphs on `device.autodiff()` (Burn's `NoCheckpointing`).
    pub no_checkpointing: Policy,
    /// For graphs on `device.autodiff().gradient_checkpointing()` (Burn's
    /// `BalancedCheckpointing`).
    pub balanced_checkpointing: Policy,
    /// Which control decides.
    pub source: PolicySource,
}

impl ActivePolicy {
    /// The policy for graphs whose tensors carry strategy `C`.
    pub fn under<C: CheckpointStrategy>(&self) -> &Policy {
        if C::BALANCED {
            &self.balanced_checkpointing
        } else {
            &self.no_checkpointing
        }
    }
}

impl fmt::Display for ActivePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |policy: &Policy| match policy {
            Policy::SaveAll => "SaveAll",
            Policy::Balanced => "Balanced",
            Policy::Selective(_) => "Selective",
            Policy::RecomputeAll => "RecomputeAll",
            Policy::Budget(_) => "Budget",
        };
        let why = match self.source {
            PolicySource::Region => "a checkpoint region is open on this thread",
            PolicySource::Scope => "a with_policy scope on this thread",
            PolicySource::Process => "set_policy, process-wide",
            PolicySource::StrategyDefault => "nothing set: the strategy's default",
        };
        write!(
            f,
            "{} under autodiff(), {} under autodiff().gradient_checkpointing() ({why})",
            name(&self.no_checkpointing),
            name(&self.balanced_checkpointing)
        )
    }
}

/// Which control decides what an op recorded now keeps (see [`ActivePolicy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// A [`checkpoint`](crate::checkpoint()) region is open on this thread: every op that
    /// can be replayed is rebuilt, as under [`Policy::RecomputeAll`] (and values read after
    /// the region closes are kept by their readers).
    Region,
    /// A [`with_policy`] scope on this thread.
    Scope,
    /// [`set_policy`], process-wide.
    Process,
    /// Nothing set: Burn's strategy picks ([`Policy::SaveAll`] under `NoCheckpointing`,
    /// [`Policy::Balanced`] under `BalancedCheckpointing`).
    StrategyDefault,
}

/// What the next op recorded on this thread will follow, under each of Burn's strategies,
/// taking this thread's regions and scopes and the process-wide [`set_policy`] into account.
///
/// ```
/// use remat::{Policy, PolicySource};
/// remat::reset_policy();
/// let now = remat::policy();
/// assert!(matches!(now.no_checkpointing, Policy::SaveAll));
/// assert!(matches!(now.balanced_checkpointing, Policy::Balanced));
/// assert_eq!(now.source, PolicySource::StrategyDefault);
/// remat::with_policy(Policy::RecomputeAll, || {
///     assert_eq!(remat::policy().source, PolicySource::Scope);
/// });
/// ```
pub fn policy() -> ActivePolicy {
    let (region, scoped) = CONTEXT.with(|cx| {
        let cx = cx.borrow();
        (!cx.regions.is_empty(), cx.scoped.last().cloned())
    });
    let both = |policy: Policy, source| ActivePolicy {
        no_checkpointing: policy.clone(),
        balanced_checkpointing: policy,
        source,
    };
    if region {
        return both(Policy::RecomputeAll, PolicySource::Region);
    }
    if let Some(scoped) = scoped {
        return both(scoped, PolicySource::Scope);
    }
    match process_policy() {
        Some(policy) => both(policy, PolicySource::Process),
        None => ActivePolicy {
            no_checkpointing: Policy::SaveAll,
            balanced_checkpointing: Policy::Balanced,
            source: PolicySource::StrategyDefault,
        },
    }
}

/// Runs `f` with `policy` for every op recorded on this thread inside it, whatever the
/// checkpointing strategy of the tensors.
///
/// Scopes nest: the innermost wins; a [`checkpoint`](crate::checkpoint()) region inside
/// wins over them. Outside any autodiff computation this is a no-op that just runs `f`. If
/// `f` panics, the scope is closed as the panic unwinds.
///
/// A scope is per thread: it does not reach ops recorded on other threads, such as the
/// worker threads on which burn-train's multi-device and DDP strategies (or your own
/// data-parallel code) run the model's forward and backward. Use
/// [`set_policy`] (process-wide) there, or [`checkpoint`](crate::checkpoint()) regions
/// inside the model's `forward` (they run on whatever thread runs the forward).
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
///
/// NOTE [regions]: a node recorded in a region carries the "open" flag of the outermost region
/// open then ([`Placement::region`]); the region clears it when it closes, also when `f`
/// unwinds. Until then a consumer may rely on a replay of the node's value; after, a consumer
/// stores it. So nested regions nest: an inner region's output read inside the outer region
/// stays rebuildable, and is rebuilt with the outer region's values.
pub(crate) fn in_region<R>(f: impl FnOnce() -> R) -> R {
    CONTEXT.with(|cx| {
        cx.borrow_mut()
            .regions
            .push(Arc::new(AtomicBool::new(true)))
    });
    let _guard = PopOnDrop(|cx: &mut Context| {
        if let Some(open) = cx.regions.pop() {
            open.store(false, Ordering::Release);
        }
    });
    f()
}

/// The policy's answer for an op being recorded: whether its output may be rebuilt, with
/// its region and budget, and whether the answer came from [`Policy::Balanced`] (which also
/// weighs bytes: NOTE [thrifty-balanced] in `decide.rs`, the one caller).
///
/// `balanced` is true for graphs recorded under Burn's `BalancedCheckpointing`; it only
/// picks the default when no policy was chosen (NOTE [process-policy]). A [`Selector`] is
/// asked after the thread's context and the process-wide policy are released: the user's
/// rule may itself call [`set_policy`], [`with_policy`] or record ops.
pub(crate) fn place(
    op: &OpInfo,
    replayable: bool,
    balanced: bool,
    output_bytes: &mut dyn FnMut() -> u64,
) -> (Placement, bool) {
    // One borrow of the thread's context: the region, the scoped answer and the scoped
    // budget.
    let (region, answer, scoped_budget) = CONTEXT.with(|cx| {
        let cx = cx.borrow();
        // NOTE [regions]: the outermost open region: a value stays rebuildable until every
        // region it was recorded in has closed, so nested regions nest (an inner region's
        // output read inside the outer one is rebuilt with it, not kept).
        let region = cx.regions.first().cloned();
        let answer = if !replayable {
            Some(Answer::KEEP)
        } else if region.is_some() {
            // NOTE [regions]: inside a region every replayable value is rebuilt.
            Some(Answer::RECOMPUTE)
        } else {
            cx.scoped.last().map(|scoped| scoped.answer(op))
        };
        (region, answer, cx.scoped.last().map(Policy::budget_bytes))
    });
    let answer = answer.or_else(|| process_answer(op)).unwrap_or_else(|| {
        if balanced {
            Policy::Balanced.answer(op)
        } else {
            Answer::KEEP
        }
    });
    // NOTE [budget]: every op recorded while a budget is the thread's policy (innermost
    // scope, else process-wide) is planned by it, replayable or not; inside a region the
    // region only forces the op to be rebuilt (a hint to the budget, not a second policy).
    let budget = scoped_budget
        .unwrap_or_else(process_budget)
        .map_or(0, super::budget::intern);
    let (recompute, thrifty) = answer.resolve(op, output_bytes);
    let placement = Placement {
        recompute: recompute && replayable,
        leaf_view: false,
        region,
        budget,
        planned: budget != 0,
    };
    (placement, thrifty)
}

/// A policy's answer for one op, or the user rule that will give it once no borrow or lock
/// is held (see [`place`]).
enum Answer {
    Given { recompute: bool, thrifty: bool },
    Ask(Selector),
}

impl Answer {
    const KEEP: Answer = Answer::Given {
        recompute: false,
        thrifty: false,
    };
    const RECOMPUTE: Answer = Answer::Given {
        recompute: true,
        thrifty: false,
    };

    /// Whether the output is recomputed, and whether that came from [`Policy::Balanced`]
    /// (which also weighs bytes: NOTE [thrifty-balanced] in `decide.rs`).
    /// `output_bytes` is asked only by a [`Selector::sized`] rule.
    fn resolve(self, op: &OpInfo, output_bytes: &mut dyn FnMut() -> u64) -> (bool, bool) {
        match self {
            Answer::Given { recompute, thrifty } => (recompute, thrifty),
            Answer::Ask(selector) => (
                selector.decide(op, output_bytes) == Decision::Recompute,
                false,
            ),
        }
    }
}

impl Policy {
    /// The bytes of a [`Policy::Budget`].
    fn budget_bytes(&self) -> Option<u64> {
        match self {
            Policy::Budget(bytes) => Some(*bytes),
            _ => None,
        }
    }
}

/// The bytes of the process-wide policy, if it is a [`Policy::Budget`].
fn process_budget() -> Option<u64> {
    if KIND.load(Ordering::Acquire) != KIND_BUDGET {
        return None;
    }
    process_policy().and_then(|policy| policy.budget_bytes())
}
