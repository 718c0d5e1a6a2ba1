"""The PySpark surface a streaming user touches, over Spark Connect: the query handle,
`spark.streams`, sinks and triggers, batch reads and writes around the stream, `spark.conf`,
schemas and `explain`, errors as PySpark raises them, and a Python StreamingQueryListener.
"""
import json
import os
import re
import time
import uuid

import pyspark
import pytest
from pyspark.errors import (AnalysisException, IllegalArgumentException, PySparkException,
                            StreamingQueryException, UnsupportedOperationException)
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType, TimestampType
import sys
from pyspark import cloudpickle

# foreachBatch functions and listeners defined here are pickled with their code: the
# server's Python worker cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

from conftest import ENGINE, progress_dict  # noqa: E402

SCHEMA = "id INT, user STRING, amount DOUBLE, ts TIMESTAMP"


def add_json(src, name, rows):
    os.makedirs(src, exist_ok=True)
    tmp = os.path.join(os.path.dirname(src), "." + name)
    with open(tmp, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    os.rename(tmp, os.path.join(src, name))


ROWS = [
    {"id": 1, "user": "alice", "amount": 250.0, "ts": "2026-02-14T10:00:05Z"},
    {"id": 2, "user": "bob", "amount": 5.0, "ts": "2026-02-14T10:00:12Z"},
    {"id": 3, "user": "alice", "amount": 120.0, "ts": "2026-02-14T10:00:31Z"},
]


@pytest.fixture
def src(workdir):
    d = os.path.join(workdir, "in")
    add_json(d, "1.json", ROWS)
    return d


def stream(spark, src):
    return spark.readStream.schema(SCHEMA).json(src)


def executed(q):
    return [progress_dict(p) for p in q.recentProgress
            if "addBatch" in progress_dict(p).get("durationMs", {})]


def num_rows(p):
    if p.get("numInputRows") is not None:
        return p["numInputRows"]
    return sum(s.get("numInputRows", 0) for s in p.get("sources", []))


# ----------------------------------------------------------------------------------------------
# the query handle and spark.streams
# ----------------------------------------------------------------------------------------------

@pytest.mark.streaming
def test_query_handle(spark, src, workdir):
    ckpt = os.path.join(workdir, "ckpt")
    q = (stream(spark, src).writeStream.format("memory").queryName("handle_q")
         .option("checkpointLocation", ckpt).trigger(processingTime="100 milliseconds").start())
    try:
        assert uuid.UUID(str(q.id)) and uuid.UUID(str(q.runId))
        assert q.name == "handle_q"
        assert q.isActive
        assert set(q.status) >= {"message", "isDataAvailable", "isTriggerActive"}
        q.processAllAvailable()
        assert sorted(r.id for r in spark.sql("select * from handle_q").collect()) == [1, 2, 3]
        last = q.lastProgress
        assert last["id"] == str(q.id) and last["runId"] == str(q.runId)
        assert last["name"] == "handle_q"
        assert sum(num_rows(p) for p in executed(q)) == 3
        assert [p["batchId"] for p in executed(q)][0] == 0
        add_json(src, "2.json", [{"id": 4, "user": "carol", "amount": 1.0,
                                  "ts": "2026-02-14T10:01:00Z"}])
        q.processAllAvailable()
        assert sorted(r.id for r in spark.sql("select * from handle_q").collect()) == [1, 2, 3, 4]
        assert q.awaitTermination(0.2) is False  # still running
        assert q.exception() is None
        q.explain()  # prints the plan
        first_id, first_run = str(q.id), str(q.runId)
    finally:
        q.stop()
    assert not q.isActive
    assert q.awaitTermination(5) is True
    # the same checkpoint (a file sink: a memory sink cannot recover): same id, a new runId
    ckpt2, out = os.path.join(workdir, "ckpt2"), os.path.join(workdir, "out")

    def run_parquet():
        q = (stream(spark, src).writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ckpt2).trigger(availableNow=True).start())
        assert q.awaitTermination(60)
        return q

    q1 = run_parquet()
    add_json(src, "3.json", [{"id": 5, "user": "dan", "amount": 2.0, "ts": None}])
    q2 = run_parquet()
    assert str(q2.id) == str(q1.id) and str(q2.runId) != str(q1.runId)
    assert str(q1.id) != first_id and first_run != str(q1.runId)
    assert [num_rows(p) for p in executed(q2)] == [1]  # resumed after the committed batch
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == [1, 2, 3, 4, 5]


