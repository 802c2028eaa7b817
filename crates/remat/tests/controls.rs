//! The user-facing controls do what they say: `set_policy` applies to every graph whatever
//! its Burn strategy (and `reset_policy` gives the strategy its default back), `policy()`
//! reports what applies, the process-wide policy and regions inside the forward reach
//! worker threads (scopes do not), a panic caught inside a scope or a region leaves the
//! thread's state restored and the graph freeable, and a `Selector` may itself call
//! `set_policy` or `with_policy` (no lock or borrow is held while it runs).
//!
//! Exact numbers through `remat::stats()`: kept bytes after forward, replays in backward.
//! Statistics and `set_policy` are process-wide: every test here runs alone ([`serial`]).

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, TensorData};
use burn_flex::Flex;
use remat::checkpoint::strategy::{BalancedCheckpointing, NoCheckpointing};
use remat::{Autodiff, Decision, Policy, PolicySource, Selector};
use support::finishes;

/// Statistics and `set_policy` are process-wide: tests run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Holds [`SERIAL`]; gives the strategies their defaults back when dropped, so that no
/// test sees another's process-wide policy.
struct Serial(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

impl Drop for Serial {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            reset_policy();
        }
    }
}

fn serial() -> Serial {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    reset_policy();
    Serial(guard)
}

/// `remat::reset_policy`, failing rather than hanging if a deadlocked test left the
/// process-wide policy locked.
fn reset_policy() {
    finishes("reset_policy", remat::reset_policy);
}

type Plain = Autodiff<Flex, NoCheckpointing>;
type Balanced = Autodiff<Flex, BalancedCheckpointing>;

const XS: [f32; 4] = [0.3, -0.7, 1.1, 0.05];

fn leaf<B: AutodiffBackend>() -> FloatTensor<B> {
    let x = B::float_from_data(TensorData::from(XS), &Default::default());
    B::float_set_require_grad(x, true)
}

/// `t = tanh(exp(sin(x)))`, in a region when asked.
fn inner<B: Backend>(x: FloatTensor<B>, region: bool) -> FloatTensor<B> {
    let f = move || B::float_tanh(B::float_exp(B::float_sin(x)));
    if region { remat::checkpoint(f) } else { f() }
}

/// `sum(t * t)`. Under SaveAll, exp's and tanh's outputs are kept (their backward steps
/// read them): 32 bytes, no replay. Under RecomputeAll (and Balanced: every op is cheap)
/// nothing is kept and backward replays sin, exp and tanh once each. With `t` in a region,
/// its output (read after the region) is kept and sin and exp are replayed.
fn program<B: Backend>(x: FloatTensor<B>, region: bool) -> FloatTensor<B> {
    let t = inner::<B>(x, region);
    B::float_sum(B::float_mul(t.clone(), t))
}

const SAVE_ALL: (u64, u64) = (32, 0);
const RECOMPUTE_ALL: (u64, u64) = (0, 3);
const REGION: (u64, u64) = (16, 2);

/// One forward + backward: see [`run`].
type Run = fn(bool) -> ((u64, u64), Vec<u32>);

/// A user's forward pass that panics.
type Panicking = fn(FloatTensor<Plain>);

/// What one forward + backward of [`program`] did on this thread: (bytes kept after
/// forward, replays in backward), and the gradient's bits.
fn run<B: AutodiffBackend>(region: bool) -> ((u64, u64), Vec<u32>) {
    let before = remat::stats().live_bytes;
    remat::reset_stats();
    let x = leaf::<B>();
    let loss = program::<B>(x.clone(), region);
    let kept = remat::stats().live_bytes - before;
    let grads = B::backward(loss);
    let replays = remat::stats().replays;
    let grad = B::grad(&x, &grads).expect("x has a gradient");
    let data = burn_backend::read_sync(B::InnerBackend::float_into_data(grad)).unwrap();
    let bits = data
        .try_into_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    drop((x, grads));
    assert_eq!(remat::stats().live_bytes, before, "drained after backward");
    ((kept, replays), bits)
}

