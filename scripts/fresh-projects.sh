#!/usr/bin/env bash
# The drop-in, tried as a new user would (part of the test command, scripts/test.sh).
#
# Generates two Burn user projects outside the workspace and sets each one up exactly as
# README.md's "Setup" section says (one `[patch.crates-io]` line, remat's controls reached
# through the patched crate, `cargo update -p burn-autodiff`):
#
#   newest  `burn = "0.22"` on a fresh machine: resolves to the newest Burn 0.22.x release;
#   pinned  `burn = "=0.22.0"` with a Cargo.lock written before 0.22.1 existed (every Burn
#           crate at 0.22.0, Burn's own burn-autodiff among them);
#   stale   the pinned project with README.md's step 3 (`cargo update -p burn-autodiff`)
#           skipped: the patch cannot apply, and the build must FAIL (remat's controls do not
#           exist in Burn's own burn-autodiff) rather than train silently without remat.
#
# Each must resolve `burn-autodiff` to this repository's crates/burn-autodiff (checked with
# `cargo tree -i burn-autodiff`), build without cargo's "patch ... was not used" warning (an
# error here: an unused patch silently trains on Burn's own autodiff), and run a small
# training program that asserts it ran on remat (replays counted, gradients equal to a
# SaveAll run).
#
# Usage: scripts/fresh-projects.sh [newest|pinned|stale]...   (all by default)
# Both projects build into $CARGO_TARGET_DIR (default: target/ of this repository), with the
# workspace's profile, so whatever they share with the test workspace is built once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
WORK="${REMAT_FRESH_DIR:-$CARGO_TARGET_DIR/fresh-projects}"
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(newest pinned stale)

fail() {
    printf '\nFAILED (fresh project %s): %s\n' "$1" "$2" >&2
    exit 1
}

# Burn features of the generated projects: a CPU backend, autodiff and the optimizers.
FEATURES='default-features = false, features = ["std", "flex", "autodiff", "optim"]'

# The project's Cargo.toml. $1: burn requirement, $2: case name, $3: `user` (set up as README.md
# says) or `old` (before remat was added, with every Burn crate that has a 0.22.0 release pinned
# to it: what a lock written before 0.22.1 existed holds; burn-std has no 0.22.0).
manifest() {
    cat <<EOF
[package]
name = "remat-fresh-$2"
version = "0.1.0"
edition = "2024"
publish = false

# A project of its own, even when generated inside this repository's target directory.
[workspace]

[dependencies]
burn = { version = "$1", $FEATURES }
EOF
    if [ "$3" = old ]; then
        for c in burn-core burn-dispatch burn-tensor burn-backend burn-autodiff burn-nn burn-optim \
            burn-flex burn-ir; do
            printf '%s = { version = "=0.22.0", default-features = false }\n' "$c"
        done
    else
        cat <<EOF
# remat's controls, reached through the patched crate (README.md, "Setup"): if the patch
# below did not apply, this is Burn's own burn-autodiff and \`remat::set_policy\` fails to compile.
remat = { package = "burn-autodiff", version = "0.22" }

[patch.crates-io]
burn-autodiff = { path = "$ROOT/crates/burn-autodiff" }
EOF
    fi
    cat <<EOF

# The test workspace's profile, so that the builds share the target directory.
[profile.dev]
opt-level = 1
debug = "line-tables-only"

[profile.dev.package."*"]
opt-level = 3
debug = false
EOF
}

program() {
    cat <<'EOF'
//! A small Burn training program, written as a Burn user would, that must run on remat.
use std::sync::atomic::{AtomicBool, Ordering};

use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Gelu, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};

/// Whether `Net::forward` wraps each block in a remat region.
static REGIONS: AtomicBool = AtomicBool::new(true);

#[derive(Module, Debug)]
struct Net {
    blocks: Vec<Linear>,
    head: Linear,
    gelu: Gelu,
}

impl Net {
    fn new(device: &Device) -> Self {
        Self {
            blocks: (0..3).map(|_| LinearConfig::new(32, 32).init(device)).collect(),
            head: LinearConfig::new(32, 1).init(device),
            gelu: Gelu::new(),
        }
    }

