//! Real bytes, measured with a counting global allocator: after backward and dropping
//! everything, and after dropping a graph without backward, the heap returns to its
//! baseline; `remat::stats()` agrees with the allocator about what a forward pass keeps.

use burn_backend::ops::FloatTensorOps;
use burn_backend::{AutodiffBackend, TensorData};
use burn_flex::Flex;
use remat::{Autodiff, Policy};
use support::heap::{self, live, measure};

mod support;

#[global_allocator]
static GLOBAL: heap::Heap = heap::Heap;

type A = Autodiff<Flex>;

/// Lazily initialised state of the measured thread may still appear: compare with a
/// tolerance far below the size of one tensor (256 KiB).
fn assert_near(got: isize, want: isize, what: &str) {
    assert!(
        (got - want).abs() < 4096,
        "{what}: {got} bytes live, expected {want}"
    );
}

const N: usize = 64 * 1024; // 256 KiB per f32 tensor

fn leaf() -> <A as burn_backend::BackendTypes>::FloatTensorPrimitive {
    let x = A::float_from_data(TensorData::new(vec![0.5f32; N], [N]), &Default::default());
    A::float_set_require_grad(x, true)
}

fn forward(
    x: <A as burn_backend::BackendTypes>::FloatTensorPrimitive,
    depth: usize,
) -> <A as burn_backend::BackendTypes>::FloatTensorPrimitive {
    let mut y = x;
    for _ in 0..depth {
        let a = A::float_sin(y.clone());
        y = A::float_mul(a, y);
    }
    y
}

/// Warms up lazily-initialised state (thread-locals, device settings) so that it does not
/// count as a leak.
fn warm_up() {
    let x = leaf();
    let y = remat::with_policy(Policy::RecomputeAll, || {
        remat::checkpoint(|| forward(x.clone(), 2))
    });
    let g = A::backward(y);
    drop(A::grad(&x, &g));
}

#[test]
fn heap_returns_to_baseline() {
    let _m = measure();
    warm_up();
    for policy in [Policy::SaveAll, Policy::Balanced, Policy::RecomputeAll] {
        let baseline = live();
        {
            let x = leaf();
            let y = remat::with_policy(policy.clone(), || forward(x.clone(), 20));
            let grads = A::backward(y);
            assert!(A::grad(&x, &grads).is_some());
        }
        assert_near(
            live(),
            baseline,
            &format!("{policy:?}: after backward and drop"),
        );

        let x = leaf();
        let with_leaf = live();
        let y = remat::with_policy(policy.clone(), || forward(x.clone(), 20));
        assert!(live() > with_leaf);
        drop(y);
        assert_near(
            live(),
            with_leaf,
            &format!("{policy:?}: after dropping a graph"),
        );
        drop(x);
        assert_near(
            live(),
            baseline,
            &format!("{policy:?}: after dropping the leaf"),
        );
    }
}

#[test]
fn stats_agree_with_the_allocator() {
    let _m = measure();
    warm_up();
    for policy in [Policy::SaveAll, Policy::Balanced, Policy::RecomputeAll] {
        let x = leaf();
        let heap_before = live();
        let kept_before = remat::stats().live_bytes;
        let y = remat::with_policy(policy.clone(), || forward(x.clone(), 20));
        // The output itself is the user's, not kept by remat.
        let heap = (live() - heap_before) as f64 - (N * 4) as f64;
        let kept = (remat::stats().live_bytes - kept_before) as f64;
        let diff = (heap - kept).abs() / heap.max(kept).max(1.0);
        assert!(
            diff < 0.05 || (heap - kept).abs() < 64.0 * 1024.0,
            "{policy:?}: allocator says {heap} bytes, stats say {kept}"
        );
        drop(y);
    }
}

/// The peak of live bytes while `f` runs, above the live bytes when it starts.
fn peak_above_start<R>(f: impl FnOnce() -> R) -> (R, isize) {
    let start = live();
    heap::reset_peak(start);
    let out = f();
    (out, heap::peak() - start)
}

fn leaf4(shape: [usize; 4], tracked: bool) -> T {
    let n = shape.iter().product::<usize>();
    let values: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.4)
        .collect();
    let x = A::float_from_data(TensorData::new(values, shape), &Default::default());
    A::float_set_require_grad(x, tracked)
}

