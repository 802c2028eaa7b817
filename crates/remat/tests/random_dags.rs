//! Property tests over random DAGs: shared parents, residual edges, several leaves, mixed
//! op kinds. Under every policy and nested regions the gradients are bit-identical to
//! `SaveAll`, they match finite differences, and nothing stays kept afterwards (`support`).

mod support;

use burn_backend::ops::FloatTensorOps;
use burn_std::Scalar;
use remat::Policy;
use support::{A, Input, Rng, T, check};

/// One random program: `n_ops` ops, each reading one or two earlier values (leaves or op
/// outputs, chosen anywhere before it: residual edges and shared parents are common).
#[derive(Clone, Debug)]
struct Program {
    ops: Vec<(u8, usize, usize)>,
    regions: Vec<(usize, usize)>,
}

impl Program {
    fn random(rng: &mut Rng, n_leaves: usize, n_ops: usize) -> Self {
        let mut ops = Vec::new();
        for i in 0..n_ops {
            let available = n_leaves + i;
            let pick = |rng: &mut Rng| {
                // Prefer recent values, but reach back far sometimes (residual edges).
                let r = (rng.next() + 1.0) / 2.0;
                let back = ((r * r) * available as f64) as usize;
                available - 1 - back.min(available - 1)
            };
            let kind = ((rng.next() + 1.0) * 4.5) as u8 % 9;
            ops.push((kind, pick(rng), pick(rng)));
        }
        // A few regions over op ranges, some nested.
        let mut regions = Vec::new();
        let a = ((rng.next() + 1.0) / 2.0 * n_ops as f64) as usize % n_ops;
        let b = (a + 5).min(n_ops);
        regions.push((a, b));
        if b > a + 2 {
            regions.push((a + 1, b - 1));
        }
        Self { ops, regions }
    }

    /// Runs the program; `regions` wraps the marked op ranges in `remat::checkpoint`.
    fn run(&self, leaves: &[T], regions: bool) -> T {
        let mut values: Vec<T> = leaves.to_vec();
        let mut i = 0;
        self.run_range(&mut values, &mut i, self.ops.len(), regions, 0);
        // The output mixes the last value with an early one (a long residual edge).
        let last = values.last().unwrap().clone();
        A::float_add(last, values[leaves.len()].clone())
    }

    fn run_range(
        &self,
        values: &mut Vec<T>,
        i: &mut usize,
        end: usize,
        regions: bool,
        depth: usize,
    ) {
        while *i < end {
            if regions
                && let Some(&(_, stop)) = self.regions.iter().skip(depth).find(|(s, _)| *s == *i)
            {
                let stop = stop.min(end);
                remat::checkpoint(|| self.run_range(values, i, stop, regions, depth + 1));
                continue;
            }
            let (kind, a, b) = self.ops[*i];
            let (x, y) = (values[a].clone(), values[b].clone());
            let out = match kind {
                0 => A::float_add(x, y),
                1 => A::float_mul(x, y),
                2 => A::float_sin(x),
                3 => A::float_tanh(A::float_sub(x, y)),
                4 => A::float_mul_scalar(
                    A::float_exp(A::float_mul_scalar(x, Scalar::Float(0.1))),
                    Scalar::Float(0.5),
                ),
                5 => A::float_matmul(x, y),
                6 => A::float_expand(A::float_mean_dim(x, 1), burn_std::Shape::new([4, 4])),
                7 => A::float_swap_dims(x, 0, 1),
                _ => A::float_div(
                    x,
                    A::float_add_scalar(A::float_mul(y.clone(), y), Scalar::Float(1.0)),
                ),
            };
            values.push(out);
            *i += 1;
        }
    }
}

#[test]
fn random_dags_agree_under_every_policy() {
    let mut rng = Rng::new(42);
    for case in 0..12 {
        let n_leaves = 1 + case % 3;
        let program = Program::random(&mut rng, n_leaves, 10 + case * 3);
        let inputs: Vec<Input> = (0..n_leaves)
            .map(|_| {
                let mut input = Input::random(&mut rng, &[4, 4], 0.0);
                input.values.iter_mut().for_each(|v| *v *= 0.5);
                input
            })
            .collect();
        let name = format!("dag {case}");
        let plain = check(&name, &inputs, |xs| program.run(xs, false), true);
        // Regions inside the program (nested), under each policy.
        for policy in [Policy::SaveAll, Policy::Balanced, Policy::RecomputeAll] {
            let with_regions = remat::with_policy(policy.clone(), || {
                check(&name, &inputs, |xs| program.run(xs, true), false)
            });
            assert_eq!(with_regions, plain, "{name}: regions under {policy:?}");
        }
    }
}
