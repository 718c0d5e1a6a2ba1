"""The `sluice` Python package's module (python/src/sluice): `SparkConnectServer` starts
`sluice connect` on a free or a given port, gives its `url`, stops with `stop()`, at the end of a
`with` block, when the Python process exits and when it is SIGKILLed; `spark_session(**conf)`
returns a connected PySpark session with the conf set. The module is imported from the source
tree with `SLUICE_BIN` naming the binary under test (scripts/wheel-check runs the installed
wheel itself)."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import servers
from conftest import ENGINE

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

pytestmark = pytest.mark.skipif(ENGINE != "sluice", reason="the package starts Sluice's server")


@pytest.fixture
def sluice_module(monkeypatch):
    monkeypatch.setenv("SLUICE_BIN", servers.sluice_bin())
    monkeypatch.syspath_prepend(SRC)
    import sluice
    return sluice


def process_gone(pid, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie child of this process counts as gone
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.1)
    return False


def test_server_on_a_free_port_runs_a_query_and_stops(sluice_module):
    from pyspark.sql import SparkSession
    with sluice_module.SparkConnectServer() as server:
        assert server.url.startswith("sc://127.0.0.1:")
        port = int(server.url.rsplit(":", 1)[1])
        assert servers.port_open(port)
        spark = SparkSession.builder.remote(server.url).create()
        try:
            assert [r.id for r in spark.range(3).collect()] == [0, 1, 2]
        finally:
            spark.stop()
        pid = server.pid
    assert not server.running()
    assert process_gone(pid)
    assert not servers.port_open(port)
    server.stop()  # idempotent


def test_server_on_a_given_port(sluice_module):
    port = servers.free_port()
    server = sluice_module.SparkConnectServer(port=port)
    try:
        assert server.url == "sc://127.0.0.1:%d" % port
        assert servers.port_open(port)
    finally:
        server.stop()
    assert not servers.port_open(port)


def test_a_port_in_use_is_an_error_naming_the_exit(sluice_module):
    port = servers.free_port()
    first = sluice_module.SparkConnectServer(port=port)
    try:
        with pytest.raises(RuntimeError, match="exited with code"):
            sluice_module.SparkConnectServer(port=port, timeout=30)
    finally:
        first.stop()


@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_server_stops_when_the_python_process_ends(end, tmp_path):
    """A program that starts a server and then exits (atexit) or is SIGKILLed (no Python code
    runs: the server sees its stdin pipe close) leaves no server behind."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        sys.path.insert(0, %r)
        from sluice import SparkConnectServer
        server = SparkConnectServer()
        print(server.pid, server.url, flush=True)
        if sys.argv[1] == "sigkill":
            time.sleep(600)
    """ % SRC))
    env = dict(os.environ, SLUICE_BIN=servers.sluice_bin())
    proc = subprocess.Popen([sys.executable, str(script), end], stdout=subprocess.PIPE,
                            text=True, env=env)
    line = proc.stdout.readline().split()
    assert line, "the program printed no server"
    pid, url = int(line[0]), line[1]
    port = int(url.rsplit(":", 1)[1])
    if end == "sigkill":
        assert servers.port_open(port)
        proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    assert process_gone(pid), "the server %d outlived its Python process (%s)" % (pid, end)
    assert not servers.port_open(port)


def test_spark_session_sets_conf_and_reuses_one_server(sluice_module):
    spark = sluice_module.spark_session(**{"spark.sql.shuffle.partitions": "3"})
    try:
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        first = sluice_module._default
        assert first is not None and first.running()
        assert spark.range(2).count() == 2
    finally:
        spark.stop()
    again = sluice_module.spark_session()
    try:
        assert sluice_module._default is first
    finally:
        again.stop()
        first.stop()


def test_a_session_left_open_after_the_with_block_does_not_hold_the_exit(tmp_path):
    """`with SparkConnectServer() as server:` around a session the program never stops: the
    block's end stops that session first, so the client's own exit cleanup does not retry
    against a stopped server (it did for minutes)."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        from pyspark.sql import SparkSession
        from sluice import SparkConnectServer
        with SparkConnectServer() as server:
            spark = SparkSession.builder.remote(server.url).getOrCreate()
            print(spark.range(4).count(), flush=True)
    """ % SRC))
    env = dict(os.environ, SLUICE_BIN=servers.sluice_bin())
    start = time.time()
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["4"]
    assert time.time() - start < 30, "the program took %.0f s to exit" % (time.time() - start)
