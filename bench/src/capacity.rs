//! The capacity table (issue 36): the largest batch each way of training fits within a fixed
//! memory cap, and the whole step's peak (forward, backward and an Adam update) at the model's
//! default batch.
//!
//! Every trial runs in a child process of this binary (`--capacity-child`), alone, so that no
//! other trial's heap or allocator state counts. Under a cap, the child's counting allocator
//! refuses any allocation that would take the process's live heap past it (`alloc::set_cap`):
//! Rust then aborts the child, so a trial either trains all its steps or fails. Nothing is
//! estimated. The cap counts the whole process: weights, input, the optimizer's state, the
//! graph, gradients and every temporary.
//!
//! The update is Adam, written on the inner backend's ops (Burn's `Adam` without weight
//! decay): moments `m`, `v` per parameter, `w -= lr * m_hat / (sqrt(v_hat) + eps)`. Two ways
//! to run it:
//! - **separate**: `backward` returns every gradient, then each parameter is updated (the
//!   usual `optim.step` after `loss.backward()`);
//! - **in backward** (remat only): each parameter is updated, and its gradient dropped, as
//!   soon as its gradient is complete (`remat::with_complete_leaves`, what `remat-optim`'s
//!   `backward_and_step` is built on).
//!
//! Both give the same weights bit for bit; each trial reports a hash of its final weights and
//! the report checks that every remat way agrees.

use std::cell::RefCell;
use std::path::Path;
use std::process::Command;
use std::rc::Rc;
use std::time::Instant;

use burn_autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend};
use remat::Policy;
use serde::{Deserialize, Serialize};

use crate::alloc;
use crate::engine::{FNV_START, fnv1a};
use crate::models::{self, Config, Hook, Spec};
use crate::peak_trace;
use crate::report::median;

/// How a trial trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Way {
    /// `burn_autodiff::Autodiff<B>` (NoCheckpointing), separate update.
    BurnNone,
    /// `burn_autodiff::Autodiff<B, BalancedCheckpointing>`, separate update.
    BurnBalanced,
    /// remat under `SaveAll`, separate update.
    SaveAll,
    /// remat under `SaveAll`, the update inside backward.
    SaveAllInBackward,
    /// remat under `Budget(bytes)`, separate update.
    Budget,
    /// remat under `Budget(bytes)`, the update inside backward.
    BudgetInBackward,
}

impl Way {
    fn label(self, percent: Option<u32>) -> String {
        let p = percent.map_or(String::new(), |p| format!(" {p}%"));
        match self {
            Way::BurnNone => "burn NoCheckpointing".into(),
            Way::BurnBalanced => "burn BalancedCheckpointing".into(),
            Way::SaveAll => "remat SaveAll".into(),
            Way::SaveAllInBackward => "remat SaveAll, step in backward".into(),
            Way::Budget => format!("remat Budget{p}"),
            Way::BudgetInBackward => format!("remat Budget{p}, step in backward"),
        }
    }

    fn in_backward(self) -> bool {
        matches!(self, Way::SaveAllInBackward | Way::BudgetInBackward)
    }

    fn is_remat(self) -> bool {
        !matches!(self, Way::BurnNone | Way::BurnBalanced)
    }
}

/// One child process's work.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Trial {
    /// `flex` or `ndarray`.
    pub backend: String,
    /// The model at the trial's batch.
    pub config: Config,
    /// How it trains.
    pub way: Way,
    /// The budget of the `Budget` ways (bytes).
    pub budget_bytes: Option<u64>,
    /// Steps to train.
    pub steps: usize,
    /// The process's heap cap (bytes); `None`: no cap.
    pub cap_bytes: Option<u64>,
    /// After the steps, one `Budget(u64::MAX)` step and `remat::tradeoff()`'s smallest budget
    /// (remat ways).
    pub find_smallest: bool,
}

/// What a child that trained all its steps reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// Each step's time (forward, loss, backward and update), ns.
    pub step_ns: Vec<u64>,
    /// Each step's heap peak above the level before it.
    pub step_peaks: Vec<u64>,
    /// The same peak over the forward pass and the loss alone (the step's is the larger of
    /// it and backward's with the update).
    #[serde(default)]
    pub forward_peaks: Vec<u64>,
    /// The process's heap peak over the whole trial (what the cap bounds).
    pub process_peak: u64,
    /// remat's held-bytes peak of each step (`stats().peak_bytes`; remat ways).
    pub held_peaks: Vec<u64>,
    /// remat's replays of each step.
    pub replays: Vec<u64>,
    /// FNV-1a of the final weights' bits.
    pub weights_hash: String,
    /// `tradeoff().min_budget_bytes` with `find_smallest`.
    pub smallest: Option<u64>,
}

/// The first steps plan online and time ops; the steady state starts at the third step.
pub const STEADY_FROM: usize = 2;

