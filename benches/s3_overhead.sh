#!/usr/bin/env bash
# Per-batch overhead of the same query with everything on local disk and with everything on S3
# (the local S3-compatible server of scripts/s3-server: moto on 127.0.0.1), in one run:
#   benches/s3_overhead.sh [--batches N] [--rounds R]
# The query: a JSON file source (one 1-row file per batch, maxFilesPerTrigger=1) to a parquet
# file sink, available-now; its input, output and checkpoint are all local, or all in one
# bucket. Each batch writes offsets/N, sources/0/N, a data file, _spark_metadata/N and
# commits/N, so the figure is what a batch's checkpoint and sink I/O cost on each store. The
# rounds alternate local and S3; the script prints, per store, the median `triggerExecution`
# over every batch but the first of each run, and the object store requests per batch.
# Sluice is $SLUICE_BIN, default $CARGO_TARGET_DIR/debug/sluice (CARGO_TARGET_DIR defaulting to
# /var/tmp/sluice-target), built with `cargo build -p sluice-cli` when missing; use a --release
# build for figures worth publishing (SLUICE_BIN=.../release/sluice).
set -euo pipefail
cd "$(dirname "$0")/.."

batches=30
rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --batches) batches="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    *) echo "usage: benches/s3_overhead.sh [--batches N] [--rounds R]" >&2; exit 2 ;;
  esac
done

target="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
bin="${SLUICE_BIN:-$target/debug/sluice}"
if [ ! -x "$bin" ]; then
  CARGO_TARGET_DIR="$target" cargo build -p sluice-cli
fi
scripts/s3-server start >&2
eval "$(scripts/s3-server env)"
py="${SLUICE_TOOLS:-$HOME/.cache/sluice}/venv-s3/bin/python"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

exec "$py" - "$bin" "$work" "$batches" "$rounds" "$SLUICE_S3_ENDPOINT" <<'PY'
import json, os, statistics, subprocess, sys, time, uuid
import boto3

bin_, work, batches, rounds, endpoint = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                  aws_secret_access_key="test", region_name="us-east-1")

def pipeline(root, setup=""):
    return setup + f"""
CREATE TABLE events (id BIGINT, user STRING) WITH (connector = 'filesystem',
  path = '{root}/in', format = 'json', maxFilesPerTrigger = '1');
CREATE SINK out WITH (connector = 'filesystem', path = '{root}/out', format = 'parquet',
  checkpoint = '{root}/ck', trigger = 'available-now') AS SELECT id, user FROM events;
"""

def run(sql):
    path = os.path.join(work, f"p-{uuid.uuid4().hex}.sql")
    with open(path, "w") as f:
        f.write(sql)
    t = time.time()
    out = subprocess.run([bin_, "run", path, "--progress", "json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sluice run failed: {out.stderr}")
    ps = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    assert len(ps) == batches, f"{len(ps)} batches, wanted {batches}"
    return time.time() - t, ps

setup_s3 = "".join(f"SET 'spark.hadoop.fs.s3a.{k}' = '{v}';\n" for k, v in [
    ("endpoint", endpoint), ("access.key", "test"), ("secret.key", "test"),
    ("path.style.access", "true"), ("endpoint.region", "us-east-1")])
res = {"local": [], "s3": []}
reqs = []
wall = {"local": [], "s3": []}
for r in range(rounds):
    # local
    root = os.path.join(work, f"local-{r}")
    os.makedirs(f"{root}/in")
    for i in range(batches):
        with open(f"{root}/in/{i:05}.json", "w") as f:
            f.write(json.dumps({"id": i, "user": "u"}) + "\n")
        os.utime(f"{root}/in/{i:05}.json", (1_700_000_000 + i, 1_700_000_000 + i))
    secs, ps = run(pipeline(root))
    wall["local"].append(secs)
    res["local"] += [p["durationMs"]["triggerExecution"] for p in ps[1:]]
    # S3: one new bucket per round
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    for i in range(batches):
        s3.put_object(Bucket=bucket, Key=f"in/{i:05}.json", Body=json.dumps({"id": i, "user": "u"}) + "\n")
    secs, ps = run(pipeline(f"s3a://{bucket}", setup_s3))
    wall["s3"].append(secs)
    res["s3"] += [p["durationMs"]["triggerExecution"] for p in ps[1:]]
    reqs += [p["objectStore"]["requests"] for p in ps[1:]]

print(json.dumps({
    "batches_per_run": batches, "rounds": rounds, "binary": bin_,
    "local_median_batch_ms": statistics.median(res["local"]),
    "s3_median_batch_ms": statistics.median(res["s3"]),
    "s3_minus_local_ms": statistics.median(res["s3"]) - statistics.median(res["local"]),
    "s3_requests_per_batch_median": statistics.median(reqs),
    "local_run_s_median": round(statistics.median(wall["local"]), 2),
    "s3_run_s_median": round(statistics.median(wall["s3"]), 2),
}))
PY
