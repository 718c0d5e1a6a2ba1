"""Sluice from Python: the Spark Connect server of the `sluice` binary this package installs.

    from sluice import SparkConnectServer
    with SparkConnectServer() as server:              # `sluice connect` on a free port
        spark = SparkSession.builder.remote(server.url).getOrCreate()

    spark = sluice.spark_session(**{"spark.sql.shuffle.partitions": "4"})

The server is the `sluice` binary in its own process (installed next to this interpreter by
`pip install sluice`), started with this interpreter as the Python of its foreachBatch, foreach
and listener workers, so they import what this program imports. It stops with `stop()`, at the
end of a `with` block, when the Python process exits (atexit), and also when the process is
killed: the server watches its standard input, a pipe held only by this process
(`sluice connect --stop-on-stdin-close`).

The package has no Python dependencies: install the Spark Connect client you use,
`pyspark-client` (4.0 to 4.2) or `pyspark[connect]`.
"""

import atexit
import gc
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading

__all__ = ["SparkConnectServer", "spark_session", "binary"]

_LISTENING = re.compile(r"^Spark Connect server listening on (sc://\S+)\s*$")


def binary():
    """The path of the `sluice` binary: `$SLUICE_BIN`, else the one installed with this package
    (the scripts directory of this interpreter's environment), else `sluice` on PATH."""
    env = os.environ.get("SLUICE_BIN")
    if env:
        return env
    name = "sluice.exe" if sys.platform == "win32" else "sluice"
    candidates = [sysconfig.get_path("scripts")]
    # `pip install --user`: the user scheme's scripts directory
    try:
        candidates.append(sysconfig.get_path("scripts", "%s_user" % os.name))
    except KeyError:
        pass
    candidates.append(os.path.dirname(sys.executable))
    for directory in candidates:
        if directory:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        "the sluice binary is not installed next to this Python (%s) nor on PATH; "
        "`pip install sluice` installs it, or set SLUICE_BIN to its path" % sys.executable)


class SparkConnectServer:
    """`sluice connect` in a child process, listening on `host:port` (port 0, the default, picks
    a free one). Started by the constructor; `url` is what `SparkSession.builder.remote` takes.

    Arguments:
      port, host: where to listen (a host other than loopback needs `token`).
      token: the bearer token clients must send (`url` then carries `;token=...`; on a
        loopback host it names `localhost`, where PySpark sends a token without TLS).
      python: the interpreter of the server's Python workers (default: this one).
      args: more `sluice connect` arguments (`["--workers", "h:7078"]`, ...).
      output: where the server's standard output goes (console sinks print there): None, the
        default, copies it to this process's `sys.stdout`; a path appends to that file.
      timeout: seconds to wait for the server to listen.
    """

    def __init__(self, port=0, host="127.0.0.1", *, token=None, python=None, args=(),
                 output=None, timeout=60.0):
        self._token = token
        self._tls = "--tls-cert" in args
        self._lock = threading.Lock()
        cmd = [binary(), "connect", "--listen", "%s:%d" % (host, port),
               "--python", python or sys.executable, "--stop-on-stdin-close"]
        if token is not None:
            cmd += ["--token", token]
        cmd += list(args)
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", python or sys.executable)
        self._sink = open(output, "a", encoding="utf-8") if output else None
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            text=True, encoding="utf-8", errors="replace", bufsize=1)
        self.url = None
        ready = threading.Event()
        self._reader = threading.Thread(
            target=self._read_output, args=(ready,), name="sluice-connect-output", daemon=True)
        self._reader.start()
        if not ready.wait(timeout) or self.url is None:
            code = self._proc.poll()
            if code is None and ready.is_set():
                # Its output ended without the listening line: it is exiting (the end of the
                # pipe can come a moment before the exit can be waited for).
                try:
                    code = self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    code = None
            self.stop()
            if code is None:
                raise TimeoutError("sluice connect did not listen within %.0f s" % timeout)
            raise RuntimeError(
                "sluice connect exited with code %d before listening (its error is above, on "
                "stderr); command: %s" % (code, " ".join(cmd)))
        atexit.register(self.stop)

    def _read_output(self, ready):
        out = self._proc.stdout
        for line in out:
            if self.url is None:
                m = _LISTENING.match(line)
                if m:
                    self.url = self._client_url(m.group(1))
                    ready.set()
                    continue
            target = self._sink or sys.stdout
            try:
                target.write(line)
                target.flush()
            except (ValueError, OSError):
                pass  # the target was closed (interpreter shutdown): keep draining the pipe
        ready.set()

    def _client_url(self, listening):
        """The URL a PySpark client takes for the server listening at `listening`."""
        params = []
        if self._tls:
            params.append("use_ssl=true")
        if self._token is not None:
            params.append("token=%s" % self._token)
            # PySpark sends a token only over TLS, except to the host named `localhost`
            # (gRPC's local credentials).
            if not self._tls:
                listening = re.sub(r"^sc://(127\.[0-9.]+|\[::1\])(?=:)", "sc://localhost",
                                   listening)
        return listening + ("/;" + ";".join(params) if params else "")

    @property
    def pid(self):
        """The server's process id."""
        return self._proc.pid

    def running(self):
        """Whether the server process is still running."""
        return self._proc.poll() is None

    def _stop_sessions(self):
        """Stops the PySpark sessions connected to this server: a client left open would, at
        the interpreter's exit, retry its cleanup calls against the stopped server for minutes."""
        module = sys.modules.get("pyspark.sql.connect.session")
        if module is None or self.url is None:
            return
        port = self.url.split("/;")[0].rsplit(":", 1)[1]
        for obj in gc.get_objects():
            if not isinstance(obj, module.SparkSession):
                continue
            try:
                if obj.client._builder.endpoint.rsplit(":", 1)[1] == port:
                    obj.stop()
            except Exception:  # noqa: BLE001 - best effort, as SparkSession.stop itself
                pass

    def stop(self, timeout=30.0):
        """Stops the server as SIGTERM does (queries stop after their current batch); kills it if
        it has not exited within `timeout` seconds. The PySpark sessions connected to it are
        stopped first. Idempotent."""
        with self._lock:
            if self._proc.poll() is None:
                self._stop_sessions()
                try:
                    self._proc.stdin.close()  # --stop-on-stdin-close: the server stops
                except OSError:
                    pass
                try:
                    self._proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            if self._sink is not None:
                self._reader.join(5)
                self._sink.close()
                self._sink = None
        try:
            atexit.unregister(self.stop)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __repr__(self):
        state = "running" if self.running() else "stopped"
        return "SparkConnectServer(%s, pid %d, %s)" % (self.url, self._proc.pid, state)


_default = None
_default_lock = threading.Lock()


def spark_session(**conf):
    """A new PySpark session connected to this process's Sluice server (started on a free port
    on first use, stopped when the process exits), with `conf` set on the builder:
    `spark_session(**{"spark.sql.shuffle.partitions": "4"})`. Needs a Spark Connect client
    (`pip install pyspark-client`)."""
    global _default
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise ImportError(
            "sluice.spark_session needs a Spark Connect client: pip install pyspark-client "
            "(or pyspark[connect])") from e
    with _default_lock:
        if _default is None or not _default.running():
            _default = SparkConnectServer()
        server = _default
    builder = SparkSession.builder.remote(server.url)
    for key, value in conf.items():
        builder = builder.config(key, value)
    # A new session on this server: getOrCreate would hand back a session the program already
    # has, whatever server it is on (`create` is Spark Connect's, 3.5 and later).
    create = getattr(builder, "create", None)
    return create() if create is not None else builder.getOrCreate()
