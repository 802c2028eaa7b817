//! Convolutions: plain and transposed (1d, 2d, 3d) and deformable 2d. All are
//! [`Cost::Compute`].
//!
//! A convolution is bilinear in `(x, weight)`: the gradient of `x` reads only the weight, the
//! gradient of the weight reads only `x`, and the bias gradient reads nothing. Inner kernels
//! that also take the other argument for its shape get it without an input-sized buffer
//! (NOTE [shape-only-arguments] in `common`).

use burn_backend::ops::{ConvOptions, ConvTransposeOptions, DeformConvOptions};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};
use burn_std::Shape;
use smallvec::smallvec;

use super::common::sum_to_channels;
use super::record::record;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// A convolution with its options. Inputs: `[x, weight, bias?]`.
#[derive(Clone, Debug)]
pub(crate) enum Conv {
    Plain1d(ConvOptions<1>),
    Plain2d(ConvOptions<2>),
    Plain3d(ConvOptions<3>),
    Transpose1d(ConvTransposeOptions<1>),
    Transpose2d(ConvTransposeOptions<2>),
    Transpose3d(ConvTransposeOptions<3>),
}

/// A convolution and the input shapes its shape-only arguments need.
#[derive(Debug)]
struct ConvRule {
    op: Conv,
    x_shape: Shape,
    weight_shape: Shape,
    /// Whether input 2 (the bias) is present.
    has_bias: bool,
}

/// Records convolution `op` of `x` by `weight`, plus `bias` if any.
pub(crate) fn conv<B: Backend>(
    balanced: bool,
    op: Conv,
    x: AutodiffTensor<B>,
    weight: AutodiffTensor<B>,
    bias: Option<AutodiffTensor<B>>,
) -> AutodiffTensor<B> {
    let rule = ConvRule {
        op,
        x_shape: x.primitive.shape(),
        weight_shape: weight.primitive.shape(),
        has_bias: bias.is_some(),
    };
    let mut inputs = smallvec![x, weight];
    inputs.extend(bias);
    record(rule, inputs, balanced)
}

impl Conv {
    fn name(&self) -> &'static str {
        match self {
            Conv::Plain1d(_) => "conv1d",
            Conv::Plain2d(_) => "conv2d",
            Conv::Plain3d(_) => "conv3d",
            Conv::Transpose1d(_) => "conv_transpose1d",
            Conv::Transpose2d(_) => "conv_transpose2d",
            Conv::Transpose3d(_) => "conv_transpose3d",
        }
    }

    /// The gradient of `x`; `x` gives the shape-only argument of the plain convolutions.
    fn x_backward<B: Backend>(
        &self,
        x: impl FnOnce() -> FloatTensor<B>,
        weight: FloatTensor<B>,
        g: FloatTensor<B>,
    ) -> FloatTensor<B> {
        match self {
            Conv::Plain1d(o) => B::conv1d_x_backward(x(), weight, g, o.clone()),
            Conv::Plain2d(o) => B::conv2d_x_backward(x(), weight, g, o.clone()),
            Conv::Plain3d(o) => B::conv3d_x_backward(x(), weight, g, o.clone()),
            Conv::Transpose1d(o) => B::conv_transpose1d_x_backward(weight, g, o.clone()),
            Conv::Transpose2d(o) => B::conv_transpose2d_x_backward(weight, g, o.clone()),
            Conv::Transpose3d(o) => B::conv_transpose3d_x_backward(weight, g, o.clone()),
        }
    }

    /// The gradient of the weight; `w` is a shape-only argument.
    fn weight_backward<B: Backend>(
        &self,
        x: FloatTensor<B>,
        w: FloatTensor<B>,
        g: FloatTensor<B>,
    ) -> FloatTensor<B> {
        match self {
            Conv::Plain1d(o) => B::conv1d_weight_backward(x, w, g, o.clone()),
            Conv::Plain2d(o) => B::conv2d_weight_backward(x, w, g, o.clone()),
            Conv::Plain3d(o) => B::conv3d_weight_backward(x, w, g, o.clone()),
            Conv::Transpose1d(o) => B::conv_transpose1d_weight_backward(x, w, g, o.clone()),
            Conv::Transpose2d(o) => B::conv_transpose2d_weight_backward(x, w, g, o.clone()),
            Conv::Transpose3d(o) => B::conv_transpose3d_weight_backward(x, w, g, o.clone()),
        }
    }
}