impl Outcome {
    fn steady<T: Copy>(values: &[T]) -> &[T] {
        if values.len() > STEADY_FROM {
            &values[STEADY_FROM..]
        } else {
            values
        }
    }

    /// The median steady-state step time, ns.
    pub fn step_ns(&self) -> f64 {
        median(
            Self::steady(&self.step_ns)
                .iter()
                .map(|&v| v as f64)
                .collect(),
        )
    }

    /// The largest steady-state step peak.
    pub fn step_peak(&self) -> u64 {
        Self::steady(&self.step_peaks)
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// The largest steady-state forward peak.
    pub fn forward_peak(&self) -> u64 {
        Self::steady(&self.forward_peaks)
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

// --- The child ------------------------------------------------------------------------------

/// The child's entry: runs the trial in `json` and prints its outcome as one line
/// `CAPACITY <json>` on stdout.
pub fn child(json: &str) -> Result<(), String> {
    let trial: Trial = serde_json::from_str(json).map_err(|e| format!("trial: {e}"))?;
    let outcome = match trial.backend.as_str() {
        "flex" => run_trial::<burn_flex::Flex>(&trial),
        "ndarray" => run_trial::<crate::NdArray>(&trial),
        other => {
            return Err(format!(
                "--capacity runs on host backends only, not {other}"
            ));
        }
    };
    let line = serde_json::to_string(&outcome).map_err(|e| e.to_string())?;
    println!("CAPACITY {line}");
    Ok(())
}

fn run_trial<I: Backend>(trial: &Trial) -> Outcome {
    if let Some(cap) = trial.cap_bytes {
        alloc::set_cap(cap);
    }
    match trial.way {
        Way::BurnNone => train::<burn_autodiff::Autodiff<I>>(trial, None),
        Way::BurnBalanced => {
            train::<burn_autodiff::Autodiff<I, BalancedCheckpointing>>(trial, None)
        }
        _ => {
            let policy = match trial.budget_bytes {
                Some(bytes) => Policy::Budget(bytes),
                None => Policy::SaveAll,
            };
            let mut outcome = train::<remat::Autodiff<I>>(trial, Some(policy));
            if trial.find_smallest {
                let mut probe = trial.clone();
                probe.steps = 1;
                probe.budget_bytes = Some(u64::MAX);
                train::<remat::Autodiff<I>>(&probe, Some(Policy::Budget(u64::MAX)));
                outcome.smallest = remat::tradeoff().map(|t| t.min_budget_bytes);
            }
            outcome
        }
    }
}

/// Adam on the inner backend, one state per parameter.
struct Adam<I: Backend> {
    moments: Vec<Option<(FloatTensor<I>, FloatTensor<I>)>>,
    /// Steps taken (the bias corrections' exponent).
    t: i32,
}

const LR: f32 = 1e-4;
const BETA1: f32 = 0.9;
const BETA2: f32 = 0.999;
const EPS: f32 = 1e-8;

impl<I: Backend> Adam<I> {
    fn new(params: usize) -> Self {
        Adam {
            moments: (0..params).map(|_| None).collect(),
            t: 0,
        }
    }

    /// The updated weight `w` of parameter `k` from its gradient `g`.
    fn update(&mut self, k: usize, w: FloatTensor<I>, g: FloatTensor<I>) -> FloatTensor<I> {
        let (m, v) = match self.moments[k].take() {
            Some((m, v)) => (
                I::float_add(
                    I::float_mul_scalar(m, BETA1.into()),
                    I::float_mul_scalar(g.clone(), (1.0 - BETA1).into()),
                ),
                I::float_add(
                    I::float_mul_scalar(v, BETA2.into()),
                    I::float_mul_scalar(I::float_mul(g.clone(), g), (1.0 - BETA2).into()),
                ),
            ),
            None => (
                I::float_mul_scalar(g.clone(), (1.0 - BETA1).into()),
                I::float_mul_scalar(I::float_mul(g.clone(), g), (1.0 - BETA2).into()),
            ),
        };
        let m_hat = I::float_mul_scalar(m.clone(), (1.0 / (1.0 - BETA1.powi(self.t))).into());
        let v_hat = I::float_mul_scalar(v.clone(), (1.0 / (1.0 - BETA2.powi(self.t))).into());
        let denom = I::float_add_scalar(I::float_sqrt(v_hat), EPS.into());
        let delta = I::float_mul_scalar(I::float_div(m_hat, denom), LR.into());
        self.moments[k] = Some((m, v));
        I::float_sub(w, delta)
    }
}

/// A parameter with its new values: a fresh leaf that requires a gradient.
fn leaf<B: AutodiffBackend>(values: FloatTensor<B::InnerBackend>) -> FloatTensor<B> {
    B::float_set_require_grad(B::from_inner(values), true)
}

fn train<B: AutodiffBackend>(trial: &Trial, policy: Option<Policy>) -> Outcome {
    let device = B::Device::default();
    let (mut weights, input, config) = {
        let spec = Spec::new(trial.config.clone());
        let weights: Vec<FloatTensor<B>> = spec
            .params
            .iter()
            .map(|p| leaf::<B>(B::InnerBackend::float_from_data(p.data(), &device)))
            .collect();
        let input = B::float_from_data(spec.input.data(), &device);
        (weights, input, spec.config)
        // The spec's host copies are dropped here.
    };
    let mut adam = Adam::<B::InnerBackend>::new(weights.len());
    let mut outcome = Outcome::default();
    for k in 0..trial.steps {
        remat::reset_stats();
        // The last step's peak, traced if asked (`peak_trace`).
        let traced = k + 1 == trial.steps && peak_trace::wanted();
        if traced {
            peak_trace::start();
        }
        let base = alloc::live();
        alloc::reset_peak();
        let start = Instant::now();
        adam.t += 1;
        let forward_peak = std::cell::Cell::new(0);
        let step = |weights: Vec<FloatTensor<B>>, adam: Adam<B::InnerBackend>| {
            let hook = Hook::new(false, start, base);
            let out = models::forward::<B>(&config, &weights, input.clone(), &hook);
            let loss = B::float_mean(B::float_mul(out.clone(), out));
            forward_peak.set(alloc::peak().saturating_sub(base));
            if trial.way.in_backward() {
                step_in_backward::<B>(loss, weights, adam)
            } else {
                step_after_backward::<B>(loss, weights, adam)
            }
        };
        let (next, next_adam) = match policy.clone() {
            Some(policy) => remat::with_policy(policy, || step(weights, adam)),
            None => step(weights, adam),
        };
        (weights, adam) = (next, next_adam);
        outcome.step_ns.push(start.elapsed().as_nanos() as u64);
        if traced {
            peak_trace::stop_and_print(base);
        }
        outcome.step_peaks.push(alloc::peak().saturating_sub(base));
        outcome.forward_peaks.push(forward_peak.get());
        if trial.way.is_remat() {
            let stats = remat::stats();
            outcome.held_peaks.push(stats.peak_bytes);
            outcome.replays.push(stats.replays);
        }
    }
    outcome.process_peak = alloc::process_peak();
    outcome.weights_hash = weights_hash::<B>(&weights);
    outcome
}

/// `backward`, then every parameter's update, each gradient dropped after its update.
fn step_after_backward<B: AutodiffBackend>(
    loss: FloatTensor<B>,
    weights: Vec<FloatTensor<B>>,
    mut adam: Adam<B::InnerBackend>,
) -> (Vec<FloatTensor<B>>, Adam<B::InnerBackend>) {
    let mut grads = B::backward(loss);
    let weights = weights
        .into_iter()
        .enumerate()
        .map(|(k, w)| {
            let g = B::grad_remove(&w, &mut grads)
                .unwrap_or_else(|| panic!("capacity: parameter {k} got no gradient"));
            leaf::<B>(adam.update(k, B::inner(w), g))
        })
        .collect();
    (weights, adam)
}

/// What the update inside backward shares with its callback.
struct InBackward<B: AutodiffBackend> {
    weights: Vec<Option<FloatTensor<B>>>,
    adam: Adam<B::InnerBackend>,
    /// Parameters not updated yet, in forward order (the last complete first).
    pending: Vec<usize>,
    holder: B::Gradients,
}

/// `backward` with each parameter updated, and its gradient dropped, as soon as the gradient
/// is complete (remat only: `remat::with_complete_leaves`).
fn step_in_backward<B: AutodiffBackend>(
    loss: FloatTensor<B>,
    weights: Vec<FloatTensor<B>>,
    adam: Adam<B::InnerBackend>,
) -> (Vec<FloatTensor<B>>, Adam<B::InnerBackend>) {
    // A `Gradients` to read the pending gradient through: the backward pass of a lone leaf.
    let device = B::Device::default();
    let holder = B::backward(B::float_set_require_grad(
        B::float_from_data(burn_backend::TensorData::new(vec![0f32], vec![1]), &device),
        true,
    ));
    let shared = Rc::new(RefCell::new(InBackward::<B> {
        pending: (0..weights.len()).collect(),
        weights: weights.into_iter().map(Some).collect(),
        adam,
        holder,
    }));
    let state = shared.clone();
    let on_leaf = move || {
        let mut state = state.borrow_mut();
        let state = &mut *state;
        // The parameter whose gradient is pending; none for a leaf of no parameter.
        let found = state.pending.iter().enumerate().rev().find_map(|(at, &k)| {
            let w = state.weights[k].as_ref().expect("a pending parameter");
            B::grad_remove(w, &mut state.holder).map(|g| (at, g))
        });
        let Some((at, g)) = found else {
            return;
        };
        let k = state.pending.remove(at);
        let w = state.weights[k].take().expect("a pending parameter");
        state.weights[k] = Some(leaf::<B>(state.adam.update(k, B::inner(w), g)));
    };
    let rest = remat::with_complete_leaves(on_leaf, || B::backward(loss));
    drop(rest);
    let state = Rc::try_unwrap(shared)
        .unwrap_or_else(|_| panic!("capacity: the callback outlived the pass"))
        .into_inner();
    assert!(
        state.pending.is_empty(),
        "capacity: {} parameters got no complete gradient",
        state.pending.len()
    );
    let weights = state
        .weights
        .into_iter()
        .map(|w| w.expect("every parameter updated"))
        .collect();
    (weights, state.adam)
}

fn weights_hash<B: AutodiffBackend>(weights: &[FloatTensor<B>]) -> String {
    let mut hash = FNV_START;
    for w in weights {
        let data = burn_backend::read_sync(B::float_into_data(w.clone())).expect("weight data");
        for v in data
            .convert::<f32>()
            .try_to_vec::<f32>()
            .expect("f32 weights")
        {
            fnv1a(&mut hash, v);
        }
    }
    format!("{hash:016x}")
}

// --- The parent -----------------------------------------------------------------------------

/// What `--capacity` was asked.
#[derive(Clone, Debug)]
pub struct CapacityOpts {
    /// Models, each at its default sizes (batch aside).
    pub configs: Vec<Config>,
    /// `flex` or `ndarray`.
    pub backend: String,
    /// Steps per trial.
    pub steps: usize,
    /// Processes per profiled way.
    pub runs: usize,
    /// Budgets profiled at the default batch (percent of SaveAll's held bytes).
    pub profile_percents: Vec<u32>,
    /// The budget of the capacity search (percent of SaveAll's held bytes).
    pub search_percent: u32,
    /// The cap; `None`: Burn NoCheckpointing's median heap peak at the default batch.
    pub cap_bytes: Option<u64>,
    /// Where `capacity.json` and `RESULTS.md` go.
    pub out: std::path::PathBuf,
    /// A README whose marked section gets the headline.
    pub readme: Option<std::path::PathBuf>,
}

/// One profiled way at the default batch, over several processes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProfileRow {
    /// The way.
    pub way: Way,
    /// Its label.
    pub label: String,
    /// The budget's percentage of SaveAll's held bytes.
    pub percent: Option<u32>,
    /// The budget (bytes).
    pub budget_bytes: Option<u64>,
    /// Each process's outcome; `Err` with the reason where it failed.
    pub runs: Vec<Result<Outcome, String>>,
}

impl ProfileRow {
    fn ok(&self) -> Vec<&Outcome> {
        self.runs.iter().filter_map(|r| r.as_ref().ok()).collect()
    }

    /// Median, min and max over the processes of `f`.
    fn spread(&self, f: impl Fn(&Outcome) -> f64) -> Option<(f64, f64, f64)> {
        let values: Vec<f64> = self.ok().into_iter().map(f).collect();
        let min = values.iter().copied().reduce(f64::min)?;
        let max = values.iter().copied().reduce(f64::max)?;
        Some((median(values), min, max))
    }
}

/// One trial of the capacity search.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Probe {
    /// The batch tried.
    pub batch: usize,
    /// The budget at that batch (bytes).
    pub budget_bytes: Option<u64>,
    /// What it gave, or why it failed.
    pub outcome: Result<Outcome, String>,
}

/// The capacity search of one way.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SearchRow {
    /// The way.
    pub way: Way,
    /// Its label.
    pub label: String,
    /// Every trial, in the order run.
    pub probes: Vec<Probe>,
}

