//! Policy::Budget: held bytes within the budget, gradients bit-identical to SaveAll.
mod support;

use burn_backend::{TensorData, ops::FloatTensorOps};
use remat::Policy;
use support::{A, T};

fn chain(n: usize, len: usize) -> (Vec<f32>, u64, u64) {
    let device = Default::default();
    let x = A::float_from_data(TensorData::new(vec![0.5f32; len], [len]), &device);
    let x = A::float_set_require_grad(x, true);
    let mut y: T = x.clone();
    for i in 0..n {
        y = if i % 2 == 0 { A::float_sin(y) } else { A::float_exp(A::float_mul_scalar(y, 0.5f32.into())) };
    }
    remat::reset_stats();
    let grads = A::float_sum(y).backward();
    let s = remat::stats();
    let g = <A as burn_backend::AutodiffBackend>::grad(&x, &grads).unwrap();
    let g: Vec<f32> = burn_backend::read_sync(support::I::float_into_data(g)).unwrap().to_vec().unwrap();
    (g, s.peak_bytes, s.replays)
}

#[test]
fn smoke() {
    let (g0, p0, r0) = remat::with_policy(Policy::SaveAll, || chain(30, 1000));
    eprintln!("saveall peak {p0} replays {r0}");
    for b in [u64::MAX, 100_000, 40_000, 20_000, 12_000] {
        let (g, p, r) = remat::with_policy(Policy::Budget(b), || chain(30, 1000));
        eprintln!("budget {b} peak {p} replays {r}");
        assert_eq!(g, g0);
    }
    eprintln!("{}", remat::tradeoff().unwrap());
}

