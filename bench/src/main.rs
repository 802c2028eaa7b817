//! `bench`: remat vs Burn's own autodiff, side by side in one process (issue 4).
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml -- [flags]
//!   --models mlp,transformer,convnet   --backends flex,ndarray
//!   --engines burn,burn-balanced,saveall,balanced,recomputeall,regions (default: all)
//!   --steps N (timed steps, default 5)  --warmup N (default 1)
//!   --batch N | --batch mlp=128,transformer=2 --layers N (override every model)  --seq N (transformer)
//!   --conv-batch-ndarray N (convnet batch on NdArray, default 2: its conv backward is slow)
//!   --micro-ops N (default 100000)  --micro-reps N (default 3)  --no-micro
//!   --report-only (regenerate RESULTS.md and the SVGs from results.json)
//!   --out DIR (default: the bench directory)
//! ```
//!
//! Cargo reads `.cargo/config.toml` from the current directory, not from the manifest's: to
//! reuse the oracle's compiled Burn (`target-dir = "../oracle/target"`), run from `bench/`
//! (`cd bench && cargo run --release -- ...`) or set `CARGO_TARGET_DIR=oracle/target`.
//!
//! Engines are measured in rounds (every engine once per round, the order rotating), so a
//! ratio is taken between steps run close in time: the machine is shared.

mod alloc;
mod engine;
mod models;
mod report;

use std::path::PathBuf;
use std::sync::Arc;

use engine::{Engine, Runner};
use models::{Config, Kind, Spec};
use report::{EngineRun, Meta, MicroRun, ModelRun, Results};

/// NdArray is deprecated in Burn 0.22 (in favour of Flex) but still a reference point.
#[allow(deprecated)]
type NdArray = burn_ndarray::NdArray;

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
    report_only: bool,
    out: PathBuf,
}

fn parse_args() -> Result<Opts, String> {
    let mut opts = Opts {
        models: vec![Kind::Mlp, Kind::Transformer, Kind::Convnet],
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
        report_only: false,
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
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
                    .find(|b| *b != "flex" && *b != "ndarray")
                {
                    return Err(format!("unknown backend {b}"));
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
            "--report-only" => opts.report_only = true,
            "--out" => opts.out = PathBuf::from(args.next().ok_or("--out needs a value")?),
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
    if let Some(b) = opts.batch {
        c.batch = b;
    }
    if let Some(&(_, b)) = opts.model_batch.iter().find(|(k, _)| *k == kind) {
        c.batch = b;
    }
    if let Some(l) = opts.layers {
        c.layers = l;
    }
    if let (Some(s), Kind::Transformer) = (opts.seq, kind) {
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
        _ => engine::runner::<NdArray>(engine, spec),
    }
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

fn run_model(opts: &Opts, kind: Kind, backend: &str) -> ModelRun {
    let config = config(opts, kind, backend);
    let description = config.describe();
    eprintln!("== {} on {backend}: {description}", kind.name());
    let spec = Arc::new(Spec::new(config.clone()));
    let mut runners: Vec<(Engine, Runner)> = opts
        .engines
        .iter()
        .map(|&e| (e, make_runner(backend, e, spec.clone())))
        .collect();
    let n = runners.len();
    for round in 0..opts.warmup {
        for (engine, run) in runners.iter_mut() {
            let s = run(false);
            eprintln!(
                "   warm-up {round} {:<28} {:>9.1} ms",
                engine.label(),
                s.ns as f64 / 1e6
            );
        }
    }
    let mut samples: Vec<Vec<engine::Sample>> = (0..n).map(|_| Vec::new()).collect();
    for round in 0..opts.steps {
        for k in 0..n {
            let i = (k + round) % n;
            let (engine, run) = &mut runners[i];
            let s = run(false);
            eprintln!(
                "   step {round} {:<28} {:>9.1} ms  peak {:>8.1} MB  kept {:>8.1} MB",
                engine.label(),
                s.ns as f64 / 1e6,
                s.peak as f64 / 1e6,
                s.kept as f64 / 1e6
            );
            samples[i].push(s);
        }
    }
    let mut engines = Vec::new();
    for ((engine, run), samples) in runners.iter_mut().zip(samples) {
        let trace = run(true).trace;
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
            policy: engine.policy().into(),
            median_ms,
            min_ms: sorted[0],
            max_ms: sorted[sorted.len() - 1],
            times_ms,
            forward_ms,
            peak_bytes: median(&mut peaks) as u64,
            kept_bytes: median(&mut kepts) as i64,
            remat_kept_bytes: last.remat_kept,
            replays: last.replays,
            fingerprint: last.fingerprint.clone(),
            deterministic: samples
                .iter()
                .all(|s| s.fingerprint.hash == last.fingerprint.hash),
            trace,
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
        agree: true,
        remat_bit_identical: true,
        problems: Vec::new(),
    };
    report::check(&mut run);
    run
}

fn run_micro(opts: &Opts, backend: &str) -> Vec<MicroRun> {
    let engines = [
        Engine::BurnNone,
        Engine::BurnBalanced,
        Engine::RematSaveAll,
        Engine::RematBalanced,
    ];
    let mut reps: Vec<Vec<engine::Micro>> = vec![Vec::new(); engines.len()];
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
                policy: e.policy().into(),
                ops: opts.micro_ops,
                reps,
                median,
            }
        })
        .collect()
}

fn real_main() -> Result<(), String> {
    let opts = parse_args()?;
    let json_path = opts.out.join("results.json");
    let mut results = if opts.report_only {
        let text = std::fs::read_to_string(&json_path)
            .map_err(|e| format!("{}: {e}", json_path.display()))?;
        serde_json::from_str::<Results>(&text).map_err(|e| format!("results.json: {e}"))?
    } else {
        let mut runs = Vec::new();
        for &kind in &opts.models {
            for backend in &opts.backends {
                runs.push(run_model(&opts, kind, backend));
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
            meta: Meta::collect(opts.steps, opts.warmup, opts.micro_ops),
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
    let problems: Vec<&String> = results.runs.iter().flat_map(|r| &r.problems).collect();
    if !problems.is_empty() {
        return Err(format!(
            "gradient checks failed:\n{}",
            problems
                .iter()
                .map(|p| format!("  {p}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    Ok(())
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
