//! Engine behaviour: deep graphs, consumed graphs, untracked ops, exact replay counts,
//! regions, transfers. Replays are counted with `remat::stats()` (exact numbers).

mod support;

use std::sync::Mutex;

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend};
use burn_flex::Flex;
use remat::checkpoint::strategy::BalancedCheckpointing;
use remat::ops::DifferentiableTransfer;
use remat::{Autodiff, Policy};
use support::{A, Rng, T, tensor, values};

/// Statistics are process-wide: tests that read them run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn leaf(values: Vec<f64>, shape: &[usize]) -> T {
    A::float_set_require_grad(tensor(values, shape), true)
}

/// A chain of `n` cheap ops; returns (input leaf, output).
fn chain<B: Backend>(x: FloatTensor<B>, n: usize) -> FloatTensor<B> {
    let mut y = x;
    for i in 0..n {
        y = if i % 2 == 0 {
            B::float_sin(y)
        } else {
            B::float_mul_scalar(y, burn_std::Scalar::Float(1.5))
        };
    }
    y
}

fn deep_chain_on_small_stack<Bk: AutodiffBackend>(n: usize) {
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            let device = Default::default();
            let x = Bk::float_from_data(burn_backend::TensorData::from([0.3f32, 0.7]), &device);
            let x = Bk::float_set_require_grad(x, true);
            // Built, run backward on, and dropped.
            let y = chain::<Bk>(x.clone(), n);
            let grads = Bk::backward(y);
            assert!(Bk::grad(&x, &grads).is_some());
            // Built and dropped without backward.
            let y = chain::<Bk>(x.clone(), n);
            drop(y);
        })
        .unwrap();
    handle
        .join()
        .expect("a 100k-op chain runs on a 2 MiB stack");
}

#[test]
fn deep_chains_do_not_overflow_the_stack() {
    let _s = serial();
    deep_chain_on_small_stack::<Autodiff<Flex>>(100_000);
    deep_chain_on_small_stack::<Autodiff<Flex, BalancedCheckpointing>>(100_000);
    // `with_policy` is per thread: the scope opens on the small-stack thread itself.
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            remat::with_policy(Policy::RecomputeAll, || {
                deep_chain_on_small_stack_inline(100_000)
            })
        })
        .unwrap();
    handle
        .join()
        .expect("RecomputeAll on a 100k-op chain runs on a 2 MiB stack");
}

fn deep_chain_on_small_stack_inline(n: usize) {
    let x = leaf(vec![0.3, 0.7], &[2]);
    let y = chain::<A>(x.clone(), n);
    let grads = A::backward(y);
    assert!(A::grad(&x, &grads).is_some());
}

#[test]
#[should_panic(expected = "already consumed")]
fn second_backward_through_a_consumed_graph_panics() {
    let _s = serial();
    let x = leaf(vec![0.5, 1.0], &[2]);
    let y = A::float_exp(x);
    let _ = A::backward(y.clone());
    let _ = A::backward(y);
}

#[test]
fn a_leaf_can_feed_several_graphs() {
    let _s = serial();
    let x = leaf(vec![0.5, 1.0], &[2]);
    let y1 = A::float_mul(x.clone(), x.clone());
    let y2 = A::float_exp(x.clone());
    let g1 = A::backward(y1);
    let g2 = A::backward(y2);
    assert_eq!(values(A::grad(&x, &g1).unwrap()), vec![1.0, 2.0]);
    assert_eq!(
        values(A::grad(&x, &g2).unwrap()),
        vec![0.5f64.exp(), 1.0f64.exp()]
    );
}

#[test]
fn ops_on_untracked_tensors_record_nothing() {
    let _s = serial();
    let before = remat::stats();
    let x = tensor(vec![1.0; 1000], &[1000]);
    let y = chain::<A>(x, 100);
    assert!(!A::float_is_require_grad(&y));
    assert!(!y.is_tracked());
    assert_eq!(remat::stats().live_bytes, before.live_bytes);
}

#[test]
fn dropping_a_graph_frees_its_saved_values_at_once() {
    let _s = serial();
    let before = remat::stats().live_bytes;
    let x = leaf(vec![0.5; 256], &[256]);
    let y = remat::with_policy(Policy::SaveAll, || chain::<A>(x.clone(), 50));
    assert!(remat::stats().live_bytes > before);
    drop(y);
    assert_eq!(remat::stats().live_bytes, before);
}

