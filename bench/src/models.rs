//! Backend-level models, written once and generic over `B: AutodiffBackend`, so that Burn's
//! autodiff and remat run the very same op sequence on the same weights and inputs.

use std::cell::RefCell;
use std::time::Instant;

use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, FloatDType, Shape, Slice, TensorData};
use serde::{Deserialize, Serialize};

use crate::alloc;

/// Which model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `layers` x (Linear width->width + GELU).
    Mlp,
    /// Pre-norm encoder layers.
    Transformer,
    /// Residual blocks of two 3x3 convolutions + ReLU.
    Convnet,
    /// A long chain: `layers` residual blocks `x + Linear(GELU(Linear(x)))` (issue 19's
    /// long-sequence model: a chain of 200 small blocks with a fan-out inside each).
    ResMlp,
    /// An LSTM over a long sequence, with the ops of Burn's `burn::nn::Lstm` (issue 34): one
    /// time step per layer, the loss on the last hidden state.
    Lstm,
}

impl Kind {
    /// Parses a model name.
    pub fn parse(name: &str) -> Option<Kind> {
        match name {
            "mlp" => Some(Kind::Mlp),
            "transformer" => Some(Kind::Transformer),
            "convnet" => Some(Kind::Convnet),
            "resmlp" => Some(Kind::ResMlp),
            "lstm" => Some(Kind::Lstm),
            _ => None,
        }
    }

    /// The model's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mlp => "mlp",
            Kind::Transformer => "transformer",
            Kind::Convnet => "convnet",
            Kind::ResMlp => "resmlp",
            Kind::Lstm => "lstm",
        }
    }
}

/// Sizes of a model.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    /// The model.
    pub kind: Kind,
    /// Batch size.
    pub batch: usize,
    /// Layers (MLP layers, encoder layers, residual blocks); unused by the LSTM (one layer,
    /// whose time steps are the hook's layers).
    pub layers: usize,
    /// Width: hidden size, d_model or channels.
    pub width: usize,
    /// Sequence length (transformer, LSTM time steps) or image side (convnet); unused by the
    /// MLPs.
    pub seq: usize,
    /// Attention heads (transformer).
    pub heads: usize,
    /// Feed-forward width (transformer) or input features (LSTM).
    pub d_ff: usize,
}

impl Config {
    /// The default sizes.
    pub fn default_for(kind: Kind) -> Config {
        match kind {
            Kind::Mlp => Config {
                kind,
                batch: 512,
                layers: 24,
                width: 1024,
                seq: 0,
                heads: 0,
                d_ff: 0,
            },
            Kind::Transformer => Config {
                kind,
                batch: 8,
                layers: 6,
                width: 256,
                seq: 256,
                heads: 8,
                d_ff: 1024,
            },
            Kind::Convnet => Config {
                kind,
                batch: 8,
                layers: 6,
                width: 64,
                seq: 32,
                heads: 0,
                d_ff: 0,
            },
            Kind::ResMlp => Config {
                kind,
                batch: 128,
                layers: 200,
                width: 256,
                seq: 0,
                heads: 0,
                d_ff: 0,
            },
            Kind::Lstm => Config {
                kind,
                batch: 16,
                layers: 1,
                width: 64,
                seq: 1024,
                heads: 0,
                d_ff: 16,
            },
        }
    }

    /// The same model at small sizes, for slow devices (wgpu on llvmpipe, a CPU driver).
    pub fn small(self) -> Config {
        let (batch, layers, width, seq, heads, d_ff) = match self.kind {
            Kind::Mlp => (64, 8, 256, 0, 0, 0),
            Kind::Transformer => (2, 2, 64, 64, 4, 256),
            Kind::Convnet => (2, 2, 16, 16, 0, 0),
            Kind::ResMlp => (32, 50, 64, 0, 0, 0),
            Kind::Lstm => (4, 1, 16, 64, 0, 8),
        };
        Config {
            batch,
            layers,
            width,
            seq,
            heads,
            d_ff,
            ..self
        }
    }

