#!/usr/bin/env bash
# Issue 20 part 5: how each engine scales with the input, and Sluice's per-batch overhead with
# the number of state partitions, on one machine in one run.
#
#   1. The windowed workload of shared/bench (watermark, 1-minute window x user, sum + count,
#      10 batches) over SIZES rows (0.2 M, 2 M, 20 M by default, 20 files each) on Sluice, Spark
#      3.5.7 (local[2]) and Flink 2.3 (parallelism 2; FLINK=0 leaves it out): rows/s and peak
#      RSS per engine and size, alternating engines, RUNS rounds (median).
#   2. The stateful per-batch overhead: the same query over 20 one-row files, one per batch, at
#      1, 2 and 8 state partitions (spark.sql.shuffle.partitions) on Sluice and Spark: median
#      batch ms.
#
#   benches/scaling.sh                      SIZES="200000 2000000 20000000" RUNS=1
# Needs what benches/compare_spark.sh needs (it installs the same things); Sluice in release.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES="${SIZES:-200000 2000000 20000000}"
PARTITIONS="${PARTITIONS:-1 2 8}"
RUNS="${RUNS:-1}"
FILES="${FILES:-20}"; SEED="${SEED:-42}"
DIR="${BENCH_DIR:-/tmp/sluice-bench}"
SHARED="$(cd ../shared/bench && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
export TZ=UTC
FLINK="${FLINK:-1}"
FLINK_VENV="${FLINK_VENV:-/var/tmp/sluice-flink-venv}"

mkdir -p "$DIR"
python3 -c "import pyspark" 2>/dev/null || python3 -m pip install --quiet "pyspark==3.5.7"
if [ "$FLINK" = 1 ] && ! "$FLINK_VENV/bin/python" -c "import pyflink, duckdb" 2>/dev/null; then
  python3 -m venv "$FLINK_VENV"
  "$FLINK_VENV/bin/pip" install --quiet "apache-flink==2.3.0" "duckdb==2.0.1"
fi
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --release -p sluice-cli
  SLUICE_BIN="$CARGO_TARGET_DIR/release/sluice"
fi
for rows in $SIZES; do
  [ -d "$DIR/events-$rows" ] || python3 "$SHARED/gen_events.py" --rows "$rows" --files "$FILES" --seed "$SEED" --out "$DIR/events-$rows" >/dev/null
done
[ -d "$DIR/tiny" ] || python3 "$SHARED/gen_events.py" --rows 20 --files 20 --seed "$SEED" --out "$DIR/tiny" >/dev/null

results="$DIR/scaling.jsonl"
: > "$results"
# tag ROWS PARTITIONS: adds the run's size and partitions to the engine's JSON line.
tag() {
  python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); r.update(rows=int(sys.argv[1]), partitions=int(sys.argv[2])); print(json.dumps(r))" "$1" "$2"
}
for run in $(seq "$RUNS"); do
  for rows in $SIZES; do
    input="$DIR/events-$rows"
    echo "== run $run/$RUNS: windowed, $rows rows" >&2
    sleep 3
    "$SLUICE_BIN" bench --workload windowed --input "$input" --workdir "$DIR/sluice-work" | tail -n 1 | tag "$rows" 2 | tee -a "$results"
    sleep 3
    python3 "$SHARED/bench_spark.py" --workload windowed --input "$input" --workdir "$DIR/spark-work" 2>/dev/null | tail -n 1 | tag "$rows" 2 | tee -a "$results"
    if [ "$FLINK" = 1 ]; then
      sleep 3
      "$FLINK_VENV/bin/python" benches/bench_flink.py --workload windowed --input "$input" --workdir "$DIR/flink-work" 2>"$DIR/flink-scaling.log" | tail -n 1 | tag "$rows" 2 | tee -a "$results"
    fi
  done
  for p in $PARTITIONS; do
    echo "== run $run/$RUNS: stateful overhead, $p partitions" >&2
    sleep 3
    "$SLUICE_BIN" bench --workload windowed --input "$DIR/tiny" --batches 20 --workdir "$DIR/sluice-work" \
      --conf "spark.sql.shuffle.partitions=$p" | tail -n 1 | tag 20 "$p" | tee -a "$results"
    sleep 3
    python3 "$SHARED/bench_spark.py" --workload windowed --input "$DIR/tiny" --batches 20 --workdir "$DIR/spark-work" \
      --shuffle-partitions "$p" 2>/dev/null | tail -n 1 | tag 20 "$p" | tee -a "$results"
  done
done
python3 - "$results" "$SIZES" "$PARTITIONS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sizes = [int(s) for s in sys.argv[2].split()]
parts = [int(p) for p in sys.argv[3].split()]
def med(engine, key, **where):
    v = [r[key] for r in rows if r["engine"] == engine and r.get(key) is not None
         and all(r.get(k) == x for k, x in where.items())]
    return statistics.median(v) if v else float("nan")
r = lambda a, b: a / b if b else float("nan")
print("windowed workload, 10 batches (median of the runs)")
print(f"{'rows':>10} {'sluice rows/s':>14} {'RSS MB':>7} {'spark rows/s':>13} {'RSS MB':>7} {'flink rows/s':>13} {'RSS MB':>7} {'÷ spark':>8} {'÷ flink':>8}")
for n in sizes:
    s, k, f = (med(e, "rows_per_second", rows=n, partitions=2) for e in ("sluice", "spark", "flink"))
    sm, km, fm = (med(e, "peak_rss_bytes", rows=n, partitions=2) / 2**20 for e in ("sluice", "spark", "flink"))
    print(f"{n:>10,} {s:>14,.0f} {sm:>7.0f} {k:>13,.0f} {km:>7.0f} {f:>13,.0f} {fm:>7.0f} {r(s, k):>8.1f} {r(s, f):>8.1f}")
if len(sizes) >= 2:
    a, b = sizes[-2], sizes[-1]
    for e in ("sluice", "spark", "flink"):
        ra, rb = med(e, "rows_per_second", rows=a, partitions=2), med(e, "rows_per_second", rows=b, partitions=2)
        if ra == ra and rb == rb:
            extra = (b - a) / (b / rb - a / ra)
            print(f"{e}: the rows between {a:,} and {b:,} ran at {extra:,.0f} rows/s")
print("stateful per-batch overhead, 1-row batches: median batch ms")
print(f"{'partitions':>10} {'sluice':>8} {'spark':>8} {'÷':>6}")
for p in parts:
    s, k = med("sluice", "median_batch_ms", rows=20, partitions=p), med("spark", "median_batch_ms", rows=20, partitions=p)
    print(f"{p:>10} {s:>8.1f} {k:>8.1f} {r(k, s):>6.0f}")
PY
