//! Ops with a hand-written backward, written against Burn's API (`Backward`, `prepare`,
//! `OpsKind`, `checkpoint`, `Checkpointer`, `Gradients::consume`/`register`), recorded by
//! remat: exact gradients, bit-identical under every policy and inside regions, the values
//! they checkpoint read in backward (and rebuilt there when a policy dropped them), no leaks.

mod support;

use std::sync::Mutex;

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend};
use burn_flex::Flex;
use remat::checkpoint::strategy::{BalancedCheckpointing, CheckpointStrategy, NoCheckpointing};
use remat::grads::Gradients;
use remat::ops::custom::{
    Backward, BackwardStates, Checkpointer, Ops, OpsKind, RetroForward, binary, unary,
};
use remat::{Autodiff, AutodiffTensor, NodeId, Policy};
use support::{I, values};

/// Statistics are process-wide: tests that read them run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `x -> x^3`, saving `x` with `prep.checkpoint`.
#[derive(Debug)]
struct Cube;

impl<B: Backend> Backward<B, 1> for Cube {
    type State = NodeId;

    fn backward(self, ops: Ops<NodeId, 1>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let x: FloatTensor<B> = checkpointer.retrieve_node_output(ops.state);
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            let x2 = B::float_mul(x.clone(), x);
            B::float_mul(grad, B::float_mul_scalar(x2, 3.0f64.into()))
        });
    }
}

fn cube<B: Backend, C: CheckpointStrategy>(x: AutodiffTensor<B>) -> AutodiffTensor<B> {
    let guard = x.node();
    let out = {
        let p = x.primitive.clone();
        B::float_mul(B::float_mul(p.clone(), p.clone()), p)
    };
    match Cube.prepare::<C>([guard]).compute_bound().stateful() {
        OpsKind::Tracked(mut prep) => {
            let state = prep.checkpoint(&x);
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}

/// `(a, b) -> a * b` (same shapes), saving both.
#[derive(Debug)]
struct Mul;

impl<B: Backend> Backward<B, 2> for Mul {
    type State = (NodeId, NodeId);

    fn backward(
        self,
        ops: Ops<(NodeId, NodeId), 2>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let a: FloatTensor<B> = checkpointer.retrieve_node_output(ops.state.0);
        let b: FloatTensor<B> = checkpointer.retrieve_node_output(ops.state.1);
        binary::<B, _, _>(
            ops.parents,
            ops.node,
            grads,
            |grad| B::float_mul(grad, b),
            |grad| B::float_mul(grad, a),
        );
    }
}

fn mul<B: Backend, C: CheckpointStrategy>(
    a: AutodiffTensor<B>,
    b: AutodiffTensor<B>,
) -> AutodiffTensor<B> {
    let guards = [a.node(), b.node()];
    let out = B::float_mul(a.primitive.clone(), b.primitive.clone());
    match Mul.prepare::<C>(guards).compute_bound().stateful() {
        OpsKind::Tracked(mut prep) => {
            let state = (prep.checkpoint(&a), prep.checkpoint(&b));
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}

/// `x -> 2x`, memory-bound with a retro-forward, stateless.
#[derive(Debug)]
struct Double;

impl<B: Backend> Backward<B, 1> for Double {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::float_mul_scalar(grad, 2.0f64.into())
        });
    }
}

#[derive(Debug)]
struct RetroDouble {
    input: NodeId,
}

impl RetroForward for RetroDouble {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        let x: FloatTensor<Flex> = states.get_state(&self.input);
        states.save(out_node, Flex::float_mul_scalar(x, 2.0f64.into()));
    }
}

fn double<C: CheckpointStrategy>(x: AutodiffTensor<Flex>) -> AutodiffTensor<Flex> {
    let retro = RetroDouble {
        input: x.node().id(),
    };
    double_with::<C>(x, retro)
}

/// [`Double`] on `x`, memory-bound, replayed through `retro`.
fn double_with<C: CheckpointStrategy>(
    x: AutodiffTensor<Flex>,
    retro: impl RetroForward,
) -> AutodiffTensor<Flex> {
    let out = Flex::float_mul_scalar(x.primitive.clone(), 2.0f64.into());
    <Double as Backward<Flex, 1>>::prepare::<C>(Double, [x.node()])
        .memory_bound()
        .retro_forward(retro)
        .parents([&x])
        .stateless(out)
}

type A = Autodiff<Flex>;
type T = FloatTensor<A>;

fn leaf(values: &[f64]) -> T {
    let x = A::float_from_data(
        burn_backend::TensorData::new(values.to_vec(), vec![values.len()]),
        &Default::default(),
    );
    A::float_set_require_grad(x, true)
}

/// `sum(exp(cube(sin(x)) * w) * 2)`: built-in ops around the custom ones, so that under
/// RecomputeAll the custom ops' checkpointed inputs are rebuilt before their backward and
/// their outputs are read by a replayed op.
fn program<C: CheckpointStrategy>(x: &T, w: &T) -> T {
    let s = A::float_sin(x.clone());
    let c = cube::<Flex, C>(s);
    let m = mul::<Flex, C>(c, w.clone());
    let e = A::float_exp(m);
    A::float_sum(double::<C>(e))
}

fn want(x: f64, w: f64) -> (f64, f64) {
    // f = 2 exp(sin(x)^3 w): df/dx = f * 3 sin^2 cos w, df/dw = f * sin^3.
    let s = x.sin();
    let f = 2.0 * (s.powi(3) * w).exp();
    (f * 3.0 * s * s * x.cos() * w, f * s.powi(3))
}

