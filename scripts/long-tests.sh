#!/usr/bin/env bash
# The longer tests (docs/TESTING.md, "Longer tests"): what ./scripts/test.sh leaves out
# because it reads a clock or runs for minutes. All in release mode. Run it before a
# benchmark run is recorded (bench/README.md) and after changing the engine's hot paths.
#   1. crates/remat/tests/scale.rs, time_per_op_is_linear_up_to_1m_ops (#[ignore]d: it
#      reads a clock): chains and wide DAGs of 10k, 100k and 1M ops, time per op linear;
#   2. crates/remat-models/tests/soak.rs, a_thousand_steps_keep_the_heap_flat (#[ignore]d:
#      a long soak): 1,000 Adam steps of a transformer, the heap flat;
#   3. the fuzzer at 10,000 cases (REMAT_FUZZ_CASES, REMAT_FUZZ_SEED to change them).
# Each prints its figures (docs/SCALE.md records them).
set -euo pipefail
cd "$(dirname "$0")/.."

step() {
    printf '\n==> %s\n' "$*"
}
fail() {
    printf '\nFAILED: %s\n' "$*" >&2
    exit 1
}

step "scale: time per op up to 1M ops (release)"
cargo test --release -p remat --test scale -- --ignored --nocapture \
    || fail "cargo test --release -p remat --test scale -- --ignored"

step "soak: 1,000 training steps keep the heap flat (release)"
cargo test --release -p remat-models --test soak -- --ignored --nocapture \
    || fail "cargo test --release -p remat-models --test soak -- --ignored"

step "a recurrence on a computed weight, 10,000 steps under 20 matrices (release)"
cargo test --release -p remat --test recurrent -- --ignored --nocapture \
    || fail "cargo test --release -p remat --test recurrent -- --ignored"

step "Burn's Lstm and Gru under a budget, 128 steps (release)"
REMAT_RNN_STEPS=128 cargo test --release -p remat-models --test recurrent_modules -- --nocapture \
    || fail "REMAT_RNN_STEPS=128 cargo test --release -p remat-models --test recurrent_modules"

step "Burn's Lstm below a sixth of its bytes, 1,024 steps (release)"
REMAT_RNN_STEPS=1024 cargo test --release -p remat-models --test recurrent_modules \
    lstm_below_a_sixth_of_its_bytes_is_planned_as_a_chain -- --nocapture \
    || fail "REMAT_RNN_STEPS=1024 cargo test --release -p remat-models --test recurrent_modules lstm_below"

step "Burn's Lstm: its smallest budget beyond its input at 512 and 2,048 steps (release)"
REMAT_RNN_STEPS=512 cargo test --release -p remat-models --test recurrent_modules \
    lstm_s_smallest_budget_does_not_grow_with_its_length_beyond_its_input -- --nocapture \
    || fail "REMAT_RNN_STEPS=512 cargo test --release -p remat-models --test recurrent_modules lstm_s_smallest"

step "fuzzer: ${REMAT_FUZZ_CASES:=10000} cases (release)"
REMAT_FUZZ_CASES="$REMAT_FUZZ_CASES" cargo test --release -p remat --test random_dags \
    || fail "REMAT_FUZZ_CASES=$REMAT_FUZZ_CASES cargo test --release -p remat --test random_dags"

printf '\nAll long tests passed.\n'
