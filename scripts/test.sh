#!/usr/bin/env bash
# The test command (README.md, and what CI's .ci/run calls):
#   1. a Vulkan driver for the wgpu tests (Mesa's llvmpipe, a CPU Vulkan driver, installed
#      with apt-get when the machine has none; CI runs as root);
#   2. the oracle (oracle/, a separate workspace with Burn's own burn-autodiff, no patch) runs
#      the model programs of crates/remat-models and writes reference values: on Flex
#      (`remat-oracle`) and on a wgpu device with burn-fusion (`remat-gpu-oracle`);
#   3. the oracle's own tests: backend-level parity, Burn's autodiff vs remat in one process;
#   4. every test of the main workspace, including the model-level parity tests that read the
#      references of step 2 (required here: a missing reference or a missing wgpu device is a
#      failure, not a skip) and remat on wgpu (gpu/tests/wgpu.rs: parity, every control
#      against SaveAll, device memory);
#   5. the engine's own tests (crates/remat: unit tests and tests/) again, built in release
#      (debug_assert!s and debug-only checks off, as users ship it) with the optional
#      `tracing` and `export_tests` features on;
#   6. the benchmark workspace (bench/, Burn's own autodiff next to remat) builds, every target,
#      and its tests run (report merging and verdicts; bench/tests/capacity.rs: child
#      processes under a heap cap);
#   7. the drop-in as a new user sets it up (scripts/fresh-projects.sh): two generated Burn
#      projects, the newest Burn 0.22.x and one pinned to 0.22.0 with an old lock, must
#      resolve burn-autodiff to this repository and train on remat;
#   8. lints: rustfmt (every workspace, first: it takes seconds), clippy with warnings as
#      errors (the main, oracle and bench workspaces, every target; remat and burn-autodiff
#      also with `tracing` and `export_tests` on), rustdoc with warnings as errors (the
#      published crates).
# The main and oracle workspaces build one Burn each (0.22.0 with Flex, NdArray, wgpu and
# fusion) into one target directory, so everything that does not depend on burn-autodiff
# (Flex, wgpu, CubeCL, burn-fusion) compiles once. Cost: see docs/TESTING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

export REMAT_ORACLE_DIR="${REMAT_ORACLE_DIR:-$ROOT/target/oracle-reference}"
# One target directory for both workspaces: the crates they share (burn-backend, burn-flex,
# serde, ...) are compiled once. CI has 2 cores; two separate Burn builds would double that.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export REMAT_REQUIRE_ORACLE=1
export REMAT_GPU_ORACLE_DIR="${REMAT_GPU_ORACLE_DIR:-$ROOT/target/gpu-oracle-reference}"
export REMAT_REQUIRE_GPU=1
# A clean build gains nothing from incremental state, and it costs disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# step, fail, elapsed, ensure_vulkan
source "$ROOT/scripts/common.sh"

step "disk before the build"
df -h "$CARGO_TARGET_DIR" 2>/dev/null || df -h .

step "rustfmt --check (main, oracle, bench)"
for manifest in Cargo.toml oracle/Cargo.toml bench/Cargo.toml; do
    cargo fmt --manifest-path "$manifest" --all -- --check \
        || fail "cargo fmt --manifest-path $manifest --all (run it and commit)"
done

step "wgpu: a Vulkan driver"
ensure_vulkan

start=$SECONDS
step "oracle: reference values from Burn's own autodiff -> $REMAT_ORACLE_DIR"
rm -rf "$REMAT_ORACLE_DIR"
cargo run --manifest-path oracle/Cargo.toml --bin remat-oracle -- "$REMAT_ORACLE_DIR" \
    || fail "the oracle program (cargo run --manifest-path oracle/Cargo.toml --bin remat-oracle)"
elapsed "$start"

start=$SECONDS
step "GPU oracle: Burn's own autodiff on the wgpu device -> $REMAT_GPU_ORACLE_DIR"
rm -rf "$REMAT_GPU_ORACLE_DIR"
cargo run --manifest-path oracle/Cargo.toml --bin remat-gpu-oracle -- "$REMAT_GPU_ORACLE_DIR" \
    || fail "the GPU oracle (cargo run --manifest-path oracle/Cargo.toml --bin remat-gpu-oracle)"
elapsed "$start"

start=$SECONDS
step "oracle tests: Burn's autodiff vs remat at the backend level"
cargo test --manifest-path oracle/Cargo.toml \
    || fail "the oracle tests (cargo test --manifest-path oracle/Cargo.toml)"
elapsed "$start"

start=$SECONDS
step "main workspace: cargo test --workspace (remat on wgpu included)"
cargo test --workspace || fail "the main workspace tests (cargo test --workspace)"
elapsed "$start"

start=$SECONDS
step "engine tests in release with its optional features: cargo test --release -p remat --features tracing,export_tests"
cargo test --release -p remat --features tracing,export_tests \
    || fail "the engine's tests in release (cargo test --release -p remat --features tracing,export_tests)"
elapsed "$start"

start=$SECONDS
step "bench workspace builds (bench/, every target); its tests"
# Into this script's CARGO_TARGET_DIR (it overrides bench/.cargo/config.toml's target-dir).
# Without debug info: the check is that it compiles and links; with it, the bench binary
# alone is ~490 MB and the build ~2 GB of CI's disk.
CARGO_PROFILE_DEV_DEBUG=false cargo build --manifest-path bench/Cargo.toml --all-targets \
    || fail "the bench build (cargo build --manifest-path bench/Cargo.toml --all-targets)"
# Its tests: the reports' joins and verdicts, and the capacity trials as the bench runs them
# (child processes under a heap cap); seconds.
CARGO_PROFILE_DEV_DEBUG=false cargo test --manifest-path bench/Cargo.toml \
    || fail "the bench's tests (cargo test --manifest-path bench/Cargo.toml)"
elapsed "$start"

start=$SECONDS
step "fresh Burn projects set up as README.md says (newest 0.22.x; =0.22.0 with an old lock)"
./scripts/fresh-projects.sh || fail "the fresh-project check (scripts/fresh-projects.sh)"
elapsed "$start"

start=$SECONDS
step "clippy -D warnings (main, oracle, bench; remat with features; all targets); rustdoc -D warnings"
cargo clippy --workspace --all-targets -- -D warnings || fail "cargo clippy (main workspace)"
cargo clippy --manifest-path oracle/Cargo.toml --all-targets -- -D warnings \
    || fail "cargo clippy (oracle workspace)"
cargo clippy --manifest-path bench/Cargo.toml --all-targets -- -D warnings \
    || fail "cargo clippy (bench workspace)"
cargo clippy -p remat -p burn-autodiff --all-targets \
    --features remat/tracing,remat/export_tests -- -D warnings \
    || fail "cargo clippy (remat and burn-autodiff with tracing and export_tests)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p remat -p burn-autodiff \
    || fail "cargo doc (remat, burn-autodiff)"
elapsed "$start"

step "disk after the build"
df -h "$CARGO_TARGET_DIR"
du -sh "$CARGO_TARGET_DIR"

printf '\nAll tests passed.\n'
