"""Fixtures of the PySpark suite: the Spark Connect server the tests run against, and a fresh
`spark` session per test.

Which server:
  * default: Sluice — `$SLUICE_BIN` (default `$CARGO_TARGET_DIR/debug/sluice`, CARGO_TARGET_DIR
    defaulting to /var/tmp/sluice-target) started as `sluice connect --listen 127.0.0.1:<free
    port>` with PYSPARK_PYTHON = this interpreter, killed at the end;
  * `SLUICE_TEST_SERVER=spark`: the real Spark Connect server of a `pyspark==4.2.0` venv
    (`SLUICE_SPARK_PYTHON`, default ~/.cache/sluice/venv-spark/bin/python), started the same
    way (to validate the harness against Spark; conformance then checks Spark's recordings,
    not Sluice's intended deviations nor Sluice's expected failures);
  * `SLUICE_CONNECT_URL=sc://host:port`: a server already running; nothing is started, and the
    tests that kill and restart the server are skipped. Set SLUICE_TEST_SERVER=spark as well
    when that server is Spark.
"""
import os
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))

os.environ["TZ"] = "UTC"
time.tzset()
# pyspark-client's connect import runs pyspark.testing's _find_spark_home(), which exits the
# process when it finds no Spark install (under pytest-xdist it does not): any path will do.
os.environ.setdefault("SPARK_HOME", os.path.dirname(sys.executable))

import capture  # noqa: E402
import servers  # noqa: E402
from pyspark import cloudpickle  # noqa: E402

# The foreachBatch functions are pickled with their module's code: the server's worker cannot
# import the test directory.
cloudpickle.register_pickle_by_value(capture)

ENGINE = os.environ.get("SLUICE_TEST_SERVER", "sluice")
# Spark's server (SLUICE_TEST_SERVER=spark) with Spark 3.5's default, as the scenarios were
# recorded: Spark 4 turned ANSI mode on by default (a scenario with its own `conf` sets it).
os.environ.setdefault("SLUICE_SPARK_CONF", "spark.sql.ansi.enabled=false")
if ENGINE not in ("sluice", "spark"):
    raise RuntimeError("SLUICE_TEST_SERVER must be sluice or spark, not %r" % ENGINE)


def progress_dict(p):
    """A StreamingQueryProgress as a dict of its whole JSON: PySpark 4 gives objects (dicts of
    the fields it knows, the whole JSON in `.json`), PySpark 3.5 plain dicts of the JSON
    (scripts/clients runs both)."""
    import json

    return json.loads(p.json) if hasattr(p, "json") else p


class External:
    """A server the tests did not start (SLUICE_CONNECT_URL)."""

    kind = "external"

    def __init__(self, url):
        self.url = url
        self.log_path = None
        self.cwd = os.environ.get("SLUICE_CONNECT_CWD")

    def restart(self):
        pytest.skip("SLUICE_CONNECT_URL: the tests cannot restart a server they did not start")

    def log_text(self):
        return ""


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    url = os.environ.get("SLUICE_CONNECT_URL")
    if url:
        yield External(url)
        return
    d = tmp_path_factory.mktemp("server")
    # the server's working directory: relative paths in a job resolve there
    cwd = d / "cwd"
    cwd.mkdir()
    srv = servers.Server(ENGINE, log_path=str(d / ("%s-server.log" % ENGINE)), cwd=str(cwd))
    try:
        srv.start()
    except RuntimeError as e:
        pytest.exit(str(e), returncode=3)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def connect_url(server):
    return server.url


# PySpark's client before 4.2 can deadlock when a SparkSession is garbage-collected during a
# gRPC call: SparkSession.__del__ closes the client, which waits for the ReleaseExecute thread
# pool to finish (3.5 joins it, 4.0 and 4.1 shut it down with wait=True), while a call in that
# pool waits for a grpc lock the collecting thread holds, or the collection runs in the pool
# itself (4.2 shuts the pool down without waiting). The suite makes a session per test, so with
# those clients each one stays referenced until the run ends and is never collected mid-run.
_KEPT_SESSIONS = []


def _client_before(major, minor):
    import pyspark

    version = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
    return version < (major, minor)


def new_session(url):
    """A new Spark Connect session (never a cached one: after a server restart the old
    session's channel is gone) with the session time zone the scenarios are recorded in."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).create()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    if _client_before(4, 2):
        _KEPT_SESSIONS.append(spark)
    return spark


def forget_session(spark):
    """Drops a session whose server was killed, without asking that server anything. PySpark
    3.5's stop() does just that, and must be called: its getOrCreate() would hand the dead
    session back to later code (4.x's skips stopped and closed ones)."""
    try:
        if _client_before(4, 0):
            spark.stop()
        else:
            spark.client.close()
    except Exception:  # noqa: BLE001
        pass


def close_session(spark):
    try:
        for q in spark.streams.active:
            try:
                q.stop()
            except Exception:  # noqa: BLE001
                pass
    except Exception:  # noqa: BLE001
        pass
    try:
        spark.stop()
    except Exception:  # noqa: BLE001
        pass


class Sessions:
    """The test's sessions: `current`, and `restart_server()` which SIGKILLs the server, starts
    it again on the same port and opens a new session."""

    def __init__(self, server):
        self.server = server
        self.current = new_session(server.url)

    def restart_server(self):
        old = self.current
        self.server.restart()
        forget_session(old)
        self.current = new_session(self.server.url)
        return self.current

    def close(self):
        close_session(self.current)


@pytest.fixture
def sessions(server):
    s = Sessions(server)
    yield s
    s.close()


@pytest.fixture
def spark(sessions):
    return sessions.current


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory(prefix="sluice-pytest-") as d:
        yield d
