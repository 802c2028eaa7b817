//! Nodes, their inputs and the slot that holds a node's saved value.
//!
//! NOTE [graph-lifetime]: a tensor holds its node; a node holds its op, and the op holds its
//! inputs' nodes. Nothing else points at nodes (no global graph), so dropping the last tensor
//! of a graph frees it at once, without a backward pass. [`Node`]'s `Drop` unlinks inputs
//! with an explicit stack so that long chains do not recurse.
//!
//! NOTE [what-is-kept]: a value a backward step will read lives in one of two places.
//! - The output of a recorded op lives in its producer's [`Slot`]: `Stored` (kept),
//!   `Evicted` (dropped, rebuilt by replay when read) or `Unneeded`. One slot serves every
//!   reader, and a rebuilt value is rebuilt once per backward pass.
//! - Leaves and untracked inputs are held on the consumer's edge ([`Input::held`]): they
//!   cannot be rebuilt, and a leaf may be read by several graphs, each consumed by its own
//!   backward pass.
//!
//! # Invariants
//! - INVARIANT [rebuildable]: a slot is `Evicted` only if its node's op is replayable and was
//!   placed to recompute; such an op holds every input it needs for a replay (its inputs are
//!   `Stored`, rebuildable, or held on the edge). Under a budget (NOTE \[budget\]) a value
//!   that cannot be rebuilt may wait `Evicted` for the planner's `Keep`: the planner never
//!   replays it, and keeps it while anything may read it.
//! - `n_required` is zero outside a backward pass; during one it counts the reads still to
//!   come, and the last read takes the value out of the slot.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use burn_backend::distributed::DistributedParams;
use burn_backend::{Backend, BackendTypes, tensor::FloatTensor};
use smallvec::SmallVec;

use super::grads::Gradients;
use super::id::{IdBuildHasher, NodeId};
use super::name::OpName;
use super::op::{Cost, OpInfo, Placement, Reads, Tracked, Values};
use crate::counters::{self, KeepReason};

/// Whether a node is a leaf or the output of a recorded op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// A tensor that requires a gradient and was not produced by a recorded op.
    Leaf,
    /// The output of a recorded op.
    Op,
}

/// One tracked tensor of the graph.
pub(crate) struct Node<B: BackendTypes> {
    pub(crate) id: NodeId,
    /// The op's name, [`OpName::LEAF`] for leaves (which is how a node knows it is one):
    /// for statistics and messages (NOTE [op-names] in `graph/name.rs`).
    pub(crate) op_name: OpName,
    pub(crate) placement: Placement,
    pub(crate) state: Mutex<State<B>>,
}

/// The mutable part of a node.
pub(crate) struct State<B: BackendTypes> {
    /// The recorded op; `None` for leaves and once the node's step has run.
    pub(crate) op: Option<OpState<B>>,
    /// True once a backward pass has claimed the node; it is never handed back after the
    /// pass starts (NOTE [no-retain-graph] in `graph/backward.rs`).
    pub(crate) consumed: bool,
    pub(crate) slot: Slot<B>,
    /// Reads still to come in the running backward pass. A `u32` keeps [`Node`] small
    /// (`a_node_is_small`); reaching 2^32 would take as many edges into one node, hundreds
    /// of GiB of graph.
    pub(crate) n_required: u32,
    /// Set on leaves that are parameters of a distributed model: their gradient is
    /// submitted for synchronisation once complete. Marking a leaf sets it here, in the node
    /// that every graph already recorded with the leaf holds (NOTE [distributed-backward]
    /// in `backend/distributed.rs`); the parameters themselves are in [`DISTRIBUTED`], so
    /// that no node carries a word for what only a model's parameters have.
    pub(crate) distributed: bool,
    /// Set for the nodes of a backward pass that carries out a budget's schedule (NOTE
    /// [budget] in `checkpoint/budget/`): reads hand out clones and never free, and
    /// `n_required` counts only the reads before a hand-over (NOTE [hand-over]); the
    /// schedule frees.
    pub(crate) scheduled: bool,
}

/// What a recorded op keeps until its backward step runs.
pub(crate) struct OpState<B: BackendTypes> {
    pub(crate) rule: Box<dyn Rule<B>>,
    pub(crate) inputs: SmallVec<[Input<B>; 2]>,
    /// What the backward step reads, decided when the op was recorded.
    pub(crate) reads: Reads,
}

impl<B: BackendTypes> OpState<B> {
    /// The inputs a replay of the op reads ([`Rule::replay_input`]), in order.
    pub(crate) fn replay_inputs(&self) -> impl Iterator<Item = &Input<B>> {
        self.inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| self.rule.replay_input(*i))
            .map(|(_, input)| input)
    }
}

