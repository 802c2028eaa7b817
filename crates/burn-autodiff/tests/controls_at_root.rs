//! remat's controls are reachable at this crate's root (README, "Setup": a project depends on
//! `remat = { package = "burn-autodiff", .. }`), next to Burn's module paths, which keep
//! their meaning where a name is shared (`checkpoint`).

use burn_autodiff::checkpoint::strategy::{BalancedCheckpointing, NoCheckpointing};
use burn_backend::ops::FloatTensorOps;
use burn_backend::{AutodiffBackend, TensorData};
use burn_flex::Flex;

type A = burn_autodiff::Autodiff<Flex, NoCheckpointing>;

#[test]
fn the_controls_are_at_the_root_and_burns_paths_still_resolve() {
    // Burn's type-level strategies, through Burn's module path.
    let _: Option<burn_autodiff::Autodiff<Flex, BalancedCheckpointing>> = None;
    let device = Default::default();
    let x = A::float_set_require_grad(
        A::float_from_data(TensorData::from([0.5f32, 1.0, 2.0]), &device),
        true,
    );
    assert!(burn_autodiff::is_active());
    burn_autodiff::reset_stats();
    // remat's region function, in the value namespace of the name Burn uses for a module.
    let y = burn_autodiff::checkpoint(|| A::float_exp(A::float_sin(x.clone())));
    let grads = A::backward(A::float_sum(y));
    assert!(A::grad(&x, &grads).is_some());
    let stats: burn_autodiff::Stats = burn_autodiff::stats();
    // The region rebuilt sin's output (exp's backward reads its own output, sin's its input).
    assert_eq!(stats.replays_by_op.get("sin"), Some(&1), "{stats}");
    assert_eq!(stats.live_bytes, 0, "{stats}");
    let _: burn_autodiff::Policy = burn_autodiff::Policy::SaveAll;
}
