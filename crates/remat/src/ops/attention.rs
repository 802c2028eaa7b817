//! Scaled dot-product attention as one op ([`Cost::Compute`]): the forward is the inner
//! backend's (possibly fused) kernel, and the backward recomputes the attention
//! probabilities from the saved `q`, `k` (and bias) rather than keeping the
//! `[batch, heads, seq_q, seq_k]` matrices of a decomposed forward.
//!
//! With `A = scale * q k^T` (soft-capped, masked, biased) and `P = softmax(A)`, `out = P v`:
//! `dv = P^T g`, `dP = g v^T`, `dA = P * (dP - rowsum(dP * P))`, `dq = scale * dA' k`,
//! `dk = scale * dA'^T q`, where `dA'` is `dA` through the soft cap.

use burn_backend::ops::AttentionModuleOptions;
use burn_backend::tensor::{BoolTensor, FloatTensor};
use burn_backend::{Backend, TensorMetadata};
use burn_std::Shape;
use smallvec::smallvec;

use super::common::{bool_dtype, scalar, unbroadcast};
use super::record::record;
use crate::graph::{Cost, OpInfo};
use crate::graph::{Reads, Rule, Tracked, Values, Vjp};
use crate::tensor::AutodiffTensor;

/// Attention with its untracked parameters. Inputs: `[q, k, v, bias?]`.
#[derive(Debug)]
struct Attention<B: Backend> {
    /// Positions (`true`) excluded from the softmax.
    mask: Option<BoolTensor<B>>,
    options: AttentionModuleOptions,
    /// The additive bias's shape, when there is one (input 3).
    bias_shape: Option<Shape>,
}

/// Records attention of `query` over `key`/`value`.
pub(crate) fn attention<B: Backend>(
    balanced: bool,
    query: AutodiffTensor<B>,
    key: AutodiffTensor<B>,
    value: AutodiffTensor<B>,
    mask: Option<BoolTensor<B>>,
    attn_bias: Option<AutodiffTensor<B>>,
    options: AttentionModuleOptions,
) -> AutodiffTensor<B> {
    if let Some(softcap) = options.softcap {
        assert!(
            softcap > 0.0,
            "attention: softcap must be positive, got {softcap}"
        );
    }
    let rule = Attention {
        mask,
        options,
        bias_shape: attn_bias.as_ref().map(|b| b.primitive.shape()),
    };
    let mut inputs = smallvec![query, key, value];
    inputs.extend(attn_bias);
    record(rule, inputs, balanced)
}

impl<B: Backend> Rule<B> for Attention<B> {
    fn info(&self) -> OpInfo {
        OpInfo {
            name: "attention",
            cost: Cost::Compute,
        }
    }

    fn forward(&self, inputs: Values<B>) -> FloatTensor<B> {
        let mut it = inputs.into_iter();
        let mut next = || {
            it.next()
                .expect("remat internal error: attention replayed with too few inputs")
        };
        let (q, k, v) = (next(), next(), next());
        let bias = self.bias_shape.is_some().then(next);
        B::attention(q, k, v, self.mask.clone(), bias, self.options)
    }

    fn reads(&self, t: Tracked) -> Reads {
        // P (from q, k and the bias) is needed for every gradient; v only for the scores'.
        let has_bias = self.bias_shape.is_some();
        let scores = t.get(0) || t.get(1) || (has_bias && t.get(3));
        Reads::input(0)
            .with_input_if(1, true)
            .with_input_if(2, scores)
            .with_input_if(3, has_bias)
    }

