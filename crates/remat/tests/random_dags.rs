//! Fuzzing over random programs: random DAGs of random ops with shared parents, residual
//! edges, views (reshape of a permuted view, transpose, slices, flips), `detach`, untracked
//! constants, and checkpoint regions and `with_policy` scopes nested at random.
//!
//! Each case is checked by `support::check` (every leaf reached gets a gradient, gradients
//! bit-identical under every policy of `support::policies()` and in a region, finite
//! differences, nothing leaks), once as written and once with its scopes, which must give
//! the same gradients bit for bit.
//!
//! - `REMAT_FUZZ_CASES`: the number of cases (default [`DEFAULT_CASES`]);
//! - `REMAT_FUZZ_SEED`: the seed of case 0; case `i` uses seed + i, so
//!   `REMAT_FUZZ_SEED=<a failing case's seed> REMAT_FUZZ_CASES=1` reruns exactly that case.
//!
//! A failing case is shrunk greedily (drop ops, scopes, outputs and unread leaves while it
//! still fails) and reported as Rust-like pseudo-code with its seed. `docs/TESTING.md`
//! records a 10,000-case run.

mod support;

use std::cell::Cell;
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};

use burn_backend::ops::{ActivationOps, FloatTensorOps};
use burn_backend::tensor::BoolTensor;
use burn_backend::{AutodiffBackend, TensorData};
use burn_std::{Scalar, Shape, Slice};
use support::{A, Fd, Input, Rng, T, check_unreached, policies};

/// Cases run when `REMAT_FUZZ_CASES` is not set: about a second in the debug test profile
/// on the project's 2-core machine.
const DEFAULT_CASES: u64 = 500;
/// The seed of case 0 when `REMAT_FUZZ_SEED` is not set.
const DEFAULT_SEED: u64 = 0x5EED_0010;
/// Every value is a `SIDE x SIDE` matrix (views change the layout, not the shape).
const SIDE: usize = 4;

/// The op kinds. Each maps one or two `[4, 4]` values to a `[4, 4]` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Add,
    TanhSub,
    Mul,
    /// `a / (b^2 + 1)`.
    Div,
    Sin,
    /// `0.5 exp(0.1 a)`.
    Exp,
    /// `0.5 a^2`.
    Square,
    Sigmoid,
    Softmax,
    /// `0.25 a @ b`.
    Matmul,
    /// `mean_dim(a, 1)` expanded back to `[4, 4]`.
    RowMean,
    /// `a + 0.25 sum_dim(b, 0)`: a broadcast `[1, 4]`.
    ColSumAdd,
    /// `swap_dims(a, 0, 1)`: a non-contiguous view.
    Transpose,
    /// `reshape(permute(reshape(a, [2, 2, 4]), [1, 0, 2]), [4, 4])`: a reshape of a
    /// non-contiguous view.
    Reshape,
    /// `flip(a, [1])`.
    Flip,
    /// `cat([a[1..4, :], b[0..1, :]], 0)`.
    SliceCat,
    /// `cat([a[:, 0..4 step 2], b[:, 1..4 step 2]], 1)`.
    StridedCat,
    /// `detach(a) * b`: no gradient flows into `a`.
    DetachMul,
    /// `a * C1 + C2` with untracked constants.
    Constant,
    /// `mask_where(a, M, b)` with a fixed mask.
    MaskWhere,
    /// Piecewise: `relu(a)`.
    Relu,
    /// Piecewise: `abs(a)`.
    Abs,
    /// Piecewise: `max_dim(a, 1)` expanded back to `[4, 4]`.
    RowMax,
}

const KINDS: [Kind; 23] = [
    Kind::Add,
    Kind::TanhSub,
    Kind::Mul,
    Kind::Div,
    Kind::Sin,
    Kind::Exp,
    Kind::Square,
    Kind::Sigmoid,
    Kind::Softmax,
    Kind::Matmul,
    Kind::RowMean,
    Kind::ColSumAdd,
    Kind::Transpose,
    Kind::Reshape,
    Kind::Flip,
    Kind::SliceCat,
    Kind::StridedCat,
    Kind::DetachMul,
    Kind::Constant,
    Kind::MaskWhere,
    Kind::Relu,
    Kind::Abs,
    Kind::RowMax,
];

