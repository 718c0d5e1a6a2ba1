//! The `sluice` command. Every subcommand has `--help`; `sluice --version` prints the version.
//! Bad arguments are reported by clap with the usage, exit code 2.
//!
//! - `sluice demo [--dir DIR]`: the seed documents' file example on embedded defaults: writes a
//!   few JSON files, streams them one file per trigger through a filter, prints each batch to the
//!   console, writes them to parquet and reads the result back.
//! - `sluice run PIPELINE.sql [--set NAME=VALUE]... [--progress human|json|none] [--ui ADDR
//!   [--ui-token TOKEN]]`: runs a pipeline file (`sql_pipeline.rs`) until its queries finish or
//!   Ctrl-C, with a live status line per query (`status.rs`) and, with `--ui`, a dashboard
//!   (`ui/`; a non-loopback ADDR needs a token, `--ui-token` or `SLUICE_UI_TOKEN`).
//! - `sluice run --pipeline file-to-parquet|windowed-count --input DIR --output DIR --checkpoint DIR
//!   [--available-now]`: a built-in pipeline over JSON files (the chaos test's).
//! - `sluice bench --workload windowed|stateless|overhead|decode|nexmark|latency ...`: benchmarks
//!   (`bench.rs`, `nexmark.rs`, `latency.rs`); the last line printed is one JSON object.
//! - `sluice conformance [--matrix] [--json REPORT] PATH...`: runs conformance scenarios (files
//!   or directories); `--matrix` also runs each with restarts and crashes. Exit 1 if one fails.
//! - `sluice checkpoint describe DIR [--json]`: what a query checkpoint holds (`inspect.rs`).
//! - `sluice state read DIR [--operator N] [--batch N] [--json]`: an operator's state as of a
//!   committed batch (`inspect.rs`).
//!
//! Logging: the engine's `log` lines go to stderr above the status lines (`logger.rs`), each
//! starting with the UTC time, filtered by `RUST_LOG` (env_logger's syntax); without it warnings
//! and errors are shown (and `sluice connect`'s sessions and queries coming and going).
//! `--log-format json` (or `SLUICE_LOG_FORMAT=json`) prints them as one JSON object per line.
//!
//! Exit codes: 0 done, 1 a query or a conformance scenario failed, 2 bad arguments or a bad
//! pipeline file (and errors before anything ran).

mod bench;
mod bench_args;
mod inspect;
mod kafka_bench;
mod latency;
mod logger;
mod nexmark;
mod sql_pipeline;
mod status;
mod ui;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sluice::{col, lit, OutputMode, Session, Trigger};