fn grads_of(run: impl Fn(&T, &T) -> T) -> (Vec<f64>, Vec<f64>) {
    let xs = [0.3, -0.7, 1.1];
    let ws = [0.5, 1.5, -0.25];
    let (x, w) = (leaf(&xs), leaf(&ws));
    let grads = A::backward(run(&x, &w));
    (
        values(A::grad(&x, &grads).expect("x has a gradient")),
        values(A::grad(&w, &grads).expect("w has a gradient")),
    )
}

#[test]
fn custom_ops_give_exact_gradients_under_every_policy() {
    let _s = serial();
    remat::reset_stats();
    let before = remat::stats().live_bytes;
    let reference = remat::with_policy(Policy::SaveAll, || grads_of(program::<NoCheckpointing>));
    for (i, (gx, gw)) in reference.0.iter().zip(&reference.1).enumerate() {
        let (wx, ww) = want([0.3, -0.7, 1.1][i], [0.5, 1.5, -0.25][i]);
        assert!(
            (gx - wx).abs() < 1e-12 * wx.abs().max(1.0),
            "dx[{i}]: {gx} vs {wx}"
        );
        assert!(
            (gw - ww).abs() < 1e-12 * ww.abs().max(1.0),
            "dw[{i}]: {gw} vs {ww}"
        );
    }
    let bits = |v: &(Vec<f64>, Vec<f64>)| {
        v.0.iter()
            .chain(&v.1)
            .map(|x| x.to_bits())
            .collect::<Vec<_>>()
    };
    for policy in [Policy::Balanced, Policy::RecomputeAll] {
        let got = remat::with_policy(policy.clone(), || grads_of(program::<NoCheckpointing>));
        assert_eq!(bits(&got), bits(&reference), "{policy:?}");
    }
    let got = grads_of(program::<BalancedCheckpointing>);
    assert_eq!(bits(&got), bits(&reference), "BalancedCheckpointing");
    let got = grads_of(|x, w| remat::checkpoint(|| program::<NoCheckpointing>(x, w)));
    assert_eq!(bits(&got), bits(&reference), "in a region");
    assert_eq!(remat::stats().live_bytes, before, "values left kept");
}

#[test]
fn untracked_inputs_record_nothing_and_get_no_gradient() {
    let _s = serial();
    let plain = |v: &[f64]| {
        A::float_from_data(
            burn_backend::TensorData::new(v.to_vec(), vec![v.len()]),
            &Default::default(),
        )
    };
    // No input tracked: an untracked output.
    let out = cube::<Flex, NoCheckpointing>(plain(&[2.0]));
    assert!(!out.is_tracked());
    assert_eq!(values(out.primitive), vec![8.0]);
    // One input tracked: only it gets a gradient (its parent slot is `Some`, the other `None`).
    let a = leaf(&[2.0, 3.0]);
    let b = plain(&[5.0, 7.0]);
    let grads = A::backward(A::float_sum(mul::<Flex, NoCheckpointing>(a.clone(), b)));
    assert_eq!(values(A::grad(&a, &grads).unwrap()), vec![5.0, 7.0]);
    assert_eq!(
        grads.len(),
        1,
        "only the leaf's gradient is left in the result"
    );
}

#[test]
fn a_shared_input_accumulates_and_leaves_keep_their_gradient() {
    let _s = serial();
    // mul(x, x) + cube(x): the custom steps register into x's gradient twice and once.
    let x = leaf(&[0.5, -2.0]);
    let y = A::float_add(
        mul::<Flex, NoCheckpointing>(x.clone(), x.clone()),
        cube::<Flex, NoCheckpointing>(x.clone()),
    );
    let grads = A::backward(A::float_sum(y));
    let got = values(A::grad(&x, &grads).unwrap());
    for (g, v) in got.iter().zip([0.5f64, -2.0]) {
        assert!((g - (2.0 * v + 3.0 * v * v)).abs() < 1e-12, "{g} at {v}");
    }
}

#[test]
fn backward_states_store_values_by_node() {
    let mut states = BackwardStates::default();
    let id = NodeId::new();
    let x = support::inner(vec![1.5, -1.0], &[2]);
    states.save(id, x);
    RetroDouble { input: id }.forward(&mut states, id);
    let doubled: FloatTensor<I> = states.get_state(&id);
    assert_eq!(values(doubled), vec![3.0, -2.0]);
}

#[test]
#[should_panic(expected = "did not checkpoint")]
fn retrieving_a_value_that_was_not_checkpointed_panics_with_a_hint() {
    #[derive(Debug)]
    struct Forgetful;
    impl<B: Backend> Backward<B, 1> for Forgetful {
        type State = ();
        fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, cp: &mut Checkpointer) {
            let _: FloatTensor<B> = cp.retrieve_node_output(NodeId::new());
            unary::<B, _>(ops.parents, ops.node, grads, |g| g);
        }
    }
    let _s = serial();
    let x = leaf(&[1.0]);
    let y = <Forgetful as Backward<Flex, 1>>::prepare::<NoCheckpointing>(Forgetful, [x.node()])
        .compute_bound()
        .stateless(x.primitive.clone());
    let _ = A::backward(y);
}

/// Custom ops' outputs kept for backward now.
fn saved_custom_outputs() -> usize {
    remat::saved_values()
        .0
        .iter()
        .filter(|v| v.op == "custom" && v.reason == remat::KeepReason::Saved)
        .count()
}

/// `sum(double(double(x)) * w)`: the multiplication's backward reads the second `double`'s
/// output, whose replay reads the first's.
fn doubles<C: CheckpointStrategy>(x: &T, w: &T) -> T {
    let d = double::<C>(double::<C>(x.clone()));
    A::float_sum(A::float_mul(d, w.clone()))
}