/// One float input of a recorded op.
pub(crate) struct Input<B: BackendTypes> {
    /// The input's node when it is tracked.
    pub(crate) node: Option<Arc<Node<B>>>,
    /// The input's value, held on the edge when it is a leaf or untracked and a backward step
    /// or a replay reads it (NOTE [what-is-kept]).
    pub(crate) held: Option<Kept<B>>,
}

/// The constants (untracked inputs) held on `edges`, each record once (an op may read one
/// constant twice).
fn constants<B: BackendTypes>(edges: &[Input<B>]) -> impl Iterator<Item = &Kept<B>> {
    fn held<B: BackendTypes>(input: &Input<B>) -> Option<&Kept<B>> {
        input.held.as_ref().filter(|_| input.node.is_none())
    }
    edges.iter().enumerate().filter_map(move |(i, input)| {
        let kept = held(input)?;
        (!edges[..i]
            .iter()
            .filter_map(held)
            .any(|earlier| earlier.same(kept)))
        .then_some(kept)
    })
}

/// Bytes of the constants (untracked inputs) held on `edges` that the budget's model charges
/// to their op, `holder` (NOTE [shared-constants]).
pub(crate) fn charged_constants<B: BackendTypes>(edges: &[Input<B>], holder: NodeId) -> u64 {
    constants(edges)
        .map(|kept| kept.charged_bytes(holder))
        .sum()
}

/// The constants on `edges`, held by the op `holder`, whose buffer other ops may share (NOTE
/// [shared-constants]): each as (its record's address, its bytes, whether `holder` carries
/// the charge).
pub(crate) fn shared_constants<B: BackendTypes>(
    edges: &[Input<B>],
    holder: NodeId,
) -> SmallVec<[(usize, u64, bool); 1]> {
    constants(edges)
        .filter_map(|kept| {
            let shared = kept.0.ticket.shared()?;
            Some((
                Arc::as_ptr(&kept.0) as usize,
                kept.bytes(),
                shared.owned_by(holder),
            ))
        })
        .collect()
}

impl<B: BackendTypes> Input<B> {
    /// The tracked non-leaf producer whose slot holds this input's value, if any.
    pub(crate) fn producer(&self) -> Option<&Arc<Node<B>>> {
        self.node.as_ref().filter(|n| n.kind() == NodeKind::Op)
    }
}

/// A constant every element of which is one value (NOTE [fill-constants] in `tensor.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    Zeros,
    Ones,
    /// `empty`: its elements are unspecified, and a replay reads another `empty` tensor,
    /// whose elements are as unspecified (on Flex both are zeros). An op that writes into
    /// it (`slice_assign`) and whose unwritten elements nothing reads gives the same bits.
    Empty,
}

/// A value kept for backward; it is counted in [`stats`] (and listed by
/// `saved_values()`) while it lives.
///
/// One pointer: most nodes and edges keep nothing, and an empty `Option<Kept>` is one word.
/// Behind an `Arc` so that the edges holding one leaf or constant share one record (NOTE
/// [shared-constants]); a node's own value is the `Arc`'s only holder.
pub(crate) struct Kept<B: BackendTypes>(Arc<KeptValue<B>>);

struct KeptValue<B: BackendTypes> {
    /// `None` once taken, and for a fill (which holds no buffer).
    value: Option<FloatTensor<B>>,
    ticket: Held<B>,
}

/// How a kept value is counted: on its own, or once for all the edges that share it (NOTE
/// [shared-constants]); or not at all, for a fill constant kept as its recipe (NOTE
/// [fill-constants] in `tensor.rs`).
enum Held<B: BackendTypes> {
    Own(#[allow(dead_code)] counters::Ticket),
    /// A shared record or a fill, boxed (one box per shared buffer, not per edge): two
    /// variants fit the ticket's two words, where three took a third for their tag, in the
    /// record of every kept value (a 120-byte `FloatTensor<Flex>` beside it).
    Other(Box<OtherHeld<B>>),
}

/// The kept values that are not counted on their own.
enum OtherHeld<B: BackendTypes> {
    /// Counted once for all the edges that share it.
    Shared(SharedHeld),
    /// Not counted: a fill kept as its recipe.
    Fill(FillRecipe<B>),
}

impl<B: BackendTypes> Held<B> {
    /// The shared record, if the value is one.
    fn shared(&self) -> Option<&SharedHeld> {
        match self {
            Held::Other(other) => match &**other {
                OtherHeld::Shared(shared) => Some(shared),
                OtherHeld::Fill(_) => None,
            },
            Held::Own(_) => None,
        }
    }

