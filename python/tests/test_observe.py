"""A server you can watch (`sluice connect --ui ADDR`): the dashboard and `/metrics` of
`sluice run --ui`, over every session's queries, and log lines with the time in UTC for
sessions opened and released and queries started, stopped and failed, with their ids.

Two PySpark sessions each run a streaming query with a `queryName` through one server; the
test reads `/api/progress` and `/metrics`, draws the page in headless Chromium (as the Rust
test in crates/cli/src/ui/tests/browser.rs does: the query's section, its figures and charts in the DOM) and
reads the server's log. A second server with `--log-format json` prints the same lines as JSON
objects with the ids as fields."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
from pyspark import cloudpickle

import servers
from conftest import ENGINE, close_session, new_session

# The foreachBatch function defined here is pickled with its code: the server's Python worker
# cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.skipif(ENGINE != "sluice", reason="`sluice connect --ui` is Sluice's")

CHROMIUM = "/usr/bin/chromium"
# The time a log line starts with: UTC, RFC 3339 with milliseconds.
TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.1)


def dashboard_url(server):
    m = wait_for(lambda: re.search(r"dashboard at (http://\S+/)", server.log_text()), 30,
                 "the dashboard's address in the log:\n" + server.log_tail())
    return m.group(1)


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200, url
        return r.read().decode()


def windowed_counts(spark, name, checkpoint):
    """A stateful query over a rate source: counts per 5-second window and key, with a
    watermark (so the dashboard has state, event time and late rows to show)."""
    from pyspark.sql import functions as F

    return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 40)
            .option("startTimestamp", 1789474200000).load()
            .withColumn("ts", F.expr(
                "timestamp - CASE value % 5 WHEN 0 THEN INTERVAL 0 SECONDS "
                "WHEN 1 THEN INTERVAL 2 SECONDS WHEN 2 THEN INTERVAL 4 SECONDS "
                "WHEN 3 THEN INTERVAL 6 SECONDS ELSE INTERVAL 9 SECONDS END"))
            .withWatermark("ts", "3 seconds")
            .groupBy(F.window("ts", "5 seconds"), (F.col("value") % 4).alias("key")).count()
            .writeStream.queryName(name).outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds").start())


def without_rust_log(server):
    """The server started without RUST_LOG: its own default filter."""
    env = server.env
    server.env = lambda: {k: v for k, v in env().items() if k != "RUST_LOG"}
    return server


def batches(q, n):
    """Whether `q` has made `n` batches (an AssertionError if it failed)."""
    if not q.isActive:
        raise AssertionError("%s ended: %s" % (q.name, q.exception()))
    return len(q.recentProgress) >= n


def fail_batch(df, batch_id):
    raise ValueError("observe boom in batch %d" % batch_id)


def metric(metrics, family, name, query_id):
    """The value of `family{query="name",id="query_id"}`."""
    prefix = '%s{query="%s",id="%s"} ' % (family, name, query_id)
    for line in metrics.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    raise AssertionError("no %s for %s in\n%s" % (family, name, metrics))


def headless_dom(url):
    """The page's DOM after 5 s of page time (it polls every second) in headless Chromium."""
    with tempfile.TemporaryDirectory(prefix="sluice-chromium-") as profile:
        out = subprocess.run(
            ["timeout", "--kill-after=10", "120", CHROMIUM, "--headless", "--no-sandbox",
             "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--user-data-dir=" + profile, "--virtual-time-budget=5000", "--dump-dom", url],
            capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, "chromium failed: " + out.stderr[-3000:]
    return out.stdout


def section(dom, name):
    """The `<section>` the page drew for query `name`."""
    for s in dom.split("<section")[1:]:
        if 'data-query-name="%s"' % name in s:
            return s[:s.find("</section>")]
    raise AssertionError("no section for query %s in the DOM:\n%s" % (name, dom[-5000:]))


def chart_points(sec, key):
    m = re.search(r'<canvas[^>]*data-chart="%s"[^>]*>' % key, sec)
    assert m, "no %s chart in %s" % (key, sec[:2000])
    points = re.search(r'data-series-points="(\d+)"', m.group(0))
    assert points, m.group(0)
    return int(points.group(1))


def log_line(log, level, what, **ids):
    """The log line `TIME LEVEL sluice_connect::observe: WHAT: ... key=value ...` carrying
    every one of `ids` (a `.*` value: any)."""
    for line in log.splitlines():
        m = re.match(r"(%s) %s sluice_connect::observe: %s: (.*)$" % (TS, level, what), line)
        if m and all(re.search(r"(^| )%s=%s( |$)" % (k, v if v == ".*" else re.escape(v)),
                               m.group(2)) for k, v in ids.items()):
            return line
    raise AssertionError("no %r line with %s in the server's log:\n%s" % (what, ids, log))


@pytest.fixture
def chromium():
    if not os.path.exists(CHROMIUM):
        pytest.fail("%s is missing: this test draws the dashboard in headless Chromium. Run "
                    "`apt-get install -y chromium`" % CHROMIUM)
    return CHROMIUM


def test_connect_ui_shows_every_session_s_queries_and_the_log_says_who_came_and_went(
        workdir, chromium):
    # The server's default filter shows its info lines (no RUST_LOG).
    server = without_rust_log(servers.Server(
        "sluice", log_path=os.path.join(workdir, "server.log"), cwd=workdir,
        extra_args=["--ui", "127.0.0.1:0"]))
    first = second = None
    try:
        server.start()
        url = dashboard_url(server)
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/"), url
        first, second = new_session(server.url), new_session(server.url)
        q = windowed_counts(first, "watched_counts", os.path.join(workdir, "ckpt1"))
        other = windowed_counts(second, "other_session_counts", os.path.join(workdir, "ckpt2"))
        wait_for(lambda: batches(q, 8) and batches(other, 3), 120, "batches of both queries")

        # /api/progress: both sessions' queries, by their names and ids.
        doc = json.loads(get(url + "api/progress"))
        by_name = {d["name"]: d for d in doc["queries"]}
        assert by_name["watched_counts"]["id"] == q.id, doc
        assert by_name["watched_counts"]["runId"] == q.runId
        assert by_name["watched_counts"]["status"] == "active"
        assert len(by_name["watched_counts"]["progress"]) >= 8
        assert by_name["other_session_counts"]["id"] == other.id

        # /metrics: the query's series, labelled with its name and id.
        metrics = get(url + "metrics")
        for family in ["sluice_input_rows_per_second", "sluice_processed_rows_per_second",
                       "sluice_batch_duration_ms", "sluice_batch_id", "sluice_state_rows",
                       "sluice_state_memory_bytes", "sluice_watermark_ms"]:
            assert "# TYPE %s " % family in metrics, metrics
            metric(metrics, family, "watched_counts", q.id)
        assert metric(metrics, "sluice_batch_id", "watched_counts", q.id) >= 7
        assert metric(metrics, "sluice_state_rows", "watched_counts", q.id) > 0
        assert metric(metrics, "sluice_watermark_ms", "watched_counts", q.id) > 1789474200000
        assert metric(metrics, "sluice_batch_id", "other_session_counts", other.id) >= 2

        # The page in a real browser: the query's section by name and id, its figures and its
        # charts drawn from the progress.
        dom = headless_dom(url)
        body = dom[dom.find("<body"):]
        body = body[:body.find(">")]
        points = re.search(r'data-points="(\d+)"', body)
        assert points and int(points.group(1)) >= 11, body
        sec = section(dom, "watched_counts")
        assert 'data-query-id="%s"' % q.id in sec, sec[:2000]
        assert re.search(r'data-points="(\d+)"', sec) and \
            int(re.search(r'data-points="(\d+)"', sec).group(1)) >= 8, sec[:2000]
        batch = re.search(r"<span>batch</span><b>(\d+)</b>", sec)
        assert batch and int(batch.group(1)) >= 7, sec[:3000]
        assert "run " + q.runId in sec
        for key in ["rates", "input-rows", "duration", "event-time", "state-rows"]:
            assert chart_points(sec, key) >= 8, key
        assert chart_points(section(dom, "other_session_counts"), "rates") >= 3
        assert "Input rate vs processing rate" in dom

        # A query that fails, logged with its error.
        failing = (second.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
                   .writeStream.queryName("failing_query").foreachBatch(fail_batch)
                   .option("checkpointLocation", os.path.join(workdir, "ckpt3")).start())
        wait_for(lambda: not failing.isActive, 60, "the failing query to fail")

        q.stop()
        other.stop()
        first_id, second_id = first.session_id, second.session_id
        first.stop()
        first = None
        close_session(second)
        second = None
        log = wait_for(lambda: "session released: session_id=" + second_id in server.log_text()
                       and server.log_text(), 30, "the sessions released")
    finally:
        for s in (first, second):
            if s is not None:
                close_session(s)
        server.stop()

    log = server.log_text()
    opened = log_line(log, "info", "session opened", session_id=first_id, user_id=".*",
                      client_type=".*")
    assert "_SPARK_CONNECT_PYTHON" in opened, opened
    log_line(log, "info", "session opened", session_id=second_id)
    started = log_line(log, "info", "query started", query_id=q.id, run_id=q.runId,
                       name="watched_counts", session_id=first_id)
    stopped = log_line(log, "info", "query stopped", query_id=q.id, run_id=q.runId,
                       name="watched_counts", session_id=first_id)
    assert started[:24] <= stopped[:24], (started, stopped)
    log_line(log, "info", "query started", query_id=other.id, name="other_session_counts",
             session_id=second_id)
    log_line(log, "info", "query stopped", query_id=other.id, session_id=second_id)
    failed = [line for line in log.splitlines()
              if re.match(r"%s warning: query failed: query_id=%s run_id=%s name=failing_query "
                          r"session_id=%s error_class=\S+ error=\".*observe boom"
                          % (TS, failing.id, failing.runId, second_id), line)]
    assert failed, log
    log_line(log, "info", "session released", session_id=first_id, queries_stopped="0")
    log_line(log, "info", "session released", session_id=second_id)


def test_log_format_json_prints_one_object_per_line_with_the_ids_as_fields(workdir):
    server = without_rust_log(servers.Server(
        "sluice", log_path=os.path.join(workdir, "server.log"), cwd=workdir,
        extra_args=["--log-format", "json"]))
    spark = None
    try:
        server.start()
        spark = new_session(server.url)
        q = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
             .writeStream.queryName("json_logged").format("noop")
             .option("checkpointLocation", os.path.join(workdir, "ckpt"))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(60)
        session_id = spark.session_id
        spark.stop()
        spark = None
        wait_for(lambda: "session released" in server.log_text(), 30, "the session released")
    finally:
        if spark is not None:
            close_session(spark)
        server.stop()
    lines = [json.loads(line) for line in server.log_text().splitlines()
             if line.startswith("{")]
    assert lines, server.log_text()
    for line in lines:
        assert re.fullmatch(TS, line["ts"]), line
        assert line["level"] in ("error", "warn", "info", "debug", "trace"), line
        assert isinstance(line["target"], str) and isinstance(line["message"], str), line
    by_message = {line["message"].split(":")[0]: line for line in lines
                  if line["target"] == "sluice_connect::observe"}
    opened = by_message["session opened"]
    assert opened["level"] == "info"
    assert opened["fields"]["session_id"] == session_id, opened
    assert opened["fields"]["client_type"].startswith("_SPARK_CONNECT_PYTHON"), opened
    for what in ("query started", "query stopped"):
        fields = by_message[what]["fields"]
        assert fields["query_id"] == q.id and fields["run_id"] == q.runId, by_message[what]
        assert fields["name"] == "json_logged" and fields["session_id"] == session_id
    assert by_message["session released"]["fields"]["session_id"] == session_id
    # The shutdown line (SIGTERM) is a JSON line too.
    assert any(line["message"].startswith("shutting down") for line in lines), lines