/// A memory-bound custom op with a retro-forward over tracked parents is placed like a
/// built-in cheap op: SaveAll keeps its output, Balanced / RecomputeAll / a region drop it
/// and replay the retro-forward (parents first, each once), with the same bits.
#[test]
fn a_memory_bound_custom_op_is_replayed_through_its_retro_forward() {
    let _s = serial();
    let before = remat::stats().live_bytes;
    let run = |policy: Option<Policy>| {
        remat::reset_stats();
        let (x, w) = (leaf(&[0.5, -1.5]), leaf(&[3.0, 0.25]));
        let forward = || doubles::<NoCheckpointing>(&x, &w);
        let y = match policy.clone() {
            Some(policy) => remat::with_policy(policy, forward),
            None => remat::checkpoint(forward),
        };
        let kept = saved_custom_outputs();
        let grads = A::backward(y);
        let got = (
            values(A::grad(&x, &grads).unwrap()),
            values(A::grad(&w, &grads).unwrap()),
        );
        let replays = remat::stats().replays_by_op.get("custom").copied();
        (got, kept, replays.unwrap_or(0))
    };
    let (reference, kept, replays) = run(Some(Policy::SaveAll));
    assert_eq!(reference, (vec![12.0, 1.0], vec![2.0, -6.0]));
    assert_eq!((kept, replays), (1, 0), "SaveAll keeps the read output");
    for policy in [Some(Policy::Balanced), Some(Policy::RecomputeAll), None] {
        let (got, kept, replays) = run(policy.clone());
        let bits = |v: &(Vec<f64>, Vec<f64>)| {
            v.0.iter()
                .chain(&v.1)
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&got), bits(&reference), "{policy:?}");
        assert_eq!(kept, 0, "{policy:?}: the output is dropped");
        assert_eq!(replays, 2, "{policy:?}: both doubles replayed once");
    }
    assert_eq!(remat::stats().live_bytes, before, "drained");
}

/// With an untracked parent the retro-forward cannot be used (as in Burn, the op is
/// compute-bound): its output is kept under every policy and never replayed.
#[test]
fn a_retro_forward_over_an_untracked_parent_keeps_the_output() {
    let _s = serial();
    remat::reset_stats();
    let c = A::float_from_data(
        burn_backend::TensorData::new(vec![1.0, 2.0], vec![2]),
        &Default::default(),
    );
    let w = leaf(&[3.0, 4.0]);
    // double(c) needs no gradient but is mixed with w through a custom mul's guards.
    #[derive(Debug)]
    struct Scale;
    impl<B: Backend> Backward<B, 2> for Scale {
        type State = ();
        fn backward(self, ops: Ops<(), 2>, grads: &mut Gradients, _: &mut Checkpointer) {
            binary::<B, _, _>(ops.parents, ops.node, grads, |g| g, |g| g);
        }
    }
    let retro = RetroDouble { input: c.id() };
    let out = Flex::float_add(c.primitive().clone(), w.primitive().clone());
    let y = remat::with_policy(Policy::RecomputeAll, || {
        let s =
            <Scale as Backward<Flex, 2>>::prepare::<NoCheckpointing>(Scale, [c.node(), w.node()])
                .memory_bound()
                .retro_forward(retro)
                .parents([&c, &w])
                .stateless(out);
        A::float_sum(A::float_mul(s, w.clone()))
    });
    assert_eq!(saved_custom_outputs(), 1);
    let grads = A::backward(y);
    // d/dw sum((c + w) * w) = c + 2w.
    assert_eq!(values(A::grad(&w, &grads).unwrap()), vec![7.0, 10.0]);
    assert_eq!(remat::stats().replays, 0);
}

/// A retro-forward that forgets to save its output is a clear error, not a wrong gradient.
#[test]
#[should_panic(expected = "did not save its output")]
fn a_retro_forward_that_saves_nothing_panics_with_a_hint() {
    #[derive(Debug)]
    struct Lazy;
    impl RetroForward for Lazy {
        fn forward(&self, _: &mut BackwardStates, _: NodeId) {}
    }
    let _s = serial();
    let x = leaf(&[1.0]);
    let w = leaf(&[2.0]);
    let y = remat::with_policy(Policy::RecomputeAll, || {
        let d = <Double as Backward<Flex, 1>>::prepare::<NoCheckpointing>(Double, [x.node()])
            .memory_bound()
            .retro_forward(Lazy)
            .parents([&x])
            .stateless(Flex::float_mul_scalar(x.primitive().clone(), 2.0f64.into()));
        A::float_sum(A::float_mul(d, w.clone()))
    });
    let _ = A::backward(y);
}