    /// The fill's recipe, if the value is one.
    fn fill(&self) -> Option<&FillRecipe<B>> {
        match self {
            Held::Other(other) => match &**other {
                OtherHeld::Fill(recipe) => Some(recipe),
                OtherHeld::Shared(_) => None,
            },
            Held::Own(_) => None,
        }
    }
}

/// How a record that edges share is counted (NOTE [shared-constants]).
struct SharedHeld {
    _ticket: counters::Ticket,
    /// The id of the op that carries the buffer's charge in the budget's model: the first to
    /// hold it, which claims it once its node has an id ([`Kept::claim`]); 0 until then.
    owner: std::sync::atomic::AtomicU64,
    /// Takes the record out of this thread's table when it goes.
    _entry: SharedEntry,
}

impl SharedHeld {
    fn owned_by(&self, holder: NodeId) -> bool {
        self.owner.load(std::sync::atomic::Ordering::Relaxed) == holder.value
    }
}

/// What makes a fill constant again, bit for bit (NOTE [fill-constants]).
struct FillRecipe<B: BackendTypes> {
    fill: Fill,
    shape: burn_std::Shape,
    dtype: burn_std::DType,
    device: B::Device,
}

// NOTE [shared-constants]: an untracked tensor read by many recorded ops (a frozen weight, a
// mask, a rotary table, the matrix of a recurrence) is one buffer, and so is a leaf (a
// parameter read at every step of a recurrence), however many edges hold it. The edges that
// hold one tensor on a thread share one record, keyed by the tensor's id (a clone carries
// its original's id, a leaf's is its node's): one handle, one ticket, so `stats` counts it
// once while any edge holds it. The first op to hold it *owns* the charge, and the budget's
// model charges its bytes to that op alone (`Kept::charged_bytes`). Before, each reader was
// charged (a recurrence of 100 steps reading an 80 KB constant was charged 16 MB for 80 KB);
// and until each edge shared the record, each held its own boxed handle (144 bytes on Flex):
// on Burn's `Lstm` of 128 steps under a budget, 2,565 of them, 0.37 MB of a step's heap that
// no budget counts (docs/BUDGET.md).

/// A shared record, type-erased for the thread's table (one table serves every backend).
type AnyKept = dyn std::any::Any + Send + Sync;

thread_local! {
    /// This thread's shared records by tensor id (NOTE [shared-constants]); a record takes
    /// its entry out when it goes ([`SharedEntry`]).
    static SHARED: core::cell::RefCell<std::collections::HashMap<u64, std::sync::Weak<AnyKept>>> =
        core::cell::RefCell::new(std::collections::HashMap::new());
}

/// The key of a shared record in its thread's table: dropped with the record, it removes the
/// entry (when the record goes on another thread, that thread has no such entry, and the
/// dead one left behind is replaced by the next record of the key or goes with the thread).
struct SharedEntry(u64);

impl Drop for SharedEntry {
    fn drop(&mut self) {
        let _ = SHARED.try_with(|shared| {
            let mut shared = shared.borrow_mut();
            if shared
                .get(&self.0)
                .is_some_and(|weak| weak.strong_count() == 0)
            {
                shared.remove(&self.0);
            }
        });
    }
}

impl<B: BackendTypes> Kept<B> {
    /// Keeps `value` for `reason`; `op` names the op it belongs to (its producer, or the
    /// consumer that holds it on an edge).
    pub(crate) fn new(value: FloatTensor<B>, reason: KeepReason, op: &'static str) -> Self {
        let ticket = counters::Ticket::keep::<B>(&value, reason, op);
        Self(Arc::new(KeptValue {
            value: Some(value),
            ticket: Held::Own(ticket),
        }))
    }

    /// Keeps the recipe of `like`, a tensor every element of which is `fill`, in place of
    /// its buffer (NOTE [fill-constants]): nothing is counted, and [`Kept::constant`] makes
    /// the value again.
    pub(crate) fn fill(fill: Fill, like: &FloatTensor<B>) -> Self {
        use burn_backend::TensorMetadata;
        Self(Arc::new(KeptValue {
            value: None,
            ticket: Held::Other(Box::new(OtherHeld::Fill(FillRecipe {
                fill,
                shape: like.shape(),
                dtype: like.dtype(),
                device: like.device(),
            }))),
        }))
    }

