//! `bench`: remat vs Burn's own autodiff, side by side in one process (issue 4).
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml -- [flags]
//!   --models mlp,transformer,convnet,resmlp (the default; and lstm)
//!   --backends flex,ndarray (and wgpu, built with `--features wgpu`: small sizes; memory
//!   columns are the device's bytes in use)
//!   --engines burn,burn-balanced,saveall,balanced,recomputeall,regions (default: all)
//!   --budgets 75,50,30,20,10,5 (percentages of remat SaveAll's held-bytes peak; mlp adds 25;
//!   lstm's default is 50,25,10: its steps are long)
//!   --no-budget (skip the budget curve)  --only budget (SaveAll, regions and the budget curve)
//!   --steps N (timed steps, default 5)  --warmup N (default 1)
//!   --batch N | --batch mlp=128,transformer=2 --layers N (override every model)
//!   --seq N (transformer; lstm's time steps)
//!   --conv-batch-ndarray N (convnet batch on NdArray, default 2: its conv backward is slow)
//!   --micro-ops N (default 100000)  --micro-reps N (default 3)  --no-micro
//!   --report-only (regenerate RESULTS.md and the SVGs from results.json)
//!   --processes N (default 3: the command runs in N processes, one after the other, and each
//!   row is the median over them with their spread; `report::merge`)
//!   --capacity (the capacity table, `capacity.rs`, into bench/capacity unless --out: the
//!   largest batch each way trains within a heap cap, each trial a child process; on the
//!   first backend, at --steps steps a trial, at least 3)
//!     --cap-mib N (default: Burn NoCheckpointing's heap peak at the default batch)
//!     --runs N (processes per way at the default batch, default 3)
//!     --capacity-budget P (the search's budget, % of SaveAll's held bytes, default 10)
//!     --profile-budgets 10,5 (budgets profiled at the default batch)
//!     --update-readme (the headlines into README.md's capacity section)
//!     --report-only (RESULTS.md and the README's section from the recorded capacity.json)
//!   --out DIR (default: the bench directory)
//!   --dump-views DIR (write each model's planner view, `remat::Tradeoff::view`, as text)
//! ```
//!
//! Cargo reads `.cargo/config.toml` from the current directory, not from the manifest's: to
//! reuse the oracle's compiled Burn (`target-dir = "../oracle/target"`), run from `bench/`
//! (`cd bench && cargo run --release -- ...`) or set `CARGO_TARGET_DIR=oracle/target`.
//!
//! Engines are measured in rounds (every engine once per round, the order rotating), so a
//! ratio is taken between steps run close in time: the machine is shared.
//!
//! The budget curve (`Policy::Budget`): before the rounds, one step under remat SaveAll gives
//! the base, `remat::stats().peak_bytes` (the bytes remat holds for backward, the measure a
//! budget bounds); each point is a percentage of it, run as `with_policy(Budget(bytes))`. A
//! budget below the engine's smallest panics naming one that works: the panic is caught in
//! that first (untimed) step, the point recorded as infeasible, and the curve continued at the
//! named budget (marked "raised to the smallest"). One step under `Budget(u64::MAX)` gives the
//! planner's predicted curve (`remat::tradeoff()`), a point at the smallest budget within 4
//! forward passes of replays (`Tradeoff::smallest_budget_within`) where that is above the
//! smallest, and a last point at its smallest budget.

mod alloc;
mod capacity;
mod engine;
mod models;
mod peak_trace;
mod report;

use std::path::PathBuf;
use std::sync::Arc;

use engine::{BudgetPoint, BudgetTarget, Engine, Runner};
use models::{Config, Kind, Spec};
use report::{BudgetInfo, BudgetRun, EngineRun, Meta, MicroRun, ModelRun, PlannerCurve, Results};

/// NdArray is deprecated in Burn 0.22 (in favour of Flex) but still a reference point.
#[allow(deprecated)]
pub(crate) type NdArray = burn_ndarray::NdArray;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

struct Opts {
    models: Vec<Kind>,
    engines: Vec<Engine>,
    backends: Vec<String>,
    steps: usize,
    warmup: usize,
    batch: Option<usize>,
    model_batch: Vec<(Kind, usize)>,
    layers: Option<usize>,
    seq: Option<usize>,
    conv_batch_ndarray: usize,
    micro_ops: usize,
    micro_reps: usize,
    micro: bool,
    /// `None`: each model's default ([`budget_percents`]).
    budgets: Option<Vec<u32>>,
    budget: bool,
    report_only: bool,
    out: PathBuf,
    dump_views: Option<PathBuf>,
    /// `--capacity`: the capacity table instead of the step measurement.
    capacity: bool,
    cap_mib: Option<u64>,
    runs: usize,
    capacity_percent: u32,
    profile_percents: Vec<u32>,
    update_readme: bool,
    out_given: bool,
    /// Processes whose runs are joined (`report::merge`).
    processes: usize,
    /// Where the budget's planner takes op costs from (NOTE [bench-op-costs]).
    op_costs: remat::OpCosts,
}