impl SearchRow {
    /// The largest batch that trained, with its outcome.
    pub fn largest(&self) -> Option<(usize, &Outcome)> {
        self.probes
            .iter()
            .filter_map(|p| p.outcome.as_ref().ok().map(|o| (p.batch, o)))
            .max_by_key(|(b, _)| *b)
    }

    /// The smallest batch that failed, with the reason.
    pub fn first_failure(&self) -> Option<(usize, &str)> {
        self.probes
            .iter()
            .filter_map(|p| p.outcome.as_ref().err().map(|e| (p.batch, e.as_str())))
            .min_by_key(|(b, _)| *b)
    }
}

/// One model's capacity results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CapacityModel {
    /// The model at its default batch.
    pub config: Config,
    /// Its description.
    pub describe: String,
    /// remat SaveAll's held-bytes peak at the default batch (the budgets' base).
    pub saveall_held: u64,
    /// `tradeoff()`'s smallest budget at the default batch.
    pub smallest: Option<u64>,
    /// The heap cap of the search.
    pub cap_bytes: u64,
    /// The profile at the default batch.
    pub profile: Vec<ProfileRow>,
    /// The search's budget percentage.
    pub search_percent: u32,
    /// The search, per way.
    pub search: Vec<SearchRow>,
    /// The commit this model ran on, where it differs from the results' (a model run again
    /// alone and put into the recorded results).
    #[serde(default)]
    pub commit: Option<String>,
}