/// The parts of Burn's custom-op API that take tensors and nodes: `Gradients::get/remove`
/// by tensor (or id), `Requirement::from_nodes`, `Node::clone_if_require_grad`, `NodeId`'s
/// public `value`.
#[test]
fn gradients_nodes_and_ids_as_burn_names_them() {
    use remat::ops::custom::{Node, Requirement};
    use std::sync::Arc;
    let _s = serial();
    let x = leaf(&[1.0, 2.0]);
    let plain = A::float_from_data(
        burn_backend::TensorData::new(vec![1.0f64], vec![1]),
        &Default::default(),
    );
    let mut grads = A::backward(A::float_sum(A::float_mul(x.clone(), x.clone())));
    let by_tensor = grads.get::<Flex>(&x).expect("by tensor");
    let by_id = grads.get::<Flex>(x.id()).expect("by id");
    assert_eq!(values(by_tensor), values(by_id));
    assert!(
        grads.get::<Flex>(&plain).is_none(),
        "untracked: no gradient"
    );
    assert_eq!(values(grads.remove::<Flex>(&x).unwrap()), vec![2.0, 4.0]);
    assert!(grads.is_empty());

    let node = |requirement| {
        Arc::new(Node {
            id: NodeId::new(),
            requirement,
        })
    };
    let (none, grad) = (node(Requirement::None), node(Requirement::Grad));
    assert_eq!(
        Requirement::from_nodes(std::slice::from_ref(&none)),
        Requirement::None
    );
    assert_eq!(
        Requirement::from_nodes(&[none.clone(), grad.clone()]),
        Requirement::GradInBackward
    );
    assert!(none.clone_if_require_grad().is_none());
    assert_eq!(grad.clone_if_require_grad().map(|n| n.id), Some(grad.id));

    let id = NodeId::new();
    assert_eq!(id.value, id.value());
    assert!(NodeId::new().value > id.value, "fresh ids increase");
}

/// `(x_0, .., x_{N-1}) -> sum_i (i + 1) x_i^2`, checkpointing every input: one node with
/// `N` parents and `N` values its backward reads (inputs `N..2N`).
#[derive(Debug)]
struct WeightedSquares<const N: usize>;

impl<B: Backend, const N: usize> Backward<B, N> for WeightedSquares<N> {
    type State = Vec<NodeId>;

    fn backward(self, ops: Ops<Vec<NodeId>, N>, grads: &mut Gradients, cp: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        for (i, (parent, id)) in ops.parents.into_iter().zip(ops.state).enumerate() {
            let x: FloatTensor<B> = cp.retrieve_node_output(id);
            if let Some(parent) = parent {
                let scale = 2.0 * (i + 1) as f64;
                let dx = B::float_mul_scalar(B::float_mul(grad.clone(), x), scale.into());
                grads.register::<B>(parent.id, dx);
            }
        }
    }
}

fn weighted_squares<const N: usize>(xs: [T; N]) -> T {
    let guards = core::array::from_fn(|i| xs[i].node());
    let out = xs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let p = x.primitive().clone();
            Flex::float_mul_scalar(Flex::float_mul(p.clone(), p), ((i + 1) as f64).into())
        })
        .reduce(Flex::float_add)
        .expect("at least one input");
    match WeightedSquares::<N>
        .prepare::<NoCheckpointing>(guards)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let ids = xs.iter().map(|x| prep.checkpoint(x)).collect();
            prep.finish(ids, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}

/// `(x_0, .., x_{N-1}) -> sum_i x_i`, memory-bound: its retro-forward reads all `N` parents
/// (inputs `N..2N` of its node).
#[derive(Debug)]
struct SumAll<const N: usize>;

impl<B: Backend, const N: usize> Backward<B, N> for SumAll<N> {
    type State = ();

    fn backward(self, ops: Ops<(), N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        for parent in ops.parents.into_iter().flatten() {
            grads.register::<B>(parent.id, grad.clone());
        }
    }
}

#[derive(Debug)]
struct RetroSumAll(Vec<NodeId>);

impl RetroForward for RetroSumAll {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        let sum = self
            .0
            .iter()
            .map(|id| states.get_state::<FloatTensor<Flex>>(id))
            .reduce(Flex::float_add)
            .expect("at least one parent");
        states.save(out_node, sum);
    }
}

fn sum_all<const N: usize>(xs: [T; N]) -> T {
    let guards = core::array::from_fn(|i| xs[i].node());
    let out = xs
        .iter()
        .map(|x| x.primitive().clone())
        .reduce(Flex::float_add)
        .expect("at least one input");
    <SumAll<N> as Backward<Flex, N>>::prepare::<NoCheckpointing>(SumAll, guards)
        .memory_bound()
        .retro_forward(RetroSumAll(xs.iter().map(|x| x.id()).collect()))
        .parents(&xs)
        .stateless(out)
}

