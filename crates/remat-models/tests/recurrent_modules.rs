//! Burn's own recurrent modules under a byte budget (issue 34), on Flex with one rayon
//! thread, the heap measured by a counting global allocator:
//!
//! - `nn::Lstm` with the loss on its last hidden state (a sequence classifier): the
//!   `[batch, seq, hidden]` output it stacks with `slice_assign` is a side chain no backward
//!   step reaches (NOTE [side-ops]); steps departed from their plan there and ran online.
//! - `nn::Gru` with the loss on every output: its first step under half of SaveAll's bytes
//!   stopped at `backward()`; it runs by the whole-step plan replayed (NOTE [replay-plan]).
//! - `nn::Lstm` below a sixth of SaveAll's bytes, planned as a chain of `(h, c)` tuples
//!   (NOTE [tuple-cuts]; it ran the lean schedule, 224,056 replays a step on 32 steps).
//! - `nn::Lstm` of a realistic size (32 KiB values) against issue 34's heap rule, and its
//!   smallest budget against its length.
//! - `nn::Lstm` and `nn::Gru` with the loss on every output and `nn::Gru` with the loss on
//!   its last output, down to their smallest budgets, and a tenth of K, below those, stopping with
//!   `TooSmall` that names a budget that runs.
//! - A module on every output run after the same module on its last output (the first step
//!   follows the other graph's plan and departs at the loss), and two graphs that start with
//!   the same op run in turn (NOTE [next-graph]).
//! - A graph's first step under a budget (online) and its first step under a new budget
//!   (planned before its first op) against its planned steps: the planner's memory and the
//!   online session's are that step's heap (NOTE [planner-memory], NOTE [pass-compaction]).
//!
//! Each budget is a share of what SaveAll's step holds after its forward pass (K, by the
//! allocator). Asserted: gradients bit-identical to SaveAll's; the later steps follow one
//! plan (the same replays each step, within the budget by `stats`: NOTE [shared-release]);
//! the heap of a planned step against SaveAll's peak (measured on 32 steps, batch 16, input
//! 16, hidden 64, debug: Lstm 0.84x at 50%, 0.60x at 25%, 0.45-0.47x at 15-10%; Gru 0.79x
//! at 50%; 1.39x, 1.16x, 1.1x and 1.32x before NOTE [followed-entries], 0.97x, 0.73x and
//! 0.90x before NOTE [shared-constants] and NOTE [session-ids]). Each step also prints its
//! peak against issue 34's rule (`b + 1.1 (P - K + G) + 256 KiB`): on 32 steps the planned
//! steps are within 0.93-1.05x of it; on 128 steps of these 4 KiB values 1.2-1.6x, the
//! graph's own bookkeeping (30% of K, which the budget does not count) the difference
//! (FIXME [tape-bytes] in ARCHITECTURE.md; on 32 KiB values, 0.91-0.99x). What does not
//! hold yet is in ARCHITECTURE.md (FIXME [lstm-plans]). `REMAT_RNN_STEPS` sets the length
//! (`scripts/long-tests.sh` runs 128). Five child processes of the Lstm at a quarter of K
//! plan the same steps (NOTE [estimated-costs]).

use std::sync::Mutex;

use burn::nn::{Gru, GruConfig, Lstm, LstmConfig};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use remat::Policy;
use remat_models::programs::{Named, collect_grads, synthetic};

#[allow(dead_code)]
#[path = "../../remat/tests/support/heap.rs"]
mod heap;

#[global_allocator]
static GLOBAL: heap::Heap = heap::Heap;

#[path = "support/one_thread.rs"]
mod one_thread;
use one_thread::one_measured_thread;

/// The allocator's counters are shared: the tests of this binary run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const BATCH: usize = 16;
const INPUT: usize = 16;
const HIDDEN: usize = 64;

/// The modules' sizes: batch, input features, hidden size.
#[derive(Clone, Copy, Debug)]
struct Sizes(usize, usize, usize);

/// The sizes of most tests here: 4 KiB values, so the graph's own bookkeeping weighs.
const SMALL: Sizes = Sizes(BATCH, INPUT, HIDDEN);