#[test]
fn recompute_all_replays_each_op_of_a_chain_exactly_once() {
    let _s = serial();
    let n = 200;
    let x = leaf(vec![0.25, 0.5], &[2]);
    let reference = {
        let y = remat::with_policy(Policy::SaveAll, || chain::<A>(x.clone(), n));
        values(A::grad(&x, &A::backward(y)).unwrap())
    };
    remat::reset_stats();
    let y = remat::with_policy(Policy::RecomputeAll, || chain::<A>(x.clone(), n));
    let grads = A::backward(y);
    assert_eq!(values(A::grad(&x, &grads).unwrap()), reference);
    let stats = remat::stats();
    // sin reads its input: the inputs of the n/2 sin ops are outputs of mul_scalar (n/2 - 1
    // of them; the first sin reads the leaf) and of nothing else: each mul_scalar output
    // read by a sin is rebuilt once, and rebuilding it needs the sin output before it,
    // rebuilt once too. The last op's output is never needed.
    assert_eq!(
        stats.replays_by_op.get("mul_scalar"),
        Some(&((n / 2 - 1) as u64))
    );
    assert_eq!(stats.replays_by_op.get("sin"), Some(&((n / 2 - 1) as u64)));
    assert_eq!(stats.live_bytes, 0, "the checkpointer is drained");
}

#[test]
fn a_chain_of_diamonds_replays_linearly() {
    let _s = serial();
    let n = 1000;
    let x = leaf(vec![0.25, 0.5], &[2]);
    let diamonds = |x: T| {
        let mut y = x;
        for _ in 0..n {
            let a = A::float_sin(y.clone());
            let b = A::float_cos(y);
            y = A::float_mul(a, b);
        }
        y
    };
    let reference = {
        let y = remat::with_policy(Policy::SaveAll, || diamonds(x.clone()));
        values(A::grad(&x, &A::backward(y)).unwrap())
    };
    remat::reset_stats();
    let y = remat::with_policy(Policy::RecomputeAll, || diamonds(x.clone()));
    let grads = A::backward(y);
    assert_eq!(values(A::grad(&x, &grads).unwrap()), reference);
    let stats = remat::stats();
    // Every value is rebuilt at most once per backward pass: at most 3 replays per diamond.
    assert!(stats.replays <= 3 * n as u64, "replays: {}", stats.replays);
    assert!(stats.replays >= n as u64, "replays: {}", stats.replays);
}

#[test]
fn a_region_of_k_cheap_ops_replays_each_once() {
    let _s = serial();
    let k = 7;
    let x = leaf(vec![0.1, 0.2, 0.3], &[3]);
    let w = leaf(vec![1.0, 2.0, 3.0], &[3]);
    let program = |x: T, w: T| {
        let h = A::float_mul(x, w);
        let mut y = h;
        for _ in 0..k {
            y = A::float_tanh(y);
        }
        A::float_mul(y.clone(), y)
    };
    let reference = {
        let y = remat::with_policy(Policy::SaveAll, || program(x.clone(), w.clone()));
        let g = A::backward(y);
        (
            values(A::grad(&x, &g).unwrap()),
            values(A::grad(&w, &g).unwrap()),
        )
    };
    remat::reset_stats();
    let y = remat::checkpoint(|| program(x.clone(), w.clone()));
    let g = A::backward(y);
    assert_eq!(
        (
            values(A::grad(&x, &g).unwrap()),
            values(A::grad(&w, &g).unwrap())
        ),
        reference
    );
    let stats = remat::stats();
    assert_eq!(stats.replays_by_op.get("tanh"), Some(&(k as u64)));
    assert_eq!(stats.replays_by_op.get("mul"), Some(&1));
}