/// Checks a gradient against d/dx sum(tanh(exp(sin x))^2), computed in f64.
fn check_gradient(bits: &[u32]) {
    for (g, x) in bits.iter().zip(XS) {
        let (x, g) = (f64::from(x), f64::from(f32::from_bits(*g)));
        let e = x.sin().exp();
        let t = e.tanh();
        let want = 2.0 * t * (1.0 - t * t) * e * x.cos();
        assert!((g - want).abs() < 1e-5, "gradient {g} vs {want} at {x}");
    }
}

#[test]
fn set_policy_applies_under_both_strategies_and_reset_policy_restores_their_defaults() {
    let _s = serial();
    let (save_all, reference) = run::<Plain>(false);
    check_gradient(&reference);
    assert_eq!(save_all, SAVE_ALL, "NoCheckpointing's default: SaveAll");
    let cases = [
        ("autodiff(), default", run::<Plain> as Run, None, SAVE_ALL),
        (
            "autodiff(), set_policy(RecomputeAll)",
            run::<Plain>,
            Some(Policy::RecomputeAll),
            RECOMPUTE_ALL,
        ),
        ("autodiff(), reset", run::<Plain>, None, SAVE_ALL),
        (
            "gradient_checkpointing(), default",
            run::<Balanced>,
            None,
            RECOMPUTE_ALL,
        ),
        (
            "gradient_checkpointing(), set_policy(SaveAll)",
            run::<Balanced>,
            Some(Policy::SaveAll),
            SAVE_ALL,
        ),
        (
            "gradient_checkpointing(), reset",
            run::<Balanced>,
            None,
            RECOMPUTE_ALL,
        ),
    ];
    for (label, run, set, want) in cases {
        match set {
            Some(policy) => remat::set_policy(policy),
            None => remat::reset_policy(),
        }
        let (got, bits) = run(false);
        assert_eq!(got, want, "{label}: (kept bytes, replays)");
        assert_eq!(bits, reference, "{label}: gradients bit-identical");
    }
}

#[test]
fn policy_reports_what_applies_under_each_strategy() {
    let _s = serial();
    let now = remat::policy();
    assert_eq!(now.source, PolicySource::StrategyDefault);
    assert!(matches!(now.no_checkpointing, Policy::SaveAll));
    assert!(matches!(now.balanced_checkpointing, Policy::Balanced));
    assert!(matches!(now.under::<NoCheckpointing>(), Policy::SaveAll));
    assert!(matches!(
        now.under::<BalancedCheckpointing>(),
        Policy::Balanced
    ));
    assert_eq!(
        now.to_string(),
        "SaveAll under autodiff(), Balanced under autodiff().gradient_checkpointing() \
         (nothing set: the strategy's default)"
    );

    remat::set_policy(Policy::RecomputeAll);
    let now = remat::policy();
    assert_eq!(now.source, PolicySource::Process);
    assert!(matches!(now.no_checkpointing, Policy::RecomputeAll));
    assert!(matches!(now.balanced_checkpointing, Policy::RecomputeAll));

    remat::with_policy(Policy::SaveAll, || {
        let now = remat::policy();
        assert_eq!(now.source, PolicySource::Scope);
        assert!(matches!(now.no_checkpointing, Policy::SaveAll));
        assert!(matches!(now.balanced_checkpointing, Policy::SaveAll));
        remat::checkpoint(|| {
            // A region wins over the scope: everything is rebuilt.
            let now = remat::policy();
            assert_eq!(now.source, PolicySource::Region);
            assert!(matches!(now.no_checkpointing, Policy::RecomputeAll));
            assert!(matches!(now.balanced_checkpointing, Policy::RecomputeAll));
        });
        assert_eq!(remat::policy().source, PolicySource::Scope);
    });
    assert_eq!(remat::policy().source, PolicySource::Process);
    remat::reset_policy();
    assert_eq!(remat::policy().source, PolicySource::StrategyDefault);
}