/// Backward does not allocate an input-sized stand-in for a kernel argument whose values it
/// does not read (the `x` of conv and pool backwards, the weights of embedding's): the peak
/// of a backward pass through one such op is the incoming gradient plus the input's gradient,
/// plus less than half an input (it was one input more, the stand-in, before). The argument
/// is the value itself where remat keeps it anyway (a relu's output it saves; a leaf held on
/// the edge for the other gradient), otherwise a broadcast view (conv on Flex reads only its
/// shape; so does embedding's backward).
#[test]
fn backward_allocates_no_stand_in_for_shape_only_arguments() {
    use burn_backend::ops::{ActivationOps, ConvOptions, IntTensorOps, ModuleOps};
    let _m = measure();
    warm_up();
    let shape = [4, 16, 64, 64];
    let input_bytes = 4 * 16 * 64 * 64 * 4; // 1 MiB
    let conv = |x: T, w: T| A::conv2d(x, w, None, ConvOptions::new([1, 1], [0, 0], [1, 1], 1));
    let cases: [(&str, &dyn Fn(T) -> T); 5] = [
        ("conv2d, weight frozen", &|x| {
            conv(x, leaf4([16, 16, 1, 1], false))
        }),
        ("conv2d", &|x| conv(x, leaf4([16, 16, 1, 1], true))),
        ("relu -> max_pool2d", &|x| {
            A::max_pool2d(A::relu(x), [2, 2], [2, 2], [0, 0], [1, 1], false)
        }),
        ("relu -> avg_pool2d", &|x| {
            A::avg_pool2d(A::relu(x), [2, 2], [2, 2], [0, 0], false, false)
        }),
        ("relu -> adaptive_avg_pool2d", &|x| {
            A::adaptive_avg_pool2d(A::relu(x), [8, 8])
        }),
    ];
    let mut failures = Vec::new();
    for (name, op) in cases {
        let x = leaf4(shape, true);
        let y = op(x.clone());
        let output_bytes = bytes_of(&y);
        let loss = A::float_sum(y);
        let (grads, peak) = peak_above_start(|| A::backward(loss));
        assert!(A::grad(&x, &grads).is_some(), "{name}: no gradient");
        drop(grads);
        let bound = output_bytes + input_bytes * 3 / 2;
        if peak >= bound as isize {
            failures.push(format!(
                "{name}: backward peaked at {peak} bytes above its start, not below {bound} \
                 (the incoming gradient {output_bytes} + the input's gradient {input_bytes} + \
                 half an input)"
            ));
        }
    }

    // Embedding: the weights (1 MiB) are the shape-only argument.
    let device = Default::default();
    let weights = A::float_set_require_grad(
        A::float_from_data(
            TensorData::new(vec![0.5f32; 4096 * 64], [4096, 64]),
            &device,
        ),
        true,
    );
    let indices = A::int_from_data(
        TensorData::new(
            (0..64).map(|i| i * 61 % 4096).collect::<Vec<i64>>(),
            [4, 16],
        ),
        &device,
    );
    let y = A::embedding(weights.clone(), indices);
    let output_bytes = bytes_of(&y);
    let loss = A::float_sum(y);
    let (grads, peak) = peak_above_start(|| A::backward(loss));
    assert!(A::grad(&weights, &grads).is_some());
    drop(grads);
    // Flex's kernel allocates the weights' gradient twice (zeros, then the scatter-add).
    let weight_bytes = 4096 * 64 * 4;
    let bound = output_bytes + weight_bytes * 5 / 2;
    if peak >= bound as isize {
        failures.push(format!(
            "embedding: backward peaked at {peak} bytes above its start, not below {bound}"
        ));
    }
    assert!(
        failures.is_empty(),
        "an input-sized stand-in was allocated:\n{}",
        failures.join("\n")
    );
}

type T = <A as burn_backend::BackendTypes>::FloatTensorPrimitive;