/// Everything `--capacity` measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CapacityResults {
    /// Machine, date, commit, command.
    pub meta: crate::report::Meta,
    /// Backend.
    pub backend: String,
    /// Steps per trial.
    pub steps: usize,
    /// Per model.
    pub models: Vec<CapacityModel>,
}

/// Runs one trial in a child process: its outcome, or why it did not train.
fn spawn(trial: &Trial) -> Result<Outcome, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let json = serde_json::to_string(trial).map_err(|e| e.to_string())?;
    let output = Command::new(exe)
        .args(["--capacity-child", &json])
        .output()
        .map_err(|e| format!("spawn: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success()
        && let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("CAPACITY "))
    {
        return serde_json::from_str(line).map_err(|e| format!("outcome: {e}"));
    }
    Err(if stderr.contains("memory allocation of") {
        "out of memory".into()
    } else if stderr.contains("budget") && stderr.contains("panicked") {
        let line = stderr.lines().find(|l| l.contains("budget")).unwrap_or("");
        format!("budget too small: {}", line.trim())
    } else {
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        format!("failed ({}): {}", output.status, tail.join(" | "))
    })
}

fn log_outcome(what: &str, outcome: &Result<Outcome, String>) {
    match outcome {
        Ok(o) => eprintln!(
            "   {what}: {:.0} ms a step, step peak {:.1} MiB, process {:.1} MiB{}",
            o.step_ns() / 1e6,
            o.step_peak() as f64 / 1048576.0,
            o.process_peak as f64 / 1048576.0,
            o.replays
                .last()
                .map_or(String::new(), |r| format!(", {r} replays"))
        ),
        Err(e) => eprintln!("   {what}: {e}"),
    }
}

