#!/usr/bin/env python3
"""The workloads of shared/bench on Apache Flink (PyFlink, local mini-cluster, parallelism 2),
for benches/compare_spark.sh to run next to Sluice and Spark on the same files.

    python3 bench_flink.py --workload windowed --input DIR [--workdir DIR] [--check]

Flink's SQL over a filesystem JSON source (bounded: every file once, as Spark's and Sluice's
available-now trigger), blackhole sinks:

  windowed   TUMBLE(ts, 1 minute) GROUP BY window, user: SUM(amount), COUNT(*) (Flink's
             window TVF emits each window once, when the watermark passes it; Spark's update
             mode emits changed windows per batch). WATERMARK ts - 1 day, not Spark's 10
             minutes: Flink reads the files as parallel splits in no set order, so with 10
             minutes a file read after a later one is late, and Flink dropped most rows (the
             check below caught it: 127,903 (window, user) rows of 341,380 on 2 M rows). With a
             day no row is late and every window closes at the end of the input: the same
             result as the other engines, with Flink holding every window until then.
  stateless  action IN ('buy','cart') OR amount > 90; ts, user, action,
             ROUND(amount * 1.2, 2), CAST(ts AS DATE)   (to blackhole; Sluice and Spark write
             parquet, so Flink's figure flatters it)

The last line printed is one JSON object with the keys the other engines' benches print:
{"engine": "flink", "workload": ..., "rows_per_second": ..., "median_batch_ms": null,
 "wall_seconds": ..., "peak_rss_bytes": ..., "batches": null}. rows/s = input lines / wall time
of the job (submission to end, the mini-cluster's start included; the Python and JVM start is
not). Peak RSS is the JVM's VmHWM.

--check runs the windowed query once more into a CSV file sink and compares it with the same
aggregation computed in batch by DuckDB over the files (every window, user, sum and count),
so the comparison is of equal work: a row Flink dropped as late, or counted twice, fails it.
"""
import argparse
import glob
import json
import os
import shutil
import sys
import time

os.environ["TZ"] = "UTC"
time.tzset()


def table_env():
    from pyflink.table import EnvironmentSettings, TableEnvironment
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", "2")
    conf.set("table.local-time-zone", "UTC")
    conf.set("pipeline.name", "sluice-bench")
    return env


def source(env, path):
    env.execute_sql(f"""
        CREATE TEMPORARY TABLE events (
            ts TIMESTAMP_LTZ(3), `user` STRING, action STRING, amount DOUBLE,
            WATERMARK FOR ts AS ts - INTERVAL '1' DAY
        ) WITH (
            'connector' = 'filesystem', 'path' = 'file://{os.path.abspath(path)}',
            'format' = 'json', 'json.timestamp-format.standard' = 'ISO-8601'
        )""")


WINDOWED = """
    SELECT window_start, window_end, `user`, SUM(amount) AS total, COUNT(*) AS n
    FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
    GROUP BY window_start, window_end, `user`"""

STATELESS = """
    SELECT ts, `user`, action, ROUND(amount * 1.2, 2) AS amount_eur, CAST(ts AS DATE) AS `day`
    FROM events WHERE action IN ('buy', 'cart') OR amount > 90"""


def sink(env, name, columns, connector):
    env.execute_sql(f"CREATE TEMPORARY TABLE {name} ({columns}) WITH ({connector})")


def run(env, insert):
    t0 = time.time()
    env.execute_sql(insert).wait()
    return time.time() - t0


def jvm_peak_rss():
    """VmHWM of this process's Java children (PyFlink's gateway runs the mini-cluster)."""
    best = None
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in open(status) if ":" in line)
            if int(fields["PPid"]) != os.getpid():
                continue
            pid = status.split("/")[2]
            if b"java" not in open(f"/proc/{pid}/cmdline", "rb").read():
                continue
            hwm = int(fields["VmHWM"].split()[0]) * 1024
            best = max(best or 0, hwm)
        except (OSError, KeyError, ValueError):
            continue
    return best


def input_lines(path):
    n = 0
    for f in sorted(os.listdir(path)):
        if not f.startswith((".", "_")):
            with open(os.path.join(path, f), "rb") as fh:
                n += fh.read().count(b"\n")
    return n


def check_windowed(env, path, workdir):
    """Flink's windowed result, written once to CSV, against DuckDB's batch aggregation."""
    import duckdb
    out = os.path.join(workdir, "flink-windowed-check")
    shutil.rmtree(out, ignore_errors=True)
    sink(env, "check_out",
         "window_start TIMESTAMP(3), window_end TIMESTAMP(3), `user` STRING, total DOUBLE, n BIGINT",
         f"'connector' = 'filesystem', 'path' = 'file://{out}', 'format' = 'csv'")
    run(env, f"INSERT INTO check_out {WINDOWED}")
    files = [f for f in glob.glob(os.path.join(out, "**", "*"), recursive=True)
             if os.path.isfile(f) and not os.path.basename(f).startswith(".")]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    flink = con.execute(
        "SELECT strftime(CAST(column0 AS TIMESTAMP), '%Y-%m-%d %H:%M:%S'), column2, "
        "round(CAST(column3 AS DOUBLE), 6), CAST(column4 AS BIGINT) FROM read_csv(?, header = false, "
        "all_varchar = true) ORDER BY 1, 2", [files]).fetchall()
    duck = con.execute(
        "SELECT strftime(time_bucket(INTERVAL 1 MINUTE, ts), '%Y-%m-%d %H:%M:%S'), \"user\", "
        "round(sum(amount), 6), count(*) FROM read_json(?, columns = {ts: 'TIMESTAMP', "
        "\"user\": 'VARCHAR', action: 'VARCHAR', amount: 'DOUBLE'}, format = 'newline_delimited') "
        "GROUP BY 1, 2 ORDER BY 1, 2", [os.path.join(path, "*.json")]).fetchall()
    if flink != duck:
        missing = set(duck) - set(flink)
        extra = set(flink) - set(duck)
        sys.exit(f"Flink's windowed result differs from DuckDB's batch aggregation: "
                 f"{len(flink)} rows against {len(duck)}; {len(missing)} missing (e.g. "
                 f"{sorted(missing)[:3]}), {len(extra)} extra (e.g. {sorted(extra)[:3]})")
    print(f"flink windowed check: {len(flink)} (window, user) rows, the same as DuckDB's",
          file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", choices=["windowed", "stateless"], required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--workdir", default="/tmp/sluice-bench/flink-work")
    ap.add_argument("--check", action="store_true",
                    help="check the windowed result against DuckDB first (not timed)")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    env = table_env()
    source(env, a.input)
    if a.check:
        check_windowed(env, a.input, a.workdir)
    if a.workload == "windowed":
        sink(env, "bench_out", "window_start TIMESTAMP(3), window_end TIMESTAMP(3), `user` STRING, "
             "total DOUBLE, n BIGINT", "'connector' = 'blackhole'")
        wall = run(env, f"INSERT INTO bench_out {WINDOWED}")
    else:
        sink(env, "bench_out", "ts TIMESTAMP_LTZ(3), `user` STRING, action STRING, amount_eur DOUBLE, "
             "`day` DATE", "'connector' = 'blackhole'")
        wall = run(env, f"INSERT INTO bench_out {STATELESS}")
    rows = input_lines(a.input)
    print(json.dumps({"engine": "flink", "workload": a.workload,
                      "rows_per_second": round(rows / wall, 1), "median_batch_ms": None,
                      "wall_seconds": round(wall, 3), "peak_rss_bytes": jvm_peak_rss(),
                      "batches": None}), flush=True)


if __name__ == "__main__":
    main()