fn steps() -> usize {
    std::env::var("REMAT_RNN_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Model {
    /// `Lstm`, the loss on the last hidden state.
    LstmLast,
    /// `Lstm`, the loss on every output.
    LstmAll,
    /// `Gru`, the loss on its last output.
    GruLast,
    /// `Gru`, the loss on every output.
    GruAll,
}

struct Net {
    lstm: Lstm,
    gru: Gru,
}

/// One training step, measured.
struct Step {
    /// Heap peak above the level before the step.
    peak: i64,
    /// Heap after the forward pass, above the level before.
    kept: i64,
    /// Heap after backward, the gradients held, above the level before.
    grads_bytes: i64,
    /// Of `kept`, what remat does not count as held (`remat::stats().live_bytes`): the
    /// graph's own records, the budget session's, and the values' metadata.
    own: i64,
    replays: u64,
    /// `remat::stats().peak_bytes` (what remat held at most).
    held: u64,
    grads: Vec<Named>,
}

fn step(net: &Net, model: Model, x: &Tensor<3>, policy: Policy) -> Step {
    step_on(net, model, x, policy, false)
}

/// [`step`], its backward pass on a new thread (counted by the allocator too) where
/// `backward_elsewhere`.
fn step_on(
    net: &Net,
    model: Model,
    x: &Tensor<3>,
    policy: Policy,
    backward_elsewhere: bool,
) -> Step {
    remat::reset_stats();
    let before = heap::live() as i64;
    heap::reset_peak(before as isize);
    let loss = remat::with_policy(policy, || match model {
        Model::LstmLast => {
            let (_, state) = net.lstm.forward(x.clone(), None);
            state.hidden.sum()
        }
        Model::LstmAll => {
            let (out, _) = net.lstm.forward(x.clone(), None);
            (out.clone() * out).sum()
        }
        Model::GruLast => {
            let out = net.gru.forward(x.clone(), None);
            let seq = out.dims()[1];
            out.narrow(1, seq - 1, 1).sum()
        }
        Model::GruAll => {
            let out = net.gru.forward(x.clone(), None);
            (out.clone() * out).sum()
        }
    });
    let kept = heap::live() as i64 - before;
    let own = kept - remat::stats().live_bytes as i64;
    let grads = if backward_elsewhere {
        std::thread::spawn(move || {
            heap::set_measured(true);
            loss.backward()
        })
        .join()
        .expect("the backward thread panicked")
    } else {
        loss.backward()
    };
    let peak = heap::peak() as i64 - before;
    let grads_bytes = heap::live() as i64 - before;
    let grads = match model {
        Model::GruLast | Model::GruAll => {
            collect_grads(&net.gru, &GradientsParams::from_grads(grads, &net.gru))
        }
        Model::LstmLast | Model::LstmAll => {
            collect_grads(&net.lstm, &GradientsParams::from_grads(grads, &net.lstm))
        }
    };
    let stats = remat::stats();
    Step {
        peak,
        kept,
        grads_bytes,
        own,
        replays: stats.replays,
        held: stats.peak_bytes,
        grads,
    }
}

/// The smallest budget `check_budget` names after the thread's last step (`what` says which
/// step, for the message).
fn smallest_named(what: &str) -> u64 {
    match remat::check_budget(0) {
        Err(remat::BudgetError::TooSmall {
            min_budget_bytes, ..
        }) => min_budget_bytes,
        other => panic!("{what}: check_budget(0) answered {other:?}"),
    }
}

/// Asserts that `run`, a step under `budget`, has SaveAll's gradients and held at most the
/// budget (`what` says which step, for the messages).
fn assert_like_save_all(run: &Step, save_all: &Step, budget: u64, what: &str) {
    assert!(
        run.grads == save_all.grads,
        "{what} under {budget} bytes: gradients differ from SaveAll's"
    );
    assert!(
        run.held <= budget,
        "{what}: held {} bytes, over the budget of {budget}",
        run.held
    );
}

/// `n` steps of `model` under `budget`, each with SaveAll's gradients within the budget
/// ([`assert_like_save_all`]; `what` names them in the messages).
fn steps_like_save_all(
    (net, x): (&Net, &Tensor<3>),
    model: Model,
    budget: u64,
    n: usize,
    save_all: &Step,
    what: &str,
) -> Vec<Step> {
    let runs: Vec<Step> = (0..n)
        .map(|_| step(net, model, x, Policy::Budget(budget)))
        .collect();
    for run in &runs {
        assert_like_save_all(run, save_all, budget, what);
    }
    runs
}

/// The modules (seeded) and an input of [`steps`] steps.
fn lstm_and_input() -> (Net, Tensor<3>) {
    lstm_and_input_of(SMALL, steps())
}

/// The modules (seeded) of `sizes` and an input of `seq` steps.
fn lstm_and_input_of(Sizes(batch, input, hidden): Sizes, seq: usize) -> (Net, Tensor<3>) {
    let device = Device::flex().autodiff();
    device.seed(3);
    let net = Net {
        lstm: LstmConfig::new(input, hidden, true).init(&device),
        gru: GruConfig::new(input, hidden, true).init(&device),
    };
    let x = Tensor::<3>::from_data(
        TensorData::new(synthetic(batch * seq * input, 5), [batch, seq, input]),
        &device,
    );
    (net, x)
}

/// Runs `model` under SaveAll, then three steps under each share of K in `shares` (with the
/// bound on a planned step's heap over SaveAll's peak), and checks what the module docs say;
/// returns each share's replays a step.
fn check(model: Model, shares: &[(u64, f64)]) -> Vec<u64> {
    check_at(SMALL, steps(), model, shares)
        .into_iter()
        .map(|outcome| outcome.replays)
        .collect()
}

/// What [`check_at`] measured at one share of K.
struct Outcome {
    /// Replays of a planned step.
    replays: u64,
    /// A planned step's heap peak over issue 34's rule (`b + 1.1 (P - K + G) + 256 KiB`).
    over_rule: f64,
    /// The first step's (online at the first share, planned ahead at later ones).
    first_over_rule: f64,
    /// The most bytes the first step held (`remat::stats().peak_bytes`).
    first_held: u64,
    /// The share's budget.
    budget: u64,
}

/// [`check`] on modules of `sizes` over `seq` steps; returns what each share measured.
fn check_at(sizes: Sizes, seq: usize, model: Model, shares: &[(u64, f64)]) -> Vec<Outcome> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    one_measured_thread();
    let (net, x) = lstm_and_input_of(sizes, seq);
    step(&net, model, &x, Policy::SaveAll);
    let save_all = step(&net, model, &x, Policy::SaveAll);
    let mut replays = Vec::new();
    for &(percent, bound) in shares {
        let budget = save_all.kept as u64 * percent / 100;
        let runs: Vec<Step> = (0..3)
            .map(|_| step(&net, model, &x, Policy::Budget(budget)))
            .collect();
        for (k, run) in runs.iter().enumerate() {
            assert!(
                run.grads == save_all.grads,
                "{model:?} at {percent}% of K, step {k}: gradients differ from SaveAll's"
            );
        }
        for run in &runs[1..] {
            assert_eq!(
                run.replays, runs[1].replays,
                "{model:?} at {percent}%: the planned steps replay differently"
            );
            // NOTE [shared-release]: each step's input slice, read by the four gates, is
            // charged until the last of them steps (it was 28 KiB over at 25% on 32 steps,
            // 114 KiB on 128).
            assert!(
                run.held <= budget,
                "{model:?} at {percent}%: held {} bytes, over {budget}",
                run.held
            );
        }
        let ratio = runs[2].peak as f64 / save_all.peak as f64;
        // Issue 34's rule: b + 1.1 (P - K + G) + 256 KiB.
        let rule = budget as f64
            + 1.1 * (save_all.peak - save_all.kept + save_all.grads_bytes) as f64
            + 262_144.0;
        eprintln!(
            "{model:?} {sizes:?} {seq} steps at {percent}% of K ({budget} bytes): heap peak {:.2}x \
             SaveAll's ({} / {}), {:.2}x issue 34's rule ({rule:.0}), {} replays a step; the \
             first step {:.2}x the rule",
            ratio,
            runs[2].peak,
            save_all.peak,
            runs[2].peak as f64 / rule,
            runs[2].replays,
            runs[0].peak as f64 / rule
        );
        // Debug builds keep a word more per node (a hash of an evicted value's shape).
        let bound = if cfg!(debug_assertions) {
            bound + 0.03
        } else {
            bound
        };
        assert!(
            ratio <= bound,
            "{model:?} at {percent}%: a planned step's heap peaked at {ratio:.2}x SaveAll's"
        );
        replays.push(Outcome {
            replays: runs[2].replays,
            over_rule: runs[2].peak as f64 / rule,
            first_over_rule: runs[0].peak as f64 / rule,
            first_held: runs[0].held,
            budget,
        });
    }
    replays
}

