use burn_backend::{Backend, TensorData, ops::FloatTensorOps};
use burn_flex::Flex;
use remat::Autodiff;
use remat::checkpoint::strategy::BalancedCheckpointing;

fn data<B: Backend>(t: burn_backend::tensor::FloatTensor<B>) -> Vec<f32> {
    burn_backend::read_sync(B::float_into_data(t))
        .unwrap()
        .to_vec()
        .unwrap()
}

fn run<B: Backend + burn_backend::AutodiffBackend>() -> (Vec<f32>, Vec<f32>) {
    let device = Default::default();
    let x = B::float_from_data(TensorData::from([0.5f32, 1.0, 2.0]), &device);
    let x = B::float_set_require_grad(x, true);
    let w = B::float_from_data(TensorData::from([3.0f32, -1.0, 0.25]), &device);
    let w = B::float_set_require_grad(w, true);
    // y = exp(sin(x)) * w + x
    let a = B::float_sin(x.clone());
    let b = B::float_exp(a);
    let c = B::float_mul(b, w.clone());
    let y = B::float_add(c, x.clone());
    let grads = B::backward(y);
    (
        data::<B::InnerBackend>(B::grad(&x, &grads).unwrap()),
        data::<B::InnerBackend>(B::grad(&w, &grads).unwrap()),
    )
}

#[test]
fn chain_rule_matches_closed_form() {
    let (gx, gw) = run::<Autodiff<Flex>>();
    let xs = [0.5f32, 1.0, 2.0];
    let ws = [3.0f32, -1.0, 0.25];
    for i in 0..3 {
        let e = xs[i].sin().exp();
        assert!((gx[i] - (e * xs[i].cos() * ws[i] + 1.0)).abs() < 1e-5);
        assert!((gw[i] - e).abs() < 1e-5);
    }
    let (bx, bw) = run::<Autodiff<Flex, BalancedCheckpointing>>();
    assert_eq!(gx, bx);
    assert_eq!(gw, bw);
    remat::set_policy(remat::Policy::RecomputeAll);
    let (rx, rw) = run::<Autodiff<Flex, BalancedCheckpointing>>();
    remat::set_policy(remat::Policy::Balanced);
    assert_eq!(gx, rx);
    assert_eq!(gw, rw);
}
