#!/usr/bin/env bash
# Nexmark q5 on Sluice and on Spark (PySpark 3.5.7, local[2]) over the same bid files:
# `sluice bench --workload nexmark --export` writes the generated bids as parquet, then each
# engine runs q5 over them (2 files per batch) and prints its JSON line; a summary follows.
#   benches/nexmark_compare.sh            10,000,000 events (EVENTS), 250,000 per batch
# Also runs Sluice's q5 straight from the generator for reference. Needs Java 17 and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${EVENTS:-10000000}"
DIR="${BENCH_DIR:-/tmp/sluice-nexmark}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
export TZ=UTC
python3 -c "import pyspark" 2>/dev/null || python3 -m pip install --quiet "pyspark==3.5.7"
cargo build --release -p sluice-cli
SLUICE="$CARGO_TARGET_DIR/release/sluice"
"$SLUICE" bench --workload nexmark --export "$DIR/export" --events "$EVENTS"
results="$DIR/results.jsonl"
: > "$results"
"$SLUICE" bench --workload nexmark --query q5 --events "$EVENTS" --bids-from "$DIR/export/bid" \
  --workdir "$DIR/sluice-work" | tail -n 1 | sed 's/"engine":"sluice"/"engine":"sluice-parquet"/' | tee -a "$results"
sleep 3
python3 benches/nexmark_spark.py --bids "$DIR/export/bid" --events "$EVENTS" --workdir "$DIR/spark-work" 2>/dev/null | tail -n 1 | tee -a "$results"
sleep 3
"$SLUICE" bench --workload nexmark --query q5 --events "$EVENTS" --workdir "$DIR/sluice-work" | tail -n 1 | tee -a "$results"
python3 - "$results" <<'PY'
import json, sys
rows = {r["engine"]: r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip())}
s, k = rows.get("sluice-parquet"), rows.get("spark")
if s and k:
    print(f"q5 over the same parquet bids: Sluice {s['events_per_second']:,} events/s vs Spark "
          f"{k['events_per_second']:,} ({s['events_per_second'] / k['events_per_second']:.1f}x); "
          f"peak RSS {s['peak_rss_bytes'] / 2**20:.0f} vs {k['peak_rss_bytes'] / 2**20:.0f} MB; "
          f"output rows {s['output_rows']} vs {k['output_rows']}")
    print(f"RSS MB by batch: Sluice {s['rss_mb_by_batch']}; Spark {k['rss_mb_by_batch']}")
PY