/// NOTE [softmax-dot]: softmax's backward step makes `sum(g * y)` a slab at a time. Through
/// backward of `sum(softmax(x) * c)` on 1 MiB, along the last dim (64) and along the first
/// (4), the heap rises above its start by at most the incoming gradient (which becomes x's
/// gradient in place), a slab's product (256 KiB) and the sums twice (the slabs' and their
/// concatenation: 16 KiB along the last dim, 256 KiB along the first). Measured: 1.27 MiB
/// and 1.50 MiB; with the whole product beside the gradient, 2.02 MiB along the last dim.
/// The gradient is `y * (c - sum(c * y))` made whole on the inner backend, bit for bit.
#[test]
fn softmax_s_backward_makes_no_output_sized_product() {
    use burn_backend::ops::ActivationOps;
    let _m = measure();
    warm_up();
    let shape = [4, 16, 64, 64];
    let tensor_bytes = 4 * 16 * 64 * 64 * 4;
    for dim in [3, 0] {
        let x = leaf4(shape, true);
        let c = leaf4(shape, false);
        let loss = A::float_sum(A::float_mul(A::softmax(x.clone(), dim), c.clone()));
        let (grads, peak) = peak_above_start(|| A::backward(loss));
        let got = A::grad(&x, &grads).expect("x's gradient");
        drop(grads);
        let sums = tensor_bytes / shape[dim];
        let bound = tensor_bytes + 256 * 1024 + 2 * sums + 16 * 1024;
        assert!(
            peak <= bound as isize,
            "dim {dim}: backward peaked {peak} bytes above its start, above {bound} (the \
             gradient {tensor_bytes}, a slab's product, the sums {sums} twice)"
        );
        let (x, c) = (A::inner(x), A::inner(c));
        let y = Flex::softmax(x, dim);
        let dot = Flex::float_sum_dim(Flex::float_mul(c.clone(), y.clone()), dim);
        let want = Flex::float_mul(y, Flex::float_sub(c, dot));
        let bits = |t| {
            let data = burn_backend::read_sync(Flex::float_into_data(t)).expect("data");
            let values = data.try_to_vec::<f32>().expect("f32");
            values.into_iter().map(f32::to_bits).collect::<Vec<_>>()
        };
        assert!(bits(got) == bits(want), "dim {dim}: the gradient differs");
    }
}

fn bytes_of(tensor: &T) -> usize {
    use burn_backend::TensorMetadata;
    tensor.shape().num_elements() * tensor.dtype().size()
}

/// NOTE [budget]: the allocator sees what the budget bounds. The chain of `forward` (40 ops,
/// 256 KiB each) under `Budget(u64::MAX)`, 50% and 25% of SaveAll's held peak, each twice
/// (the first step plans online, the second follows the cached plan):
/// - after forward, the heap grew by what `stats` says remat keeps (within 5%), which is
///   within the budget;
/// - through backward, the heap rises above its level at `backward()` by at most what the
///   held peak adds to the kept bytes (rebuilt values), plus the running op's inputs,
///   output and the gradients in flight (`IN_FLIGHT`: two tensors; measured: SaveAll's
///   backward rises one tensor above its start);
/// - the whole step's heap peak stays within the budget plus the same allowance and the
///   output (measured at 50%: 2.6 tensors over the budget), far below SaveAll's: 10.8 MB,
///   5.8 MB at 50%, 3.2 MB at 25%.
#[test]
fn a_budget_bounds_what_the_allocator_sees() {
    const IN_FLIGHT: isize = 2 * (N as isize) * 4;
    let _m = measure();
    warm_up();
    let mut save_all_peak = 0u64;
    let mut step_peaks = Vec::new();
    for percent in [100u64, 50, 25] {
        let budget = if percent == 100 {
            u64::MAX
        } else {
            save_all_peak * percent / 100
        };
        for run in 0..2 {
            let what = format!("{percent}%, step {run}");
            let x = leaf();
            remat::reset_stats();
            let heap_before = live();
            heap::reset_peak(heap_before);
            let kept_before = remat::stats().live_bytes;
            let y = remat::with_policy(Policy::Budget(budget), || forward(x.clone(), 20));
            let heap = live() - heap_before - (N * 4) as isize;
            let kept = (remat::stats().live_bytes - kept_before) as isize;
            assert!(
                (heap - kept).abs() as f64 <= 0.05 * kept as f64,
                "{what}: the allocator says {heap} bytes, stats say {kept}"
            );
            assert!(kept as u64 <= budget, "{what}: {kept} kept");
            let at_backward = live();
            let peak_before_backward = heap::peak();
            heap::reset_peak(at_backward);
            let grads = A::backward(y);
            let rise = heap::peak() - at_backward;
            let stats = remat::stats();
            assert!(stats.peak_bytes <= budget, "{what}: {stats:?}");
            let rebuilt = stats.peak_bytes as isize - kept;
            assert!(
                rise <= rebuilt + IN_FLIGHT,
                "{what}: the heap rose {rise} bytes in backward; held peak {} over {kept} kept",
                stats.peak_bytes
            );
            let step_peak = heap::peak().max(peak_before_backward) - heap_before;
            assert!(A::grad(&x, &grads).is_some());
            drop(grads);
            if percent == 100 {
                save_all_peak = stats.peak_bytes;
            } else {
                assert!(
                    step_peak as u64 <= budget + (IN_FLIGHT as u64) + (N as u64) * 4,
                    "{what}: the heap peaked {step_peak} bytes above the start"
                );
            }
            step_peaks.push(step_peak);
        }
    }
    // Less memory for less budget, as the allocator sees it.
    assert!(
        step_peaks[5] < step_peaks[3] && step_peaks[3] < step_peaks[1],
        "{step_peaks:?}"
    );
}

