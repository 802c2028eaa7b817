//! Every snippet of README's "Choosing what is kept" section, run for real on a small Burn
//! model on Flex: process-wide policies (`set_policy`), a scope (`with_policy`), per-block
//! regions (`checkpoint`), and what is kept (`stats`, `saved_values`).
//!
//! ```sh
//! cargo run -p remat-models --example controls
//! ```
//!
//! Every variant computes the same gradients, bit for bit: the example checks it.

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

/// Runs one training step (forward, backward) with `forward`, printing what was kept after
/// the forward pass and how many values backward replayed; returns the gradients.
fn step(
    label: &str,
    model: &Model,
    x: &Tensor<2>,
    forward: impl FnOnce(Tensor<2>) -> Tensor<2>,
) -> Vec<Named> {
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
    collect_grads(model, &grads)
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

fn main() {
    // Graphs recorded on this device follow the policy set with `remat::set_policy`.
    let device = Device::flex().autodiff().gradient_checkpointing();
    device.seed(0);
    let model = Model::new(&device);
    let input = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * WIDTH, 1), [BATCH, WIDTH]),
        &device,
    );
    let mut runs = Vec::new();

    println!("## Policies, process-wide: set_policy\n");
    {
        // README snippet.
        use remat::{Cost, Policy, Selector};
        let policies = [
            ("set_policy(RecomputeAll)", Policy::RecomputeAll),
            (
                "set_policy(Selective(keep_costs([Compute])))",
                Policy::Selective(Selector::keep_costs(&[Cost::Compute])),
            ),
            (
                "set_policy(Selective(keep_names([matmul, linear])))",
                Policy::Selective(Selector::keep_names(&["matmul", "linear"])),
            ),
            ("set_policy(Balanced)", Policy::Balanced),
        ];
        for (label, policy) in policies {
            remat::set_policy(policy);
            runs.push(step(label, &model, &input, |x| model.forward(x)));
        }
    }
    // `device.autodiff()` (Burn's `NoCheckpointing`) keeps everything whatever the policy set.
    {
        let plain = Device::flex().autodiff();
        plain.seed(0);
        let model = Model::new(&plain);
        let input = Tensor::<2>::from_data(input.to_data(), &plain);
        remat::set_policy(remat::Policy::RecomputeAll);
        runs.push(step(
            "set_policy(RecomputeAll), device.autodiff()",
            &model,
            &input,
            |x| model.forward(x),
        ));
        remat::set_policy(remat::Policy::Balanced);
    }
    let save_all = step("with_policy(SaveAll)", &model, &input, |x| {
        remat::with_policy(remat::Policy::SaveAll, || model.forward(x))
    });

    println!("\n## A scope: with_policy\n");
    runs.push(step("with_policy(RecomputeAll)", &model, &input, |x| {
        // README snippet.
        let logits = remat::with_policy(remat::Policy::RecomputeAll, || model.forward(x));
        logits
    }));

    println!("\n## Regions: checkpoint\n");
    let blocks = &model.blocks;
    runs.push(step(
        "one checkpoint region per block",
        &model,
        &input,
        |input| {
            // README snippet.
            let mut x = input;
            for block in blocks {
                x = remat::checkpoint(|| block.forward(x.clone()));
            }
            model.head.forward(x)
        },
    ));

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

    let identical = runs.iter().all(|run| bit_identical(&save_all, run));
    println!(
        "\ngradients bit-identical to SaveAll in all {} runs: {identical}",
        runs.len()
    );
    assert!(identical, "a control changed the gradients");
    remat::set_policy(remat::Policy::Balanced);
}