fn parse_args() -> Result<Opts, String> {
    let mut opts = Opts {
        models: vec![Kind::Mlp, Kind::Transformer, Kind::Convnet, Kind::ResMlp],
        engines: Engine::ALL.to_vec(),
        backends: vec!["flex".into(), "ndarray".into()],
        steps: 5,
        warmup: 1,
        batch: None,
        model_batch: Vec::new(),
        layers: None,
        seq: None,
        conv_batch_ndarray: 2,
        micro_ops: 100_000,
        micro_reps: 3,
        micro: true,
        budgets: None,
        budget: true,
        report_only: false,
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        dump_views: None,
        capacity: false,
        cap_mib: None,
        runs: 3,
        capacity_percent: 10,
        profile_percents: vec![10, 5],
        update_readme: false,
        out_given: false,
        processes: 3,
        op_costs: remat::OpCosts::Measured,
    };
    let percents = |flag: &str, list: Option<String>| -> Result<Vec<u32>, String> {
        list.ok_or(format!("{flag} needs a value"))?
            .split(',')
            .map(|p| match p.trim_end_matches('%').parse::<u32>() {
                Ok(p) if (1..=100).contains(&p) => Ok(p),
                _ => Err(format!("{flag}: {p} is not a percentage in 1..=100")),
            })
            .collect()
    };
    let mut args = std::env::args().skip(1);
    let number = |flag: &str, value: Option<String>| -> Result<usize, String> {
        value
            .ok_or(format!("{flag} needs a value"))?
            .parse()
            .map_err(|e| format!("{flag}: {e}"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--models" => {
                let list = args.next().ok_or("--models needs a value")?;
                opts.models = list
                    .split(',')
                    .map(|m| Kind::parse(m).ok_or(format!("unknown model {m}")))
                    .collect::<Result<_, _>>()?;
            }
            "--engines" => {
                let list = args.next().ok_or("--engines needs a value")?;
                opts.engines = list
                    .split(',')
                    .map(|e| Engine::parse(e).ok_or(format!("unknown engine {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--backends" => {
                let list = args.next().ok_or("--backends needs a value")?;
                opts.backends = list.split(',').map(str::to_string).collect();
                if let Some(b) = opts
                    .backends
                    .iter()
                    .find(|b| !["flex", "ndarray", "wgpu"].contains(&b.as_str()))
                {
                    return Err(format!("unknown backend {b}"));
                }
                if opts.backends.iter().any(|b| b == "wgpu") && !cfg!(feature = "wgpu") {
                    return Err("the wgpu backend needs the bench built with it: \
                                cargo run --release --features wgpu -- --backends wgpu ..."
                        .into());
                }
            }
            "--steps" => opts.steps = number(&arg, args.next())?.max(1),
            "--warmup" => opts.warmup = number(&arg, args.next())?,
            "--batch" => {
                let value = args.next().ok_or("--batch needs a value")?;
                if value.contains('=') {
                    // Per model: `mlp=128,transformer=2`.
                    for item in value.split(',') {
                        let (model, n) = item.split_once('=').ok_or(format!("--batch: {item}"))?;
                        let kind = Kind::parse(model).ok_or(format!("unknown model {model}"))?;
                        let n = n.parse().map_err(|e| format!("--batch {item}: {e}"))?;
                        opts.model_batch.push((kind, n));
                    }
                } else {
                    opts.batch = Some(number(&arg, Some(value))?);
                }
            }
            "--layers" => opts.layers = Some(number(&arg, args.next())?),
            "--seq" => opts.seq = Some(number(&arg, args.next())?),
            "--conv-batch-ndarray" => opts.conv_batch_ndarray = number(&arg, args.next())?,
            "--micro-ops" => opts.micro_ops = number(&arg, args.next())?.max(2),
            "--micro-reps" => opts.micro_reps = number(&arg, args.next())?.max(1),
            "--no-micro" => opts.micro = false,
            "--budgets" => opts.budgets = Some(percents(&arg, args.next())?),
            "--no-budget" => opts.budget = false,
            "--only" => match args.next().as_deref() {
                Some("budget") => {
                    opts.engines = vec![Engine::RematSaveAll, Engine::RematRegions];
                    opts.budget = true;
                    opts.micro = false;
                }
                other => return Err(format!("--only: unknown value {other:?} (try `budget`)")),
            },
            "--report-only" => opts.report_only = true,
            "--dump-views" => {
                opts.dump_views = Some(PathBuf::from(
                    args.next().ok_or("--dump-views needs a directory")?,
                ))
            }
            "--out" => {
                opts.out = PathBuf::from(args.next().ok_or("--out needs a value")?);
                opts.out_given = true;
            }
            "--capacity" => opts.capacity = true,
            "--cap-mib" => opts.cap_mib = Some(number(&arg, args.next())? as u64),
            "--runs" => opts.runs = number(&arg, args.next())?.max(1),
            "--capacity-budget" => {
                opts.capacity_percent = *percents(&arg, args.next())?
                    .first()
                    .ok_or("--capacity-budget needs a percentage")?
            }
            "--profile-budgets" => opts.profile_percents = percents(&arg, args.next())?,
            "--update-readme" => opts.update_readme = true,
            "--processes" => opts.processes = number(&arg, args.next())?.max(1),
            "--op-costs" => {
                opts.op_costs = match args.next().as_deref() {
                    Some("measured") => remat::OpCosts::Measured,
                    Some("estimated") => remat::OpCosts::Estimated,
                    other => {
                        return Err(format!(
                            "--op-costs: {other:?} (try `measured` or `estimated`)"
                        ));
                    }
                }
            }
            "-h" | "--help" => {
                return Err("see the flags at the top of bench/src/main.rs".into());
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(opts)
}

fn config(opts: &Opts, kind: Kind, backend: &str) -> Config {
    let mut c = Config::default_for(kind);
    if backend == "wgpu" {
        // Small sizes: llvmpipe (the CPU Vulkan driver CI machines have) is slow.
        c = c.small();
    }
    if let Some(b) = opts.batch {
        c.batch = b;
    }
    if let Some(&(_, b)) = opts.model_batch.iter().find(|(k, _)| *k == kind) {
        c.batch = b;
    }
    if let Some(l) = opts.layers {
        c.layers = l;
    }
    if let (Some(s), Kind::Transformer | Kind::Lstm) = (opts.seq, kind) {
        c.seq = s;
    }
    if kind == Kind::Convnet && backend == "ndarray" {
        c.batch = c.batch.min(opts.conv_batch_ndarray);
    }
    c
}

fn make_runner(backend: &str, engine: Engine, spec: Arc<Spec>) -> Runner {
    match backend {
        "flex" => engine::runner::<burn_flex::Flex>(engine, spec),
        "ndarray" => engine::runner::<NdArray>(engine, spec),
        #[cfg(feature = "wgpu")]
        "wgpu" => engine::runner::<burn_wgpu::Wgpu>(engine, spec),
        other => unreachable!("backend {other} passed parse_args"),
    }
}

/// The median of what `f` reads off the samples that have it; `None` where none has.
fn median_of(
    samples: &[engine::Sample],
    f: impl Fn(&engine::Sample) -> Option<f64>,
) -> Option<f64> {
    let mut values: Vec<f64> = samples.iter().filter_map(f).collect();
    (!values.is_empty()).then(|| median(&mut values))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The message of a caught panic.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The smallest budget remat knows `bytes` falls short of, after a step under it stopped as
/// too small (`remat::check_budget`, which counts what that step was found to need).
fn named_budget(bytes: u64) -> Option<u64> {
    match remat::check_budget(bytes) {
        Err(remat::BudgetError::TooSmall {
            min_budget_bytes, ..
        }) => Some(min_budget_bytes),
        _ => None,
    }
}

/// Runs one untimed step, catching a panic (then its message is the error); the panic hook is
/// silenced meanwhile, so that an expected "budget too small" does not print a backtrace.
fn try_step(run: &mut Runner) -> Result<engine::Sample, String> {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(false)));
    std::panic::set_hook(previous);
    out.map_err(|payload| panic_message(&*payload))
}

/// A prepared engine, with the budget point it measures (if any).
type Prepared = (Engine, Runner, Option<u64>);

/// Sets up the budget curve of one model on one backend (see the module docs): returns what
/// was asked and found, and one runner per distinct budget that runs (already warmed by the
/// step that tried it).
fn calibrate_budgets(
    opts: &Opts,
    kind: Kind,
    backend: &str,
    spec: &Arc<Spec>,
) -> Result<(BudgetRun, Vec<Prepared>), String> {
    let tag = format!("{} on {backend}", kind.name());
    let held_peak = |engine: Engine| -> Result<u64, String> {
        let mut run = make_runner(backend, engine, spec.clone());
        let sample = try_step(&mut run).map_err(|m| format!("{tag}: {}: {m}", engine.label()))?;
        sample
            .remat_peak
            .ok_or_else(|| format!("{tag}: {} has no remat peak", engine.label()))
    };
    let saveall_peak = held_peak(Engine::RematSaveAll)?;
    let regions_peak = match kind {
        Kind::Transformer => Some(held_peak(Engine::RematRegions)?),
        _ => None,
    };
    eprintln!(
        "   budget base: SaveAll holds {:.1} MiB at most{}",
        saveall_peak as f64 / 1048576.0,
        regions_peak.map_or(String::new(), |r| format!(
            ", per-layer regions {:.1} MiB",
            r as f64 / 1048576.0
        ))
    );
    let mut prepared: Vec<Prepared> = Vec::new();
    let mut points = Vec::new();
    // Unbounded first: its step gives the planner's curve.
    let unbounded = Engine::RematBudget(BudgetPoint {
        bytes: u64::MAX,
        target: BudgetTarget::Unbounded,
    });
    let mut run = make_runner(backend, unbounded, spec.clone());
    // Two steps: the engine times each kind of op in its first two steps and plans with the
    // lower of the two (NOTE [timing-window]), so the curve, the plans and the floors below
    // weigh warm op times, taken in this run.
    for _ in 0..2 {
        try_step(&mut run).map_err(|m| format!("{tag}: Budget(u64::MAX) panicked: {m}"))?;
    }
    let tradeoff = remat::tradeoff();
    if let (Some(dir), Some(t)) = (&opts.dump_views, &tradeoff) {
        let path = dir.join(format!("{}-{backend}.view", kind.name()));
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, t.view.to_string()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("   planner view written to {}", path.display());
    }
    let smallest = tradeoff.as_ref().map(|t| t.min_budget_bytes);
    let past_cliff = tradeoff
        .as_ref()
        .map(|t| t.smallest_budget_within(4.0))
        .filter(|&past| smallest.is_some_and(|min| past > min));
    let planner = tradeoff.map(|t| PlannerCurve::from_tradeoff(&t));
    prepared.push((unbounded, run, Some(u64::MAX)));
    let mut info = BudgetInfo::new(BudgetTarget::Unbounded, None, u64::MAX);
    info.ran_bytes = Some(u64::MAX);
    points.push(info);
    let percents = budget_percents(opts, kind);
    let mut requests: Vec<(BudgetTarget, Option<u32>, u64)> = percents
        .iter()
        .map(|&p| {
            let bytes = (saveall_peak as u128 * p as u128 / 100) as u64;
            (BudgetTarget::Percent(p), Some(p), bytes)
        })
        .collect();
    if let Some(r) = regions_peak {
        requests.push((BudgetTarget::RegionsPeak, None, r));
    }
    // Past the cliff at the smallest budget (NOTE [budget-cliff] in `remat`'s
    // `planner/tradeoff.rs`), where it is above the smallest.
    if let Some(past) = past_cliff {
        requests.push((BudgetTarget::PastCliff, None, past));
    }
    // The smallest budget the planner guarantees for the step (`tradeoff()`'s first row).
    if let Some(min) = smallest {
        requests.push((BudgetTarget::Smallest, None, min));
    }
    for (target, percent, requested) in requests {
        let mut info = BudgetInfo::new(target, percent, requested);
        let mut bytes = requested;
        // The first try is the asked budget; a panic names a larger one to try (a few times:
        // in forward the named one is a lower bound, and the next try may name a larger one).
        for _ in 0..5 {
            if prepared.iter().any(|(_, _, b)| *b == Some(bytes)) {
                // Measured already (two points raised to the same smallest budget).
                info.ran_bytes = Some(bytes);
                break;
            }
            let engine = Engine::RematBudget(BudgetPoint {
                bytes,
                target: if bytes == requested {
                    target
                } else {
                    BudgetTarget::Smallest
                },
            });
            let mut run = make_runner(backend, engine, spec.clone());
            match try_step(&mut run) {
                Ok(sample) => {
                    eprintln!(
                        "   {:<28} budget {:>8.1} MiB: held peak {:>8.1} MiB, {} replays",
                        engine.label(),
                        bytes as f64 / 1048576.0,
                        sample.remat_peak.unwrap_or(0) as f64 / 1048576.0,
                        sample.replays.unwrap_or(0)
                    );
                    info.ran_bytes = Some(bytes);
                    prepared.push((engine, run, Some(bytes)));
                    break;
                }
                Err(message) => {
                    let named = named_budget(bytes);
                    eprintln!(
                        "   {} at {:.1} MiB: infeasible; named {}",
                        target.name(),
                        bytes as f64 / 1048576.0,
                        named.map_or("nothing".into(), |n| format!(
                            "{:.1} MiB",
                            n as f64 / 1048576.0
                        ))
                    );
                    if info.message.is_none() {
                        info.message = Some(message);
                        info.named_min_bytes = named;
                    }
                    match named {
                        Some(n) if n > bytes => bytes = n,
                        _ => break,
                    }
                }
            }
        }
        points.push(info);
    }
    // The planner's own columns at each budget are computed after the timed rounds, on the
    // view of a step taken then (`plan_points`, NOTE [warm-floors]).
    Ok((
        BudgetRun {
            saveall_peak_bytes: saveall_peak,
            regions_peak_bytes: regions_peak,
            points,
            planner,
        },
        prepared,
    ))
}

/// The budget points of a model, as percentages of SaveAll's held peak, largest first: those
/// `--budgets` names, else 75% to 5%; the MLP adds 25% (its target); the LSTM's default is 50%,
/// 25% and 10% (a step of its 1,024 time steps is long, and its smallest budget's step the
/// longest).
fn budget_percents(opts: &Opts, kind: Kind) -> Vec<u32> {
    let mut percents = match (&opts.budgets, kind) {
        (Some(asked), _) => asked.clone(),
        (None, Kind::Lstm) => vec![50, 25, 10],
        (None, _) => vec![75, 50, 30, 20, 10, 5],
    };
    if kind == Kind::Mlp && !percents.contains(&25) {
        percents.push(25);
    }
    percents.sort_unstable_by(|a, b| b.cmp(a));
    percents.dedup();
    percents
}

fn run_model(opts: &Opts, kind: Kind, backend: &str) -> Result<ModelRun, String> {
    let config = config(opts, kind, backend);
    let mut description = config.describe();
    if backend == "wgpu" {
        description.push_str(
            "; memory columns: the device's bytes in use (CubeCL's pools, after a sync at the \
             forward pass's end and after backward), not the host allocator's; no floors for \
             the budget rows: remat times ops between syncs here, which overstates a replay's \
             cost in a fused, asynchronous queue (steps measured up to 30% below such floors)",
        );
    }
    eprintln!("== {} on {backend}: {description}", kind.name());
    let spec = Arc::new(Spec::new(config.clone()));
    let mut runners: Vec<Prepared> = opts
        .engines
        .iter()
        .map(|&e| (e, make_runner(backend, e, spec.clone()), None))
        .collect();
    let budget = if opts.budget {
        let (budget, prepared) = calibrate_budgets(opts, kind, backend, &spec)?;
        runners.extend(prepared);
        Some(budget)
    } else {
        None
    };
    let n = runners.len();
    for round in 0..opts.warmup {
        // The budget points were warmed by the step that tried them.
        for (engine, run, _) in runners
            .iter_mut()
            .filter(|(e, _, _)| !matches!(e, Engine::RematBudget(_)))
        {
            let s = run(false);
            eprintln!(
                "   warm-up {round} {:<28} {:>9.1} ms",
                engine.label(),
                s.ns as f64 / 1e6
            );
        }
    }
    let mut samples: Vec<Vec<engine::Sample>> = (0..n).map(|_| Vec::new()).collect();
    // A budget point whose timed step panics (the planner's choices follow measured op times,
    // so a budget that ran once may not run again) stops there; its rounds so far are kept.
    let mut stopped = vec![false; n];
    let mut failures = Vec::new();
    for round in 0..opts.steps {
        for k in 0..n {
            let i = (k + round) % n;
            let (engine, run, _) = &mut runners[i];
            if stopped[i] {
                continue;
            }
            let s = match engine {
                Engine::RematBudget(_) => match try_step(run) {
                    Ok(s) => s,
                    Err(message) => {
                        eprintln!("   step {round} {}: panicked: {message}", engine.label());
                        failures.push(format!(
                            "{} on {backend}: {} panicked in timed step {round}: {message}",
                            kind.name(),
                            engine.label()
                        ));
                        stopped[i] = true;
                        continue;
                    }
                },
                _ => run(false),
            };
            eprintln!(
                "   step {round} {:<28} {:>9.1} ms  peak {:>8.1} MB  kept {:>8.1} MB  held {}",
                engine.label(),
                s.ns as f64 / 1e6,
                s.peak as f64 / 1e6,
                s.kept as f64 / 1e6,
                s.remat_peak.map_or("-".into(), |b| format!(
                    "{b} B, {} replays",
                    s.replays.unwrap_or(0)
                ))
            );
            samples[i].push(s);
        }
    }
    // The planner's columns on the view of a step after the rounds (NOTE [warm-floors]).
    let mut budget = budget;
    if let Some(budget) = &mut budget
        && let Some((_, run, _)) = runners
            .iter_mut()
            .find(|(_, _, bytes)| *bytes == Some(u64::MAX))
        && try_step(run).is_ok()
        && let Some(tradeoff) = remat::tradeoff()
    {
        plan_points(&mut budget.points, &tradeoff.view, tradeoff.grads.as_ref());
    }
    let mut engines = Vec::new();
    for ((engine, run, budget_bytes), samples) in runners.iter_mut().zip(samples) {
        if samples.is_empty() {
            continue;
        }
        // The budget points are not traced: the memory-over-time figure keeps its six lines.
        let trace = match engine {
            Engine::RematBudget(_) => None,
            _ => run(true).trace,
        };
        let times_ms: Vec<f64> = samples.iter().map(|s| s.ns as f64 / 1e6).collect();
        let forward_ms: Vec<f64> = samples.iter().map(|s| s.forward_ns as f64 / 1e6).collect();
        let mut sorted = times_ms.clone();
        let median_ms = median(&mut sorted);
        let mut peaks: Vec<f64> = samples.iter().map(|s| s.peak as f64).collect();
        let mut kepts: Vec<f64> = samples.iter().map(|s| s.kept as f64).collect();
        let last = samples.last().expect("at least one step");
        engines.push(EngineRun {
            label: engine.label(),
            engine: engine.engine().into(),
            policy: engine.policy(),
            median_ms,
            min_ms: sorted[0],
            max_ms: sorted[sorted.len() - 1],
            times_ms,
            forward_ms,
            peak_bytes: median(&mut peaks) as u64,
            kept_bytes: median(&mut kepts) as i64,
            remat_kept_bytes: last.remat_kept,
            remat_peak_bytes: samples.iter().filter_map(|s| s.remat_peak).max(),
            budget_bytes: *budget_bytes,
            replays: last.replays,
            replay_ms: median_of(&samples, |s| s.replay_ns.map(|ns| ns as f64 / 1e6)),
            faults: median_of(&samples, |s| s.faults.map(|f| f as f64)),
            fingerprint: last.fingerprint.clone(),
            deterministic: samples
                .iter()
                .all(|s| s.fingerprint.hash == last.fingerprint.hash),
            trace,
            process_rounds: Vec::new(),
        });
    }
    drop(runners);
    let mut run = ModelRun {
        model: kind.name().into(),
        backend: backend.into(),
        description,
        config,
        weights_and_input_bytes: spec.bytes() as u64,
        engines,
        budget,
        agree: true,
        remat_bit_identical: true,
        problems: Vec::new(),
    };
    report::check(&mut run);
    run.problems.extend(failures);
    Ok(run)
}

/// NOTE [warm-floors]: the planner's plan, the chain's plan, the exact optimum where the
/// search finds it (else the bound it proved), the lower bound and the time
/// planning takes at each budget that ran, on `view`: the view of a step of the
/// `Budget(u64::MAX)` point taken after the timed rounds. Its op times are the ones the
/// engine planned with: a replay's cost is its own measured time once replays of its kind
/// were timed (NOTE [replay-times] in remat's `cost.rs`), which the budget points' first
/// steps do. Computed on the calibration step's view instead (forward times only), the
/// floors were beaten by measured steps (the residual MLP at 50% to 10% by up to 0.064x of a
/// step, 2026-12-03: its steps at 50% replayed 706 ops where that view's plan replays 403,
/// cheaper ones than the forward times said).
fn plan_points(
    points: &mut [report::BudgetInfo],
    view: &remat::planner::GraphView,
    grads: Option<&remat::planner::GradProfile>,
) {
    for point in points {
        let Some(bytes) = point.ran_bytes.filter(|&b| b != u64::MAX) else {
            continue;
        };
        let start = std::time::Instant::now();
        let planned = remat::planner::plan(view, bytes).ok();
        point.plan_ms = Some(start.elapsed().as_secs_f64() * 1e3);
        point.planned_ns = planned
            .as_ref()
            .and_then(|s| remat::planner::simulate(view, s, bytes).ok())
            .map(|o| o.recompute_cost);
        // NOTE [grads-in-flight] in `remat`'s `planner/grads.rs`: the gradients of the
        // calibration step's pass, which has this view's step order.
        point.step_peak_bytes = planned
            .as_ref()
            .zip(grads)
            .and_then(|(s, grads)| remat::planner::step_peak(view, s, grads).ok());
        let bound = remat::planner::recompute_lower_bound(view, bytes);
        let searched = remat::planner::exact_optimum(view, bytes, report::SEARCH_STATES);
        let (optimum, proved) = match searched {
            remat::planner::Optimum::Found { cost, .. } => (Some(cost), cost),
            remat::planner::Optimum::GaveUp { bound, .. } => (None, bound),
            remat::planner::Optimum::Infeasible { .. } => {
                // The engine ran this budget: a search that finds nothing is wrong.
                eprintln!("   the exact search found no schedule at {bytes} bytes, which ran");
                (None, 0.0)
            }
        };
        point.optimum_ns = optimum;
        point.bound_ns = Some(bound.max(proved));
        point.chain_ns = remat::planner::chain_plan(view, bytes)
            .and_then(|s| remat::planner::simulate(view, &s, bytes).ok())
            .map(|o| o.recompute_cost);
    }
}

fn run_micro(opts: &Opts, backend: &str) -> Vec<MicroRun> {
    let engines = [
        Engine::BurnNone,
        Engine::BurnBalanced,
        Engine::RematSaveAll,
        Engine::RematBalanced,
    ];
    let mut reps: Vec<Vec<engine::Micro>> = vec![Vec::new(); engines.len()];
    if backend == "wgpu" {
        // An op on 16 elements is a kernel launch there: what it measures is the queue.
        eprintln!("   micro: skipped on wgpu (it measures host bookkeeping)");
        return Vec::new();
    }
    for rep in 0..=opts.micro_reps {
        for (i, &e) in engines.iter().enumerate() {
            let m = match backend {
                "flex" => engine::micro::<burn_flex::Flex>(e, opts.micro_ops),
                _ => engine::micro::<NdArray>(e, opts.micro_ops),
            };
            // Repetition 0 is a warm-up.
            if rep > 0 {
                reps[i].push(m);
            }
        }
    }
    engines
        .iter()
        .zip(reps)
        .map(|(e, reps)| {
            let med = |f: fn(&engine::Micro) -> f64| {
                let mut v: Vec<f64> = reps.iter().map(f).collect();
                median(&mut v)
            };
            let median = engine::Micro {
                forward_ns: med(|m| m.forward_ns),
                backward_ns: med(|m| m.backward_ns),
                kept_bytes: med(|m| m.kept_bytes),
                alloc_bytes: med(|m| m.alloc_bytes),
                allocs: med(|m| m.allocs),
                backward_allocs: med(|m| m.backward_allocs),
            };
            eprintln!(
                "   micro {backend} {:<28} fwd {:>7.0} ns/op  bwd {:>7.0} ns/op  kept {:>6.0} B/op  {:>5.1} allocs/op",
                e.label(),
                median.forward_ns,
                median.backward_ns,
                median.kept_bytes,
                median.allocs
            );
            MicroRun {
                backend: backend.into(),
                label: e.label(),
                engine: e.engine().into(),
                policy: e.policy(),
                ops: opts.micro_ops,
                reps,
                median,
            }
        })
        .collect()
}

fn real_main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("--capacity-child") {
        return capacity::child(&args.next().ok_or("--capacity-child needs a trial")?);
    }
    let opts = parse_args()?;
    if opts.capacity {
        return run_capacity(&opts);
    }
    // NOTE [bench-op-costs]: the step table's budget rows plan with the op costs asked for,
    // measured by default, so that the planner's floors and predictions are in this
    // machine's time and can be held against the measured steps. With remat's default
    // (`OpCosts::Estimated`) every process plans the same schedule, but the estimates are a
    // model of a different machine: on the 2026-12-06 run they added up to 2.2-4.9x the
    // measured forward pass, and every floor was inflated as much. The capacity table
    // (`--capacity`) keeps the default: it is what a user's program gets.
    remat::set_op_costs(opts.op_costs);
    let json_path = opts.out.join("results.json");
    let mut results = if opts.report_only {
        let text = std::fs::read_to_string(&json_path)
            .map_err(|e| format!("{}: {e}", json_path.display()))?;
        let mut results =
            serde_json::from_str::<Results>(&text).map_err(|e| format!("results.json: {e}"))?;
        // Checks added since the run was recorded (its other problems are kept as found).
        for run in &mut results.runs {
            if let Some(problem) = report::op_times_off(run)
                && !run.problems.contains(&problem)
            {
                run.problems.push(problem);
            }
        }
        results
    } else if opts.processes > 1 {
        run_processes(&opts)?
    } else {
        let mut runs = Vec::new();
        for &kind in &opts.models {
            for backend in &opts.backends {
                runs.push(run_model(&opts, kind, backend)?);
            }
        }
        let mut micro = Vec::new();
        if opts.micro {
            for backend in &opts.backends {
                eprintln!(
                    "== per-op micro-benchmark on {backend}: {} ops",
                    opts.micro_ops
                );
                micro.extend(run_micro(&opts, backend));
            }
        }
        Results {
            meta: Meta {
                op_costs: op_costs_name(opts.op_costs).into(),
                ..Meta::collect(opts.steps, opts.warmup, opts.micro_ops)
            },
            runs,
            micro,
            ratios: Vec::new(),
        }
    };
    report::compact(&mut results);
    let ratios = report::ratios(&results);
    results.ratios = ratios.clone();
    let text = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, text).map_err(|e| format!("{}: {e}", json_path.display()))?;
    println!("{}", report::table(&results, &ratios));
    report::write_markdown(&results, &ratios, &opts.out.join("RESULTS.md"))?;
    report::trace_svg(&results, &opts.out.join("memory_over_time.svg"))?;
    report::tradeoff_svg(&results, &opts.out.join("memory_vs_time.svg"))?;
    report::budget_svg(&results, &opts.out.join("budget_pareto.svg"))?;
    let problems: Vec<&String> = results.runs.iter().flat_map(|r| &r.problems).collect();
    if !problems.is_empty() {
        return Err(format!(
            "checks failed (gradients, budgets):\n{}",
            problems
                .iter()
                .map(|p| format!("  {p}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    Ok(())
}

/// How [`Meta::op_costs`] names remat's op-cost source.
fn op_costs_name(costs: remat::OpCosts) -> &'static str {
    match costs {
        remat::OpCosts::Measured => "measured",
        remat::OpCosts::Estimated => "estimated",
    }
}

/// Runs this command in `--processes` child processes, one after the other, each with
/// `--processes 1` into a directory of its own under `--out`, and joins their results
/// (`report::merge`); the directories are removed after.
fn run_processes(opts: &Opts) -> Result<Results, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut all = Vec::new();
    for k in 1..=opts.processes {
        let dir = opts.out.join(format!("process-{k}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        eprintln!("== process {k} of {}", opts.processes);
        // A child whose checks failed exits 1 after writing its results: they are joined,
        // and checked again together.
        let mut child = std::process::Command::new(&exe);
        child.args(&args);
        if k > 1 {
            // The per-op micro-benchmark is the first process's.
            child.arg("--no-micro");
        }
        let status = child
            .arg("--processes")
            .arg("1")
            .arg("--out")
            .arg(&dir)
            .status()
            .map_err(|e| format!("spawn: {e}"))?;
        let path = dir.join("results.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("process {k} ({status}) left no {}: {e}", path.display()))?;
        all.push(
            serde_json::from_str::<Results>(&text)
                .map_err(|e| format!("{}: {e}", path.display()))?,
        );
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut merged = report::merge(all)?;
    merged.meta.command = Meta::collect(opts.steps, opts.warmup, opts.micro_ops).command;
    Ok(merged)
}

/// `--capacity` (`capacity.rs`): the models at their default sizes on the first backend.
fn run_capacity(opts: &Opts) -> Result<(), String> {
    let backend = opts.backends[0].clone();
    if backend == "wgpu" {
        return Err("--capacity caps the process's heap: run it on flex or ndarray".into());
    }
    let bench = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let copts = capacity::CapacityOpts {
        configs: opts
            .models
            .iter()
            .map(|&kind| config(opts, kind, &backend))
            .collect(),
        backend,
        steps: opts.steps.max(capacity::STEADY_FROM + 1),
        runs: opts.runs,
        profile_percents: opts.profile_percents.clone(),
        search_percent: opts.capacity_percent,
        cap_bytes: opts.cap_mib.map(|m| m << 20),
        out: if opts.out_given {
            opts.out.clone()
        } else {
            bench.join("capacity")
        },
        readme: opts.update_readme.then(|| bench.join("../README.md")),
    };
    if opts.report_only {
        return capacity::report_only(&copts);
    }
    capacity::run(&copts)
}

fn main() {
    // Deep graphs (the 100k-op micro-benchmark) on a generous stack, for either engine.
    let worker = std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(real_main)
        .expect("spawn the benchmark thread");
    match worker.join() {
        Ok(Ok(())) => {}
        Ok(Err(message)) => {
            eprintln!("bench: {message}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("bench: the benchmark panicked");
            std::process::exit(2);
        }
    }
}