/// Issue 34's heap rule, `b + 1.1 (P - K + G) + 256 KiB`, on an `Lstm` of a realistic size
/// (batch 32, input 64, hidden 256, 64 steps: 32 KiB values, where the graph's bookkeeping
/// weighs less than on 4 KiB ones). Measured (release, 2026-12-05): at 50%, 25% and 10% of
/// K the planned steps' heap peaked at 0.63x, 0.44x and 0.31x SaveAll's, 0.94x, 0.98x and
/// 0.98x the rule (debug: 0.95x, 0.99x, 0.98x), replaying 705, 1,772 and 3,291 ops a step.
/// On 0b45296, before NOTE [planner-memory]'s cap and NOTE [pass-compaction], 25% and 10%
/// peaked at 1.04x and 1.07x the rule (3,466 replays at 10%), and before NOTE
/// [shared-release] the plans replayed 827, 2,018 and 7,183.
/// The graph's first step, under half of K, runs online: it peaked at 0.81x SaveAll's, 1.21x
/// the rule, holding a clone of each needed input while its op ran, so that Flex's
/// `slice_assign` copied the 2 MiB stacked output at every step (NOTE [in-place-forward]);
/// then 0.70x, 1.05x, and 1.02x once the session lent its entries to its online planner (NOTE
/// [lent-entries] in `entries.rs`), and 0.99x the rule since the online planner packs its
/// nodes (NOTE [packed-nodes] in `planner/packed.rs`; release, 2026-12-07). The first steps
/// at 25% and 10% are planned before their first op: 1.01x and 0.98x the rule.
#[test]
fn lstm_of_a_realistic_size_keeps_near_issue_34_s_heap_rule() {
    let real = Sizes(32, 64, 256);
    let shares = [(50, 0.7), (25, 0.55), (10, 0.4)];
    let outcomes = check_at(real, 64, Model::LstmLast, &shares);
    for ((percent, _), outcome) in shares.iter().zip(outcomes) {
        let Outcome {
            replays,
            over_rule,
            first_over_rule,
            ..
        } = outcome;
        assert!(
            over_rule <= 1.0,
            "{percent}% of K: the heap peaked at {over_rule:.2}x issue 34's rule"
        );
        // The first share's first step runs online (measured 0.99x); the others' are
        // planned ahead, with the planner's memory (measured 1.01x and 0.98x).
        let first_bound = 1.05;
        assert!(
            first_over_rule <= first_bound,
            "{percent}% of K: the first step's heap peaked at {first_over_rule:.2}x issue 34's \
             rule"
        );
        // At 10%: 112 a time step, about three forward passes of its 37 ops.
        assert!(
            replays <= 150 * 64,
            "{percent}% of K: {replays} replays a step for 64 steps"
        );
    }
}

/// A tenth of K as a graph's first budget: its first step runs online, before the step's
/// graph is known. Burn's `Lstm` writes its stacked output into an `empty` tensor of the
/// whole output's size (2 MiB here), which the output chain's first `slice_assign` held on its
/// edge for a replay: online, the forward pass held 4.2 MB under a budget of 1.6 MB (NOTE
/// [forward-overflow] in `session.rs`) and the step's heap peaked at 1.49x issue 34's rule.
/// That edge now keeps the tensor's recipe (NOTE [fill-constants] in `remat`'s `tensor.rs`):
/// the step holds at most the budget, and its heap peaked at 1.09x the rule (release,
/// 2026-12-06; its planned steps 0.98x). Here on 48 steps, a graph of its own that the
/// thread has not planned: 1.08x, and 1.02x since the online planner packs its nodes (NOTE
/// [packed-nodes] in `planner/packed.rs`), planned steps 0.94x (it failed before: 3.19 MB
/// held under 1.20 MB).
#[test]
fn lstm_s_first_step_online_at_a_tenth_of_k_holds_its_budget() {
    let real = Sizes(32, 64, 256);
    let (percent, bound) = (10, 0.4);
    let outcome = check_at(real, 48, Model::LstmLast, &[(percent, bound)])
        .pop()
        .expect("one share");
    assert!(
        outcome.first_held <= outcome.budget,
        "the first step held {} bytes under a budget of {}",
        outcome.first_held,
        outcome.budget
    );
    assert!(
        outcome.first_over_rule <= 1.08,
        "the first step's heap peaked at {:.2}x issue 34's rule",
        outcome.first_over_rule
    );
    assert!(
        outcome.over_rule <= 1.0,
        "{:.2}x the rule",
        outcome.over_rule
    );
}