/// NOTE [hand-over] (`graph/node.rs`): under a budget, a replay whose input the schedule frees
/// right after it takes that input instead of a clone, as the forward pass's op did: Flex's
/// unary kernels then work in place and the replay allocates nothing. A chain of 30 `exp`s
/// (each step reads its output) with room for 4 values: Revolve's sweeps rebuild each value
/// from the one before, which no later read needs. Measured in the planned step: 47
/// replays, 11 of them in place (9.5 MB allocated in backward; 12.3 MB, one output per
/// replay, when every replay read a clone). SaveAll's backward allocates no tensor at all.
/// The loss is recorded outside the budget's scope, as a user may write it.
#[test]
fn a_replay_owns_the_value_it_reads_last() {
    const VALUE: isize = (N * 4) as isize;
    let _m = measure();
    warm_up();
    let budget = 4 * VALUE as u64;
    let step = |policy: Policy| {
        let x = leaf();
        let y = remat::with_policy(policy, || {
            let mut y = A::float_mul_scalar(x, 1e-3.into());
            for _ in 0..30 {
                y = A::float_exp(y);
            }
            y
        });
        let loss = A::float_sum(y);
        remat::reset_stats();
        let before = heap::allocated();
        drop(A::backward(loss));
        (heap::allocated() - before, remat::stats().replays)
    };
    let (save_all, _) = step(Policy::SaveAll);
    assert!(
        save_all < VALUE,
        "SaveAll's backward allocated {save_all} bytes"
    );
    // The first step plans; the second follows the plan: the planner's schedule for the
    // first step's view.
    step(Policy::Budget(budget));
    // The view the engine planned after that step, which later steps follow.
    let view = remat::tradeoff().expect("a budget step ran").view;
    let (allocated, replays) = step(Policy::Budget(budget));
    let schedule = remat::planner::plan(&view, budget).unwrap();
    let actions = schedule.actions();
    let mut planned = 0;
    let mut in_place = 0;
    for (k, action) in actions.iter().enumerate() {
        if let remat::planner::Action::Replay(v) = *action {
            planned += 1;
            // Each op has one input (the first op's is the leaf: not the schedule's).
            let freed_after = view.nodes()[v as usize]
                .inputs
                .first()
                .is_some_and(|&input| {
                    actions[k + 1..]
                        .iter()
                        .take_while(|a| matches!(a, remat::planner::Action::Free(_)))
                        .any(|a| *a == remat::planner::Action::Free(input))
                });
            in_place += u64::from(freed_after);
        }
    }
    assert_eq!(replays, planned);
    assert!(
        in_place > 0,
        "the schedule frees no input right after its replay"
    );
    let outputs = (replays - in_place) as isize * VALUE;
    assert!(
        allocated >= outputs && allocated < outputs + VALUE,
        "backward allocated {allocated} bytes for {replays} replays, {in_place} of them in \
         place: {outputs} bytes of outputs expected"
    );
}

