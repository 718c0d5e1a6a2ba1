#!/usr/bin/env python3
"""Sluice's `sluice connect` next to the real Spark Connect server (pyspark==4.2.0's jars), on
the same machine, in one run (benches/connect_vs_spark.sh sets up the venvs and calls this):

  * start-up: from spawning the server until `spark.range(1).collect()` answers;
  * per-batch overhead of a 1-row file-to-foreachBatch query:
      - `running`: one query with a processingTime=0 trigger and maxFilesPerTrigger=1; N times a
        1-row file is dropped in and we wait until the foreachBatch function (in the server's
        Python worker) has written that batch's marker: the median wall clock per batch, and
        the median `triggerExecution` of the batches' progress;
      - `available_now`: N runs, each one new 1-row file and a new availableNow query on the
        same checkpoint, start to awaitTermination: the median wall clock per run;
  * peak memory of the server and every process it started (its Python workers; for Spark the
    JVM under spark-submit's shell): the largest sampled sum (every 50 ms) of VmRSS over the
    process tree, and VmHWM of the server process itself (for Spark, spark-submit's process
    is the JVM: the shell scripts exec it).

Prints one JSON line. Run it with the python of scripts/connect-venv (pyspark-client 4.2.0).
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
os.environ["TZ"] = "UTC"

import servers  # noqa: E402


class MemorySampler(threading.Thread):
    def __init__(self, server, interval=0.05):
        super().__init__(daemon=True)
        self.server, self.interval = server, interval
        self.peak_rss_kb = 0
        self.hwm_kb = {}
        self.stop_event = threading.Event()

    def run(self):
        while not self.stop_event.is_set():
            self.sample()
            time.sleep(self.interval)

    def sample(self):
        pids = self.server.pids()
        total = 0
        for p in pids:
            total += servers.vm_kb(p, "VmRSS")
            h = servers.vm_kb(p, "VmHWM")
            if h:
                self.hwm_kb[p] = max(self.hwm_kb.get(p, 0), h)
        self.peak_rss_kb = max(self.peak_rss_kb, total)

    def stop(self):
        self.sample()
        self.stop_event.set()
        self.join(5)


def make_marker(out_dir):
    def mark(df, batch_id):
        import os as _os
        n = len(df.collect())
        tmp = _os.path.join(out_dir, ".%d" % batch_id)
        with open(tmp, "w") as fh:
            fh.write(str(n))
        _os.rename(tmp, _os.path.join(out_dir, "%d" % batch_id))
    return mark


def drop_file(src, i):
    tmp = os.path.join(os.path.dirname(src), ".f%05d.json" % i)
    with open(tmp, "w") as fh:
        fh.write(json.dumps({"id": i, "ts": "2026-09-15T12:00:00Z"}) + "\n")
    os.rename(tmp, os.path.join(src, "f%05d.json" % i))


def wait_path(path, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError("no %s after %ds" % (path, timeout))
        time.sleep(0.002)


def session(url):
    from pyspark.sql import SparkSession
    return SparkSession.builder.remote(url).create()


def startup(server):
    t0 = time.monotonic()
    server.start()
    while True:
        try:
            spark = session(server.url)
            assert spark.range(1).collect()[0].id == 0
            return spark, time.monotonic() - t0, server.last_startup_seconds
        except ImportError:
            raise
        except Exception:  # noqa: BLE001 - not answering yet
            if time.monotonic() - t0 > 300:
                raise
            time.sleep(0.05)


def bench_running(spark, root, n):
    src, out = os.path.join(root, "run-in"), os.path.join(root, "run-out")
    os.makedirs(src)
    os.makedirs(out)
    q = (spark.readStream.schema("id INT, ts TIMESTAMP").option("maxFilesPerTrigger", 1).json(src)
         .writeStream.foreachBatch(make_marker(out))
         .option("checkpointLocation", os.path.join(root, "run-ckpt"))
         .trigger(processingTime="0 seconds").start())
    walls = []
    try:
        for i in range(n + 1):
            t0 = time.monotonic()
            drop_file(src, i)
            wait_path(os.path.join(out, str(i)), 120)
            if i > 0:  # batch 0 includes the worker's start
                walls.append(time.monotonic() - t0)
        progress = [json.loads(p.json) for p in q.recentProgress]
    finally:
        q.stop()
    trig = [p["durationMs"]["triggerExecution"] for p in progress
            if "addBatch" in p.get("durationMs", {}) and p["batchId"] > 0]
    first_batch_ms = [p["durationMs"]["triggerExecution"] for p in progress
                      if p["batchId"] == 0 and "addBatch" in p.get("durationMs", {})]
    return {
        "batches": len(walls),
        "median_wall_ms_per_batch": round(1000 * statistics.median(walls), 1),
        "median_trigger_execution_ms": statistics.median(trig) if trig else None,
        "first_batch_trigger_execution_ms": first_batch_ms[0] if first_batch_ms else None,
    }


def bench_available_now(spark, root, n):
    src, out = os.path.join(root, "an-in"), os.path.join(root, "an-out")
    ckpt = os.path.join(root, "an-ckpt")
    os.makedirs(src)
    os.makedirs(out)
    df = spark.readStream.schema("id INT, ts TIMESTAMP").json(src)
    walls, trig = [], []
    for i in range(n + 1):
        drop_file(src, i)
        t0 = time.monotonic()
        q = (df.writeStream.foreachBatch(make_marker(out)).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        wall = time.monotonic() - t0
        if i > 0:
            walls.append(wall)
            trig.extend(p["durationMs"]["triggerExecution"]
                        for p in (json.loads(x.json) for x in q.recentProgress)
                        if "addBatch" in p.get("durationMs", {}))
        if not os.path.exists(os.path.join(out, str(i))):
            raise RuntimeError("availableNow run %d did not deliver its batch" % i)
    return {
        "runs": len(walls),
        "median_wall_ms_per_run": round(1000 * statistics.median(walls), 1),
        "median_trigger_execution_ms": statistics.median(trig) if trig else None,
    }


def bench(kind, n, worker_python):
    root = tempfile.mkdtemp(prefix="connect-bench-%s-" % kind)
    server = servers.Server(kind, worker_python=worker_python,
                            log_path=os.path.join(root, "server.log"), cwd=root)
    sampler = MemorySampler(server)
    try:
        spark, ready_s, port_s = startup(server)
        sampler.start()
        result = {
            "startup_s_until_range_collect": round(ready_s, 3),
            "startup_s_until_port_open": round(port_s, 3),
            "running_trigger": bench_running(spark, root, n),
            "available_now_per_run": bench_available_now(spark, root, n),
        }
        sampler.stop()
        result["peak_rss_mb_sampled_tree_sum"] = round(sampler.peak_rss_kb / 1024, 1)
        root_pid = server.proc.pid if server.proc else None
        result["vm_hwm_mb_server_process"] = round(sampler.hwm_kb.get(root_pid, 0) / 1024, 1)
        result["processes_seen"] = len(sampler.hwm_kb)
        try:
            spark.stop()
        except Exception:  # noqa: BLE001
            pass
        return result
    except Exception as e:  # noqa: BLE001
        return {"error": "%s: %s" % (type(e).__name__, str(e)[:2000]),
                "log_tail": server.log_tail(20)}
    finally:
        sampler.stop_event.set()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--only", choices=["spark", "sluice"])
    args = ap.parse_args()
    out = {"batches": args.batches, "machine": {"cpus": os.cpu_count(),
                                                "loadavg_at_start": os.getloadavg()[0]}}
    if args.only in (None, "spark"):
        out["spark"] = bench("spark", args.batches, servers.spark_python())
    if args.only in (None, "sluice"):
        if os.access(servers.sluice_bin(), os.X_OK):
            out["sluice"] = bench("sluice", args.batches, sys.executable)
        else:
            out["sluice"] = {"error": "no sluice binary at %s (cargo build -p sluice-cli)"
                                      % servers.sluice_bin()}
    out["machine"]["loadavg_at_end"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
