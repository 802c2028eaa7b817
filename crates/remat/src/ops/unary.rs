//! Element-wise ops of one tensor (and a scalar): math functions, scalar arithmetic,
//! clamping, rounding, casts. All are [`Cost::Cheap`].
//!
//! The pattern every family follows: an enum of ops with their parameters, `reads` and
//! `vjp` as exhaustive matches side by side, one short arm per derivative.

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Scalar, TensorMetadata};
use burn_std::FloatDType;
use smallvec::smallvec;

use super::common::{bool_dtype, scalar, zeros_like};
use super::record::record;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// An element-wise op of one tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Unary {
    Exp,
    Log,
    Log1p,
    Sqrt,
    Abs,
    Cos,
    Sin,
    Tan,
    Cosh,
    Sinh,
    Tanh,
    Acos,
    Acosh,
    Asin,
    Asinh,
    Atan,
    Atanh,
    Round,
    Floor,
    Ceil,
    Trunc,
    Erf,
    Recip,
    Neg,
    Sign,
    PowfScalar(Scalar),
    /// Integer power (the inner backend's `powi_scalar`, with its special cases).
    PowiScalar(Scalar),
    AddScalar(Scalar),
    SubScalar(Scalar),
    MulScalar(Scalar),
    DivScalar(Scalar),
    RemainderScalar(Scalar),
    /// Clamp to `[min, max]`; an infinite bound is no bound (kept as `f64`, not
    /// `Option<Scalar>`, so that the op stays one word plus a tag).
    Clamp(f64, f64),
    /// Cast to `to` from `from`.
    Cast {
        to: FloatDType,
        from: FloatDType,
    },
}

/// Records `op` applied to `tensor`.
pub(crate) fn apply<B: Backend>(
    balanced: bool,
    op: Unary,
    tensor: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    record(op, smallvec![tensor], balanced)
}

/// Records a clamp to `[min, max]` (either bound optional).
pub(crate) fn clamp<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    min: Option<Scalar>,
    max: Option<Scalar>,
) -> AutodiffTensor<B> {
    let min = min.map_or(f64::NEG_INFINITY, |m| m.elem::<f64>());
    let max = max.map_or(f64::INFINITY, |m| m.elem::<f64>());
    apply(balanced, Unary::Clamp(min, max), tensor)
}

/// Records a cast to `dtype` (its gradient is cast back).
pub(crate) fn cast<B: Backend>(
    balanced: bool,
    tensor: AutodiffTensor<B>,
    dtype: FloatDType,
) -> AutodiffTensor<B> {
    let from: FloatDType = tensor.primitive.dtype().into();
    if from == dtype {
        return tensor;
    }
    apply(balanced, Unary::Cast { to: dtype, from }, tensor)
}

impl Unary {
    fn name(self) -> &'static str {
        match self {
            Unary::Exp => "exp",
            Unary::Log => "log",
            Unary::Log1p => "log1p",
            Unary::Sqrt => "sqrt",
            Unary::Abs => "abs",
            Unary::Cos => "cos",
            Unary::Sin => "sin",
            Unary::Tan => "tan",
            Unary::Cosh => "cosh",
            Unary::Sinh => "sinh",
            Unary::Tanh => "tanh",
            Unary::Acos => "acos",
            Unary::Acosh => "acosh",
            Unary::Asin => "asin",
            Unary::Asinh => "asinh",
            Unary::Atan => "atan",
            Unary::Atanh => "atanh",
            Unary::Round => "round",
            Unary::Floor => "floor",
            Unary::Ceil => "ceil",
            Unary::Trunc => "trunc",
            Unary::Erf => "erf",
            Unary::Recip => "recip",
            Unary::Neg => "neg",
            Unary::Sign => "sign",
            Unary::PowfScalar(_) => "powf_scalar",
            Unary::PowiScalar(_) => "powi_scalar",
            Unary::AddScalar(_) => "add_scalar",
            Unary::SubScalar(_) => "sub_scalar",
            Unary::MulScalar(_) => "mul_scalar",
            Unary::DivScalar(_) => "div_scalar",
            Unary::RemainderScalar(_) => "remainder_scalar",
            Unary::Clamp(..) => "clamp",
            Unary::Cast { .. } => "cast",
        }
    }
}

