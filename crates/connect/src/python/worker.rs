//! One Python worker process and its socket: start-up (listen on loopback TCP, spawn, accept,
//! check the secret, read the pid), PySpark's framing (big-endian `int`/`long`, length-prefixed UTF-8 and bytes), the
//! `0` / `-2 traceback` answers, output forwarding, and turning a dead or silent worker into an
//! error with its exit status and last stderr lines.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::error::{java, ConnectError, Result};

use super::{LineSink, OutputStream, PythonConfig};

/// Spark's `SpecialLengths.PYTHON_EXCEPTION_THROWN`: a traceback follows.
const PYTHON_EXCEPTION_THROWN: i32 = -2;
/// The Java class PySpark turns into `pyspark.errors.PythonException`.
pub(super) const PYTHON_EXCEPTION: &str = "org.apache.spark.api.python.PythonException";
/// How many of the worker's last stderr lines an error quotes (a 3.5 worker's traceback is
/// all of its error).
const TAIL_LINES: usize = 40;
/// How a Python traceback starts.
const TRACEBACK: &str = "Traceback (most recent call last):";
/// How often a blocked read looks whether the worker is still alive.
const POLL: Duration = Duration::from_millis(200);

/// The fix for a worker that cannot run at all.
fn install_hint(python: &str) -> String {
    format!(
        "the server runs the client's Python callbacks with `{python}`, which needs the PySpark \
         client the program uses (`{python} -m pip install pyspark-client==4.2.0`, or \
         `pyspark[connect]==3.5.9` for a 3.5 client); start the server with \
         `--python /path/to/python` or set PYSPARK_PYTHON to the interpreter the PySpark client \
         runs in"
    )
}

/// The worker's last stderr lines, and how many of its output streams are still open.
#[derive(Default)]
struct Output {
    state: Mutex<OutputState>,
    closed: Condvar,
}

#[derive(Default)]
struct OutputState {
    tail: VecDeque<String>,
    open: usize,
}

impl Output {
    fn push(&self, line: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.tail.len() == TAIL_LINES {
            state.tail.pop_front();
        }
        state.tail.push_back(line.to_string());
    }
    fn close_one(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.open = state.open.saturating_sub(1);
        self.closed.notify_all();
    }
    /// The last stderr lines, once both streams ended (or `wait` passed).
    fn tail(&self, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.open > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = match self.closed.wait_timeout(state, deadline - now) {
                Ok((s, _)) => s,
                Err(e) => e.into_inner().0,
            };
        }
        state.tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// Forwards the lines of one of the worker's pipes to the sink (stderr lines also to the tail).
fn forward(
    pipe: impl Read + Send + 'static,
    stream: OutputStream,
    sink: LineSink,
    output: Arc<Output>,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("python-worker-{stream:?}").to_lowercase())
        .spawn({
            let output = output.clone();
            move || {
                let mut reader = BufReader::new(pipe);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                                buf.pop();
                            }
                            let line = String::from_utf8_lossy(&buf);
                            if stream == OutputStream::Stderr {
                                output.push(&line);
                            }
                            sink(stream, &line);
                        }
                    }
                }
                output.close_one();
            }
        });
    if spawned.is_err() {
        output.close_one();
    }
}

/// Runs a module as `__main__` from a script file. Not `python -m`: while `-m` imports the
/// module's packages, `__main__` has neither `__spec__` nor `__file__`, which pyspark-client's
/// `pyspark.sql.connect` import check takes for a doctest run, and without a Spark distribution
/// (pyspark-client has none) it exits with status 255 ("Could not find valid SPARK_HOME").
/// First it leaves the interpreter's pyspark version in [`PYSPARK_VERSION_FILE`] beside itself
/// (the module imports pyspark anyway): the workers' protocols differ between versions.
const RUN_MODULE: &str = r#""""Sluice: runs a PySpark worker module as __main__ (see python/worker.rs)."""
import os
import runpy
import sys

import pyspark

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyspark_version"), "w") as f:
    f.write(pyspark.__version__)
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"#;

/// The file [`RUN_MODULE`] writes the worker's `pyspark.__version__` to, in the worker's
/// directory, before the module connects.
const PYSPARK_VERSION_FILE: &str = "pyspark_version";