    /// The bytes the budget's model charges to the op `holder` for this value, which its
    /// edge holds: the value's, unless another op carries them (NOTE [shared-constants]),
    /// or nothing for a fill's recipe (NOTE [fill-constants]).
    pub(crate) fn charged_bytes(&self, holder: NodeId) -> u64 {
        let ticket = &self.0.ticket;
        if ticket.fill().is_some() || ticket.shared().is_some_and(|s| !s.owned_by(holder)) {
            0
        } else {
            self.bytes()
        }
    }

    /// Makes the op `holder` the owner of this record if it has none: called for each edge
    /// of an op as its node is made, the op that made a shared record claims it (NOTE
    /// [shared-constants]; records are per thread, so no other op can hold it yet).
    pub(crate) fn claim(&self, holder: NodeId) {
        if let Some(shared) = self.0.ticket.shared() {
            let _ = shared.owner.compare_exchange(
                0,
                holder.value,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// Whether `other` holds the same record (an op that reads one constant twice).
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    pub(crate) fn get(&self) -> &FloatTensor<B> {
        self.0.value.as_ref().expect(
            "remat internal error: a kept value is present until it is dropped (a fill's \
             recipe is read with `constant`)",
        )
    }

    /// The buffer held, if any: `None` for a fill's recipe (NOTE [fill-constants]).
    pub(crate) fn buffer(&self) -> Option<&FloatTensor<B>> {
        self.0.value.as_ref()
    }

    /// The value's size in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        let (shape, dtype) = match self.0.ticket.fill() {
            Some(recipe) => (recipe.shape.clone(), recipe.dtype),
            None => {
                let value = self.get();
                (
                    burn_backend::TensorMetadata::shape(value),
                    burn_backend::TensorMetadata::dtype(value),
                )
            }
        };
        (shape.num_elements() * dtype.size()) as u64
    }

    pub(crate) fn into_value(self) -> FloatTensor<B> {
        match Arc::try_unwrap(self.0) {
            Ok(mut kept) => kept.value.take(),
            // Another edge holds it too (NOTE [shared-constants]).
            Err(shared) => shared.value.clone(),
        }
        .expect("remat internal error: a kept value is present until it is dropped")
    }
}

impl<B: Backend> Kept<B> {
    /// Keeps `value`, the value of tensor `key`: one record with every other edge that holds
    /// tensor `key` on this thread, counted once; the op that made the record carries its
    /// charge once it claims it ([`Kept::claim`]; NOTE [shared-constants]).
    pub(crate) fn shared(
        value: FloatTensor<B>,
        reason: KeepReason,
        op: &'static str,
        key: u64,
    ) -> Self {
        let found = SHARED
            .try_with(|shared| shared.borrow().get(&key).and_then(std::sync::Weak::upgrade))
            .ok()
            .flatten()
            .and_then(|any| any.downcast::<KeptValue<B>>().ok());
        if let Some(kept) = found {
            return Self(kept);
        }
        let ticket = counters::Ticket::keep::<B>(&value, reason, op);
        let kept = Arc::new(KeptValue {
            value: Some(value),
            ticket: Held::Other(Box::new(OtherHeld::Shared(SharedHeld {
                _ticket: ticket,
                owner: std::sync::atomic::AtomicU64::new(0),
                _entry: SharedEntry(key),
            }))),
        });
        let any: Arc<AnyKept> = kept.clone();
        let _ = SHARED.try_with(|shared| {
            shared.borrow_mut().insert(key, Arc::downgrade(&any));
        });
        Self(kept)
    }

    /// The value of a constant held on an edge, for a read: a clone of the buffer, or the
    /// fill made again from its recipe (NOTE [fill-constants]; the same call as the one
    /// that made it, so the same bits).
    pub(crate) fn constant(&self) -> FloatTensor<B> {
        match self.0.ticket.fill() {
            Some(recipe) => {
                let shape = recipe.shape.clone();
                let dtype = recipe.dtype.into();
                match recipe.fill {
                    Fill::Zeros => B::float_zeros(shape, &recipe.device, dtype),
                    Fill::Ones => B::float_ones(shape, &recipe.device, dtype),
                    Fill::Empty => B::float_empty(shape, &recipe.device, dtype),
                }
            }
            None => self.get().clone(),
        }
    }
}

/// Where a node's output stands for backward (NOTE [what-is-kept]).
pub(crate) enum Slot<B: BackendTypes> {
    /// No backward step reads it (or the last read has happened).
    Unneeded,
    /// Kept: from the forward pass, or rebuilt during backward.
    Stored(Kept<B>),
    /// Needed but dropped: rebuilt by replaying the node's op when first read.
    Evicted(Signature),
}

/// What a rebuilt value must look like: its size in bytes (for the budget's planner), and in
/// debug builds a hash of its shape and dtype, checked after each replay (a replay that
/// differs means a rule's forward is not the forward pass's computation). One word in
/// release builds, two in debug builds: no allocation (a boxed shape was 80 bytes per
/// evicted value, 0.39 MB of the heap of Burn's `Lstm` of 128 steps under a budget).
#[derive(Clone, Debug)]
pub(crate) struct Signature {
    bytes: u64,
    #[cfg(debug_assertions)]
    shape: u64,
}

/// A hash of a value's shape and dtype (debug builds' replay check).
#[cfg(debug_assertions)]
fn shape_hash(shape: &burn_std::Shape, dtype: burn_std::DType) -> u64 {
    use core::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    shape[..].hash(&mut hasher);
    dtype.hash(&mut hasher);
    hasher.finish()
}

impl Signature {
    pub(crate) fn of<B: BackendTypes>(value: &FloatTensor<B>) -> Self {
        let shape = burn_backend::TensorMetadata::shape(value);
        let dtype = burn_backend::TensorMetadata::dtype(value);
        Self {
            bytes: (shape.num_elements() * dtype.size()) as u64,
            #[cfg(debug_assertions)]
            shape: shape_hash(&shape, dtype),
        }
    }

