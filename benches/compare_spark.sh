#!/usr/bin/env bash
# Sluice and Apache Spark (PySpark 3.5.7, local[2]) side by side on the same input, in one go:
# the three workloads of shared/bench (windowed, stateless, overhead), then the ratios.
#   benches/compare_spark.sh                 2,000,000 rows in 20 files (ROWS, FILES, SEED)
# Needs Java 17 (on the machine) and pip; installs pyspark==3.5.7 if missing. Builds Sluice in
# release mode (the first time takes about 30 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${ROWS:-2000000}"; FILES="${FILES:-20}"; SEED="${SEED:-42}"
DIR="${BENCH_DIR:-/tmp/sluice-bench}"
SHARED="$(cd ../shared/bench && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
export TZ=UTC

mkdir -p "$DIR"
[ -d "$DIR/events-$ROWS" ] || python3 "$SHARED/gen_events.py" --rows "$ROWS" --files "$FILES" --seed "$SEED" --out "$DIR/events-$ROWS" >/dev/null
[ -d "$DIR/tiny" ] || python3 "$SHARED/gen_events.py" --rows 20 --files 20 --seed "$SEED" --out "$DIR/tiny" >/dev/null
python3 -c "import pyspark" 2>/dev/null || python3 -m pip install --quiet "pyspark==3.5.7"
cargo build --release -p sluice-cli
SLUICE="$CARGO_TARGET_DIR/release/sluice"

results="$DIR/results.jsonl"
: > "$results"
for w in windowed stateless overhead; do
  input="$DIR/events-$ROWS"; [ "$w" = overhead ] && input="$DIR/tiny"
  echo "== $w" >&2
  "$SLUICE" bench --workload "$w" --input "$input" --workdir "$DIR/sluice-work" | tail -n 1 | tee -a "$results"
  python3 "$SHARED/bench_spark.py" --workload "$w" --input "$input" --workdir "$DIR/spark-work" 2>/dev/null | tail -n 1 | tee -a "$results"
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {(r["engine"], r["workload"]): r for r in rows}
print(f"{'workload':<10} {'rows/s sluice':>14} {'rows/s spark':>13} {'x':>6} {'median ms sluice':>17} {'spark':>8} {'x':>7} {'RSS MB sluice':>14} {'spark':>7}")
for w in ["windowed", "stateless", "overhead"]:
    s, k = by.get(("sluice", w)), by.get(("spark", w))
    if not s or not k:
        continue
    ratio = lambda a, b: (a / b) if b else float("nan")
    print(f"{w:<10} {s['rows_per_second']:>14.0f} {k['rows_per_second']:>13.0f} {ratio(s['rows_per_second'], k['rows_per_second']):>6.1f}"
          f" {s['median_batch_ms']:>17.1f} {k['median_batch_ms'] or 0:>8.1f} {ratio(k['median_batch_ms'] or 0, s['median_batch_ms']):>7.1f}"
          f" {s['peak_rss_bytes']/2**20:>14.0f} {k['peak_rss_bytes']/2**20:>7.0f}")
PY
