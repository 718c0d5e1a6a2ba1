#!/usr/bin/env bash
# Soak (issue 18 part 4): 100,000 one-row batches of one file -> parquet query, restarted after
# each tenth. Prints the checkpoint's size and the source log's and manifest's bytes per entry
# after each tenth, and fails if any of them grows (superseded log files are deleted after
# compaction, as Spark's cleanup does). SLUICE_SOAK_BATCHES=10000 for a shorter run. Debug build
# (as CI builds).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
cargo test -p sluice --test integration -- --ignored --nocapture log_growth::log_soak
