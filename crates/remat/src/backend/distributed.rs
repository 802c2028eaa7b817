//! Distributed data-parallel hooks.
//!
//! Parameters marked with `set_distributed_params` are leaves that carry their
//! [`DistributedParams`]. In backward, a leaf's gradient is complete when the leaf's turn
//! comes (every consumer has stepped before it); it is then submitted to the inner backend's
//! gradient synchronisation, and the pass ends with a sync collective, as in Burn.

use burn_backend::distributed::{
    CollectiveTensor, DistributedOps, DistributedParamId, DistributedParams, ReduceOperation,
    TensorRef,
};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DeviceId};
use smallvec::smallvec;

use crate::backend::Autodiff;
use crate::checkpoint::policy::{Cost, OpInfo};
use crate::checkpoint::strategy::CheckpointStrategy;
use crate::grads::Gradients;
use crate::graph::{Node, NodeId, NodeKind};
use crate::ops::rule::{Reads, Rule, Tracked, Values, Vjp, record};
use crate::ops::unary::take1;
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
        let rule = AllReduce { op, device_ids };
        CollectiveTensor::new(record(rule, smallvec![tensor], C::BALANCED))
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

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        B::all_reduce(x, self.op, self.device_ids.clone()).resolve()
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        Reads::NOTHING
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, grad: FloatTensor<B>) {
        let grad = B::all_reduce(grad, self.op, self.device_ids.clone()).resolve();
        cx.set(0, grad);
    }

    fn replayable(&self) -> bool {
        false
    }
}

/// Marks a parameter (a leaf that requires a gradient) as distributed.
///
/// An untracked tensor is returned unchanged (it has no gradient to synchronise).
///
/// # Panics
/// If the tensor is the output of a recorded op: only parameters can be distributed.
pub(crate) fn set_params<B: Backend>(
    tensor: AutodiffTensor<B>,
    param_id: DistributedParamId,
) -> AutodiffTensor<B> {
    let node = match &tensor.node {
        // A tensor that requires no gradient has nothing to synchronise; marking it must
        // not make it require one.
        None => return tensor,
        Some(node) if node.kind == NodeKind::Leaf => {
            Node::leaf_with(node.id, Some(DistributedParams { param_id }))
        }
        Some(node) => panic!(
            "remat: set_distributed_params on the output of op `{}`; only parameters (leaf \
             tensors) can be distributed",
            node.name
        ),
    };
    AutodiffTensor::tracked(tensor.primitive, node)
}

/// The distributed parameters of a tensor, if it is a distributed parameter.
pub(crate) fn params<B: Backend>(tensor: &AutodiffTensor<B>) -> Option<DistributedParams> {
    tensor.node.as_ref()?.distributed.as_deref().cloned()
}

/// Submits the complete gradient of a distributed leaf for synchronisation.
pub(crate) fn submit_leaf_gradient<B: Backend>(
    id: NodeId,
    params: &DistributedParams,
    grads: &mut Gradients,
) {
    if let Some(grad) = grads.get_mut::<B>(id) {
        B::submit_gradient_sync(TensorRef(grad as *mut FloatTensor<B>), params.clone());
    }
}
