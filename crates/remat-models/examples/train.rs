//! The main example: a small Burn transformer learns to sort digit sequences, on remat.
//!
//! ```sh
//! cargo run --release -p remat-models --example train
//! cargo run --release -p remat-models --example train -- --policy regions --steps 300
//! cargo run --release -p remat-models --example train -- --help
//! ```
//!
//! The model, the optimizer and the training loop are plain Burn (`burn::nn`, `burn::optim`);
//! the workspace's `[patch.crates-io] burn-autodiff` line makes `Device::autodiff()` run on
//! remat. The only remat calls choose what is kept for backward (`--policy`) and read the
//! statistics for the summary:
//!
//! - `save-all`: keep every value a backward step reads (Burn's `NoCheckpointing`);
//! - `balanced`: drop cheap element-wise outputs, replay them in backward (Burn's balanced
//!   checkpointing, the default);
//! - `recompute-all`: keep only what cannot be rebuilt;
//! - `regions`: one `remat::checkpoint` region per encoder layer, `SaveAll` elsewhere;
//! - `--budget MIB`: `remat::Policy::Budget`, at most that many MiB held for backward at
//!   any moment of a step, at the least recompute remat finds (`--tradeoff` prints the
//!   predicted extra compute for a ladder of budgets, to pick one).
//!
//! At the end the chosen policy and `SaveAll` run a few more steps each, alternately, on the
//! same weights and batch, and a table compares step time, memory and replays. Memory is
//! measured twice: by remat's own counters (bytes kept for backward) and by a counting
//! global allocator (every heap byte of the process, relative to the start of the step).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use indicatif::{ProgressBar, ProgressStyle};
use remat::{KeepReason, Policy};

/// Digits 0-9.
const VOCAB: usize = 10;
const SEQ: usize = 16;
const BATCH: usize = 32;
const D_MODEL: usize = 64;
const D_FF: usize = 128;
const HEADS: usize = 4;
const LAYERS: usize = 2;
const LEARNING_RATE: f64 = 2e-3;
const DEFAULT_STEPS: usize = 500;
/// Steps per policy in the final comparison.
const COMPARE_STEPS: usize = 12;

// ---------------------------------------------------------------------------------------
// A counting global allocator: live heap bytes and their peak since the last reset.

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; only counters are updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live heap bytes now; resets the peak to it.
fn heap_mark() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live
}

// ---------------------------------------------------------------------------------------
// Command line.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    SaveAll,
    Balanced,
    RecomputeAll,
    Regions,
    /// `remat::Policy::Budget`, in bytes.
    Budget(u64),
}

impl Mode {
    const ALL: [(&'static str, Mode); 4] = [
        ("save-all", Mode::SaveAll),
        ("balanced", Mode::Balanced),
        ("recompute-all", Mode::RecomputeAll),
        ("regions", Mode::Regions),
    ];

    fn parse(name: &str) -> Option<Mode> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
    }

