"""A SIGKILLed server restarted on the same checkpoint: the PySpark job resumes and every row
arrives exactly once — through a foreachBatch that writes each batch keyed by its id (a replayed
batch carries the same id and rows, and replaces its earlier copy), and through the file sink
(whose manifest ignores the files of an uncommitted batch).
"""
import json
import os
import signal
import time
import sys

import pytest
from conftest import progress_dict
from pyspark import cloudpickle

pytestmark = pytest.mark.streaming

# foreachBatch functions and listeners defined here are pickled with their code: the
# server's Python worker cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

N_FILES = 12
ROWS_PER_FILE = 3


def write_files(src, staging, which=range(N_FILES)):
    """Writes the files `which` (all by default) and returns the ids of all N_FILES files."""
    os.makedirs(src, exist_ok=True)
    os.makedirs(staging, exist_ok=True)
    want = [f * ROWS_PER_FILE + r for f in range(N_FILES) for r in range(ROWS_PER_FILE)]
    base = int(time.time()) - 10000
    for f in which:
        t = base + 10 * (f + 1)
        tmp = os.path.join(staging, "f%02d.json" % f)
        with open(tmp, "w") as fh:
            for r in range(ROWS_PER_FILE):
                i = f * ROWS_PER_FILE + r
                fh.write(json.dumps({"id": i, "ts": "2026-09-15T12:00:%02dZ" % (i % 60)}) + "\n")
        os.utime(tmp, (t, t))
        os.rename(tmp, os.path.join(src, "f%02d.json" % f))
    return want


def make_writer(out_dir, calls_log):
    """Writes batch N's ids to out_dir/N.json (tmp + rename: a replay replaces it) and logs the
    call; sleeps a little so that the kill lands in the middle of the stream."""

    def write_batch(df, batch_id):
        import json as _json
        import os as _os
        import time as _time

        ids = sorted(r.id for r in df.collect())
        _time.sleep(0.3)
        tmp = _os.path.join(out_dir, ".%d.tmp" % batch_id)
        with open(tmp, "w") as fh:
            _json.dump(ids, fh)
        _os.rename(tmp, _os.path.join(out_dir, "%d.json" % batch_id))
        with open(calls_log, "a") as fh:
            fh.write("%d\n" % batch_id)

    return write_batch


def commits(ckpt):
    d = os.path.join(ckpt, "commits")
    return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("timed out after %ds waiting for %s" % (timeout, what))


def start(spark, src, ckpt, trigger, sink):
    df = spark.readStream.schema("id INT, ts TIMESTAMP").option("maxFilesPerTrigger", 1).json(src)
    w = df.writeStream.option("checkpointLocation", ckpt)
    w = w.trigger(**trigger)
    return sink(w).start()


def test_foreach_batch_job_resumes_after_sigkill_each_row_once(sessions, workdir):
    src, out, ckpt = (os.path.join(workdir, d) for d in ("in", "out", "ckpt"))
    os.makedirs(out)
    calls = os.path.join(workdir, "calls.log")
    want = write_files(src, os.path.join(workdir, "staging"))
    writer = make_writer(out, calls)

    q = start(sessions.current, src, ckpt, {"processingTime": "0 seconds"},
              lambda w: w.foreachBatch(writer))
    wait_for(lambda: len(commits(ckpt)) >= 3, 120, "three committed batches")
    sessions.restart_server()  # SIGKILL mid-stream, same port
    before = commits(ckpt)
    assert len(before) < N_FILES, "the job finished before the kill; nothing was recovered"

    q = start(sessions.current, src, ckpt, {"availableNow": True},
              lambda w: w.foreachBatch(writer))
    assert q.awaitTermination(180)
    assert q.exception() is None
    after = commits(ckpt)
    delivered = {}
    for b in after:
        with open(os.path.join(out, "%d.json" % b)) as fh:
            delivered[b] = json.load(fh)
    got = sorted(i for ids in delivered.values() for i in ids)
    missing = sorted(set(want) - set(got))
    twice = sorted(i for i in set(got) if got.count(i) > 1)
    assert not missing and not twice, \
        "rows lost: %s, rows twice: %s; killed after commits %s; batches %s" % (
            missing, twice, before, delivered)
    assert got == want  # every row once
    # one file per batch (maxFilesPerTrigger=1), ids without gaps
    assert after == list(range(N_FILES)), (after, delivered)
    for b in after:
        assert delivered[b] == list(range(b * ROWS_PER_FILE, (b + 1) * ROWS_PER_FILE)), delivered
    with open(calls) as fh:
        called = [int(x) for x in fh.read().split()]
    # the restart resumed: batches committed before the kill were not called again
    assert not set(before) & set(called[called.index(max(before)) + 1:]), called
    assert progress_dict(q.recentProgress[0])["batchId"] == max(before) + 1


def test_file_sink_job_resumes_after_sigkill_each_row_once(sessions, workdir):
    src, out, ckpt = (os.path.join(workdir, d) for d in ("in", "out", "ckpt"))
    # The file sink is fast: only the first files are there before the kill, the rest arrive
    # while the server is down, so the restart always has work left.
    staging = os.path.join(workdir, "staging")
    want = write_files(src, staging, range(4))
    q = start(sessions.current, src, ckpt, {"processingTime": "0 seconds"},
              lambda w: w.format("parquet").option("path", out))
    wait_for(lambda: len(commits(ckpt)) >= 2, 120, "two committed batches")
    sessions.restart_server()
    assert len(commits(ckpt)) <= 4
    write_files(src, staging, range(4, N_FILES))
    spark = sessions.current
    q = start(spark, src, ckpt, {"availableNow": True},
              lambda w: w.format("parquet").option("path", out))
    assert q.awaitTermination(180)
    assert commits(ckpt) == list(range(N_FILES))
    got = sorted(r.id for r in spark.read.parquet(out).collect())
    assert got == want


def offsets(ckpt):
    d = os.path.join(ckpt, "offsets")
    return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def test_sigterm_stops_running_queries_after_their_batch(workdir):
    """SIGTERM is a clean shutdown: the server exits 0, and the query's batch in flight is
    finished and committed first (every offsets/N has its commits/N), so a restart has nothing
    to replay."""
    import pytest
    from conftest import ENGINE, forget_session, new_session

    import servers

    if ENGINE != "sluice":
        pytest.skip("Spark's server handles SIGTERM with its own shutdown hooks")
    src, out, ckpt = (os.path.join(workdir, d) for d in ("in", "out", "ckpt"))
    os.makedirs(out)
    write_files(src, os.path.join(workdir, "staging"))
    srv = servers.Server("sluice", log_path=os.path.join(workdir, "server.log"), cwd=workdir)
    srv.start()
    spark = None
    try:
        # a new session: PySpark 3.5's getOrCreate() would hand back an earlier test's
        spark = new_session(srv.url)
        start(spark, src, ckpt, {"processingTime": "0 seconds"},
              lambda w: w.foreachBatch(make_writer(out, os.path.join(workdir, "calls.log"))))
        wait_for(lambda: len(commits(ckpt)) >= 2, 120, "two committed batches")
        os.kill(srv.proc.pid, signal.SIGTERM)  # the server only, as a service manager does
        assert srv.proc.wait(timeout=60) == 0, srv.log_tail()
        srv.proc = None
        assert offsets(ckpt) == commits(ckpt), (offsets(ckpt), commits(ckpt), srv.log_tail())
        for b in commits(ckpt):
            assert os.path.exists(os.path.join(out, "%d.json" % b)), b
    finally:
        srv.kill()
        if spark is not None:
            forget_session(spark)