impl Kind {
    fn binary(self) -> bool {
        matches!(
            self,
            Kind::Add
                | Kind::TanhSub
                | Kind::Mul
                | Kind::Div
                | Kind::Matmul
                | Kind::ColSumAdd
                | Kind::SliceCat
                | Kind::StridedCat
                | Kind::DetachMul
                | Kind::MaskWhere
        )
    }

    fn kinked(self) -> bool {
        matches!(self, Kind::Relu | Kind::Abs | Kind::RowMax)
    }

    /// Pseudo-code of the op over operand names `a` and `b`.
    fn show(self, a: &str, b: &str, constant: u64) -> String {
        match self {
            Kind::Add => format!("{a} + {b}"),
            Kind::TanhSub => format!("tanh({a} - {b})"),
            Kind::Mul => format!("{a} * {b}"),
            Kind::Div => format!("{a} / ({b} * {b} + 1)"),
            Kind::Sin => format!("sin({a})"),
            Kind::Exp => format!("0.5 * exp(0.1 * {a})"),
            Kind::Square => format!("0.5 * powi({a}, 2)"),
            Kind::Sigmoid => format!("sigmoid({a})"),
            Kind::Softmax => format!("softmax({a}, 1)"),
            Kind::Matmul => format!("0.25 * matmul({a}, {b})"),
            Kind::RowMean => format!("expand(mean_dim({a}, 1), [4, 4])"),
            Kind::ColSumAdd => format!("{a} + 0.25 * sum_dim({b}, 0)"),
            Kind::Transpose => format!("swap_dims({a}, 0, 1)"),
            Kind::Reshape => {
                format!("reshape(permute(reshape({a}, [2, 2, 4]), [1, 0, 2]), [4, 4])")
            }
            Kind::Flip => format!("flip({a}, [1])"),
            Kind::SliceCat => format!("cat([slice({a}, [1..4, ..]), slice({b}, [0..1, ..])], 0)"),
            Kind::StridedCat => {
                format!("cat([slice({a}, [.., 0..4 step 2]), slice({b}, [.., 1..4 step 2])], 1)")
            }
            Kind::DetachMul => format!("detach({a}) * {b}"),
            Kind::Constant => format!("{a} * constant({constant}) + constant({})", constant + 1),
            Kind::MaskWhere => format!("mask_where({a}, MASK, {b})"),
            Kind::Relu => format!("relu({a})"),
            Kind::Abs => format!("abs({a})"),
            Kind::RowMax => format!("expand(max_dim({a}, 1), [4, 4])"),
        }
    }
}

/// One op: its kind and operands (indices of earlier values: leaves first, then op
/// outputs in order).
#[derive(Clone, Copy, Debug)]
struct Op {
    kind: Kind,
    a: usize,
    b: usize,
    /// Seed of the op's untracked constants.
    constant: u64,
}

/// What a scope does around its ops.
#[derive(Clone, Copy, Debug)]
enum ScopeKind {
    /// `remat::checkpoint(|| ..)`.
    Region,
    /// `remat::with_policy(policies()[i], || ..)`.
    Policy(usize),
}

/// A scope over the ops `start..end`. The scopes of a program nest (two scopes are disjoint
/// or one contains the other).
#[derive(Clone, Copy, Debug)]
struct Scope {
    start: usize,
    end: usize,
    kind: ScopeKind,
}

/// A random program and its inputs.
#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    inputs: Vec<Input>,
    ops: Vec<Op>,
    /// Sorted by start, outer scopes first.
    scopes: Vec<Scope>,
    /// The values summed into the output; the first is always leaf 0 (so the output is
    /// tracked whatever else the shrinker drops).
    outputs: Vec<usize>,
}