#[test]
fn outputs_of_a_region_are_kept_and_inputs_flow_in() {
    let _s = serial();
    let before = remat::stats().live_bytes;
    let x = leaf(vec![0.5; 1024], &[1024]);
    let h = remat::with_policy(Policy::SaveAll, || A::float_exp(x.clone()));
    // Inside the region, nothing produced there is kept; `h` (flowing in) is.
    let y = remat::checkpoint(|| {
        let a = A::float_sin(h.clone());
        let b = A::float_exp(a);
        A::float_cos(b)
    });
    let bytes = 1024 * 8;
    // Kept: exp's output (read by its own backward, and flowing into the region).
    assert_eq!(remat::stats().live_bytes - before, bytes);
    // Used after the region, the region's output is kept.
    let z = A::float_sin(y);
    assert_eq!(remat::stats().live_bytes - before, 2 * bytes);
    let g = A::backward(z);
    assert!(A::grad(&x, &g).is_some());
    assert_eq!(remat::stats().live_bytes, before);
}

/// A transfer adapter within one backend type, to exercise the mechanism.
#[derive(Debug)]
struct Copy;

impl DifferentiableTransfer<Flex, Flex> for Copy {
    fn forward(
        tensor: FloatTensor<Flex>,
        _device: &<Flex as burn_backend::BackendTypes>::Device,
    ) -> FloatTensor<Flex> {
        Flex::float_mul_scalar(tensor, burn_std::Scalar::Float(1.0))
    }
    fn backward(
        tensor: FloatTensor<Flex>,
        _device: &<Flex as burn_backend::BackendTypes>::Device,
    ) -> FloatTensor<Flex> {
        Flex::float_mul_scalar(tensor, burn_std::Scalar::Float(2.0))
    }
}

#[test]
fn gradients_flow_back_through_a_transfer() {
    let _s = serial();
    let x = leaf(vec![0.5, 1.0], &[2]);
    let y = A::float_exp(x.clone());
    let moved = A::to_backend::<Flex, Copy>(y, &Default::default());
    let z = <Autodiff<Flex> as FloatTensorOps<Autodiff<Flex>>>::float_mul_scalar(
        moved,
        burn_std::Scalar::Float(3.0),
    );
    let g = A::backward(z);
    let gx = values(A::grad(&x, &g).unwrap());
    let expected: Vec<f64> = [0.5f64, 1.0].iter().map(|v| 6.0 * v.exp()).collect();
    for (a, b) in gx.iter().zip(expected) {
        assert!((a - b).abs() < 1e-12);
    }
    let _ = Rng::new(0);
}

#[test]
fn saved_values_lists_what_is_kept_and_why() {
    let _s = serial();
    let x = leaf(vec![0.5, 1.0, 1.5], &[3]);
    let y = remat::with_policy(Policy::SaveAll, || A::float_exp(A::float_sin(x.clone())));
    let saved = remat::saved_values();
    let ops: Vec<_> = saved
        .0
        .iter()
        .map(|v| (v.op, v.reason, v.shape.clone()))
        .collect();
    assert_eq!(
        ops,
        vec![
            ("sin", remat::KeepReason::Leaf, vec![3]),
            ("exp", remat::KeepReason::Saved, vec![3]),
        ]
    );
    let table = saved.to_string();
    assert!(table.contains("exp") && table.contains("Saved") && table.contains("2 values"));
    // One total with `stats()`: the footer splits kept bytes from the leaves, as its first
    // line does (3 f64 kept for exp's backward; the leaf, 3 f64, held for sin's).
    let stats = remat::stats();
    assert_eq!((saved.kept_bytes(), saved.leaf_bytes()), (24, 24));
    assert_eq!(
        (saved.kept_bytes(), saved.leaf_bytes()),
        (stats.live_bytes, stats.leaf_bytes)
    );
    assert!(
        table.ends_with("2 values: kept 24 B, leaves held 24 B"),
        "{table}"
    );
    assert!(stats.to_string().starts_with("kept now: 24 B"), "{stats}");
    drop(y);
    assert!(remat::saved_values().0.is_empty());
}

#[test]
fn require_grad_and_detach_follow_burn() {
    let _s = serial();
    let x = leaf(vec![0.5, 1.0], &[2]);
    assert!(A::float_is_require_grad(&x));
    let y = A::float_exp(x.clone());
    // An intermediate is tracked but does not itself "require grad" (Burn's semantics).
    assert!(y.is_tracked() && !A::float_is_require_grad(&y));
    // Detaching a leaf gives a new leaf that still requires a gradient...
    let d = A::float_detach(x.clone());
    assert!(A::float_is_require_grad(&d));
    assert_ne!(d.node_id(), x.node_id());
    // ... detaching an intermediate gives an untracked tensor.
    assert!(!A::float_detach(y.clone()).is_tracked());
    // set_require_grad(false) always gives an untracked tensor.
    assert!(!A::float_set_require_grad(x.clone(), false).is_tracked());
    // Gradients do not flow through a detached leaf into the original.
    let g = A::backward(A::float_mul(d.clone(), y));
    assert!(A::grad(&d, &g).is_some());
    assert_eq!(values(A::grad(&x, &g).unwrap()).len(), 2);
}

