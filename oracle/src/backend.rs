//! Backend-level comparison harness: one program, two autodiff engines, one process.
//!
//! A [`Program`] maps leaf tensors to an output with backend ops only; [`run`] executes it on
//! any [`AutodiffBackend`] (Burn's `burn_autodiff::Autodiff<B>` or `remat::Autodiff<B>`),
//! seeds backward with fixed weights and returns the output and every leaf's gradient;
//! [`assert_close`] compares two such results.

pub use burn_backend::tensor::FloatTensor;
pub use burn_backend::{AutodiffBackend, Backend};
use burn_backend::{TensorData, TensorMetadata};

/// Burn's engine over Flex.
pub type BurnFlex = burn_autodiff::Autodiff<burn_flex::Flex>;
/// remat over Flex.
pub type RematFlex = remat::Autodiff<burn_flex::Flex>;
/// Burn's engine over NdArray (deprecated in Burn 0.22 but still the reference backend of
/// many Burn tests).
#[allow(deprecated)]
pub type BurnNdArray = burn_autodiff::Autodiff<burn_ndarray::NdArray>;
/// remat over NdArray.
#[allow(deprecated)]
pub type RematNdArray = remat::Autodiff<burn_ndarray::NdArray>;

/// One leaf of a program: values and shape.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// Row-major values.
    pub values: Vec<f32>,
    /// Shape.
    pub shape: Vec<usize>,
}

impl Leaf {
    /// Deterministic values in `[-1, 1) + offset` (see [`crate::programs::synthetic`]).
    pub fn synthetic(shape: &[usize], seed: u64, offset: f32) -> Self {
        let n = shape.iter().product();
        Self {
            values: crate::programs::synthetic(n, seed)
                .into_iter()
                .map(|v| v + offset)
                .collect(),
            shape: shape.to_vec(),
        }
    }

    /// The same leaf with every value mapped by `f`.
    pub fn map(mut self, f: impl Fn(f32) -> f32) -> Self {
        self.values.iter_mut().for_each(|v| *v = f(*v));
        self
    }
}

/// A backend-level program, generic over the autodiff engine.
pub trait Program {
    /// Runs the forward pass on the leaves.
    fn forward<B: AutodiffBackend>(&self, leaves: &[FloatTensor<B>]) -> FloatTensor<B>;
}

/// Output values and the gradient of each leaf.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The program's output, row-major.
    pub output: Vec<f32>,
    /// One gradient per leaf (`None` where the engine gave none).
    pub grads: Vec<Option<Vec<f32>>>,
}

/// Runs `program` on `B` with tracked leaves; backward starts from the output multiplied by
/// fixed weights (so every output element has a distinct cotangent; both engines seed a
/// non-scalar root with ones, which avoids needing a reduction op here).
pub fn run<B: AutodiffBackend>(program: &impl Program, leaves: &[Leaf]) -> Outcome {
    let (output, grads) = run_dtype::<B>(program, leaves, false);
    let f32s = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
    Outcome {
        output: f32s(output),
        grads: grads.into_iter().map(|g| g.map(f32s)).collect(),
    }
}

/// The backward weights of an output of `n` elements.
fn weights(n: usize) -> Vec<f64> {
    crate::programs::synthetic(n, 99)
        .into_iter()
        .map(f64::from)
        .collect()
}

fn values64<B: Backend>(tensor: FloatTensor<B>) -> Vec<f64> {
    let data = burn_backend::read_sync(B::float_into_data(tensor)).expect("tensor data");
    data.convert::<f64>()
        .try_to_vec::<f64>()
        .expect("f64 values")
}

fn leaf_data(leaf: &Leaf, double: bool) -> TensorData {
    if double {
        let v: Vec<f64> = leaf.values.iter().map(|v| f64::from(*v)).collect();
        TensorData::new(v, leaf.shape.clone())
    } else {
        TensorData::new(leaf.values.clone(), leaf.shape.clone())
    }
}