/// A loop that reads parameters through ops and never calls backward (an evaluation loop
/// on an autodiff device, without `valid()`) leaves the heap flat: each iteration's graph is
/// freed when its output is dropped, and nothing of it stays behind (Burn 0.22's autodiff
/// grows about 11 KB per iteration of such a loop, its issue #4970). 10,000 iterations over
/// 8 parameters, under each policy, in a region, and under a budget: after a warm-up of 100
/// iterations the heap may not grow by more than 256 bytes, where one byte per iteration
/// would be 10,000.
#[test]
fn a_forward_only_loop_keeps_the_heap_flat() {
    const LOOPS: usize = 10_000;
    const ALLOWED: isize = 256;
    let _m = measure();
    warm_up();
    let param = |i: usize| {
        let values: Vec<f32> = (0..16).map(|j| ((i * 16 + j) % 7) as f32 / 7.0).collect();
        let x = A::float_from_data(TensorData::new(values, [4, 4]), &Default::default());
        A::float_set_require_grad(x, true)
    };
    let params: Vec<T> = (0..8).map(param).collect();
    let input = A::float_from_data(
        TensorData::new(vec![0.25f32; 16], [4, 4]),
        &Default::default(),
    );
    let forward = |params: &[T]| {
        let mut y = input.clone();
        for p in params {
            y = A::float_tanh(A::float_add(A::float_matmul(y, p.clone()), p.clone()));
        }
        y
    };
    // `None`: a `checkpoint` region.
    let controls = [
        ("SaveAll", Some(Policy::SaveAll)),
        ("Balanced", Some(Policy::Balanced)),
        ("RecomputeAll", Some(Policy::RecomputeAll)),
        ("a region", None),
        ("Budget", Some(Policy::Budget(1 << 20))),
    ];
    for (what, control) in controls {
        let run = || match &control {
            Some(policy) => remat::with_policy(policy.clone(), || forward(&params)),
            None => remat::checkpoint(|| forward(&params)),
        };
        for _ in 0..100 {
            drop(run());
        }
        let start = live();
        for _ in 0..LOOPS {
            drop(run());
        }
        let grown = live() - start;
        eprintln!("{what}: the heap grew by {grown} bytes over {LOOPS} forward-only iterations");
        assert!(
            grown.abs() <= ALLOWED,
            "{what}: the heap grew by {grown} bytes over {LOOPS} forward-only iterations"
        );
        assert_eq!(
            remat::stats().live_bytes,
            0,
            "{what}: remat still keeps values"
        );
    }
}

