#!/usr/bin/env bash
# remat on Burn's wgpu backend (issue 21; docs/GPU.md). `scripts/test.sh` runs it; alone:
#   ./scripts/gpu-tests.sh                  # with burn-fusion (as Burn users run wgpu)
#   REMAT_GPU_FUSION=off ./scripts/gpu-tests.sh   # plain CubeCL: each op its own kernel
#   REMAT_GPU_FUSION=both ./scripts/gpu-tests.sh
#
#   1. a Vulkan driver: on a machine without one, Mesa's llvmpipe (a CPU Vulkan driver) is
#      installed with apt-get (as root; CI runs as root), and the run fails saying how to
#      install it otherwise;
#   2. for each fusion setting: `gpu/oracle/` (no patch: Burn's own burn-autodiff) trains the
#      model programs of crates/remat-models on the wgpu device and writes references; then
#      `gpu/tests/wgpu.rs` (with the patch: remat) trains the same programs on the same
#      device and compares: parity with Burn, every control against SaveAll, device memory.
# Both workspaces build into one target directory (default `target/gpu`, beside the main
# one: its dev profile differs), so wgpu, CubeCL and burn-fusion compile once for both.
# Cost, measured 2026-12-02 on a 2-core machine (cold target): see scripts/test.sh's header.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

GPU_TARGET="${REMAT_GPU_TARGET_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/gpu}"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
FUSION="${REMAT_GPU_FUSION:-on}"

# step, fail, elapsed
source "$ROOT/scripts/common.sh"

# A Vulkan device wgpu can use: `vulkaninfo --summary` lists its deviceName.
vulkan_device() {
    command -v vulkaninfo >/dev/null 2>&1 \
        && vulkaninfo --summary 2>/dev/null | grep -m1 'deviceName' | sed 's/.*= *//'
}

step "wgpu: a Vulkan driver"
if ! device="$(vulkan_device)" || [ -z "$device" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "    no Vulkan device: installing Mesa's llvmpipe (mesa-vulkan-drivers, vulkan-tools)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q mesa-vulkan-drivers vulkan-tools >/dev/null \
            || { apt-get update -q >/dev/null && apt-get install -y -q mesa-vulkan-drivers vulkan-tools >/dev/null; } \
            || fail "apt-get install mesa-vulkan-drivers vulkan-tools"
    fi
    device="$(vulkan_device)" || true
    [ -n "$device" ] || fail "no Vulkan device for the wgpu tests: install a GPU driver, or \
Mesa's CPU driver (Debian/Ubuntu: sudo apt-get install mesa-vulkan-drivers vulkan-tools)"
fi
echo "    Vulkan device: $device"

case "$FUSION" in
    on) settings=(fusion) ;;
    off) settings=(plain) ;;
    both) settings=(fusion plain) ;;
    *) fail "REMAT_GPU_FUSION must be on, off or both (it is '$FUSION')" ;;
esac

for setting in "${settings[@]}"; do
    if [ "$setting" = fusion ]; then
        features=()
        refs="$ROOT/target/gpu-oracle-reference"
    else
        features=(--no-default-features)
        refs="$ROOT/target/gpu-oracle-reference-plain"
    fi
    export REMAT_GPU_ORACLE_DIR="$refs"

    start=$SECONDS
    step "wgpu ($setting): the oracle, Burn's own autodiff on the device -> $refs"
    rm -rf "$refs"
    CARGO_TARGET_DIR="$GPU_TARGET" cargo run --manifest-path gpu/oracle/Cargo.toml \
        ${features[@]+"${features[@]}"} -- "$refs" \
        || fail "the GPU oracle (cargo run --manifest-path gpu/oracle/Cargo.toml ${features[*]-})"
    elapsed "$start"

    start=$SECONDS
    step "wgpu ($setting): remat's tests on the device (gpu/tests/wgpu.rs)"
    CARGO_TARGET_DIR="$GPU_TARGET" cargo test --manifest-path gpu/Cargo.toml \
        ${features[@]+"${features[@]}"} -- --nocapture \
        || fail "the wgpu tests (cargo test --manifest-path gpu/Cargo.toml ${features[*]-})"
    elapsed "$start"
done
