#!/usr/bin/env bash
# Listing cost per trigger (issue 18 part 11): a query over a folder of 50,000 files
# (SLUICE_LISTING_FILES), one new file per trigger; prints the median and the largest
# `latestOffset` time of 20 triggers. Debug build (as CI builds).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
cargo test -p sluice --test integration -- --ignored --nocapture log_growth::listing_scale