/// Spark Structured Streaming semantics on Arrow and DataFusion: run pipelines, conformance
/// scenarios and benchmarks, and look into checkpoints.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, propagate_version = true)]
#[command(
    after_help = "Logging: RUST_LOG=warn|info|debug|sluice=debug,... (default: warnings; \
                  for `sluice connect` also its sessions and queries). Lines start with the \
                  UTC time; --log-format json (or SLUICE_LOG_FORMAT=json) prints one JSON \
                  object per line. See `sluice <COMMAND> --help` for each command."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// How log lines are printed on stderr: text (TIME LEVEL TARGET: MESSAGE) or json (one
    /// object per line: ts, level, target, message, fields); default: $SLUICE_LOG_FORMAT, else
    /// text
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        ignore_case = true
    )]
    log_format: Option<logger::LogFormat>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the file-stream example on local files (no servers): writes three JSON files, streams
    /// them one per trigger through a filter to the console and to parquet, reads it back
    Demo {
        /// Where to write the input, output and checkpoint (default: a new temp directory)
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Run a pipeline file (CREATE TABLE sources, CREATE SINK ... AS SELECT queries) until its
    /// queries finish or Ctrl-C (after the current batch; twice: at once), or a built-in
    /// pipeline with --pipeline
    #[command(
        override_usage = "sluice run PIPELINE.sql [--set NAME=VALUE]... [--progress MODE] [--ui ADDR [--ui-token TOKEN]]
       sluice run --pipeline NAME --input DIR --output DIR --checkpoint DIR [--available-now]",
        after_help = "Exit codes: 0 finished or stopped, 1 a query failed while running, 2 the \
                      pipeline file or the arguments are wrong."
    )]
    Run(RunArgs),
    /// Benchmarks: the Sluice side of shared/bench/bench_spark.py, Nexmark queries, end-to-end
    /// latency; prints one JSON line last
    Bench(bench_args::BenchArgs),
    /// Run conformance scenarios (files or directories of Spark-recorded scenarios)
    Conformance(ConformanceArgs),
    /// Look into a query checkpoint
    #[command(subcommand)]
    Checkpoint(inspect::CheckpointCommand),
    /// Read the state of a stateful operator from a checkpoint
    #[command(subcommand)]
    State(inspect::StateCommand),
    /// Serve Spark Connect: PySpark programs (`pip install pyspark-client==4.2.0`) connect with
    /// SparkSession.builder.remote("sc://127.0.0.1:15002") and run on Sluice; stops on SIGTERM
    /// or Ctrl-C after each query's current batch
    #[command(
        after_help = "Logging: without RUST_LOG, warnings and the server's info lines \
                      (RUST_LOG=warn,sluice_connect=info): each session opened (session id, \
                      user id, client type) and released, each query started (query id, run \
                      id, name, session id), stopped or failed (with its error class and \
                      message). RUST_LOG=warn shows only warnings."
    )]
    Connect(ConnectArgs),
    /// Serve a worker for queries on a cluster: a driver whose queries set
    /// sluice.distributed.workers (or --workers) to this address runs its batches' plans here;
    /// prints one line once it listens
    Worker(WorkerArgs),
}

/// `sluice worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Where to listen (host:port; port 0 picks a free one and prints it)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7078")]
    pub listen: String,
    /// Serve TLS only, with this certificate chain (PEM; its names must include the address
    /// drivers use)
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM)
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve only drivers that present a certificate this CA (PEM) signed (mutual TLS);
    /// without it, anyone who reaches the port can run tasks here
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// How this worker reaches the other workers, which own the state its reads route rows
    /// to: as a driver reaches them
    #[command(flatten)]
    pub workers_tls: WorkersTlsArgs,
}

/// How a driver reaches its workers over TLS (`sluice run`, `sluice connect`).
#[derive(Args, Debug, Clone)]
pub struct WorkersTlsArgs {
    /// Reach the workers over TLS: the CA (PEM) that signed their certificates
    #[arg(long, value_name = "PEM")]
    pub workers_tls_ca: Option<PathBuf>,
    /// This process's certificate chain (PEM), for workers started with --tls-client-ca
    #[arg(long, value_name = "PEM", requires_all = ["workers_tls_ca", "workers_tls_key"])]
    pub workers_tls_cert: Option<PathBuf>,
    /// Its private key (PEM)
    #[arg(long, value_name = "PEM", requires = "workers_tls_cert")]
    pub workers_tls_key: Option<PathBuf>,
}

/// `sluice connect`.
#[derive(Args, Debug)]
pub struct ConnectArgs {
    /// Where to listen (host:port; port 0 picks a free one and prints it)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:15002")]
    pub listen: String,
    /// The Python interpreter for foreachBatch workers (default: $PYSPARK_PYTHON, else python3);
    /// it needs pyspark-client installed
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<String>,
    /// Run every query's batches on these workers (host:port,...; each a `sluice worker`), as
    /// the conf sluice.distributed.workers, which a session's own value overrides
    #[arg(long, value_name = "HOST:PORT,...")]
    pub workers: Option<String>,
    #[command(flatten)]
    pub workers_tls: WorkersTlsArgs,
    /// Stop (as on SIGTERM) when standard input reaches its end: a parent that holds the
    /// server's stdin as a pipe stops it by exiting, however it exits (the Python package's
    /// `SparkConnectServer` starts the server so)
    #[arg(long)]
    pub stop_on_stdin_close: bool,
    /// Serve a live dashboard of every session's queries at ADDR, and their metrics at
    /// /metrics (host:port, or a port on 127.0.0.1; port 0 picks one and the address is
    /// printed). An address other than loopback (e.g. 0.0.0.0:4040) needs --ui-token
    #[arg(long, value_name = "ADDR")]
    pub ui: Option<String>,
    /// The token every dashboard request must carry (Authorization: Bearer TOKEN, or open
    /// http://HOST:PORT/?token=TOKEN); default: $SLUICE_UI_TOKEN
    #[arg(long, value_name = "TOKEN", requires = "ui")]
    pub ui_token: Option<String>,
    #[command(flatten)]
    pub security: ConnectSecurityArgs,
}