/// A custom op over 40 inputs (Burn's `prepare` takes any `N`): past the 32 inputs a node
/// holds inline, what its backward reads and which parents are tracked stay exact, under
/// every policy, with one input untracked; a memory-bound op over 40 parents is replayed
/// through its retro-forward.
#[test]
fn a_custom_op_with_40_inputs_gets_exact_gradients() {
    const N: usize = 40;
    const UNTRACKED: usize = 35;
    let _s = serial();
    let before = remat::stats().live_bytes;
    let value = |i: usize| [0.01 * i as f64 - 0.2, 0.5 - 0.02 * i as f64];
    // d/dl_i sum((i + 1) sin(l_i)^2) = 2 (i + 1) sin(l_i) cos(l_i).
    let want = |i: usize| value(i).map(|l| 2.0 * (i + 1) as f64 * l.sin() * l.cos());
    let run = |policy: Option<Policy>| {
        let leaves: Vec<T> = (0..N)
            .map(|i| {
                let t = A::float_from_data(
                    burn_backend::TensorData::new(value(i).to_vec(), vec![2]),
                    &Default::default(),
                );
                if i == UNTRACKED {
                    t
                } else {
                    A::float_set_require_grad(t, true)
                }
            })
            .collect();
        // Inputs are op outputs (sin), so that RecomputeAll and regions drop and rebuild
        // the values the backward reads.
        let forward = || {
            let xs = core::array::from_fn(|i| A::float_sin(leaves[i].clone()));
            A::float_sum(weighted_squares::<N>(xs))
        };
        let loss = match policy {
            Some(policy) => remat::with_policy(policy, forward),
            None => remat::checkpoint(forward),
        };
        let grads = A::backward(loss);
        let got: Vec<Option<Vec<f64>>> = leaves
            .iter()
            .map(|l| A::grad(l, &grads).map(values))
            .collect();
        got
    };
    let reference = run(Some(Policy::SaveAll));
    for (i, got) in reference.iter().enumerate() {
        if i == UNTRACKED {
            assert!(got.is_none(), "input {i} is untracked: no gradient");
            continue;
        }
        let got = got.as_ref().expect("a tracked input has a gradient");
        for (g, w) in got.iter().zip(want(i)) {
            assert!((g - w).abs() < 1e-12, "input {i}: {g} vs {w}");
        }
    }
    for policy in [Some(Policy::Balanced), Some(Policy::RecomputeAll), None] {
        assert_eq!(run(policy.clone()), reference, "{policy:?}");
    }

    // Memory-bound over 40 parents: dropped under RecomputeAll and replayed once.
    remat::reset_stats();
    let leaves: [T; N] = core::array::from_fn(|i| leaf(&value(i)));
    let w = leaf(&[3.0, -1.0]);
    let y = remat::with_policy(Policy::RecomputeAll, || {
        A::float_sum(A::float_mul(sum_all::<N>(leaves.clone()), w.clone()))
    });
    let grads = A::backward(y);
    assert_eq!(remat::stats().replays_by_op.get("custom"), Some(&1));
    for leaf in &leaves {
        assert_eq!(values(A::grad(leaf, &grads).unwrap()), vec![3.0, -1.0]);
    }
    let sums = (0..2).map(|k| (0..N).map(|i| value(i)[k]).sum::<f64>());
    for (g, s) in values(A::grad(&w, &grads).unwrap()).iter().zip(sums) {
        assert!((g - s).abs() < 1e-12, "{g} vs {s}");
    }
    drop((leaves, grads));
    assert_eq!(remat::stats().live_bytes, before, "drained");
}

/// After a panic the user caught: no scope or region left open, nothing kept, and a fresh
/// graph runs backward to the exact gradients.
fn assert_recovered(label: &str, baseline: u64) {
    assert_eq!(
        remat::policy().source,
        remat::PolicySource::StrategyDefault,
        "{label}: a scope or region left open"
    );
    assert_eq!(
        remat::stats().live_bytes,
        baseline,
        "{label}: values left kept"
    );
    let (gx, gw) = grads_of(program::<NoCheckpointing>);
    let (wx, ww) = want(0.3, 0.5);
    assert!(
        (gx[0] - wx).abs() < 1e-12 && (gw[0] - ww).abs() < 1e-12,
        "{label}"
    );
    assert_eq!(remat::stats().live_bytes, baseline, "{label}: drained");
}

/// A custom op's forward code panics between `prepare` (guards and checkpoints taken) and
/// `finish`, inside a scope and a region: caught, they are closed and everything is freed.
#[test]
fn a_panic_in_a_custom_ops_forward_leaves_remat_usable() {
    let _s = serial();
    let baseline = remat::stats().live_bytes;
    let x = leaf(&[0.5, -0.25]);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        remat::with_policy(Policy::SaveAll, || {
            let e = A::float_exp(x.clone());
            assert!(remat::stats().live_bytes > baseline, "exp's output is kept");
            remat::checkpoint(|| {
                match Cube
                    .prepare::<NoCheckpointing>([e.node()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(mut prep) => {
                        let _ = prep.checkpoint(&e);
                        panic!("the op's kernel fails");
                    }
                    OpsKind::UnTracked(_) => unreachable!("e is tracked"),
                }
            })
        })
    }));
    assert!(caught.is_err());
    drop(x);
    assert_recovered("forward", baseline);
}

/// Retro-forwards of [`counted_double`] dropped so far: one for each of its nodes freed.
static COUNTED_DROPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// [`RetroDouble`], counting its drops: a node is freed exactly when its rule (and this
/// retro-forward with it) is dropped.
#[derive(Debug)]
struct CountedRetro(RetroDouble);

impl RetroForward for CountedRetro {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        self.0.forward(states, out_node);
    }
}

impl Drop for CountedRetro {
    fn drop(&mut self) {
        COUNTED_DROPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `2x`, memory-bound; its node's freeing is counted in [`COUNTED_DROPS`].
fn counted_double(x: T) -> T {
    let retro = CountedRetro(RetroDouble { input: x.id() });
    double_with::<NoCheckpointing>(x, retro)
}

/// `x -> x` whose backward panics after it consumed its gradient and read its checkpoint.
#[derive(Debug)]
struct FailingBackward;

impl<B: Backend> Backward<B, 1> for FailingBackward {
    type State = NodeId;

    fn backward(self, ops: Ops<NodeId, 1>, grads: &mut Gradients, cp: &mut Checkpointer) {
        let _grad = grads.consume::<B>(&ops.node);
        let _x: FloatTensor<B> = cp.retrieve_node_output(ops.state);
        panic!("the op's backward fails");
    }
}

/// A custom op's backward panics in the middle of a backward pass that has rebuilt values
/// (RecomputeAll): caught, the graph is freed and the next backward works.
#[test]
fn a_panic_in_a_custom_ops_backward_leaves_remat_usable() {
    let _s = serial();
    let baseline = remat::stats().live_bytes;
    remat::reset_stats();
    COUNTED_DROPS.store(0, std::sync::atomic::Ordering::SeqCst);
    let x = leaf(&[0.5, -0.25]);
    let loss = remat::with_policy(Policy::RecomputeAll, || {
        let s = A::float_sin(counted_double(x.clone()));
        let guard = s.node();
        let out = s.primitive().clone();
        let c = match FailingBackward
            .prepare::<NoCheckpointing>([guard])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let id = prep.checkpoint(&s);
                prep.finish(id, out)
            }
            OpsKind::UnTracked(_) => unreachable!("s is tracked"),
        };
        A::float_sum(A::float_exp(c))
    });
    assert!(
        remat::stats().live_bytes > baseline,
        "the custom op's output is kept"
    );
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| A::backward(loss)));
    assert!(caught.is_err());
    assert_eq!(
        remat::stats().replays,
        3,
        "exp, sin and the double were rebuilt before the panic"
    );
    assert_eq!(
        COUNTED_DROPS.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the graph (its double's node) is freed"
    );
    drop(x);
    assert_recovered("backward", baseline);
}