/// NOTE [fill-constants]: a `zeros`, `ones` or `empty` tensor that only a replay reads is
/// kept as its recipe, not its buffer: `x` written into a fill of twice its size, the
/// result squared and summed under RecomputeAll (the square's step reads the result, so a
/// replay of `slice_assign` reads the fill). The fill is not kept (where a `from_data`
/// constant of the same size is, 512 KiB), the forward pass's heap is lower by that much,
/// and the gradient is SaveAll's bit for bit. A fill a backward step reads stays held:
/// made again at each read, its copies would be temporaries no budget sees.
#[test]
fn a_fill_that_only_a_replay_reads_is_kept_as_its_recipe() {
    use burn_std::{FloatDType, Shape, Slice};
    type P = <A as burn_backend::BackendTypes>::FloatTensorPrimitive;
    type Maker = (&'static str, fn() -> P);
    let _m = measure();
    warm_up();
    let device = Default::default();
    let makers: [Maker; 4] = [
        ("zeros", || {
            A::float_zeros(Shape::new([2 * N]), &Default::default(), FloatDType::F32)
        }),
        ("ones", || {
            A::float_ones(Shape::new([2 * N]), &Default::default(), FloatDType::F32)
        }),
        ("empty", || {
            A::float_empty(Shape::new([2 * N]), &Default::default(), FloatDType::F32)
        }),
        ("from_data", || {
            A::float_from_data(
                TensorData::new(vec![0.0f32; 2 * N], [2 * N]),
                &Default::default(),
            )
        }),
    ];
    let run = |make: fn() -> P, policy: Policy| {
        let x = A::float_from_data(
            TensorData::new((0..N).map(|i| i as f32 * 1e-4).collect(), [N]),
            &device,
        );
        let x = A::float_set_require_grad(x, true);
        let constant = make();
        remat::reset_stats();
        let before = live();
        let (loss, kept, heap) = remat::with_policy(policy, || {
            let y =
                A::float_slice_assign(constant, &[Slice::new(0, Some(N as isize), 1)], x.clone());
            let loss = A::float_sum(A::float_mul(y.clone(), y));
            let kept = remat::stats()
                .bytes_by_reason
                .get(&remat::KeepReason::Constant)
                .copied()
                .unwrap_or(0);
            (loss, kept, live() - before)
        });
        let grads = A::backward(loss);
        let grad = A::grad(&x, &grads).expect("x has a gradient");
        let bits: Vec<u32> = burn_backend::read_sync(Flex::float_into_data(grad))
            .unwrap()
            .iter::<f32>()
            .map(f32::to_bits)
            .collect();
        (bits, kept, heap, remat::stats().replays)
    };
    let (_, _, data_heap, _) = run(makers[3].1, Policy::RecomputeAll);
    for (name, make) in makers {
        let (save_all, ..) = run(make, Policy::SaveAll);
        let (bits, kept, heap, replays) = run(make, Policy::RecomputeAll);
        assert!(replays > 0, "{name}: nothing was replayed");
        assert!(
            bits == save_all,
            "{name}: the gradient differs from SaveAll's"
        );
        if name == "from_data" {
            assert_eq!(kept, (2 * N * 4) as u64, "{name}: the constant is kept");
        } else {
            assert_eq!(kept, 0, "{name}: {kept} bytes of the fill kept");
            assert!(
                heap + (2 * N * 4) as isize <= data_heap + 4096,
                "{name}: {heap} bytes live after the forward pass, {data_heap} with a \
                 from_data constant"
            );
        }
    }
    // A fill a step reads (`mul`'s step reads the other factor) is held and counted.
    let x = leaf();
    remat::reset_stats();
    let y = remat::with_policy(Policy::SaveAll, || {
        A::float_mul(
            x.clone(),
            A::float_ones(Shape::new([N]), &device, FloatDType::F32),
        )
    });
    let kept = remat::stats()
        .bytes_by_reason
        .get(&remat::KeepReason::Constant)
        .copied();
    assert_eq!(kept, Some((N * 4) as u64), "a fill the step reads is held");
    drop(A::backward(A::float_sum(y)));
}

/// NOTE [grads-in-flight]: `tradeoff()` predicts each budget's step peak of held values
/// plus gradients in flight, from the gradients the last pass held step by step. Six layers
/// of `tanh(h W)` on 256 x 256 weights (256 KiB each) and a batch of 128 (128 KiB values),
/// where the weights' gradients (1.5 MiB at the end) outweigh what a budget holds: the
/// prediction for the plan the step carried out is what the pass counted, exactly, and the
/// allocator's peak of the step lies within 10% above it (what it adds: the graph's
/// bookkeeping and each step's temporaries).
#[test]
fn tradeoff_predicts_a_step_s_peak_with_its_gradients() {
    type P = <A as burn_backend::BackendTypes>::FloatTensorPrimitive;
    const W: usize = 256;
    const BATCH: usize = 128;
    let _m = measure();
    warm_up();
    let device = Default::default();
    let weights: Vec<P> = (0..6)
        .map(|l| {
            let values = (0..W * W)
                .map(|i| ((i * 7 + l) % 13) as f32 * 1e-3)
                .collect();
            let w = A::float_from_data(TensorData::new(values, [W, W]), &device);
            A::float_set_require_grad(w, true)
        })
        .collect();
    let x = A::float_from_data(
        TensorData::new(vec![0.5f32; BATCH * W], [BATCH, W]),
        &device,
    );
    let step = |policy: Policy| {
        remat::reset_stats();
        let before = live();
        heap::reset_peak(before);
        let loss = remat::with_policy(policy, || {
            let mut h = x.clone();
            for w in &weights {
                h = A::float_tanh(A::float_matmul(h, w.clone()));
            }
            A::float_sum(h)
        });
        let grads = A::backward(loss);
        let peak = heap::peak() - before;
        drop(grads);
        (peak, remat::stats().peak_bytes)
    };
    step(Policy::SaveAll);
    let (_, keep_all) = step(Policy::SaveAll);
    let budget = keep_all * 4 / 10;
    step(Policy::Budget(budget));
    let (peak, held) = step(Policy::Budget(budget));
    assert!(held <= budget, "held {held} bytes under {budget}");
    let report = remat::tradeoff().expect("a step ran under a budget");
    let grads = report.grads.clone().expect("the pass's gradients");
    let view = &report.view;
    assert_eq!(grads.during_bytes.len(), view.len());
    // The weights' gradients stay to the end of the pass.
    let weights_bytes = (6 * W * W * 4) as u64;
    assert!(
        grads
            .after_bytes
            .last()
            .is_some_and(|&g| g >= weights_bytes)
    );
    let schedule = remat::planner::plan(view, budget).expect("the budget plans");
    let predicted = remat::planner::step_peak(view, &schedule, &grads).expect("a profile");
    assert_eq!(
        predicted, grads.measured_peak_bytes,
        "the prediction for the plan carried out and what the pass counted"
    );
    assert!(predicted > held + weights_bytes / 2);
    let ratio = peak as f64 / predicted as f64;
    eprintln!(
        "step peak: allocator {peak} bytes, predicted held + gradients {predicted} ({ratio:.3}x), \
         held {held}, gradients at most {}",
        grads.peak_bytes()
    );
    assert!(
        (1.0..=1.1).contains(&ratio),
        "the allocator's step peak {peak} against the prediction {predicted}: {ratio:.3}x"
    );
    // Every row of the report predicts its step's peak, the gradients included.
    for row in &report.rows {
        let with = row.step_peak_bytes.expect("each row's step peak");
        assert!(with >= row.peak_bytes.max(weights_bytes), "{row:?}");
    }
    assert!(report.to_string().contains("peak with grads"));
}

/// NOTE [flex-fresh-outputs]: a fact of the inner backend that the step-peak model leaves
/// out, pinned so that a Flex release that changes it is noticed. Flex allocates a kernel's
/// fresh output (`FlexTensor::empty`: matmul, convolutions) as a `Vec<u8>` and copies it into
/// a 16-byte aligned buffer before it writes (cubecl's `Bytes::from_bytes_vec`), so for a
/// moment the allocator sees the output twice. The first copy is zeroed memory from
/// `calloc`, never written: large ones are pages the kernel maps on first touch, so the
/// process's resident memory does not double, but a counting allocator (and an allocator
/// cap) does. The benchmark's transformer peaks at such a moment (the attention
/// probabilities' gradient, bench/README.md).
#[test]
fn flex_s_fresh_matmul_output_is_counted_twice_for_a_moment() {
    use burn_backend::Backend;
    type F = <Flex as burn_backend::BackendTypes>::FloatTensorPrimitive;
    let _m = measure();
    let device = Default::default();
    let lhs: F = Flex::float_from_data(TensorData::new(vec![0.5f32; 256 * 64], [256, 64]), &device);
    let rhs: F = Flex::float_from_data(
        TensorData::new(vec![0.25f32; 64 * 2048], [64, 2048]),
        &device,
    );
    let out_bytes = (256 * 2048 * 4) as isize;
    let (out, peak) = peak_above_start(|| Flex::float_matmul(lhs.clone(), rhs.clone()));
    Flex::sync(&device).unwrap();
    assert_eq!(bytes_of_inner(&out), out_bytes as usize);
    assert!(
        peak >= 2 * out_bytes && peak < 2 * out_bytes + out_bytes / 8,
        "a fresh {out_bytes}-byte matmul output peaked at {peak} bytes"
    );
    // An element-wise op writes a vector of its elements: no second copy.
    let (sum, peak) = peak_above_start(|| Flex::float_add(out.clone(), out.clone()));
    assert!(
        peak < out_bytes + out_bytes / 8,
        "an element-wise output of {out_bytes} bytes peaked at {peak} bytes"
    );
    drop((out, sum));
}

fn bytes_of_inner(t: &<Flex as burn_backend::BackendTypes>::FloatTensorPrimitive) -> usize {
    use burn_backend::TensorMetadata;
    t.shape().num_elements() * 4
}
