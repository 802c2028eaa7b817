//! Backend-level comparison harness: one program, two autodiff engines, one process.
//!
//! A [`Program`] maps leaf tensors to an output with backend ops only; [`run`] executes it on
//! any [`AutodiffBackend`] (Burn's `burn_autodiff::Autodiff<B>` or `remat::Autodiff<B>`),
//! seeds backward with fixed weights and returns the output and every leaf's gradient;
//! [`assert_close`] compares two such results.

use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, TensorData, TensorMetadata};

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

fn values<B: Backend>(tensor: FloatTensor<B>) -> Vec<f32> {
    let data = burn_backend::read_sync(B::float_into_data(tensor)).expect("tensor data");
    data.convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 values")
}

/// Runs `program` on `B` with tracked leaves; backward starts from the output multiplied by
/// fixed weights (so every output element has a distinct cotangent; both engines seed a
/// non-scalar root with ones, which avoids needing a reduction op here).
pub fn run<B: AutodiffBackend>(program: &impl Program, leaves: &[Leaf]) -> Outcome {
    let device = B::Device::default();
    let tracked: Vec<FloatTensor<B>> = leaves
        .iter()
        .map(|leaf| {
            let data = TensorData::new(leaf.values.clone(), leaf.shape.clone());
            B::float_set_require_grad(B::float_from_data(data, &device), true)
        })
        .collect();
    let output = program.forward::<B>(&tracked);
    let shape = output.shape();
    let out_values = values::<B::InnerBackend>(B::inner(output.clone()));
    let weights = crate::programs::synthetic(out_values.len(), 99);
    let weights = B::float_from_data(TensorData::new(weights, shape), &device);
    let loss = B::float_mul(output, weights);
    let grads = B::backward(loss);
    Outcome {
        output: out_values,
        grads: tracked
            .iter()
            .map(|leaf| B::grad(leaf, &grads).map(values::<B::InnerBackend>))
            .collect(),
    }
}

/// Asserts element-wise `|a - b| <= rtol * max(|b|, rms(b))` for outputs and gradients.
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

/// Element-wise relative comparison with a floor at the reference's RMS.
pub fn close(what: &str, ours: &[f32], reference: &[f32], rtol: f32) {
    assert_eq!(ours.len(), reference.len(), "{what}: length");
    let rms = (reference.iter().map(|v| v * v).sum::<f32>() / reference.len().max(1) as f32).sqrt();
    for (i, (a, b)) in ours.iter().zip(reference).enumerate() {
        let tol = rtol * b.abs().max(rms).max(f32::MIN_POSITIVE);
        assert!(
            (a - b).abs() <= tol,
            "{what}: element {i}: remat {a} vs burn {b} (|diff| {} > tol {tol})",
            (a - b).abs()
        );
    }
}
