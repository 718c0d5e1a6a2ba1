"""Spark Connect servers the PySpark tests (and benches/connect_vs_spark.py) start, kill and
restart: Sluice's `sluice connect`, or the real Spark Connect server of a `pyspark==4.2.0`
install (`spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`).

Each server runs in its own process group (so SIGKILL takes its Python workers with it), with
`TZ=UTC`, `PYSPARK_PYTHON` set for its foreachBatch/listener workers, and its stdout and stderr
in a log file (a console sink prints there).
"""
import os
import signal
import socket
import subprocess
import sys
import time

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def sluice_bin():
    """`SLUICE_BIN`, else `$CARGO_TARGET_DIR/debug/sluice` (CARGO_TARGET_DIR defaulting to
    /var/tmp/sluice-target, as scripts/test)."""
    if os.environ.get("SLUICE_BIN"):
        return os.environ["SLUICE_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR") or "/var/tmp/sluice-target"
    return os.path.join(target, "debug", "sluice")


def spark_python():
    """The python of a venv with the full `pyspark==4.2.0` (jars included):
    `SLUICE_SPARK_PYTHON`, default ${SLUICE_TOOLS:-~/.cache/sluice}/venv-spark/bin/python."""
    if os.environ.get("SLUICE_SPARK_PYTHON"):
        return os.environ["SLUICE_SPARK_PYTHON"]
    tools = os.environ.get("SLUICE_TOOLS") or os.path.expanduser("~/.cache/sluice")
    return os.path.join(tools, "venv-spark", "bin", "python")


def spark_home(python):
    out = subprocess.run(
        [python, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
        check=True, capture_output=True, text=True)
    return out.stdout.strip()


def spark_conf_args():
    """Extra `--conf`s for Spark's server from SLUICE_SPARK_CONF ("k=v,k=v"); the tests'
    conftest sets spark.sql.ansi.enabled=false there: the recordings are Spark 3.5's defaults,
    and Spark 4 turned ANSI mode on by default."""
    for kv in filter(None, os.environ.get("SLUICE_SPARK_CONF", "").split(",")):
        yield "--conf"
        yield kv.strip()


class Server:
    """One Spark Connect server process on a fixed port; `restart()` SIGKILLs it and starts it
    again on the same port."""

    def __init__(self, kind, port=None, log_path=None, worker_python=None, extra_args=(), cwd=None):
        self.kind = kind  # "sluice" or "spark"
        self.cwd = cwd or "/tmp"
        self.port = port or free_port()
        self.url = "sc://127.0.0.1:%d" % self.port
        self.log_path = log_path or "/tmp/connect-%s-%d.log" % (kind, self.port)
        self.worker_python = worker_python or (
            sys.executable if kind == "sluice" else spark_python())
        self.extra_args = list(extra_args)
        self.proc = None
        self.starts = 0
        self.last_startup_seconds = None

    def command(self):
        if self.kind == "sluice":
            return [sluice_bin(), "connect", "--listen", "127.0.0.1:%d" % self.port] + self.extra_args
        home = spark_home(self.worker_python)
        return [
            os.path.join(home, "bin", "spark-submit"),
            "--class", CONNECT_SERVER_CLASS,
            "--name", "spark-connect-%d" % self.port,
            "--master", "local[2]",
            "--conf", "spark.connect.grpc.binding.port=%d" % self.port,
            "--conf", "spark.sql.session.timeZone=UTC",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.ui.showConsoleProgress=false",
            "--conf", "spark.driver.extraJavaOptions=-Duser.timezone=UTC",
            "--conf", "spark.executor.extraJavaOptions=-Duser.timezone=UTC",
            "--conf", "spark.sql.warehouse.dir=/tmp/spark-warehouse-%d" % self.port,
        ] + list(spark_conf_args()) + self.extra_args

    def env(self):
        env = dict(os.environ)
        env["TZ"] = "UTC"
        env["PYSPARK_PYTHON"] = self.worker_python
        if self.kind == "spark":
            env["SPARK_HOME"] = spark_home(self.worker_python)
            env["PYSPARK_DRIVER_PYTHON"] = self.worker_python
        return env

    def start(self, timeout=180):
        """Starts the server and waits until its port accepts connections."""
        if self.kind == "sluice" and not os.access(sluice_bin(), os.X_OK):
            raise RuntimeError(
                "the sluice binary %s does not exist: build it with "
                "`cargo build -p sluice-cli` (CARGO_TARGET_DIR=%s), or set "
                "SLUICE_BIN, or point SLUICE_CONNECT_URL at a running server"
                % (sluice_bin(), os.environ.get("CARGO_TARGET_DIR", "/var/tmp/sluice-target")))
        t0 = time.monotonic()
        log = open(self.log_path, "ab")
        log.write(b"\n==== start %d: %s\n" % (self.starts, " ".join(self.command()).encode()))
        log.flush()
        self.proc = subprocess.Popen(
            self.command(), env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.cwd)
        log.close()
        self.starts += 1
        deadline = t0 + timeout
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError("the %s server exited with %s before it listened on %d; log %s:\n%s"
                                   % (self.kind, self.proc.returncode, self.port, self.log_path,
                                      self.log_tail()))
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("the %s server did not listen on %d within %ds; log %s:\n%s"
                                   % (self.kind, self.port, timeout, self.log_path, self.log_tail()))
            time.sleep(0.02)
        self.last_startup_seconds = time.monotonic() - t0
        return self

    def kill(self, sig=signal.SIGKILL):
        """Sends `sig` to the server's whole process group (its Python workers too) and waits."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        # the port must be free again before a restart binds it
        deadline = time.monotonic() + 30
        while port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.proc = None

    def restart(self):
        """SIGKILL, then start again on the same port."""
        self.kill(signal.SIGKILL)
        return self.start()

    def stop(self):
        """SIGTERM (clean shutdown), SIGKILL if it does not stop."""
        self.kill(signal.SIGTERM)

    def log_text(self):
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])

    def pids(self):
        """The server's pid and every descendant's (from /proc)."""
        if self.proc is None:
            return []
        return process_tree(self.proc.pid)


def process_tree(root):
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as fh:
                stat = fh.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def vm_kb(pid, field):
    """VmHWM / VmRSS of one process in kB (0 when it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