    /// The process-wide policy; `Regions` adds its regions in the model's forward pass.
    fn policy(self) -> Policy {
        match self {
            Mode::SaveAll | Mode::Regions => Policy::SaveAll,
            Mode::Balanced => Policy::Balanced,
            Mode::RecomputeAll => Policy::RecomputeAll,
            Mode::Budget(bytes) => Policy::Budget(bytes),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Mode::Budget(bytes) = self {
            return write!(f, "budget {}", human(*bytes as f64));
        }
        let name = Self::ALL.iter().find(|(_, m)| m == self).map(|(n, _)| *n);
        f.write_str(name.unwrap_or("?"))
    }
}

struct Args {
    task: Task,
    mode: Mode,
    steps: usize,
    saved: bool,
    tradeoff: bool,
    /// Step the optimizer inside backward (`remat_optim::backward_and_step`).
    inside: bool,
}

fn usage() -> String {
    format!(
        "\
Trains a small transformer to sort (or reverse) sequences of digits, on remat.

usage: train [--policy save-all|balanced|recompute-all|regions] [--budget MIB] [--steps N]
             [--task sort|reverse] [--saved] [--tradeoff] [--step-in-backward]

  --policy P   what is kept for backward (default: balanced)
               save-all       keep everything backward reads (Burn's NoCheckpointing)
               balanced       replay cheap element-wise ops (Burn's balanced checkpointing)
               recompute-all  keep only what cannot be rebuilt
               regions        one remat::checkpoint region per encoder layer
  --budget MIB hold at most MIB mebibytes for backward at any moment (remat::Policy::Budget),
               at the least recompute; replaces --policy
  --steps N    training steps (default: {DEFAULT_STEPS})
  --task T     sort (default) or reverse the digits
  --saved      also list every value kept after one forward pass (remat::saved_values)
  --tradeoff   also print remat::tradeoff(): budgets against predicted extra compute, from one
               step run under an unbounded budget (to choose --budget without trial runs)
  --step-in-backward
               step Adam on each parameter as soon as its gradient is complete, inside
               backward (remat_optim::backward_and_step): the gradients are never all
               alive at once; the same trained weights as the separate step"
    )
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args {
        task: Task::Sort,
        mode: Mode::Balanced,
        steps: DEFAULT_STEPS,
        saved: false,
        tradeoff: false,
        inside: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg, None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--policy" => {
                let v = value("--policy")?;
                args.mode = Mode::parse(&v).ok_or_else(|| format!("unknown policy {v:?}"))?;
            }
            "--steps" => {
                let v = value("--steps")?;
                args.steps = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("--steps: expected a positive number, got {v:?}"))?;
            }
            "--task" => {
                args.task = match value("--task")?.as_str() {
                    "sort" => Task::Sort,
                    "reverse" => Task::Reverse,
                    other => return Err(format!("unknown task {other:?}")),
                }
            }
            "--budget" => {
                let v = value("--budget")?;
                let mib: f64 = v
                    .parse()
                    .ok()
                    .filter(|m: &f64| m.is_finite() && *m > 0.0)
                    .ok_or_else(|| {
                        format!("--budget: expected a positive number of MiB, got {v:?}")
                    })?;
                args.mode = Mode::Budget((mib * 1024.0 * 1024.0) as u64);
            }
            "--saved" => args.saved = true,
            "--tradeoff" => args.tradeoff = true,
            "--step-in-backward" => args.inside = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(args))
}

// ---------------------------------------------------------------------------------------
// The task: sort (or reverse) a sequence of random digits.

/// A small xorshift generator: the data never touches the backend's RNG.
struct Rng(u64);

impl Rng {
    fn digit(&mut self) -> i64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 32) % VOCAB as u64) as i64
    }
}

/// What the model learns to output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Task {
    Reverse,
    Sort,
}

impl Task {
    fn target(self, row: &[i64]) -> Vec<i64> {
        let mut out = row.to_vec();
        match self {
            Task::Reverse => out.reverse(),
            Task::Sort => out.sort_unstable(),
        }
        out
    }

    fn verb(self) -> &'static str {
        match self {
            Task::Reverse => "Reversing",
            Task::Sort => "Sorting",
        }
    }
}

struct Batch {
    inputs: Tensor<2, Int>,
    targets: Tensor<1, Int>,
    expected: Vec<i64>,
}

fn batch(task: Task, rng: &mut Rng, device: &Device) -> Batch {
    let inputs: Vec<i64> = (0..BATCH * SEQ).map(|_| rng.digit()).collect();
    let expected: Vec<i64> = inputs
        .chunks(SEQ)
        .flat_map(|row| task.target(row))
        .collect();
    Batch {
        inputs: Tensor::from_data(TensorData::new(inputs, [BATCH, SEQ]), device),
        targets: Tensor::from_data(TensorData::new(expected.clone(), [BATCH * SEQ]), device),
        expected,
    }
}

// ---------------------------------------------------------------------------------------
// The model: plain burn::nn.

#[derive(Module, Debug)]
struct Reverser {
    tokens: Embedding,
    positions: Embedding,
    encoder: TransformerEncoder,
    head: Linear,
}

impl Reverser {
    fn new(device: &Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(VOCAB, D_MODEL).init(device),
            positions: EmbeddingConfig::new(SEQ, D_MODEL).init(device),
            encoder: TransformerEncoderConfig::new(D_MODEL, D_FF, HEADS, LAYERS)
                .with_norm_first(true)
                .with_dropout(0.0)
                .init(device),
            head: LinearConfig::new(D_MODEL, VOCAB).init(device),
        }
    }

    /// `[batch, SEQ]` digits -> `[batch, SEQ, VOCAB]` logits.
    fn forward(&self, inputs: Tensor<2, Int>, regions: bool) -> Tensor<3> {
        let [batch, seq] = inputs.dims();
        let device = inputs.device();
        let positions = Tensor::<1, Int>::arange(0..seq as i64, &device)
            .reshape([1, seq])
            .repeat_dim(0, batch);
        let mut x = self.tokens.forward(inputs) + self.positions.forward(positions);
        for layer in &self.encoder.layers {
            x = if regions {
                remat::checkpoint(|| layer.forward(x, None, None))
            } else {
                layer.forward(x, None, None)
            };
        }
        self.head.forward(x)
    }
}

