//! Element-wise ops of two tensors, with broadcasting. All are [`Cost::Cheap`].
//!
//! Gradients of broadcast inputs are summed back to the input's shape
//! ([`Broadcast`](super::common::Broadcast)).

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, TensorMetadata};
use smallvec::smallvec;

use super::common::{Broadcast, scalar};
use super::record::record;
use super::unary::take2;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// An element-wise op of two tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Remainder,
    Powf,
    Atan2,
    Hypot,
}

/// A binary op with the input shapes it needs to undo broadcasting.
#[derive(Debug)]
struct BinaryRule {
    op: Binary,
    /// Kept only when the two input shapes differ (a broadcast happened).
    shapes: Broadcast,
}

fn apply<B: Backend>(
    balanced: bool,
    op: Binary,
    lhs: AutodiffTensor<B>,
    rhs: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    let (ls, rs) = (lhs.primitive.shape(), rhs.primitive.shape());
    let differ = ls != rs;
    let shapes = Broadcast::new(ls, rs, differ);
    record(BinaryRule { op, shapes }, smallvec![lhs, rhs], balanced)
}

macro_rules! entry {
    ($($name:ident => $op:ident),* $(,)?) => {$(
        pub(crate) fn $name<B: Backend>(
            balanced: bool,
            lhs: AutodiffTensor<B>,
            rhs: AutodiffTensor<B>,
        ) -> AutodiffTensor<B> {
            apply(balanced, Binary::$op, lhs, rhs)
        }
    )*};
}

entry!(add => Add, sub => Sub, mul => Mul, div => Div, remainder => Remainder, powf => Powf, atan2 => Atan2, hypot => Hypot);

/// `lhs ^ rhs` with an integer exponent tensor: the exponent is an untracked constant.
pub(crate) fn powi<B: Backend>(
    balanced: bool,
    lhs: AutodiffTensor<B>,
    rhs: IntTensor<B>,
) -> AutodiffTensor<B> {
    let dtype = lhs.primitive.dtype().into();
    let rhs = AutodiffTensor::new(B::int_into_float(rhs, dtype));
    apply(balanced, Binary::Powf, lhs, rhs)
}

impl Binary {
    fn name(self) -> &'static str {
        match self {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "mul",
            Binary::Div => "div",
            Binary::Remainder => "remainder",
            Binary::Powf => "powf",
            Binary::Atan2 => "atan2",
            Binary::Hypot => "hypot",
        }
    }
}

impl<B: Backend> Rule<B> for BinaryRule {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.op.name(),
            cost: Cost::Cheap,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [l, r] = take2::<B>(inputs);
        match self.op {
            Binary::Add => B::float_add(l, r),
            Binary::Sub => B::float_sub(l, r),
            Binary::Mul => B::float_mul(l, r),
            Binary::Div => B::float_div(l, r),
            Binary::Remainder => B::float_remainder(l, r),
            Binary::Powf => B::float_powf(l, r),
            Binary::Atan2 => B::float_atan2(l, r),
            Binary::Hypot => B::float_hypot(l, r),
        }
    }

    fn reads(&self, t: Tracked) -> Reads {
        let (tl, tr) = (t.get(0), t.get(1));
        match self.op {
            Binary::Add | Binary::Sub => Reads::NOTHING,
            Binary::Mul => Reads::NOTHING.with_input_if(1, tl).with_input_if(0, tr),
            Binary::Div => Reads::input(1).with_input_if(0, tr),
            Binary::Remainder => Reads::NOTHING.with_input_if(0, tr).with_input_if(1, tr),
            Binary::Powf => Reads::input(0).with_input_if(1, tl).with_output_if(tr),
            Binary::Atan2 => Reads::input(0).with_input_if(1, true),
            Binary::Hypot => Reads::OUTPUT.with_input_if(0, tl).with_input_if(1, tr),
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let (tl, tr) = (cx.needs_grad(0), cx.needs_grad(1));
        let (gl, gr): (Option<FloatTensor<B>>, Option<FloatTensor<B>>) = match self.op {
            Binary::Add => (tl.then(|| g.clone()), tr.then_some(g)),
            Binary::Sub => (tl.then(|| g.clone()), tr.then(|| B::float_neg(g))),
            Binary::Mul => {
                let gl = tl.then(|| B::float_mul(g.clone(), cx.input(1)));
                let gr = tr.then(|| B::float_mul(g, cx.input(0)));
                (gl, gr)
            }
            // d/dl l/r = 1/r ; d/dr l/r = -l/r^2
            Binary::Div => {
                let r = cx.input(1);
                let gr = tr.then(|| {
                    let l = cx.input(0);
                    let r2 = B::float_mul(r.clone(), r.clone());
                    B::float_neg(B::float_div(B::float_mul(g.clone(), l), r2))
                });
                (tl.then(|| B::float_div(g, r)), gr)
            }
            // l mod r = l - r floor(l / r)
            Binary::Remainder => {
                let gr = tr.then(|| {
                    let q = B::float_floor(B::float_div(cx.input(0), cx.input(1)));
                    B::float_neg(B::float_mul(g.clone(), q))
                });
                (tl.then_some(g), gr)
            }
            // d/dl l^r = r l^(r-1) ; d/dr l^r = l^r ln(l)
            Binary::Powf => {
                let l = cx.input(0);
                let gl = tl.then(|| {
                    let r = cx.input(1);
                    let d = B::float_powf(l.clone(), B::float_sub_scalar(r.clone(), scalar(1.0)));
                    B::float_mul(g.clone(), B::float_mul(r, d))
                });
                let gr = tr.then(|| B::float_mul(g, B::float_mul(cx.output(), B::float_log(l))));
                (gl, gr)
            }
            // d/dy atan2(y, x) = x / (x^2 + y^2) ; d/dx = -y / (x^2 + y^2)
            Binary::Atan2 => {
                let (y, x) = (cx.input(0), cx.input(1));
                let den = B::float_add(
                    B::float_mul(x.clone(), x.clone()),
                    B::float_mul(y.clone(), y.clone()),
                );
                let gl = tl.then(|| B::float_div(B::float_mul(g.clone(), x), den.clone()));
                let gr = tr.then(|| B::float_neg(B::float_div(B::float_mul(g, y), den)));
                (gl, gr)
            }
            // d/da hypot(a, b) = a / hypot(a, b)
            Binary::Hypot => {
                let h = cx.output();
                let gl = tl.then(|| B::float_div(B::float_mul(g.clone(), cx.input(0)), h.clone()));
                let gr = tr.then(|| B::float_div(B::float_mul(g, cx.input(1)), h));
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