#[test]
#[should_panic(expected = "not a leaf")]
fn require_grad_on_an_intermediate_panics() {
    let _s = serial();
    let x = leaf(vec![0.5], &[1]);
    let y = A::float_exp(x);
    let _ = A::float_set_require_grad(y, true);
}

#[test]
fn distributed_parameters_are_marked_and_survive_detach() {
    use burn_backend::distributed::DistributedParamId;
    let _s = serial();
    let id = DistributedParamId::from(7u64);
    let w = A::set_distributed_params(leaf(vec![1.0, 2.0], &[2]), id);
    assert!(A::is_distributed(&w));
    assert_eq!(A::distributed_params(&w).map(|p| p.param_id), Some(id));
    let detached = A::float_detach(w.clone());
    assert_eq!(
        A::distributed_params(&detached).map(|p| p.param_id),
        Some(id)
    );
    // An untracked tensor has no gradient to synchronise: it stays unmarked and untracked.
    let c = A::set_distributed_params(tensor(vec![1.0], &[1]), id);
    assert!(!A::is_distributed(&c) && !c.is_tracked());
    // Backward with a distributed leaf (no communication server running: the inner
    // backend's hooks are no-ops) gives the usual gradient.
    let g = A::backward(A::float_mul(w.clone(), w.clone()));
    assert_eq!(values(A::grad(&w, &g).unwrap()), vec![2.0, 4.0]);
}

#[test]
fn a_region_that_returns_a_captured_tensor_unchanged_is_harmless() {
    let _s = serial();
    let x = leaf(vec![0.5, 1.0], &[2]);
    let h = A::float_exp(x.clone());
    // Nothing is recorded inside: the region hands back a value produced outside it.
    let same = remat::checkpoint(|| h.clone());
    let y = A::float_mul(same, h);
    let g = A::backward(y);
    let expected: Vec<f64> = [0.5f64, 1.0]
        .iter()
        .map(|v| 2.0 * (2.0 * v).exp())
        .collect();
    for (a, b) in values(A::grad(&x, &g).unwrap()).iter().zip(expected) {
        assert!((a - b).abs() < 1e-9);
    }
    // Regions and scopes with no autodiff tensor at all just run their closure.
    let plain = remat::checkpoint(|| remat::with_policy(Policy::RecomputeAll, || 41 + 1));
    assert_eq!(plain, 42);
    assert_eq!(remat::stats().live_bytes, 0);
}

#[test]
fn a_kept_view_of_a_parameter_counts_with_the_leaves() {
    let _s = serial();
    let before = remat::stats();
    let w = leaf(vec![0.5; 16], &[4, 4]);
    let x = leaf(vec![1.0; 32], &[2, 4, 4]);
    let y = remat::with_policy(Policy::SaveAll, || {
        let w3 = A::float_reshape(w.clone(), burn_std::Shape::new([1, 4, 4]));
        A::float_matmul(x.clone(), w3)
    });
    let after = remat::stats();
    // Nothing the user does not already hold is kept: the weight view and the input are leaves.
    assert_eq!(after.live_bytes, before.live_bytes);
    assert!(after.leaf_bytes > before.leaf_bytes);
    drop(y);
    assert_eq!(remat::stats().leaf_bytes, before.leaf_bytes);
}