/// What the worker process runs.
pub(super) enum Launch {
    /// The module, run as `__main__` (as `python -m module`, see [`RUN_MODULE`]).
    Module(&'static str),
    /// `python <dir>/name` with the script `text` written to the worker's directory.
    Script {
        /// The file name.
        name: &'static str,
        /// The program.
        text: &'static str,
    },
}

/// A running worker: the process, the accepted socket, the socket's directory.
pub(super) struct Worker {
    /// What runs in it, for messages ("foreachBatch", "listener", "foreach").
    what: &'static str,
    /// The command line, for messages.
    command: String,
    python: String,
    child: Arc<Mutex<Child>>,
    interrupted: Arc<AtomicBool>,
    pid: Option<i32>,
    stream: TcpStream,
    dir: PathBuf,
    output: Arc<Output>,
    /// Why the worker cannot be used any more (it exited, or a call broke the protocol).
    broken: Option<String>,
    /// The worker's `pyspark.__version__` (a module worker's; `None` for a script).
    pyspark_version: Option<String>,
}

impl Worker {
    /// Starts `python args...` with the worker socket in a fresh directory and waits (up to
    /// `config.connect_timeout`) until it connects and sends its pid.
    pub(super) fn spawn(config: &PythonConfig, what: &'static str, launch: Launch) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("sluice-python-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).map_err(|e| {
            io_error(
                format!(
                    "cannot create the Python worker's directory {}",
                    dir.display()
                ),
                e,
            )
        })?;
        let mut worker = None;
        let result = Self::spawn_in(config, what, launch, &dir, &mut worker);
        if result.is_err() {
            if let Some(mut child) = worker {
                kill(&mut child);
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    fn spawn_in(
        config: &PythonConfig,
        what: &'static str,
        launch: Launch,
        dir: &std::path::Path,
        spawned: &mut Option<Child>,
    ) -> Result<Self> {
        let python = config.python.clone();
        let command = match &launch {
            Launch::Module(module) => format!("{python} -m {module}"),
            Launch::Script { name, .. } => format!("{python} {name}"),
        };
        let args: Vec<std::ffi::OsString> = match launch {
            Launch::Module(module) => {
                let path = dir.join("run_module.py");
                std::fs::write(&path, RUN_MODULE)
                    .map_err(|e| io_error(format!("cannot write {}", path.display()), e))?;
                vec![path.into_os_string(), module.into()]
            }
            Launch::Script { name, text } => {
                let path = dir.join(name);
                std::fs::write(&path, text)
                    .map_err(|e| io_error(format!("cannot write {}", path.display()), e))?;
                vec![path.into_os_string()]
            }
        };
        // Loopback TCP with Spark's secret handshake: the transport every client's workers
        // speak (3.5 and 4.0 only this one; 4.1+ also a Unix socket, when given one).
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| io_error("cannot listen on 127.0.0.1 for the Python worker".into(), e))?;
        let port = listener
            .local_addr()
            .map_err(|e| io_error("cannot set up the Python worker's socket".into(), e))?
            .port();
        listener
            .set_nonblocking(true)
            .map_err(|e| io_error("cannot set up the Python worker's socket".into(), e))?;
        let secret = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let mut cmd = Command::new(&python);
        cmd.args(&args)
            .current_dir(std::env::current_dir().unwrap_or_else(|_| dir.to_path_buf()))
            .env("PYTHON_WORKER_FACTORY_PORT", port.to_string())
            .env("PYTHON_WORKER_FACTORY_SECRET", &secret)
            .env_remove("PYTHON_WORKER_FACTORY_SOCK_PATH")
            .env(
                "SPARK_CONNECT_LOCAL_URL",
                super::worker_url(&config.connect_url),
            )
            .env("SPARK_AUTH_SOCKET_TIMEOUT", "15")
            // The server's own environment may hold a client's token: only the one for this
            // server's workers goes to them.
            .env_remove("SPARK_CONNECT_AUTHENTICATE_TOKEN")
            .env("SPARK_BUFFER_SIZE", "65536")
            .env("PYTHONUNBUFFERED", "YES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(token) = &config.token {
            cmd.env("SPARK_CONNECT_AUTHENTICATE_TOKEN", token);
        }
        let mut child = cmd.spawn().map_err(|e| {
            let what_failed = if e.kind() == ErrorKind::NotFound {
                format!("the Python interpreter `{python}` was not found")
            } else {
                format!("cannot run the Python interpreter `{python}`: {e}")
            };
            python_worker_failed(format!(
                "{what_failed} (starting the {what} worker `{command}`); {}",
                install_hint(&python)
            ))
        })?;
        let output = Arc::new(Output::default());
        output.state.lock().unwrap_or_else(|e| e.into_inner()).open = 2;
        match child.stdout.take() {
            Some(p) => forward(
                p,
                OutputStream::Stdout,
                config.lines.clone(),
                output.clone(),
            ),
            None => output.close_one(),
        }
        match child.stderr.take() {
            Some(p) => forward(
                p,
                OutputStream::Stderr,
                config.lines.clone(),
                output.clone(),
            ),
            None => output.close_one(),
        }
        *spawned = Some(child);
        let child = spawned.as_mut().expect("just set");

        let deadline = Instant::now() + config.connect_timeout;
        let stream = loop {
            match listener.accept() {
                // Another local process may connect: only the worker knows the secret.
                Ok((mut stream, _)) => match authenticate(&mut stream, &secret, deadline) {
                    Ok(true) => break stream,
                    Ok(false) | Err(_) => continue,
                },
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    if let Ok(Some(status)) = child.try_wait() {
                        let tail = output.tail(Duration::from_secs(2));
                        return Err(python_worker_failed(format!(
                            "the Python {what} worker `{command}` exited with {} before it \
                             connected to the server; its last output:\n{tail}\n{}",
                            describe(status),
                            hint_for(&tail, &python)
                        )));
                    }
                    if Instant::now() >= deadline {
                        let tail = output.tail(Duration::ZERO);
                        return Err(python_worker_failed(format!(
                            "the Python {what} worker `{command}` did not connect to the server \
                             within {} s; its last output:\n{tail}\n{}",
                            config.connect_timeout.as_secs(),
                            install_hint(&python)
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    return Err(io_error(
                        "cannot accept the Python worker's connection".into(),
                        e,
                    ))
                }
            }
        };
        stream
            .set_nonblocking(false)
            .and_then(|_| stream.set_read_timeout(Some(POLL)))
            .map_err(|e| io_error("cannot set up the Python worker's socket".into(), e))?;
        let child = spawned.take().expect("just set");
        let mut worker = Worker {
            what,
            command,
            python,
            child: Arc::new(Mutex::new(child)),
            interrupted: Arc::new(AtomicBool::new(false)),
            pid: None,
            stream,
            dir: dir.to_path_buf(),
            output,
            broken: None,
            // Written before the module connected (RUN_MODULE).
            pyspark_version: std::fs::read_to_string(dir.join(PYSPARK_VERSION_FILE))
                .ok()
                .map(|v| v.trim().to_string()),
        };
        // `get_sock_file_to_executor` sends the worker's pid first.
        let pid = worker.read_i32_until(Some(deadline), "start-up");
        match pid {
            Ok(pid) => worker.pid = Some(pid),
            Err(e) => {
                // Dropping the worker kills it and removes the directory.
                *spawned = None;
                return Err(e);
            }
        }
        Ok(worker)
    }

    /// The interpreter this worker runs on.
    pub(super) fn python(&self) -> &str {
        &self.python
    }

    /// Whether the worker can still take calls (it has not died nor broken the protocol).
    pub(super) fn is_alive(&self) -> bool {
        self.broken.is_none() && self.try_wait().is_none()
    }

    /// The worker's pyspark version (`"3.5.9"`), known for module workers.
    pub(super) fn pyspark_version(&self) -> Option<&str> {
        self.pyspark_version.as_deref()
    }

    /// Whether the worker's pyspark is older than `major.minor` (false when unknown).
    pub(super) fn pyspark_older_than(&self, major: u32, minor: u32) -> bool {
        self.pyspark_version()
            .and_then(major_minor)
            .is_some_and(|v| v < (major, minor))
    }

    /// Sends one request (already framed) and reads the worker's `0` or traceback answer.
    /// `deadline` bounds the wait (start-up); calls wait as long as the function runs, while
    /// the worker is alive.
    pub(super) fn request(
        &mut self,
        message: &[u8],
        during: &str,
        deadline: Option<Instant>,
    ) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(python_worker_failed(format!(
                "the Python {} worker cannot run {during}: {why}",
                self.what
            )));
        }
        if let Err(e) = self
            .stream
            .write_all(message)
            .and_then(|_| self.stream.flush())
        {
            return Err(self.died(during, Some(e)));
        }
        let answer = self.read_i32_until(deadline, during)?;
        match answer {
            0 => Ok(()),
            PYTHON_EXCEPTION_THROWN => {
                let traceback = self.read_utf(deadline, during)?;
                Err(python_exception(self.what, during, &traceback))
            }
            other => {
                let why = format!("it answered {other} (expected 0 or -2) to {during}");
                self.broken = Some(why.clone());
                Err(python_worker_failed(format!(
                    "the Python {} worker `{}` broke the protocol: {why}",
                    self.what, self.command
                )))
            }
        }
    }

    /// Sends one message that the worker does not answer (PySpark 3.5's listener events). A
    /// worker that already died is an error with its status and last stderr lines.
    pub(super) fn send_unanswered(&mut self, message: &[u8], during: &str) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(python_worker_failed(format!(
                "the Python {} worker cannot run {during}: {why}",
                self.what
            )));
        }
        if self.try_wait().is_some() {
            // Nothing is answered: it ended on an earlier message.
            return Err(self.died(&format!("a message before {during}"), None));
        }
        if let Err(e) = self
            .stream
            .write_all(message)
            .and_then(|_| self.stream.flush())
        {
            return Err(self.died(during, Some(e)));
        }
        Ok(())
    }