/// NOTE [side-ops]: the Lstm's planned steps follow their plan through the output chain the
/// loss never reads, at half and a quarter of SaveAll's bytes.
#[test]
fn lstm_with_a_loss_on_its_last_state_follows_its_plan() {
    // NOTE [compaction-entries] in `session.rs`: 0.97x and 0.73x SaveAll's heap (debug, 32
    // steps; 1.04x and 0.80x before); 0.84x and 0.60x since NOTE [shared-constants] and
    // NOTE [session-ids] (0.84x and 0.59x on 128 steps in release).
    check(Model::LstmLast, &[(50, 0.9), (25, 0.65)]);
}

/// A graph's first step under a budget, and the first under a new budget, against its
/// planned steps and SaveAll. The very first runs online: its forward pass keeps the
/// session's online planner beside the kept values, and its backward pass plans from the
/// state that left. The first under a new budget of a graph the thread ran is planned before
/// its first op (NOTE [plan-ahead]), so the planner's memory is that step's heap too (NOTE
/// [planner-memory] in `planner/rotor/solve.rs`).
///
/// The very first step at half of K peaked at 1.39x SaveAll's heap on Burn's `Lstm` over 128
/// steps (4 KiB values, release) and at 1.04-1.17x on 32: the chain DP's tables and the
/// views it plans on were weighed beside every kept value although online eviction replayed
/// less (NOTE [online-first] in `planner/backward.rs`), the tables were laid out square
/// (NOTE [rev-triangle] in `rotor/level.rs`), and the online planner's lists doubled as they
/// grew and kept the forward pass's actions (NOTE [gentle-growth] in `planner/grow.rs`), and
/// at 0.93-1.07x on 128 while the online planner's nodes were a `Node` each (NOTE
/// [packed-nodes] in `planner/packed.rs`). Measured now: 0.93-0.97x on 32 steps (debug),
/// 0.92-0.99x on 128 (release); the planned steps 0.78-0.84x.
///
/// Asserted for Burn's `Lstm` and `Gru`, the loss on the last and on every output: at half
/// of K, the graph's first step peaks at most at SaveAll's heap and within 0.3 of its
/// planned steps; at a quarter, the first step (planned ahead from the half-of-K steps'
/// view) within 0.2 of them (measured: 0.14 at most); every step has SaveAll's gradients,
/// within the budget.
#[test]
fn a_new_budget_s_first_step_peaks_as_its_planned_steps_do() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (net, x) = lstm_and_input();
    for model in [
        Model::LstmLast,
        Model::LstmAll,
        Model::GruLast,
        Model::GruAll,
    ] {
        // A thread each: the thread's last graph is this one's (after another graph's
        // plan, a step departs: NOTE [departed-step]).
        std::thread::scope(|scope| {
            scope.spawn(|| first_step_against_planned(&net, &x, model));
        });
    }
}

/// [`a_new_budget_s_first_step_peaks_as_its_planned_steps_do`] for one model, on a thread
/// that ran no other.
fn first_step_against_planned(net: &Net, x: &Tensor<3>, model: Model) {
    one_measured_thread();
    step(net, model, x, Policy::SaveAll);
    let save_all = step(net, model, x, Policy::SaveAll);
    for percent in [50, 25] {
        let budget = save_all.kept as u64 * percent / 100;
        let runs =
            steps_like_save_all((net, x), model, budget, 3, &save_all, &format!("{model:?}"));
        let p = save_all.peak as f64;
        let (first, planned) = (runs[0].peak as f64 / p, runs[2].peak as f64 / p);
        eprintln!(
            "{model:?} at {percent}% of K: the first step peaked at {first:.2}x SaveAll's \
             heap, the third at {planned:.2}x ({} and {} replays)",
            runs[0].replays, runs[2].replays
        );
        // The graph's first step under any budget runs online (FIXME [tape-bytes]).
        let over = if percent == 50 { 0.3 } else { 0.2 };
        assert!(
            first <= planned + over,
            "{model:?} at {percent}% of K: the first step under the budget peaked at \
             {first:.2}x SaveAll's heap, its planned steps at {planned:.2}x"
        );
        assert!(
            first <= 1.0,
            "{model:?} at {percent}% of K: the first step under the budget peaked at \
             {first:.2}x SaveAll's heap"
        );
    }
}

/// NOTE [replay-plan]: the Gru's first step at half of SaveAll's bytes runs (the whole-step
/// plan replayed once from the lean state), and the next ones follow that plan.
#[test]
fn gru_with_a_loss_on_every_output_runs_from_its_first_step() {
    // 0.79x SaveAll's heap (debug, 32 steps; 0.80x on 128 in release).
    check(Model::GruAll, &[(50, 0.9)]);
}

/// NOTE [tuple-cuts]: below a sixth of SaveAll's bytes the Lstm's (h, c) hand-over made it
/// no chain, and its only plan was the lean schedule: at 12% of K on 32 steps 224,056
/// replays a step and a heap of 3.36x SaveAll's peak. As a chain of tuples (measured, 32
/// steps): 1,106, 1,698 and 2,290 replays at 15, 12 and 10%, the heap 1.08-1.12x, and
/// 0.72-0.75x since NOTE [followed-entries] (the budget now lowers the process's peak).
#[test]
fn lstm_below_a_sixth_of_its_bytes_is_planned_as_a_chain() {
    let shares = [15, 12, 10];
    // 0.45-0.47x SaveAll's heap (debug, 32 steps), 0.43-0.50x on 128 and 0.39-0.50x on
    // 1,024 (release).
    let replays = check(Model::LstmLast, &shares.map(|percent| (percent, 0.6)));
    for (percent, replays) in shares.iter().zip(replays) {
        assert!(
            replays <= 100 * steps() as u64,
            "{percent}% of K: {replays} replays a step for {} steps",
            steps()
        );
    }
}

