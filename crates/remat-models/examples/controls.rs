//! Every snippet of README's "Choosing what is kept" section, run for real on a small Burn
//! model on Flex: process-wide policies (`set_policy`, `reset_policy`, `policy`), a scope
//! (`with_policy`), per-block regions (`checkpoint`), worker threads, and what is kept
//! (`stats`, `saved_values`).
//!
//! ```sh
//! cargo run --release -p remat-models --example controls
//! ```
//!
//! Every variant computes the same gradients, bit for bit, and `keep_names(&["matmul"])`
//! keeps fewer bytes than SaveAll: the example checks both.

// The README snippets are kept verbatim (`let logits = ..; logits`).
#![allow(clippy::let_and_return)]

use burn::module::Module;
use burn::nn::{Gelu, Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use remat_models::programs::{Named, collect_grads, synthetic};

const WIDTH: usize = 64;
const BATCH: usize = 32;
const BLOCKS: usize = 4;

/// One block: Linear + GELU.
#[derive(Module, Debug)]
struct Block {
    linear: Linear,
    gelu: Gelu,
}

impl Block {
    fn new(device: &Device) -> Self {
        Self {
            linear: LinearConfig::new(WIDTH, WIDTH).init(device),
            gelu: Gelu::new(),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.gelu.forward(self.linear.forward(x))
    }
}

/// A stack of blocks and a read-out to one value per row.
#[derive(Module, Debug)]
struct Model {
    blocks: Vec<Block>,
    head: Linear,
}

impl Model {
    fn new(device: &Device) -> Self {
        Self {
            blocks: (0..BLOCKS).map(|_| Block::new(device)).collect(),
            head: LinearConfig::new(WIDTH, 1).init(device),
        }
    }

    /// The plain forward pass: `[BATCH, WIDTH] -> [BATCH, 1]`.
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let x = self.blocks.iter().fold(x, |x, block| block.forward(x));
        self.head.forward(x)
    }
}

/// What one training step kept and replayed, and its gradients.
struct Run {
    /// Bytes remat kept after the forward pass (leaves aside).
    kept: u64,
    replays: u64,
    grads: Vec<Named>,
}

/// Runs one training step (forward, backward) with `forward`, printing what was kept after
/// the forward pass and how many values backward replayed.
fn step(
    label: &str,
    model: &Model,
    x: &Tensor<2>,
    forward: impl FnOnce(Tensor<2>) -> Tensor<2>,
) -> Run {
    remat::reset_stats();
    let loss = forward(x.clone()).powi_scalar(2).mean();
    let kept = remat::stats();
    let grads = GradientsParams::from_grads(loss.backward(), model);
    let after = remat::stats();
    let values: u64 = kept
        .kept_by_reason
        .iter()
        .filter(|(reason, _)| **reason != remat::KeepReason::Leaf)
        .map(|(_, count)| count)
        .sum();
    println!(
        "{label:<52} kept {:>6} B in {values:>2} values, {:>2} replays in backward",
        kept.live_bytes, after.replays
    );
    Run {
        kept: kept.live_bytes,
        replays: after.replays,
        grads: collect_grads(model, &grads),
    }
}

/// Runs [`step`] on a thread of its own, as burn-train's `Learner` runs the model on
/// worker threads.
fn step_on_a_thread(label: &'static str, model: &Model, x: &Tensor<2>) -> Run {
    let (model, x) = (model.clone(), x.clone());
    std::thread::spawn(move || step(label, &model, &x, |x| model.forward(x)))
        .join()
        .expect("the worker thread's step")
}

fn bit_identical(a: &[Named], b: &[Named]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.name == b.name
                && a.values.len() == b.values.len()
                && a.values
                    .iter()
                    .zip(&b.values)
                    .all(|(x, y)| x.to_bits() == y.to_bits())
        })
}

/// The model and input on `device`, seeded identically on every device.
fn setup(device: &Device) -> (Model, Tensor<2>) {
    device.seed(0);
    let model = Model::new(device);
    let input = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * WIDTH, 1), [BATCH, WIDTH]),
        device,
    );
    (model, input)
}

