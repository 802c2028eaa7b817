//! Shared test harness: checks an op's gradients from several sides.
//!
//! [`check`] runs a program over f64 leaves on `Autodiff<Flex>` and asserts
//! - the gradients are bit-identical under `SaveAll`, `Balanced`, `RecomputeAll` and a
//!   `checkpoint` region (replays are deterministic);
//! - they match a central finite difference along one random direction (f64);
//! - the saved-value counters return to where they were (nothing leaks).
#![allow(dead_code)]

pub mod counting;

use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData, ops::FloatTensorOps};
use burn_flex::Flex;
use remat::{Autodiff, Policy};

/// The backend under test.
pub type A = Autodiff<Flex>;
/// Its inner backend.
pub type I = Flex;
/// A float tensor of the backend under test.
pub type T = FloatTensor<A>;
/// An op of one tensor, for tables of ops.
pub type Op1 = fn(T) -> T;
/// An op of two tensors, for tables of ops.
pub type Op2 = fn(T, T) -> T;

/// A small deterministic generator (xorshift), so tests need no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform in [-1, 1).
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// An f64 tensor on the inner backend.
pub fn inner(values: Vec<f64>, shape: &[usize]) -> FloatTensor<I> {
    I::float_from_data(TensorData::new(values, shape.to_vec()), &Default::default())
}

/// An untracked f64 tensor of the backend under test.
pub fn tensor(values: Vec<f64>, shape: &[usize]) -> T {
    A::float_from_data(TensorData::new(values, shape.to_vec()), &Default::default())
}

/// The values of an inner tensor as f64.
pub fn values(t: FloatTensor<I>) -> Vec<f64> {
    let data = burn_backend::read_sync(I::float_into_data(t)).unwrap();
    data.convert::<f64>().try_into_vec::<f64>().unwrap()
}

/// One input of a checked program: values and shape.
#[derive(Clone, Debug)]
pub struct Input {
    pub values: Vec<f64>,
    pub shape: Vec<usize>,
}

impl Input {
    /// Random values in [-1, 1) (shifted by `offset`) with `shape`.
    pub fn random(rng: &mut Rng, shape: &[usize], offset: f64) -> Self {
        let n = shape.iter().product();
        Self {
            values: rng.vec(n).into_iter().map(|v| v + offset).collect(),
            shape: shape.to_vec(),
        }
    }
}

/// Runs `program` on leaves made from `inputs`, seeds backward with the fixed random
/// weights `r` (so the loss is `sum(r * program(x))`), and returns the output values and the
/// gradient of each input.
fn grads_of(inputs: &[Input], program: &dyn Fn(&[T]) -> T, seed: u64) -> (Vec<f64>, Vec<Vec<f64>>) {
    let leaves: Vec<T> = inputs
        .iter()
        .map(|i| A::float_set_require_grad(tensor(i.values.clone(), &i.shape), true))
        .collect();
    let out = program(&leaves);
    let shape = burn_backend::TensorMetadata::shape(&out);
    let n = shape.num_elements();
    let r = tensor(Rng::new(seed).vec(n), &shape.to_vec());
    let out_values = values(A::inner(out.clone()));
    let loss = A::float_mul(out, r);
    let grads = A::backward(loss);
    let gs = leaves
        .iter()
        .zip(inputs)
        .map(|(leaf, input)| match A::grad(leaf, &grads) {
            Some(g) => values(g),
            None => vec![0.0; input.values.len()],
        })
        .collect();
    (out_values, gs)
}

fn loss(inputs: &[Input], program: &dyn Fn(&[T]) -> T, seed: u64) -> f64 {
    let xs: Vec<T> = inputs
        .iter()
        .map(|i| tensor(i.values.clone(), &i.shape))
        .collect();
    let out = program(&xs);
    let n = burn_backend::TensorMetadata::shape(&out).num_elements();
    let r = Rng::new(seed).vec(n);
    values(A::inner(out))
        .iter()
        .zip(r)
        .map(|(a, b)| a * b)
        .sum()
}

/// Checks the gradients of `program` (see the module docs). Returns the gradients.
///
/// `differentiable` is false for programs whose finite difference is meaningless (e.g.
/// piecewise-constant ops); the policy comparison still runs.
pub fn check(
    name: &str,
    inputs: &[Input],
    program: impl Fn(&[T]) -> T,
    differentiable: bool,
) -> Vec<Vec<f64>> {
    // Statistics are process-wide: checks in one test binary run one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let seed = 0xC0FFEE;
    let before = remat::stats().live_bytes;
    let (_, reference) = remat::with_policy(Policy::SaveAll, || grads_of(inputs, &program, seed));
    for (label, policy) in [
        ("Balanced", Policy::Balanced),
        ("RecomputeAll", Policy::RecomputeAll),
    ] {
        let (_, got) = remat::with_policy(policy, || grads_of(inputs, &program, seed));
        assert_eq!(
            got, reference,
            "{name}: {label} gradients differ from SaveAll"
        );
    }
    let (_, region) = remat::checkpoint(|| grads_of(inputs, &program, seed));
    assert_eq!(
        region, reference,
        "{name}: checkpoint-region gradients differ from SaveAll"
    );
    assert_eq!(
        remat::stats().live_bytes,
        before,
        "{name}: saved values leaked"
    );

    if differentiable {
        let mut rng = Rng::new(7);
        let dirs: Vec<Vec<f64>> = inputs.iter().map(|i| rng.vec(i.values.len())).collect();
        let eps = 1e-6;
        let shifted = |sign: f64| -> Vec<Input> {
            inputs
                .iter()
                .zip(&dirs)
                .map(|(i, d)| Input {
                    values: i
                        .values
                        .iter()
                        .zip(d)
                        .map(|(v, d)| v + sign * eps * d)
                        .collect(),
                    shape: i.shape.clone(),
                })
                .collect()
        };
        let numeric = (loss(&shifted(1.0), &program, seed) - loss(&shifted(-1.0), &program, seed))
            / (2.0 * eps);
        let analytic: f64 = reference
            .iter()
            .zip(&dirs)
            .map(|(g, d)| g.iter().zip(d).map(|(a, b)| a * b).sum::<f64>())
            .sum();
        let scale = numeric.abs().max(analytic.abs()).max(1e-3);
        assert!(
            (numeric - analytic).abs() / scale < 1e-5,
            "{name}: finite difference {numeric} vs backward {analytic}"
        );
    }
    reference
}

/// Runs `f` on a thread of its own and waits for it at most a minute: a deadlock fails the
/// test instead of hanging it, and a panic in `f` fails it too.
pub fn finishes<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    use std::sync::mpsc::{self, RecvTimeoutError};
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(value) => value,
        Err(RecvTimeoutError::Timeout) => panic!("{what}: still running after 60 s (deadlock)"),
        Err(RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}