    fn forward(&self, mut x: Tensor<2>) -> Tensor<2> {
        for block in &self.blocks {
            x = if REGIONS.load(Ordering::Relaxed) {
                // A remat region per block: GELU's backward reads its input, the linear's output,
                // which the region drops and rebuilds in backward.
                remat::checkpoint(|| self.gelu.forward(block.forward(x.clone())))
            } else {
                self.gelu.forward(block.forward(x))
            };
        }
        self.head.forward(x)
    }
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// Trains for a few Adam steps; returns the losses and the replays of the first step.
fn train(device: &Device) -> (Vec<f32>, u64) {
    device.seed(3);
    let mut model = Net::new(device);
    let x = Tensor::<2>::from_data(TensorData::new(data(16 * 32, 1), [16, 32]), device);
    let y = Tensor::<2>::from_data(TensorData::new(data(16, 2), [16, 1]), device);
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::new();
    let mut replays = None;
    for _ in 0..4 {
        remat::reset_stats();
        let loss = MseLoss::new().forward(model.forward(x.clone()), y.clone(), Reduction::Mean);
        losses.push(loss.clone().into_data().try_to_vec::<f32>().unwrap()[0]);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        replays.get_or_insert(remat::stats().replays);
        model = optim.step(1e-2, model, grads);
    }
    (losses, replays.unwrap())
}

fn main() {
    let device = Device::flex().autodiff();
    let (losses, replays) = train(&device);
    assert!(remat::is_active(), "remat recorded no graph: the patch is not active");
    // Each of the 3 regions rebuilds the values its backward reads.
    assert!(replays > 0, "the regions replayed nothing: the patch is not active");
    REGIONS.store(false, Ordering::Relaxed);
    let (kept_all, none) = train(&device);
    assert_eq!(none, 0, "plain autodiff() without regions keeps every value");
    assert_eq!(losses, kept_all, "a rebuilt value differs from the kept one");
    assert!(losses[3] < losses[0], "did not train: {losses:?}");
    println!("trained on remat: {replays} replays per step, losses {losses:?}");
}
EOF
}

run_case() {
    local name="$1" dir="$WORK/$1"
    printf '\n--- fresh project: %s (%s)\n' "$name" "$dir"
    rm -rf "$dir"
    mkdir -p "$dir/src"
    program >"$dir/src/main.rs"
    case "$name" in
    newest)
        manifest "0.22" newest user >"$dir/Cargo.toml"
        ;;
    pinned | stale)
        # A lock written when 0.22.0 was the newest release: the project without remat, with
        # every Burn crate that has a 0.22.0 release locked at it (burn-std has none).
        manifest "=0.22.0" "$name" old >"$dir/Cargo.toml"
        (cd "$dir" && cargo generate-lockfile -q) || fail "$name" "could not write the old lock"
        grep -A1 '^name = "burn-autodiff"' "$dir/Cargo.lock" | grep -q 'version = "0.22.0"' \
            || fail "$name" "the old lock does not hold Burn's burn-autodiff 0.22.0"
        # The user's project as README.md says: burn pinned, remat's line, the patch line.
        manifest "=0.22.0" "$name" user >"$dir/Cargo.toml"
        ;;
    *) fail "$name" "unknown case (newest or pinned)" ;;
    esac

    if [ "$name" = stale ]; then
        # Step 3 skipped: cargo keeps Burn's own burn-autodiff from the lock.
        if (cd "$dir" && cargo check 2>&1) >"$dir/build.log"; then
            fail "$name" "the project built without the patch: remat's controls were silent no-ops"
        fi
        grep -q 'was not used in the crate graph' "$dir/build.log" \
            || fail "$name" "cargo did not warn that the patch was not used (see $dir/build.log)"
        grep -Eq 'in crate .remat.|found module .remat::' "$dir/build.log" \
            || fail "$name" "the build failed, but not at remat's controls (see $dir/build.log)"
        grep -E '^(warning: patch|error)' "$dir/build.log" | head -n 3
        printf 'as it should: without the update, the build stops at remat'"'"'s controls\n'
        return
    fi

    # README.md, "Setup", step 3.
    (cd "$dir" && cargo update -p burn-autodiff 2>&1) | tee "$dir/update.log"
    local tree
    tree="$(cd "$dir" && cargo tree -i burn-autodiff -e normal 2>"$dir/tree.log")" \
        || fail "$name" "cargo tree failed: $(cat "$dir/tree.log")"
    printf '%s\n' "$tree" | head -n 4
    printf '%s\n' "$tree" | head -n 1 | grep -q "($ROOT/crates/burn-autodiff)" \
        || fail "$name" "cargo tree -i burn-autodiff does not resolve to $ROOT/crates/burn-autodiff"
    printf '%s\n' "$tree" | grep -q 'burn-dispatch' \
        || fail "$name" "burn-dispatch does not use the patched burn-autodiff"
    printf 'Burn in the lock: %s\n' \
        "$(grep -A1 '^name = "burn"$' "$dir/Cargo.lock" | sed -n 's/version = "\(.*\)"/\1/p')"
    if [ "$name" = pinned ]; then
        grep -A1 '^name = "burn-core"$' "$dir/Cargo.lock" | grep -q 'version = "0.22.0"' \
            || fail "$name" "setting up remat moved the project's Burn off 0.22.0"
    fi

    (cd "$dir" && cargo build 2>&1) | tee "$dir/build.log" | grep -v '^\s*Compiling' || true
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "$name" "cargo build failed (see $dir/build.log)"
    if grep -q 'was not used in the crate graph' "$dir/build.log" "$dir/update.log"; then
        fail "$name" "cargo says the burn-autodiff patch was not used"
    fi
    if grep -q "^warning: \`remat-fresh-$name\`" "$dir/build.log"; then
        fail "$name" "the program compiles with warnings (see $dir/build.log)"
    fi
    "$CARGO_TARGET_DIR/debug/remat-fresh-$name" || fail "$name" "the training program failed"
}

for c in "${cases[@]}"; do
    run_case "$c"
done
printf '\nfresh projects: ok (%s)\n' "${cases[*]}"
