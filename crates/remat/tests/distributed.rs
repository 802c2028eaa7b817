//! The distributed hooks, seen from below: `Autodiff<Counting<Flex>>`'s inner backend records
//! each `DistributedOps` call in order (`support::counting::Event`) and simulates
//! `REPLICAS` identical devices whose collectives sum. What must reach it is what Burn's own
//! autodiff sends: the distributed parameters of the graph registered once before any
//! gradient, each one's gradient submitted once it is complete (and summed in place),
//! `submit_sync_collective` after every backward pass, and `all_reduce` results left
//! unsynchronised until they are read.

mod support;

use burn_backend::distributed::{DistributedParamId, ReduceOperation};
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, DeviceOps, TensorData, distributed::DistributedOps};
use burn_flex::Flex;
use remat::Autodiff;
use support::counting::{Counting, Event, REPLICAS, events, reset_calls, timed_events};
use support::values;

type C = Autodiff<Counting<Flex>>;
type T = FloatTensor<C>;

fn tensor(values: &[f64]) -> T {
    C::float_from_data(
        TensorData::new(values.to_vec(), [values.len()]),
        &Default::default(),
    )
}

fn leaf(values: &[f64]) -> T {
    C::float_set_require_grad(tensor(values), true)
}

fn grad(x: &T, grads: &remat::grads::Gradients) -> Vec<f64> {
    values(C::grad(x, grads).expect("a gradient"))
}

fn all_devices() -> Vec<burn_backend::DeviceId> {
    let device: burn_flex::FlexDevice = Default::default();
    vec![device.id(); REPLICAS]
}

/// As in Burn, every backward pass ends with `submit_sync_collective` on the loss's device,
/// whether or not the graph holds distributed parameters (a device whose graph holds none
/// still takes part in the collective barrier), and even when the loss is untracked.
#[test]
fn every_backward_submits_the_sync_collective() {
    let x = leaf(&[1.0, 2.0]);
    reset_calls();
    let grads = C::backward(C::float_sum(C::float_exp(x.clone())));
    assert!(C::grad(&x, &grads).is_some());
    assert_eq!(
        events(),
        [Event::SubmitSyncCollective],
        "no distributed parameter"
    );

    reset_calls();
    let grads = C::backward(C::float_sum(tensor(&[1.0])));
    assert!(grads.is_empty());
    assert_eq!(events(), [Event::SubmitSyncCollective], "an untracked loss");
}

/// `all_reduce` hands back what the inner backend returned, unsynchronised: the caller's
/// `resolve()` synchronises it. In backward, the all-reduced gradient is synchronised when
/// it is first read (here: after other steps ran), not right after the all-reduce.
#[test]
fn all_reduce_stays_lazy_until_read() {
    let x = leaf(&[1.0, 2.0]);
    reset_calls();
    let collective = C::all_reduce(x.clone(), ReduceOperation::Sum, all_devices());
    assert_eq!(
        events(),
        [Event::AllReduce],
        "forward: nothing synchronised yet"
    );
    let y = collective.resolve();
    assert_eq!(events(), [Event::AllReduce, Event::SyncCollective]);
    assert_eq!(values(C::inner(y.clone())), [2.0, 4.0]);
    drop(y);

    // m = 2a; loss = sum(m * m) + sum(all_reduce(m)) = sum(4a^2) + sum(4a) over two
    // replicas; d loss / d m = 2m + 2 (the all-reduce of the ones), d loss / d a = 8a + 4.
    let a = leaf(&[1.0, 2.0]);
    let m = C::float_mul_scalar(a.clone(), 2.0.into());
    let reduced = C::all_reduce(m.clone(), ReduceOperation::Sum, all_devices()).resolve();
    let squares = C::float_sum(C::float_mul(m.clone(), m));
    let loss = C::float_add(squares, C::float_sum(reduced));
    reset_calls();
    let grads = C::backward(loss);
    assert_eq!(grad(&a, &grads), [12.0, 20.0]);
    let timed = timed_events();
    let kinds: Vec<_> = timed.iter().map(|(e, _)| e.clone()).collect();
    assert_eq!(
        kinds,
        [
            Event::AllReduce,
            Event::SyncCollective,
            Event::SubmitSyncCollective
        ]
    );
    assert!(
        timed[1].1 > timed[0].1,
        "the gradient's all-reduce was synchronised at once, before any other inner call: \
         {timed:?}"
    );
}

/// A parameter that is marked distributed only after an op read it (the graph was recorded
/// with the unmarked leaf) is still registered and its gradient submitted, as in Burn,
/// whose steps are looked up by the parameter's id when backward runs.
#[test]
fn a_parameter_marked_after_recording_is_synchronised() {
    let w = leaf(&[1.0, 2.0]);
    let y = C::float_mul_scalar(w.clone(), 3.0.into());
    let id = DistributedParamId::from(7);
    let w = C::set_distributed_params(w, id);
    assert!(C::is_distributed(&w));
    reset_calls();
    let grads = C::backward(C::float_sum(y));
    assert_eq!(
        events(),
        [
            Event::Register(vec![id]),
            Event::SubmitGradient(id),
            Event::SubmitSyncCollective
        ]
    );
    assert_eq!(
        grad(&w, &grads),
        [6.0, 6.0],
        "3 per replica, summed over two"
    );
}