/// `set_policy` is process-wide: it reaches a forward + backward run on another thread (as
/// burn-train's `Learner` and data-parallel code run the model); a `with_policy` scope
/// opened on this thread does not.
#[test]
fn set_policy_reaches_worker_threads_and_a_scope_does_not() {
    let _s = serial();
    let on_a_thread = || std::thread::spawn(|| run::<Plain>(false).0).join().unwrap();
    remat::set_policy(Policy::RecomputeAll);
    assert_eq!(
        on_a_thread(),
        RECOMPUTE_ALL,
        "set_policy on a worker thread"
    );
    remat::reset_policy();
    let scoped = remat::with_policy(Policy::RecomputeAll, on_a_thread);
    assert_eq!(
        scoped, SAVE_ALL,
        "a scope stays on the thread that opened it"
    );
}

/// A region opened inside the forward applies on whatever thread runs the forward.
#[test]
fn a_region_inside_the_forward_works_on_a_worker_thread() {
    let _s = serial();
    let (got, bits) = std::thread::spawn(|| run::<Plain>(true)).join().unwrap();
    assert_eq!(
        got, REGION,
        "(kept bytes, replays) with a region on a worker thread"
    );
    check_gradient(&bits);
}

/// A panic inside a region or a scope, caught by the user, closes them: the next op
/// follows the outer policy, the values recorded before the panic are freed, and a fresh
/// graph runs backward.
#[test]
fn a_panic_caught_inside_a_region_or_a_scope_restores_the_thread_state() {
    let _s = serial();
    let baseline = remat::stats().live_bytes;
    let panicking: [(&str, Panicking); 3] = [
        ("region", |x| {
            remat::checkpoint(|| {
                let _t = inner::<Plain>(x, false);
                panic!("user code fails inside a region");
            })
        }),
        ("scope", |x| {
            remat::with_policy(Policy::SaveAll, || {
                let _t = inner::<Plain>(x, false);
                // exp's and tanh's outputs are kept when the panic comes.
                assert!(remat::stats().live_bytes >= 32);
                panic!("user code fails inside a scope");
            })
        }),
        ("nested", |x| {
            remat::with_policy(Policy::RecomputeAll, || {
                remat::checkpoint(|| {
                    remat::with_policy(Policy::SaveAll, || {
                        let _t = inner::<Plain>(x, false);
                        panic!("user code fails three levels down");
                    })
                })
            })
        }),
    ];
    for (label, body) in panicking {
        let x = leaf::<Plain>();
        let caught = catch_unwind(AssertUnwindSafe(|| body(x.clone())));
        assert!(caught.is_err(), "{label}: the panic reaches the caller");
        assert_eq!(
            remat::policy().source,
            PolicySource::StrategyDefault,
            "{label}: nothing left pushed"
        );
        drop(x);
        assert_eq!(remat::stats().live_bytes, baseline, "{label}: freed");
        // The next graph follows the default (SaveAll under autodiff()).
        let (got, bits) = run::<Plain>(false);
        assert_eq!(got, SAVE_ALL, "{label}: the next graph");
        check_gradient(&bits);
        // Caught inside an outer scope: the outer scope applies again.
        remat::with_policy(Policy::RecomputeAll, || {
            let x = leaf::<Plain>();
            assert!(catch_unwind(AssertUnwindSafe(|| body(x))).is_err());
            assert_eq!(remat::policy().source, PolicySource::Scope, "{label}");
            assert_eq!(
                run::<Plain>(false).0,
                RECOMPUTE_ALL,
                "{label}: the outer scope"
            );
        });
    }
    assert_eq!(remat::stats().live_bytes, baseline);
}

/// A `Selector` that calls `set_policy` runs while an op is being recorded: nothing remat
/// holds then may block it (before, it waited on the read lock its own caller held).
#[test]
fn a_selector_may_call_set_policy() {
    let _s = serial();
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    CALLS.store(0, Ordering::SeqCst);
    // On its first call, the rule hands over to RecomputeAll for the ops that follow.
    remat::set_policy(Policy::Selective(Selector::new(|_op| {
        if CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
            remat::set_policy(Policy::RecomputeAll);
        }
        Decision::Keep
    })));
    let (got, bits) = finishes("a selector calling set_policy", || run::<Plain>(false));
    check_gradient(&bits);
    assert_eq!(CALLS.load(Ordering::SeqCst), 1, "asked once, then replaced");
    // sin kept by the rule: its output, which exp's replay reads, is kept (16 bytes); exp
    // and tanh are rebuilt under RecomputeAll: 2 replays.
    assert_eq!(got, (16, 2));
    assert_eq!(remat::policy().source, PolicySource::Process);
    assert!(matches!(
        remat::policy().no_checkpointing,
        Policy::RecomputeAll
    ));
}

