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