impl Case {
    fn random(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let n_leaves = 1 + rng.below(3);
        let n_ops = 1 + rng.below(40);
        let inputs = (0..n_leaves)
            .map(|_| {
                let mut input = Input::random(&mut rng, &[SIDE, SIDE], 0.0);
                input.values.iter_mut().for_each(|v| *v *= 0.5);
                input
            })
            .collect();
        let mut ops = Vec::with_capacity(n_ops);
        for i in 0..n_ops {
            let available = n_leaves + i;
            // Prefer recent values, but reach back far sometimes (residual edges); any value
            // may be picked again (shared parents).
            let pick = |rng: &mut Rng| {
                let r = (rng.next() + 1.0) / 2.0;
                let back = ((r * r) * available as f64) as usize;
                available - 1 - back.min(available - 1)
            };
            let kind = KINDS[rng.below(KINDS.len())];
            let (a, b) = (pick(&mut rng), pick(&mut rng));
            ops.push(Op {
                kind,
                a,
                b,
                constant: seed.wrapping_mul(31).wrapping_add(i as u64),
            });
        }
        let mut scopes: Vec<Scope> = Vec::new();
        for _ in 0..rng.below(6) {
            let start = rng.below(n_ops);
            let end = start + 1 + rng.below((n_ops - start).min(12));
            let nests = scopes.iter().all(|s| {
                end <= s.start || s.end <= start || (start <= s.start && s.end <= end) || {
                    s.start <= start && end <= s.end
                }
            });
            if nests {
                let n_policies = policies().len();
                let kind = match rng.below(n_policies + 1) {
                    0 => ScopeKind::Region,
                    p => ScopeKind::Policy(p - 1),
                };
                scopes.push(Scope { start, end, kind });
            }
        }
        scopes.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
        let last = n_leaves + n_ops - 1;
        let mut outputs = vec![0, last];
        if rng.below(2) == 0 {
            outputs.push(rng.below(last));
        }
        Self {
            seed,
            inputs,
            ops,
            scopes,
            outputs,
        }
    }

    fn n_leaves(&self) -> usize {
        self.inputs.len()
    }

    /// Runs the program; with `scoped`, inside its scopes. With `held`, each `detach` reads
    /// the value its input had at the case's inputs instead (see [`Case::held`]).
    fn run(&self, leaves: &[T], scoped: bool, held: Option<&[Option<Vec<f64>>]>) -> T {
        let mut values: Vec<T> = leaves.to_vec();
        self.run_range(&mut values, 0, self.ops.len(), 0, scoped, held);
        self.outputs[1..]
            .iter()
            .fold(values[self.outputs[0]].clone(), |sum, &v| {
                A::float_add(sum, values[v].clone())
            })
    }

    /// Runs ops `lo..hi`, entering the scopes from index `first` on that start inside.
    /// Recursion depth is the scopes' nesting depth (at most 6), not the graph's.
    fn run_range(
        &self,
        values: &mut Vec<T>,
        lo: usize,
        hi: usize,
        first: usize,
        scoped: bool,
        held: Option<&[Option<Vec<f64>>]>,
    ) {
        let mut k = first;
        let mut i = lo;
        while i < hi {
            while k < self.scopes.len() && self.scopes[k].start < i {
                k += 1;
            }
            if scoped && k < self.scopes.len() && self.scopes[k].start == i {
                let scope = self.scopes[k];
                debug_assert!(scope.end <= hi, "scopes nest");
                let body = |values: &mut Vec<T>| {
                    self.run_range(values, scope.start, scope.end, k + 1, scoped, held)
                };
                match scope.kind {
                    ScopeKind::Region => remat::checkpoint(|| body(values)),
                    ScopeKind::Policy(p) => {
                        remat::with_policy(policies()[p].1.clone(), || body(values))
                    }
                }
                i = scope.end;
                continue;
            }
            let op = self.ops[i];
            let held = held.and_then(|h| h[i].as_ref());
            values.push(apply(op, values[op.a].clone(), values[op.b].clone(), held));
            i += 1;
        }
    }

