//! Exact replay counts, measured below remat: `Autodiff<Counting<Flex>>` counts every call
//! that reaches the inner backend (forward, replays and backward rules together), per thread.

mod support;

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData};
use burn_flex::Flex;
use remat::{Autodiff, Policy};
use support::counting::{Counting, calls, reset_calls, sin_step};

type C = Autodiff<Counting<Flex>>;
type T = FloatTensor<C>;

fn leaf(values: &[f32]) -> T {
    let x = C::float_from_data(
        TensorData::new(values.to_vec(), [values.len()]),
        &Default::default(),
    );
    C::float_set_require_grad(x, true)
}

#[test]
fn a_region_of_k_cheap_ops_replays_each_exactly_once() {
    let k = 9;
    let tanh_chain = |x: T| (0..k).fold(x, |y, _| C::float_tanh(y));
    // In the region, the last tanh's output is used after the region (by the mul): it is the
    // region's output and is kept; the k - 1 values inside are rebuilt, once each.
    for (label, regions, replays) in [("SaveAll", false, 0), ("region", true, k - 1)] {
        let x = leaf(&[0.1, 0.2, 0.3]);
        reset_calls();
        let y = if regions {
            remat::checkpoint(|| tanh_chain(x.clone()))
        } else {
            remat::with_policy(Policy::SaveAll, || tanh_chain(x.clone()))
        };
        assert_eq!(calls("float_tanh"), k as u64, "{label}: forward");
        let grads = C::backward(C::float_mul(y.clone(), y));
        assert!(C::grad(&x, &grads).is_some());
        // tanh's backward reads its output and calls no tanh: every further call is a replay.
        assert_eq!(
            calls("float_tanh"),
            (k + replays) as u64,
            "{label}: forward + replays"
        );
    }
}

#[test]
fn recompute_all_replays_a_chain_linearly() {
    let n = 400;
    let x = leaf(&[0.25, 0.5]);
    reset_calls();
    let y = remat::with_policy(Policy::RecomputeAll, || {
        (0..n).fold(x.clone(), |y, i| {
            if i % 2 == 0 {
                C::float_sin(y)
            } else {
                C::float_mul_scalar(y, burn_std::Scalar::Float(1.5))
            }
        })
    });
    assert_eq!(calls("float_sin"), n / 2);
    let grads = C::backward(y);
    assert!(C::grad(&x, &grads).is_some());
    // Every sin output but the last is rebuilt exactly once (the last one is never read);
    // sin's backward calls cos, not sin. Quadratic recomputation would be ~n^2/8 calls.
    assert_eq!(calls("float_sin"), n / 2 + (n / 2 - 1));
    assert_eq!(calls("float_cos"), n / 2);
}

#[test]
fn a_chain_of_diamonds_replays_linearly() {
    let n = 1000u64;
    let x = leaf(&[0.25, 0.5]);
    reset_calls();
    let y = remat::with_policy(Policy::RecomputeAll, || {
        (0..n).fold(x.clone(), |y, _| {
            C::float_mul(C::float_sin(y.clone()), C::float_cos(y))
        })
    });
    let grads = C::backward(y);
    assert!(C::grad(&x, &grads).is_some());
    // Per diamond: one sin and one cos in forward, one of each in the rules (d sin = cos,
    // d cos = -sin), and at most one replay of each; muls: one in forward, two in its rule,
    // one in each of sin's and cos's rules, at most one replay.
    assert!(
        calls("float_sin") <= 3 * n,
        "sin calls: {}",
        calls("float_sin")
    );
    assert!(
        calls("float_cos") <= 3 * n,
        "cos calls: {}",
        calls("float_cos")
    );
    assert!(
        calls("float_mul") <= 6 * n,
        "mul calls: {}",
        calls("float_mul")
    );
}