    /// The value's size in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// # Panics
    /// In debug builds, if `value` does not have the recorded shape and dtype.
    pub(crate) fn check<B: BackendTypes>(&self, value: &FloatTensor<B>, op: &str) {
        #[cfg(debug_assertions)]
        {
            let shape = burn_backend::TensorMetadata::shape(value);
            let dtype = burn_backend::TensorMetadata::dtype(value);
            assert!(
                shape_hash(&shape, dtype) == self.shape,
                "remat internal error: replaying op `{op}` gave shape {shape:?} and dtype \
                 {dtype:?} ({} bytes), not the forward pass's ({} bytes): the op's replay is \
                 not its forward",
                shape.num_elements() * dtype.size(),
                self.bytes
            );
        }
        #[cfg(not(debug_assertions))]
        let _ = (value, op);
    }
}

/// The distributed parameters of the leaves marked with them, by node id; an entry leaves
/// with its node.
static DISTRIBUTED: LazyLock<Mutex<HashMap<NodeId, DistributedParams, IdBuildHasher>>> =
    LazyLock::new(Mutex::default);

/// [`DISTRIBUTED`], locked (a poisoned lock is taken over: its entries are whole).
fn distributed_table() -> MutexGuard<'static, HashMap<NodeId, DistributedParams, IdBuildHasher>> {
    DISTRIBUTED.lock().unwrap_or_else(|p| p.into_inner())
}

impl<B: BackendTypes> Node<B> {
    /// The op's name (`"leaf"` for leaves).
    pub(crate) fn name(&self) -> &'static str {
        self.op_name.as_str()
    }

    /// Whether the node is a leaf or an op's output.
    pub(crate) fn kind(&self) -> NodeKind {
        if self.op_name.is_leaf() {
            NodeKind::Leaf
        } else {
            NodeKind::Op
        }
    }
}

impl<B: Backend> Node<B> {
    /// A new leaf: a tensor that requires a gradient.
    pub(crate) fn leaf() -> Arc<Self> {
        Self::leaf_with(NodeId::new(), None)
    }

    /// A leaf with a given id and distributed parameters.
    pub(crate) fn leaf_with(id: NodeId, distributed: Option<DistributedParams>) -> Arc<Self> {
        crate::active::mark();
        let node = Arc::new(Self {
            id,
            op_name: OpName::LEAF,
            placement: Placement::LEAF,
            state: Mutex::new(State {
                op: None,
                consumed: false,
                slot: Slot::Unneeded,
                n_required: 0,
                distributed: false,
                scheduled: false,
            }),
        });
        if let Some(params) = distributed {
            node.set_distributed(params);
        }
        node
    }

    /// A new op node, `id` minted for it ([`NodeId::new`]).
    pub(crate) fn op(
        id: NodeId,
        info: OpInfo,
        placement: Placement,
        op: OpState<B>,
        slot: Slot<B>,
    ) -> Self {
        Self {
            id,
            op_name: OpName::of(info.name),
            placement,
            state: Mutex::new(State {
                op: Some(op),
                consumed: false,
                slot,
                n_required: 0,
                distributed: false,
                scheduled: false,
            }),
        }
    }

    /// Marks this leaf as a parameter of a distributed model (NOTE [distributed-backward]
    /// in `backend/distributed.rs`).
    pub(crate) fn set_distributed(&self, params: DistributedParams) {
        let mut state = self.lock();
        distributed_table().insert(self.id, params);
        state.distributed = true;
    }