/// [`run`] in f32 or f64 (`double`), with values returned as f64.
#[allow(clippy::type_complexity)]
pub fn run_dtype<B: AutodiffBackend>(
    program: &impl Program,
    leaves: &[Leaf],
    double: bool,
) -> (Vec<f64>, Vec<Option<Vec<f64>>>) {
    let device = B::Device::default();
    let tracked: Vec<FloatTensor<B>> = leaves
        .iter()
        .map(|leaf| {
            B::float_set_require_grad(B::float_from_data(leaf_data(leaf, double), &device), true)
        })
        .collect();
    let output = program.forward::<B>(&tracked);
    let shape = output.shape();
    let out_values = values64::<B::InnerBackend>(B::inner(output.clone()));
    let w = weights(out_values.len());
    let w = if double {
        TensorData::new(w, shape)
    } else {
        TensorData::new(w.into_iter().map(|v| v as f32).collect::<Vec<f32>>(), shape)
    };
    let loss = B::float_mul(output, B::float_from_data(w, &device));
    let grads = B::backward(loss);
    let grads = tracked
        .iter()
        .map(|leaf| B::grad(leaf, &grads).map(values64::<B::InnerBackend>))
        .collect();
    (out_values, grads)
}

/// The loss `sum(w * program(leaves))` in f64, forward only.
fn loss64<B: AutodiffBackend>(program: &impl Program, leaves: &[Leaf64]) -> f64 {
    let device = B::Device::default();
    let tensors: Vec<FloatTensor<B>> = leaves
        .iter()
        .map(|(v, s)| B::float_from_data(TensorData::new(v.clone(), s.clone()), &device))
        .collect();
    let out = values64::<B::InnerBackend>(B::inner(program.forward::<B>(&tensors)));
    out.iter().zip(weights(out.len())).map(|(o, w)| o * w).sum()
}

type Leaf64 = (Vec<f64>, Vec<usize>);

/// Central finite differences (f64, step `h`) of `sum(w * program(leaves))` for every
/// element of every leaf listed in `wrt` (others get `None`).
pub fn finite_differences<B: AutodiffBackend>(
    program: &impl Program,
    leaves: &[Leaf],
    wrt: &[usize],
    h: f64,
) -> Vec<Option<Vec<f64>>> {
    let base: Vec<Leaf64> = leaves
        .iter()
        .map(|l| {
            (
                l.values.iter().map(|v| f64::from(*v)).collect(),
                l.shape.clone(),
            )
        })
        .collect();
    (0..leaves.len())
        .map(|i| {
            if !wrt.contains(&i) {
                return None;
            }
            Some(
                (0..base[i].0.len())
                    .map(|j| {
                        let mut plus = base.clone();
                        plus[i].0[j] += h;
                        let mut minus = base.clone();
                        minus[i].0[j] -= h;
                        (loss64::<B>(program, &plus) - loss64::<B>(program, &minus)) / (2.0 * h)
                    })
                    .collect(),
            )
        })
        .collect()
}

/// The remat engine over `I` under a strategy.
type Remat<I, C> = remat::Autodiff<I, C>;
type RNo = remat::checkpoint::strategy::NoCheckpointing;
type RBal = remat::checkpoint::strategy::BalancedCheckpointing;
type BNo = burn_autodiff::checkpoint::strategy::NoCheckpointing;
type BBal = burn_autodiff::checkpoint::strategy::BalancedCheckpointing;

/// remat's results over `I` under `NoCheckpointing`, `BalancedCheckpointing` and
/// `with_policy(RecomputeAll)`, asserted bit-identical; returns the first.
pub fn remat_consistent<I: Backend>(
    name: &str,
    program: &impl Program,
    leaves: &[Leaf],
) -> Outcome {
    remat_agree::<I>(name, program, leaves, None)
}

/// remat's results over `I` under `NoCheckpointing`, `BalancedCheckpointing` and
/// `with_policy(RecomputeAll)`: bit-identical when `rtol` is `None`, else within `rtol`
/// (for inner kernels that are not deterministic themselves); returns the first.
fn remat_agree<I: Backend>(
    name: &str,
    program: &impl Program,
    leaves: &[Leaf],
    rtol: Option<f32>,
) -> Outcome {
    let no = run::<Remat<I, RNo>>(program, leaves);
    let bal = run::<Remat<I, RBal>>(program, leaves);
    let all = remat::with_policy(remat::Policy::RecomputeAll, || {
        run::<Remat<I, RNo>>(program, leaves)
    });
    for (label, other) in [("Balanced", &bal), ("RecomputeAll", &all)] {
        let what = format!("{name}: {label} vs NoCheckpointing");
        match rtol {
            None => assert_bitwise(&what, other, &no),
            Some(rtol) => assert_close(&what, other, &no, rtol),
        }
    }
    no
}