/// `sluice connect`'s access and limits (`sluice_connect::ServerConfig`).
#[derive(Args, Debug)]
pub struct ConnectSecurityArgs {
    /// The token every call must carry: clients connect with sc://HOST:PORT/;token=TOKEN
    /// (pyspark-client then uses TLS, so add ;use_ssl=true with --tls-cert, or on this machine
    /// use sc://localhost:PORT/;token=TOKEN without TLS); default: $SLUICE_CONNECT_TOKEN. An
    /// address other than loopback (e.g. 0.0.0.0:15002) needs one
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Serve TLS only, with this certificate chain (PEM; its names must include the host
    /// clients connect to); clients add ;use_ssl=true
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM)
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The largest request in bytes, as Spark's spark.connect.grpc.maxInboundMessageSize
    #[arg(long, value_name = "BYTES", default_value_t = 128 * 1024 * 1024)]
    pub max_message_size: usize,
    /// The deepest nesting of a request's messages (a chained DataFrame call such as withColumn
    /// nests two), as Spark's spark.connect.grpc.marshallerRecursionLimit; at most 8192
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_plan_depth: usize,
    /// Sessions open at once (a session lasts until the client's spark.stop(); at the limit, one
    /// idle for an hour with no active query makes room for a new one)
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub max_sessions: usize,
    /// Streaming queries active at once, across all sessions
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_queries: usize,
}

/// `sluice run`: a pipeline file, or a built-in pipeline.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The pipeline file to run (Spark SQL with Flink-style DDL; see examples/*.sql)
    #[arg(
        value_name = "PIPELINE.sql",
        required_unless_present = "pipeline",
        conflicts_with = "pipeline"
    )]
    pub file: Option<String>,
    /// A variable of the pipeline file: ${NAME} in its options (else the environment's NAME)
    #[arg(
        long = "set",
        value_name = "NAME=VALUE",
        value_parser = parse_variable,
        requires = "file"
    )]
    pub set: Vec<(String, String)>,
    /// What to show while the queries run: a status line per query on stderr (human), each
    /// StreamingQueryProgress as a JSON line on stdout (json), or nothing (none)
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value_t = status::ProgressMode::Human,
        ignore_case = true,
        requires = "file"
    )]
    pub progress: status::ProgressMode,
    /// Serve a live dashboard at ADDR (host:port, or a port on 127.0.0.1; port 0 picks one and
    /// the address is printed). An address other than loopback (e.g. 0.0.0.0:4040) needs
    /// --ui-token
    #[arg(long, value_name = "ADDR", requires = "file")]
    pub ui: Option<String>,
    /// The token every dashboard request must carry (Authorization: Bearer TOKEN, or open
    /// http://HOST:PORT/?token=TOKEN); default: $SLUICE_UI_TOKEN
    #[arg(long, value_name = "TOKEN", requires = "ui")]
    pub ui_token: Option<String>,
    /// Run the queries' batches on these workers (host:port,...; each a `sluice worker`), as the
    /// conf sluice.distributed.workers, which a pipeline's SET overrides
    #[arg(long, value_name = "HOST:PORT,...")]
    pub workers: Option<String>,
    #[command(flatten)]
    pub workers_tls: WorkersTlsArgs,

    /// A built-in pipeline over JSON files {"id": N, "ts": "...", "user": "..."} written to
    /// parquet (instead of a pipeline file)
    #[arg(
        long,
        value_enum,
        value_name = "NAME",
        requires_all = ["input", "output", "checkpoint"],
        help_heading = "Built-in pipelines"
    )]
    pub pipeline: Option<BuiltIn>,
    /// The built-in pipeline's input directory
    #[arg(
        long,
        value_name = "DIR",
        requires = "pipeline",
        help_heading = "Built-in pipelines"
    )]
    pub input: Option<String>,
    /// The built-in pipeline's output directory (parquet)
    #[arg(
        long,
        value_name = "DIR",
        requires = "pipeline",
        help_heading = "Built-in pipelines"
    )]
    pub output: Option<String>,
    /// The built-in pipeline's checkpoint directory
    #[arg(
        long,
        value_name = "DIR",
        requires = "pipeline",
        help_heading = "Built-in pipelines"
    )]
    pub checkpoint: Option<String>,
    /// Stop once caught up with the input (default: run until killed)
    #[arg(long, requires = "pipeline", help_heading = "Built-in pipelines")]
    pub available_now: bool,
    /// A session conf of the built-in pipeline (repeatable), e.g. `--conf
    /// spark.sql.streaming.stateStore.providerClass=...`; a pipeline file sets confs with SET
    #[arg(
        long = "conf",
        value_name = "KEY=VALUE",
        value_parser = parse_conf,
        requires = "pipeline",
        help_heading = "Built-in pipelines"
    )]
    pub conf: Vec<(String, String)>,
}