/// Issue 34: the smallest budget of the Lstm does not grow with its length beyond its
/// input, charged once. Measured (the smallest budget `check_budget` names after a step
/// under `Budget(u64::MAX)`, batch 16, input 16): the input plus 28 KiB at 32 and 128 steps.
/// Each step's slice is held by the four gates and charged once, from the gate that records
/// it to the one that steps last (NOTE [shared-release] in `checkpoint/budget/pass.rs`; it
/// was twice the input plus 32 KiB while the view charged both). The step runs under that
/// budget with SaveAll's gradients, within it (by `stats`).
#[test]
fn lstm_s_smallest_budget_does_not_grow_with_its_length_beyond_its_input() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    one_measured_thread();
    let mut beyond = Vec::new();
    for seq in [steps(), 4 * steps()] {
        let (net, x) = lstm_and_input_of(SMALL, seq);
        step(&net, Model::LstmLast, &x, Policy::Budget(u64::MAX));
        let smallest = smallest_named(&format!("{seq} steps"));
        let input = (BATCH * seq * INPUT * 4) as u64;
        eprintln!("Lstm, {seq} steps: smallest budget {smallest} bytes, the input {input}");
        beyond.push(smallest.checked_sub(input).unwrap_or_else(|| {
            panic!("{seq} steps: the smallest budget {smallest} is below the input {input}")
        }));
        if seq == steps() {
            let save_all = step(&net, Model::LstmLast, &x, Policy::SaveAll);
            let run = step(&net, Model::LstmLast, &x, Policy::Budget(smallest));
            assert_like_save_all(&run, &save_all, smallest, &format!("{seq} steps"));
        }
    }
    assert_eq!(
        beyond[0], beyond[1],
        "the smallest budget beyond the input grew with the length"
    );
    assert!(
        beyond[0] <= 32 * 1024,
        "the smallest budget holds {} bytes beyond the input",
        beyond[0]
    );
}

/// FIXME [tape-bytes] in ARCHITECTURE.md: on 4 KiB values (issue 34's own `Lstm`: batch 16,
/// input 16, hidden 64, 128 steps) what a step holds beyond remat's held values once its
/// forward pass ends (the graph's records of its ops, the budget session's, the values'
/// metadata), which no schedule drops, is about as much as issue 34's rule (`b + 1.1 (P - K +
/// G) + 256 KiB`) allows at a tenth of K by itself. Under a budget it was 2.52 MB (debug, a
/// quarter of K, the third step) against SaveAll's 1.71 MB: each edge to a leaf or constant
/// held its own boxed handle, the session kept a hash map from id to index, and debug builds
/// boxed each evicted value's shape. Then 1.66 MB against SaveAll's 1.62 MB (NOTE
/// [shared-constants] in `remat`'s `graph/node.rs`, NOTE [session-ids] in
/// `budget/session.rs`); now 1.30 MB against 1.32 MB, rules keeping their shapes in half the
/// bytes and a node 136 bytes, not 160 (NOTE [compact-shapes] in `ops/common.rs`, NOTE
/// [op-names] in `graph/name.rs`), with the rule at 1.54 MB at a tenth of K and 2.31 MB at a
/// quarter.
/// Asserted: the budget step holds at most 1.05x SaveAll's bytes beyond its values.
#[test]
fn a_budget_step_holds_save_all_s_bookkeeping_on_4_kib_values() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    one_measured_thread();
    let seq = 128;
    let (net, x) = lstm_and_input_of(SMALL, seq);
    step(&net, Model::LstmLast, &x, Policy::SaveAll);
    let save_all = step(&net, Model::LstmLast, &x, Policy::SaveAll);
    let k = save_all.kept as f64;
    let slack = 1.1 * (save_all.peak - save_all.kept + save_all.grads_bytes) as f64 + 262_144.0;
    let budget = save_all.kept as u64 / 4;
    let runs = steps_like_save_all(
        (&net, &x),
        Model::LstmLast,
        budget,
        3,
        &save_all,
        "a quarter of K",
    );
    let own = runs[2].own as f64;
    let rule = |share: f64| share * k + slack;
    eprintln!(
        "Lstm {seq} steps: SaveAll K {} bytes ({} beyond its held values), peak {}; a quarter \
         of K, the third step: {own} bytes beyond the held values after the forward pass, \
         heap peak {}; issue 34's rule {:.0} at a tenth of K, {:.0} at a quarter",
        save_all.kept,
        save_all.own,
        save_all.peak,
        runs[2].peak,
        rule(0.1),
        rule(0.25)
    );
    assert!(
        own <= 1.05 * save_all.own as f64,
        "a step under a quarter of K holds {own} bytes beyond its held values after its \
         forward pass, SaveAll's {}",
        save_all.own
    );
}

/// The line a child process of [`five_processes_plan_the_same_lstm_steps`] prints.
const PLAN_LINE: &str = "remat-plan:";

/// Child of [`five_processes_plan_the_same_lstm_steps`]: the Lstm at a quarter of K, three
/// steps; prints K, and each step's replays and held bytes.
#[test]
#[ignore = "run by five_processes_plan_the_same_lstm_steps in child processes"]
fn lstm_plan_child() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    one_measured_thread();
    let (net, x) = lstm_and_input();
    step(&net, Model::LstmLast, &x, Policy::SaveAll);
    let save_all = step(&net, Model::LstmLast, &x, Policy::SaveAll);
    let budget = save_all.kept as u64 / 4;
    let runs: Vec<(u64, u64)> = (0..3)
        .map(|_| {
            let run = step(&net, Model::LstmLast, &x, Policy::Budget(budget));
            (run.replays, run.held)
        })
        .collect();
    println!("{PLAN_LINE} K {} steps {runs:?}", save_all.kept);
}

