#!/usr/bin/env bash
# How fast the Nexmark generator (crates/sluice/src/source/nexmark.rs) makes rows: 20,000,000
# events per table in batches of a million, release build; prints rows/s and events/s per
# table. The source must be far faster than the queries it feeds (BENCHMARKS.md, Nexmark).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
cargo test --release -p sluice --lib source::nexmark::tests::throughput -- --ignored --nocapture