/// `--pipeline`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltIn {
    /// id, ts, user as they are
    FileToParquet,
    /// counts per user and 1-minute window (1-minute watermark), append mode
    WindowedCount,
}

/// `--set NAME=VALUE` (the name trimmed, the value as given).
fn parse_variable(s: &str) -> Result<(String, String), String> {
    parse_key_value(s, "--set name=value, e.g. --set input=/data/in")
}

/// `--conf KEY=VALUE` (the key trimmed, the value as given).
fn parse_conf(s: &str) -> Result<(String, String), String> {
    parse_key_value(s, "--conf key=value, e.g. --conf sluice.memory.limit=64m")
}

fn parse_key_value(s: &str, how: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?}: write {how}")),
    }
}

/// `sluice conformance`.
#[derive(Args, Debug)]
struct ConformanceArgs {
    /// Also run each scenario with restarts and crashes
    #[arg(long)]
    matrix: bool,
    /// Write a JSON report (summary and every scenario's outcome) to REPORT
    #[arg(long, value_name = "REPORT")]
    json: Option<PathBuf>,
    /// A session conf set in every scenario (repeatable), e.g. `--conf
    /// sluice.memory.limit=16m`; a scenario that sets the key itself keeps its own value
    #[arg(long = "conf", value_name = "KEY=VALUE", value_parser = parse_conf)]
    conf: Vec<(String, String)>,
    /// Scenario files or directories of them
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
}