/// NOTE [estimated-costs] (issue 34): the same program under the same budget plans the same
/// schedule in every process. Five processes of the Lstm at a quarter of K agree on K, and
/// on each step's replays and held bytes (measured op times made them differ by up to 7%).
#[test]
fn five_processes_plan_the_same_lstm_steps() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let lines: Vec<String> = (0..5)
        .map(|k| {
            let out = std::process::Command::new(&exe)
                .args(["--exact", "lstm_plan_child", "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .output()
                .expect("a child test process runs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "child {k} failed: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            stdout
                .lines()
                .find_map(|l| l.split_once(PLAN_LINE).map(|(_, plan)| plan))
                .unwrap_or_else(|| panic!("child {k} printed no plan line: {stdout}"))
                .to_string()
        })
        .collect();
    eprintln!("five processes:{}", lines[0]);
    for (k, line) in lines.iter().enumerate() {
        assert_eq!(
            line, &lines[0],
            "process {k} planned differently from process 0"
        );
    }
}

/// Issue 34, item 5: Burn's `Lstm` and `Gru` with the loss on every output and `Gru` with the
/// loss on its last output, under half and a quarter of K, then under the smallest budget
/// `check_budget` names (measured on 32 steps: `Lstm` every output 316 KiB, 27% of the
/// keep-all bytes, 225,304 replays a step, the lean plan; `Gru` last output 184 KiB, 20%,
/// 136,440 replays, the lean plan; `Gru` every output 312 KiB, 30%, 2,389 replays). A tenth
/// of K is below both modules on every output: the stacked output is read by backward.
/// There the step stops with `TooSmall`, naming a budget that runs. It was below `Gru` on
/// its last output too, while the `empty` tensor Burn writes the stacked output into was
/// held all step for the first `slice_assign`'s replay (128 KiB at 32 steps): kept as its
/// recipe (NOTE [fill-constants] in `remat`'s `tensor.rs`), that `Gru`'s smallest budget is
/// 56 KiB and a tenth of K runs.
/// Shares of K with the bound on a planned step's heap over SaveAll's peak.
type Shares = Vec<(u64, f64)>;

#[test]
fn lstm_and_gru_on_every_output_and_gru_on_its_last_run_down_to_their_smallest_budget() {
    // Each model with its bounds at half, a quarter and (where it runs) a tenth of K.
    for (model, half, quarter, tenth) in [
        // Measured (debug, 32 steps; release, 128): 0.80x and 0.56x; 0.84x, 0.62x and 0.51x
        // (0.83x, 0.61x, 0.48x); 0.79x and 0.59x (0.80x, 0.56x).
        (Model::LstmAll, 0.9, 0.65, None),
        (Model::GruLast, 0.9, 0.7, Some(0.6)),
        (Model::GruAll, 0.9, 0.7, None),
    ] {
        // K and the smallest budget, to tell the shares that run from those below it, and
        // the smallest past the cliff (NOTE [budget-cliff] in `remat`'s `tradeoff.rs`).
        let (k, smallest, past) = {
            let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
            one_measured_thread();
            let (net, x) = lstm_and_input();
            // The first step measures the allocator's warm-up too.
            step(&net, model, &x, Policy::SaveAll);
            let save_all = step(&net, model, &x, Policy::SaveAll);
            step(&net, model, &x, Policy::Budget(u64::MAX));
            let past = remat::tradeoff()
                .expect("a step ran under a budget")
                .smallest_budget_within(4.0);
            (
                save_all.kept as u64,
                smallest_named(&format!("{model:?}")),
                past,
            )
        };
        let (runs, below): (Shares, Shares) =
            [(50, half), (25, quarter), (10, tenth.unwrap_or(0.0))]
                .into_iter()
                .partition(|&(percent, _)| k * percent / 100 >= smallest);
        assert_eq!(
            below.iter().any(|&(percent, _)| percent == 10),
            tenth.is_none(),
            "{model:?}: a tenth of K against the smallest budget ({smallest}): {runs:?} run"
        );
        let replays = check(model, &runs);
        // NOTE [pinned-heads]: the stacked output the loss reads is held until the loss
        // steps, the rest planned as a chain (the `Lstm` at a quarter of K replayed the lean
        // schedule, 225,304 ops a step on 32 steps: now 1,845).
        assert!(
            replays.iter().all(|&r| r <= 100 * steps() as u64),
            "{model:?}: {replays:?} replays a step at {runs:?}"
        );
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        one_measured_thread();
        let (net, x) = lstm_and_input();
        let save_all = step(&net, model, &x, Policy::SaveAll);
        // Past the cliff: the steps replay a few forward passes (the `Lstm` on every output
        // replayed 225,304 ops a step at its smallest budget on 32 steps).
        let runs = steps_like_save_all(
            (&net, &x),
            model,
            past,
            3,
            &save_all,
            &format!("{model:?} past the cliff"),
        );
        eprintln!(
            "{model:?} under {past} bytes (the smallest within 4 forward passes of replays; \
             the smallest {smallest}): {} replays a step, heap peak {:.2}x SaveAll's",
            runs[2].replays,
            runs[2].peak as f64 / save_all.peak as f64
        );
        // The cliff's width (measured on 32 and 128 steps: the `Lstm` on every output
        // 1.09x and 1.04x, the `Gru` on its last output 1.31x and 1.16x, 1.5x and 1.94x
        // before NOTE [unneeded-members] in `remat`'s `tuples.rs`; the `Gru` on every output
        // 1.0x and 1.02x). Four forward passes by the planner's costs are more by count,
        // cheap ops replayed the most: on 128 steps the `Gru` on its last output replays 307
        // ops a step per time step there (about 10 forward passes by count), the `Lstm` on
        // every output 200.
        assert!(
            past as f64 <= 1.4 * smallest as f64 && runs[2].replays <= 320 * steps() as u64,
            "{model:?} under {past} bytes (K {k}, the smallest {smallest}): {} replays a step",
            runs[2].replays
        );
        let mut budgets = vec![smallest];
        for (percent, _) in below {
            let budget = k * percent / 100;
            match remat::try_with_budget(budget, || step(&net, model, &x, Policy::Budget(budget))) {
                Err(remat::BudgetError::TooSmall {
                    min_budget_bytes, ..
                }) => budgets.push(min_budget_bytes),
                Ok(_) => panic!("{model:?}: {percent}% of K ran below the smallest budget"),
                Err(e) => panic!("{model:?}: {e}"),
            }
        }
        budgets.sort_unstable();
        budgets.dedup();
        let named = budgets.clone();
        for budget in budgets {
            let runs = steps_like_save_all(
                (&net, &x),
                model,
                budget,
                2,
                &save_all,
                &format!("{model:?}"),
            );
            eprintln!(
                "{model:?} under {budget} bytes (the smallest {smallest} and those the shares \
                 below it named: {named:?}, K {}): {} replays a step, heap peak {:.2}x \
                 SaveAll's",
                save_all.kept,
                runs[1].replays,
                runs[1].peak as f64 / save_all.peak as f64
            );
        }
    }
}

/// A thread that ran a module with the loss on its last output under budgets, then the same
/// module with the loss on every output: the second graph's first step under a budget
/// follows the first graph's plan through the forward pass (its ops are the same up to the
/// loss: NOTE [plan-ahead]) and departs from it at the loss.
///
/// - `nn::Gru`, 128 steps: its backward, resumed from the lean state, stopped at half of
///   its K (naming 2,719,744 bytes for a budget of 2,637,778), and so did every step after
///   it: the stopped step was not the graph the thread ran last, so the next one followed
///   the first graph's plan again. Fixed by NOTE [unneeded-replays] and NOTE
///   [head-rebuild] (the planner: its test on a recorded view is
///   `a_gru_s_stacked_output_is_rebuilt_from_the_lean_state_within_the_budget`) and NOTE
///   [stopped-view] (the engine).
/// - `nn::Lstm`: the second step held 1.25x the budget at half of K (3.82 MB under
///   3.06 MB on 128 steps): it followed a plan made of the first step's view, in which the
///   output chain, recorded as the other graph's free side ops, could not be rebuilt (NOTE
///   [side-view]), and ran online within the bound the first step had raised (NOTE
///   [forward-overflow], now lowered when a step ends).
///
/// Asserted: at half of K every step runs, each after the first within the budget (the
/// first may go over it in its forward pass: NOTE [forward-overflow]); at a quarter the
/// first may stop (NOTE [departed-step]) and the steps after it run; every step that runs
/// has SaveAll's gradients, and the last two follow one plan within the budget. Below the
/// smallest budget the step stops with `TooSmall`; under the budget it names, the `Gru`'s
/// next step follows its own graph's plan (as many replays as the step after it), and the
/// `Lstm`'s (its stopped view not planned, NOTE [side-view]) the step after that.
/// `REMAT_RNN_STEPS` sets the length (32 here, 128 in `scripts/long-tests.sh`).
#[test]
fn modules_on_every_output_after_their_last_output_run_from_their_first_steps() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    one_measured_thread();
    let (net, x) = lstm_and_input();
    for (first, then) in [
        (Model::GruLast, Model::GruAll),
        (Model::LstmLast, Model::LstmAll),
    ] {
        let last_k = step(&net, first, &x, Policy::SaveAll).kept as u64;
        for _ in 0..2 {
            step(&net, first, &x, Policy::Budget(last_k / 2));
        }
        let save_all = step(&net, then, &x, Policy::SaveAll);
        let k = save_all.kept as u64;
        let what = format!("{then:?} after {first:?}");
        for (budget, first_may_stop) in [(k / 2, false), (k * 35 / 100, true)] {
            let mut runs = Vec::new();
            match remat::try_with_budget(budget, || step(&net, then, &x, Policy::Budget(budget))) {
                Ok(run) => runs.push(run),
                // NOTE [departed-step]: the forward pass departed at the loss, having dropped
                // the stacked output the loss reads; rebuilt from the lean state it does not
                // fit.
                Err(remat::BudgetError::TooSmall { .. }) if first_may_stop => {}
                Err(e) => panic!("{what}, its first step: {e}"),
            }
            runs.extend((0..6).map(|_| step(&net, then, &x, Policy::Budget(budget))));
            let n = runs.len();
            for (j, run) in runs.iter().enumerate() {
                assert!(
                    run.grads == save_all.grads,
                    "{what} under {budget} bytes, step {j}: gradients differ from SaveAll's"
                );
                let counted = if first_may_stop { j + 2 >= n } else { j > 0 };
                assert!(
                    !counted || run.held <= budget,
                    "{what} under {budget} bytes, step {j}: held {} bytes",
                    run.held
                );
            }
            assert_eq!(
                runs[n - 2].replays,
                runs[n - 1].replays,
                "{what} under {budget} bytes"
            );
            // Back to the first graph, for the next budget's first step.
            step(&net, first, &x, Policy::Budget(last_k / 2));
        }
        let budget = k / 10;
        let named =
            match remat::try_with_budget(budget, || step(&net, then, &x, Policy::Budget(budget))) {
                Err(remat::BudgetError::TooSmall {
                    min_budget_bytes, ..
                }) => min_budget_bytes,
                other => panic!(
                    "{what} at a tenth of K: {:?}",
                    other.map(|run| run.replays).map_err(|e| e.to_string())
                ),
            };
        let runs: Vec<Step> = (0..3)
            .map(|_| step(&net, then, &x, Policy::Budget(named)))
            .collect();
        for run in &runs[1..] {
            assert_like_save_all(run, &save_all, named, &what);
        }
        let planned = if then == Model::GruAll { 0 } else { 1 };
        assert_eq!(
            runs[planned].replays, runs[2].replays,
            "{what}: step {planned} after the stop under the {named} bytes it named follows \
             its own graph's plan"
        );
        step(&net, first, &x, Policy::Budget(last_k / 2));
    }
}

/// NOTE [next-graph]: a loop that alternates two graphs starting with the same op (two
/// losses of one module trained in turn, or Burn's `Lstm` and `Gru` on one input) under one
/// budget. Each step followed the plan of the graph that ran last, the other one, and
/// departed from it at every step (128 steps, half of the larger K: the `Gru` on every
/// output replayed 8,082 ops a step where its own plan replays 508; the `Lstm` on every
/// output held 1.17x the budget at every step). Asserted, after four rounds: each graph's
/// step replays what it replays run alone under the budget, within the budget, with
/// SaveAll's gradients.
/// NOTE [plans-across-threads] in remat's `checkpoint/budget/state.rs`, on Burn's `Lstm`
/// (loss on the last state, a quarter of K): steps whose backward pass runs on a worker
/// thread carry out the plan their forward pass followed: the gradients of SaveAll, the
/// replays of the steps planned on one thread, and the heap of those steps (the allocator
/// counts both threads) plus what a new thread's first matrix product keeps for itself
/// (Flex's matmul kernel keeps a per-thread buffer, about 2 MB, whatever the engine: measured
/// here on a thread of its own) and 5%: the worker describes the pass's nodes and builds a
/// view before it finds the plan, where a step on one thread shares the plan's view (NOTE
/// [followed-view]); measured: 1.0x on 32 steps (debug), 1.036x on 128 (release).
#[test]
fn lstm_steps_with_their_backward_on_another_thread_follow_the_plan() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    one_measured_thread();
    let (net, x) = lstm_and_input();
    let device = x.device();
    let thread_buffer = std::thread::spawn(move || {
        heap::set_measured(true);
        let before = heap::live();
        let product = Tensor::<2>::ones([BATCH, HIDDEN], &device)
            .matmul(Tensor::<2>::ones([HIDDEN, 4 * HIDDEN], &device));
        drop(product);
        heap::live() - before
    })
    .join()
    .expect("the measuring thread panicked") as i64;
    let save_all = step(&net, Model::LstmLast, &x, Policy::SaveAll);
    let budget = save_all.kept as u64 / 4;
    // The third step under the budget (the first runs online, the next ones planned).
    let mut planned = step(&net, Model::LstmLast, &x, Policy::Budget(budget));
    for _ in 0..2 {
        planned = step(&net, Model::LstmLast, &x, Policy::Budget(budget));
    }
    assert!(planned.replays > 0, "a quarter of K replays");
    for k in 0..3 {
        let run = step_on(&net, Model::LstmLast, &x, Policy::Budget(budget), true);
        let what = format!("backward on another thread, step {k}");
        assert!(
            run.grads == save_all.grads,
            "{what}: gradients differ from SaveAll's"
        );
        assert_eq!(run.replays, planned.replays, "{what}");
        assert!(
            run.held <= budget,
            "{what}: held {} over {budget}",
            run.held
        );
        assert!(
            run.peak <= planned.peak + planned.peak / 20 + thread_buffer,
            "{what}: heap peak {} against the planned step's {} and a new thread's buffer \
             {thread_buffer}",
            run.peak,
            planned.peak
        );
    }
}

