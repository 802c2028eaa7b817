//! Chains of blocks under `Policy::Budget` (NOTE [rotor] in `planner/rotor/mod.rs`): a
//! normalized power iteration `x = A x; x = x / |x|` (each block a matmul, then square,
//! sum, sqrt and a division that reads the matmul's output again: a fan-out inside the
//! block) runs at a budget that does not grow with its length, with SaveAll's gradients,
//! within the budget at every event, and once planned, with the replays its plan predicts.
mod support;

use std::sync::Mutex;

use burn_backend::{AutodiffBackend, TensorData, ops::FloatTensorOps};
use remat::Policy;
use remat::planner::{plan, simulate};
use support::{A, I, T};

/// Stats and plans are per process and per thread: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The matrices are `SIDE x SIDE` f32.
const SIDE: usize = 4;
const MATRIX: u64 = (SIDE * SIDE * 4) as u64;

fn matrix(values: impl Fn(usize) -> f32) -> T {
    let data: Vec<f32> = (0..SIDE * SIDE).map(values).collect();
    A::float_from_data(TensorData::new(data, [SIDE, SIDE]), &Default::default())
}

/// `n` normalized power-iteration steps from a tracked `x` with a tracked `a`; returns the
/// gradients of both after a backward pass from `sum(x_n)`, and the replays of the step.
fn power_iteration(n: usize) -> (Vec<f32>, Vec<f32>, u64) {
    let a = A::float_set_require_grad(
        matrix(|i| 0.3 + 0.05 * (i % 7) as f32 - 0.02 * (i / 5) as f32),
        true,
    );
    let x0 = A::float_set_require_grad(matrix(|i| 1.0 - 0.03 * i as f32), true);
    let replays = remat::stats().replays;
    let mut x: T = x0.clone();
    for _ in 0..n {
        let y = A::float_matmul(a.clone(), x);
        let norm = A::float_sqrt(A::float_sum(A::float_mul(y.clone(), y.clone())));
        x = A::float_div(y, norm);
    }
    let grads = A::float_sum(x).backward();
    let read = |t: &T| -> Vec<f32> {
        let g = <A as AutodiffBackend>::grad(t, &grads).expect("a gradient");
        burn_backend::read_sync(I::float_into_data(g))
            .unwrap()
            .try_into_vec::<f32>()
            .unwrap()
    };
    let (ga, gx) = (read(&a), read(&x0));
    (ga, gx, remat::stats().replays - replays)
}

/// The smallest budget after one step under `Budget(u64::MAX)` (which keeps what SaveAll
/// keeps), and the trade-off report's view.
fn smallest(n: usize) -> (u64, remat::planner::Tradeoff) {
    remat::with_policy(Policy::Budget(u64::MAX), || power_iteration(n));
    let report = remat::tradeoff().expect("a step ran under a budget");
    (report.min_budget_bytes, report)
}

#[test]
fn the_smallest_budget_does_not_grow_with_the_chain() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut budgets = Vec::new();
    // (10,000 blocks: `planner/tests/chains.rs`, on the same graph without tensors.)
    for n in [100, 1000, 3000] {
        let (min, report) = smallest(n);
        // SaveAll keeps at least a matrix a block; the smallest budget a few in all.
        assert!(report.keep_all_bytes >= n as u64 * MATRIX, "{n} blocks");
        assert!(min <= 6 * MATRIX, "{n} blocks: smallest budget {min}");
        budgets.push(min);
    }
    eprintln!("smallest budgets at 100, 1000, 3000 blocks: {budgets:?}");
    let (lo, hi) = (budgets.iter().min().unwrap(), budgets.iter().max().unwrap());
    assert!(hi - lo <= 3 * MATRIX, "{budgets:?}");
}

#[test]
fn a_long_chain_trains_at_its_smallest_budget_with_save_all_gradients() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // 1,000 blocks in optimized builds only (`scripts/test.sh` runs this file in release
    // too): at the smallest budget a step makes 2.5 million replays, and each budget's
    // planning of the 5,001-op view takes seconds unoptimized.
    let lengths: &[usize] = if cfg!(debug_assertions) {
        &[100]
    } else {
        &[100, 1000]
    };
    for &n in lengths {
        let (reference_a, reference_x, _) =
            remat::with_policy(Policy::SaveAll, || power_iteration(n));
        let (min, _) = smallest(n);
        for budget in [min, min + 8 * MATRIX] {
            // The view of the step run last, which the first step under `budget` plans
            // before its first op (NOTE [plan-ahead]).
            let view = remat::tradeoff().expect("a step ran").view.clone();
            let mut replays = Vec::new();
            for _ in 0..3 {
                remat::reset_stats();
                let (ga, gx, r) = remat::with_policy(Policy::Budget(budget), || power_iteration(n));
                assert_eq!(ga, reference_a, "{n} blocks at {budget}");
                assert_eq!(gx, reference_x, "{n} blocks at {budget}");
                let peak = remat::stats().peak_bytes;
                assert!(peak <= budget, "{n} blocks: peak {peak} over {budget}");
                replays.push(r);
            }
            // Every step, the first included, replays exactly what its plan predicts: the
            // plan made before the first step's first op from the view of the step run
            // before (NOTE [plan-ahead]; the first step ran online before it).
            let schedule = plan(&view, budget).expect("the budget plans");
            let predicted = simulate(&view, &schedule, budget).unwrap().total_replays;
            eprintln!("{n} blocks at {budget}: replays {replays:?}, planned {predicted}");
            assert_eq!(replays, [predicted; 3], "{n} blocks at {budget}");
        }
    }
}