/// A transaction reaches the inner backend whole: one `tr_execute` (one sync on a device
/// backend), not one read per tensor; float tensors go down unwrapped, tracked or not, and
/// the data come back in the order they were registered.
#[test]
fn a_transaction_is_one_inner_transaction() {
    use burn_backend::ops::{BoolTensorOps, IntTensorOps, TransactionPrimitive};
    use burn_backend::{TensorPrimitive, read_sync};

    let device = Default::default();
    let tracked = leaf(&[1.0, 2.0]);
    let derived = C::float_mul_scalar(tracked.clone(), 3.0.into());
    let untracked = C::float_from_data(TensorData::from([5.0f32, 6.0, 7.0]), &device);
    let ints = C::int_from_data(TensorData::from([4i64, 5]), &device);
    let bools = C::bool_from_data(TensorData::from([true, false]), &device);
    reset_calls();

    let mut transaction = TransactionPrimitive::<C>::default();
    transaction.register_float(TensorPrimitive::Float(derived));
    transaction.register_int(ints);
    transaction.register_float(TensorPrimitive::Float(untracked));
    transaction.register_bool(bools);
    transaction.register_float(TensorPrimitive::Float(tracked));
    let data = read_sync(transaction.execute_async()).unwrap();

    assert_eq!(calls("tr_execute"), 1);
    assert_eq!(calls("float_into_data"), 0);
    assert_eq!(calls("int_into_data") + calls("bool_into_data"), 0);
    assert_eq!(data.len(), 5);
    assert_eq!(data[0].try_to_vec::<f32>().unwrap(), [3.0, 6.0]);
    assert_eq!(data[1].try_to_vec::<i64>().unwrap(), [4, 5]);
    assert_eq!(data[2].try_to_vec::<f32>().unwrap(), [5.0, 6.0, 7.0]);
    assert_eq!(data[3].try_to_vec::<bool>().unwrap(), [true, false]);
    assert_eq!(data[4].try_to_vec::<f32>().unwrap(), [1.0, 2.0]);
}

/// A step whose output received no gradient replays nothing. The `x` of a pool's backward
/// kernel gets no gradient (the kernel reads only its shape), so the two exps that produced
/// it step without one: under RecomputeAll their outputs are evicted, and their reads (each
/// exp's backward reads its output) are released without a rebuild. Under debug assertions
/// the pass panics if a count is left (the replay read the planner counted on the first exp
/// for the second's rebuild must be released too).
#[test]
fn a_step_without_gradient_replays_nothing() {
    use burn_backend::ops::ModuleOps;
    let device = Default::default();
    let w = C::float_set_require_grad(
        C::float_from_data(
            TensorData::new((0..16).map(|i| i as f32 / 16.0).collect(), [1, 1, 4, 4]),
            &device,
        ),
        true,
    );
    let g = C::float_set_require_grad(
        C::float_from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [1, 1, 2, 2]),
            &device,
        ),
        true,
    );
    reset_calls();
    let y = remat::with_policy(Policy::RecomputeAll, || {
        let x = C::float_exp(C::float_exp(w.clone()));
        C::avg_pool2d_backward(x, g.clone(), [2, 2], [2, 2], [0, 0], false, false)
    });
    assert_eq!(calls("float_exp"), 2, "forward");
    let grads = C::backward(C::float_sum(y));
    assert!(C::grad(&g, &grads).is_some());
    assert!(C::grad(&w, &grads).is_none(), "w gets no gradient");
    assert_eq!(
        calls("float_exp"),
        2,
        "an exp was replayed for a step without gradient"
    );

    // The same for a step that reads its inputs: the mul's backward reads both (evicted)
    // inputs, and neither sin nor cos is rebuilt for it.
    reset_calls();
    let y = remat::with_policy(Policy::RecomputeAll, || {
        let x = C::float_mul(C::float_sin(w.clone()), C::float_cos(w.clone()));
        C::avg_pool2d_backward(x, g.clone(), [2, 2], [2, 2], [0, 0], false, false)
    });
    let grads = C::backward(C::float_sum(y));
    assert!(C::grad(&g, &grads).is_some());
    assert_eq!(
        (calls("float_sin"), calls("float_cos")),
        (1, 1),
        "sin or cos was replayed for a step without gradient"
    );
}

/// NOTE [estimated-costs] in `checkpoint/cost.rs`: by default a budget's op costs are
/// estimated from shapes, so no op or replay is timed and a budget never syncs the device,
/// from its first step on (measured costs sync in the first steps: `async_sync.rs`).
#[test]
fn a_budget_with_estimated_costs_never_syncs() {
    use support::counting::syncs;
    assert_eq!(remat::op_costs(), remat::OpCosts::Estimated, "the default");
    std::thread::spawn(|| {
        reset_calls();
        for budget in [u64::MAX, 40] {
            for _ in 0..3 {
                remat::with_policy(Policy::Budget(budget), sin_step::<C>);
            }
        }
        assert!(
            calls("float_sin") > 18,
            "the 40-byte budget replayed nothing"
        );
        assert_eq!(syncs(), 0, "a budget synced with estimated costs");
    })
    .join()
    .unwrap();
}
