//! Asynchronous inner backends (a GPU backend, burn-fusion): under a budget, op times are
//! measured between syncs only while a training loop warms up (NOTE [op-times],
//! [timing-window] and [new-sizes] in `checkpoint/cost.rs`), and neither recording nor
//! replaying reads a value back to the host. Counted below remat on `Counting<Flex>`, whose
//! `sync` and `*_into_data` calls are what a GPU backend would wait on.

mod support;

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData};
use burn_flex::Flex;
use remat::{Autodiff, Policy};
use support::counting::{Counting, calls, reset_calls, syncs};

type C = Autodiff<Counting<Flex>>;
type T = FloatTensor<C>;

const WIDTH: usize = 8;
const LAYERS: usize = 6;

/// Deterministic values in [-0.5, 0.5).
fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn tensor(rows: usize, cols: usize, seed: usize) -> T {
    C::float_from_data(
        TensorData::new(values(rows * cols, seed), [rows, cols]),
        &Default::default(),
    )
}

/// One training step of a `LAYERS`-layer tanh network on a batch of `rows` rows: per layer a
/// matmul, an add (bias) and a tanh; the loss sums the squares. Returns the tanh calls the
/// inner backend made (forward and replays).
fn step(rows: usize) -> u64 {
    let weights: Vec<T> = (0..LAYERS)
        .map(|i| C::float_set_require_grad(tensor(WIDTH, WIDTH, i), true))
        .collect();
    let bias = C::float_set_require_grad(tensor(1, WIDTH, 9), true);
    let before = calls("float_tanh");
    let y = weights.iter().fold(tensor(rows, WIDTH, 7), |x, w| {
        C::float_tanh(C::float_add(C::float_matmul(x, w.clone()), bias.clone()))
    });
    let grads = C::backward(C::float_sum(C::float_mul(y.clone(), y)));
    for w in &weights {
        assert!(C::grad(w, &grads).is_some(), "a weight has no gradient");
    }
    calls("float_tanh") - before
}

/// The bytes of one `[rows, WIDTH]` activation.
fn activation(rows: usize) -> u64 {
    (rows * WIDTH * 4) as u64
}

/// Syncs per step, for `steps` steps of `rows(step)` rows under `policy(rows)`.
fn syncs_per_step(
    policy: impl Fn(usize) -> Policy,
    steps: usize,
    rows: impl Fn(usize) -> usize,
) -> Vec<u64> {
    (0..steps)
        .map(|i| {
            reset_calls();
            remat::with_policy(policy(rows(i)), || step(rows(i)));
            syncs()
        })
        .collect()
}

/// A budget of five of the seven activations a step keeps under SaveAll (the input and six
/// tanh outputs): it rebuilds (the smallest the planner guarantees is four).
fn tight(rows: usize) -> Policy {
    Policy::Budget(5 * activation(rows))
}

/// NOTE [timing-window]: a budget that rebuilds values syncs to time ops and replays in the
/// first two steps of a training loop, and never from the third step on: the device's
/// queue is not drained at every op once the loop is warm.
#[test]
fn from_the_third_step_a_budget_makes_no_sync() {
    std::thread::spawn(|| {
        let syncs = syncs_per_step(tight, 8, |_| 16);
        assert!(syncs[0] > 0, "the first step timed nothing: {syncs:?}");
        assert_eq!(
            syncs[2..],
            [0; 6],
            "syncs per step from step 3 on: {syncs:?}"
        );
        let tanhs = remat::with_policy(tight(16), || step(16));
        assert!(
            tanhs > LAYERS as u64,
            "the budget rebuilt nothing ({tanhs} tanh calls)"
        );
    })
    .join()
    .unwrap();
}

/// NOTE [new-sizes]: a loop whose batch changes every step (variable sequence lengths) syncs
/// for the first `SIZES` (16) sizes of each op and never again: later sizes are estimated
/// from those, and a plan is still made (the budget keeps rebuilding).
#[test]
fn a_loop_whose_shapes_change_every_step_stops_syncing() {
    std::thread::spawn(|| {
        let unlimited = |_: usize| Policy::Budget(u64::MAX);
        for (what, policy) in [
            ("unlimited", &unlimited as &dyn Fn(usize) -> Policy),
            ("tight", &tight),
        ] {
            let syncs = syncs_per_step(policy, 24, |i| 16 + i);
            assert!(syncs[..16].iter().all(|&s| s > 0), "{what}: {syncs:?}");
            assert_eq!(
                syncs[16..],
                [0; 8],
                "{what}: syncs per step, a new size every step: {syncs:?}"
            );
        }
        // The budget still rebuilds at new sizes (estimated op times plan it).
        let tanhs = remat::with_policy(tight(40), || step(40));
        assert!(tanhs > LAYERS as u64, "no rebuild at a new size");
    })
    .join()
    .unwrap();
}

/// Recording and replaying never read a value back to the host (no `*_into_data`, no
/// transaction): on a GPU a read waits for the device and copies. Under every control that
/// rebuilds here, the step's only inner calls are ops.
#[test]
fn recording_and_replays_read_nothing_back() {
    std::thread::spawn(|| {
        for (what, policy) in [
            ("RecomputeAll", Some(Policy::RecomputeAll)),
            ("a budget", Some(tight(16))),
            ("a region", None),
        ] {
            for _ in 0..3 {
                reset_calls();
                let tanhs = match &policy {
                    Some(policy) => remat::with_policy(policy.clone(), || step(16)),
                    None => remat::checkpoint(|| step(16)),
                };
                assert!(tanhs > LAYERS as u64, "{what}: nothing was rebuilt");
                let reads: u64 = [
                    "float_into_data",
                    "int_into_data",
                    "bool_into_data",
                    "q_into_data",
                    "tr_execute",
                ]
                .iter()
                .map(|op| calls(op))
                .sum();
                assert_eq!(reads, 0, "{what}: the step read values back");
            }
        }
    })
    .join()
    .unwrap();
}