impl<B: Backend> Rule<B> for ConvRule {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: self.op.name(),
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let (x, w, b) = take2_opt::<B>(inputs);
        match &self.op {
            Conv::Plain1d(o) => B::conv1d(x, w, b, o.clone()),
            Conv::Plain2d(o) => B::conv2d(x, w, b, o.clone()),
            Conv::Plain3d(o) => B::conv3d(x, w, b, o.clone()),
            Conv::Transpose1d(o) => B::conv_transpose1d(x, w, b, o.clone()),
            Conv::Transpose2d(o) => B::conv_transpose2d(x, w, b, o.clone()),
            Conv::Transpose3d(o) => B::conv_transpose3d(x, w, b, o.clone()),
        }
    }

    fn reads(&self, t: Tracked) -> Reads {
        // Bilinear: each of x and weight is read for the other's gradient; the bias never.
        Reads::NOTHING
            .with_input_if(0, t.get(1))
            .with_input_if(1, t.get(0))
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        if cx.needs_grad(1) {
            let x = cx.input(0);
            let w = cx.shape_arg(1, &self.weight_shape, &g);
            let gw = self.op.weight_backward::<B>(x, w, g.clone());
            cx.set(1, gw);
        }
        if cx.needs_grad(0) {
            // After the weight's gradient took its read of x: x is at hand only if it is
            // kept for another reader.
            let x = cx.shape_arg(0, &self.x_shape, &g);
            let w = cx.input(1);
            cx.set(0, self.op.x_backward::<B>(|| x, w, g.clone()));
        }
        // The bias gradient last: it is small, and held it would only add to the peak of the
        // two convolutions. d/db (conv + b) sums g over batch and positions.
        if self.has_bias && cx.needs_grad(2) {
            cx.set(2, sum_to_channels::<B>(g));
        }
    }
}

/// A deformable 2d convolution. Inputs: `[x, offset, weight, mask?, bias?]`.
#[derive(Debug)]
struct DeformConvRule {
    options: DeformConvOptions<2>,
    has_mask: bool,
    /// The bias shape, when a bias is present (it is the last input).
    bias_shape: Option<Shape>,
}

/// Records a deformable 2d convolution.
pub(crate) fn deform_conv2d<B: Backend>(
    balanced: bool,
    x: AutodiffTensor<B>,
    offset: AutodiffTensor<B>,
    weight: AutodiffTensor<B>,
    mask: Option<AutodiffTensor<B>>,
    bias: Option<AutodiffTensor<B>>,
    options: DeformConvOptions<2>,
) -> AutodiffTensor<B> {
    let rule = DeformConvRule {
        options,
        has_mask: mask.is_some(),
        bias_shape: bias.as_ref().map(|b| b.primitive.shape()),
    };
    let mut inputs = smallvec![x, offset, weight];
    inputs.extend(mask);
    inputs.extend(bias);
    record(rule, inputs, balanced)
}

impl DeformConvRule {
    fn bias_index(&self) -> usize {
        3 + usize::from(self.has_mask)
    }
}

impl<B: Backend> Rule<B> for DeformConvRule {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: "deform_conv2d",
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let mut it = inputs.into_iter();
        let mut next = || {
            it.next()
                .expect("remat internal error: deform_conv2d replayed with too few inputs")
        };
        let (x, offset, weight) = (next(), next(), next());
        let mask = self.has_mask.then(&mut next);
        let bias = self.bias_shape.is_some().then(&mut next);
        B::deform_conv2d(x, offset, weight, mask, bias, self.options.clone())
    }

    fn reads(&self, _t: Tracked) -> Reads {
        // The inner backward computes every gradient at once from x, offset, weight and mask.
        Reads::input(0)
            .with_input_if(1, true)
            .with_input_if(2, true)
            .with_input_if(3, self.has_mask)
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let (x, offset, weight) = (cx.input(0), cx.input(1), cx.input(2));
        let mask = self.has_mask.then(|| cx.input(3));
        let bias = (self.bias_shape.as_ref()).map(|s| cx.shape_arg(self.bias_index(), s, &g));
        let grads =
            B::deform_conv2d_backward(x, offset, weight, mask, bias, g, self.options.clone());
        cx.set(0, grads.x_grad);
        cx.set(1, grads.offset_grad);
        cx.set(2, grads.weight_grad);
        if let Some(gm) = grads.mask_grad.filter(|_| self.has_mask) {
            cx.set(3, gm);
        }
        if let Some(gb) = grads.bias_grad.filter(|_| self.bias_shape.is_some()) {
            cx.set(self.bias_index(), gb);
        }
    }
}

/// The inputs of a two-input op with an optional third (a bias): `[a, b, c?]`.
pub(crate) fn take2_opt<B: Backend>(
    inputs: Values<B>,
) -> (FloatTensor<B>, FloatTensor<B>, Option<FloatTensor<B>>) {
    let mut it = inputs.into_iter();
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(a), Some(b), c, None) => (a, b, c),
        _ => {
            panic!("remat internal error: an op with an optional input replayed with another arity")
        }
    }
}