    /// The values that each `detach` reads at the case's inputs, by op.
    ///
    /// A detached value is a constant for the derivative, but finite differences would
    /// perturb it with the leaves; so the finite-difference runs (on untracked leaves, see
    /// `support`) hold it at this value.
    fn held(&self) -> Vec<Option<Vec<f64>>> {
        let leaves: Vec<T> = self
            .inputs
            .iter()
            .map(|i| support::tensor(i.values.clone(), &i.shape))
            .collect();
        let mut values = leaves;
        let mut held = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let a = values[op.a].clone();
            held.push((op.kind == Kind::DetachMul).then(|| support::values(A::inner(a.clone()))));
            values.push(apply(*op, a, values[op.b].clone(), None));
        }
        held
    }

    /// The leaves the output does not reach (through `detach`, or not at all): they get no
    /// gradient.
    fn unreached(&self) -> Vec<usize> {
        let n = self.n_leaves();
        // reach[v]: bit l set when value v depends on leaf l through tracked edges.
        let mut reach: Vec<u32> = (0..n).map(|l| 1 << l).collect();
        for op in &self.ops {
            let r = match op.kind {
                Kind::DetachMul => reach[op.b],
                kind if kind.binary() => reach[op.a] | reach[op.b],
                _ => reach[op.a],
            };
            reach.push(r);
        }
        let out = self.outputs.iter().fold(0, |r, &v| r | reach[v]);
        (0..n).filter(|l| out & (1 << l) == 0).collect()
    }

    fn fd(&self) -> Fd {
        if self.ops.iter().any(|op| op.kind.kinked()) {
            Fd::KinkedAtTies(
                "relu, abs or a row max: kinks where an input is 0 or two elements tie",
            )
        } else {
            Fd::Smooth
        }
    }

    /// Checks the case: plain, then with its scopes (same gradients bit for bit).
    fn check(&self) {
        let name = format!("fuzz case seed {}", self.seed);
        let unreached = self.unreached();
        let held = self.held();
        // Finite differences evaluate the program on untracked leaves.
        let held_if_untracked =
            |xs: &[T]| (!xs.iter().any(|x| x.is_tracked())).then_some(held.as_slice());
        let plain = check_unreached(
            &name,
            &self.inputs,
            |xs| self.run(xs, false, held_if_untracked(xs)),
            self.fd(),
            &unreached,
        );
        if self.scopes.is_empty() {
            return;
        }
        let scoped = check_unreached(
            &format!("{name} (scoped)"),
            &self.inputs,
            |xs| self.run(xs, true, held_if_untracked(xs)),
            Fd::Skip("the same function as the plain run, checked there"),
            &unreached,
        );
        let bits = |g: &[Vec<f64>]| -> Vec<Vec<u64>> {
            g.iter()
                .map(|g| g.iter().map(|v| v.to_bits()).collect())
                .collect()
        };
        assert!(
            bits(&scoped) == bits(&plain),
            "{name}: gradients with scopes differ from the plain run"
        );
    }

    /// The case without op `j`: its readers read its first operand instead.
    fn without_op(&self, j: usize) -> Self {
        let n = self.n_leaves();
        let removed = n + j;
        let replacement = self.ops[j].a;
        let remap = |v: usize| match v.cmp(&removed) {
            std::cmp::Ordering::Less => v,
            std::cmp::Ordering::Equal => replacement,
            std::cmp::Ordering::Greater => v - 1,
        };
        let mut case = self.clone();
        case.ops.remove(j);
        for op in &mut case.ops {
            op.a = remap(op.a);
            op.b = remap(op.b);
        }
        for v in &mut case.outputs {
            *v = remap(*v);
        }
        case.scopes = self
            .scopes
            .iter()
            .filter_map(|s| {
                let start = if s.start > j { s.start - 1 } else { s.start };
                let end = if s.end > j { s.end - 1 } else { s.end };
                (start < end).then_some(Scope { start, end, ..*s })
            })
            .collect();
        case
    }

    /// Smaller variants of the case, most aggressive first.
    fn shrinks(&self) -> Vec<Self> {
        let mut out = Vec::new();
        for j in (0..self.ops.len()).rev() {
            if self.ops.len() > 1 {
                out.push(self.without_op(j));
            }
        }
        for k in 0..self.scopes.len() {
            let mut case = self.clone();
            case.scopes.remove(k);
            out.push(case);
        }
        for k in 1..self.outputs.len() {
            let mut case = self.clone();
            case.outputs.remove(k);
            out.push(case);
        }
        for l in 1..self.n_leaves() {
            let read = self.ops.iter().any(|op| op.a == l || op.b == l);
            if !read && !self.outputs.contains(&l) {
                out.push(self.without_leaf(l));
            }
        }
        out
    }

    /// The case without leaf `l`, which nothing reads.
    fn without_leaf(&self, l: usize) -> Self {
        let remap = |v: usize| if v > l { v - 1 } else { v };
        let mut case = self.clone();
        case.inputs.remove(l);
        for op in &mut case.ops {
            op.a = remap(op.a);
            op.b = remap(op.b);
        }
        for v in &mut case.outputs {
            *v = remap(*v);
        }
        case
    }

    /// The program as Rust-like pseudo-code.
    fn show(&self) -> String {
        let n = self.n_leaves();
        let name = |v: usize| {
            if v < n {
                format!("x{v}")
            } else {
                format!("v{}", v - n)
            }
        };
        let mut s = String::new();
        for l in 0..n {
            let _ = writeln!(
                s,
                "let x{l} = leaf([4, 4]); // tracked, seeded from the case"
            );
        }
        let mut open: Vec<usize> = Vec::new();
        let mut k = 0;
        for (i, op) in self.ops.iter().enumerate() {
            while let Some(&end) = open.last() {
                if end > i {
                    break;
                }
                open.pop();
                let _ = writeln!(s, "{}}});", "    ".repeat(open.len()));
            }
            while k < self.scopes.len() && self.scopes[k].start == i {
                let scope = self.scopes[k];
                let head = match scope.kind {
                    ScopeKind::Region => "checkpoint(|| {".to_string(),
                    ScopeKind::Policy(p) => format!("with_policy({}, || {{", policies()[p].0),
                };
                let _ = writeln!(s, "{}{head}", "    ".repeat(open.len()));
                open.push(scope.end);
                k += 1;
            }
            let _ = writeln!(
                s,
                "{}let {} = {};",
                "    ".repeat(open.len()),
                name(n + i),
                op.kind.show(&name(op.a), &name(op.b), op.constant)
            );
        }
        while open.pop().is_some() {
            let _ = writeln!(s, "{}}});", "    ".repeat(open.len()));
        }
        let sum: Vec<String> = self.outputs.iter().map(|&v| name(v)).collect();
        let _ = writeln!(s, "let output = {};", sum.join(" + "));
        s
    }
}