fn main() {
    // Plain `device.autodiff()` (Burn's `NoCheckpointing`): keeps everything by default and
    // follows whatever policy is set.
    let device = Device::flex().autodiff();
    let (model, input) = setup(&device);
    let mut runs = Vec::new();

    println!("## Policies, process-wide: set_policy\n");
    println!("remat::policy(): {}\n", remat::policy());
    let save_all = step("nothing set, device.autodiff()", &model, &input, |x| {
        model.forward(x)
    });
    {
        let checkpointing = Device::flex().autodiff().gradient_checkpointing();
        let (model, input) = setup(&checkpointing);
        let run = step(
            "nothing set, gradient_checkpointing()",
            &model,
            &input,
            |x| model.forward(x),
        );
        runs.push(run.grads);
    }
    // The names of the ops whose values SaveAll keeps on this model, as `saved_values`
    // lists them: Burn's `Linear` records `matmul` (and `reshape` + `add` for its bias).
    let names = {
        let loss = model.forward(input.clone());
        let mut names: Vec<&str> = remat::saved_values().0.iter().map(|v| v.op).collect();
        names.sort_unstable();
        names.dedup();
        drop(loss);
        names
    };
    println!("  ops holding kept values under SaveAll (remat::saved_values): {names:?}");
    assert!(
        names.contains(&"matmul") && !names.contains(&"linear"),
        "Burn's Linear records matmul (then add for the bias): keep_names must name them"
    );
    let keep_names = {
        // README snippet.
        use remat::{Cost, Policy, Selector};
        let policies = [
            ("set_policy(RecomputeAll)", Policy::RecomputeAll),
            (
                "set_policy(Selective(keep_costs([Compute])))",
                Policy::Selective(Selector::keep_costs(&[Cost::Compute])),
            ),
            (
                "set_policy(Selective(keep_names([matmul])))",
                Policy::Selective(Selector::keep_names(&["matmul"])),
            ),
            (
                "set_policy(Selective(keep_names([matmul]).or(keep_at_most(4096))))",
                Policy::Selective(
                    Selector::keep_names(&["matmul"]).or(Selector::keep_at_most(4096)),
                ),
            ),
            ("set_policy(Balanced)", Policy::Balanced),
        ];
        let mut keep_names = None;
        for (label, policy) in policies {
            remat::set_policy(policy);
            let run = step(label, &model, &input, |x| model.forward(x));
            if label == "set_policy(Selective(keep_names([matmul])))" {
                keep_names = Some(run.kept);
            }
            runs.push(run.grads);
        }
        println!("\nremat::policy(): {}\n", remat::policy());
        remat::reset_policy(); // back to each strategy's default
        keep_names.expect("the keep_names run")
    };
    let run = step("reset_policy()", &model, &input, |x| model.forward(x));
    assert_eq!(
        (run.kept, run.replays),
        (save_all.kept, 0),
        "reset_policy gives device.autodiff() its default back: SaveAll"
    );
    runs.push(run.grads);
    assert!(
        keep_names < save_all.kept,
        "keep_names([matmul]) kept {keep_names} B, SaveAll {} B: it must save memory",
        save_all.kept
    );

    println!("\n## A scope: with_policy\n");
    runs.push(
        step("with_policy(RecomputeAll)", &model, &input, |x| {
            // README snippet.
            let logits = remat::with_policy(remat::Policy::RecomputeAll, || model.forward(x));
            logits
        })
        .grads,
    );

    println!("\n## Regions: checkpoint\n");
    let blocks = &model.blocks;
    runs.push(
        step("one checkpoint region per block", &model, &input, |input| {
            // README snippet.
            let mut x = input;
            for block in blocks {
                x = remat::checkpoint(|| block.forward(x.clone()));
            }
            model.head.forward(x)
        })
        .grads,
    );

    println!("\n## Worker threads\n");
    remat::set_policy(remat::Policy::RecomputeAll);
    let here = step(
        "set_policy(RecomputeAll), this thread",
        &model,
        &input,
        |x| model.forward(x),
    );
    let there = step_on_a_thread("set_policy(RecomputeAll), a worker thread", &model, &input);
    remat::reset_policy();
    assert_eq!(
        (there.kept, there.replays),
        (here.kept, here.replays),
        "set_policy is process-wide: it reaches worker threads"
    );
    let scoped = remat::with_policy(remat::Policy::RecomputeAll, || {
        step_on_a_thread(
            "with_policy(RecomputeAll) here, a worker thread",
            &model,
            &input,
        )
    });
    assert_eq!(
        (scoped.kept, scoped.replays),
        (save_all.kept, 0),
        "a scope is per thread: the worker thread keeps the default"
    );
    runs.extend([here.grads, there.grads, scoped.grads]);

    println!("\n## What is kept, exactly: stats and saved_values\n");
    let x = input.clone();
    // README snippet.
    remat::reset_stats();
    let loss = model.forward(x).powi_scalar(2).mean();
    println!("{}", remat::stats()); // bytes kept now / peak, by reason; replays by op
    println!("{}", remat::saved_values()); // one line per kept value: op, shape, dtype, bytes, why
    let grads = loss.backward();
    runs.push(collect_grads(
        &model,
        &GradientsParams::from_grads(grads, &model),
    ));
    println!("\nafter backward:\n{}", remat::stats());

    let identical = runs.iter().all(|run| bit_identical(&save_all.grads, run));
    println!(
        "\ngradients bit-identical to SaveAll in all {} runs: {identical}",
        runs.len()
    );
    assert!(identical, "a control changed the gradients");
}