/// mimalloc's `mi_option_arena_eager_commit` and `mi_option_purge_delay` (the 5th and 16th
/// entries of `mi_option_e` in mimalloc.h, v2 and v3; the Rust bindings do not name them).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // Memory bounded by sluice.memory.limit, not by the batch: mimalloc commits its arenas as
    // pages are used rather than whole up front (on Linux's overcommit it commits them eagerly,
    // and transparent huge pages then make untouched parts resident), and returns freed memory
    // to the OS 10 ms after it was freed (mimalloc v3's default is 1 s; before, Sluice kept it
    // for ever, which saved 0.26 s of system time in the windowed benchmark). Either way every
    // thread's high water stayed resident: one 140 MB batch under a 32 MiB budget peaked at
    // 157 MiB of anonymous memory, 78 MiB with these settings (debug build, the query of
    // crates/cli/tests/integration/memory.rs). The 10 ms hold what a batch freed in that
    // time: at its churn 10–30 MiB (release, that query now: 114–117 MiB peak, 82–90 MiB with
    // MIMALLOC_PURGE_DELAY=0, which costs ~0.1 s more system time in its 0.45 s; the memory
    // tests measure with 0). MIMALLOC_* variables in the environment win.
    let options = [
        (
            "MIMALLOC_ARENA_EAGER_COMMIT",
            MI_OPTION_ARENA_EAGER_COMMIT,
            0,
        ),
        ("MIMALLOC_PURGE_DELAY", MI_OPTION_PURGE_DELAY, 10),
    ];
    for (env, option, value) in options {
        if std::env::var_os(env).is_none() {
            // SAFETY: sets a process-wide allocator option; no allocation invariants involved.
            unsafe { libmimalloc_sys::mi_option_set(option, value) };
        }
    }
    // `--help`, `--version` and bad arguments exit here (0, 0, 2).
    let cli = Cli::parse();
    let log_format = match logger::LogFormat::resolve(cli.log_format) {
        Ok(f) => f,
        Err(e) => {
            status::print_line(&format!("error: {e}"));
            return ExitCode::from(2);
        }
    };
    let default_filter = match &cli.command {
        // A server nobody watches otherwise: its sessions and queries coming and going.
        Some(Command::Connect(_)) => logger::CONNECT_FILTER,
        _ => logger::DEFAULT_FILTER,
    };
    logger::install(default_filter, log_format);
    // Sink formats outside the engine, for every session of this process.
    #[cfg(feature = "delta")]
    sluice_delta::register();
    // Queries that name workers run their batches on them.
    #[cfg(feature = "distributed")]
    sluice_distributed::register();
    let (workers, tls) = match &cli.command {
        Some(Command::Run(args)) => (args.workers.as_deref(), Some(&args.workers_tls)),
        Some(Command::Connect(args)) => (args.workers.as_deref(), Some(&args.workers_tls)),
        Some(Command::Worker(args)) => (None, Some(&args.workers_tls)),
        _ => (None, None),
    };
    if let Some(workers) = workers {
        if let Err(e) = sluice::conf::set_default_distributed_workers(workers) {
            status::print_line(&format!("error: --workers: {e}"));
            return ExitCode::from(2);
        }
    }
    if let Some(Err(e)) = tls.map(workers_tls) {
        status::print_line(&format!("error: {e}"));
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Some(Command::Demo { dir }) => demo(dir),
        Some(Command::Run(args)) => match args.file.clone() {
            Some(file) => sql_pipeline::run(&file, args),
            None => run_pipeline(args),
        },
        Some(Command::Bench(args)) => bench::bench(args).map(|_| ExitCode::SUCCESS),
        Some(Command::Conformance(args)) => conformance(args),
        Some(Command::Checkpoint(c)) => inspect::checkpoint(c),
        Some(Command::State(c)) => inspect::state(c),
        Some(Command::Connect(args)) => connect(args),
        Some(Command::Worker(args)) => worker(args),
        None => {
            // Bare `sluice`: the help, as `sluice --help` prints it.
            let _ = <Cli as clap::CommandFactory>::command().print_help();
            return ExitCode::SUCCESS;
        }
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            status::print_line(&format!("error: {msg}"));
            ExitCode::from(2)
        }
    }
}