    /// The distributed parameters this leaf was marked with, if any.
    pub(crate) fn distributed_params(&self) -> Option<DistributedParams> {
        if !self.lock().distributed {
            return None;
        }
        distributed_table().get(&self.id).cloned()
    }

    /// Locks the node's state. A poisoned lock (a panic in another backward step) is taken
    /// over: the state itself is never left half-updated by a panic in an inner op.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this op node's value may be rebuilt rather than kept: its placement says so,
    /// and the region it was recorded in (if any) is still open (NOTE [regions]) or a planner
    /// decides it (`Placement::planned`, regions included).
    pub(crate) fn rebuildable(&self) -> bool {
        self.placement.recompute && (self.placement.planned || self.placement.region_open())
    }

    /// Whether this op node's value is kept now.
    pub(crate) fn is_stored(&self) -> bool {
        matches!(self.lock().slot, Slot::Stored(_))
    }

    /// Marks this node's output as needed by a consumer being recorded.
    ///
    /// `rebuildable` is the decision layer's answer (`checkpoint::decide`, `Forced::Recompute`
    /// for this input): the consumer may rely on a replay of this node, which stays evicted
    /// (or becomes so); otherwise the value is stored now. Nothing is decided here.
    pub(crate) fn require_value(&self, value: &FloatTensor<B>, rebuildable: bool) {
        let mut state = self.lock();
        match state.slot {
            Slot::Stored(_) => {}
            Slot::Evicted(_) if rebuildable => {}
            Slot::Unneeded if rebuildable => state.slot = Slot::Evicted(Signature::of::<B>(value)),
            Slot::Evicted(_) | Slot::Unneeded => {
                let reason = if self.placement.leaf_view {
                    KeepReason::Leaf
                } else {
                    KeepReason::Saved
                };
                state.slot = Slot::Stored(Kept::new(value.clone(), reason, self.name()));
            }
        }
    }
}

impl<B: BackendTypes> core::fmt::Debug for Node<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("kind", &self.kind())
            .field("op", &self.name())
            .finish()
    }
}

impl<B: BackendTypes> Drop for Node<B> {
    /// Unlinks the inputs iteratively (NOTE [graph-lifetime]).
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.distributed {
            distributed_table().remove(&self.id);
        }
        let Some(op) = state.op.take() else {
            return;
        };
        let mut stack: Vec<Arc<Node<B>>> = Vec::new();
        push_input_nodes(op, &mut stack);
        while let Some(node) = stack.pop() {
            if let Some(mut node) = Arc::into_inner(node) {
                let state = node
                    .state
                    .get_mut()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some(op) = state.op.take() {
                    push_input_nodes(op, &mut stack);
                }
                // `node` drops here with no op left: its own `drop` returns at once.
            }
        }
    }
}

fn push_input_nodes<B: BackendTypes>(op: OpState<B>, stack: &mut Vec<Arc<Node<B>>>) {
    let OpState { rule, inputs, .. } = op;
    drop(rule);
    stack.extend(inputs.into_iter().filter_map(|input| input.node));
}

// NOTE [one-rule]: the forward recorded with a node is the same code that the forward pass
// ran, so every node is replayable by construction and a replay is bit-identical to the
// forward. A rule's `vjp` reads saved values only through [`Vjp`] (its methods are in
// `vjp.rs`), which hands out stored or rebuilt values and checks that the rule reads only
// what it declared.

/// An op, described once (NOTE [one-rule]).
pub(crate) trait Rule<B: BackendTypes>: Send + Sync + 'static {
    /// Name and cost class, for policies and statistics.
    fn info(&self) -> OpInfo;

    /// Computes the output from the inputs. Runs in the forward pass and in every replay.
    fn forward(&self, inputs: Values<B>) -> FloatTensor<B>;

    /// What the backward step reads, given which inputs need a gradient.
    fn reads(&self, tracked: Tracked) -> Reads;

    /// The backward step: from the output's gradient, sets the gradient of each tracked input.
    fn vjp(&self, cx: &mut Vjp<'_, B>, grad: FloatTensor<B>);

    /// Whether replaying `forward` reproduces the output bit for bit. False for random ops
    /// and transfers between backends.
    fn replayable(&self) -> bool {
        self.info().cost != Cost::Random
    }

    /// Whether a replay of `forward` reads input `i`. Every input, but for custom ops:
    /// their first inputs are parents for the gradient only, and a replay reads the inputs
    /// their retro-forward declared.
    fn replay_input(&self, _i: usize) -> bool {
        true
    }

    /// Parents on another inner backend (only transfers have some).
    fn push_foreign_parents(&self, _out: &mut Vec<Arc<dyn GraphNode>>) {}
}