/// The hooks end to end on a small model: two distributed parameters (one read twice) and
/// one that is not, with an all-reduce (mean) in the forward pass. Both distributed
/// parameters are registered once, before anything else of the pass; each one's complete
/// gradient is submitted exactly once (a gradient submitted before its second contribution
/// arrived would come back wrong); the pass ends with the sync collective.
#[test]
fn distributed_hooks_end_to_end() {
    let (p1, p2) = (DistributedParamId::from(11), DistributedParamId::from(12));
    let w1 = C::set_distributed_params(leaf(&[1.0, 2.0]), p1);
    let w2 = C::set_distributed_params(leaf(&[0.5, -1.0]), p2);
    let b = leaf(&[3.0, 4.0]);
    let x = tensor(&[2.0, 3.0]);
    reset_calls();
    // h = w1 * x + b; r = all_reduce_mean(h) (the identity over identical replicas);
    // loss = sum(r * w2) + sum(w1 * w1).
    let h = C::float_add(C::float_mul(w1.clone(), x), b.clone());
    let r = C::all_reduce(h, ReduceOperation::Mean, all_devices()).resolve();
    let loss = C::float_add(
        C::float_sum(C::float_mul(r, w2.clone())),
        C::float_sum(C::float_mul(w1.clone(), w1.clone())),
    );
    let forward = events();
    assert_eq!(forward, [Event::AllReduce, Event::SyncCollective]);
    reset_calls();
    let grads = C::backward(loss);
    let pass = events();

    // d loss / d w1 = w2 * x + 2 w1 = [3, 1]; d / d w2 = h = [5, 10]; d / d b = w2.
    // The distributed ones come back summed over the replicas.
    let summed = |g: [f64; 2]| g.map(|v| v * REPLICAS as f64);
    assert_eq!(grad(&w1, &grads), summed([3.0, 1.0]));
    assert_eq!(grad(&w2, &grads), summed([5.0, 10.0]));
    assert_eq!(
        grad(&b, &grads),
        [0.5, -1.0],
        "not distributed: not synchronised"
    );

    let Event::Register(mut registered) = pass[0].clone() else {
        panic!("the pass must start by registering its parameters: {pass:?}")
    };
    registered.sort();
    assert_eq!(registered, [p1, p2]);
    let submitted: Vec<_> = pass
        .iter()
        .filter_map(|e| match e {
            Event::SubmitGradient(id) => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(submitted.len(), 2, "{pass:?}");
    assert!(
        submitted.contains(&p1) && submitted.contains(&p2),
        "{pass:?}"
    );
    assert_eq!(pass.last(), Some(&Event::SubmitSyncCollective));
    assert_eq!(
        pass.iter()
            .filter(|e| matches!(e, Event::Register(_) | Event::SubmitSyncCollective))
            .count(),
        2,
        "one registration and one sync collective per pass: {pass:?}"
    );
    // The all-reduce's backward (mean: the identity) is synchronised within the pass.
    let reduces = pass.iter().filter(|e| **e == Event::AllReduce).count();
    let syncs = pass.iter().filter(|e| **e == Event::SyncCollective).count();
    assert_eq!((reduces, syncs), (1, 1), "{pass:?}");
}

/// Moves a tensor from `Flex` to `Counting<Flex>` (the same primitive) and back.
#[derive(Debug)]
struct Move;

impl remat::ops::DifferentiableTransfer<Flex, Counting<Flex>> for Move {
    fn forward(tensor: FloatTensor<Flex>, _: &burn_flex::FlexDevice) -> FloatTensor<Flex> {
        tensor
    }
    fn backward(tensor: FloatTensor<Flex>, _: &burn_flex::FlexDevice) -> FloatTensor<Flex> {
        tensor
    }
}

/// Gradient synchronisation runs on the loss's inner backend: as in Burn, a distributed
/// parameter on another one is refused before the pass starts (its gradient would be
/// submitted to a synchronisation nobody registered it with).
#[test]
#[should_panic(expected = "is a tensor of another inner backend than the loss")]
fn a_distributed_parameter_on_another_backend_than_the_loss_is_refused() {
    type F = Autodiff<Flex>;
    let w = F::float_from_data(TensorData::from([1.0f64, 2.0]), &Default::default());
    let w = F::set_distributed_params(F::float_set_require_grad(w, true), 3.into());
    let moved = F::to_backend::<Counting<Flex>, Move>(w, &Default::default());
    let _ = C::backward(C::float_sum(moved));
}
