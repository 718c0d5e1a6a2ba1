"""The Spark side of benches/kafka_compare.sh: Spark 3.5.7 (local[2]) with its Kafka connector
(org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.7, fetched from Maven Central by spark.jars.packages)
runs the queries of `sluice bench --workload kafka` over the same topic:

  --sink parquet  from_json of each value, the events and their partition/offset to parquet files
  --sink kafka    the events re-encoded with to_json (amount in euros, key = user) to --out-topic;
                  Spark's Kafka sink is at-least-once (it has no transactional mode)

Reads --topic from the earliest offset with Trigger.AvailableNow, maxOffsetsPerTrigger records per
batch. The last line printed is one JSON object with the keys the Sluice side prints.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "bench"))
from bench_spark import jvm_peak_rss  # noqa: E402

SCHEMA = "ts TIMESTAMP, user STRING, action STRING, amount DOUBLE"
PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.7"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sink", choices=["parquet", "kafka"], required=True)
    ap.add_argument("--topic", default="bench-events")
    ap.add_argument("--out-topic", default="bench-out")
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--max-offsets-per-trigger", type=int, required=True)
    ap.add_argument("--workdir", default="/tmp/sluice-bench/spark-kafka")
    ap.add_argument("--driver-memory", default="2g")
    a = ap.parse_args()

    from pyspark.sql import SparkSession
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    spark = (SparkSession.builder.master("local[2]").appName("bench-kafka")
             .config("spark.jars.packages", PACKAGE)
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", a.driver_memory)
             .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()

    (spark.readStream.format("kafka")
     .option("kafka.bootstrap.servers", a.bootstrap)
     .option("subscribe", a.topic)
     .option("startingOffsets", "earliest")
     .option("maxOffsetsPerTrigger", a.max_offsets_per_trigger)
     .load().createOrReplaceTempView("events"))
    parsed = (f"SELECT from_json(CAST(value AS STRING), '{SCHEMA}') AS e, partition, offset "
              "FROM events")
    out = os.path.join(a.workdir, "out-parquet")
    if a.sink == "parquet":
        df = spark.sql(f"SELECT e.ts, e.user, e.action, e.amount, partition, offset FROM ({parsed}) p")
        writer = df.writeStream.format("parquet").option("path", out)
    else:
        df = spark.sql("SELECT e.user AS key, to_json(named_struct('ts', e.ts, 'user', e.user, "
                       "'action', e.action, 'amount_eur', round(e.amount * 1.2, 2))) AS value "
                       f"FROM ({parsed}) p")
        writer = (df.writeStream.format("kafka").option("kafka.bootstrap.servers", a.bootstrap)
                  .option("topic", a.out_topic))
    t0 = time.time()
    q = (writer.option("checkpointLocation", os.path.join(a.workdir, "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.time() - t0
    progress = q.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    data_ms = sorted(p["durationMs"]["triggerExecution"] for p in progress if p["numInputRows"] > 0)
    rss = jvm_peak_rss(spark)
    if a.sink == "parquet":
        rows_out = spark.read.parquet(out).count()
    else:
        rows_out = (spark.read.format("kafka").option("kafka.bootstrap.servers", a.bootstrap)
                    .option("subscribe", a.out_topic).load().count())
    print(f"spark bench kafka -> {a.sink}: {rows} records in, {rows_out} out, wall {wall:.3f}s",
          file=sys.stderr)
    spark.stop()
    print(json.dumps({"engine": "spark", "workload": f"kafka-{a.sink}",
                      "rows_per_second": round(rows / wall, 1),
                      "median_batch_ms": statistics.median(data_ms) if data_ms else None,
                      "wall_seconds": round(wall, 3), "peak_rss_bytes": rss,
                      "batches": len(data_ms), "rows_in": rows, "rows_out": rows_out}), flush=True)


if __name__ == "__main__":
    main()
