#!/usr/bin/env bash
# The test command (README.md, and what CI's .ci/run calls):
#   1. the oracle (oracle/, a separate workspace with Burn's own burn-autodiff, no patch) runs
#      the model programs of crates/remat-models and writes reference values;
#   2. the oracle's own tests: backend-level parity, Burn's autodiff vs remat in one process;
#   3. every test of the main workspace, including the model-level parity test that reads the
#      references of step 1 (required here: a missing reference is a failure, not a skip);
#   4. the drop-in as a new user sets it up (scripts/fresh-projects.sh): two generated Burn
#      projects, the newest Burn 0.22.x and one pinned to 0.22.0 with an old lock, must
#      resolve burn-autodiff to this repository and train on remat;
#   5. lints: rustfmt (every workspace, first: it takes seconds), clippy with warnings as
#      errors (the main and oracle workspaces, every target), rustdoc with warnings as errors
#      (the published crates).
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

step() {
    printf '\n==> %s\n' "$*"
}
fail() {
    printf '\nFAILED: %s\n' "$*" >&2
    exit 1
}
elapsed() {
    printf '    (%ss)\n' "$((SECONDS - $1))"
}

step "disk before the build"
df -h "$CARGO_TARGET_DIR" 2>/dev/null || df -h .

step "rustfmt --check (main, oracle, bench)"
for manifest in Cargo.toml oracle/Cargo.toml bench/Cargo.toml; do
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
step "fresh Burn projects set up as README.md says (newest 0.22.x; =0.22.0 with an old lock)"
./scripts/fresh-projects.sh || fail "the fresh-project check (scripts/fresh-projects.sh)"
elapsed "$start"

start=$SECONDS
step "clippy -D warnings (main and oracle workspaces, all targets); rustdoc -D warnings"
cargo clippy --workspace --all-targets -- -D warnings || fail "cargo clippy (main workspace)"
cargo clippy --manifest-path oracle/Cargo.toml --all-targets -- -D warnings \
    || fail "cargo clippy (oracle workspace)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p remat -p burn-autodiff \
    || fail "cargo doc (remat, burn-autodiff)"
elapsed "$start"

step "disk after the build"
df -h "$CARGO_TARGET_DIR"
du -sh "$CARGO_TARGET_DIR"

printf '\nAll tests passed.\n'
