#!/usr/bin/env bash
# remat on Burn's wgpu backend (issue 21; docs/GPU.md), by itself. `scripts/test.sh` runs the
# same tests with fusion inside its own steps (the Vulkan driver, the oracle's
# `remat-gpu-oracle`, and `remat-gpu`'s tests in `cargo test --workspace`); this script is
# for working on them, and for the plain CubeCL backend:
#   ./scripts/gpu-tests.sh                  # with burn-fusion (as Burn users run wgpu)
#   REMAT_GPU_FUSION=off ./scripts/gpu-tests.sh   # plain CubeCL: each op its own kernel
#   REMAT_GPU_FUSION=both ./scripts/gpu-tests.sh
#
#   1. a Vulkan driver: on a machine without one, Mesa's llvmpipe (a CPU Vulkan driver) is
#      installed with apt-get (as root), and the run fails saying how to install it otherwise;
#   2. for each fusion setting: the oracle workspace's `remat-gpu-oracle` (no patch: Burn's own
#      burn-autodiff) trains the model programs of crates/remat-models on the wgpu device and
#      writes references; then `gpu/tests/wgpu.rs` (the main workspace's `remat-gpu`, with the
#      patch: remat) trains the same programs on the same device and compares: parity with
#      Burn, every control against SaveAll, device memory.
# Both workspaces build into one target directory (as in scripts/test.sh), so wgpu, CubeCL
# and burn-fusion compile once for both. Without fusion both rebuild Burn's crates whose
# features change (about 12 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export REMAT_REQUIRE_GPU=1 REMAT_REQUIRE_ORACLE=1
FUSION="${REMAT_GPU_FUSION:-on}"

# step, fail, elapsed, ensure_vulkan
source "$ROOT/scripts/common.sh"

step "wgpu: a Vulkan driver"
ensure_vulkan

case "$FUSION" in
    on) settings=(fusion) ;;
    off) settings=(plain) ;;
    both) settings=(fusion plain) ;;
    *) fail "REMAT_GPU_FUSION must be on, off or both (it is '$FUSION')" ;;
esac

for setting in "${settings[@]}"; do
    if [ "$setting" = fusion ]; then
        oracle_features=()
        # The workspace's features (what `cargo test --workspace` builds), one test target.
        test_target=(--workspace --test wgpu)
        refs="$ROOT/target/gpu-oracle-reference"
    else
        oracle_features=(--no-default-features --features learner)
        test_target=(-p remat-gpu --no-default-features)
        refs="$ROOT/target/gpu-oracle-reference-plain"
    fi
    export REMAT_GPU_ORACLE_DIR="$refs"

    start=$SECONDS
    step "wgpu ($setting): the GPU oracle, Burn's own autodiff on the device -> $refs"
    rm -rf "$refs"
    cargo run --manifest-path oracle/Cargo.toml --bin remat-gpu-oracle \
        ${oracle_features[@]+"${oracle_features[@]}"} -- "$refs" \
        || fail "the GPU oracle (cargo run --manifest-path oracle/Cargo.toml --bin remat-gpu-oracle ${oracle_features[*]-})"
    elapsed "$start"

    start=$SECONDS
    step "wgpu ($setting): remat's tests on the device (gpu/tests/wgpu.rs)"
    cargo test "${test_target[@]}" -- --nocapture \
        || fail "the wgpu tests (cargo test ${test_target[*]})"
    elapsed "$start"
done
