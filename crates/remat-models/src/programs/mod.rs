//! Small Burn model programs, written once and run twice: on remat (the patched build of this
//! crate) and on Burn's own autodiff (the `oracle/` workspace includes these very files with
//! `#[path]`). Each program seeds its device, builds a model with fixed initial weights, trains
//! it for [`STEPS`] Adam steps on fixed synthetic data and returns a [`TrainReport`].
//!
//! # Invariants
//! - Only `burn` (and `std`) is used here, through paths relative to this module (`super::`),
//!   so that the files compile unchanged in both workspaces.
//! - Synthetic data does not draw from the backend's RNG (see [`synthetic`]), so only weight
//!   initialisation and dropout consume random numbers, in the same order on both engines.

pub mod cnn;
pub mod conv1d;
pub mod decoder;
pub mod finetune;
/// Needs Burn's `train` feature (burn-train), behind this crate's `learner` feature (a default
/// of `remat-models` and `oracle/`; the GPU workspaces leave it off, their builds skip
/// burn-train and the Flex backend it brings).
#[cfg(feature = "learner")]
pub mod learner;
pub mod losses;
pub mod lstm;
pub mod mlp;
pub mod recurrent;
pub mod spectral;
pub mod transformer;
pub mod vision;

use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{DType, Device, Tensor};

/// Number of optimizer steps every program runs.
pub const STEPS: usize = 20;

/// Adam learning rate used by every program.
pub const LEARNING_RATE: f64 = 1e-2;

/// A named flat vector of values (a parameter or a gradient, flattened row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    /// Parameter path in the module tree, e.g. `layers.0.mha.query.weight`.
    pub name: String,
    /// Values, row-major.
    pub values: Vec<f32>,
}

/// What one training run produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainReport {
    /// Loss before each optimizer step (`STEPS` values).
    pub losses: Vec<f32>,
    /// Gradient of every trainable parameter at the first step.
    pub grads: Vec<Named>,
    /// Every float parameter (including running statistics) after the last step.
    pub params: Vec<Named>,
}

/// A model program: trains on the given autodiff device and reports.
pub type Program = fn(&Device) -> TrainReport;

/// Every program, by name.
pub fn all() -> Vec<(&'static str, Program)> {
    #[allow(unused_mut)]
    let mut all = vec![
        ("mlp", mlp::run as Program),
        ("cnn", cnn::run as Program),
        ("transformer", transformer::run as Program),
        ("lstm", lstm::run as Program),
        ("conv1d", conv1d::run as Program),
        ("recurrent", recurrent::run as Program),
        ("decoder", decoder::run as Program),
        ("vision", vision::run as Program),
        ("losses", losses::run as Program),
        ("lora", finetune::run_lora as Program),
        ("qlora", finetune::run_qlora as Program),
        ("spectral", spectral::run as Program),
    ];
    #[cfg(feature = "learner")]
    all.extend([
        ("learner", learner::run as Program),
        (
            "learner_checkpointing",
            learner::run_checkpointing as Program,
        ),
    ]);
    all
}

/// Serializes program runs within a process.
///
/// Backends such as Flex keep one process-wide RNG, so two programs seeding and drawing
/// concurrently (parallel tests) would interleave their random numbers. Every program holds
/// this guard for its whole run.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Deterministic synthetic values in `[-1, 1)`, independent of any backend RNG.
///
/// A 64-bit LCG (Knuth's MMIX constants); the top 24 bits give the mantissa.
pub fn synthetic(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(0x2545_F491_4F6C_DD1D);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            unit * 2.0 - 1.0
        })
        .collect()
}

/// Deterministic synthetic class labels in `0..classes`.
pub fn synthetic_labels(len: usize, classes: usize, seed: u64) -> Vec<i64> {
    synthetic(len, seed)
        .into_iter()
        .map(|v| (((v + 1.0) * 0.5 * classes as f32) as usize).min(classes - 1) as i64)
        .collect()
}

