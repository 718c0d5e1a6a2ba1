#!/usr/bin/env bash
# Issue 19's soak: state larger than memory on the on-disk state store provider (Spark's
# RocksDB provider class). A streaming SELECT DISTINCT (deduplication, no watermark: every key
# stays) over `rate-micro-batch` rows whose key is `v = pmod(value * 7919, KEYS)` followed by
# PAD 64-bit numbers derived from it in hex (~200 bytes that compress about as little as real keys): ROWS rows,
# KEYS distinct keys (50 M by default, ~10 GB of state), the rest duplicates.
#
#   1. The big run, on the on-disk provider, in a memory cgroup capped at CAP (2G): SIGKILLed
#      at batch KILL_AT, restarted on the same checkpoint, run to the last row. Its parquet
#      output (read through the sink's manifest) must hold every key exactly once.
#   2. A small run (SMALL_KEYS) on each provider, uncapped: the two outputs must be the same.
#
# Prints throughput, peak RSS, the cgroup's peak (page cache included), state on disk
# (checkpoint and local cache), commit latency, the restart's time and the RSS (MiB) at each
# quarter of the batches (rss.txt has it every second); fails on a wrong output
# or a run that dies. SLUICE_BIN picks the binary (default: the debug build, as CI builds, so
# rows/s are not a speed claim).
#   benches/soak_on_disk_state.sh     KEYS=2000000 SMALL_KEYS=200000 CAP=1G   (a quick one)
#   SKIP_BIG=1 SMALL_KEYS=5000000 benches/soak_on_disk_state.sh   (the two providers side by side only)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
KEYS="${KEYS:-50000000}"
ROWS="${ROWS:-$((KEYS / 5 * 6))}"
PER_BATCH="${PER_BATCH:-1000000}"
PAD="${PAD:-11}"
PARTITIONS="${PARTITIONS:-4}"
CAP="${CAP:-2G}"
SMALL_KEYS="${SMALL_KEYS:-1000000}"
DIR="${BENCH_DIR:-/var/tmp/sluice-soak-state}"
ROCKSDB=org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider
HDFS=org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build -p sluice-cli
  SLUICE_BIN="$CARGO_TARGET_DIR/debug/sluice"
fi
mkdir -p "$DIR"
export TMPDIR="$DIR/tmp"
mkdir -p "$TMPDIR"

bytes() { # 2G -> bytes
  python3 -c "import sys; s=sys.argv[1].upper(); m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s))" "$1"
}