    fn read_i32_until(&mut self, deadline: Option<Instant>, during: &str) -> Result<i32> {
        let mut buf = [0u8; 4];
        self.read_exact(&mut buf, deadline, during)?;
        Ok(i32::from_be_bytes(buf))
    }

    fn read_utf(&mut self, deadline: Option<Instant>, during: &str) -> Result<String> {
        let len = self.read_i32_until(deadline, during)?;
        let len = usize::try_from(len).unwrap_or(0);
        let mut buf = vec![0u8; len];
        self.read_exact(&mut buf, deadline, during)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Reads exactly `buf`, looking every [`POLL`] whether the worker is still alive.
    fn read_exact(
        &mut self,
        buf: &mut [u8],
        deadline: Option<Instant>,
        during: &str,
    ) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.stream.read(&mut buf[done..]) {
                Ok(0) => return Err(self.died(during, None)),
                Ok(n) => done += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    if self.try_wait().is_some() {
                        return Err(self.died(during, None));
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        let tail = self.output.tail(Duration::ZERO);
                        let why = format!("it did not answer {during} in time");
                        self.broken = Some(why.clone());
                        return Err(python_worker_failed(format!(
                            "the Python {} worker `{}`: {why}; its last output:\n{tail}\n{}",
                            self.what,
                            self.command,
                            install_hint(&self.python)
                        )));
                    }
                }
                Err(e) => return Err(self.died(during, Some(e))),
            }
        }
        Ok(())
    }

    /// The error for a worker whose socket closed: waits for its exit status (killing it after
    /// a grace period) and quotes its last stderr lines.
    fn died(&mut self, during: &str, io: Option<std::io::Error>) -> ConnectError {
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            match self.try_wait() {
                Some(status) => break Some(status),
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                None => {
                    self.kill();
                    break self.try_wait();
                }
            }
        };
        let tail = self.output.tail(Duration::from_secs(2));
        let status = status.map_or_else(|| "an unknown status".to_string(), describe);
        let io = io.map(|e| format!(" ({e})")).unwrap_or_default();
        let pid = self.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        if self.interrupted.load(Ordering::SeqCst) {
            let why = format!("it was stopped during {during} (the query was stopped)");
            self.broken = Some(why.clone());
            return python_worker_failed(format!(
                "the Python {} worker `{}`{pid}: {why}",
                self.what, self.command
            ));
        }
        let why = format!("it exited with {status} during {during}{io}");
        self.broken = Some(why.clone());
        // PySpark 3.5's workers catch nothing: an exception in the user's function ends the
        // process with its traceback on stderr (4.x answers -2 and the traceback instead).
        if self.pyspark_older_than(4, 0) {
            if let Some(at) = tail.rfind(TRACEBACK) {
                return python_exception(self.what, during, &tail[at..]);
            }
        }
        python_worker_failed(format!(
            "the Python {} worker `{}`{pid} exited unexpectedly with {status} during \
             {during}{io}; its last stderr lines:\n{tail}\n{}",
            self.what,
            self.command,
            hint_for(&tail, &self.python)
        ))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // As Spark's StreamingPythonRunner.stop: the worker is killed (it has no work left;
        // closing its socket first would only make it print an EOF traceback), then reaped.
        self.kill();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Worker {
    /// The exit status, once the process ended (reaped).
    fn try_wait(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        child.try_wait().ok().flatten()
    }
    /// Kills and reaps the process.
    fn kill(&self) {
        kill(&mut self.child.lock().unwrap_or_else(|e| e.into_inner()));
    }
    /// A handle that stops the worker from another thread.
    pub(super) fn interrupter(&self) -> WorkerInterrupt {
        WorkerInterrupt {
            child: Arc::downgrade(&self.child),
            interrupted: self.interrupted.clone(),
        }
    }
}

