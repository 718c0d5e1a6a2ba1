"""The PySpark code of the two seed documents (../shared/reference/seeds/) runs over Spark
Connect with only the session line changed, and shows what the documents say.

The code is taken from the documents themselves (between exact markers) and executed as it is.
Its `print` is a tee into a transcript file (capture.make_print): the foreachBatch function's
prints happen in the SERVER's Python worker, as in Spark, and land in the same transcript as the
client's. The console sink prints in the server: its batches are read from the server's log.
Seed 004's relative paths (`data/stream_in`) resolve in the server's working directory, so the
test runs there.
"""
import json
import os
import re
import subprocess
import threading
import time

import pytest
from pyspark.errors import AnalysisException

from capture import make_print
from conftest import ENGINE, progress_dict
import sys
from pyspark import cloudpickle

# foreachBatch functions and listeners defined here are pickled with their code: the
# server's Python worker cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.streaming

SEEDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared",
                     "reference", "seeds")
SEED_000 = os.path.join(SEEDS, "000_73a206b1ba43a28e.txt")
SEED_004 = os.path.join(SEEDS, "004_6eecede093c766f3.txt")


def doc(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def between(text, start, end, include_end=False):
    """The document's text from `start` (included) to `end`."""
    i = text.index(start)
    j = text.index(end, i + len(start))
    return text[i:j + (len(end) if include_end else 0)]


def transcript(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


# ----------------------------------------------------------------------------------------------
# seed 000: micro-batches, state & exactly-once
# ----------------------------------------------------------------------------------------------

def test_seed_000_watermark_run_prints_the_documented_batches_and_drops(spark, workdir):
    code = between(doc(SEED_000), "import json, os, tempfile", "Ran on local PySpark")
    out = os.path.join(workdir, "transcript.txt")
    ns = {"spark": spark, "print": make_print(out), "__name__": "seed_000"}
    exec(compile(code, "seed_000", "exec"), ns)  # noqa: S102 - the document's code
    lines = [line.rstrip() for line in transcript(out).splitlines()]
    # The document: rows at 12:01, 12:02, 12:07 set the watermark to 11:57 (a no-data batch 1
    # with 0 rows runs at 11:57); a later batch with 12:20 and a late 12:03 still counted 12:03
    # (the 12:00 window became 3), then the watermark moved to 12:10; a 12:04 row arriving next
    # was dropped: numRowsDroppedByWatermark reported 1.
    assert lines == [
        "batch 0 [('12:00', 2), ('12:05', 1)]",
        "batch 1 []",
        "  progress 0 rows 3 watermark 00:00 dropped 0",
        "  progress 1 rows 0 watermark 11:57 dropped 0",
        "batch 2 [('12:00', 3), ('12:20', 1)]",
        "batch 3 []",
        "  progress 2 rows 2 watermark 11:57 dropped 0",
        "  progress 3 rows 0 watermark 12:10 dropped 0",
        "batch 4 []",
        "  progress 4 rows 1 watermark 12:10 dropped 1",
    ], "\n".join(lines)


def test_seed_000_checkpoint_folders_and_restart_read_counts(spark, workdir):
    """After two batches of a stateless file-to-Parquet query the checkpoint holds metadata,
    offsets/0, offsets/1, commits/0, commits/1, sources/0/0 and sources/0/1; a restart with no
    new files reads zero rows, adding one file reads exactly one; a stateful query adds state/."""
    src, out, ckpt = (os.path.join(workdir, d) for d in ("in", "out", "ckpt"))
    os.makedirs(src)

    def add(name, n):
        tmp = os.path.join(workdir, name)
        with open(tmp, "w") as fh:
            fh.writelines(json.dumps({"id": i, "ts": "2026-09-15T12:0%d:00Z" % i}) + "\n"
                          for i in range(n))
        os.rename(tmp, os.path.join(src, name))

    def run():
        q = (spark.readStream.schema("id INT, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
             .json(src).writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        assert q.awaitTermination(120)
        return [(progress_dict(p)["batchId"], rows(p)) for p in q.recentProgress
                if "addBatch" in progress_dict(p).get("durationMs", {})]

    add("a.json", 2)
    add("b.json", 1)
    assert run() == [(0, 2), (1, 1)]
    listing = sorted(os.path.relpath(os.path.join(d, f), ckpt)
                     for d, _, fs in os.walk(ckpt) for f in fs
                     if not f.startswith(".") and not f.endswith(".crc"))
    for want in ["metadata", "offsets/0", "offsets/1", "commits/0", "commits/1",
                 "sources/0/0", "sources/0/1"]:
        assert want in listing, listing
    assert not os.path.exists(os.path.join(ckpt, "state")), listing
    assert run() == []  # nothing new: no batch, zero rows
    add("c.json", 1)
    assert run() == [(2, 1)]
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == [0, 0, 0, 1]

    # a stateful query adds state/
    ckpt2 = os.path.join(workdir, "ckpt2")
    q = (spark.readStream.schema("id INT, ts TIMESTAMP").json(src).groupBy("id").count()
         .writeStream.outputMode("complete").format("memory").queryName("seed000_state")
         .option("checkpointLocation", ckpt2).trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert os.path.isdir(os.path.join(ckpt2, "state"))
    assert sorted(tuple(r) for r in spark.sql("select * from seed000_state").collect()) == \
        [(0, 3), (1, 1)]


def rows(p):
    """numInputRows of a progress (summed over its sources when the top-level figure is
    absent, as Spark 4.2's Connect server reports it)."""
    j = progress_dict(p)
    if j.get("numInputRows") is not None:
        return j["numInputRows"]
    return sum(s.get("numInputRows", 0) for s in j.get("sources", []))


# ----------------------------------------------------------------------------------------------
# seed 004: Structured Streaming in PySpark
# ----------------------------------------------------------------------------------------------

BATCH1 = between(doc(SEED_004), '{"event_time": "2026-02-14T10:00:05"', "EOF")
LATE = between(doc(SEED_004), '{"event_time": "2026-02-14T09:45:00"', "EOF")
# Not in the document (it shows their effect): a second file for "Batch: 1" of the complete-mode
# query (alice 420.0, bob 35.0), in the next minute so that the 10:00 window keeps the
# document's totals; a third one whose 10:03:30 moves the 2-minute watermark past 10:01, the
# end of that window, and not past 10:02.
BATCH2 = ('{"event_time": "2026-02-14T10:01:10", "user": "alice", "action": "buy", "amount": 50.0}\n'
          '{"event_time": "2026-02-14T10:01:20", "user": "bob", "action": "buy", "amount": 30.0}\n')
BATCH3 = '{"event_time": "2026-02-14T10:03:30", "user": "dave", "action": "buy", "amount": 1.0}\n'


def console_batches(log):
    """{batch id: [table text]} of what the console sink printed (log lines of the server that
    interleave with its output are skipped)."""
    out = {}
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        m = re.fullmatch(r"Batch: (\d+)", lines[i].strip())
        if not m or i == 0 or not set(lines[i - 1].strip()) == {"-"}:
            i += 1
            continue
        i += 1
        while i < len(lines) and not lines[i].startswith(("+", "|")):
            i += 1
        table = []
        while i < len(lines) and lines[i].startswith(("+", "|")):
            table.append(lines[i].rstrip())
            i += 1
        if table and table[-1].startswith("+") and len(table) >= 3:  # a complete table
            out.setdefault(int(m.group(1)), []).append("\n".join(table))
    return out


def same_table(a, b):
    """Console tables equal up to the order of their rows (an aggregation's output order is
    not fixed): the same borders and header, the same rows."""
    la, lb = a.strip().splitlines(), b.strip().splitlines()
    return la[:3] == lb[:3] and la[-1:] == lb[-1:] and sorted(la[3:-1]) == sorted(lb[3:-1])


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("timed out after %ds waiting for %s" % (timeout, what))


@pytest.fixture
def in_server_cwd(server):
    if not getattr(server, "cwd", None) or server.kind == "external" and not server.log_path:
        pytest.skip("seed 004 needs the server's working directory and log (started by the tests)")
    old = os.getcwd()
    d = server.cwd
    subprocess.run(["rm", "-rf", os.path.join(d, "data")], check=True)
    os.chdir(d)
    # the document's `mkdir -p data/stream_in` (a streaming file source needs its directory)
    os.makedirs("data/stream_in")
    yield d
    os.chdir(old)


def test_seed_004_runs_and_prints_what_the_document_prints(spark, server, in_server_cwd,
                                                            workdir):
    text = doc(SEED_004)
    out = os.path.join(workdir, "transcript.txt")
    ns = {"print": make_print(out), "__name__": "seed_004"}
    session_line = 'spark = SparkSession.builder.appName("streaming").master("local[*]").getOrCreate()'
    block = between(text, "from pyspark.sql import SparkSession", "$ python stream_read.py")
    assert session_line in block
    block = block.replace(session_line,
                          "spark = SparkSession.builder.remote(%r).getOrCreate()" % server.url)
    exec(compile(block, "stream_read.py", "exec"), ns)  # noqa: S102
    assert transcript(out).splitlines() == ["is streaming: True"]
    spark = ns["spark"]
    spark.conf.set("spark.sql.session.timeZone", "UTC")

    def log():
        return server.log_text()[log_start:]

    def put(name, content):
        os.makedirs("data/stream_in", exist_ok=True)
        with open(os.path.join("data", name), "w") as fh:
            fh.write(content)
        os.rename(os.path.join("data", name), os.path.join("data/stream_in", name))

    # The console query, `query.awaitTermination(30)` as written, in a thread; the file is
    # dropped into data/stream_in/ and the console shows Batch 0 without Bob's £5.
    log_start = len(server.log_text())
    console = between(text, "query = (\n    stream.filter", "Drop a file into")
    put("batch1.json", BATCH1)
    t = threading.Thread(target=exec, args=(compile(console, "console", "exec"), ns))
    t.start()
    tables = wait_for(lambda: console_batches(log()).get(0), 60, "console Batch: 0")
    assert same_table(tables[0], between(
        text, "+-------------------+-----+------+\n|event_time",
        "+-------------------+-----+------+\n\nBob") + "+-------------------+-----+------+"), tables
    ns["query"].stop()
    t.join(60)
    assert not t.is_alive()

    # append without a watermark is refused at start
    agg = between(text, 'counts = stream.groupBy("user")', "\n\nquery = counts")
    exec(agg, ns)
    with pytest.raises(AnalysisException) as err:
        exec('query = counts.writeStream.outputMode("append").format("console").start()', ns)
    message = " ".join(str(err.value).split())
    if ENGINE == "spark" and "Invalid streaming output mode: append" in message:
        pass  # Spark 4.2's own wording of the same error (the document quotes Spark 3.5's)
    else:
        assert "Append output mode not supported when there are streaming aggregations on " \
               "streaming DataFrames/DataSets without watermark" in message

    # complete mode: the whole result table each trigger
    put("batch2.json", BATCH2)
    log_start = len(server.log_text())
    exec(between(text, 'query = counts.writeStream.outputMode("complete")', "\n\n"), ns)
    tables = wait_for(lambda: console_batches(log()).get(1), 60, "complete-mode Batch: 1")
    ns["query"].stop()
    got = console_batches(log())
    assert same_table(got[0][0], between(
        text, "+-----+-----+\n| user|total|\n+-----+-----+\n|alice|370.0|", "\n\n")), got
    assert same_table(tables[0], "+-----+-----+\n| user|total|\n+-----+-----+\n"
                                 "|alice|420.0|\n|  bob| 35.0|\n+-----+-----+"), tables

    # windows and watermarks, append: the 10:00 window comes out once the watermark passes its
    # end, with the document's totals; the late 09:45 record is silently dropped and counted
    put("batch3.json", BATCH3)
    log_start = len(server.log_text())
    exec(between(text, "windowed = (\n", "\n\n-----"), ns)
    window_table = between(text, "+-------------------+-------------------+-----+-----+------+\n|start",
                           "\n\nappend works now").strip()
    wait_for(lambda: any(same_table(window_table, t)
                         for ts in console_batches(log()).values() for t in ts),
             90, "the 10:00 window in append mode")
    q = ns["query"]
    seen = progress_dict(q.lastProgress)["batchId"]
    put("late.json", LATE)
    empty = between(text, "+-----+---+----+-----+------+\n|start|end|", "\n\nNothing").strip()

    def late_batch():
        for p in q.recentProgress:
            j = progress_dict(p)
            if j["batchId"] > seen and rows(p) == 1:
                return j
        return None

    late = wait_for(late_batch, 60, "the batch with the late record")
    assert any(same_table(empty, t) for t in console_batches(log()).get(late["batchId"], [])), \
        "batch %d printed %s" % (late["batchId"], console_batches(log()).get(late["batchId"]))
    open(out, "w").close()
    ns["query"] = q
    # lastProgress is the late batch's (no new data since)
    exec('print(query.lastProgress["stateOperators"][0]["numRowsDroppedByWatermark"])', ns)
    q.stop()
    assert transcript(out).splitlines() == ["1"]

    # checkpoints: offsets, commits, sources, state
    ckpt_block = between(text, "query = (\n    windowed.writeStream", "\n\nfind data")
    exec(ckpt_block, ns)
    wait_for(lambda: os.path.exists("data/checkpoint/commits/0"), 90, "commits/0")
    ns["query"].stop()
    found = subprocess.run(["find", "data/checkpoint", "-maxdepth", "1", "-type", "d"],
                           capture_output=True, text=True, check=True).stdout.split()
    documented = between(text, "data/checkpoint\ndata/checkpoint/offsets", "\n\noffsets records").split()
    # Sluice keeps one folder of its own beside Spark's: sluice/query.json, the query's shape,
    # checked on restart (ARCHITECTURE.md, checkpoint/shape.rs), and for a file sink
    # sluice/file-sink.json, the folder it owns (sink/file/ownership.rs). Everything else is
    # Spark's.
    if ENGINE == "sluice":
        # (this query writes parquet, so both)
        assert sorted(os.listdir("data/checkpoint/sluice")) == ["file-sink.json", "query.json"]
        found = [f for f in found if f != "data/checkpoint/sluice"]
    assert sorted(found) == sorted(documented)

    # trigger(once=True): all available data in one batch, then it stops
    q = (stream_filter(ns).writeStream.format("memory").queryName("seed004_once")
         .trigger(once=True).start())
    assert q.awaitTermination(120)
    ran = [progress_dict(p) for p in q.recentProgress]
    ran = [p for p in ran if "addBatch" in p.get("durationMs", {})]
    assert len(ran) == 1, ran
    assert sorted(r.user for r in spark.sql("select * from seed004_once").collect()) == \
        ["alice", "alice", "alice", "bob", "bob", "carol", "dave"]


def stream_filter(ns):
    return ns["stream"].select("user", "amount")