/// Runs one op; `held` replaces a detached operand by that value.
fn apply(op: Op, a: T, b: T, held: Option<&Vec<f64>>) -> T {
    let f = |v: f64| Scalar::Float(v);
    match op.kind {
        Kind::Add => A::float_add(a, b),
        Kind::TanhSub => A::float_tanh(A::float_sub(a, b)),
        Kind::Mul => A::float_mul(a, b),
        Kind::Div => A::float_div(a, A::float_add_scalar(A::float_mul(b.clone(), b), f(1.0))),
        Kind::Sin => A::float_sin(a),
        Kind::Exp => A::float_mul_scalar(A::float_exp(A::float_mul_scalar(a, f(0.1))), f(0.5)),
        Kind::Square => A::float_mul_scalar(A::float_powi_scalar(a, Scalar::Int(2)), f(0.5)),
        Kind::Sigmoid => A::sigmoid(a),
        Kind::Softmax => A::softmax(a, 1),
        Kind::Matmul => A::float_mul_scalar(A::float_matmul(a, b), f(0.25)),
        Kind::RowMean => A::float_expand(A::float_mean_dim(a, 1), Shape::new([SIDE, SIDE])),
        Kind::ColSumAdd => A::float_add(a, A::float_mul_scalar(A::float_sum_dim(b, 0), f(0.25))),
        Kind::Transpose => A::float_swap_dims(a, 0, 1),
        Kind::Reshape => {
            let t = A::float_reshape(a, Shape::new([2, 2, SIDE]));
            A::float_reshape(A::float_permute(t, &[1, 0, 2]), Shape::new([SIDE, SIDE]))
        }
        Kind::Flip => A::float_flip(a, &[1]),
        Kind::SliceCat => {
            let all = Slice::new(0, None, 1);
            let top = A::float_slice(a, &[Slice::new(1, Some(4), 1), all]);
            let bottom = A::float_slice(b, &[Slice::new(0, Some(1), 1), all]);
            A::float_cat(vec![top, bottom], 0)
        }
        Kind::StridedCat => {
            let all = Slice::new(0, None, 1);
            let even = A::float_slice(a, &[all, Slice::new(0, Some(4), 2)]);
            let odd = A::float_slice(b, &[all, Slice::new(1, Some(4), 2)]);
            A::float_cat(vec![even, odd], 1)
        }
        Kind::DetachMul => {
            let a = match held {
                Some(values) => support::tensor(values.clone(), &[SIDE, SIDE]),
                None => A::float_detach(a),
            };
            A::float_mul(a, b)
        }
        Kind::Constant => {
            let mut rng = Rng::new(op.constant);
            let scale = support::tensor(rng.vec(SIDE * SIDE), &[SIDE, SIDE]);
            let shift = support::tensor(rng.vec(SIDE * SIDE), &[SIDE, SIDE]);
            A::float_add(A::float_mul(a, scale), shift)
        }
        Kind::MaskWhere => A::float_mask_where(a, mask(), b),
        Kind::Relu => A::relu(a),
        Kind::Abs => A::float_abs(a),
        Kind::RowMax => A::float_expand(A::float_max_dim(a, 1), Shape::new([SIDE, SIDE])),
    }
}