/// A retro-forward that panics during a replay.
#[derive(Debug)]
struct FailingRetro;

impl RetroForward for FailingRetro {
    fn forward(&self, _: &mut BackwardStates, _: NodeId) {
        panic!("the retro-forward fails");
    }
}

/// A custom op's retro-forward panics while backward replays it: caught, the graph is
/// freed and the next backward works.
#[test]
fn a_panic_in_a_retro_forward_leaves_remat_usable() {
    let _s = serial();
    let baseline = remat::stats().live_bytes;
    COUNTED_DROPS.store(0, std::sync::atomic::Ordering::SeqCst);
    let (x, w) = (leaf(&[0.5, -1.5]), leaf(&[3.0, 0.25]));
    let y = remat::with_policy(Policy::RecomputeAll, || {
        let d = <Double as Backward<Flex, 1>>::prepare::<NoCheckpointing>(Double, [x.node()])
            .memory_bound()
            .retro_forward(FailingRetro)
            .parents([&x])
            .stateless(Flex::float_mul_scalar(x.primitive().clone(), 2.0f64.into()));
        A::float_sum(A::float_mul(d, counted_double(w.clone())))
    });
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| A::backward(y)));
    assert!(caught.is_err());
    assert_eq!(
        COUNTED_DROPS.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the graph (the other double's node) is freed"
    );
    drop((x, w));
    assert_recovered("retro-forward", baseline);
}

/// Retro-forwards that run their own backward pass (on another small graph) during the
/// outer pass's replay.
static NESTED_PASSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `2x` computed as the gradient of `sum(x * x)` on a graph of its own: bit for bit the
/// forward's `2x` (`x + x`).
#[derive(Debug)]
struct RetroByBackward {
    input: NodeId,
}

impl RetroForward for RetroByBackward {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        let x: FloatTensor<Flex> = states.get_state(&self.input);
        let x = A::float_set_require_grad(A::from_inner(x), true);
        let grads = A::backward(A::float_sum(A::float_mul(x.clone(), x.clone())));
        NESTED_PASSES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        states.save(out_node, A::grad(&x, &grads).expect("x has a gradient"));
    }
}

/// A retro-forward that runs a forward + backward of its own while the outer backward pass
/// replays it: no engine lock is held over it, so it neither deadlocks nor panics.
#[test]
fn a_retro_forward_may_run_its_own_backward() {
    let _s = serial();
    let baseline = remat::stats().live_bytes;
    NESTED_PASSES.store(0, std::sync::atomic::Ordering::SeqCst);
    let got = support::finishes("a retro-forward running backward", || {
        let (x, w) = (leaf(&[0.5, -1.5]), leaf(&[3.0, 0.25]));
        let y = remat::with_policy(Policy::RecomputeAll, || {
            let retro = RetroByBackward { input: x.id() };
            let d = <Double as Backward<Flex, 1>>::prepare::<NoCheckpointing>(Double, [x.node()])
                .memory_bound()
                .retro_forward(retro)
                .parents([&x])
                .stateless(Flex::float_mul_scalar(x.primitive().clone(), 2.0f64.into()));
            A::float_sum(A::float_mul(d, w.clone()))
        });
        let grads = A::backward(y);
        (
            values(A::grad(&x, &grads).unwrap()),
            values(A::grad(&w, &grads).unwrap()),
        )
    });
    assert_eq!(got, (vec![6.0, 0.5], vec![1.0, -3.0]));
    assert_eq!(NESTED_PASSES.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(remat::stats().live_bytes, baseline, "drained");
}

/// The op's own output, handed to its retro-forward through a cell (user code may hold any
/// tensor).
static OWN_OUTPUT: Mutex<Option<T>> = Mutex::new(None);

/// `2x`; first records an op on the tensor being rebuilt (its own output).
#[derive(Debug)]
struct RetroRecordingOnItsOutput {
    input: NodeId,
}

impl RetroForward for RetroRecordingOnItsOutput {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        let own = OWN_OUTPUT.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(own) = own {
            // sin reads its input: recording it marks the op's node as needed.
            drop(A::float_sin(own));
        }
        let x: FloatTensor<Flex> = states.get_state(&self.input);
        states.save(out_node, Flex::float_mul_scalar(x, 2.0f64.into()));
    }
}