/// `sluice connect`: the Spark Connect server (built with the `connect` feature).
#[cfg(feature = "connect")]
fn connect(args: ConnectArgs) -> Result<ExitCode, String> {
    let security = args.security;
    let mut config = sluice_connect::ServerConfig {
        listen: args.listen,
        python: args.python,
        token: security
            .token
            .or_else(|| std::env::var(sluice_connect::auth::TOKEN_ENV).ok()),
        tls: security
            .tls_cert
            .zip(security.tls_key)
            .map(|(cert, key)| sluice_connect::TlsFiles { cert, key }),
        max_message_size: security.max_message_size,
        max_plan_depth: security.max_plan_depth,
        max_sessions: security.max_sessions,
        max_queries: security.max_queries,
        ..sluice_connect::ServerConfig::default()
    };
    if let Some(addr) = &args.ui {
        // Every session's queries on one dashboard. The flag, else the environment (which
        // keeps it out of `ps` listings).
        let token = args
            .ui_token
            .or_else(|| std::env::var("SLUICE_UI_TOKEN").ok());
        let dashboard = ui::start(addr, token.as_deref())?;
        config.listeners.push(dashboard);
    }
    let stdin_closed = args.stop_on_stdin_close;
    let shutdown = async move {
        if stdin_closed {
            tokio::select! {
                _ = sluice_connect::serve::shutdown_signal() => {}
                _ = stdin_end() => log::info!("standard input closed: stopping the server"),
            }
        } else {
            sluice_connect::serve::shutdown_signal().await
        }
    };
    let on_listening = |addr| {
        // One line on stdout, which scripts wait for (the port, when 0 was asked for).
        println!("Spark Connect server listening on sc://{addr}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
    };
    sluice_connect::serve_until(config, on_listening, shutdown).map_err(|e| e.message)?;
    Ok(ExitCode::SUCCESS)
}

/// Resolves when standard input reaches its end (or cannot be read): a thread of its own
/// blocks on the reads.
#[cfg(feature = "connect")]
async fn stdin_end() {
    let (ended, end) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("sluice-stdin".into())
        .spawn(move || {
            use std::io::Read;
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 256];
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = ended.send(());
        });
    match spawned {
        Ok(_) => {
            let _ = end.await;
        }
        // No thread to watch stdin: the server keeps to its signals.
        Err(_) => std::future::pending::<()>().await,
    }
}

/// `sluice connect` in a build without the server.
#[cfg(not(feature = "connect"))]
fn connect(args: ConnectArgs) -> Result<ExitCode, String> {
    let _ = args;
    Err(
        "this sluice was built without the Spark Connect server (a lean build, \
         --no-default-features); build it with the default features: `cargo build -p \
         sluice-cli`, or `pip install` the sluice wheel"
            .to_string(),
    )
}