impl<B: Backend> Rule<B> for Unary {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.name(),
            cost: Cost::Cheap,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let [x] = take1::<B>(inputs);
        match *self {
            Unary::Exp => B::float_exp(x),
            Unary::Log => B::float_log(x),
            Unary::Log1p => B::float_log1p(x),
            Unary::Sqrt => B::float_sqrt(x),
            Unary::Abs => B::float_abs(x),
            Unary::Cos => B::float_cos(x),
            Unary::Sin => B::float_sin(x),
            Unary::Tan => B::float_tan(x),
            Unary::Cosh => B::float_cosh(x),
            Unary::Sinh => B::float_sinh(x),
            Unary::Tanh => B::float_tanh(x),
            Unary::Acos => B::float_acos(x),
            Unary::Acosh => B::float_acosh(x),
            Unary::Asin => B::float_asin(x),
            Unary::Asinh => B::float_asinh(x),
            Unary::Atan => B::float_atan(x),
            Unary::Atanh => B::float_atanh(x),
            Unary::Round => B::float_round(x),
            Unary::Floor => B::float_floor(x),
            Unary::Ceil => B::float_ceil(x),
            Unary::Trunc => B::float_trunc(x),
            Unary::Erf => B::float_erf(x),
            Unary::Recip => B::float_recip(x),
            Unary::Neg => B::float_neg(x),
            Unary::Sign => B::float_sign(x),
            Unary::PowfScalar(p) => B::float_powf_scalar(x, p),
            Unary::PowiScalar(p) => B::float_powi_scalar(x, p),
            Unary::AddScalar(s) => B::float_add_scalar(x, s),
            Unary::SubScalar(s) => B::float_sub_scalar(x, s),
            Unary::MulScalar(s) => B::float_mul_scalar(x, s),
            Unary::DivScalar(s) => B::float_div_scalar(x, s),
            Unary::RemainderScalar(s) => B::float_remainder_scalar(x, s),
            Unary::Clamp(min, max) => match (min > f64::NEG_INFINITY, max < f64::INFINITY) {
                (true, true) => B::float_clamp(x, scalar(min), scalar(max)),
                (true, false) => B::float_clamp_min(x, scalar(min)),
                (false, true) => B::float_clamp_max(x, scalar(max)),
                (false, false) => x,
            },
            Unary::Cast { to, .. } => B::float_cast(x, to),
        }
    }

    fn reads(&self, _tracked: Tracked) -> Reads {
        match self {
            Unary::Exp | Unary::Sqrt | Unary::Tan | Unary::Tanh | Unary::Recip => Reads::OUTPUT,
            Unary::Log
            | Unary::Log1p
            | Unary::Abs
            | Unary::Cos
            | Unary::Sin
            | Unary::Cosh
            | Unary::Sinh
            | Unary::Acos
            | Unary::Acosh
            | Unary::Asin
            | Unary::Asinh
            | Unary::Atan
            | Unary::Atanh
            | Unary::Erf
            | Unary::PowfScalar(_)
            | Unary::PowiScalar(_)
            | Unary::Clamp(..) => Reads::input(0),
            Unary::Round
            | Unary::Floor
            | Unary::Ceil
            | Unary::Trunc
            | Unary::Neg
            | Unary::Sign
            | Unary::AddScalar(_)
            | Unary::SubScalar(_)
            | Unary::MulScalar(_)
            | Unary::DivScalar(_)
            | Unary::RemainderScalar(_)
            | Unary::Cast { .. } => Reads::NOTHING,
        }
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let grad = match *self {
            // d/dx e^x = e^x
            Unary::Exp => B::float_mul(g, cx.output()),
            Unary::Log => B::float_div(g, cx.input(0)),
            Unary::Log1p => B::float_div(g, B::float_add_scalar(cx.input(0), scalar(1.0))),
            // d/dx sqrt(x) = 1 / (2 sqrt(x))
            Unary::Sqrt => B::float_div(B::float_mul_scalar(g, scalar(0.5)), cx.output()),
            Unary::Abs => B::float_mul(g, B::float_sign(cx.input(0))),
            Unary::Cos => B::float_neg(B::float_mul(g, B::float_sin(cx.input(0)))),
            Unary::Sin => B::float_mul(g, B::float_cos(cx.input(0))),
            // d/dx tan(x) = 1 + tan(x)^2
            Unary::Tan => {
                let y = cx.output();
                B::float_mul(
                    g,
                    B::float_add_scalar(B::float_mul(y.clone(), y), scalar(1.0)),
                )
            }
            Unary::Cosh => B::float_mul(g, B::float_sinh(cx.input(0))),
            Unary::Sinh => B::float_mul(g, B::float_cosh(cx.input(0))),
            // d/dx tanh(x) = 1 - tanh(x)^2
            Unary::Tanh => {
                let y = cx.output();
                let y2 = B::float_mul(y.clone(), y);
                B::float_mul(g, B::float_neg(B::float_sub_scalar(y2, scalar(1.0))))
            }
            // d/dx acos(x) = -1 / sqrt(1 - x^2)
            Unary::Acos => B::float_neg(B::float_div(g, sqrt_one_minus_square::<B>(cx.input(0)))),
            Unary::Asin => B::float_div(g, sqrt_one_minus_square::<B>(cx.input(0))),
            // d/dx acosh(x) = 1 / sqrt(x^2 - 1)
            Unary::Acosh => {
                let x = cx.input(0);
                let x2 = B::float_mul(x.clone(), x);
                B::float_div(g, B::float_sqrt(B::float_sub_scalar(x2, scalar(1.0))))
            }
            // d/dx asinh(x) = 1 / sqrt(x^2 + 1)
            Unary::Asinh => {
                let x = cx.input(0);
                let x2 = B::float_mul(x.clone(), x);
                B::float_div(g, B::float_sqrt(B::float_add_scalar(x2, scalar(1.0))))
            }
            // d/dx atan(x) = 1 / (1 + x^2)
            Unary::Atan => {
                let x = cx.input(0);
                let x2 = B::float_mul(x.clone(), x);
                B::float_div(g, B::float_add_scalar(x2, scalar(1.0)))
            }
            // d/dx atanh(x) = 1 / (1 - x^2)
            Unary::Atanh => {
                let x = cx.input(0);
                let x2 = B::float_mul(x.clone(), x);
                B::float_div(g, B::float_neg(B::float_sub_scalar(x2, scalar(1.0))))
            }
            Unary::Round | Unary::Floor | Unary::Ceil | Unary::Trunc | Unary::Sign => {
                zeros_like::<B>(&g)
            }
            // d/dx erf(x) = 2/sqrt(pi) e^(-x^2)
            Unary::Erf => {
                let x = cx.input(0);
                let x2 = B::float_mul(x.clone(), x);
                let e = B::float_exp(B::float_neg(x2));
                let k = 2.0 / core::f64::consts::PI.sqrt();
                B::float_mul(g, B::float_mul_scalar(e, scalar(k)))
            }
            // d/dx 1/x = -1/x^2
            Unary::Recip => {
                let y = cx.output();
                B::float_neg(B::float_mul(g, B::float_mul(y.clone(), y)))
            }
            Unary::Neg => B::float_neg(g),
            // d/dx x^p = p x^(p-1)
            Unary::PowfScalar(p) => {
                let p = p.elem::<f64>();
                let d = B::float_mul_scalar(
                    B::float_powf_scalar(cx.input(0), scalar(p - 1.0)),
                    scalar(p),
                );
                B::float_mul(g, d)
            }
            // d/dx x^n = n x^(n-1), with n an integer
            Unary::PowiScalar(n) => {
                let n = n.elem::<i64>();
                let d = B::float_mul_scalar(
                    B::float_powi_scalar(cx.input(0), Scalar::Int(n - 1)),
                    scalar(n as f64),
                );
                B::float_mul(g, d)
            }
            Unary::AddScalar(_) | Unary::SubScalar(_) | Unary::RemainderScalar(_) => g,
            Unary::MulScalar(s) => B::float_mul_scalar(g, s),
            Unary::DivScalar(s) => B::float_div_scalar(g, s),
            // The gradient passes where the value was not clamped.
            Unary::Clamp(min, max) => {
                let x = cx.input(0);
                let dtype = bool_dtype::<B>(&x);
                let mut g = g;
                if min > f64::NEG_INFINITY {
                    let below = B::float_lower_elem(x.clone(), scalar(min), dtype);
                    g = B::float_mask_fill(g, below, scalar(0.0));
                }
                if max < f64::INFINITY {
                    let above = B::float_greater_elem(x, scalar(max), dtype);
                    g = B::float_mask_fill(g, above, scalar(0.0));
                }
                g
            }
            Unary::Cast { from, .. } => B::float_cast(g, from),
        };
        cx.set(0, grad);
    }
}

/// `sqrt(1 - x^2)`.
fn sqrt_one_minus_square<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let x2 = B::float_mul(x.clone(), x);
    B::float_sqrt(B::float_neg(B::float_sub_scalar(x2, scalar(1.0))))
}

/// The single input of a one-input op.
pub(crate) fn take1<B: Backend>(inputs: Values<B>) -> [FloatTensor<B>; 1] {
    let mut it = inputs.into_iter();
    match (it.next(), it.next()) {
        (Some(x), None) => [x],
        _ => panic!("remat internal error: a one-input op replayed with another arity"),
    }
}

/// The two inputs of a two-input op.
pub(crate) fn take2<B: Backend>(inputs: Values<B>) -> [FloatTensor<B>; 2] {
    let mut it = inputs.into_iter();
    match (it.next(), it.next(), it.next()) {
        (Some(a), Some(b), None) => [a, b],
        _ => panic!("remat internal error: a two-input op replayed with another arity"),
    }
}

#[cfg(test)]
mod tests {
    /// Per-op bookkeeping stays small: the most common rule, boxed in its node.
    #[test]
    fn a_unary_rule_is_small() {
        let rule = core::mem::size_of::<super::Unary>();
        assert!(rule <= 24, "Unary is {rule} bytes");
    }
}