/// A retro-forward that records on the very node being replayed: the replay holds no lock
/// on that node while user code runs (before, recording waited forever on the node's
/// mutex, held by the replay).
#[test]
fn a_retro_forward_may_record_on_the_node_being_replayed() {
    let _s = serial();
    let baseline = remat::stats().live_bytes;
    let got = support::finishes("a retro-forward recording on its own output", || {
        let (x, w) = (leaf(&[0.5, -1.5]), leaf(&[3.0, 0.25]));
        let y = remat::with_policy(Policy::RecomputeAll, || {
            let retro = RetroRecordingOnItsOutput { input: x.id() };
            let d = <Double as Backward<Flex, 1>>::prepare::<NoCheckpointing>(Double, [x.node()])
                .memory_bound()
                .retro_forward(retro)
                .parents([&x])
                .stateless(Flex::float_mul_scalar(x.primitive().clone(), 2.0f64.into()));
            *OWN_OUTPUT.lock().unwrap() = Some(d.clone());
            A::float_sum(A::float_mul(d, w.clone()))
        });
        let grads = A::backward(y);
        (
            values(A::grad(&x, &grads).unwrap()),
            values(A::grad(&w, &grads).unwrap()),
        )
    });
    assert!(
        OWN_OUTPUT.lock().unwrap().is_none(),
        "the retro-forward ran"
    );
    assert_eq!(got, (vec![6.0, 0.5], vec![1.0, -3.0]));
    assert_eq!(remat::stats().live_bytes, baseline, "drained");
}

/// An untracked tensor's id (Burn's `AutodiffTensor::id`, what a custom op saves its inputs
/// under) is the same every time it is asked for, on the tensor and on its clones, and is
/// the id its node guard and `checkpoint` hand out; two untracked tensors have two ids.
#[test]
fn an_untracked_tensor_has_one_stable_id() {
    let plain = A::float_from_data(
        burn_backend::TensorData::new(vec![1.0f64, 2.0], vec![2]),
        &Default::default(),
    );
    let clone_before = plain.clone();
    let id = plain.id();
    assert_eq!(plain.id(), id, "asked twice");
    assert_eq!(clone_before.id(), id, "a clone taken before the first id()");
    assert_eq!(plain.clone().id(), id, "a clone taken after");
    assert_eq!(plain.node().id(), id, "the node guard");
    assert_eq!(plain.clone().into_parts().1.id(), id, "into_parts");
    let other = A::float_exp(plain.clone());
    assert_ne!(other.id(), id, "another tensor");

    // A custom op that saves its inputs' ids in its state (as Burn's own ops do) and
    // checkpoints them finds the untracked one under that id in backward.
    let w = leaf(&[3.0, 4.0]);
    let guards = [plain.node(), w.node()];
    let out = Flex::float_mul(plain.primitive.clone(), w.primitive.clone());
    let y = match Mul
        .prepare::<NoCheckpointing>(guards)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let state = (plain.id(), w.id());
            assert_eq!(prep.checkpoint(&plain), id, "checkpoint");
            prep.checkpoint(&w);
            prep.finish(state, out)
        }
        OpsKind::UnTracked(_) => panic!("w is tracked"),
    };
    let grads = A::backward(A::float_sum(y));
    assert_eq!(values(A::grad(&w, &grads).unwrap()), vec![1.0, 2.0]);
}

/// A graph recorded under one budget lives on while an op is recorded under a much smaller
/// one: the live values no longer fit, and those that can be rebuilt are dropped, but never
/// a value that cannot be (here the output of `cube`, which has no retro-forward and which
/// `mul`'s backward reads).
#[test]
fn a_smaller_budget_never_drops_a_value_that_cannot_be_rebuilt() {
    let _s = serial();
    let reference = remat::with_policy(Policy::SaveAll, || {
        grads_of(program::<BalancedCheckpointing>)
    });
    let got = grads_of(|x, w| {
        let loss = remat::with_policy(Policy::Budget(u64::MAX), || {
            program::<BalancedCheckpointing>(x, w)
        });
        // Room for the custom op's output (3 f64) and the new op's, nothing else.
        let other = remat::with_policy(Policy::Budget(48), || A::float_sin(x.clone()));
        drop(other);
        loss
    });
    assert_eq!(got, reference);
}

/// [`RetroDouble`], slow (3 ms), as a custom op's replay may be.
#[derive(Debug)]
struct SlowRetro(RetroDouble);

impl RetroForward for SlowRetro {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        std::thread::sleep(std::time::Duration::from_millis(3));
        self.0.forward(states, out_node);
    }
}

/// `2x`, memory-bound, with a slow replay.
fn slow_double(x: T) -> T {
    let retro = SlowRetro(RetroDouble { input: x.id() });
    double_with::<NoCheckpointing>(x, retro)
}

/// NOTE [replay-times] in `checkpoint/cost.rs`: the planner weighs a replay by what replays of
/// its kind took, where it timed some. `sum(exp(slow_double(x) * sin(x)))` under a budget
/// that holds two of its three values: one of the multiplication's inputs is rebuilt. The
/// custom op looks cheap (its forward is the caller's, untimed; its cost is estimated) but
/// its replay sleeps 3 ms: the first step (online) replays it, and the plan made after that
/// step rebuilds `sin(x)` instead. The plan used to rebuild the custom op's output every
/// step (planned before the first step's replays ran, from forward times only). With
/// measured op costs (`OpCosts::Measured`; estimated costs time nothing: NOTE
/// [estimated-costs]), set while the tests of this binary that plan take turns (`serial`).
#[test]
fn the_plan_weighs_a_replay_by_what_replays_of_its_kind_took() {
    let _s = serial();
    struct Estimated;
    impl Drop for Estimated {
        fn drop(&mut self) {
            remat::set_op_costs(remat::OpCosts::Estimated);
        }
    }
    remat::set_op_costs(remat::OpCosts::Measured);
    let _estimated = Estimated;
    let x = leaf(&[0.5; 1000]);
    let value = 8000u64;
    let step = |budget: u64| {
        remat::reset_stats();
        let y = remat::with_policy(Policy::Budget(budget), || {
            let a = slow_double(x.clone());
            let b = A::float_sin(x.clone());
            A::float_sum(A::float_exp(A::float_mul(a, b)))
        });
        let grads = A::backward(y);
        assert!(A::grad(&x, &grads).is_some());
        remat::stats().replays_by_op
    };
    // The first step runs online: the custom op looks cheapest to rebuild, and its replay is
    // timed. The plan made after it rebuilds `sin(x)`, which the next steps follow.
    let first = step(2 * value);
    assert_eq!(first.get("custom"), Some(&1), "{first:?}");
    for _ in 0..2 {
        let replays = step(2 * value);
        assert_eq!(replays.get("custom"), None, "{replays:?}");
        assert_eq!(replays.get("sin"), Some(&1), "{replays:?}");
    }
}

