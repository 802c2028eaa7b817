//! Linear algebra: matrix product (with batch broadcasting) and cross product. Both are
//! [`Cost::Compute`], as in Burn.
//!
//! Gradients of broadcast inputs are summed back to the input's shape
//! ([`Broadcast`](super::common::Broadcast)).

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};
use burn_std::Shape;
use smallvec::smallvec;

use super::common::Broadcast;
use super::record::record;
use super::unary::take2;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// A product of two tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Linalg {
    /// Matrix product over the last two dims; leading (batch) dims broadcast.
    Matmul,
    /// Cross product of 3-vectors along the dim.
    Cross(usize),
}

/// A product with the input shapes it needs to undo broadcasting.
#[derive(Debug)]
struct LinalgRule {
    op: Linalg,
    /// Kept only when a broadcast may have happened: a matrix product's batch dims differ,
    /// or a cross product's shapes. A node of most products keeps 24 bytes of rule, not 112
    /// (Burn's `Linear` on a `[batch, in]` input).
    shapes: Broadcast,
}

fn apply<B: Backend>(
    balanced: bool,
    op: Linalg,
    lhs: AutodiffTensor<B>,
    rhs: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    let (ls, rs) = (lhs.primitive.shape(), rhs.primitive.shape());
    let broadcast = match op {
        Linalg::Matmul => batch_dims(&ls) != batch_dims(&rs),
        Linalg::Cross(_) => ls != rs,
    };
    let rule = LinalgRule {
        op,
        shapes: Broadcast::new(ls, rs, broadcast),
    };
    record(rule, smallvec![lhs, rhs], balanced)
}

/// A matrix product's batch dims: all but the last two.
fn batch_dims(shape: &Shape) -> &[usize] {
    &shape[..shape.num_dims().saturating_sub(2)]
}

/// Matrix product `lhs @ rhs`, broadcasting batch dims.
pub(crate) fn matmul<B: Backend>(
    balanced: bool,
    lhs: AutodiffTensor<B>,
    rhs: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    apply(balanced, Linalg::Matmul, lhs, rhs)
}

/// Cross product `lhs x rhs` along `dim` (of size 3).
pub(crate) fn cross<B: Backend>(
    balanced: bool,
    lhs: AutodiffTensor<B>,
    rhs: AutodiffTensor<B>,
    dim: usize,
) -> AutodiffTensor<B> {
    apply(balanced, Linalg::Cross(dim), lhs, rhs)
}

impl Linalg {
    fn name(self) -> &'static str {
        match self {
            Linalg::Matmul => "matmul",
            Linalg::Cross(_) => "cross",
        }
    }
}

impl<B: Backend> Rule<B> for LinalgRule {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.op.name(),
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [l, r] = take2::<B>(inputs);
        match self.op {
            Linalg::Matmul => B::float_matmul(l, r),
            Linalg::Cross(d) => B::float_cross(l, r, d),
        }
    }

    fn reads(&self, t: Tracked) -> Reads {
        // Both are bilinear: each side's gradient reads only the other side.
        match self.op {
            Linalg::Matmul | Linalg::Cross(_) => Reads::NOTHING
                .with_input_if(1, t.get(0))
                .with_input_if(0, t.get(1)),
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let (tl, tr) = (cx.needs_grad(0), cx.needs_grad(1));
        let (gl, gr) = match self.op {
            // d(L R) = dL R + L dR: gL = g R^T, gR = L^T g
            Linalg::Matmul => {
                let gl = tl.then(|| B::float_matmul(g.clone(), B::float_transpose(cx.input(1))));
                let gr = tr.then(|| B::float_matmul(B::float_transpose(cx.input(0)), g));
                (gl, gr)
            }
            // <g, a x b> = <a, b x g> = <b, g x a>
            Linalg::Cross(d) => {
                let gl = tl.then(|| B::float_cross(cx.input(1), g.clone(), d));
                let gr = tr.then(|| B::float_cross(g, cx.input(0), d));
                (gl, gr)
            }
        };
        if let Some(gl) = gl {
            cx.set(0, self.shapes.undo::<B>(gl, 0));
        }
        if let Some(gr) = gr {
            cx.set(1, self.shapes.undo::<B>(gr, 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A product's rule keeps its input shapes only where a broadcast may have happened
    /// (FIXME [tape-bytes]): boxed, so a node of most products keeps 24 bytes of rule.
    #[test]
    fn a_product_s_rule_is_small() {
        let size = core::mem::size_of::<LinalgRule>();
        assert!(size <= 24, "LinalgRule is {size} bytes");
        let shape = |dims: &[usize]| Shape::from(dims.to_vec());
        assert_eq!(batch_dims(&shape(&[4, 5])), &[] as &[usize]);
        assert_eq!(batch_dims(&shape(&[2, 3, 4, 5])), &[2, 3]);
        assert_ne!(
            batch_dims(&shape(&[1, 4, 5])),
            batch_dims(&shape(&[3, 5, 6]))
        );
    }
}
