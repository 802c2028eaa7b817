//! Asynchronous inner backends (a GPU backend, burn-fusion): under a budget with measured
//! op costs (`remat::OpCosts::Measured`, set by every test here), op times are measured
//! between syncs only while a training loop warms up (NOTE [op-times],
//! [timing-window] and [new-sizes] in `checkpoint/cost.rs`), and neither recording nor
//! replaying reads a value back to the host. Counted below remat on `Counting<Flex>`, whose
//! `sync` and `*_into_data` calls are what a GPU backend would wait on.

mod support;

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData};
use burn_flex::Flex;
use remat::{Autodiff, Policy};
use support::counting::{Counting, calls, reset_calls, sin_step, syncs};

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

/// NOTE [op-times]: under a budget an op is timed between two syncs (on an asynchronous
/// backend the wall time is only its launch) for its first runs per kind on the thread
/// (NOTE [timing-window]: within two periods of its first run), never after. A 6-op step of
/// one kind (`sin` on the same shape) syncs 2 x 2 times in the first step (its second run is
/// one period after its first), none in the next; other policies never sync.
#[test]
fn a_budget_syncs_to_time_an_op_only_for_its_first_runs() {
    let step = sin_step::<C>;
    std::thread::spawn(move || {
        measured();
        reset_calls();
        remat::with_policy(Policy::SaveAll, step);
        assert_eq!(syncs(), 0, "SaveAll");
        // `float_sum` is recorded too (a kind of its own, one run a step).
        remat::with_policy(Policy::Budget(u64::MAX), step);
        assert_eq!(syncs(), 2 * (2 + 1), "first budget step");
        reset_calls();
        remat::with_policy(Policy::Budget(u64::MAX), step);
        assert_eq!(
            syncs(),
            2,
            "second step: only the sum still has samples to take"
        );
        for _ in 0..3 {
            remat::with_policy(Policy::Budget(u64::MAX), step);
        }
        reset_calls();
        remat::with_policy(Policy::Budget(u64::MAX), step);
        assert_eq!(syncs(), 0, "every kind timed within its window");
    })
    .join()
    .unwrap();
}

/// NOTE [op-times]: op times are per inner backend. A thread that timed an op's kind on one
/// backend times it again on another (the same ops on `Flex` and on `Counting<Flex>` here;
/// in a user's process, a CPU and a GPU backend): the second backend's first budget step
/// syncs 2 x 2 times again. They shared one table, so a process running two backends (the
/// benchmark's Flex and NdArray) planned the second with the first one's op times.
#[test]
fn op_times_are_kept_per_inner_backend() {
    type P = Autodiff<Flex>;
    std::thread::spawn(|| {
        measured();
        // Every kind of the step timed on Flex.
        for _ in 0..5 {
            remat::with_policy(Policy::Budget(u64::MAX), sin_step::<P>);
        }
        reset_calls();
        remat::with_policy(Policy::Budget(u64::MAX), sin_step::<C>);
        assert_eq!(
            syncs(),
            2 * (2 + 1),
            "the same ops on another backend are timed anew"
        );
    })
    .join()
    .unwrap();
}

/// Measured op costs (NOTE [estimated-costs] in `checkpoint/cost.rs`): every test of this
/// binary times ops, so setting it process-wide races with nothing.
fn measured() {
    remat::set_op_costs(remat::OpCosts::Measured);
}

/// NOTE [timing-window]: a budget that rebuilds values syncs to time ops and replays in the
/// first two steps of a training loop, and never from the third step on: the device's
/// queue is not drained at every op once the loop is warm.
#[test]
fn from_the_third_step_a_budget_makes_no_sync() {
    std::thread::spawn(|| {
        measured();
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
        measured();
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
        measured();
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
