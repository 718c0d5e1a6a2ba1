#!/usr/bin/env bash
# Sluice, Apache Spark (PySpark 3.5.7, local[2]) and Apache Flink (PyFlink 2.3, local
# mini-cluster, parallelism 2: benches/bench_flink.py) side by side on the same input, in one
# go: the workloads of shared/bench (windowed, stateless, overhead; Flink runs the first two),
# then the ratios.
#   benches/compare_spark.sh                 2,000,000 rows in 20 files (ROWS, FILES, SEED), RUNS=3 rounds
#   FLINK=0 benches/compare_spark.sh         without Flink
# Needs Java 17 (on the machine) and pip; installs pyspark==3.5.7 if missing, and PyFlink with
# DuckDB in a virtualenv of their own (FLINK_VENV; PyFlink pins its own pandas and numpy). The
# first Flink run checks Flink's windowed result against DuckDB's batch aggregation of the same
# files. Builds Sluice in release mode (the first time takes about 30 minutes on 2 cores).
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
FLINK="${FLINK:-1}"
FLINK_VENV="${FLINK_VENV:-/var/tmp/sluice-flink-venv}"
if [ "$FLINK" = 1 ] && ! "$FLINK_VENV/bin/python" -c "import pyflink, duckdb" 2>/dev/null; then
  python3 -m venv "$FLINK_VENV"
  "$FLINK_VENV/bin/pip" install --quiet "apache-flink==2.3.0" "duckdb==2.0.1"
fi
cargo build --release -p sluice-cli
SLUICE="$CARGO_TARGET_DIR/release/sluice"

RUNS="${RUNS:-3}"
results="$DIR/results.jsonl"
: > "$results"
# Runs alternate engine by engine and workload by workload, RUNS times, so a slow spell of the
# machine hits both engines alike; the summary gives the median and the spread of the runs.
for run in $(seq "$RUNS"); do
  for w in decode windowed stateless overhead; do
    input="$DIR/events-$ROWS"; [ "$w" = overhead ] && input="$DIR/tiny"
    echo "== run $run/$RUNS: $w" >&2
    sleep 3  # let the previous engine's processes (a JVM) finish exiting
    "$SLUICE" bench --workload "$w" --input "$input" --workdir "$DIR/sluice-work" | tail -n 1 | tee -a "$results"
    [ "$w" = decode ] && continue
    sleep 3
    python3 "$SHARED/bench_spark.py" --workload "$w" --input "$input" --workdir "$DIR/spark-work" 2>/dev/null | tail -n 1 | tee -a "$results"
    if [ "$FLINK" = 1 ] && [ "$w" != overhead ]; then
      check=""; [ "$run" = 1 ] && [ "$w" = windowed ] && check=--check
      sleep 3
      "$FLINK_VENV/bin/python" benches/bench_flink.py --workload "$w" --input "$input" --workdir "$DIR/flink-work" $check 2>"$DIR/flink-$w.log" | tail -n 1 | tee -a "$results"
      grep -h "flink windowed check" "$DIR/flink-$w.log" >&2 || true
    fi
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def runs(engine, w, key):
    return [r[key] or 0 for r in rows if r["engine"] == engine and r["workload"] == w]
def med(engine, w, key):
    v = runs(engine, w, key)
    return statistics.median(v) if v else float("nan")
def spread(engine, w, key):
    v = runs(engine, w, key)
    return f"{min(v):,.0f}-{max(v):,.0f}" if v else "-"
n = len(runs("sluice", "windowed", "rows_per_second"))
print(f"medians of {n} run(s); spread = min-max over the runs")
print(f"{'workload':<10} {'rows/s sluice':>14} {'(spread)':>21} {'rows/s spark':>13} {'x':>6} {'rows/s flink':>13} {'(spread)':>19} {'x':>6} {'median ms sluice':>17} {'spark':>8} {'x':>7} {'RSS MB sluice':>14} {'spark':>7} {'flink':>7}")
for w in ["windowed", "stateless", "overhead"]:
    s_rps, k_rps, f_rps = (med(e, w, "rows_per_second") for e in ("sluice", "spark", "flink"))
    s_ms, k_ms = med("sluice", w, "median_batch_ms"), med("spark", w, "median_batch_ms")
    s_mb, k_mb, f_mb = (med(e, w, "peak_rss_bytes") / 2**20 for e in ("sluice", "spark", "flink"))
    r = lambda a, b: a / b if b else float("nan")
    print(f"{w:<10} {s_rps:>14,.0f} {spread('sluice', w, 'rows_per_second'):>21} {k_rps:>13,.0f} {r(s_rps, k_rps):>6.1f}"
          f" {f_rps:>13,.0f} {spread('flink', w, 'rows_per_second'):>19} {r(s_rps, f_rps):>6.1f}"
          f" {s_ms:>17.1f} {k_ms:>8.1f} {r(k_ms, s_ms):>7.1f} {s_mb:>14.0f} {k_mb:>7.0f} {f_mb:>7.0f}")
d = med("sluice", "decode", "rows_per_second")
print(f"decode-only ceiling (same files to Arrow, nothing else): {d:,.0f} rows/s "
      f"({spread('sluice', 'decode', 'rows_per_second')}); windowed reaches "
      f"{100 * med('sluice', 'windowed', 'rows_per_second') / d:.0f}% of it")
PY