# run NAME PROVIDER KEYS ROWS KILL_AT CAP: runs the pipeline to its last row (SIGKILL at batch
# KILL_AT and a restart, unless KILL_AT is -1); writes $DIR/NAME/summary.json.
run() {
  local name=$1 provider=$2 keys=$3 rows=$4 kill_at=$5 cap=$6
  local d="$DIR/$name"
  rm -rf "$d"
  mkdir -p "$d"
  local padding="" i
  for i in $(seq 1 "$PAD"); do
    # A 64-bit product (wrapping) as 16 hex digits.
    padding="$padding, hex(v * $((6364136223846793005 / (i + 1) | 1)))"
  done
  cat >"$d/pipeline.sql" <<EOF
SET 'spark.sql.shuffle.partitions' = '$PARTITIONS';
SET 'spark.sql.streaming.stateStore.providerClass' = '$provider';
-- Files for the last 5 versions only (Spark keeps 100): the checkpoint holds about one or two
-- snapshots of the state and the deltas since, not a snapshot every 10 batches.
SET 'spark.sql.streaming.minBatchesToRetain' = '5';
CREATE TABLE ticks WITH (connector = 'rate-micro-batch', 'rowsPerBatch' = '$PER_BATCH', 'numPartitions' = '2');
CREATE SINK keys WITH (connector = 'filesystem', format = 'parquet', path = '$d/out',
  checkpoint = '$d/checkpoint', 'outputMode' = 'append') AS
SELECT DISTINCT concat_ws('-', CAST(v AS STRING)$padding) AS k
FROM (SELECT pmod(value * 7919, $keys) AS v FROM ticks WHERE value < $rows);
EOF
  local last_batch=$(((rows + PER_BATCH - 1) / PER_BATCH - 1))
  local cg=""
  if [ "$cap" != none ]; then
    cg="/sys/fs/cgroup/memory/sluice-soak-$$-$name"
    if mkdir "$cg" 2>/dev/null; then
      # echo, not python's print: a cgroup v1 file takes the value in one plain write.
      local limit
      limit=$(bytes "$cap")
      echo "$limit" >"$cg/memory.limit_in_bytes"
      [ -f "$cg/memory.memsw.limit_in_bytes" ] && echo "$limit" >"$cg/memory.memsw.limit_in_bytes" || true
      [ "$(cat "$cg/memory.limit_in_bytes")" -le "$limit" ] && [ "$(cat "$cg/memory.limit_in_bytes")" -gt 0 ] || {
        echo "the cgroup $cg did not take the limit $limit" >&2
        exit 1
      }
    else
      echo "cannot create a memory cgroup under /sys/fs/cgroup/memory (cgroup v1, root); run as root or set CAP=none" >&2
      exit 1
    fi
  fi
  local attempt=0 restart_ms=0 peak_rss=0 cache_peak=0
  while :; do
    attempt=$((attempt + 1))
    local log="$d/progress-$attempt.jsonl" start_ms
    start_ms=$(date +%s%3N)
    if [ -n "$cg" ]; then
      sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cg" \
        "$SLUICE_BIN" run "$d/pipeline.sql" --progress json >"$log" 2>"$d/stderr-$attempt.txt" &
    else
      "$SLUICE_BIN" run "$d/pipeline.sql" --progress json >"$log" 2>"$d/stderr-$attempt.txt" &
    fi
    local pid=$! batch=-1 first=0 killed=0 stopping=0 ticks=0
    while kill -0 "$pid" 2>/dev/null; do
      sleep 1
      ticks=$((ticks + 1))
      local hwm rss
      hwm=$(awk '/VmHWM/ {printf "%d", $2 * 1024}' "/proc/$pid/status" 2>/dev/null || echo 0)
      [ "${hwm:-0}" -gt "$peak_rss" ] && peak_rss=$hwm
      rss=$(awk '/VmRSS/ {printf "%d", $2 / 1024}' "/proc/$pid/status" 2>/dev/null || echo 0)
      echo "$attempt $batch $rss" >>"$d/rss.txt"
      if [ $((ticks % 15)) -eq 0 ] && [ -d "$TMPDIR/sluice-state-$pid" ]; then
        local c
        c=$(du -sb "$TMPDIR/sluice-state-$pid" 2>/dev/null | cut -f1 || echo 0)
        [ "${c:-0}" -gt "$cache_peak" ] && cache_peak=$c
      fi
      [ -s "$log" ] || continue
      batch=$(tail -n 1 "$log" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["batchId"])' 2>/dev/null || echo "$batch")
      if [ "$first" = 0 ] && [ "$attempt" -gt 1 ]; then
        first=1
        restart_ms=$(($(date +%s%3N) - start_ms))
      fi
      if [ "$attempt" = 1 ] && [ "$kill_at" -ge 0 ] && [ "$batch" -ge "$kill_at" ]; then
        kill -9 "$pid"
        killed=1
        echo "$name: SIGKILL after batch $batch" >&2
        break
      fi
      if [ "$batch" -ge "$last_batch" ] && [ "$stopping" = 0 ]; then
        kill -TERM "$pid"
        stopping=1
      fi
    done
    local rc=0
    wait "$pid" || rc=$?
    if [ "$killed" = 1 ]; then
      continue
    fi
    if [ "$rc" != 0 ] || [ "$batch" -lt "$last_batch" ]; then
      echo "$name: the run ended with exit code $rc at batch $batch (of $last_batch):" >&2
      tail -n 5 "$d/stderr-$attempt.txt" >&2
      [ -n "$cg" ] && echo "cgroup failcnt $(cat "$cg/memory.failcnt"), peak $(cat "$cg/memory.max_usage_in_bytes")" >&2
      exit 1
    fi
    break
  done
  local cg_peak=0
  if [ -n "$cg" ]; then
    cg_peak=$(cat "$cg/memory.max_usage_in_bytes")
    rmdir "$cg" 2>/dev/null || true
  fi
  local state_bytes
  state_bytes=$(du -sb "$d/checkpoint/state" | cut -f1)
  python3 - "$d" "$peak_rss" "$cg_peak" "$state_bytes" "$cache_peak" "$restart_ms" "$last_batch" <<'EOF' >"$d/summary.json"
import glob, json, sys
d, rss, cg, state, cache, restart, last = sys.argv[1], *map(int, sys.argv[2:])
rows = ms = 0
commits = []
# The batches up to the one with the last row (the source goes on with rows the query filters).
for f in sorted(glob.glob(f"{d}/progress-*.jsonl")):
    for line in open(f):
        p = json.loads(line)
        if p["numInputRows"] and p["batchId"] <= last:
            rows += p["numInputRows"]
            ms += p["batchDuration"]
            commits.append(p["stateOperators"][0]["commitTimeMs"])
commits.sort()
def rss_by_quarter():
    # The largest RSS seen while each quarter of the batches ran.
    try:
        seen = [tuple(map(int, l.split())) for l in open(f"{d}/rss.txt")]
    except OSError:
        return []
    out = []
    for q in range(4):
        lo, hi = q * (last + 1) // 4, (q + 1) * (last + 1) // 4
        vals = [r for _, b, r in seen if lo <= b + 1 < hi or (q == 3 and b + 1 >= hi)]
        out.append(max(vals) if vals else 0)
    return out
q = lambda f: commits[min(len(commits) - 1, int(f * len(commits)))] if commits else 0
print(json.dumps({
    "rows": rows, "rowsPerSecond": round(rows * 1000 / max(ms, 1)), "peakRssMiB": rss >> 20,
    "cgroupPeakMiB": cg >> 20, "checkpointStateMiB": state >> 20, "localCacheMiB": cache >> 20,
    "commitMsP50": q(0.5), "commitMsP99": q(0.99), "commitMsMax": commits[-1] if commits else 0,
    "restartToFirstBatchMs": restart,
    "rssMiBByQuarter": rss_by_quarter(),
}))
EOF
  echo "$name: $(cat "$d/summary.json")"
}

