#!/usr/bin/env bash
# Issue 21: a query on 0 (in one process), 1, 2 and 3 `sluice worker` processes on this machine.
#
#   1. The windowed workload of shared/bench (watermark, 1-minute window x user, sum + count,
#      10 batches over 2 M rows in 20 files): rows/s and the driver's peak RSS, and each
#      worker's peak RSS.
#   2. The per-batch overhead of going distributed: the overhead workload (a projection to
#      noop) over 20 two-row files, one per batch (two rows: a batch of one row has nothing to
#      split, and stays on the driver): median batch ms.
#
#   benches/distributed.sh                    ROWS=2000000 RUNS=3 WORKERS="0 1 2 3"
# Every process shares the machine's cores (2 here): expect no speed-up, only the cost of the
# wire. Needs the release binary with the feature `distributed` (built here if SLUICE_BIN is not
# set; a first release build takes ~40 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${ROWS:-2000000}"
RUNS="${RUNS:-3}"
WORKERS="${WORKERS:-0 1 2 3}"
FILES="${FILES:-20}"; SEED="${SEED:-42}"
DIR="${BENCH_DIR:-/tmp/sluice-bench}"
SHARED="$(cd ../shared/bench && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-release}"
export TZ=UTC

mkdir -p "$DIR"
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --release --bin sluice
  SLUICE_BIN="$CARGO_TARGET_DIR/release/sluice"
fi
[ -d "$DIR/events-$ROWS" ] || python3 "$SHARED/gen_events.py" --rows "$ROWS" --files "$FILES" --seed "$SEED" --out "$DIR/events-$ROWS" >/dev/null
[ -d "$DIR/tiny40" ] || python3 "$SHARED/gen_events.py" --rows 40 --files 20 --seed "$SEED" --out "$DIR/tiny40" >/dev/null

pids=()
stop_workers() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_workers EXIT
# start_workers N: N workers on free ports; their list (host:port,...) in $worker_list.
start_workers() {
  local i
  worker_list=""
  for i in $(seq "$1"); do
    local log="$DIR/worker-$i.log"
    "$SLUICE_BIN" worker --listen 127.0.0.1:0 >"$log" 2>&1 &
    pids+=("$!")
    for _ in $(seq 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
    worker_list="$worker_list${worker_list:+,}$(sed -n 's/^Sluice worker listening on //p' "$log")"
  done
}
# Peak RSS of the running workers, in bytes, space separated.
workers_rss() {
  local p out=""
  for p in "${pids[@]:-}"; do
    [ -n "$p" ] && out="$out $(awk '/VmHWM/ {print $2 * 1024}' "/proc/$p/status" 2>/dev/null || echo 0)"
  done
  echo "$out"
}
tag() {
  python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); r.update(workers=int(sys.argv[1]), worker_rss=[int(x) for x in sys.argv[2].split()]); print(json.dumps(r))" "$1" "$2"
}

results="$DIR/distributed.jsonl"
: > "$results"
for run in $(seq "$RUNS"); do
  for n in $WORKERS; do
    for workload in windowed overhead; do
      conf=()
      if [ "$n" -gt 0 ]; then
        start_workers "$n"
        conf=(--conf "sluice.distributed.workers=$worker_list")
      fi
      if [ "$workload" = windowed ]; then
        # Spark's sum/count (the session's, as SQL and PySpark use): the aggregation's state
        # goes to the workers; DataFusion's own `sum` (--workload windowed) is not a worker's
        # function by that name, so that aggregation stays on the driver.
        args=(--workload windowed-spark --input "$DIR/events-$ROWS")
      else
        args=(--workload overhead --input "$DIR/tiny40")
      fi
      echo "== run $run/$RUNS: $workload on $n workers" >&2
      sleep 2
      line="$("$SLUICE_BIN" bench "${args[@]}" --workdir "$DIR/sluice-work" "${conf[@]}" | tail -n 1)"
      echo "$line" | python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); r['bench']='$workload'; print(json.dumps(r))" \
        | tag "$n" "$(workers_rss)" | tee -a "$results"
      stop_workers
    done
  done
done
python3 - "$results" "$WORKERS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ns = [int(n) for n in sys.argv[2].split()]
def med(bench, key, n):
    v = [r[key] for r in rows if r["bench"] == bench and r["workers"] == n and r.get(key) is not None]
    return statistics.median(v) if v else float("nan")
def wrss(n):
    v = [max(r["worker_rss"]) for r in rows if r["bench"] == "windowed" and r["workers"] == n and r["worker_rss"]]
    return statistics.median(v) / 2**20 if v else 0.0
print("windowed workload (median of the runs) and the per-batch overhead (2-row batches)")
print(f"{'workers':>7} {'rows/s':>12} {'driver RSS MB':>14} {'worker RSS MB':>14} {'batch ms (2 rows)':>17}")
for n in ns:
    print(f"{n:>7} {med('windowed', 'rows_per_second', n):>12,.0f} {med('windowed', 'peak_rss_bytes', n) / 2**20:>14.0f} "
          f"{wrss(n):>14.0f} {med('overhead', 'median_batch_ms', n):>17.1f}")
PY