// ---------------------------------------------------------------------------------------
// One step, measured.

#[derive(Clone, Debug, Default)]
struct StepReport {
    loss: f32,
    correct: usize,
    /// Forward + loss + backward.
    time: Duration,
    /// Peak live heap bytes during the step, above the start of the step.
    heap_peak: usize,
    /// Live heap bytes after forward + loss, above the start of the step.
    heap_after_forward: usize,
    /// Bytes remat keeps for backward after forward + loss.
    kept_after_forward: u64,
    /// Peak of the bytes remat keeps, during the step.
    kept_peak: u64,
    replays: u64,
    /// Kept bytes after forward by op, when asked for.
    kept_by_op: Option<BTreeMap<&'static str, (usize, u64)>>,
}

/// One step of `model` under `mode`: returns its report, the model, and its gradients; with
/// `inside`, the optimizer is stepped inside backward (`remat_optim::backward_and_step`) and
/// the model returned is the updated one, with no gradients.
fn step(
    model: Reverser,
    loss_fn: &CrossEntropyLoss,
    batch: &Batch,
    mode: Mode,
    by_op: bool,
    inside: Option<&mut ModuleOptimizer>,
) -> (StepReport, Reverser, Option<GradientsParams>) {
    remat::set_policy(mode.policy());
    remat::reset_stats();
    let base = heap_mark();
    let start = Instant::now();

    let logits = model.forward(batch.inputs.clone(), mode == Mode::Regions);
    let loss = loss_fn.forward(
        logits.clone().reshape([BATCH * SEQ, VOCAB]),
        batch.targets.clone(),
    );

    let mut elapsed = start.elapsed();
    let kept = remat::stats();
    let heap_after_forward = LIVE.load(Ordering::Relaxed).saturating_sub(base);
    let kept_by_op = by_op.then(|| {
        let mut ops = BTreeMap::new();
        for v in remat::saved_values().0 {
            if v.reason == KeepReason::Leaf {
                continue;
            }
            let entry: &mut (usize, u64) = ops.entry(v.op).or_default();
            entry.0 += 1;
            entry.1 += v.bytes;
        }
        ops
    });
    // Reading predictions and the loss value is not part of the timed step.
    let predicted = logits
        .detach()
        .argmax(2)
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap_or_default();
    let correct = predicted
        .iter()
        .zip(&batch.expected)
        .filter(|(p, e)| p == e)
        .count();
    let loss_value = loss.clone().into_scalar::<f32>();

    let resumed = Instant::now();
    let (model, grads) = match inside {
        Some(optim) => (
            remat_optim::backward_and_step(&loss, model, optim, LEARNING_RATE),
            None,
        ),
        None => {
            let grads = loss.backward();
            let grads = GradientsParams::from_grads(grads, &model);
            (model, Some(grads))
        }
    };
    elapsed += resumed.elapsed();
    let heap_peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let after = remat::stats();

    let report = StepReport {
        loss: loss_value,
        correct,
        time: elapsed,
        heap_peak,
        heap_after_forward,
        kept_after_forward: kept.live_bytes,
        kept_peak: after.peak_bytes,
        replays: after.replays,
        kept_by_op,
    };
    (report, model, grads)
}

// ---------------------------------------------------------------------------------------
// Output helpers.

