#!/usr/bin/env python3
"""Nexmark q5 (hot items) on PySpark (local[2], 2 shuffle partitions) over the bid files that
`sluice bench --workload nexmark --export DIR` wrote (parquet, two files per generated batch).

    TZ=UTC python3 benches/nexmark_spark.py --bids DIR/bid --events N --workdir W

The same query as Sluice's (crates/cli/src/nexmark.rs): bids per auction per sliding window
(10 s every 2 s, watermark 1 s), then per window the auction with the most bids. Spark chains
the second aggregation on `window(window_time(w), '2 seconds')` (Spark's way of grouping by a
window of a window; one 2 s window per 10 s window). Prints one JSON line like the engine's
bench: events_per_second (all generated events, as Sluice counts them), per core (2), wall
seconds, median batch ms, JVM peak RSS and the JVM's resident memory after each batch.
"""
import argparse
import json
import os
import shutil
import statistics
import time

os.environ["TZ"] = "UTC"
time.tzset()


def jvm_status(spark, key):
    try:
        pid = spark.sparkContext._gateway.proc.pid
        with open("/proc/%d/status" % pid) as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except Exception:
        return None
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bids", required=True)
    ap.add_argument("--events", type=int, required=True, help="events generated (for events/s)")
    ap.add_argument("--workdir", default="/tmp/sluice-nexmark-spark")
    ap.add_argument("--driver-memory", default="2g")
    a = ap.parse_args()

    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("nexmark-q5")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", a.driver_memory)
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()

    schema = ("auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
              "date_time TIMESTAMP_NTZ, extra STRING")
    bids = (spark.readStream.schema(schema).option("maxFilesPerTrigger", "2").parquet(a.bids)
            .selectExpr("auction", "bidder", "price", "channel", "url",
                        "CAST(date_time AS TIMESTAMP) AS date_time", "extra")
            .withWatermark("date_time", "1 second"))
    bids.createOrReplaceTempView("bid")
    spark.sql("SELECT window(date_time, '10 seconds', '2 seconds') AS w, auction, count(*) AS num "
              "FROM bid GROUP BY window(date_time, '10 seconds', '2 seconds'), auction") \
        .createOrReplaceTempView("auction_bids")
    top = spark.sql("SELECT window(window_time(w), '2 seconds') AS w2, max_by(auction, num) AS auction, "
                    "max(num) AS num FROM auction_bids GROUP BY window(window_time(w), '2 seconds')")

    out_rows, rss = [], []

    def sink(df, batch_id):
        out_rows.append(df.count())
        rss.append(jvm_status(spark, "VmRSS") or 0)

    ckpt = os.path.join(a.workdir, "ckpt-q5")
    if os.path.exists(ckpt):
        shutil.rmtree(ckpt)
    t0 = time.time()
    q = (top.writeStream.outputMode("append").foreachBatch(sink)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.time() - t0
    data = [p for p in q.recentProgress if p["numInputRows"] > 0]
    med = statistics.median(p["durationMs"]["triggerExecution"] for p in data) if data else None
    n = len(rss)
    sample = [rss[i * (n - 1) // 11] // 1048576 for i in range(12)] if n > 12 else [r // 1048576 for r in rss]
    print(json.dumps({
        "engine": "spark", "workload": "nexmark-q5", "events": a.events,
        "output_rows": sum(out_rows), "batches": len(q.recentProgress),
        "wall_seconds": round(wall, 3), "events_per_second": round(a.events / wall),
        "events_per_second_per_core": round(a.events / wall / 2), "median_batch_ms": med,
        "peak_rss_bytes": jvm_status(spark, "VmHWM"), "rss_mb_by_batch": sample,
    }), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