    /// A one-line description.
    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Mlp => format!(
                "{} x (Linear {w}->{w} + GELU), batch {}",
                self.layers,
                self.batch,
                w = self.width
            ),
            Kind::Transformer => format!(
                "{} pre-norm encoder layers, d_model {}, {} heads, d_ff {}, seq {}, batch {}",
                self.layers, self.width, self.heads, self.d_ff, self.seq, self.batch
            ),
            Kind::Convnet => format!(
                "{} residual blocks of 2 x (conv3x3 {c}->{c}) + ReLU, input {}x{c}x{s}x{s}",
                self.layers,
                self.batch,
                c = self.width,
                s = self.seq
            ),
            Kind::ResMlp => format!(
                "{} residual blocks x + Linear {w}->{w}(GELU(Linear {w}->{w}(x))), batch {}",
                self.layers,
                self.batch,
                w = self.width
            ),
            Kind::Lstm => format!(
                "LSTM with the ops of Burn's nn::Lstm (4 gates, each Linear {}->{h} + \
                 Linear {h}->{h} with biases; every h written into a [batch, seq, {h}] output \
                 by slice_assign), {} steps, batch {}; the loss reads the last hidden state; \
                 one time step per layer (per-layer checkpoint: one region a step, the \
                 slice_assign outside it)",
                self.d_ff,
                self.seq,
                self.batch,
                h = self.width
            ),
        }
    }
}

/// Values and shape of one tensor.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// Row-major values.
    pub values: Vec<f32>,
    /// Shape.
    pub shape: Vec<usize>,
}

impl Leaf {
    /// As tensor data.
    pub fn data(&self) -> TensorData {
        TensorData::new(self.values.clone(), self.shape.clone())
    }
}

/// Seeded xorshift64* generator.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        // In [-1, 1).
        (bits as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// Uniform in `[-scale, scale) + offset`.
    fn leaf(&mut self, shape: &[usize], scale: f32, offset: f32) -> Leaf {
        let n = shape.iter().product();
        Leaf {
            values: (0..n).map(|_| self.next_f32() * scale + offset).collect(),
            shape: shape.to_vec(),
        }
    }
}

/// A model instance: its sizes, weights and input (the same for every engine).
pub struct Spec {
    /// Sizes.
    pub config: Config,
    /// Weights, in the order `forward` reads them.
    pub params: Vec<Leaf>,
    /// The input batch (no gradient).
    pub input: Leaf,
}

/// Parameters per transformer layer.
const TRANSFORMER_PARAMS: usize = 16;

/// The LSTM's gates, in the order of Burn's `Lstm` fields and of [`Spec::params`]: input,
/// forget, output, cell (candidate); each has an input-to-hidden and a hidden-to-hidden
/// linear with biases (Burn's `GateController`), four parameters.
const LSTM_GATES: usize = 4;

impl Spec {
    /// Generates weights and input from a fixed seed.
    pub fn new(config: Config) -> Spec {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ config.kind as u64);
        let c = &config;
        let uniform_scale = |fan_in: usize| (3.0 / fan_in as f32).sqrt();
        let mut params = Vec::new();
        let input = match c.kind {
            Kind::Mlp => {
                for _ in 0..c.layers {
                    // GELU halves the variance roughly: a gain of sqrt(2).
                    params.push(rng.leaf(&[c.width, c.width], uniform_scale(c.width) * 1.4, 0.0));
                    params.push(rng.leaf(&[1, c.width], 0.1, 0.0));
                }
                rng.leaf(&[c.batch, c.width], 1.0, 0.0)
            }
            Kind::Transformer => {
                let d = c.width;
                for _ in 0..c.layers {
                    params.push(rng.leaf(&[d], 0.1, 1.0)); // ln1 gamma
                    params.push(rng.leaf(&[d], 0.1, 0.0)); // ln1 beta
                    for _ in 0..4 {
                        // q, k, v, o projections and biases
                        params.push(rng.leaf(&[d, d], uniform_scale(d), 0.0));
                        params.push(rng.leaf(&[1, d], 0.1, 0.0));
                    }
                    params.push(rng.leaf(&[d], 0.1, 1.0)); // ln2 gamma
                    params.push(rng.leaf(&[d], 0.1, 0.0)); // ln2 beta
                    params.push(rng.leaf(&[d, c.d_ff], uniform_scale(d), 0.0));
                    params.push(rng.leaf(&[1, c.d_ff], 0.1, 0.0));
                    params.push(rng.leaf(&[c.d_ff, d], uniform_scale(c.d_ff), 0.0));
                    params.push(rng.leaf(&[1, d], 0.1, 0.0));
                }
                debug_assert_eq!(params.len(), c.layers * TRANSFORMER_PARAMS);
                rng.leaf(&[c.batch * c.seq, d], 1.0, 0.0)
            }
            Kind::Convnet => {
                let ch = c.width;
                for _ in 0..c.layers {
                    for gain in [1.4, 0.5] {
                        params.push(rng.leaf(&[ch, ch, 3, 3], uniform_scale(ch * 9) * gain, 0.0));
                        params.push(rng.leaf(&[ch], 0.1, 0.0));
                    }
                }
                rng.leaf(&[c.batch, ch, c.seq, c.seq], 1.0, 0.0)
            }
            Kind::ResMlp => {
                // The second layer of each block is scaled down by sqrt(blocks), so that the
                // residual stream stays of order one over the whole chain.
                let damp = (c.layers.max(1) as f32).sqrt();
                for _ in 0..c.layers {
                    params.push(rng.leaf(&[c.width, c.width], uniform_scale(c.width) * 1.4, 0.0));
                    params.push(rng.leaf(&[1, c.width], 0.1, 0.0));
                    params.push(rng.leaf(&[c.width, c.width], uniform_scale(c.width) / damp, 0.0));
                    params.push(rng.leaf(&[1, c.width], 0.1 / damp, 0.0));
                }
                rng.leaf(&[c.batch, c.width], 1.0, 0.0)
            }
            Kind::Lstm => {
                let (input, hidden) = (c.d_ff, c.width);
                for _ in 0..LSTM_GATES {
                    params.push(rng.leaf(&[input, hidden], uniform_scale(input), 0.0));
                    params.push(rng.leaf(&[1, hidden], 0.1, 0.0));
                    params.push(rng.leaf(&[hidden, hidden], uniform_scale(hidden), 0.0));
                    params.push(rng.leaf(&[1, hidden], 0.1, 0.0));
                }
                rng.leaf(&[c.batch, c.seq, input], 1.0, 0.0)
            }
        };
        Spec {
            config,
            params,
            input,
        }
    }

    /// Bytes of weights and input.
    pub fn bytes(&self) -> usize {
        4 * (self.input.values.len() + self.params.iter().map(|p| p.values.len()).sum::<usize>())
    }
}