/// The context of one backward step: reads saved values, sets input gradients (its methods
/// are in `vjp.rs`, above retrieval).
pub(crate) struct Vjp<'a, B: BackendTypes> {
    pub(super) node: &'a Node<B>,
    pub(super) inputs: &'a [Input<B>],
    pub(super) reads: &'a Reads,
    pub(super) done: Reads,
    pub(super) grads: &'a mut Gradients,
}

/// What the budget's session asks of a node it recorded (`checkpoint/budget/session.rs`):
/// whether it is held or consumed, its bytes, and dropping its value. [`GraphNode`] builds
/// on it; the session's unit tests give it nodes without tensors.
pub(crate) trait BudgetNode: Send + Sync {
    /// Scheduled `Free` (or, in the forward pass, an eviction): drops the held value, which
    /// stays rebuildable while the op can still be replayed; returns the bytes dropped.
    fn scheduled_free(&self) -> u64;

    /// Whether a backward pass consumed the node (or it is a leaf).
    fn is_consumed(&self) -> bool;

    /// Whether the node's value is held now.
    fn is_held(&self) -> bool;

    /// The op's name.
    fn name(&self) -> &'static str;

    /// The bytes of the value when it waits for a rebuild (dropped, and a step or a replay
    /// still reads it); views of leaves excepted (the user's memory).
    fn evicted_bytes(&self) -> Option<u64>;

    /// The bytes the budget counts for this node now: its value when held (views of leaves
    /// excepted) and the constants on its edges until its step runs.
    fn budget_bytes_now(&self) -> u64;
}

/// The backend-independent view of a node used by the backward pass: a graph may span
/// several inner backends (see `to_backend`).
pub(crate) trait GraphNode: BudgetNode {
    fn id(&self) -> NodeId;

    /// Claims the node for the backward pass being planned and pushes its tracked parents.
    /// False, with nothing claimed or pushed, when another pass (earlier, or running now)
    /// claimed it first. Leaves are never claimed: every graph that reads a leaf has its own
    /// pass (NOTE [no-retain-graph]).
    fn claim_and_push_parents(&self, out: &mut Vec<Arc<dyn GraphNode>>) -> bool;

    /// Hands back a claim of a pass that did not start.
    fn unclaim(&self);

    /// First planning pass: counts the reads this node's backward step will make.
    fn plan_reads(&self);

    /// Second planning pass, consumers before producers: counts the reads that rebuilding
    /// this node will make, and drops values that nothing will read.
    fn plan_rebuild(&self);

    /// Runs the node's backward step and consumes it.
    fn step(&self, grads: &mut Gradients);

    /// Clears whatever the step left; returns whether the node was already drained.
    fn finish(&self) -> bool;

    /// A short description for messages.
    fn describe(&self) -> String;

    /// The distributed parameters of a leaf, if any.
    fn distributed(&self) -> Option<DistributedParams>;

    /// Whether the node is a leaf (a tensor that requires a gradient).
    fn is_leaf(&self) -> bool;

    /// The inner backend of the node (a graph may span several).
    fn backend(&self) -> core::any::TypeId;

    /// The budget id the node was recorded under (0: none; NOTE \[budget\]).
    fn budget(&self) -> u32;

    /// What the budget's planner needs to know about this op node, as it stands now; `None`
    /// for leaves. Also marks the node as run by a schedule (reads clone, the schedule
    /// frees).
    fn schedule_entry(&self) -> Option<ScheduleEntry>;

    /// The few facts of [`GraphNode::schedule_entry`] a pass keeps of every node (NOTE
    /// \[pass-facts\] in `checkpoint/budget/pass.rs`), without the reads and constants that
    /// only a view built from descriptions needs; `None` for leaves. Also marks the node as
    /// run by a schedule.
    fn schedule_facts(&self) -> Option<ScheduleFacts>;

    /// Scheduled `Replay`: rebuilds the value from held inputs, runs `before_store` once the
    /// op has run (the schedule frees there the inputs it read last), stores the value;
    /// returns its bytes and the time the op's forward took (`None` when nothing was
    /// replayed), timed between two syncs of the device when `synced`.
    fn scheduled_replay(&self, before_store: &mut dyn FnMut(), synced: bool) -> (u64, Option<f64>);

    /// Scheduled `Step`: runs the backward step, every read held by the schedule; returns
    /// the bytes of constants its edges released.
    fn scheduled_step(&self, grads: &mut Gradients) -> u64;