/// The fixed mask of [`Kind::MaskWhere`]: every third element.
fn mask() -> BoolTensor<A> {
    let values: Vec<bool> = (0..SIDE * SIDE).map(|i| i % 3 == 0).collect();
    <A as burn_backend::ops::BoolTensorOps<A>>::bool_from_data(
        TensorData::new(values, vec![SIDE, SIDE]),
        &Default::default(),
    )
}

thread_local! {
    /// Whether panics on this thread are expected (shrinking) and must not be printed.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, returning its panic message if it panics, without printing it.
fn panic_message(f: impl FnOnce()) -> Option<String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    let payload = result.err()?;
    Some(
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".to_string()),
    )
}

/// Greedily shrinks a failing case: takes the first smaller variant that still fails,
/// until none does. Returns the smallest case and its failure.
fn shrink(
    mut case: Case,
    mut failure: String,
    fails: impl Fn(&Case) -> Option<String>,
) -> (Case, String) {
    'outer: loop {
        for smaller in case.shrinks() {
            if let Some(message) = fails(&smaller) {
                case = smaller;
                failure = message;
                continue 'outer;
            }
        }
        return (case, failure);
    }
}

fn env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number: give an unsigned integer")),
        Err(_) => default,
    }
}

#[test]
fn random_programs_agree_under_every_policy_and_match_finite_differences() {
    let cases = env("REMAT_FUZZ_CASES", DEFAULT_CASES);
    let seed = env("REMAT_FUZZ_SEED", DEFAULT_SEED);
    let mut seen = Coverage::default();
    for i in 0..cases {
        let case = Case::random(seed.wrapping_add(i));
        seen.add(&case);
        let Some(failure) = panic_message(|| case.check()) else {
            continue;
        };
        let original = case.ops.len();
        let (small, failure) = shrink(case, failure, |c| panic_message(|| c.check()));
        let leaves: Vec<String> = small
            .inputs
            .iter()
            .map(|i| {
                let v: Vec<String> = i.values.iter().map(|v| format!("{v:.4}")).collect();
                format!("[{}]", v.join(", "))
            })
            .collect();
        panic!(
            "fuzz case {i} of {cases} failed; rerun it with REMAT_FUZZ_SEED={} \
             REMAT_FUZZ_CASES=1 (base seed {seed}). Shrunk from {original} ops to {}:\n\n{}\n\
             leaf values (rounded; the seed gives them exactly):\n{}\n\n\
             failure of the shrunk program:\n{failure}",
            small.seed,
            small.ops.len(),
            small.show(),
            leaves.join("\n"),
        );
    }
    if cases >= 200 {
        seen.assert_complete(cases);
    }
    // Points on kinks (see `Fd::KinkedAtTies`) are rare: 26 in 100,000 cases (seed
    // 20261130, docs/TESTING.md).
    let at_ties = support::at_ties();
    assert!(
        at_ties <= 2 + cases / 1000,
        "{at_ties} of {cases} cases sat on kinks that detach made: the finite-difference \
         check skipped too many"
    );
}