#[test]
fn two_graphs_run_in_turn_follow_their_own_plans() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    one_measured_thread();
    let (net, x) = lstm_and_input();
    for pair in [
        [Model::GruLast, Model::GruAll],
        [Model::LstmLast, Model::LstmAll],
        [Model::LstmAll, Model::GruAll],
    ] {
        let save_all = pair.map(|model| step(&net, model, &x, Policy::SaveAll));
        let budget = save_all[0].kept.max(save_all[1].kept) as u64 / 4;
        // Each run alone: what its own plan replays.
        let alone = pair.map(|model| {
            // The first may stop (NOTE [departed-step]).
            let r: Vec<u64> = (0..5)
                .filter_map(|_| {
                    remat::try_with_budget(budget, || step(&net, model, &x, Policy::Budget(budget)))
                        .ok()
                        .map(|run| run.replays)
                })
                .collect();
            assert!(r.len() >= 4, "{model:?} alone under {budget} bytes: {r:?}");
            r[r.len() - 1]
        });
        for round in 0..6 {
            for (k, &model) in pair.iter().enumerate() {
                let what = format!("{model:?} in turn with {:?}, round {round}", pair[1 - k]);
                let run = match remat::try_with_budget(budget, || {
                    step(&net, model, &x, Policy::Budget(budget))
                }) {
                    Ok(run) => run,
                    // NOTE [departed-step]: a step that follows the other graph's plan may
                    // stop, before the rounds assert.
                    Err(remat::BudgetError::TooSmall { .. }) if round < 4 => continue,
                    Err(e) => panic!("{what}: {e}"),
                };
                assert!(
                    run.grads == save_all[k].grads,
                    "{what}: gradients differ from SaveAll's"
                );
                if round >= 4 {
                    assert!(
                        run.replays <= alone[k] + alone[k] / 10,
                        "{what}: {} replays (alone: at most {})",
                        run.replays,
                        alone[k]
                    );
                    assert!(
                        run.held <= budget,
                        "{what}: held {} bytes over {budget}",
                        run.held
                    );
                }
            }
        }
    }
}
