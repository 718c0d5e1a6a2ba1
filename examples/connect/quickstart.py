"""The quickstart of issue 15, in PySpark over Spark Connect, against `sluice connect`.

    scripts/connect            # builds, starts the server, runs this file, stops the server

A windowed count with a watermark over JSON files, each batch printed by a Python foreachBatch
(its prints appear in the server's output: Spark runs foreachBatch in a Python worker beside
the server, and so does Sluice), then the query's last progress.
"""

import json
import os
import sys
import tempfile

from pyspark.sql import SparkSession, functions as F

url = os.environ.get("SPARK_REMOTE", "sc://127.0.0.1:15002")
work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sluice-quickstart-")
events = os.path.join(work, "events")
os.makedirs(events, exist_ok=True)
# One file per batch (maxFilesPerTrigger 1). As in Spark 3.5, a batch drops rows behind the
# watermark of the batch before it: batch 2 runs with 11:57 (12:07 minus 10 minutes, from
# batch 0), so the 11:40 row is dropped there, not in batch 1.
files = [
    [{"ts": "2026-12-01T12:01:00Z"}, {"ts": "2026-12-01T12:03:00Z"}, {"ts": "2026-12-01T12:07:00Z"}],
    [{"ts": "2026-12-01T12:30:00Z"}],
    [{"ts": "2026-12-01T11:40:00Z"}],
]
for i, rows in enumerate(files):
    with open(os.path.join(events, "%d.json" % (i + 1)), "w") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    os.utime(os.path.join(events, "%d.json" % (i + 1)), (1_800_000_000 + i, 1_800_000_000 + i))

spark = SparkSession.builder.remote(url).getOrCreate()
counts = (
    spark.readStream.schema("ts TIMESTAMP")
    .option("maxFilesPerTrigger", 1)
    .json(events)
    .withWatermark("ts", "10 minutes")
    .groupBy(F.window("ts", "5 minutes"))
    .count()
)


def show_batch(df, batch_id):
    print(batch_id, sorted(df.collect()), flush=True)


q = (
    counts.writeStream.outputMode("update")
    .foreachBatch(show_batch)
    .option("checkpointLocation", os.path.join(work, "ckpt"))
    .trigger(availableNow=True)
    .start()
)
q.awaitTermination()
progress = q.recentProgress
for p in progress:
    print(
        "batch", p["batchId"], "rows", p["numInputRows"],
        "watermark", p["eventTime"].get("watermark"),
        "dropped", p["stateOperators"][0]["numRowsDroppedByWatermark"],
    )
print("numRowsDroppedByWatermark:", q.lastProgress["stateOperators"][0]["numRowsDroppedByWatermark"])
spark.stop()
