#!/usr/bin/env bash
# The test command (README.md): every test of the main workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