/// Asserts two outcomes are bit-identical.
pub fn assert_bitwise(name: &str, a: &Outcome, b: &Outcome) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    assert_eq!(bits(&a.output), bits(&b.output), "{name}: output bits");
    assert_eq!(a.grads.len(), b.grads.len(), "{name}: leaf count");
    for (i, (x, y)) in a.grads.iter().zip(&b.grads).enumerate() {
        assert_eq!(
            x.as_deref().map(bits),
            y.as_deref().map(bits),
            "{name}: grad bits of leaf {i}"
        );
    }
}

/// Default tolerance of [`compare`]: relative, in f32.
pub const RTOL: f32 = 1e-5;

/// Runs `program` on Burn's autodiff and on remat, over Flex and NdArray, under
/// `NoCheckpointing` and `BalancedCheckpointing` (and remat also under
/// `with_policy(RecomputeAll)`): remat must agree with Burn within [`RTOL`] and be
/// bit-identical across its strategies and policies.
pub fn compare(name: &str, program: &impl Program, leaves: &[Leaf]) {
    compare_tol(name, program, leaves, RTOL);
}

/// [`compare`] with a given relative tolerance.
pub fn compare_tol(name: &str, program: &impl Program, leaves: &[Leaf], rtol: f32) {
    compare_both(name, program, leaves, rtol, None);
}

/// Over Flex (remat's strategies bit for bit) and NdArray (within `ndarray_consistency`
/// when given).
fn compare_both(
    name: &str,
    program: &impl Program,
    leaves: &[Leaf],
    rtol: f32,
    ndarray_consistency: Option<f32>,
) {
    compare_on::<burn_flex::Flex>(&format!("{name} (Flex)"), program, leaves, rtol);
    #[allow(deprecated)]
    compare_with::<burn_ndarray::NdArray>(
        &format!("{name} (NdArray)"),
        program,
        leaves,
        rtol,
        ndarray_consistency,
    );
}

/// [`compare`] for a program whose NdArray backward kernel is itself not deterministic
/// (NdArray's `deform_conv2d` backward sums into the input gradient with parallel atomic
/// float adds, so two runs of the same kernel can differ in the last bits): over NdArray,
/// remat's strategies are compared within `rtol` instead of bit for bit. Flex is checked
/// as in [`compare`].
pub fn compare_ndarray_nondeterministic(
    name: &str,
    program: &impl Program,
    leaves: &[Leaf],
    rtol: f32,
) {
    compare_both(name, program, leaves, rtol, Some(rtol));
}

/// [`compare`] over one inner backend.
pub fn compare_on<I: Backend>(name: &str, program: &impl Program, leaves: &[Leaf], rtol: f32) {
    compare_with::<I>(name, program, leaves, rtol, None);
}

/// [`compare_on`], with remat's strategies compared within `consistency` (bit for bit
/// when `None`).
fn compare_with<I: Backend>(
    name: &str,
    program: &impl Program,
    leaves: &[Leaf],
    rtol: f32,
    consistency: Option<f32>,
) {
    let ours = remat_agree::<I>(name, program, leaves, consistency);
    let burn = run::<burn_autodiff::Autodiff<I, BNo>>(program, leaves);
    assert_close(&format!("{name} NoCheckpointing"), &ours, &burn, rtol);
    let burn = run::<burn_autodiff::Autodiff<I, BBal>>(program, leaves);
    assert_close(&format!("{name} BalancedCheckpointing"), &ours, &burn, rtol);
}

/// Where Burn's autodiff cannot serve as the reference (it panics, or differs by design):
/// remat's gradients (bit-identical across strategies and policies, over Flex and NdArray)
/// are checked against central finite differences in f64 over Flex, for the leaves in `wrt`,
/// within `rtol` relative (floor at the largest magnitude). Returns remat's f64 gradients.
pub fn check_fd(
    name: &str,
    program: &impl Program,
    leaves: &[Leaf],
    wrt: &[usize],
    rtol: f64,
) -> Vec<Option<Vec<f64>>> {
    remat_consistent::<burn_flex::Flex>(&format!("{name} (Flex)"), program, leaves);
    #[allow(deprecated)]
    remat_consistent::<burn_ndarray::NdArray>(&format!("{name} (NdArray)"), program, leaves);
    let (_, ours) = run_dtype::<Remat<burn_flex::Flex, RNo>>(program, leaves, true);
    let fd = finite_differences::<Remat<burn_flex::Flex, RNo>>(program, leaves, wrt, 1e-6);
    for &i in wrt {
        let a = ours[i]
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: leaf {i} has no gradient"));
        let b = fd[i].as_ref().expect("finite differences");
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
        for (j, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= rtol * y.abs().max(scale),
                "{name}: leaf {i} element {j}: remat {x} vs finite difference {y}"
            );
        }
    }
    ours
}