/// `x -> 2x`, stateless, whose backward runs a backward pass of its own: the gradient of a
/// small graph recorded there under a budget (user code in a backward step may do so).
#[derive(Debug)]
struct NestedPass;

impl Backward<Flex, 1> for NestedPass {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let z = leaf(&[0.25; 16]);
        let inner = remat::with_policy(Policy::Budget(u64::MAX), || {
            A::float_sum(A::float_exp(A::float_sin(z.clone())))
        });
        let inner_grads = A::backward(inner);
        assert!(A::grad(&z, &inner_grads).is_some());
        unary::<Flex, _>(ops.parents, ops.node, grads, |grad| {
            Flex::float_mul_scalar(grad, 2.0f64.into())
        });
    }
}

/// A budget's plan for the next steps is made when its backward pass ends, from the pass's
/// own view, even when a backward pass ran inside it (a custom op's backward here): the
/// inner pass used to take over the outer one's view, so the outer graph was never planned
/// (every step ran online) and `tradeoff()` described the inner graph.
#[test]
fn a_backward_pass_inside_another_leaves_the_outer_ones_plan() {
    let _s = serial();
    let x = leaf(&[0.5; 1000]);
    let value = 8000u64;
    let budget = 5 * value;
    let run = || {
        let mut y = x.clone();
        for i in 0..40 {
            y = if i == 20 {
                let out = Flex::float_mul_scalar(y.primitive.clone(), 2.0f64.into());
                <NestedPass as Backward<Flex, 1>>::prepare::<NoCheckpointing>(
                    NestedPass,
                    [y.node()],
                )
                .compute_bound()
                .stateless(out)
            } else if i % 2 == 0 {
                A::float_sin(y)
            } else {
                A::float_exp(A::float_mul_scalar(y, 0.5f64.into()))
            };
        }
        A::float_sum(y)
    };
    let reference = remat::with_policy(Policy::SaveAll, || {
        values(A::grad(&x, &A::backward(run())).unwrap())
    });
    let mut replays = Vec::new();
    for step in 0..3 {
        remat::reset_stats();
        let y = remat::with_policy(Policy::Budget(budget), run);
        let grads = A::backward(y);
        assert_eq!(
            values(A::grad(&x, &grads).unwrap()),
            reference,
            "step {step}"
        );
        let stats = remat::stats();
        assert!(stats.peak_bytes <= budget, "step {step}: {stats:?}");
        replays.push(stats.replays);
        if step == 0 {
            let view = remat::tradeoff().expect("a budget step ran").view;
            assert!(
                view.len() > 40,
                "the outer graph's view: {} ops",
                view.len()
            );
            let plan = remat::planner::plan(&view, budget).unwrap();
            let planned = remat::planner::simulate(&view, &plan, budget).unwrap();
            replays.push(planned.total_replays);
        }
    }
    // [first step, the plan's, second step, third step]
    assert_ne!(
        replays[0], replays[1],
        "the online pass and the plan differ: {replays:?}"
    );
    assert_eq!(replays[2], replays[1], "{replays:?}");
    assert_eq!(replays[3], replays[1], "{replays:?}");
}

/// A backward pass under a budget that panics midway (a custom op's backward fails) still
/// leaves its graph's view for `tradeoff()` (it used to leave none), and remat stays usable.
#[test]
fn a_panicked_budget_pass_leaves_its_view() {
    let _s = serial();
    let baseline = remat::stats().live_bytes;
    let x = leaf(&[0.5, -0.25, 0.75]);
    let loss = remat::with_policy(Policy::Budget(u64::MAX), || {
        let s = A::float_tanh(A::float_sin(x.clone()));
        let guard = s.node();
        let out = s.primitive().clone();
        let c = match FailingBackward
            .prepare::<NoCheckpointing>([guard])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let id = prep.checkpoint(&s);
                prep.finish(id, out)
            }
            OpsKind::UnTracked(_) => unreachable!("s is tracked"),
        };
        A::float_sum(A::float_exp(c))
    });
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| A::backward(loss)));
    assert!(caught.is_err());
    let view = remat::tradeoff().expect("the pass left its view").view;
    let names: Vec<&str> = view.nodes().iter().map(|n| n.name).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    assert!(names.contains(&"tanh"), "{names:?}");
    drop(x);
    assert_recovered("a budget's backward", baseline);
    // The next step under the budget plans and runs as usual.
    let y = leaf(&[0.5, -0.25, 0.75]);
    let loss = remat::with_policy(Policy::Budget(u64::MAX), || {
        A::float_sum(A::float_exp(A::float_sin(y.clone())))
    });
    assert!(A::grad(&y, &A::backward(loss)).is_some());
}