/// `sluice worker`: a datafusion-distributed worker (built with the `distributed` feature).
#[cfg(feature = "distributed")]
fn worker(args: WorkerArgs) -> Result<ExitCode, String> {
    use std::net::ToSocketAddrs;
    let listen = args
        .listen
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("--listen {}: not a host:port", args.listen))?;
    let tls = args.tls_cert.map(|cert| sluice_distributed::WorkerTls {
        cert,
        key: args.tls_key.unwrap_or_default(),
        client_ca: args.tls_client_ca,
    });
    sluice_distributed::worker::serve(listen, tls.as_ref(), |addr| {
        // One line on stdout, which scripts wait for (the port, when 0 was asked for).
        println!("Sluice worker listening on {addr}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
    })
    .map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

/// `--workers-tls-*`: this process reaches its workers over TLS.
#[cfg(feature = "distributed")]
fn workers_tls(args: &WorkersTlsArgs) -> Result<(), String> {
    let Some(ca) = &args.workers_tls_ca else {
        return Ok(());
    };
    sluice_distributed::use_tls(&sluice_distributed::DriverTls {
        ca: ca.clone(),
        cert: args.workers_tls_cert.clone(),
        key: args.workers_tls_key.clone(),
    })
    .map_err(|e| e.to_string())
}

/// `--workers-tls-*` in a build without workers.
#[cfg(not(feature = "distributed"))]
fn workers_tls(args: &WorkersTlsArgs) -> Result<(), String> {
    match args.workers_tls_ca {
        None => Ok(()),
        Some(_) => Err(
            "--workers-tls-ca: this sluice was built without workers (a lean build, \
             --no-default-features); build it with the default features: `cargo build -p \
             sluice-cli`"
                .to_string(),
        ),
    }
}

/// `sluice worker` in a build without workers.
#[cfg(not(feature = "distributed"))]
fn worker(args: WorkerArgs) -> Result<ExitCode, String> {
    let _ = args;
    Err(
        "this sluice was built without workers (a lean build, --no-default-features); \
         build it with the default features: `cargo build -p sluice-cli`"
            .to_string(),
    )
}

const DEMO_FILES: [(&str, &str); 3] = [
    (
        "batch1.json",
        r#"{"event_time": "2026-02-14T10:00:05", "user": "alice", "action": "buy",  "amount": 250.0}
{"event_time": "2026-02-14T10:00:12", "user": "bob",   "action": "buy",  "amount": 5.0}
{"event_time": "2026-02-14T10:00:31", "user": "alice", "action": "buy",  "amount": 120.0}
"#,
    ),
    (
        "batch2.json",
        r#"{"event_time": "2026-02-14T10:01:02", "user": "carol", "action": "cart", "amount": 42.5}
{"event_time": "2026-02-14T10:01:09", "user": "dave",  "action": "view", "amount": 0.0}
"#,
    ),
    (
        "batch3.json",
        r#"{"event_time": "2026-02-14T10:02:40", "user": "bob",   "action": "buy",  "amount": 18.0}
{"event_time": "2026-02-14T10:02:41", "user": "erin",  "action": "buy",  "amount": 
"#,
    ),
];

fn demo(dir: Option<PathBuf>) -> Result<ExitCode, String> {
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("sluice-demo-{}", std::process::id()))
    });
    let input = dir.join("stream_in");
    std::fs::create_dir_all(&input).map_err(|e| format!("{}: {e}", input.display()))?;
    for (i, (name, body)) in DEMO_FILES.iter().enumerate() {
        let path = input.join(name);
        std::fs::write(&path, body).map_err(|e| format!("{}: {e}", path.display()))?;
        // Distinct modification times keep the files in order.
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(60 - i as u64);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(t))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!(
        "input: {} (3 JSON files; the last one ends in a half-written line)",
        input.display()
    );

    let run = || -> sluice::Result<()> {
        let session = Session::builder().shuffle_partitions(2).build()?;
        let events = session
            .read_stream()
            .format("json")
            .schema("event_time TIMESTAMP, user STRING, action STRING, amount DOUBLE")?
            .option("maxFilesPerTrigger", "1")
            .load(input.display().to_string())?;
        let big =
            events
                .filter(col("amount").gt(lit(10.0)))?
                .select(["event_time", "user", "amount"])?;

        let console = big
            .write_stream()
            .output_mode(OutputMode::Append)
            .format("console")
            .option("truncate", "false")
            .trigger(Trigger::AvailableNow)
            .start()?;
        console.await_termination()?;

        let out = dir.join("stream_out");
        let checkpoint = dir.join("checkpoint");
        let parquet = big
            .write_stream()
            .format("parquet")
            .option("path", out.display())
            .option("checkpointLocation", checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()?;
        parquet.await_termination()?;
        let rows = session
            .read()
            .format("parquet")
            .load(out.display().to_string())?
            .count()?;
        println!(
            "parquet sink: {} holds {rows} committed rows; checkpoint: {}",
            out.display(),
            checkpoint.display()
        );
        if let Some(p) = parquet.last_progress() {
            println!("last progress:\n{}", p.json());
        }
        Ok(())
    };
    run().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

fn conformance(args: ConformanceArgs) -> Result<ExitCode, String> {
    let ConformanceArgs {
        matrix,
        json: json_out,
        conf,
        paths,
    } = args;
    let variants: &[sluice_conformance::Variant] = if matrix {
        &sluice_conformance::Variant::MATRIX
    } else {
        &[sluice_conformance::Variant::Plain]
    };
    let outcomes = sluice_conformance::run_paths_with(&paths, variants, &conf, true)?;
    let summary = sluice_conformance::summary_line(&outcomes);
    if let Some(out) = json_out {
        let report = serde_json::json!({ "summary": summary, "scenarios": outcomes });
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    println!("{summary}");
    Ok(if outcomes.iter().all(|o| o.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `sluice run --pipeline ...`: a built-in pipeline over JSON files
/// `{"id": N, "ts": "...", "user": "..."}`, running until killed (or, with `--available-now`,
/// until it has caught up). Used by the process-level chaos test, which kills it with SIGKILL
/// at random moments. (`sluice run FILE.sql` is `sql_pipeline.rs`.)
fn run_pipeline(args: RunArgs) -> Result<ExitCode, String> {
    // clap requires all three with --pipeline.
    let (Some(pipeline), Some(input), Some(output), Some(checkpoint)) =
        (args.pipeline, args.input, args.output, args.checkpoint)
    else {
        return Err("run needs --pipeline, --input, --output and --checkpoint".into());
    };
    let available_now = args.available_now;
    let confs = args.conf;
    let run = || -> sluice::Result<()> {
        let mut builder = Session::builder().shuffle_partitions(2);
        for (k, v) in &confs {
            builder = builder.config(k, v);
        }
        let session = builder.build()?;
        let events = session
            .read_stream()
            .format("json")
            .schema("id BIGINT, ts TIMESTAMP, user STRING")?
            .option("maxFilesPerTrigger", "2")
            .load(&input)?;
        let frame = match pipeline {
            BuiltIn::FileToParquet => events.select(["id", "ts", "user"])?,
            BuiltIn::WindowedCount => events
                .with_watermark("ts", "1 minute")?
                .group_by([sluice::window(col("ts"), "1 minute"), col("user")])
                .count()?
                .select_sql(["window.start AS window_start", "user", "count"])?,
        };
        let q = frame
            .write_stream()
            .output_mode(OutputMode::Append)
            .format("parquet")
            .option("path", &output)
            .option("checkpointLocation", &checkpoint)
            .trigger(if available_now {
                Trigger::AvailableNow
            } else {
                Trigger::default()
            })
            .start()?;
        q.await_termination()
    };
    run().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn both_forms_of_run_parse() {
        let cli = Cli::try_parse_from(["sluice", "run", "p.sql", "--set", "a= b=c", "--set=x=1"])
            .expect("a pipeline file with variables");
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run");
        };
        assert_eq!(run.file.as_deref(), Some("p.sql"));
        assert_eq!(
            run.set,
            vec![("a".into(), " b=c".into()), ("x".into(), "1".into())]
        );
        assert_eq!(run.progress, status::ProgressMode::Human);
        let cli = Cli::try_parse_from([
            "sluice",
            "run",
            "--pipeline",
            "windowed-count",
            "--input",
            "i",
            "--output",
            "o",
            "--checkpoint",
            "c",
        ])
        .expect("a built-in pipeline");
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run");
        };
        assert_eq!(run.pipeline, Some(BuiltIn::WindowedCount));
        assert!(!run.available_now);
        // A built-in pipeline needs all three directories; a file takes no --input.
        assert!(Cli::try_parse_from(["sluice", "run", "--pipeline", "file-to-parquet"]).is_err());
        assert!(Cli::try_parse_from(["sluice", "run", "p.sql", "--input", "i"]).is_err());
        assert!(Cli::try_parse_from(["sluice", "run", "p.sql", "--set", "novalue"]).is_err());
        for (mode, want) in [
            ("JSON", status::ProgressMode::Json),
            ("text", status::ProgressMode::Human),
            ("off", status::ProgressMode::None),
        ] {
            let cli = Cli::try_parse_from(["sluice", "run", "p.sql", "--progress", mode])
                .expect("a progress mode");
            let Some(Command::Run(run)) = cli.command else {
                panic!("not run");
            };
            assert_eq!(run.progress, want, "{mode}");
        }
        assert!(Cli::try_parse_from(["sluice", "run", "p.sql", "--progress", "xml"]).is_err());
    }
}