/// The layer hook: wraps each layer in a `remat::checkpoint` region when asked, and records
/// the allocator's live bytes at each layer boundary.
pub struct Hook {
    regions: bool,
    start: Instant,
    base: u64,
    /// `(ns since the step started, live bytes - base)` after each layer.
    pub marks: RefCell<Vec<(u64, i64)>>,
}

impl Hook {
    /// A hook for one step; `base` is the live byte count before the step.
    pub fn new(regions: bool, start: Instant, base: u64) -> Hook {
        Hook {
            regions,
            start,
            base,
            marks: RefCell::new(Vec::with_capacity(64)),
        }
    }

    /// Runs one layer.
    pub fn layer<R>(&self, f: impl FnOnce() -> R) -> R {
        let out = if self.regions {
            remat::checkpoint(f)
        } else {
            f()
        };
        self.mark();
        out
    }

    /// Records a boundary.
    pub fn mark(&self) {
        let now = self.start.elapsed().as_nanos() as u64;
        let live = alloc::live() as i64 - self.base as i64;
        if let Ok(mut marks) = self.marks.try_borrow_mut()
            && marks.len() < marks.capacity()
        {
            marks.push((now, live));
        }
    }
}

fn linear<B: AutodiffBackend>(
    x: FloatTensor<B>,
    w: &FloatTensor<B>,
    b: &FloatTensor<B>,
) -> FloatTensor<B> {
    B::float_add(B::float_matmul(x, w.clone()), b.clone())
}

/// The forward pass: `x` is the input, `w` the weights in [`Spec::params`] order.
pub fn forward<B: AutodiffBackend>(
    config: &Config,
    w: &[FloatTensor<B>],
    x: FloatTensor<B>,
    hook: &Hook,
) -> FloatTensor<B> {
    let mut x = x;
    match config.kind {
        Kind::Mlp => {
            for p in w.chunks(2) {
                x = hook.layer(|| B::gelu(linear::<B>(x, &p[0], &p[1])));
            }
        }
        Kind::Transformer => {
            for p in w.chunks(TRANSFORMER_PARAMS) {
                x = hook.layer(|| encoder_layer::<B>(config, p, x));
            }
        }
        Kind::Convnet => {
            let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
            for p in w.chunks(4) {
                x = hook.layer(|| {
                    let y = B::conv2d(x.clone(), p[0].clone(), Some(p[1].clone()), options.clone());
                    let y = B::relu(y);
                    let y = B::conv2d(y, p[2].clone(), Some(p[3].clone()), options.clone());
                    B::relu(B::float_add(x, y))
                });
            }
        }
        Kind::ResMlp => {
            for p in w.chunks(4) {
                x = hook.layer(|| {
                    let h = B::gelu(linear::<B>(x.clone(), &p[0], &p[1]));
                    B::float_add(x, linear::<B>(h, &p[2], &p[3]))
                });
            }
        }
        Kind::Lstm => x = lstm::<B>(config, w, x, hook),
    }
    x
}