/// Bytes in binary units, as remat's own reports print them.
fn human(bytes: f64) -> String {
    remat::stats::format_bytes(bytes.max(0.0) as u64)
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn median<T: Copy + Ord>(values: &[T]) -> T {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted[sorted.len() / 2]
}

/// Median figures over several measured steps.
struct Summary {
    time: Duration,
    heap_peak: usize,
    heap_after_forward: usize,
    kept_after_forward: u64,
    kept_peak: u64,
    replays: u64,
}

impl Summary {
    fn of(reports: &[StepReport]) -> Self {
        let pick = |f: fn(&StepReport) -> u64| median(&reports.iter().map(f).collect::<Vec<_>>());
        Summary {
            time: median(&reports.iter().map(|r| r.time).collect::<Vec<_>>()),
            heap_peak: pick(|r| r.heap_peak as u64) as usize,
            heap_after_forward: pick(|r| r.heap_after_forward as u64) as usize,
            kept_after_forward: pick(|r| r.kept_after_forward),
            kept_peak: pick(|r| r.kept_peak),
            replays: pick(|r| r.replays),
        }
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".to_string()
    }
}

fn print_table(mode: Mode, ours: &Summary, base: &Summary) {
    let rows: [(&str, String, String, String); 6] = [
        (
            "step time (median)",
            millis(ours.time),
            millis(base.time),
            ratio(ours.time.as_secs_f64(), base.time.as_secs_f64()),
        ),
        (
            "peak heap during step",
            human(ours.heap_peak as f64),
            human(base.heap_peak as f64),
            ratio(ours.heap_peak as f64, base.heap_peak as f64),
        ),
        (
            "heap held after forward",
            human(ours.heap_after_forward as f64),
            human(base.heap_after_forward as f64),
            ratio(
                ours.heap_after_forward as f64,
                base.heap_after_forward as f64,
            ),
        ),
        (
            "kept after forward",
            human(ours.kept_after_forward as f64),
            human(base.kept_after_forward as f64),
            ratio(
                ours.kept_after_forward as f64,
                base.kept_after_forward as f64,
            ),
        ),
        (
            "peak kept during step",
            human(ours.kept_peak as f64),
            human(base.kept_peak as f64),
            ratio(ours.kept_peak as f64, base.kept_peak as f64),
        ),
        (
            "replays per step",
            ours.replays.to_string(),
            base.replays.to_string(),
            String::new(),
        ),
    ];
    let ours_name = mode.to_string();
    let width = rows
        .iter()
        .map(|r| r.1.len())
        .max()
        .unwrap_or(0)
        .max(ours_name.len());
    println!(
        "  {:<24} {:>width$}  {:>10}  {:>6}",
        "", ours_name, "save-all", "ratio"
    );
    for (name, a, b, r) in rows {
        println!("  {name:<24} {a:>width$}  {b:>10}  {r:>6}");
    }
    println!(
        "\n  heap: the counting global allocator, every byte of the process, relative to the \
         start of the step\n  kept: what remat holds for backward (remat::stats; a view is \
         counted at its full size)"
    );
}

// ---------------------------------------------------------------------------------------

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{}", usage());
            return ExitCode::from(2);
        }
    };

    // Flex (CPU) under Burn's autodiff, here remat. Each step sets its policy with
    // `remat::set_policy` (any strategy follows it); `gradient_checkpointing()` only makes
    // Balanced the default when none is set.
    let device = Device::flex().autodiff().gradient_checkpointing();
    device.seed(42);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);

    let mut model = Reverser::new(&device);
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let mut optim = AdamConfig::new().init();
    println!(
        "{} {SEQ}-digit sequences: transformer encoder ({LAYERS} layers, d_model {D_MODEL}, \
         {HEADS} heads), {} parameters, batch {BATCH}, Adam lr {LEARNING_RATE}",
        args.task.verb(),
        model.num_params()
    );
    println!(
        "policy: {}, {} steps, on Flex through remat\n",
        args.mode, args.steps
    );

    let bar = ProgressBar::new(args.steps as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner:.green} [{elapsed_precise}] {bar:32.cyan/blue} {pos:>4}/{len} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let every = (args.steps / 5).max(1);
    let mut smooth: Option<(f32, f32)> = None;
    let mut first: Option<(f32, f32)> = None;
    let mut times = Vec::with_capacity(args.steps);
    let started = Instant::now();
    for i in 1..=args.steps {
        let data = batch(args.task, &mut rng, &device);
        let inside = args.inside.then_some(&mut optim);
        let (report, stepped, grads) = step(model, &loss_fn, &data, args.mode, false, inside);
        model = match grads {
            Some(grads) => optim.step(LEARNING_RATE, stepped, grads),
            None => stepped,
        };
        times.push(report.time);

        let accuracy = report.correct as f32 / (BATCH * SEQ) as f32;
        first.get_or_insert((report.loss, accuracy));
        let (loss, acc) = match smooth {
            None => (report.loss, accuracy),
            Some((l, a)) => (0.9 * l + 0.1 * report.loss, 0.9 * a + 0.1 * accuracy),
        };
        smooth = Some((loss, acc));
        bar.set_message(format!("loss {loss:.3}  acc {:>5.1}%", acc * 100.0));
        bar.inc(1);
        if i % every == 0 || i == 1 {
            let line = format!(
                "step {i:>5}  loss {loss:.4}  token accuracy {:>5.1}%",
                acc * 100.0
            );
            // A hidden bar (output not a terminal) prints nothing, not even its `println`.
            if bar.is_hidden() {
                println!("{line}");
            } else {
                bar.println(line);
            }
        }
    }
    bar.finish_and_clear();
    let training = started.elapsed();
    let (first_loss, first_acc) = first.unwrap_or_default();
    let (last_loss, last_acc) = smooth.unwrap_or_default();
    println!(
        "\ntrained {} steps in {:.1?} (median step {}): loss {first_loss:.3} -> {last_loss:.3}, \
         token accuracy {:.1}% -> {:.1}%",
        args.steps,
        training,
        millis(median(&times)),
        first_acc * 100.0,
        last_acc * 100.0
    );

    // The comparison: the chosen policy and SaveAll alternately, same weights, same batch,
    // gradients discarded. The first pair warms up.
    println!(
        "\nmeasuring {} vs save-all ({COMPARE_STEPS} steps each, alternating)...",
        args.mode
    );
    let data = batch(args.task, &mut rng, &device);
    let mut ours = Vec::new();
    let mut base = Vec::new();
    let mut by_op = None;
    let mut measured = model.clone();
    let mut compare_optim = optim.clone();
    for i in 0..=COMPARE_STEPS {
        // With --step-in-backward the chosen policy's steps train on (a copy of the model,
        // their optimizer a copy of the trained one's): their memory includes the update.
        let (a, next, _) = step(
            measured,
            &loss_fn,
            &data,
            args.mode,
            i == 0,
            args.inside.then_some(&mut compare_optim),
        );
        measured = next;
        let (b, next, _) = step(model, &loss_fn, &data, Mode::SaveAll, false, None);
        model = next;
        if i == 0 {
            by_op = a.kept_by_op;
        } else {
            ours.push(a);
            base.push(b);
        }
    }
    remat::reset_policy();
    println!("\nper step (forward + loss + backward, batch {BATCH}, medians):\n");
    print_table(args.mode, &Summary::of(&ours), &Summary::of(&base));

    if let Some(by_op) = by_op {
        let mut rows: Vec<_> = by_op.into_iter().collect();
        rows.sort_by_key(|(_, (_, bytes))| std::cmp::Reverse(*bytes));
        let total: u64 = rows.iter().map(|(_, (_, b))| b).sum();
        println!(
            "\nkept after forward under {} (remat::saved_values, by op, leaves aside):",
            args.mode
        );
        if rows.is_empty() {
            println!("  nothing: every value backward reads is rebuilt from the leaves");
        }
        for (op, (count, bytes)) in rows.iter().take(6) {
            println!("  {op:<20} {count:>4} values  {:>10}", human(*bytes as f64));
        }
        if rows.len() > 6 {
            let rest: u64 = rows.iter().skip(6).map(|(_, (_, b))| b).sum();
            println!(
                "  {:<20} {:>4} ops     {:>10}",
                "others",
                rows.len() - 6,
                human(rest as f64)
            );
        }
        println!("  {:<20} {:>11}  {:>10}", "total", "", human(total as f64));
    }

    if args.tradeoff {
        let (_, next, _) = step(model, &loss_fn, &data, Mode::Budget(u64::MAX), false, None);
        model = next;
        remat::reset_policy();
        match remat::tradeoff() {
            Some(report) => {
                println!(
                    "\nbudget trade-off predicted from one step (pass one to --budget in MiB):\n{report}"
                );
                // NOTE [budget-cliff]: near the smallest budget a plan replays many times.
                let past = report.smallest_budget_within(4.0);
                println!(
                    "the smallest budget that replays at most 4 forward passes: {:.2} MiB",
                    past as f64 / (1u64 << 20) as f64
                );
            }
            None => println!("\nno step ran under a budget: no trade-off to report"),
        }
    }

    if args.saved {
        remat::set_policy(args.mode.policy());
        let logits = model.forward(data.inputs.clone(), args.mode == Mode::Regions);
        println!(
            "\nevery value kept after one forward pass under {}:",
            args.mode
        );
        println!("{}", remat::saved_values());
        drop(logits);
        remat::reset_policy();
    }
    ExitCode::SUCCESS
}