/// An int tensor of `B` (i64 values).
pub fn ints<B: Backend>(values: Vec<i64>, shape: &[usize]) -> burn_backend::tensor::IntTensor<B> {
    B::int_from_data(TensorData::new(values, shape.to_vec()), &Default::default())
}

/// A bool tensor of `B`.
pub fn bools<B: Backend>(
    values: Vec<bool>,
    shape: &[usize],
) -> burn_backend::tensor::BoolTensor<B> {
    B::bool_from_data(TensorData::new(values, shape.to_vec()), &Default::default())
}

/// An untracked float constant of `B` from f32 values (in the leaves' dtype).
pub fn constant<B: AutodiffBackend>(
    leaf_like: &FloatTensor<B>,
    values: Vec<f32>,
    shape: &[usize],
) -> FloatTensor<B> {
    let data = TensorData::new(values, shape.to_vec()).convert_dtype(leaf_like.dtype());
    B::float_from_data(data, &Default::default())
}

/// Builds a [`Program`] from a body generic over the backend `B`, with leaves `x`:
/// `program!(|B, x| B::float_exp(x[0].clone()))`, or with a captured parameter:
/// `program!(p: usize = dim; |B, x| B::float_sum_dim(x[0].clone(), *p))`.
#[macro_export]
macro_rules! program {
    (|$b:ident, $x:ident| $body:expr) => {{
        struct P;
        impl $crate::backend::Program for P {
            fn forward<$b: $crate::backend::AutodiffBackend>(
                &self,
                $x: &[$crate::backend::FloatTensor<$b>],
            ) -> $crate::backend::FloatTensor<$b> {
                $body
            }
        }
        P
    }};
    ($p:ident: $t:ty = $v:expr; |$b:ident, $x:ident| $body:expr) => {{
        struct P($t);
        impl $crate::backend::Program for P {
            fn forward<$b: $crate::backend::AutodiffBackend>(
                &self,
                $x: &[$crate::backend::FloatTensor<$b>],
            ) -> $crate::backend::FloatTensor<$b> {
                let $p = &self.0;
                $body
            }
        }
        P($v)
    }};
}

/// The fraction of a tensor's largest magnitude below which [`close`] compares absolutely.
pub const FLOOR: f32 = 0.1;

/// Asserts element-wise `|a - b| <= rtol * max(|b|, FLOOR * max|b|)` for outputs and gradients.
pub fn assert_close(name: &str, ours: &Outcome, reference: &Outcome, rtol: f32) {
    close(
        &format!("{name}: output"),
        &ours.output,
        &reference.output,
        rtol,
    );
    assert_eq!(
        ours.grads.len(),
        reference.grads.len(),
        "{name}: leaf count"
    );
    for (i, (a, b)) in ours.grads.iter().zip(&reference.grads).enumerate() {
        match (a, b) {
            (Some(a), Some(b)) => close(&format!("{name}: grad of leaf {i}"), a, b, rtol),
            (None, None) => {}
            _ => panic!(
                "{name}: leaf {i} has a gradient on one engine only (remat: {}, burn: {})",
                a.is_some(),
                b.is_some()
            ),
        }
    }
}

/// Element-wise relative comparison, `|a - b| <= rtol * max(|b|, FLOOR * max|reference|)`:
/// values near zero are compared relative to a tenth of the tensor's largest magnitude.
pub fn close(what: &str, ours: &[f32], reference: &[f32], rtol: f32) {
    assert_eq!(ours.len(), reference.len(), "{what}: length");
    let max = reference.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in ours.iter().zip(reference).enumerate() {
        let tol = rtol * b.abs().max(FLOOR * max).max(f32::MIN_POSITIVE);
        assert!(
            (a - b).abs() <= tol,
            "{what}: element {i}: remat {a} vs burn {b} (|diff| {} > tol {tol})",
            (a - b).abs()
        );
    }
}
