//! Shared test harness: checks an op's gradients from several sides.
//!
//! [`check`] runs a program over f64 leaves on `Autodiff<Flex>` and asserts
//! - every leaf gets a gradient: a missing one is a failure, never read as zeros (Burn's
//!   autodiff registers a zero tensor for a leaf whose gradient is mathematically zero, e.g.
//!   through `round`, and remat must too);
//! - the gradients are bit-identical under every policy of [`policies`] and in a
//!   `checkpoint` region (replays are deterministic);
//! - they match central finite differences in f64 along [`DIRECTIONS`] random directions,
//!   within [`RTOL`] relative where the program is smooth ([`Fd`] documents the exceptions,
//!   each at the call that needs one);
//! - the saved-value counters return to where they were (nothing leaks).
//!
//! # How the finite difference is taken
//!
//! Along a direction `v` (each leaf's random direction in `[-1, 1)` scaled by that leaf's
//! root-mean-square value, so the step follows the input's scale), `D(h) = (L(x + h v) -
//! L(x - h v)) / 2h` is compared with `<grad, v>`. A smooth program uses Richardson's
//! extrapolation `(4 D(h/2) - D(h)) / 3` with `h` = [`SMOOTH_STEP`]: its truncation error is
//! O(h^4), far below the tolerance, and the step is large enough that rounding stays small.
//! A piecewise program ([`Fd::Kinked`]) uses the small step [`KINK_STEP`], so that a kink
//! or a tie is rarely within reach, and `D(h/2)`; a direction whose stencil contains a kink
//! (seen from the one-sided quotients at `h` and `h/2`, or `D(h)` against `D(h/2)`) proves
//! nothing and is skipped; at least one direction must be conclusive.
//!
//! The loss is evaluated on untracked leaves (a program that needs to, e.g. to hold a
//! `detach`ed value fixed, can tell the two kinds of runs apart with `is_tracked`).
//!
//! The error is measured against `sum |grad_i v_i|` (the size of the terms before they
//! cancel) plus the rounding floor of the loss itself (`sum |r_j out_j|` times a few ulps,
//! over the step): so a gradient that is zero, or a directional derivative that cancels to
//! zero, is still checked at the precision f64 allows.
#![allow(dead_code)]

pub mod counting;
pub mod heap;

use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData, ops::FloatTensorOps};
use burn_flex::Flex;
use remat::{Autodiff, Cost, Policy, Selector};

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

/// Relative tolerance of the finite-difference check of a smooth program.
pub const RTOL: f64 = 1e-9;
/// Richardson step of a smooth program, relative to each leaf's scale.
pub const SMOOTH_STEP: f64 = 1e-3;
/// Step of a piecewise program, relative to each leaf's scale.
pub const KINK_STEP: f64 = 1e-6;
/// Random directions per check.
pub const DIRECTIONS: usize = 3;
/// Ulps of the loss that one evaluation may be off by (the rounding floor).
const LOSS_ULPS: f64 = 64.0;

