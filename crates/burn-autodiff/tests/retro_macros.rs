//! Burn's `retro_unary!`, `retro_binary!` and `retro_unary_scalar!` macros, used by a custom
//! op the way Burn's own ops use them: under `RecomputeAll` the op's output is dropped and
//! rebuilt by the macro-made retro-forward, with the same gradients as when it is kept.

use burn_autodiff::checkpoint::strategy::NoCheckpointing;
use burn_autodiff::checkpoint::{base::Checkpointer, state::BackwardStates};
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, unary};
use burn_autodiff::{Autodiff, NodeId, retro_binary, retro_unary, retro_unary_scalar};
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, Scalar, TensorData};
use burn_flex::Flex;
use remat::Policy;

type A = Autodiff<Flex>;

retro_unary!(RetroExp, B::float_exp);
retro_binary!(RetroMul, B::float_mul);
retro_unary_scalar!(RetroAddScalar, B::float_add_scalar);

/// `exp(x)`, memory-bound: its backward multiplies by its own output (checkpointed).
#[derive(Debug)]
struct Exp;

impl<B: Backend> Backward<B, 1> for Exp {
    type State = NodeId;

    fn backward(self, ops: Ops<NodeId, 1>, grads: &mut Gradients, cp: &mut Checkpointer) {
        let input: FloatTensor<B> = cp.retrieve_node_output(ops.state);
        unary::<B, _>(ops.parents, ops.node, grads, |g| {
            B::float_mul(g, B::float_exp(input))
        });
    }
}

fn values(t: FloatTensor<Flex>) -> Vec<f32> {
    burn_backend::read_sync(Flex::float_into_data(t))
        .unwrap()
        .try_to_vec::<f32>()
        .unwrap()
}

fn leaf(v: &[f32]) -> FloatTensor<A> {
    let t = A::float_from_data(
        TensorData::new(v.to_vec(), vec![v.len()]),
        &Default::default(),
    );
    A::float_set_require_grad(t, true)
}

#[test]
fn macro_made_retro_forwards_rebuild_dropped_outputs() {
    let run = |policy: Policy| {
        remat::reset_stats();
        let x = leaf(&[0.5, -1.0, 2.0]);
        let y = remat::with_policy(policy, || {
            let guard = x.node();
            let out = Flex::float_exp(x.primitive().clone());
            let e = <Exp as Backward<Flex, 1>>::prepare::<NoCheckpointing>(Exp, [guard])
                .memory_bound()
                .retro_forward(RetroExp::<Flex>::new(x.id()))
                .parents([&x]);
            let e = match e.stateful() {
                burn_autodiff::ops::OpsKind::Tracked(mut prep) => {
                    let state = prep.checkpoint(&x);
                    prep.finish(state, out)
                }
                burn_autodiff::ops::OpsKind::UnTracked(prep) => prep.finish(out),
            };
            // The multiplication's backward reads `e`.
            A::float_sum(A::float_mul(e.clone(), e))
        });
        let grads = A::backward(y);
        (values(A::grad(&x, &grads).unwrap()), remat::stats().replays)
    };
    let (kept, kept_replays) = run(Policy::SaveAll);
    let (rebuilt, replays) = run(Policy::RecomputeAll);
    assert_eq!(kept_replays, 0);
    assert!(replays >= 1, "the exp was replayed");
    assert_eq!(kept, rebuilt);
    for (g, x) in kept.iter().zip([0.5f32, -1.0, 2.0]) {
        let want = 2.0 * (2.0 * x).exp();
        assert!((g - want).abs() <= 1e-5 * want, "{g} vs {want}");
    }
}

#[test]
fn the_macros_read_and_save_states_by_node() {
    let device = Default::default();
    let a = Flex::float_from_data(TensorData::from([1.0f32, 2.0]), &device);
    let b = Flex::float_from_data(TensorData::from([3.0f32, -4.0]), &device);
    let (ia, ib, out) = (NodeId::new(), NodeId::new(), NodeId::new());
    let mut states = BackwardStates::default();
    states.save(ia, a);
    states.save(ib, b);
    use burn_autodiff::checkpoint::retro_forward::RetroForward;
    RetroMul::<Flex>::new(ia, ib).forward(&mut states, out);
    let product: FloatTensor<Flex> = states.get_state(&out);
    assert_eq!(values(product), vec![3.0, -8.0]);
    RetroAddScalar::<Flex>::new(ia, Scalar::Float(0.5)).forward(&mut states, out);
    let shifted: FloatTensor<Flex> = states.get_state(&out);
    assert_eq!(values(shifted), vec![1.5, 2.5]);
}