    /// How many reads this node's step makes of `producer`'s value (its own id: the output).
    fn step_reads_of(&self, producer: NodeId) -> u32;

    /// How many reads a replay of this node's op makes of `producer`'s value.
    fn replay_reads_of(&self, producer: NodeId) -> u32;

    /// NOTE [hand-over]: the schedule frees this held value right after a step (or a replay)
    /// that reads it `reads` times: the last of those reads takes the value instead of a
    /// clone, so the step owns it (an inner kernel may then work in place) and it leaves at
    /// its last use.
    /// Returns the bytes the value counts for; the `Free` that follows finds it gone.
    fn scheduled_hand_over(&self, reads: u32) -> u64;
}

/// One op node as the budget's planner sees it (see `GraphNode::schedule_entry`): its facts
/// (through `Deref`), and what only a view built from descriptions needs.
pub(crate) struct ScheduleEntry {
    pub(crate) facts: ScheduleFacts,
    pub(crate) name: &'static str,
    pub(crate) cost: Cost,
    /// Producers whose values a replay reads.
    pub(crate) inputs: SmallVec<[NodeId; 2]>,
    /// Producers whose values the backward step reads (and `reads_output`).
    pub(crate) step_reads: SmallVec<[NodeId; 2]>,
    pub(crate) reads_output: bool,
    /// The constants among `fixed_bytes` that other nodes hold too (see
    /// [`shared_constants`]).
    pub(crate) shared: SmallVec<[(usize, u64, bool); 1]>,
}

impl core::ops::Deref for ScheduleEntry {
    type Target = ScheduleFacts;

    fn deref(&self) -> &ScheduleFacts {
        &self.facts
    }
}

/// What a pass keeps of every node it claimed ([`GraphNode::schedule_facts`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScheduleFacts {
    pub(crate) id: NodeId,
    /// Bytes of the output (0 for a view of leaves: the user's memory).
    pub(crate) bytes: u64,
    /// Bytes of constants held on the node's edges (leaves excluded) that the budget's model
    /// charges to it.
    pub(crate) fixed_bytes: u64,
    /// Whether the value is held now.
    pub(crate) held: bool,
    /// Whether the engine can rebuild the value (inputs retained for a replay).
    pub(crate) replayable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-op bookkeeping stays small: a node and an edge (the boxed rule: `ops/unary.rs`).
    #[test]
    fn a_node_is_small() {
        type F = burn_flex::Flex;
        let node = core::mem::size_of::<Node<F>>();
        let input = core::mem::size_of::<Input<F>>();
        assert!(input <= 16, "Input is {input} bytes");
        // Debug builds' `Signature` adds a word to the slot (its shape's hash).
        let bound = if cfg!(debug_assertions) { 144 } else { 136 };
        assert!(node <= bound, "Node is {node} bytes");
        // A kept value's record: the tensor and its ticket (docs/SCALE.md).
        let kept = core::mem::size_of::<KeptValue<F>>();
        assert!(kept <= 136, "KeptValue is {kept} bytes");
    }

    /// A leaf's distributed parameters are kept beside it, found through it, and leave with
    /// it; a leaf that has none finds none.
    #[test]
    fn distributed_parameters_leave_with_their_leaf() {
        type F = burn_flex::Flex;
        let params = DistributedParams {
            param_id: burn_backend::distributed::DistributedParamId::from(41),
        };
        let marked = Node::<F>::leaf_with(NodeId::new(), Some(params.clone()));
        let plain = Node::<F>::leaf();
        let later = Node::<F>::leaf();
        later.set_distributed(params.clone());
        let id_of = |node: &Node<F>| node.distributed_params().map(|p| p.param_id);
        assert_eq!(id_of(&marked), Some(params.param_id));
        assert_eq!(id_of(&later), Some(params.param_id));
        assert_eq!(id_of(&plain), None);
        assert!(marked.kind() == NodeKind::Leaf && marked.name() == "leaf");
        let ids = [marked.id, later.id];
        drop((marked, later));
        let table = distributed_table();
        assert!(ids.iter().all(|id| !table.contains_key(id)));
    }

    /// A replay whose result differs in shape from the forward pass is caught (debug).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "the op's replay is not its forward")]
    fn a_replay_with_another_shape_is_caught() {
        use burn_backend::{TensorData, ops::FloatTensorOps};
        type F = burn_flex::Flex;
        let device = Default::default();
        let a = F::float_from_data(TensorData::from([1.0f32, 2.0]), &device);
        let b = F::float_from_data(TensorData::from([1.0f32, 2.0, 3.0]), &device);
        Signature::of::<F>(&a).check::<F>(&b, "exp");
    }
}