/// A parameter read by many ops (the weight of every step of a recurrence) is one buffer:
/// `stats()` counts its bytes once and `saved_values()` lists it once, however many of the
/// ops hold it for their backward step (NOTE [shared-constants]; it was counted once per op,
/// 5 x 128 bytes here).
#[test]
fn a_parameter_read_by_many_ops_counts_once_with_the_leaves() {
    let _s = serial();
    let before = remat::stats();
    let w = leaf(vec![0.5; 16], &[4, 4]);
    let y = remat::with_policy(Policy::SaveAll, || {
        let mut h = leaf(vec![1.0; 8], &[2, 4]);
        for _ in 0..5 {
            h = A::float_tanh(A::float_matmul(h, w.clone()));
        }
        h
    });
    let after = remat::stats();
    // The weight (16 f64), once; the first `h`, a leaf too, is read by the first matmul.
    assert_eq!(after.leaf_bytes - before.leaf_bytes, 16 * 8 + 8 * 8);
    let listed = remat::saved_values()
        .0
        .iter()
        .filter(|v| v.reason == remat::KeepReason::Leaf && v.shape == vec![4, 4])
        .count();
    assert_eq!(listed, 1, "the weight is listed once");
    let grads = A::backward(A::float_sum(y));
    assert!(A::grad(&w, &grads).is_some());
    assert_eq!(remat::stats().leaf_bytes, before.leaf_bytes);
}

/// Graphs recorded and differentiated on several threads at once, all reading one shared
/// parameter (a data-parallel step): every thread gets its own exact gradient, under SaveAll
/// and RecomputeAll (policies are per thread inside `with_policy`), and a graph recorded on
/// one thread can run backward on another.
#[test]
fn graphs_on_several_threads_share_a_parameter() {
    let _s = serial();
    let w = leaf(vec![0.25, -0.5, 0.75], &[3]);
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                let c = 1.0 + t as f64;
                let policy = if t % 2 == 0 {
                    Policy::SaveAll
                } else {
                    Policy::RecomputeAll
                };
                let mut last = Vec::new();
                for _ in 0..20 {
                    // y = sum(exp(c * w) * w): dy/dw = exp(c w) (c w + 1).
                    let y = remat::with_policy(policy.clone(), || {
                        let e = A::float_exp(A::float_mul_scalar(
                            w.clone(),
                            burn_std::Scalar::Float(c),
                        ));
                        A::float_sum(A::float_mul(e, w.clone()))
                    });
                    let grads = A::backward(y);
                    last = values(A::grad(&w, &grads).expect("gradient of the shared leaf"));
                }
                (c, last)
            })
        })
        .collect();
    for handle in handles {
        let (c, got) = handle.join().expect("thread");
        for (g, w) in got.iter().zip([0.25f64, -0.5, 0.75]) {
            let want = (c * w).exp() * (c * w + 1.0);
            assert!((g - want).abs() < 1e-12, "c = {c}: {g} vs {want}");
        }
    }
    // Recorded here, differentiated on another thread.
    let y = A::float_sum(A::float_mul(w.clone(), w.clone()));
    let grad = std::thread::spawn(move || {
        let grads = A::backward(y);
        values(A::grad(&w, &grads).unwrap())
    })
    .join()
    .expect("thread");
    assert_eq!(grad, vec![0.5, -1.0, 1.5]);
}

/// Mixed precision: an f32 leaf cast to f16 for the computation and back. The gradient
/// reaches the leaf in f32 (Burn's cast rule casts it back), and an f16 leaf gets an f16
/// gradient; every policy gives the same bits.
#[test]
fn mixed_precision_gradients_keep_the_leaf_dtype() {
    use burn_std::{DType, FloatDType};
    let _s = serial();
    let run = |policy: Policy, dtype: FloatDType| {
        remat::with_policy(policy, || {
            let x = A::float_from_data(
                burn_backend::TensorData::new(vec![0.5f32, -1.0, 1.5, 2.0], vec![4]),
                &Default::default(),
            );
            let x = A::float_set_require_grad(A::float_cast(x, dtype), true);
            let h = A::float_cast(x.clone(), FloatDType::F16);
            let h = A::float_mul(A::float_exp(h.clone()), h);
            let y = A::float_sum(A::float_cast(h, FloatDType::F32));
            let grads = A::backward(y);
            let g = A::grad(&x, &grads).expect("gradient");
            let dtype = g.dtype();
            (dtype, values(g))
        })
    };
    for (leaf_dtype, want_dtype) in [(FloatDType::F32, DType::F32), (FloatDType::F16, DType::F16)] {
        let (dtype, reference) = run(Policy::SaveAll, leaf_dtype);
        assert_eq!(dtype, want_dtype, "gradient dtype of a {leaf_dtype:?} leaf");
        for (g, x) in reference.iter().zip([0.5f64, -1.0, 1.5, 2.0]) {
            let want = x.exp() * (x + 1.0);
            assert!(
                (g - want).abs() <= 1e-2 * want.abs().max(1.0),
                "{leaf_dtype:?}: {g} vs {want}"
            );
        }
        for policy in [Policy::Balanced, Policy::RecomputeAll] {
            let (_, got) = run(policy.clone(), leaf_dtype);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&reference),
                "{leaf_dtype:?} under {policy:?}"
            );
        }
    }
}