# check OUT KEYS: every key of 0..KEYS in the output exactly once (files listed by the
# manifest); prints a digest of the keys.
check() {
  python3 - "$1" "$2" <<'EOF'
import hashlib, json, os, sys
import pyarrow.parquet as pq
out, keys = sys.argv[1], int(sys.argv[2])
paths = set()
md = os.path.join(out, "_spark_metadata")
for f in os.listdir(md):
    if f.startswith("."):
        continue
    for line in open(os.path.join(md, f)):
        if line.startswith("{"):
            e = json.loads(line)
            if e.get("action", "add") == "add":
                paths.add(e["path"].removeprefix("file://"))
seen = bytearray(keys)
rows = dup = 0
for p in sorted(paths):
    for b in pq.ParquetFile(p).iter_batches(columns=["k"], batch_size=1 << 16):
        for s in b.column(0).to_pylist():
            i = int(s.split("-", 1)[0])
            rows += 1
            dup += seen[i]
            seen[i] = 1
missing = keys - sum(seen)
print(json.dumps({"outputRows": rows, "duplicates": dup, "missing": missing,
                  "digest": hashlib.sha256(bytes(seen)).hexdigest()[:16]}))
sys.exit(0 if dup == 0 and missing == 0 and rows == keys else 1)
EOF
}

big_batches=$(((ROWS + PER_BATCH - 1) / PER_BATCH))
if [ "${SKIP_BIG:-0}" != 1 ]; then
  run big-on-disk "$ROCKSDB" "$KEYS" "$ROWS" "${KILL_AT:-$((big_batches / 2))}" "$CAP"
  out=$(check "$DIR/big-on-disk/out" "$KEYS") || { echo "big-on-disk output is wrong: $out" >&2; exit 1; }
  echo "big-on-disk output: $out"
fi
small_rows=$((SMALL_KEYS / 5 * 6))
run small-on-disk "$ROCKSDB" "$SMALL_KEYS" "$small_rows" -1 none
run small-in-memory "$HDFS" "$SMALL_KEYS" "$small_rows" -1 none
a=$(check "$DIR/small-on-disk/out" "$SMALL_KEYS") || { echo "small-on-disk output is wrong: $a" >&2; exit 1; }
b=$(check "$DIR/small-in-memory/out" "$SMALL_KEYS") || { echo "small-in-memory output is wrong: $b" >&2; exit 1; }
echo "small-on-disk output: $a"
echo "small-in-memory output: $b"
[ "$a" = "$b" ] || { echo "the providers' outputs differ" >&2; exit 1; }
echo "soak passed"
