#!/usr/bin/env bash
# Kafka throughput, Sluice and Apache Spark 3.5.7 (local[2], spark-sql-kafka-0-10 from Maven
# Central) side by side on the real broker of scripts/kafka-broker, on the same topic, in one go:
#   kafka -> parquet   from_json of each record's value, written as parquet files
#   kafka -> kafka     the events re-encoded with to_json to another topic: Sluice with
#                      exactlyOnce=true (a transaction per batch), Spark at-least-once (its only mode)
# Both read the topic from the earliest offset with Trigger.AvailableNow in batches of
# ROWS/BATCHES records (maxOffsetsPerTrigger); runs alternate engines, RUNS rounds, medians.
#   benches/kafka_compare.sh     ROWS=2000000 events (shared/bench/gen_events.py, SEED=42) in a
#                                topic of PARTITIONS=2, BATCHES=10, RUNS=3
# Needs Java 17 and pip: the Spark venv (pyspark 3.5.7) is ${SLUICE_TOOLS:-~/.cache/sluice}/venv-spark35
# (made here if missing, as scripts/check-delta-with-spark makes it). Builds Sluice in release
# mode (about 40 minutes on 2 cores the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${ROWS:-2000000}"; FILES="${FILES:-20}"; SEED="${SEED:-42}"; BATCHES="${BATCHES:-10}"
PARTITIONS="${PARTITIONS:-2}"; RUNS="${RUNS:-3}"
DIR="${BENCH_DIR:-/tmp/sluice-bench}"
SHARED="$(cd ../shared/bench && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
export TZ=UTC
TOPIC="bench-events-$ROWS"
PER_BATCH=$(( (ROWS + BATCHES - 1) / BATCHES ))

venv="${SLUICE_TOOLS:-$HOME/.cache/sluice}/venv-spark35"
if ! "$venv/bin/python" -c 'import pyspark; assert pyspark.__version__ == "3.5.7"' 2>/dev/null; then
  echo "kafka_compare: creating $venv (pyspark 3.5.7)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pyspark==3.5.7" pyarrow
fi
scripts/kafka-broker start
# SLUICE_BIN: a release binary built already (skips the build).
if [ -z "${SLUICE_BIN:-}" ]; then cargo build --release -p sluice-cli; fi
SLUICE="${SLUICE_BIN:-$CARGO_TARGET_DIR/release/sluice}"

mkdir -p "$DIR"
[ -d "$DIR/events-$ROWS" ] || python3 "$SHARED/gen_events.py" --rows "$ROWS" --files "$FILES" --seed "$SEED" --out "$DIR/events-$ROWS" >/dev/null
# The input topic, filled once per run of this script (the same records for both engines).
scripts/kafka-broker topic "$TOPIC" "$PARTITIONS" >/dev/null
filled=$("$SLUICE" bench --workload kafka-fill --input "$DIR/events-$ROWS" --topic "$TOPIC" --workdir "$DIR/fill" | tail -n 1)
[ "$filled" = "$ROWS" ] || { echo "kafka_compare: wrote $filled records, expected $ROWS" >&2; exit 1; }

results="$DIR/kafka-results.jsonl"
: > "$results"
for run in $(seq "$RUNS"); do
  for sink in parquet kafka; do
    echo "== run $run/$RUNS: kafka -> $sink" >&2
    for engine in sluice spark; do
      [ "$sink" = kafka ] && scripts/kafka-broker topic bench-out "$PARTITIONS" >/dev/null
      sleep 3  # let the previous engine's processes (a JVM) finish exiting
      if [ "$engine" = sluice ]; then
        "$SLUICE" bench --workload kafka --sink "$sink" --topic "$TOPIC" --out-topic bench-out \
          --max-offsets-per-trigger "$PER_BATCH" --workdir "$DIR/sluice-kafka" | tail -n 1 | tee -a "$results"
      else
        "$venv/bin/python" benches/kafka_spark.py --sink "$sink" --topic "$TOPIC" --out-topic bench-out \
          --max-offsets-per-trigger "$PER_BATCH" --workdir "$DIR/spark-kafka" 2>"$DIR/spark-kafka.log" | tail -n 1 | tee -a "$results"
      fi
    done
  done
done
python3 - "$results" "$ROWS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
expected = int(sys.argv[2])
def runs(engine, w, key):
    return [r[key] or 0 for r in rows if r["engine"] == engine and r["workload"] == w]
def med(engine, w, key):
    v = runs(engine, w, key)
    return statistics.median(v) if v else float("nan")
def spread(engine, w):
    v = runs(engine, w, "rows_per_second")
    return f"{min(v):,.0f}-{max(v):,.0f}" if v else "-"
print(f"{expected:,} records; medians of {len(runs('sluice', 'kafka-parquet', 'rows_per_second'))} run(s), spread = min-max")
print(f"{'workload':<14} {'rec/s sluice':>13} {'(spread)':>21} {'rec/s spark':>12} {'(spread)':>17} {'x':>6}"
      f" {'batch ms sluice':>16} {'spark':>7} {'RSS MB sluice':>14} {'spark':>7} {'out sluice':>11} {'spark':>10}")
for w in ["kafka-parquet", "kafka-kafka"]:
    s, k = med("sluice", w, "rows_per_second"), med("spark", w, "rows_per_second")
    outs = {e: sorted(set(runs(e, w, "rows_out"))) for e in ("sluice", "spark")}
    print(f"{w:<14} {s:>13,.0f} {spread('sluice', w):>21} {k:>12,.0f} {spread('spark', w):>17} {s / k if k else float('nan'):>6.1f}"
          f" {med('sluice', w, 'median_batch_ms'):>16,.0f} {med('spark', w, 'median_batch_ms'):>7,.0f}"
          f" {med('sluice', w, 'peak_rss_bytes') / 2**20:>14,.0f} {med('spark', w, 'peak_rss_bytes') / 2**20:>7,.0f}"
          f" {','.join(map(str, outs['sluice'])):>11} {','.join(map(str, outs['spark'])):>10}")
bad = [r for r in rows if r["engine"] == "sluice" and r["rows_out"] != expected]
if bad:
    sys.exit(f"Sluice's output differs from the {expected} records in: {bad}")
PY