/// Visits every float parameter, tracking its path in the module tree.
struct Collect<'a> {
    path: Vec<String>,
    grads: Option<&'a GradientsParams>,
    out: Vec<Named>,
}

impl Collect<'_> {
    fn name(&self) -> String {
        self.path.join(".")
    }
}

impl ModuleVisitor for Collect<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let name = self.name();
        let tensor = match self.grads {
            Some(grads) => match grads.get::<D>(param.id) {
                Some(grad) => grad,
                None => return,
            },
            None => param.val(),
        };
        // A quantized base weight (QLoRA) is read back through its float value.
        let tensor = if matches!(tensor.dtype(), DType::QFloat(_)) {
            tensor.dequantize()
        } else {
            tensor
        };
        let values = tensor
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .expect("float parameter data");
        self.out.push(Named { name, values });
    }
}

/// Every float parameter of `module`, flattened, in visiting order.
pub fn collect_params<M: Module>(module: &M) -> Vec<Named> {
    let mut visitor = Collect {
        path: Vec::new(),
        grads: None,
        out: Vec::new(),
    };
    module.visit(&mut visitor);
    visitor.out
}

/// The gradient in `grads` of every float parameter of `module` that has one.
pub fn collect_grads<M: Module>(module: &M, grads: &GradientsParams) -> Vec<Named> {
    let mut visitor = Collect {
        path: Vec::new(),
        grads: Some(grads),
        out: Vec::new(),
    };
    module.visit(&mut visitor);
    visitor.out
}

/// Trains `model` for [`STEPS`] optimizer steps at learning rate `lr`: `loss` gives the
/// step's scalar loss. Reports every loss, the first step's gradients and the final
/// parameters.
pub fn train<M: Module>(
    mut model: M,
    mut optim: ModuleOptimizer,
    lr: f64,
    mut loss: impl FnMut(&M) -> Tensor<1>,
) -> TrainReport {
    let mut report = TrainReport::default();
    for step in 0..STEPS {
        let loss = loss(&model);
        report.losses.push(scalar(&loss));
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        if step == 0 {
            report.grads = collect_grads(&model, &grads);
        }
        model = optim.step(lr, model, grads);
    }
    report.params = collect_params(&model);
    report
}

/// The single value of a scalar loss tensor.
pub fn scalar(loss: &Tensor<1>) -> f32 {
    loss.clone()
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("scalar loss")[0]
}

/// Serializes a report as text: one line per vector, `kind<TAB>name<TAB>v v v ...`, values
/// in Rust's shortest round-trip form (so parsing gives back the exact `f32`).
pub fn to_text(report: &TrainReport) -> String {
    let mut out = String::new();
    let mut line = |kind: &str, name: &str, values: &[f32]| {
        let _ = write!(out, "{kind}\t{name}\t");
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{v:?}");
        }
        out.push('\n');
    };
    line("loss", "loss", &report.losses);
    for g in &report.grads {
        line("grad", &g.name, &g.values);
    }
    for p in &report.params {
        line("param", &p.name, &p.values);
    }
    out
}

/// Parses the output of [`to_text`].
pub fn from_text(text: &str) -> Result<TrainReport, String> {
    let mut report = TrainReport::default();
    for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let mut fields = line.splitn(3, '\t');
        let (Some(kind), Some(name), Some(values)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(format!(
                "line {}: expected 3 tab-separated fields",
                number + 1
            ));
        };
        let values = values
            .split_ascii_whitespace()
            .map(|v| v.parse::<f32>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("line {}: {e}", number + 1))?;
        let named = Named {
            name: name.to_string(),
            values,
        };
        match kind {
            "loss" => report.losses = named.values,
            "grad" => report.grads.push(named),
            "param" => report.params.push(named),
            other => return Err(format!("line {}: unknown kind {other:?}", number + 1)),
        }
    }
    Ok(report)
}
