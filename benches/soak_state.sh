#!/usr/bin/env bash
# Soak: a million events through a windowed aggregation, with and without a watermark.
# Prints numRowsTotal and memoryUsedBytes every ten batches; fails if the watermarked state is
# not bounded or the unwatermarked one does not grow. Debug build (as CI builds), so the
# events/s figure is not a speed claim.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
cargo test -p sluice --test integration -- --ignored --nocapture engine_soak::