@pytest.mark.streaming
def test_explain_prints_the_plan(spark, src, capsys):
    df = stream(spark, src).filter("amount > 10").select("id", "user")
    df.explain()
    out = capsys.readouterr().out
    assert "Plan" in out or "plan" in out, out
    assert "amount" in out, out


@pytest.mark.streaming
def test_streams_manager(spark, src, workdir):
    qs = [stream(spark, src).writeStream.format("memory").queryName("mgr_%d" % i)
          .trigger(processingTime="1 second").start() for i in range(2)]
    try:
        active = {str(q.id) for q in spark.streams.active}
        assert active == {str(q.id) for q in qs}
        got = spark.streams.get(str(qs[0].id))
        assert got is not None and got.name == "mgr_0"
        assert spark.streams.awaitAnyTermination(0.5) is False
        qs[1].stop()
        assert spark.streams.awaitAnyTermination(30) is True
        spark.streams.resetTerminated()
        assert spark.streams.awaitAnyTermination(0.5) is False
        assert {str(q.id) for q in spark.streams.active} == {str(qs[0].id)}
    finally:
        for q in qs:
            q.stop()
    assert spark.streams.active == []


# ----------------------------------------------------------------------------------------------
# sinks and triggers
# ----------------------------------------------------------------------------------------------