/// Stops a worker from another thread (`query.stop()` while the function runs): kills the
/// process, so the blocked call returns an error saying the query was stopped.
#[derive(Clone, Debug)]
pub struct WorkerInterrupt {
    child: Weak<Mutex<Child>>,
    interrupted: Arc<AtomicBool>,
}

impl WorkerInterrupt {
    /// Kills the worker process (a no-op once the worker is gone).
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::SeqCst);
        if let Some(child) = self.child.upgrade() {
            let _ = child.lock().unwrap_or_else(|e| e.into_inner()).kill();
        }
    }
}

/// Kills and reaps the process.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Spark's `SocketAuthHelper.authClient`: the worker sends the secret (a length-prefixed UTF-8
/// string, `_do_server_auth`), the server answers `ok` when it matches, else `err` and closes.
/// The wait is bounded by `deadline` (at most 15 s, Spark's `SPARK_AUTH_SOCKET_TIMEOUT`).
pub(super) fn authenticate(
    stream: &mut TcpStream,
    secret: &str,
    deadline: Instant,
) -> std::io::Result<bool> {
    let wait = deadline
        .saturating_duration_since(Instant::now())
        .clamp(Duration::from_millis(100), Duration::from_secs(15));
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(wait))?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    let ok = if usize::try_from(len).is_ok_and(|n| n == secret.len()) {
        let mut got = vec![0u8; secret.len()];
        stream.read_exact(&mut got)?;
        // Every byte compared, whatever the first difference.
        got.iter()
            .zip(secret.as_bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    } else {
        false
    };
    let reply: &[u8] = if ok { b"ok" } else { b"err" };
    stream.write_all(&(reply.len() as i32).to_be_bytes())?;
    stream.write_all(reply)?;
    stream.flush()?;
    Ok(ok)
}

