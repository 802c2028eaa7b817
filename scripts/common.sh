# Helpers shared by scripts/test.sh and scripts/gpu-tests.sh (sourced, not run).
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
