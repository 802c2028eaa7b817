//! Burn's custom-op API (`Backward`, `prepare`, `memory_bound().retro_forward(..).parents(..)`,
//! `checkpoint`, `Checkpointer`, `BackwardStates`, `unary`): the same memory-bound op, written
//! once by a macro against each crate's paths, inside the same program of built-in ops, on
//! Burn's autodiff and on remat, under NoCheckpointing and BalancedCheckpointing (where both
//! engines drop the op's output and rebuild it with the retro-forward). Gradients agree, and
//! remat's are bit-identical under every policy.

use burn_backend::{TensorData, ops::FloatTensorOps, tensor::FloatTensor};
use burn_flex::Flex;

/// A program over one engine's custom-op API: `sum(e * e)` with `e = exp(exp(x) * w)`, both
/// `exp`s custom and memory-bound.
macro_rules! engine {
    ($module:ident, { $($uses:item)* }) => {
        mod $module {
            use burn_backend::{AutodiffBackend, Backend, ops::FloatTensorOps, tensor::FloatTensor};
            use burn_flex::Flex;
            $($uses)*

            #[derive(Debug)]
            struct Exp;

            impl<B: Backend> Backward<B, 1> for Exp {
                type State = NodeId;

                fn backward(
                    self,
                    ops: Ops<NodeId, 1>,
                    grads: &mut Gradients,
                    checkpointer: &mut Checkpointer,
                ) {
                    let x: FloatTensor<B> = checkpointer.retrieve_node_output(ops.state);
                    unary::<B, _>(ops.parents, ops.node, grads, |g| {
                        B::float_mul(g, B::float_exp(x))
                    });
                }
            }

            #[derive(Debug)]
            struct RetroExp {
                input: NodeId,
            }

            impl RetroForward for RetroExp {
                fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
                    let x: FloatTensor<Flex> = states.get_state(&self.input);
                    states.save(out_node, Flex::float_exp(x));
                }
            }

            fn exp<C: CheckpointStrategy>(
                x: FloatTensor<Autodiff<Flex, C>>,
            ) -> FloatTensor<Autodiff<Flex, C>> {
                let out = Flex::float_exp(x.primitive().clone());
                let prep = <Exp as Backward<Flex, 1>>::prepare::<C>(Exp, [x.node()])
                    .memory_bound()
                    .retro_forward(RetroExp { input: x.id() })
                    .parents([&x]);
                match prep.stateful() {
                    OpsKind::Tracked(mut prep) => {
                        let state = prep.checkpoint(&x);
                        prep.finish(state, out)
                    }
                    OpsKind::UnTracked(prep) => prep.finish(out),
                }
            }

            /// The gradients of `x` and `w`.
            pub fn run<C: CheckpointStrategy>(
                x: FloatTensor<Flex>,
                w: FloatTensor<Flex>,
            ) -> (FloatTensor<Flex>, FloatTensor<Flex>) {
                type A<C> = Autodiff<Flex, C>;
                let x = A::<C>::float_set_require_grad(A::<C>::from_inner(x), true);
                let w = A::<C>::float_set_require_grad(A::<C>::from_inner(w), true);
                let e = exp::<C>(A::<C>::float_mul(exp::<C>(x.clone()), w.clone()));
                let y = A::<C>::float_sum(A::<C>::float_mul(e.clone(), e));
                let grads = A::<C>::backward(y);
                (
                    A::<C>::grad(&x, &grads).expect("x has a gradient"),
                    A::<C>::grad(&w, &grads).expect("w has a gradient"),
                )
            }
        }
    };
}

engine!(burn_engine, {
    use burn_autodiff::Autodiff;
    use burn_autodiff::NodeId;
    use burn_autodiff::checkpoint::base::Checkpointer;
    use burn_autodiff::checkpoint::retro_forward::RetroForward;
    use burn_autodiff::checkpoint::state::BackwardStates;
    use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn_autodiff::grads::Gradients;
    use burn_autodiff::ops::{Backward, Ops, OpsKind, unary};
});

engine!(remat_engine, {
    use remat::Autodiff;
    use remat::NodeId;
    use remat::checkpoint::strategy::CheckpointStrategy;
    use remat::grads::Gradients;
    use remat::ops::custom::{
        Backward, BackwardStates, Checkpointer, Ops, OpsKind, RetroForward, unary,
    };
});

fn inner(values: &[f32]) -> FloatTensor<Flex> {
    Flex::float_from_data(
        TensorData::new(values.to_vec(), vec![2, values.len() / 2]),
        &Default::default(),
    )
}

fn to_vec(t: FloatTensor<Flex>) -> Vec<f32> {
    burn_backend::read_sync(Flex::float_into_data(t))
        .expect("data")
        .try_to_vec::<f32>()
        .expect("f32")
}

fn pair((x, w): (FloatTensor<Flex>, FloatTensor<Flex>)) -> Vec<f32> {
    let mut v = to_vec(x);
    v.extend(to_vec(w));
    v
}

#[test]
fn a_memory_bound_custom_op_matches_burn_under_both_strategies() {
    use burn_autodiff::checkpoint::strategy as burn_strategy;
    use remat::checkpoint::strategy as remat_strategy;
    let xs = [0.3f32, -0.8, 0.5, 0.1, -0.2, 0.7];
    let ws = [0.4f32, 0.9, -0.6, 0.2, 0.5, -0.3];
    let burn = pair(burn_engine::run::<burn_strategy::NoCheckpointing>(
        inner(&xs),
        inner(&ws),
    ));
    let burn_balanced = pair(burn_engine::run::<burn_strategy::BalancedCheckpointing>(
        inner(&xs),
        inner(&ws),
    ));
    assert_eq!(burn, burn_balanced, "Burn's own strategies agree");

    remat::reset_stats();
    let ours = pair(remat_engine::run::<remat_strategy::NoCheckpointing>(
        inner(&xs),
        inner(&ws),
    ));
    assert_eq!(
        remat::stats().replays,
        0,
        "NoCheckpointing keeps the outputs"
    );
    for (i, (a, b)) in ours.iter().zip(&burn).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "gradient {i}: remat {a} vs Burn {b}"
        );
    }
    remat::reset_stats();
    let balanced = pair(remat_engine::run::<remat_strategy::BalancedCheckpointing>(
        inner(&xs),
        inner(&ws),
    ));
    assert!(
        remat::stats()
            .replays_by_op
            .get("custom")
            .copied()
            .unwrap_or(0)
            >= 1
    );
    assert_eq!(balanced, ours, "remat Balanced is bit-identical");
    let recompute_all = remat::with_policy(remat::Policy::RecomputeAll, || {
        pair(remat_engine::run::<remat_strategy::NoCheckpointing>(
            inner(&xs),
            inner(&ws),
        ))
    });
    assert_eq!(recompute_all, ours, "remat RecomputeAll is bit-identical");
}