@pytest.mark.streaming
@pytest.mark.parametrize("fmt", ["parquet", "json", "csv"])
def test_file_sinks_with_partition_by_read_back(spark, src, workdir, fmt):
    out = os.path.join(workdir, "out")
    q = (stream(spark, src).writeStream.format(fmt).partitionBy("user")
         .option("path", out).option("checkpointLocation", os.path.join(workdir, "ckpt"))
         .option("header", "true").trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert q.exception() is None
    assert sorted(d for d in os.listdir(out) if d.startswith("user=")) == ["user=alice", "user=bob"]
    reader = spark.read.schema("id INT, amount DOUBLE, ts TIMESTAMP, user STRING")
    if fmt == "csv":
        reader = reader.option("header", "true")
    back = reader.format(fmt).load(out)
    assert sorted((r.id, r.user, r.amount) for r in back.collect()) == \
        [(1, "alice", 250.0), (2, "bob", 5.0), (3, "alice", 120.0)]


@pytest.mark.streaming
def test_file_sink_output_read_honours_its_manifest(spark, src, workdir):
    out = os.path.join(workdir, "out")
    q = (stream(spark, src).writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", os.path.join(workdir, "ckpt"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert os.path.isdir(os.path.join(out, "_spark_metadata"))
    # a stray file outside the manifest is not part of the sink's output
    stray = spark.createDataFrame([(99, "x", 1.0, None)], SCHEMA)
    stray.write.parquet(os.path.join(workdir, "stray"))
    for f in os.listdir(os.path.join(workdir, "stray")):
        if f.endswith(".parquet"):
            os.rename(os.path.join(workdir, "stray", f), os.path.join(out, "stray-" + f))
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == [1, 2, 3]


@pytest.mark.streaming
def test_console_and_noop_sinks(spark, src, server):
    before = len(server.log_text())
    q = stream(spark, src).select("id", "user").writeStream.format("console") \
        .trigger(availableNow=True).start()
    assert q.awaitTermination(60)
    q = stream(spark, src).writeStream.format("noop").trigger(availableNow=True).start()
    assert q.awaitTermination(60)
    assert sum(num_rows(p) for p in executed(q)) == 3
    if server.kind != "external":
        log = server.log_text()[before:]
        assert "Batch: 0" in log and "|alice|" in log, log[-2000:]


@pytest.mark.streaming
def test_triggers(spark, src, workdir):
    # once: one batch with everything, then it stops by itself
    q = stream(spark, src).writeStream.format("memory").queryName("t_once") \
        .option("maxFilesPerTrigger", 1).trigger(once=True).start()
    assert q.awaitTermination(60)
    add_json(src, "2.json", [{"id": 4, "user": "d", "amount": 1.0, "ts": None}])
    # availableNow with maxFilesPerTrigger=1: one batch per file, then it stops
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)
    q = df.writeStream.format("memory").queryName("t_now").trigger(availableNow=True).start()
    assert q.awaitTermination(60)
    assert [num_rows(p) for p in executed(q)] == [3, 1]
    # processingTime: keeps running until stopped
    q = df.writeStream.format("memory").queryName("t_pt").trigger(processingTime="200 milliseconds").start()
    q.processAllAvailable()
    assert q.isActive
    q.stop()
    assert spark.sql("select count(*) from t_pt").collect()[0][0] == 4


@pytest.mark.streaming
def test_memory_sink_complete_mode_queryable_with_sql(spark, src):
    q = (stream(spark, src).groupBy("user").agg(F.sum("amount").alias("total"))
         .writeStream.outputMode("complete").format("memory").queryName("totals")
         .trigger(availableNow=True).start())
    assert q.awaitTermination(60)
    rows = spark.sql("select user, total from totals order by user").collect()
    assert [(r.user, r.total) for r in rows] == [("alice", 370.0), ("bob", 5.0)]


@pytest.mark.streaming
def test_socket_source_network_word_count(spark):
    """The Structured Streaming guide's first example, over a socket the test serves."""
    import socket
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(60)
    port = server.getsockname()[1]
    lines = spark.readStream.format("socket").option("host", "127.0.0.1").option("port", port).load()
    words = lines.select(F.explode(F.split(lines.value, " ")).alias("word"))
    q = (words.groupBy("word").count().writeStream.outputMode("complete")
         .format("memory").queryName("socket_words").start())
    conn, _ = server.accept()
    conn.sendall(b"apache spark\nspark sluice\n")
    deadline = time.time() + 60
    while True:
        q.processAllAvailable()
        counts = {r.word: r["count"] for r in spark.sql("select * from socket_words").collect()}
        if counts == {"apache": 1, "spark": 2, "sluice": 1}:
            break
        assert time.time() < deadline, counts
        time.sleep(0.2)
    q.stop()
    conn.close()
    server.close()


@pytest.mark.streaming
def test_to_table(spark, src, workdir):
    name = "events_" + os.path.basename(workdir).replace("-", "_")
    q = stream(spark, src).writeStream.option("checkpointLocation", os.path.join(workdir, "c")) \
        .partitionBy("user").trigger(availableNow=True).toTable(name)
    assert q.awaitTermination(120)
    assert q.exception() is None
    assert spark.table(name).count() == 3
    # partition columns come back last, and SQL sees the table by name
    assert spark.table(name).columns == ["id", "amount", "ts", "user"]
    rows = spark.sql(f"select user, sum(amount) as total from {name} group by user order by user")
    assert [(r.user, r.total) for r in rows.collect()] == [("alice", 370.0), ("bob", 5.0)]
    # the next run appends to the same table (Spark needs partitionBy again: without it, it
    # writes the new rows outside the partition folders, and its reads then miss them)
    add_json(src, "2.json", [{"id": 4, "user": "carol", "amount": 1.0, "ts": None}])
    q = stream(spark, src).writeStream.option("checkpointLocation", os.path.join(workdir, "c")) \
        .partitionBy("user").trigger(availableNow=True).toTable(name)
    assert q.awaitTermination(120)
    assert spark.table(name).count() == 4


@pytest.mark.streaming
@pytest.mark.skipif(ENGINE == "spark", reason="Spark's server has no Delta jars here")
def test_delta_sink_exactly_once_read_by_python_deltalake(spark, src, workdir):
    import deltalake
    table = os.path.join(workdir, "delta")
    ckpt = os.path.join(workdir, "c")

    def run():
        q = (stream(spark, src).writeStream.format("delta").partitionBy("user")
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start(table))
        assert q.awaitTermination(120)
        assert q.exception() is None
        return q

    q = run()
    dt = deltalake.DeltaTable(table)
    assert dt.metadata().partition_columns == ["user"]
    rows = sorted((r["id"], r["user"]) for r in dt.to_pyarrow_table().to_pylist())
    assert rows == [(1, "alice"), (2, "bob"), (3, "alice")]
    # every commit carries the query's id and the batch id, as Spark's Delta sink writes them
    txns = [a for v in range(dt.version() + 1)
            for a in _delta_actions(table, v) if "txn" in a]
    assert txns and all(t["txn"]["appId"] == q.id for t in txns)
    # a second run on the same checkpoint with a new file adds exactly that file's row
    add_json(src, "2.json", [{"id": 4, "user": "carol", "amount": 1.0, "ts": None}])
    run()
    dt = deltalake.DeltaTable(table)
    assert sorted(r["id"] for r in dt.to_pyarrow_table().to_pylist()) == [1, 2, 3, 4]


def _delta_actions(table, version):
    with open(os.path.join(table, "_delta_log", "%020d.json" % version)) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.streaming
def test_partition_by_an_unknown_column_is_an_analysis_exception(spark, src, workdir):
    with pytest.raises((AnalysisException, StreamingQueryException), match="nope"):
        q = stream(spark, src).writeStream.format("parquet").partitionBy("nope") \
            .option("path", os.path.join(workdir, "out")) \
            .option("checkpointLocation", os.path.join(workdir, "c")) \
            .trigger(availableNow=True).start()
        q.awaitTermination(60)  # Spark fails the first batch; Sluice refuses at start
        raise q.exception()


# ----------------------------------------------------------------------------------------------
# batch around the stream
# ----------------------------------------------------------------------------------------------

def test_batch_actions(spark, src, capsys):
    df = spark.read.schema(SCHEMA).json(src)
    assert not df.isStreaming
    assert df.count() == 3
    assert sorted(r.user for r in df.collect()) == ["alice", "alice", "bob"]
    df.orderBy("id").show()
    out = capsys.readouterr().out
    assert "| id| user|amount|" in out and "|  2|  bob|   5.0|" in out, out
    pdf = df.orderBy("id").toPandas()
    assert list(pdf["user"]) == ["alice", "bob", "alice"]
    tbl = df.orderBy("id").toArrow()
    assert tbl.column("amount").to_pylist() == [250.0, 5.0, 120.0]
    local = spark.createDataFrame([(1, "a"), (2, "b")], "k INT, v STRING")
    assert local.join(df, local.k == df.id).select("v", "user").orderBy("v").collect() == \
        [("a", "alice"), ("b", "bob")]


@pytest.mark.parametrize("fmt", ["parquet", "json", "csv"])
def test_df_write_modes(spark, workdir, fmt):
    path = os.path.join(workdir, "w")
    df = spark.createDataFrame([(1, "a"), (2, "b")], "k INT, v STRING")

    def back():
        return sorted(tuple(r) for r in spark.read.schema("k INT, v STRING").format(fmt)
                      .option("header", "true").load(path).collect())

    df.write.format(fmt).option("header", "true").save(path)
    assert back() == [(1, "a"), (2, "b")]
    df.write.format(fmt).option("header", "true").mode("append").save(path)
    assert back() == [(1, "a"), (1, "a"), (2, "b"), (2, "b")]
    df.filter("k = 1").write.format(fmt).option("header", "true").mode("overwrite").save(path)
    assert back() == [(1, "a")]
    with pytest.raises(AnalysisException):
        df.write.format(fmt).mode("error").save(path)  # = errorifexists, the default
    with pytest.raises(AnalysisException):
        df.write.format(fmt).save(path)


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_df_write_partition_by(spark, workdir, fmt):
    path = os.path.join(workdir, "w")
    df = spark.createDataFrame([(1, "a", 10), (2, "b", 20), (3, "a", 30)], "k INT, v STRING, n INT")
    df.write.format(fmt).partitionBy("v", "n").save(path)
    assert sorted(d for d in os.listdir(path) if d.startswith("v=")) == ["v=a", "v=b"]
    assert sorted(os.listdir(os.path.join(path, "v=a"))) == ["n=10", "n=30"]
    back = spark.read.format(fmt).load(path)
    # the folder values are typed as Spark infers them (n is an int again)
    assert back.columns == ["k", "v", "n"]
    assert sorted(tuple(r) for r in back.collect()) == [(1, "a", 10), (2, "b", 20), (3, "a", 30)]


def test_conf_get_set(spark):
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    assert spark.conf.get("spark.sql.shuffle.partitions") == "7"
    if ENGINE == "sluice":
        # Sluice computes in UTC: another session zone is refused, never silently ignored.
        with pytest.raises(UnsupportedOperationException, match="session time zone"):
            spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    else:
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"
        assert spark.sql("select hour(timestamp'2026-02-14 10:00:00Z') as h").collect()[0].h == 5
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert spark.conf.get("spark.sql.nonexistent.key.for.tests", "dflt") == "dflt"


@pytest.mark.streaming
def test_schema_and_is_streaming(spark, src):
    df = stream(spark, src)
    assert df.isStreaming
    assert df.schema == StructType([
        StructField("id", IntegerType(), True),
        StructField("user", StringType(), True),
        StructField("amount", DoubleType(), True),
        StructField("ts", TimestampType(), True),
    ])
    agg = df.withWatermark("ts", "1 minute").groupBy(F.window("ts", "1 minute")).count()
    assert agg.isStreaming
    assert agg.schema["count"].dataType == LongType()
    assert [f.name for f in agg.schema["window"].dataType.fields] == ["start", "end"]


# ----------------------------------------------------------------------------------------------
# errors
# ----------------------------------------------------------------------------------------------

@pytest.mark.streaming
def test_unknown_column_is_an_analysis_exception(spark, src):
    with pytest.raises(AnalysisException) as e:
        stream(spark, src).select("no_such_column").schema
    assert "no_such_column" in str(e.value)
    with pytest.raises(AnalysisException):
        spark.sql("select no_such_column from range(1)").collect()


@pytest.mark.streaming
def test_append_without_watermark_is_an_analysis_exception(spark, src):
    agg = stream(spark, src).groupBy("user").count()
    with pytest.raises(AnalysisException) as e:
        agg.writeStream.outputMode("append").format("memory").queryName("bad_append").start()
    # Spark 3.5 and Sluice: "Append output mode not supported when there are streaming
    # aggregations on streaming DataFrames/DataSets without watermark"; Spark 4.2 words it
    # "Invalid streaming output mode: append ..."; both carry the class
    # getCondition() is PySpark 4's name for 3.5's getErrorClass(), which 3.5's Connect client
    # never fills in (None): there the class is only the message's "[CLASS]" prefix
    condition = getattr(e.value, "getCondition", e.value.getErrorClass)()
    if pyspark.__version__.startswith("3."):
        assert condition is None
        condition = re.match(r"\[([A-Z_.]+)\]", str(e.value)).group(1)
    assert (condition or "").startswith("STREAMING_OUTPUT_MODE"), str(e.value)
    assert "watermark" in str(e.value)


@pytest.mark.streaming
def test_bad_option_and_trigger_are_illegal_argument(spark, src):
    with pytest.raises((IllegalArgumentException, PySparkException)):
        stream(spark, src).writeStream.format("memory").queryName("bad_trig") \
            .trigger(processingTime="not an interval").start()
    with pytest.raises(IllegalArgumentException) as e:
        stream(spark, src).writeStream.outputMode("bogus").format("memory") \
            .queryName("bad_mode").start()
    assert "bogus" in str(e.value)
    # a bad source option: refused when the query starts, or fails the query, naming the option
    with pytest.raises((IllegalArgumentException, StreamingQueryException)) as e:
        q = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", "-1").json(src) \
            .writeStream.format("noop").trigger(availableNow=True).start()
        q.awaitTermination(30)
    assert "maxFilesPerTrigger" in str(e.value)


def fail_on_batch(df, batch_id):
    def boom(n):
        raise ValueError("boom in batch %d with %d rows" % (batch_id, n))
    boom(df.count())


@pytest.mark.streaming
def test_failing_foreach_batch_stops_the_query_with_the_python_traceback(spark, src):
    fn = fail_on_batch
    # Spark 3.5 (Sluice's reference) wants a checkpoint for foreachBatch; 4.x makes a temp one.
    q = stream(spark, src).writeStream.foreachBatch(lambda df, b: fn(df, b)) \
        .option("checkpointLocation", os.path.join(os.path.dirname(src), "ckpt-failing")) \
        .trigger(availableNow=True).start()
    with pytest.raises(StreamingQueryException) as e:
        q.awaitTermination(60)
    assert "boom in batch 0 with 3 rows" in str(e.value)
    exc = q.exception()
    assert exc is not None
    text = str(exc)
    assert "ValueError" in text and "boom in batch 0 with 3 rows" in text
    assert "Traceback" in text or "line " in text, text
    assert not q.isActive


def make_row_writer(out_dir):
    """A foreach writer object: each (epoch, partition) writes its rows to a file of its own
    when closed."""

    class RowWriter:
        def open(self, partition_id, epoch_id):
            self.path = os.path.join(out_dir, "%d-%d.jsonl" % (epoch_id, partition_id))
            self.rows = []
            return True

        def process(self, row):
            self.rows.append({"id": row.id, "user": row["user"]})

        def close(self, error):
            with open(self.path, "w") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in self.rows)

    return RowWriter()