/// What the generated cases contained, so that a generator that stopped producing some
/// feature fails instead of silently testing less.
#[derive(Default)]
struct Coverage {
    kinds: Vec<Kind>,
    regions: u64,
    policy_scopes: u64,
    nested: u64,
    unreached: u64,
    residual: u64,
}

impl Coverage {
    fn add(&mut self, case: &Case) {
        for op in &case.ops {
            if !self.kinds.contains(&op.kind) {
                self.kinds.push(op.kind);
            }
        }
        let n = case.n_leaves();
        self.regions += case
            .scopes
            .iter()
            .filter(|s| matches!(s.kind, ScopeKind::Region))
            .count() as u64;
        self.policy_scopes += case
            .scopes
            .iter()
            .filter(|s| matches!(s.kind, ScopeKind::Policy(_)))
            .count() as u64;
        let nested = case.scopes.iter().enumerate().any(|(i, a)| {
            case.scopes[i + 1..]
                .iter()
                .any(|b| a.start <= b.start && b.end <= a.end)
        });
        self.nested += u64::from(nested);
        self.unreached += u64::from(!case.unreached().is_empty());
        // An op reading a value produced more than 4 ops earlier: a residual edge.
        let residual = case
            .ops
            .iter()
            .enumerate()
            .any(|(i, op)| op.a.max(op.b) + 4 < n + i && op.a.max(op.b) >= n);
        self.residual += u64::from(residual);
    }

    fn assert_complete(&self, cases: u64) {
        let missing: Vec<&Kind> = KINDS.iter().filter(|k| !self.kinds.contains(k)).collect();
        assert!(missing.is_empty(), "{cases} cases never used {missing:?}");
        for (what, count) in [
            ("checkpoint regions", self.regions),
            ("with_policy scopes", self.policy_scopes),
            ("nested scopes", self.nested),
            ("leaves cut off by detach or unused", self.unreached),
            ("residual edges", self.residual),
        ] {
            assert!(
                count > cases / 20,
                "{cases} cases had only {count} with {what}"
            );
        }
    }
}

#[test]
fn the_shrinker_keeps_only_what_makes_a_case_fail() {
    // A planted failure: "a Mul reads a Transpose's output". Search the random cases for one
    // that has it, shrink with that predicate, and expect exactly the two ops left.
    let planted = |c: &Case| -> Option<String> {
        let n = c.n_leaves();
        c.ops
            .iter()
            .any(|op| {
                op.kind == Kind::Mul
                    && [op.a, op.b]
                        .iter()
                        .any(|&v| v >= n && c.ops[v - n].kind == Kind::Transpose)
            })
            .then(|| "planted".to_string())
    };
    let case = (0..1000)
        .map(|i| Case::random(DEFAULT_SEED ^ i))
        .find(|c| c.ops.len() > 10 && planted(c).is_some())
        .expect("some random case has a Mul reading a Transpose");
    let (small, failure) = shrink(case, "planted".into(), planted);
    assert_eq!(failure, "planted");
    let kinds: Vec<Kind> = small.ops.iter().map(|op| op.kind).collect();
    assert_eq!(kinds, [Kind::Transpose, Kind::Mul], "{}", small.show());
    assert!(small.scopes.is_empty() && small.outputs.len() == 1);
    // The report is pseudo-code naming the ops.
    let shown = small.show();
    assert!(
        shown.contains("swap_dims(") && shown.contains(" * "),
        "{shown}"
    );
}

#[test]
fn a_failing_check_is_caught_quietly_with_its_message() {
    let message = panic_message(|| panic!("remat internal error: planted"));
    assert_eq!(message.as_deref(), Some("remat internal error: planted"));
    assert_eq!(panic_message(|| {}), None);
}