/// `(4, 2)` of `"4.2.0"` (or `"4.3.0.dev1"`).
pub(super) fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    Some((major, minor.parse().ok()?))
}

/// "exit status 1", "signal 9 (SIGKILL)".
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(9)) => "signal 9 (SIGKILL)".to_string(),
        (None, Some(sig)) => format!("signal {sig}"),
        (None, None) => status.to_string(),
    }
}

/// The fix when the output says pyspark (or one of its dependencies) is missing.
fn hint_for(tail: &str, python: &str) -> String {
    if tail.contains("No module named") || tail.contains("ModuleNotFoundError") {
        format!("A module is missing: {}", install_hint(python))
    } else {
        String::new()
    }
}

/// An error of the worker itself (not of the user's function).
pub(super) fn python_worker_failed(message: String) -> ConnectError {
    ConnectError::new(
        java::INTERNAL,
        sluice::error::class::PYTHON_WORKER_FAILED,
        message,
    )
}

fn io_error(what: String, e: std::io::Error) -> ConnectError {
    python_worker_failed(format!("{what}: {e}"))
}

/// The user's function raised: `PythonException` with the traceback, as Spark reports it.
fn python_exception(what: &str, during: &str, traceback: &str) -> ConnectError {
    let class = if traceback.contains(sluice::error::class::PYTHON_VERSION_MISMATCH) {
        sluice::error::class::PYTHON_VERSION_MISMATCH
    } else {
        sluice::error::class::PYTHON_EXCEPTION
    };
    ConnectError::new(
        PYTHON_EXCEPTION,
        class,
        format!("[{class}] Found error inside {what} Python process during {during}: {traceback}"),
    )
}

/// A request in PySpark's framing.
#[derive(Default)]
pub(super) struct Frame(pub(super) Vec<u8>);

impl Frame {
    pub(super) fn int(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(super) fn long(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// A byte string behind its 4-byte length (`write_with_length`, `UTF8Deserializer`).
    pub(super) fn bytes(self, v: &[u8]) -> Result<Self> {
        let len = i32::try_from(v.len()).map_err(|_| {
            python_worker_failed(format!(
                "{} bytes are too many for one message to the Python worker (at most 2 GiB)",
                v.len()
            ))
        })?;
        let mut frame = self.int(len);
        frame.0.extend_from_slice(v);
        Ok(frame)
    }
    pub(super) fn utf(self, v: &str) -> Result<Self> {
        self.bytes(v.as_bytes())
    }
}

/// Sends the start-up messages every worker reads the same way: the client's Python version
/// (`check_python_version`), then `rest` (session id, pickled command), and waits for its `0`.
pub(super) fn handshake(
    worker: &mut Worker,
    config: &PythonConfig,
    python_ver: &str,
    rest: Frame,
) -> Result<()> {
    let mut frame = Frame::default().utf(python_ver)?;
    frame.0.extend_from_slice(&rest.0);
    worker.request(
        &frame.0,
        "start-up",
        Some(Instant::now() + config.connect_timeout),
    )
}
