//! Distributed data-parallel hooks.
//!
//! NOTE [distributed-backward]: what the inner backend's gradient synchronisation sees is
//! what Burn's autodiff sends it (burn-train's data-parallel strategy drives it through
//! `DistributedContext`):
//! - Parameters marked with `set_distributed_params` are leaves that carry their
//!   [`DistributedParams`] in their node's state. Marking sets it in place, in the node that
//!   every graph recorded with the leaf already holds: a leaf read by an op and marked
//!   afterwards is synchronised too (Burn looks its steps up by id when backward runs).
//! - A backward pass whose graph holds distributed leaves first registers them all, once,
//!   with `register_sync_parameters` on the loss's device, before any gradient exists.
//! - A leaf's gradient is complete when the leaf's turn comes (every consumer has stepped
//!   before it): it is then submitted with `submit_gradient_sync` (the inner backend reduces
//!   it in place, asynchronously).
//! - Every backward pass ends with `submit_sync_collective` on the loss's device, whether or
//!   not its graph holds distributed leaves, and even when the loss is untracked: every
//!   device takes part in the collective barrier once per pass.
//! - Distributed leaves must live on the loss's inner backend (the synchronisation server is
//!   per backend), as Burn requires; otherwise backward panics before it starts.
//!
//! NOTE [lazy-collectives]: `all_reduce` returns the inner backend's result unsynchronised
//! (its `CollectiveTensor`), and the caller's `resolve()` synchronises it, as Burn's
//! contract says. In backward, the all-reduce of a gradient is registered unsynchronised and
//! synchronised when it is first read (by the next step that reads that gradient, or when
//! the pass ends at the latest: see `Gradients::register_unsynced`), so the reduction can
//! overlap the steps in between.

use burn_backend::distributed::{
    CollectiveTensor, DistributedOps, DistributedParams, ReduceOperation, TensorRef,
};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DeviceId};

use crate::backend::Autodiff;
use crate::checkpoint::strategy::CheckpointStrategy;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::ops::record::record_unread;
use crate::tensor::AutodiffTensor;

impl<B: Backend, C: CheckpointStrategy> DistributedOps<Self> for Autodiff<B, C> {
    fn start_communication_server(
        devices: &[B::Device],
        config: burn_backend::distributed::DistributedConfig,
    ) {
        B::start_communication_server(devices, config);
    }

    fn close_communication_server(device: &B::Device) {
        B::close_communication_server(device);
    }

    fn register_sync_parameters(device: &B::Device, params: Vec<DistributedParams>) {
        B::register_sync_parameters(device, params);
    }

    fn submit_sync_collective(device: &B::Device) {
        B::submit_sync_collective(device);
    }

    fn submit_gradient_sync(tensor: TensorRef<Self>, params: DistributedParams) {
        // SAFETY: `TensorRef` points at a live float tensor of this backend (the contract of
        // `submit_gradient_sync`); we only project to its inner primitive, in place, so the
        // synchronisation writes the very tensor the caller handed over.
        let inner: *mut FloatTensor<B> = unsafe { &raw mut (*tensor.0).primitive };
        B::submit_gradient_sync(TensorRef(inner), params);
    }

    fn all_reduce(
        tensor: FloatTensor<Self>,
        op: ReduceOperation,
        device_ids: Vec<DeviceId>,
    ) -> CollectiveTensor<Self> {
        let AutodiffTensor {
            primitive, node, ..
        } = tensor;
        // The input's value goes to the inner backend by move (nothing reads it again), so
        // a backend that reduces a uniquely held tensor in place still can.
        let collective = B::all_reduce(primitive, op, device_ids.clone());
        // SAFETY (of the contract, not of memory): the handle is only wrapped again in the
        // `CollectiveTensor` returned to the caller, whose `resolve()` synchronises it
        // through `sync_collective` (NOTE [lazy-collectives]); recording reads none of it.
        let reduced = unsafe { collective.assume_resolved() };
        let output = match node {
            None => AutodiffTensor::new(reduced),
            Some(parent) => {
                record_unread(AllReduce { op, device_ids }, parent, C::BALANCED, reduced)
            }
        };
        CollectiveTensor::new(output)
    }

    fn sync_collective(device: &B::Device) {
        B::sync_collective(device);
    }
}

/// An all-reduce across devices: its gradient is the same all-reduce of the output gradient.
/// Never replayed (every device would have to take part again).
#[derive(Debug)]
struct AllReduce {
    op: ReduceOperation,
    device_ids: Vec<DeviceId>,
}

impl<B: Backend> Rule<B> for AllReduce {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: "all_reduce",
            cost: Cost::Compute,
        }
    }

    fn forward(&self, _inputs: Values<B>) -> FloatTensor<B> {
        panic!("remat internal error: an all-reduce is never replayed")
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        Reads::NOTHING
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, grad: FloatTensor<B>) {
        let reduced = B::all_reduce(grad, self.op, self.device_ids.clone());
        // SAFETY (of the contract): registered unsynchronised; the gradients container
        // synchronises it before anything reads it (NOTE [lazy-collectives]).
        cx.set_unsynced(0, unsafe { reduced.assume_resolved() });
    }

    fn replayable(&self) -> bool {
        false
    }
}