@pytest.mark.streaming
def test_foreach_writer_object_gets_every_row(spark, src, workdir):
    out = os.path.join(workdir, "rows")
    os.makedirs(out)
    q = (stream(spark, src).select("id", "user").writeStream.foreach(make_row_writer(out))
         .option("checkpointLocation", os.path.join(workdir, "ckpt"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert q.exception() is None
    rows = []
    for name in os.listdir(out):
        assert name.startswith("0-"), name  # one batch: epoch 0
        with open(os.path.join(out, name)) as fh:
            rows += [json.loads(x) for x in fh if x.strip()]
    assert sorted((r["id"], r["user"]) for r in rows) == [(1, "alice"), (2, "bob"), (3, "alice")]


# ----------------------------------------------------------------------------------------------
# a Python StreamingQueryListener
# ----------------------------------------------------------------------------------------------

def make_listener(path):
    class FileListener(StreamingQueryListener):
        def _w(self, kind, ev):
            import json as _json
            with open(path, "a") as fh:
                fh.write(_json.dumps({"kind": kind, "id": str(ev.id) if hasattr(ev, "id") else
                                      str(ev.progress.id), **ev_fields(ev)}) + "\n")

        def onQueryStarted(self, event):
            self._w("started", event)

        def onQueryProgress(self, event):
            self._w("progress", event)

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            self._w("terminated", event)

    def ev_fields(ev):
        p = getattr(ev, "progress", None)
        if p is not None:
            return {"batchId": p.batchId, "name": p.name}
        return {"name": getattr(ev, "name", None), "exception": getattr(ev, "exception", None)}

    return FileListener()


@pytest.mark.streaming
def test_python_listener_gets_started_progress_terminated(spark, src, workdir):
    path = os.path.join(workdir, "events.jsonl")
    listener = make_listener(path)
    spark.streams.addListener(listener)
    try:
        q = stream(spark, src).writeStream.format("memory").queryName("listened") \
            .trigger(availableNow=True).start()
        assert q.awaitTermination(60)
        deadline = time.monotonic() + 30
        events = []
        while time.monotonic() < deadline:
            if os.path.exists(path):
                with open(path) as fh:
                    events = [json.loads(x) for x in fh if x.strip()]
                if any(e["kind"] == "terminated" for e in events):
                    break
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)
    mine = [e for e in events if e["id"] == str(q.id)]
    kinds = [e["kind"] for e in mine]
    assert kinds[0] == "started" and kinds[-1] == "terminated" and "progress" in kinds, events
    assert mine[0]["name"] == "listened"
    assert [e["batchId"] for e in mine if e["kind"] == "progress"][0] == 0
    assert mine[-1]["exception"] is None