/// A `Selector` that opens a scope of its own (here to run a helper under another policy)
/// runs while an op is being recorded: remat holds no borrow of the thread's state then
/// (before, the scope's push panicked with "already borrowed").
#[test]
fn a_selector_may_call_with_policy_and_record_ops() {
    let _s = serial();
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    CALLS.store(0, Ordering::SeqCst);
    let selector = Selector::new(|op| {
        CALLS.fetch_add(1, Ordering::SeqCst);
        // The rule records a small graph of its own inside a scope and a region.
        let decision = remat::with_policy(Policy::SaveAll, || {
            remat::checkpoint(|| {
                let y = Plain::float_exp(leaf::<Plain>());
                drop(y);
            });
            if op.name == "tanh" {
                Decision::Keep
            } else {
                Decision::Recompute
            }
        });
        assert_eq!(remat::policy().source, PolicySource::Scope);
        decision
    });
    let (got, bits) = finishes("a selector calling with_policy", move || {
        remat::with_policy(Policy::Selective(selector), || run::<Plain>(false))
    });
    check_gradient(&bits);
    // Asked for the program's five ops (sin, exp, tanh, mul, sum); not for the rule's own
    // exp, recorded in a region.
    assert_eq!(CALLS.load(Ordering::SeqCst), 5);
    // tanh kept (read by mul and its own backward); exp rebuilt from sin, rebuilt from x.
    assert_eq!(got, (16, 2));
}

/// The deadlock harness fails on a panic too: a test cannot pass because its body died.
#[test]
fn finishes_reports_a_panic_as_a_failure() {
    let ran = Arc::new(AtomicUsize::new(0));
    let seen = ran.clone();
    let caught = catch_unwind(|| {
        finishes("a panicking body", move || {
            seen.store(1, Ordering::SeqCst);
            panic!("the body fails");
        })
    });
    assert!(caught.is_err());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// A sized selector is told each op's output bytes, and selectors compose: `or` keeps what
/// either keeps, `and` what both keep, `!` inverts.
#[test]
fn selectors_compose_and_see_output_bytes() {
    let _s = serial();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let sized = Selector::sized(move |op, bytes| {
        log.lock().unwrap().push((op.name, bytes));
        Decision::Keep
    });
    let (got, bits) = finishes("a sized selector", move || {
        remat::with_policy(Policy::Selective(sized), || run::<Plain>(false))
    });
    check_gradient(&bits);
    assert_eq!(got, SAVE_ALL);
    // Four f32s out of sin, exp, tanh and mul; one out of sum.
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("sin", 16),
            ("exp", 16),
            ("tanh", 16),
            ("mul", 16),
            ("sum", 4)
        ]
    );
    let cases = [
        // Nothing is at most 8 bytes but sum's output, which no step reads: keeping tanh by
        // name is all that is kept (exp rebuilt from sin, rebuilt from x).
        (
            Selector::keep_names(&["tanh"]).or(Selector::keep_at_most(8)),
            REGION,
        ),
        // Everything is at most 16 bytes: every op but tanh is kept (exp's output, 16
        // bytes; tanh is replayed once from it).
        (
            Selector::keep_at_most(16).and(!Selector::keep_names(&["tanh"])),
            (16, 1),
        ),
        (!Selector::keep_at_most(16), RECOMPUTE_ALL),
    ];
    for (k, (selector, want)) in cases.into_iter().enumerate() {
        let (got, bits) = finishes("a composed selector", move || {
            remat::with_policy(Policy::Selective(selector), || run::<Plain>(false))
        });
        check_gradient(&bits);
        assert_eq!(got, want, "case {k}");
    }
}
