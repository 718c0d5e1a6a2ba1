#!/usr/bin/env bash
# Memory bounded by a budget, not by the batch (issue 18 part 8): one available-now batch of a
# JSON file -> parquet query (shared/bench's stateless workload: filter, projection, parquet
# sink; and its windowed workload: 1-minute windows x user, sum + count, whose operator takes
# the batch a chunk at a time) over 0.15, 1.5 and 15 GB of input, under the default budget
# (sluice.memory.limit = 256m) and a smaller and a larger one; prints the peak RSS (VmHWM) of
# each run next to its budget.
#   benches/memory_batch.sh   SIZES="0.15 1.5 15" LIMITS="default 128m 1g" WORKLOADS="stateless windowed"
# The 1.5 and 15 GB inputs are hard links to the 0.15 GB files (10 and 100 names each), so
# they take no extra disk; the engine reads every name as a file of its own. SLUICE_BIN picks
# the binary (default: the debug build, which CI builds; a release build is ~10x faster).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
export TZ=UTC
DIR="${BENCH_DIR:-/var/tmp/sluice-memory-bench}"
SHARED="$(cd ../shared/bench && pwd)"
SIZES="${SIZES:-0.15 1.5 15}"
LIMITS="${LIMITS:-default 128m 1g}"
WORKLOADS="${WORKLOADS:-stateless windowed}"
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build -p sluice-cli
  SLUICE_BIN="$CARGO_TARGET_DIR/debug/sluice"
fi
mkdir -p "$DIR"
# 0.15 GB: 1,650,000 events (about 91 bytes a line) in 20 files.
base="$DIR/json-0.15"
[ -d "$base" ] || python3 "$SHARED/gen_events.py" --rows 1650000 --files 20 --seed 7 --out "$base" >/dev/null
for size in $SIZES; do
  in="$DIR/json-$size"
  if [ ! -d "$in" ]; then
    copies=$(python3 -c "print(round($size / 0.15))")
    mkdir -p "$in"
    for c in $(seq -w 1 "$copies"); do
      for f in "$base"/*; do ln "$f" "$in/c$c-$(basename "$f")"; done
    done
  fi
  files=$(ls "$in" | wc -l)
  for workload in $WORKLOADS; do
  for limit in $LIMITS; do
    conf=()
    [ "$limit" = default ] || conf=(--conf "sluice.memory.limit=$limit")
    out=$("$SLUICE_BIN" bench --workload "$workload" --batches 1 --input "$in" \
      --workdir "$DIR/work" "${conf[@]}" 2>/dev/null | tail -n 1)
    python3 - "$size" "$limit" "$files" "$workload" "$out" <<'PY'
import json, sys
size, limit, files, workload, out = sys.argv[1:]
r = json.loads(out)
gb = float(size)
print(f"{workload:>9} {gb:>6} GB ({files} files) budget {limit:>7}: peak RSS {r['peak_rss_bytes'] / 2**20:,.0f} MiB, "
      f"{r['rows_per_second']:,.0f} rows/s, {r['wall_seconds']:.1f} s, {r['batches']} batch(es)")
PY
  done
  done
done
