//! Differentiable transfer between inner backends: a graph may span several backends.
//!
//! The transfer node lives on the destination backend; its parent lives on the source
//! backend and is reached through the backend-independent [`GraphNode`] view. A transfer is
//! never replayed (its output is kept when something needs it): rebuilding would cross
//! backends again.

use core::marker::PhantomData;
use std::sync::{Arc, Mutex};

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};

use super::record::record_transfer;
use crate::graph::{Cost, OpInfo};
use crate::graph::{GraphNode, Node};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// Moves a float tensor from inner backend `Src` to `Dst` and its gradient back.
///
/// Burn's dispatch implements it for the host-mediated transfer between its backends.
pub trait DifferentiableTransfer<Src: Backend, Dst: Backend>:
    Send + core::fmt::Debug + 'static
{
    /// Moves a tensor to `device` on the destination backend.
    fn forward(tensor: FloatTensor<Src>, device: &Dst::Device) -> FloatTensor<Dst>;

    /// Moves a gradient back to `device` on the source backend.
    fn backward(tensor: FloatTensor<Dst>, device: &Src::Device) -> FloatTensor<Src>;
}

/// The transfer rule: holds the source-backend parent.
struct Transfer<Src: Backend, Adapter> {
    /// The parent on the source backend. Taken when the step runs.
    parent: Mutex<Option<Arc<Node<Src>>>>,
    source_device: Src::Device,
    _adapter: PhantomData<fn() -> Adapter>,
}

impl<Src, Dst, Adapter> Rule<Dst> for Transfer<Src, Adapter>
where
    Src: Backend,
    Dst: Backend,
    Adapter: DifferentiableTransfer<Src, Dst>,
{
    fn info(&self) -> OpInfo {
        OpInfo {
            name: "transfer",
            cost: Cost::Compute,
        }
    }

    fn forward(&self, _inputs: Values<Dst>) -> FloatTensor<Dst> {
        panic!("remat internal error: a transfer between backends is never replayed")
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        Reads::NOTHING
    }

    fn vjp(&self, cx: &mut Vjp<'_, Dst>, grad: FloatTensor<Dst>) {
        let parent = self
            .parent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(parent) = parent {
            let grad = Adapter::backward(grad, &self.source_device);
            cx.grads().register::<Src>(parent.id, grad);
        }
    }

    fn replayable(&self) -> bool {
        false
    }

    fn push_foreign_parents(&self, out: &mut Vec<Arc<dyn GraphNode>>) {
        if let Some(parent) = &*self
            .parent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
        {
            out.push(parent.clone());
        }
    }
}

/// Moves `tensor` to `device` of inner backend `Dst`, differentiably: gradients flow back to
/// the source backend through `Adapter::backward` (`Autodiff::to_backend`, in `backend/`).
pub(crate) fn transfer<Src, Dst, Adapter>(
    tensor: AutodiffTensor<Src>,
    device: &Dst::Device,
    balanced: bool,
) -> AutodiffTensor<Dst>
where
    Src: Backend,
    Dst: Backend,
    Adapter: DifferentiableTransfer<Src, Dst>,
{
    let AutodiffTensor {
        primitive, node, ..
    } = tensor;
    let source_device = primitive.device();
    let output = Adapter::forward(primitive, device);
    let Some(parent) = node else {
        return AutodiffTensor::new(output);
    };
    let rule = Transfer::<Src, Adapter> {
        parent: Mutex::new(Some(parent)),
        source_device,
        _adapter: PhantomData,
    };
    record_transfer::<Dst, _>(rule, balanced, output)
}