/// Balanced rebuilds cheap outputs to save their bytes, but not when the rebuild would keep
/// as many other bytes (NOTE [thrifty-balanced]): after a matmul, `add bias -> exp` keeps
/// what SaveAll keeps with no replay, and `add bias -> gelu` keeps the gelu input (which
/// gelu's backward reads anyway) and replays only the gelu.
#[test]
fn balanced_keeps_a_cheap_output_when_a_rebuild_would_keep_as_much() {
    use burn_backend::ops::ActivationOps;
    let _s = serial();
    let mut rng = Rng::new(77);
    let w = leaf(rng.vec(64), &[8, 8]);
    let b = leaf(rng.vec(8), &[1, 8]);
    let w2 = leaf(rng.vec(16), &[8, 2]);
    let x = tensor(rng.vec(32), &[4, 8]);
    let value_bytes = 4 * 8 * 8;
    let run = |policy: Policy, gelu: bool| {
        remat::with_policy(policy, || {
            remat::reset_stats();
            let before = remat::stats().live_bytes;
            let a = A::float_add(A::float_matmul(x.clone(), w.clone()), b.clone());
            let g = if gelu { A::gelu(a) } else { A::float_exp(a) };
            let y = A::float_sum(A::float_matmul(g, w2.clone()));
            let kept = remat::stats().live_bytes - before;
            let grads = A::backward(y);
            let grad = values(A::grad(&w, &grads).unwrap());
            (kept, remat::stats().replays, grad)
        })
    };
    for gelu in [false, true] {
        let (kept_all, replays_all, grad_all) = run(Policy::SaveAll, gelu);
        let (kept, replays, grad) = run(Policy::Balanced, gelu);
        assert_eq!(replays_all, 0);
        assert_eq!(grad, grad_all, "gelu: {gelu}");
        if gelu {
            assert_eq!(replays, 1, "only the gelu is replayed");
            assert_eq!(kept, kept_all - value_bytes, "the gelu output is not kept");
        } else {
            assert_eq!(replays, 0, "nothing to gain from a replay");
            assert_eq!(kept, kept_all);
        }
    }
}

/// Two backward passes racing on two threads through one shared recorded chain: Burn runs
/// backward under a global lock, remat does not, so the passes must claim their nodes before
/// they read anything (NOTE [no-retain-graph]). Of each pair exactly one pass finishes, with
/// the exact gradient; the other panics with the consumed-graph message; never a silent
/// partial gradient.
#[test]
fn racing_backward_passes_through_a_shared_graph_never_give_a_partial_gradient() {
    let _s = serial();
    let mut finished = 0;
    let mut refused = 0;
    for _ in 0..20 {
        let x = leaf(vec![0.5, -0.25], &[2]);
        // The exact answer: the same chain recorded again, differentiated alone.
        let shared = chain::<A>(x.clone(), 400);
        let want = {
            let alone = chain::<A>(x.clone(), 400);
            let grads = A::backward(A::float_sum(alone));
            values(A::grad(&x, &grads).unwrap())
        };
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (x, shared, barrier) = (x.clone(), shared.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let y = A::float_sum(shared);
                    barrier.wait();
                    let grads = A::backward(y);
                    A::grad(&x, &grads).map(values)
                })
            })
            .collect();
        drop(shared);
        for handle in handles {
            match handle.join() {
                Ok(got) => {
                    assert_eq!(got.as_ref(), Some(&want), "a finished pass is exact");
                    finished += 1;
                }
                Err(panic) => {
                    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
                    assert!(message.contains("consumed"), "unexpected panic: {message}");
                    refused += 1;
                }
            }
        }
    }
    eprintln!("racing passes: {finished} finished, {refused} refused");
    assert_eq!(
        (finished, refused),
        (20, 20),
        "exactly one pass of each race finishes"
    );
}