/// A budget percentage of `held` at `batch`, scaled from the default batch `b0`, and never
/// below the smallest budget (scaled alike, with 5% room).
fn budget_at(held: u64, smallest: Option<u64>, percent: u32, batch: usize, b0: usize) -> u64 {
    let scale = batch as f64 / b0 as f64;
    let asked = held as f64 * percent as f64 / 100.0 * scale;
    let floor = smallest.map_or(0.0, |s| s as f64 * 1.05 * scale);
    asked.max(floor).ceil() as u64
}

/// Rewrites `RESULTS.md` (and the README's section) from the recorded `capacity.json`.
pub fn report_only(opts: &CapacityOpts) -> Result<(), String> {
    let path = opts.out.join("capacity.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let results: CapacityResults =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    write(&results, opts)
}

/// Runs the capacity measurement and writes its results.
pub fn run(opts: &CapacityOpts) -> Result<(), String> {
    let meta = crate::report::Meta::collect(opts.steps, STEADY_FROM, 0);
    let mut models = Vec::new();
    for config in &opts.configs {
        models.push(run_model(opts, config)?);
        let results = CapacityResults {
            meta: meta.clone(),
            backend: opts.backend.clone(),
            steps: opts.steps,
            models: models.clone(),
        };
        write(&results, opts)?;
    }
    Ok(())
}

fn run_model(opts: &CapacityOpts, config: &Config) -> Result<CapacityModel, String> {
    let b0 = config.batch;
    let name = config.kind.name();
    eprintln!("== capacity: {name} ({})", config.describe());
    let trial = |way: Way, batch: usize, budget: Option<u64>, cap: Option<u64>| Trial {
        backend: opts.backend.clone(),
        config: Config {
            batch,
            ..config.clone()
        },
        way,
        budget_bytes: budget,
        steps: opts.steps,
        cap_bytes: cap,
        find_smallest: false,
    };
    // The base: SaveAll's held bytes and the smallest budget at the default batch.
    let base = spawn(&Trial {
        find_smallest: true,
        ..trial(Way::SaveAll, b0, None, None)
    })
    .map_err(|e| format!("{name}: remat SaveAll at batch {b0}: {e}"))?;
    let saveall_held = base.held_peaks.iter().copied().max().unwrap_or(0);
    let smallest = base.smallest;
    eprintln!(
        "   SaveAll holds {:.1} MiB; the smallest budget is {}",
        saveall_held as f64 / 1048576.0,
        smallest.map_or("unknown".into(), |s| format!(
            "{:.2} MiB",
            s as f64 / 1048576.0
        ))
    );
    // The profile at the default batch, `runs` processes per way (rounds: every way once a
    // round, so that a slow spell of the machine spreads over the ways).
    let mut ways: Vec<(Way, Option<u32>)> = vec![
        (Way::BurnNone, None),
        (Way::BurnBalanced, None),
        (Way::SaveAll, None),
        (Way::SaveAllInBackward, None),
    ];
    for &p in &opts.profile_percents {
        ways.push((Way::Budget, Some(p)));
        ways.push((Way::BudgetInBackward, Some(p)));
    }
    let mut profile: Vec<ProfileRow> = ways
        .iter()
        .map(|&(way, percent)| ProfileRow {
            way,
            label: way.label(percent),
            percent,
            budget_bytes: percent.map(|p| budget_at(saveall_held, smallest, p, b0, b0)),
            runs: Vec::new(),
        })
        .collect();
    for round in 0..opts.runs {
        for row in &mut profile {
            let outcome = spawn(&trial(row.way, b0, row.budget_bytes, None));
            log_outcome(&format!("{} (run {})", row.label, round + 1), &outcome);
            row.runs.push(outcome);
        }
    }
    // The cap: Burn NoCheckpointing's heap at the default batch, unless given.
    let burn_peak = profile[0]
        .spread(|o| o.process_peak as f64)
        .map(|(m, _, _)| m as u64)
        .ok_or_else(|| format!("{name}: Burn NoCheckpointing did not train at batch {b0}"))?;
    const MIB16: u64 = 16 << 20;
    let cap = opts.cap_bytes.unwrap_or(burn_peak.div_ceil(MIB16) * MIB16);
    eprintln!("   cap {:.0} MiB", cap as f64 / 1048576.0);
    let p = opts.search_percent;
    let mut search = Vec::new();
    for way in [
        Way::BurnNone,
        Way::BurnBalanced,
        Way::SaveAll,
        Way::Budget,
        Way::BudgetInBackward,
    ] {
        let percent = matches!(way, Way::Budget | Way::BudgetInBackward).then_some(p);
        let label = way.label(percent);
        let mut row = SearchRow {
            way,
            label: label.clone(),
            probes: Vec::new(),
        };
        let try_batch = |batch: usize, row: &mut SearchRow| -> bool {
            let budget = percent.map(|p| budget_at(saveall_held, smallest, p, batch, b0));
            let outcome = spawn(&trial(way, batch, budget, Some(cap)));
            log_outcome(&format!("{label} at batch {batch}"), &outcome);
            let ok = outcome.is_ok();
            row.probes.push(Probe {
                batch,
                budget_bytes: budget,
                outcome,
            });
            ok
        };
        // Doubling from the default batch up (or halving down), then bisection to within
        // 1/16 of the batch.
        let (mut lo, mut hi) = (0usize, None::<usize>);
        let mut batch = b0;
        loop {
            if try_batch(batch, &mut row) {
                lo = batch;
                if hi.is_some() || batch >= 64 * b0 {
                    break;
                }
                batch *= 2;
            } else {
                hi = Some(batch);
                if lo > 0 || batch == 1 {
                    break;
                }
                batch /= 2;
            }
        }
        if let Some(mut hi) = hi {
            while hi - lo > (lo / 16).max(1) {
                let mid = lo + (hi - lo) / 2;
                if try_batch(mid, &mut row) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
        }
        search.push(row);
    }
    Ok(CapacityModel {
        describe: config.describe(),
        config: config.clone(),
        saveall_held,
        smallest,
        cap_bytes: cap,
        profile,
        search_percent: p,
        search,
        commit: None,
    })
}

// --- The report -----------------------------------------------------------------------------

fn mib(bytes: f64) -> String {
    format!("{:.1}", bytes / 1048576.0)
}

/// Problems the report flags: remat ways whose final weights differ (they must agree bit for
/// bit), trials that failed at the default batch without a cap.
pub fn problems(results: &CapacityResults) -> Vec<String> {
    let mut out = Vec::new();
    for m in &results.models {
        let name = m.config.kind.name();
        let mut hashes: Vec<(&str, &str)> = Vec::new();
        for row in &m.profile {
            for run in &row.runs {
                match run {
                    Ok(o) if row.way.is_remat() => hashes.push((&row.label, &o.weights_hash)),
                    Ok(_) => {}
                    Err(e) => out.push(format!("{name}: {} failed without a cap: {e}", row.label)),
                }
            }
        }
        if let Some((first, hash)) = hashes.first()
            && let Some((other, _)) = hashes.iter().find(|(_, h)| h != hash)
        {
            out.push(format!(
                "{name}: {other}'s final weights differ from {first}'s (remat's ways must agree \
                 bit for bit)"
            ));
        }
    }
    out
}

/// The headline of one model: the best remat way's largest batch over Burn's, and its time
/// per sample over Burn's.
pub fn headline(m: &CapacityModel) -> Option<String> {
    let of = |way: Way| m.search.iter().find(|r| r.way == way)?.largest();
    let (burn_batch, burn) = of(Way::BurnNone)?;
    let best = m
        .search
        .iter()
        .filter(|r| r.way.is_remat())
        .filter_map(|r| r.largest().map(|(b, o)| (r, b, o)))
        .max_by_key(|(_, b, _)| *b)?;
    let (row, batch, outcome) = best;
    let per_sample = |b: usize, o: &Outcome| o.step_ns() / b as f64;
    Some(format!(
        "{}: {} fits {:.1}x the batch of Burn's autodiff (NoCheckpointing) in {} MiB ({} \
         against {}), at {:.2}x the time per sample",
        m.config.kind.name(),
        row.label,
        batch as f64 / burn_batch as f64,
        m.cap_bytes >> 20,
        batch,
        burn_batch,
        per_sample(batch, outcome) / per_sample(burn_batch, burn)
    ))
}

fn markdown(results: &CapacityResults) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let m = &results.meta;
    let _ = writeln!(s, "# Capacity: the largest batch within a memory cap\n");
    let _ = writeln!(
        s,
        "Generated by `{}` (`bench/src/capacity.rs`); do not edit by hand.\n",
        m.command
    );
    let _ = writeln!(s, "- Date: {}; commit `{}`", m.date, m.commit);
    let _ = writeln!(
        s,
        "- Machine: {}, {} CPUs, {}; backend {}; {} steps a trial (steady state from step {})",
        m.machine,
        m.cpus,
        m.memory,
        results.backend,
        results.steps,
        STEADY_FROM + 1
    );
    let _ = writeln!(
        s,
        "- Each trial is a child process whose heap is capped: an allocation past the cap \
         aborts it, so a batch either trains every step (forward, backward, an Adam update) or \
         fails. The cap counts the whole process: weights, input, Adam's moments, the graph, \
         gradients, temporaries. The cap is Burn NoCheckpointing's heap peak at the default \
         batch, rounded up to 16 MiB.\n"
    );
    let problems = problems(results);
    if !problems.is_empty() {
        let _ = writeln!(s, "## Problems\n");
        for p in &problems {
            let _ = writeln!(s, "- {p}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Headlines\n");
    for model in &results.models {
        if let Some(h) = headline(model) {
            let _ = writeln!(s, "- {h}");
        }
    }
    let _ = writeln!(s);
    for model in &results.models {
        let _ = writeln!(s, "## {}\n", model.config.kind.name());
        let _ = writeln!(s, "{}.\n", model.describe);
        if let Some(commit) = &model.commit {
            let _ = writeln!(s, "This model ran again alone, on commit `{commit}`.\n");
        }
        let _ = writeln!(
            s,
            "SaveAll holds {} MiB for backward at batch {}; the smallest budget `tradeoff()` \
             names there: {}.\n",
            mib(model.saveall_held as f64),
            model.config.batch,
            model
                .smallest
                .map_or("unknown".into(), |b| format!("{} MiB", mib(b as f64)))
        );
        let _ = writeln!(
            s,
            "### The largest batch within {} MiB\n",
            model.cap_bytes >> 20
        );
        let _ = writeln!(
            s,
            "Samples/s: that one trial's (one process, the median of its steady steps), so \
             its time ratios carry one process's noise; the profile below has the spread of \
             three.\n"
        );
        let _ = writeln!(
            s,
            "| way | largest batch | samples/s there | its heap peak MiB | batch / Burn's | \
             time per sample / Burn's | first batch that failed | why |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        let burn = model
            .search
            .iter()
            .find(|r| r.way == Way::BurnNone)
            .and_then(|r| r.largest());
        for row in &model.search {
            let (batch, rate, peak, rel_batch, rel_time) = match row.largest() {
                Some((b, o)) => {
                    let per = o.step_ns() / b as f64;
                    (
                        b.to_string(),
                        format!("{:.1}", 1e9 / per),
                        mib(o.process_peak as f64),
                        burn.map_or("-".into(), |(bb, _)| format!("{:.2}", b as f64 / bb as f64)),
                        burn.map_or("-".into(), |(bb, bo)| {
                            format!("{:.2}", per / (bo.step_ns() / bb as f64))
                        }),
                    )
                }
                None => (
                    "none".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ),
            };
            let (fail, why) = row
                .first_failure()
                .map_or(("-".into(), "-".into()), |(b, e)| {
                    (b.to_string(), e.to_string())
                });
            let _ = writeln!(
                s,
                "| {} | {batch} | {rate} | {peak} | {rel_batch} | {rel_time} | {fail} | {why} |",
                row.label
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "### The whole step at batch {} (no cap; median over processes, [min, max])\n",
            model.config.batch
        );
        let _ = writeln!(
            s,
            "Step peak: the heap's peak above the level before the step, forward + backward + \
             update, the largest over the steady steps of a process. Over SaveAll: over remat \
             SaveAll with the update after backward (`optim.step` after `loss.backward()`). \
             Time over the separate step: over the same policy with the update after backward.\n"
        );
        let _ = writeln!(
            s,
            "| way | budget MiB | processes | step peak MiB | over SaveAll | of it, forward's \
             peak MiB | step ms | time over the separate step | held peak MiB | replays |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        let saveall_peak = model
            .profile
            .iter()
            .find(|r| r.way == Way::SaveAll)
            .and_then(|r| r.spread(|o| o.step_peak() as f64))
            .map(|(m, _, _)| m);
        for row in &model.profile {
            let ok = row.ok();
            let peak = row.spread(|o| o.step_peak() as f64);
            let time = row.spread(|o| o.step_ns() / 1e6);
            let separate = row.way.in_backward().then(|| {
                let twin = match row.way {
                    Way::SaveAllInBackward => Way::SaveAll,
                    _ => Way::Budget,
                };
                model
                    .profile
                    .iter()
                    .find(|r| r.way == twin && r.percent == row.percent)
                    .and_then(|r| r.spread(|o| o.step_ns()))
            });
            let fmt3 = |v: Option<(f64, f64, f64)>, f: &dyn Fn(f64) -> String| {
                v.map_or("-".into(), |(m, lo, hi)| {
                    format!("{} [{}, {}]", f(m), f(lo), f(hi))
                })
            };
            let over = match (peak, saveall_peak) {
                (Some((m, lo, hi)), Some(base)) if base > 0.0 => {
                    format!("{:.3} [{:.3}, {:.3}]", m / base, lo / base, hi / base)
                }
                _ => "-".into(),
            };
            let rel_time = match (separate, time) {
                (Some(Some((base, _, _))), Some((m, lo, hi))) => {
                    let base = base / 1e6;
                    format!("{:.2} [{:.2}, {:.2}]", m / base, lo / base, hi / base)
                }
                _ => "-".into(),
            };
            let held = row.spread(|o| {
                Outcome::steady(&o.held_peaks)
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(0) as f64
            });
            let replays =
                row.spread(|o| Outcome::steady(&o.replays).last().copied().unwrap_or(0) as f64);
            let _ = writeln!(
                s,
                "| {} | {} | {} of {} | {} | {over} | {} | {} | {rel_time} | {} | {} |",
                row.label,
                budget_cell(model, row.percent, row.budget_bytes),
                ok.len(),
                row.runs.len(),
                fmt3(peak, &|v| mib(v)),
                // Older results have no forward peaks.
                if ok.iter().all(|o| !o.forward_peaks.is_empty()) {
                    fmt3(row.spread(|o| o.forward_peak() as f64), &|v| mib(v))
                } else {
                    "-".into()
                },
                fmt3(time, &|v| format!("{v:.0}")),
                if row.way.is_remat() {
                    fmt3(held, &|v| mib(v))
                } else {
                    "-".into()
                },
                if row.way.is_remat() {
                    fmt3(replays, &|v| format!("{v:.0}"))
                } else {
                    "-".into()
                },
            );
        }
        let _ = writeln!(s);
    }
    s
}

/// A budget, marked where the smallest budget (with its 5% room) raised it above the percentage
/// asked.
fn budget_cell(model: &CapacityModel, percent: Option<u32>, bytes: Option<u64>) -> String {
    match (percent, bytes) {
        (Some(p), Some(b)) => {
            let asked = (model.saveall_held as f64 * p as f64 / 100.0).ceil() as u64;
            let raised = if b > asked {
                " (raised to the smallest)"
            } else {
                ""
            };
            format!("{}{raised}", mib(b as f64))
        }
        _ => "-".into(),
    }
}

/// The README section between these markers is replaced by the headlines.
const BEGIN: &str = "<!-- capacity:begin -->";
const END: &str = "<!-- capacity:end -->";

fn write(results: &CapacityResults, opts: &CapacityOpts) -> Result<(), String> {
    let dir = &opts.out;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    let put = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    put(&dir.join("capacity.json"), &json)?;
    put(&dir.join("RESULTS.md"), &markdown(results))?;
    if let Some(readme) = &opts.readme {
        let text =
            std::fs::read_to_string(readme).map_err(|e| format!("{}: {e}", readme.display()))?;
        let (Some(a), Some(b)) = (text.find(BEGIN), text.find(END)) else {
            return Err(format!(
                "{} has no {BEGIN} ... {END} section",
                readme.display()
            ));
        };
        let mut section = format!(
            "{BEGIN}\n<!-- generated by the bench's --capacity run; see bench/capacity/RESULTS.md -->\n"
        );
        section.push_str(&format!(
            "Measured on {} ({} CPUs), {}, commit `{}`:\n\n",
            results.meta.machine, results.meta.cpus, results.backend, results.meta.commit
        ));
        for m in &results.models {
            if let Some(h) = headline(m) {
                let commit = m
                    .commit
                    .as_ref()
                    .map_or(String::new(), |c| format!(" (commit `{c}`)"));
                section.push_str(&format!("- {h}{commit}\n"));
            }
        }
        let updated = format!("{}{section}{}", &text[..a], &text[b..]);
        put(readme, &updated)?;
    }
    Ok(())
}