/// How [`check`] compares gradients with finite differences.
#[derive(Clone, Copy, Debug)]
pub enum Fd {
    /// Smooth around the inputs: within [`RTOL`].
    Smooth,
    /// Piecewise smooth (relu, abs, clamp, max/min, sort, max pooling ...): the string says
    /// where the kinks are. Small step, same tolerance; a direction that crosses a kink is
    /// skipped, and at least one direction must be conclusive.
    Kinked(&'static str),
    /// As [`Fd::Kinked`], for generated programs whose inputs may sit exactly on kinks: ties
    /// that `detach` makes (`relu(detach(x) - x)`, or a row max over `detach(y) * x` and
    /// `detach(x) * y`, tied at the inputs but not around them, where the detached value is
    /// held). Finite differences cannot judge such a point (several kinks at once, each
    /// resolved by the rule's own choice), so when every direction sees a kink the check
    /// counts it ([`at_ties`]) instead of failing; the caller bounds how often that happens.
    KinkedAtTies(&'static str),
    /// Smooth, with a tolerance of its own: the string says why.
    Within(f64, &'static str),
    /// No finite-difference check: the string says why (e.g. a piecewise-constant output,
    /// whose derivative is zero where finite differences see jumps).
    Skip(&'static str),
}

/// Finite-difference checks skipped because the inputs sat on kinks ([`Fd::KinkedAtTies`]).
static AT_TIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many [`Fd::KinkedAtTies`] checks found every direction on a kink, so far in this
/// process.
pub fn at_ties() -> u64 {
    AT_TIES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The policies every check runs under; the first (`SaveAll`) is the reference the others
/// must match bit for bit.
///
/// This is the hook for new policies: every op-family test and the random-DAG fuzzer run
/// under each. [`check`] also runs each program under the smallest budget the planner
/// guarantees for it, and halfway between that and keeping everything.
pub fn policies() -> Vec<(&'static str, Policy)> {
    vec![
        ("SaveAll", Policy::SaveAll),
        ("Balanced", Policy::Balanced),
        ("RecomputeAll", Policy::RecomputeAll),
        (
            "Selective(keep compute)",
            Policy::Selective(Selector::keep_costs(&[Cost::Compute])),
        ),
        (
            "Selective(keep views and cheap)",
            Policy::Selective(Selector::keep_costs(&[Cost::Alias, Cost::Cheap])),
        ),
        ("Budget(unbounded)", Policy::Budget(u64::MAX)),
    ]
}

/// Runs `f` under `Policy::Budget(budget)`, raised to the smallest budget that fits the
/// last step when it is below (`remat::check_budget`). A forward pass may hold values of
/// side computations that the last step's graph does not show: when `f` stops as too small
/// (`remat::try_with_budget`'s `Err`), it runs again under the least budget the error names.
pub fn under_budget<R>(budget: u64, f: impl Fn() -> R) -> R {
    let mut budget = budget;
    for _ in 0..16 {
        match remat::check_budget(budget) {
            Ok(()) | Err(remat::BudgetError::NoStep) => {}
            Err(remat::BudgetError::TooSmall {
                min_budget_bytes, ..
            }) => budget = min_budget_bytes,
        }
        match remat::try_with_budget(budget, &f) {
            Ok(result) => return result,
            Err(remat::BudgetError::TooSmall {
                min_budget_bytes, ..
            }) => budget = budget.max(min_budget_bytes),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("remat's smallest budgets did not work, up to {budget} bytes");
}

/// The smallest budget and the keep-all peak of the last step this thread ran under a
/// budget.
pub fn budget_range() -> (u64, u64) {
    let t = remat::tradeoff().expect("a step ran under a budget on this thread");
    (t.min_budget_bytes, t.keep_all_bytes)
}

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
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next() + 1.0) / 2.0 * n as f64) as usize).min(n - 1)
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

    /// The root-mean-square of the values (the leaf's scale for finite differences), at
    /// least `1e-3` so that an all-zero leaf is still perturbed.
    fn scale(&self) -> f64 {
        let n = self.values.len().max(1) as f64;
        (self.values.iter().map(|v| v * v).sum::<f64>() / n)
            .sqrt()
            .max(1e-3)
    }
}

/// A program's output and each leaf's gradient (`None` where the engine gave none).
type Outcome = (Vec<f64>, Vec<Option<Vec<f64>>>);

/// The fixed backward weights `r` of an output of `n` elements: the loss is
/// `sum(r * program(x))`.
fn weights(seed: u64, n: usize) -> Vec<f64> {
    Rng::new(seed).vec(n)
}

/// Runs `program` on leaves made from `inputs` and backward from `sum(r * output)`.
fn grads_of(inputs: &[Input], program: &dyn Fn(&[T]) -> T, seed: u64) -> Outcome {
    let leaves: Vec<T> = inputs
        .iter()
        .map(|i| A::float_set_require_grad(tensor(i.values.clone(), &i.shape), true))
        .collect();
    let out = program(&leaves);
    let shape = burn_backend::TensorMetadata::shape(&out);
    let r = tensor(weights(seed, shape.num_elements()), &shape.to_vec());
    let out_values = values(A::inner(out.clone()));
    let loss = A::float_mul(out, r);
    let grads = A::backward(loss);
    let gs = leaves
        .iter()
        .map(|leaf| A::grad(leaf, &grads).map(values))
        .collect();
    (out_values, gs)
}

/// The loss `sum(r * program(x))` (forward only, untracked) and `sum |r * program(x)|`.
fn loss(inputs: &[Input], program: &dyn Fn(&[T]) -> T, seed: u64) -> (f64, f64) {
    let xs: Vec<T> = inputs
        .iter()
        .map(|i| tensor(i.values.clone(), &i.shape))
        .collect();
    let out = values(A::inner(program(&xs)));
    let r = weights(seed, out.len());
    let terms = out.iter().zip(r).map(|(a, b)| a * b);
    terms.fold((0.0, 0.0), |(sum, abs), t| (sum + t, abs + t.abs()))
}

/// Asserts two runs' gradients are bit-identical (so NaNs compare equal to themselves), and
/// names the first difference.
fn assert_same(
    name: &str,
    label: &str,
    got: &[Option<Vec<f64>>],
    reference_label: &str,
    reference: &[Option<Vec<f64>>],
) {
    for (i, (a, b)) in got.iter().zip(reference).enumerate() {
        match (a, b) {
            (Some(a), Some(b)) => {
                if let Some(j) = (0..a.len()).find(|&j| a[j].to_bits() != b[j].to_bits()) {
                    panic!(
                        "{name}: the gradient of leaf {i} under {label} differs from \
                         {reference_label} (replays must be bit-identical): element {j} is \
                         {:e} vs {:e}",
                        a[j], b[j]
                    );
                }
            }
            (None, None) => {}
            _ => panic!(
                "{name}: leaf {i} has a gradient under {} only",
                if a.is_some() { label } else { reference_label }
            ),
        }
    }
}

/// Checks the gradients of `program` (see the module docs). Returns the gradients.
///
/// # Panics
/// On any disagreement, with the check's `name`, the policy or the direction, and the
/// numbers.
pub fn check(name: &str, inputs: &[Input], program: impl Fn(&[T]) -> T, fd: Fd) -> Vec<Vec<f64>> {
    check_outcome(name, inputs, &program, fd, &[])
}

/// [`check`] for a program that does not reach the leaves in `unreached` at all (not even
/// through an op whose derivative is zero): Burn's autodiff gives them no gradient, and
/// remat must not either. Their gradients come back empty.
pub fn check_unreached(
    name: &str,
    inputs: &[Input],
    program: impl Fn(&[T]) -> T,
    fd: Fd,
    unreached: &[usize],
) -> Vec<Vec<f64>> {
    check_outcome(name, inputs, &program, fd, unreached)
}

fn check_outcome(
    name: &str,
    inputs: &[Input],
    program: &dyn Fn(&[T]) -> T,
    fd: Fd,
    unreached: &[usize],
) -> Vec<Vec<f64>> {
    // Statistics are process-wide: checks in one test binary run one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let seed = 0xC0FFEE;
    let before = remat::stats().live_bytes;
    let mut policies = policies().into_iter();
    let (reference_label, reference_policy) = policies.next().expect("a reference policy");
    let (_, reference) = remat::with_policy(reference_policy, || grads_of(inputs, program, seed));
    for (i, g) in reference.iter().enumerate() {
        let expected = !unreached.contains(&i);
        assert!(
            g.is_some() == expected,
            "{name}: leaf {i} {} under {reference_label}: a leaf the output depends on gets a \
             gradient tensor (zeros where the derivative is zero, as Burn's autodiff gives), \
             and only a leaf the graph never reaches gets none (list it in `check_unreached`)",
            if expected {
                "has no gradient"
            } else {
                "has a gradient but was declared unreached"
            }
        );
    }
    for (label, policy) in policies {
        let (_, got) = remat::with_policy(policy, || grads_of(inputs, program, seed));
        assert_same(name, label, &got, reference_label, &reference);
    }
    // The last policy is the unbounded budget: now the smallest and a middle one.
    let (min, all) = budget_range();
    for (label, budget) in [
        ("Budget(min)", min),
        ("Budget(middle)", min.midpoint(all.max(min))),
    ] {
        let (_, got) = under_budget(budget, || grads_of(inputs, program, seed));
        assert_same(name, label, &got, reference_label, &reference);
    }
    let (_, region) = remat::checkpoint(|| grads_of(inputs, program, seed));
    assert_same(
        name,
        "a checkpoint region",
        &region,
        reference_label,
        &reference,
    );
    assert_eq!(
        remat::stats().live_bytes,
        before,
        "{name}: saved values leaked"
    );
    let grads: Vec<Vec<f64>> = reference
        .into_iter()
        .zip(inputs)
        .map(|(g, input)| g.unwrap_or_else(|| vec![0.0; input.values.len()]))
        .collect();
    finite_differences(name, inputs, program, seed, &grads, fd);
    grads
}

/// Compares `<grads, v>` with central finite differences along [`DIRECTIONS`] random
/// directions `v` (see the module docs).
fn finite_differences(
    name: &str,
    inputs: &[Input],
    program: &dyn Fn(&[T]) -> T,
    seed: u64,
    grads: &[Vec<f64>],
    fd: Fd,
) {
    let (rtol, step) = match fd {
        Fd::Skip(_) => return,
        Fd::Smooth => (RTOL, SMOOTH_STEP),
        Fd::Within(rtol, _) => (rtol, SMOOTH_STEP),
        Fd::Kinked(_) | Fd::KinkedAtTies(_) => (RTOL, KINK_STEP),
    };
    let piecewise = matches!(fd, Fd::Kinked(_) | Fd::KinkedAtTies(_));
    let mut rng = Rng::new(7);
    let mut conclusive = 0;
    // Directions whose stencil saw a kink.
    let mut kinked = Vec::new();
    for direction in 0..DIRECTIONS {
        let v: Vec<Vec<f64>> = inputs
            .iter()
            .map(|i| {
                let s = i.scale();
                rng.vec(i.values.len()).into_iter().map(|d| d * s).collect()
            })
            .collect();
        let at = |t: f64| -> (f64, f64) {
            let moved: Vec<Input> = inputs
                .iter()
                .zip(&v)
                .map(|(i, v)| Input {
                    values: i.values.iter().zip(v).map(|(x, v)| x + t * v).collect(),
                    shape: i.shape.clone(),
                })
                .collect();
            loss(&moved, program, seed)
        };
        let h = step;
        let ((plus, plus_abs), (minus, minus_abs)) = (at(h), at(-h));
        let ((plus2, _), (minus2, _)) = (at(h / 2.0), at(-h / 2.0));
        let d_h = (plus - minus) / (2.0 * h);
        let d_half = (plus2 - minus2) / h;
        let analytic: f64 = grads
            .iter()
            .zip(&v)
            .map(|(g, v)| g.iter().zip(v).map(|(a, b)| a * b).sum::<f64>())
            .sum();
        let magnitude: f64 = grads
            .iter()
            .zip(&v)
            .map(|(g, v)| g.iter().zip(v).map(|(a, b)| (a * b).abs()).sum::<f64>())
            .sum();
        // The rounding of a loss evaluation, divided by the step.
        let floor = LOSS_ULPS * f64::EPSILON * plus_abs.max(minus_abs) / h;
        let tol = rtol * magnitude + 2.0 * floor;
        let numeric = if piecewise {
            // One-sided derivatives at steps h and h/2. On a smooth piece the forward and
            // backward ones differ by h L'' + O(h^3), so (F - B) = 2 (F2 - B2) up to
            // rounding; a kink at the inputs breaks that by the jump J of the derivative,
            // and moves D(h/2) by J/2 from the derivative of either piece: so a mismatch
            // over 2 tol is a kink (the direction proves nothing), and a smaller one cannot
            // move D(h/2) past the tolerance. A kink elsewhere in the stencil also shows
            // between the two central quotients.
            let (center, _) = at(0.0);
            let (forward, backward) = ((plus - center) / h, (center - minus) / h);
            let (forward2, backward2) = ((plus2 - center) * 2.0 / h, (center - minus2) * 2.0 / h);
            let jump = (forward - backward) - 2.0 * (forward2 - backward2);
            if jump.abs() > 2.0 * tol || (d_h - d_half).abs() > tol {
                kinked.push(direction);
                continue;
            }
            d_half
        } else {
            (4.0 * d_half - d_h) / 3.0
        };
        conclusive += 1;
        let error = (numeric - analytic).abs();
        assert!(
            error <= tol,
            "{name}: gradient disagrees with finite differences along direction {direction} \
             ({fd:?}): backward gives <grad, v> = {analytic:e}, finite differences give \
             {numeric:e} (D(h) = {d_h:e}, D(h/2) = {d_half:e}, h = {h:e}); |difference| \
             {error:e} > tolerance {tol:e} (rtol {rtol:e} of sum |grad v| = {magnitude:e}, \
             plus rounding {:e})",
            2.0 * floor
        );
    }
    if conclusive > 0 {
        return;
    }
    assert!(
        matches!(fd, Fd::KinkedAtTies(_)),
        "{name}: every direction saw a kink within the step ({kinked:?}): move the \
         inputs away from the kinks and ties ({fd:?})"
    );
    AT_TIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