    fn vjp(&self, cx: &mut Vjp<'_, B>, g: FloatTensor<B>) {
        let has_bias = self.bias_shape.is_some();
        let (q, k) = (cx.input(0), cx.input(1));
        let bias = has_bias.then(|| cx.input(3));
        let scale = self.scale(&q);
        let (p, capped) = self.probabilities(q.clone(), k.clone(), bias, scale);
        if cx.needs_grad(2) {
            cx.set(2, B::float_matmul(B::float_transpose(p.clone()), g.clone()));
        }
        let scores = cx.needs_grad(0) || cx.needs_grad(1) || (has_bias && cx.needs_grad(3));
        if !scores {
            return;
        }
        let v = cx.input(2);
        let dp = B::float_matmul(g, B::float_transpose(v));
        // Softmax: dA = P * (dP - rowsum(dP * P)).
        let row = B::float_sum_dim(B::float_mul(dp.clone(), p.clone()), 3);
        let da = B::float_mul(p, B::float_sub(dp, row));
        if let Some(shape) = self.bias_shape.as_ref().filter(|_| cx.needs_grad(3)) {
            cx.set(3, unbroadcast::<B>(da.clone(), shape));
        }
        // Soft cap c tanh(s / c): d/ds = 1 - tanh(s / c)^2.
        let da = match capped {
            Some(t) => {
                let t2 = B::float_mul(t.clone(), t);
                B::float_mul(da, B::float_neg(B::float_sub_scalar(t2, scalar(1.0))))
            }
            None => da,
        };
        let da = B::float_mul_scalar(da, scalar(scale));
        if cx.needs_grad(0) {
            cx.set(0, B::float_matmul(da.clone(), k));
        }
        if cx.needs_grad(1) {
            cx.set(1, B::float_matmul(B::float_transpose(da), q));
        }
    }
}

impl<B: Backend> Attention<B> {
    /// The score scale: given, or `1 / sqrt(head_dim)`.
    fn scale(&self, q: &FloatTensor<B>) -> f64 {
        let head_dim = q.shape()[3];
        self.options
            .scale
            .unwrap_or_else(|| 1.0 / (head_dim as f64).sqrt())
    }

    /// The attention probabilities `P`, and `tanh(s / c)` when a soft cap `c` applies.
    ///
    /// Rows whose every position is masked get zeros (the max and the sum are clamped), as in
    /// Burn's reference decomposition.
    fn probabilities(
        &self,
        q: FloatTensor<B>,
        k: FloatTensor<B>,
        bias: Option<FloatTensor<B>>,
        scale: f64,
    ) -> (FloatTensor<B>, Option<FloatTensor<B>>) {
        let s = B::float_mul_scalar(B::float_matmul(q, B::float_transpose(k)), scalar(scale));
        let (s, capped) = match self.options.softcap {
            Some(c) => {
                let t = B::float_tanh(B::float_div_scalar(s, scalar(c)));
                (B::float_mul_scalar(t.clone(), scalar(c)), Some(t))
            }
            None => (s, None),
        };
        let neg_inf = scalar(f64::NEG_INFINITY);
        let s = match &self.mask {
            Some(mask) => B::float_mask_fill(s, mask.clone(), neg_inf),
            None => s,
        };
        let s = if self.options.is_causal {
            let mask = causal_mask::<B>(&s);
            B::float_mask_fill(s, mask, neg_inf)
        } else {
            s
        };
        let s = match bias {
            Some(b) => B::float_add(s, b),
            None => s,
        };
        let finfo = s
            .dtype()
            .finfo()
            .expect("remat internal error: attention scores are not floats");
        let max = B::float_clamp_min(B::float_max_dim(s.clone(), 3), finfo.min.into());
        let e = B::float_exp(B::float_sub(s, max));
        let sum = B::float_clamp_min(B::float_sum_dim(e.clone(), 3), finfo.min_positive.into());
        (B::float_div(e, sum), capped)
    }
}

/// `true` where key position `j` lies after query position `i`, aligned at the bottom-right
/// corner (`j > i + seq_k - seq_q`), shaped like `scores`.
fn causal_mask<B: Backend>(scores: &FloatTensor<B>) -> BoolTensor<B> {
    let device = scores.device();
    let [batch, heads, seq_q, seq_k] = scores.shape().dims();
    let int_dtype = burn_backend::get_or_init_device_settings::<B>(&device).int_dtype;
    let rows = B::int_reshape(
        B::int_arange(0..seq_q as i64, &device, int_dtype),
        Shape::new([seq_q, 1]),
    );
    let cols = B::int_reshape(
        B::int_arange(0..seq_k as i64, &device, int_dtype),
        Shape::new([1, seq_k]),
    );
    let rows = B::int_add_scalar(rows, (seq_k as i64 - seq_q as i64).into());
    let mask = B::int_lower(rows, cols, bool_dtype::<B>(scores));
    let mask = B::bool_reshape(mask, Shape::new([1, 1, seq_q, seq_k]));
    B::bool_expand(mask, Shape::new([batch, heads, seq_q, seq_k]))
}