/// Burn's `Lstm::forward` (batch first, zero initial state, biases, no clipping) on
/// `x: [batch, seq, input]`, op for op at the backend level, each time step one hook layer.
/// Returns the last hidden state, which a sequence classifier reads; the `[batch, seq,
/// hidden]` output Burn builds with `slice_assign` is built too, and dropped.
fn lstm<B: AutodiffBackend>(
    c: &Config,
    p: &[FloatTensor<B>],
    x: FloatTensor<B>,
    hook: &Hook,
) -> FloatTensor<B> {
    let (b, s, h, input) = (c.batch, c.seq, c.width, c.d_ff);
    // Where `engine::prepare` puts the weights and the input.
    let device = B::Device::default();
    let state = Shape::from(vec![b, h]);
    let mut cell = B::float_zeros(state.clone(), &device, FloatDType::F32);
    let mut hidden = B::float_zeros(state, &device, FloatDType::F32);
    let mut output = B::float_empty(Shape::from(vec![b, s, h]), &device, FloatDType::F32);
    // `GateController::gate_product`: Linear(x_t) + Linear(h).
    let gate = |g: usize, x_t: &FloatTensor<B>, h: &FloatTensor<B>| {
        let q = &p[4 * g..4 * g + 4];
        B::float_add(
            linear::<B>(x_t.clone(), &q[0], &q[1]),
            linear::<B>(h.clone(), &q[2], &q[3]),
        )
    };
    for t in 0..s {
        let step = [
            Slice::full(),
            Slice::new(t as isize, Some(t as isize + 1), 1),
            Slice::full(),
        ];
        (cell, hidden) = hook.layer(|| {
            // `iter_dim(1)` and `squeeze_dim(1)`.
            let x_t = B::float_reshape(
                B::float_slice(x.clone(), &step),
                Shape::from(vec![b, input]),
            );
            let i = B::sigmoid(gate(0, &x_t, &hidden));
            let f = B::sigmoid(gate(1, &x_t, &hidden));
            let o = B::sigmoid(gate(2, &x_t, &hidden));
            let g = B::float_tanh(gate(3, &x_t, &hidden));
            let cell = B::float_add(B::float_mul(f, cell), B::float_mul(i, g));
            let hidden = B::float_mul(o, B::float_tanh(cell.clone()));
            (cell, hidden)
        });
        // Outside the step's region: a region keeps its outputs for backward, and with the
        // output buffer among them the per-layer checkpoint held every step's copy of it
        // (64 steps: 16.6 MiB held against SaveAll's 1.8 MiB), which no backward reads.
        let row = B::float_reshape(hidden.clone(), Shape::from(vec![b, 1, h]));
        output = B::float_slice_assign(output, &step, row);
    }
    drop(output);
    hidden
}

/// One pre-norm encoder layer on `x: [batch * seq, d_model]`.
fn encoder_layer<B: AutodiffBackend>(
    c: &Config,
    p: &[FloatTensor<B>],
    x: FloatTensor<B>,
) -> FloatTensor<B> {
    let (b, s, d, h) = (c.batch, c.seq, c.width, c.heads);
    let dh = d / h;
    let heads = |t: FloatTensor<B>| {
        B::float_swap_dims(B::float_reshape(t, Shape::from(vec![b, s, h, dh])), 1, 2)
    };
    let n = B::layer_norm(x.clone(), p[0].clone(), Some(p[1].clone()), 1e-5);
    let q = heads(linear::<B>(n.clone(), &p[2], &p[3]));
    let k = heads(linear::<B>(n.clone(), &p[4], &p[5]));
    let v = heads(linear::<B>(n, &p[6], &p[7]));
    let scores = B::float_mul_scalar(
        B::float_matmul(q, B::float_swap_dims(k, 2, 3)),
        (1.0 / (dh as f32).sqrt()).into(),
    );
    let attn = B::softmax(scores, 3);
    let ctx = B::float_matmul(attn, v);
    let ctx = B::float_reshape(B::float_swap_dims(ctx, 1, 2), Shape::from(vec![b * s, d]));
    let x = B::float_add(x, linear::<B>(ctx, &p[8], &p[9]));
    let n = B::layer_norm(x.clone(), p[10].clone(), Some(p[11].clone()), 1e-5);
    let ff = linear::<B>(B::gelu(linear::<B>(n, &p[12], &p[13])), &p[14], &p[15]);
    B::float_add(x, ff)
}
