#!/usr/bin/env bash
# The test command (README.md, and what CI's .ci/run calls):
#   1. the oracle (oracle/, a separate workspace with Burn's own burn-autodiff, no patch) runs
#      the model programs of crates/remat-models and writes reference values;
#   2. the oracle's own tests: backend-level parity, Burn's autodiff vs remat in one process;
#   3. every test of the main workspace, including the model-level parity test that reads the
#      references of step 1 (required here: a missing reference is a failure, not a skip);
#   4. the engine's own tests (crates/remat: unit tests and tests/) again, twice: built in
#      release (debug_assert!s and debug-only checks off, as users ship it), and with the
#      optional `tracing` and `export_tests` features on;
#   5. the benchmark workspace (bench/, Burn's own autodiff next to remat) builds, every target;
#   6. the drop-in as a new user sets it up (scripts/fresh-projects.sh): two generated Burn
#      projects, the newest Burn 0.22.x and one pinned to 0.22.0 with an old lock, must
#      resolve burn-autodiff to this repository and train on remat;
#   7. remat on Burn's wgpu backend (scripts/gpu-tests.sh, issue 21): a Vulkan driver (Mesa's
#      llvmpipe, installed with apt-get when the machine has none), then gpu/oracle/ (Burn's
#      own autodiff on the device) and gpu/tests/wgpu.rs (remat through the patch, with
#      burn-fusion): parity, every control against SaveAll, device memory;
#   8. lints: rustfmt (every workspace, first: it takes seconds), clippy with warnings as
#      errors (the main, oracle and bench workspaces, every target; remat and burn-autodiff
#      also with `tracing` and `export_tests` on), rustdoc with warnings as errors (the
#      published crates).
# Cost, measured 2026-12-02 on a 2-core machine with a warm cargo registry: the oracle's
# build 12 min (cold), its run and tests 3; the main workspace 5.5; release 6.7; features
# 5.4; bench build 1.7; the fresh projects 7; lints 2: 44 min from a clean target
# directory (31.5 with the oracle's build kept; CI ran it in 34). The wgpu step: its two
# cold builds at most 33 min (measured beside other builds), its runs about 2 min (4.5
# with its builds kept). About 70 min from clean; CI stops at 90.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

export REMAT_ORACLE_DIR="${REMAT_ORACLE_DIR:-$ROOT/target/oracle-reference}"
# One target directory for both workspaces: the crates they share (burn-backend, burn-flex,
# serde, ...) are compiled once. CI has 2 cores; two separate Burn builds would double that.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export REMAT_REQUIRE_ORACLE=1
# A clean build gains nothing from incremental state, and it costs disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# step, fail, elapsed
source "$ROOT/scripts/common.sh"

step "disk before the build"
df -h "$CARGO_TARGET_DIR" 2>/dev/null || df -h .

step "rustfmt --check (main, oracle, bench, gpu, gpu/oracle)"
for manifest in Cargo.toml oracle/Cargo.toml bench/Cargo.toml gpu/Cargo.toml gpu/oracle/Cargo.toml; do
    cargo fmt --manifest-path "$manifest" --all -- --check \
        || fail "cargo fmt --manifest-path $manifest --all (run it and commit)"
done

start=$SECONDS
step "oracle: reference values from Burn's own autodiff -> $REMAT_ORACLE_DIR"
rm -rf "$REMAT_ORACLE_DIR"
cargo run --manifest-path oracle/Cargo.toml --bin remat-oracle -- "$REMAT_ORACLE_DIR" \
    || fail "the oracle program (cargo run --manifest-path oracle/Cargo.toml)"
elapsed "$start"

start=$SECONDS
step "oracle tests: Burn's autodiff vs remat at the backend level"
cargo test --manifest-path oracle/Cargo.toml \
    || fail "the oracle tests (cargo test --manifest-path oracle/Cargo.toml)"
elapsed "$start"

start=$SECONDS
step "main workspace: cargo test --workspace"
cargo test --workspace || fail "the main workspace tests (cargo test --workspace)"
elapsed "$start"

start=$SECONDS
step "engine tests in release (debug assertions off): cargo test --release -p remat"
cargo test --release -p remat || fail "the engine's tests in release (cargo test --release -p remat)"
elapsed "$start"

start=$SECONDS
step "engine tests with its optional features: cargo test -p remat --features tracing,export_tests"
cargo test -p remat --features tracing,export_tests \
    || fail "the engine's tests with features (cargo test -p remat --features tracing,export_tests)"
elapsed "$start"

start=$SECONDS
step "bench workspace builds (bench/, every target)"
# Into this script's CARGO_TARGET_DIR (it overrides bench/.cargo/config.toml's target-dir).
# Without debug info: the check is that it compiles and links; with it, the bench binary
# alone is ~490 MB and the build ~2 GB of CI's disk.
CARGO_PROFILE_DEV_DEBUG=false cargo build --manifest-path bench/Cargo.toml --all-targets \
    || fail "the bench build (cargo build --manifest-path bench/Cargo.toml --all-targets)"
elapsed "$start"

start=$SECONDS
step "fresh Burn projects set up as README.md says (newest 0.22.x; =0.22.0 with an old lock)"
./scripts/fresh-projects.sh || fail "the fresh-project check (scripts/fresh-projects.sh)"
elapsed "$start"

start=$SECONDS
step "remat on wgpu (scripts/gpu-tests.sh: Vulkan driver, GPU oracle, gpu/tests/wgpu.rs)"
./scripts/gpu-tests.sh || fail "the wgpu tests (scripts/gpu-tests.sh)"
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
