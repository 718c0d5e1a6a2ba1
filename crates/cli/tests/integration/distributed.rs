//! A query on a cluster (feature `distributed`): three `sluice worker` processes on 127.0.0.1,
//! the query's driver in this process, its checkpoint on the local S3 server (`scripts/s3-server
//! start`). A windowed aggregation, a stream-stream join and a deduplication give the same rows
//! on the workers as in one process, each operator's state partitions on the workers (one each),
//! plainly and with a worker SIGKILLed at a random moment (the batch it was in runs again on the
//! other two, which take its state partitions: every row once). The seed of the moment is
//! printed; replay with `SLUICE_CHAOS_SEED=<seed>`. A worker started between runs takes its share
//! of the partitions from the checkpoint. The test names contain `s3`. Both conformance corpora,
//! run on two workers, pass as they pass in one process.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use sluice::{Session, StreamFrame, Trigger};

use crate::support::{add_file, chaos_rng, endpoint, new_bucket, S3A};

/// A `sluice worker` process, killed when dropped; its log lines (RUST_LOG=info) kept.
struct Worker {
    child: Child,
    address: String,
    log: Arc<Mutex<String>>,
}

impl Worker {
    fn start() -> Worker {
        Worker::start_at("127.0.0.1:0")
    }

    fn start_at(listen: &str) -> Worker {
        Worker::start_with(&["--listen", listen])
    }

    /// A worker started with `args` after `sluice worker`.
    fn start_with(args: &[&str]) -> Worker {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command.arg("worker").args(args);
        Worker::spawn(command)
    }

    /// A worker `command` starts, which says on stdout where it listens.
    fn spawn(mut command: Command) -> Worker {
        let mut child = command
            .env("RUST_LOG", "sluice_distributed=info")
            .env(
                crate::memory::MEASURED_ALLOCATOR.0,
                crate::memory::MEASURED_ALLOCATOR.1,
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let address = loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap() == 0 {
                panic!("the worker said {said:?}");
            }
            if let Some(a) = line.trim().strip_prefix("Sluice worker listening on ") {
                break a.to_string();
            }
            said.push_str(&line);
        };
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Worker {
            child,
            address,
            log,
        }
    }

    /// How many tasks the worker logged it ran.
    fn tasks(&self) -> usize {
        self.log.lock().unwrap().matches("running a task").count()
    }

    /// How many of them were a source's read (files decoded, Kafka ranges read on the worker).
    fn reads(&self) -> usize {
        self.log
            .lock()
            .unwrap()
            .matches("running a task: reading")
            .count()
    }

    /// How many of its reads routed their rows to the owners of a stateful operator's state
    /// partitions themselves (not through the driver).
    fn routed(&self) -> usize {
        self.log
            .lock()
            .unwrap()
            .matches("the read routes its rows")
            .count()
    }

    /// How many of its reads ran the driver's plan node `node` over their rows.
    fn reads_under(&self, node: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .lines()
            .filter(|l| l.contains("the read runs under") && l.contains(node))
            .count()
    }

    /// How many of them were a stateful operator's partitions.
    fn state_tasks(&self) -> usize {
        self.log
            .lock()
            .unwrap()
            .matches("running a task: stateful operator")
            .count()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A session whose checkpoints go to the local S3 server, on `workers` when given.
fn session(workers: Option<&[Worker]>) -> Session {
    let list: Option<Vec<&str>> = workers.map(|w| w.iter().map(|w| w.address.as_str()).collect());
    session_on(list.map(|l| l.join(",")))
}

/// A session whose checkpoints go to the local S3 server, on the workers of `list` when given.
fn session_on(list: Option<String>) -> Session {
    let mut b = Session::builder()
        .shuffle_partitions(3)
        .config("spark.hadoop.fs.s3a.endpoint", endpoint());
    for (k, v) in S3A {
        b = b.config(format!("spark.hadoop.{k}"), v);
    }
    if let Some(list) = list {
        b = b.config("sluice.distributed.workers", list);
    }
    b.build().unwrap()
}

/// Six files of 120 events `{id, user, ts}`: ids repeat once (two rows each), users `u0`..`u4`,
/// event times moving ten minutes per file.
fn write_events(dir: &Path) {
    write_files(dir, 0..6);
}

/// The files `ks` of [`write_events`].
fn write_files(dir: &Path, ks: std::ops::Range<u64>) {
    for k in ks {
        let body: String = (0..120u64)
            .map(|j| {
                let (id, minute) = ((k * 120 + j) / 2, k * 10 + j % 10);
                let (h, m) = (10 + minute / 60, minute % 60);
                format!(
                    "{{\"id\": {id}, \"user\": \"u{}\", \"ts\": \"2026-09-15T{h:02}:{m:02}:00Z\"}}\n",
                    j % 5
                )
            })
            .collect();
        add_file(dir, &format!("{k}.json"), &body, k);
    }
}

/// One file per batch of `dir`, watermarked by `ts` (10 minutes), as the view `name`.
fn events(s: &Session, dir: &Path, name: &str) -> StreamFrame {
    let frame = s
        .read_stream()
        .format("json")
        .schema("id BIGINT, user STRING, ts TIMESTAMP")
        .unwrap()
        .option("maxFilesPerTrigger", 1)
        .load(dir.display().to_string())
        .unwrap()
        .with_watermark("ts", "10 minutes")
        .unwrap();
    frame.create_or_replace_temp_view(name).unwrap();
    frame
}

#[derive(Clone, Copy, Debug)]
enum Query {
    Windowed,
    Join,
    Dedup,
}

fn frame(s: &Session, q: Query, input: &Path) -> StreamFrame {
    let ev = events(s, input, "ev");
    match q {
        Query::Windowed => s
            .sql(
                "SELECT window.start AS start, user, count(*) AS n, sum(id) AS ids FROM ev \
                 WHERE id % 7 <> 3 GROUP BY window(ts, '10 minutes'), user",
            )
            .unwrap(),
        Query::Join => {
            events(s, input, "ev2");
            s.sql(
                "SELECT a.id, a.user, b.ts FROM ev a JOIN ev2 b ON a.id = b.id + 1 \
                 AND b.ts BETWEEN a.ts - INTERVAL 20 MINUTES AND a.ts",
            )
            .unwrap()
        }
        Query::Dedup => ev.drop_duplicates(["id"]).unwrap(),
    }
}

/// Every row a batch gave, as text, sorted.
fn rows_of(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &FormatOptions::default()).unwrap())
            .collect();
        for i in 0..b.num_rows() {
            out.push(
                fmts.iter()
                    .map(|f| f.value(i).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    out.sort();
    out
}

/// What a run gave: its rows (sorted), how many batches ran, and the tasks its progress says
/// each worker ran (`workers`), by address.
#[derive(Debug)]
struct Ran {
    rows: Vec<String>,
    batches: usize,
    tasks: BTreeMap<String, u64>,
    /// Each batch's state stores of its stateful operator (`numStateStoreInstances`).
    stores: Vec<i64>,
    /// The input rows of every batch (`numInputRows`).
    input_rows: i64,
    /// Each batch's `eventTime` (min, max, avg, watermark).
    event_times: Vec<BTreeMap<String, String>>,
    /// Each batch's rows its stateful operator dropped as late (`numRowsDroppedByWatermark`).
    dropped: Vec<i64>,
}

/// Runs `q` over the events to its end (available now) with its checkpoint in a new folder of
/// `bucket`. `kill` SIGKILLs that worker after that many milliseconds.
fn run(
    q: Query,
    input: &Path,
    bucket: &str,
    workers: Option<&mut [Worker]>,
    kill: Option<(usize, u64)>,
) -> Ran {
    let s = session(workers.as_deref());
    let checkpoint = format!("s3a://{bucket}/ck-{q:?}-{}", rand_suffix());
    let (query, out) = start(&s, q, input, &checkpoint);
    if let (Some(workers), Some((victim, after_ms))) = (workers, kill) {
        std::thread::sleep(Duration::from_millis(after_ms));
        let w = &mut workers[victim];
        w.child.kill().unwrap();
        w.child.wait().unwrap();
    }
    ran(query, &out)
}

/// Starts `q` over `input` to its end (available now) with its checkpoint at `checkpoint`; its
/// rows go to the vector returned.
fn start(
    s: &Session,
    q: Query,
    input: &Path,
    checkpoint: &str,
) -> (sluice::StreamingQuery, Arc<Mutex<Vec<RecordBatch>>>) {
    capture(frame(s, q, input), checkpoint)
}

/// Starts `frame` to its end (available now), appending, with its checkpoint at `checkpoint`;
/// its rows go to the vector returned.
fn capture(
    frame: StreamFrame,
    checkpoint: &str,
) -> (sluice::StreamingQuery, Arc<Mutex<Vec<RecordBatch>>>) {
    capture_in(frame, checkpoint, sluice::OutputMode::Append)
}

/// [`capture`] in output mode `mode`.
fn capture_in(
    frame: StreamFrame,
    checkpoint: &str,
    mode: sluice::OutputMode,
) -> (sluice::StreamingQuery, Arc<Mutex<Vec<RecordBatch>>>) {
    let out: Arc<Mutex<Vec<RecordBatch>>> = Arc::default();
    let sink = out.clone();
    let query = frame
        .write_stream()
        .option("checkpointLocation", checkpoint)
        .output_mode(mode)
        .trigger(Trigger::AvailableNow)
        .foreach_batch(move |data, _| {
            sink.lock()
                .unwrap()
                .extend(data.partitions.iter().flatten().cloned());
            Ok(())
        })
        .start()
        .unwrap();
    (query, out)
}

/// What `query` gave once it ended.
fn ran(query: sluice::StreamingQuery, out: &Mutex<Vec<RecordBatch>>) -> Ran {
    query.await_termination().unwrap();
    ran_of(&query, out)
}

/// What `query`, which ended, gave.
fn ran_of(query: &sluice::StreamingQuery, out: &Mutex<Vec<RecordBatch>>) -> Ran {
    let progress = query.recent_progress();
    let mut tasks = BTreeMap::new();
    for w in progress.iter().flat_map(|p| &p.workers) {
        *tasks.entry(w.address.clone()).or_default() += w.num_tasks;
    }
    let rows = rows_of(&out.lock().unwrap());
    Ran {
        rows,
        batches: progress.len(),
        tasks,
        stores: progress
            .iter()
            .flat_map(|p| p.state_operators.first())
            .map(|o| o.num_state_store_instances)
            .collect(),
        input_rows: progress.iter().map(|p| p.num_input_rows).sum(),
        event_times: progress.iter().map(|p| p.event_time.clone()).collect(),
        dropped: progress
            .iter()
            .flat_map(|p| p.state_operators.first())
            .map(|o| o.num_rows_dropped_by_watermark)
            .collect(),
    }
}

fn rand_suffix() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn three_workers() -> Vec<Worker> {
    sluice_distributed::register();
    (0..3).map(|_| Worker::start()).collect()
}

#[test]
fn s3_windowed_join_and_dedup_on_three_workers_give_the_rows_of_one_process() {
    let bucket = new_bucket("cluster");
    let input = tempfile::tempdir().unwrap();
    write_events(input.path());
    // a last file of rows later than the watermark, which the operators drop
    let late: String = (0..30u64)
        .map(|j| {
            format!(
                "{{\"id\": {}, \"user\": \"u{}\", \"ts\": \"2026-09-15T10:{:02}:00Z\"}}\n",
                1000 + j,
                j % 5,
                j % 10
            )
        })
        .collect();
    add_file(input.path(), "6.json", &late, 6);
    let mut workers = three_workers();
    for q in [Query::Windowed, Query::Join, Query::Dedup] {
        let alone = run(q, input.path(), &bucket, None, None);
        assert!(
            !alone.rows.is_empty() && alone.batches >= 6 && alone.tasks.is_empty(),
            "{q:?}: {} batches",
            alone.batches
        );
        let before: Vec<usize> = workers.iter().map(Worker::tasks).collect();
        let state_before: Vec<usize> = workers.iter().map(Worker::state_tasks).collect();
        let reads_before: Vec<usize> = workers.iter().map(Worker::reads).collect();
        let routed_before: usize = workers.iter().map(Worker::routed).sum();
        let under = |node: &str| workers.iter().map(|w| w.reads_under(node)).sum::<usize>();
        let (watermarks_before, filters_before) =
            (under("EventTimeWatermarkExec"), under("FilterExec"));
        let cluster = run(q, input.path(), &bucket, Some(&mut workers), None);
        assert_eq!(cluster.rows, alone.rows, "{q:?} on three workers");
        // the files were decoded on the workers, and counted as in one process
        assert_eq!(cluster.input_rows, alone.input_rows, "{q:?}: numInputRows");
        // the watermark nodes ran on the workers with the reads (and the windowed query's
        // filter): their event-time statistics, sent back with the reads' counts, make each
        // batch's eventTime and watermark those of one process
        assert_eq!(cluster.event_times, alone.event_times, "{q:?}: eventTime");
        // the late rows dropped as in one process (the aggregation drops them where they
        // were read, and the reads count them)
        assert_eq!(
            cluster.dropped, alone.dropped,
            "{q:?}: numRowsDroppedByWatermark"
        );
        if let Query::Windowed = q {
            assert!(alone.dropped.iter().sum::<i64>() > 0, "{:?}", alone.dropped);
        }
        // each read routed its rows to the state partitions' owners itself: they crossed the
        // wire once, not through the driver
        let routed = workers.iter().map(Worker::routed).sum::<usize>() - routed_before;
        assert!(routed >= 7, "{q:?}: {routed} reads routed their rows");
        assert!(
            alone
                .event_times
                .iter()
                .any(|e| e.contains_key("watermark")),
            "{:?}",
            alone.event_times
        );
        let under = |node: &str| workers.iter().map(|w| w.reads_under(node)).sum::<usize>();
        assert!(
            under("EventTimeWatermarkExec") - watermarks_before >= 6,
            "{q:?}: the watermark node ran with {} reads",
            under("EventTimeWatermarkExec") - watermarks_before
        );
        if let Query::Windowed = q {
            assert!(
                under("FilterExec") - filters_before >= 6,
                "{q:?}: the filter ran with {} reads",
                under("FilterExec") - filters_before
            );
        }
        let reads: usize = workers
            .iter()
            .zip(&reads_before)
            .map(|(w, b)| w.reads() - b)
            .sum();
        assert!(
            reads >= 6,
            "{q:?}: {reads} reads of the 6 files on the workers"
        );
        // the operator's state: a partition on each worker, every batch
        for (w, b) in workers.iter().zip(&state_before) {
            assert!(
                w.state_tasks() >= *b + cluster.batches,
                "{q:?}: {} ran {} of {} batches' state",
                w.address,
                w.state_tasks() - b,
                cluster.batches
            );
        }
        assert!(
            cluster.stores.iter().all(|n| *n == 3),
            "{:?}",
            cluster.stores
        );
        // the batches' work ran on the workers, on more than one of them, and the progress
        // counts each worker's tasks as the worker ran them
        let ran: BTreeMap<String, u64> = workers
            .iter()
            .zip(&before)
            .filter(|(w, b)| w.tasks() > **b)
            .map(|(w, b)| (w.address.clone(), (w.tasks() - b) as u64))
            .collect();
        assert!(ran.len() >= 2, "{q:?}: {ran:?}");
        assert_eq!(cluster.tasks, ran, "{q:?}: progress `workers`");
    }
}

/// One batch many times `sluice.memory.limit` on three workers (`sluice run`, the windowed
/// aggregation of the memory tests): the workers decode the files and stream their rows to the
/// driver as the stage pulls them, the driver routes them a chunk at a time to the workers that
/// own the state, which take them as they come; neither the driver nor a worker holds the batch.
#[test]
fn a_batch_many_times_the_memory_limit_runs_on_three_workers_within_it() {
    let workers = three_workers();
    let tmp = tempfile::tempdir().unwrap();
    let list: Vec<&str> = workers.iter().map(|w| w.address.as_str()).collect();
    // three state partitions: one on each worker
    let set = format!(
        "SET sluice.distributed.workers = '{}';\nSET spark.sql.shuffle.partitions = 3;\n",
        list.join(",")
    );
    let (pipeline, rows) = crate::memory::windowed_pipeline(tmp.path(), &set);
    let pids: Vec<u32> = workers.iter().map(|w| w.child.id()).collect();
    let (driver, on_workers) = crate::memory::run_measured_beside(&pipeline, &pids);
    crate::memory::check_windowed(tmp.path(), rows);
    let input = tmp.path().join("in");
    crate::memory::assert_within_budget("the driver of a windowed aggregation", &input, driver);
    for (w, anon) in workers.iter().zip(on_workers) {
        eprintln!(
            "worker {}: peak anonymous {} MiB",
            w.address,
            crate::memory::mib(anon)
        );
        assert!(
            w.reads() >= 1 && w.state_tasks() >= 1,
            "{}: {} reads, {} state tasks\n{}",
            w.address,
            w.reads(),
            w.state_tasks(),
            w.log.lock().unwrap()
        );
        assert!(
            anon < 112 << 20,
            "worker {} held {} MiB of anonymous memory under a 32 MiB budget",
            w.address,
            crate::memory::mib(anon)
        );
    }
}

/// A `rate-micro-batch` source's batch is generated on the workers (a run of its values each,
/// as Spark's executors generate a rate source's partitions), the filter over it running there
/// too: the rows and `numInputRows` of one process.
#[test]
fn a_rate_sources_batch_is_generated_on_the_workers_with_the_plan_over_it() {
    sluice_distributed::register();
    let bucket = new_bucket("rate");
    let workers: Vec<Worker> = (0..2).map(|_| Worker::start()).collect();
    let run = |on: Option<&[Worker]>| {
        let s = session(on);
        let frame = s
            .read_stream()
            .format("rate-micro-batch")
            .option("rowsPerBatch", "200000")
            .option("startTimestamp", "1789473600000")
            .load_source()
            .unwrap()
            .filter_sql("value % 1000 = 7")
            .unwrap();
        let (query, out) = capture(frame, &format!("s3a://{bucket}/rate-{}", rand_suffix()));
        ran(query, &out)
    };
    let alone = run(None);
    assert_eq!((alone.rows.len(), alone.input_rows), (200, 200_000));
    let cluster = run(Some(&workers));
    assert_eq!(cluster.rows, alone.rows);
    assert_eq!(cluster.input_rows, alone.input_rows, "numInputRows");
    for w in &workers {
        assert!(
            w.reads() >= 1 && w.reads_under("FilterExec") >= 1,
            "{}: {} reads, {} with the filter\n{}",
            w.address,
            w.reads(),
            w.reads_under("FilterExec"),
            w.log.lock().unwrap()
        );
    }
}

/// A worker started between two runs of a query takes state partitions in the next batch: it
/// loads them from the checkpoint the others committed, and the rows are those of one process.
#[test]
fn s3_a_worker_added_between_batches_takes_state_partitions_from_the_checkpoint() {
    sluice_distributed::register();
    let bucket = new_bucket("cluster-grow");
    // where the third worker will listen: a free port now
    let late = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let workers: Vec<Worker> = (0..2).map(|_| Worker::start()).collect();
    let list = format!("{},{},{late}", workers[0].address, workers[1].address);
    // the first three files, a run, the last three, a second run on the same checkpoint
    let two_runs = |list: Option<&str>, late_worker: &mut Option<Worker>| {
        let input = tempfile::tempdir().unwrap();
        write_files(input.path(), 0..3);
        let checkpoint = format!("s3a://{bucket}/ck-grow-{}", rand_suffix());
        let s = session_on(list.map(String::from));
        let (q, out) = start(&s, Query::Windowed, input.path(), &checkpoint);
        let one = ran(q, &out);
        if list.is_some() {
            *late_worker = Some(Worker::start_at(&late));
        }
        write_files(input.path(), 3..6);
        let s = session_on(list.map(String::from));
        let (q, out) = start(&s, Query::Windowed, input.path(), &checkpoint);
        let two = ran(q, &out);
        (one, two)
    };
    let (alone_one, alone_two) = two_runs(None, &mut None);
    let mut third = None;
    let (one, two) = two_runs(Some(&list), &mut third);
    let third = third.unwrap();
    assert_eq!(one.rows, alone_one.rows, "before the third worker");
    assert_eq!(two.rows, alone_two.rows, "with the third worker");
    assert!(!two.rows.is_empty());
    assert!(
        third.state_tasks() >= two.batches,
        "the third worker ran {} of {} batches' state",
        third.state_tasks(),
        two.batches
    );
    assert!(one.stores.iter().chain(&two.stores).all(|n| *n == 3));
}

/// A Kafka source on three workers: each batch's partitions' offset ranges are read by the
/// workers (a consumer each, from the source's options), the rows those of one process.
#[test]
fn s3_kafka_ranges_read_on_three_workers_give_the_rows_of_one_process() {
    use crate::pipelines::kafka_helpers::{bootstrap, topic_with};
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let bootstrap = bootstrap();
    let topic = topic_with("cluster-kafka", 3);
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    for i in 0..300u32 {
        let (key, value) = (format!("k{}", i % 7), format!("v{i}"));
        producer
            .send(
                BaseRecord::to(&topic)
                    .key(&key)
                    .payload(&value)
                    .partition((i % 3) as i32),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let bucket = new_bucket("cluster-kafka");
    let mut workers = three_workers();
    let run_on = |list: Option<String>| {
        let s = session_on(list);
        s.read_stream()
            .format("kafka")
            .option("kafka.bootstrap.servers", &bootstrap)
            .option("subscribe", &topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 120)
            .load_source()
            .unwrap()
            .create_or_replace_temp_view("kev")
            .unwrap();
        let frame = s
            .sql(
                "SELECT CAST(key AS STRING) AS k, CAST(value AS STRING) AS v, partition, offset \
                 FROM kev",
            )
            .unwrap()
            .drop_duplicates(["v"])
            .unwrap();
        let checkpoint = format!("s3a://{bucket}/ck-kafka-{}", rand_suffix());
        let (query, out) = capture(frame, &checkpoint);
        ran(query, &out)
    };
    let alone = run_on(None);
    assert_eq!(alone.rows.len(), 300);
    let before: Vec<usize> = workers.iter().map(Worker::reads).collect();
    let list: Vec<&str> = workers.iter().map(|w| w.address.as_str()).collect();
    let cluster = run_on(Some(list.join(",")));
    assert_eq!(cluster.rows, alone.rows);
    assert_eq!(cluster.input_rows, 300);
    let read_on: Vec<usize> = workers
        .iter_mut()
        .zip(&before)
        .map(|(w, b)| w.reads() - b)
        .collect();
    assert!(
        read_on.iter().filter(|n| **n > 0).count() >= 2,
        "the ranges were read on the workers: {read_on:?}"
    );
}

#[test]
fn s3_a_worker_sigkilled_at_a_random_moment_loses_no_row_and_repeats_none() {
    let mut rng = chaos_rng();
    let seed = rng.0;
    let bucket = new_bucket("cluster-kill");
    let input = tempfile::tempdir().unwrap();
    write_events(input.path());
    for q in [Query::Windowed, Query::Join, Query::Dedup] {
        let alone = run(q, input.path(), &bucket, None, None).rows;
        let mut workers = three_workers();
        let victim = (rng.next() % 3) as usize;
        let after_ms = rng.next() % 400;
        let cluster = run(
            q,
            input.path(),
            &bucket,
            Some(&mut workers),
            Some((victim, after_ms)),
        )
        .rows;
        assert_eq!(
            cluster, alone,
            "{q:?}: worker {victim} killed after {after_ms} ms (seed {seed})"
        );
    }
}

#[test]
fn a_query_whose_workers_do_not_answer_fails_and_says_how_to_start_them() {
    sluice_distributed::register();
    let input = tempfile::tempdir().unwrap();
    write_events(input.path());
    let checkpoint = tempfile::tempdir().unwrap();
    // a port nothing listens on: bound, then closed
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = Session::builder()
        .config("sluice.distributed.workers", format!("127.0.0.1:{port}"))
        .build()
        .unwrap();
    let started = events(&s, input.path(), "ev")
        .write_stream()
        .option("checkpointLocation", checkpoint.path().display())
        .trigger(Trigger::AvailableNow)
        .format("noop")
        .start();
    // refused when the query is planned, or in its first batch
    let err = match started {
        Err(e) => e.to_string(),
        Ok(q) => q.await_termination().unwrap_err().to_string(),
    };
    assert!(
        err.contains("none of the workers") && err.contains("sluice worker --listen"),
        "{err}"
    );
}

#[test]
fn both_conformance_corpora_on_two_workers_pass_as_in_one_process() {
    sluice_distributed::register();
    let workers: Vec<Worker> = (0..2).map(|_| Worker::start()).collect();
    let list: Vec<&str> = workers.iter().map(|w| w.address.as_str()).collect();
    let conf = vec![("sluice.distributed.workers".to_string(), list.join(","))];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let public = std::env::var("SLUICE_CONFORMANCE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join("../../shared/conformance/scenarios"));
    let own = root.join("conformance/scenarios");
    let outcomes = sluice_conformance::run_paths_with(
        &[public, own],
        &[sluice_conformance::Variant::Plain],
        &conf,
        false,
    )
    .unwrap();
    assert!(outcomes.len() > 150, "{} scenarios", outcomes.len());
    let expected = sluice_conformance::expected_plain_failures();
    let wrong: Vec<String> = outcomes
        .iter()
        .filter(|o| o.passed == expected.contains_key(&o.name))
        .map(|o| format!("{}: {}", o.name, o.message.as_deref().unwrap_or("passed")))
        .collect();
    assert!(wrong.is_empty(), "on two workers:\n{}", wrong.join("\n"));
    // the scenarios' batches ran on both workers
    assert!(workers.iter().all(|w| w.tasks() > 0));
}

#[test]
fn a_continuous_query_on_workers_is_refused_and_says_how_to_run_it() {
    sluice_distributed::register();
    let checkpoint = tempfile::tempdir().unwrap();
    let s = Session::builder()
        .config("sluice.distributed.workers", "127.0.0.1:7078")
        .build()
        .unwrap();
    let started = s
        .read_stream()
        .format("rate")
        .load_source()
        .unwrap()
        .write_stream()
        .option("checkpointLocation", checkpoint.path().display())
        .trigger(Trigger::Continuous(Duration::from_millis(300)))
        .format("console")
        .start();
    let Err(err) = started else {
        panic!("a continuous query on workers started");
    };
    let err = err.to_string();
    assert!(
        err.contains("continuous query on workers") && err.contains("micro-batch trigger"),
        "{err}"
    );
}

/// `sluice run` of a pipeline file on two workers, named by `--workers` or by the pipeline's
/// own `SET`: the batches' tasks run on them and its progress (`--progress json`) says so.
#[test]
fn sluice_run_takes_its_workers_from_the_flag_or_from_a_pipeline_set() {
    let workers: Vec<Worker> = (0..2).map(|_| Worker::start()).collect();
    let list = format!("{},{}", workers[0].address, workers[1].address);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    for k in 0..3u64 {
        let body: String = (0..50u64)
            .map(|j| {
                format!(
                    "{{\"event_time\": \"2026-09-15T10:{:02}:00Z\", \"user\": \"u{}\", \
                     \"action\": \"buy\", \"amount\": {j}.5}}\n",
                    k * 10 + j % 10,
                    j % 4
                )
            })
            .collect();
        add_file(&input, &format!("{k}.json"), &body, k);
    }
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/windowed_to_parquet.sql");
    let with_set = dir.path().join("with_set.sql");
    std::fs::write(
        &with_set,
        format!(
            "SET 'sluice.distributed.workers' = '{list}';\n{}",
            std::fs::read_to_string(&example).unwrap()
        ),
    )
    .unwrap();
    for (name, pipeline, flag) in [("flag", &example, true), ("set", &with_set, false)] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.arg("run").arg(pipeline).args(["--progress", "json"]);
        for (k, v) in [
            ("input", input.clone()),
            ("output", dir.path().join(format!("out-{name}"))),
            ("checkpoint", dir.path().join(format!("ck-{name}"))),
        ] {
            c.arg("--set").arg(format!("{k}={}", v.display()));
        }
        c.args(["--set", "trigger=available-now"]);
        if flag {
            c.args(["--workers", &list]);
        }
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tasks: u64 = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .flat_map(|p| p["workers"].as_array().cloned().unwrap_or_default())
            .map(|w| w["numTasks"].as_u64().unwrap())
            .sum();
        assert!(tasks >= 3, "{name}: {tasks} tasks in\n{stdout}");
    }
    assert!(workers.iter().all(|w| w.tasks() > 0));
}

/// A Delta table's data files read on three workers (feature `delta`): six commits of a table
/// partitioned by user, three files a batch, deduplicated by id; the rows, `numInputRows` and
/// `numFilesRead` of one process, the files read on the workers.
#[cfg(feature = "delta")]
#[test]
fn a_delta_tables_files_read_on_three_workers_give_the_rows_of_one_process() {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let workers = three_workers();
    sluice_delta::register();
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("table").display().to_string();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("user", DataType::Utf8, true),
    ]));
    let options = std::collections::HashMap::from([
        ("path".to_string(), table.clone()),
        ("partitionBy".to_string(), "user".to_string()),
    ]);
    for commit in 0..6i64 {
        // ids repeat across commits (dropped by the query), users u0..u2: three files a commit
        let ids: Vec<i64> = (0..30).map(|j| commit * 20 + j).collect();
        let users: Vec<String> = ids.iter().map(|i| format!("u{}", i % 3)).collect();
        let rows = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(users)),
            ],
        )
        .unwrap();
        let data = sluice::BatchData {
            schema: schema.clone(),
            partitions: vec![vec![rows]],
        };
        assert!(sluice_delta::write_batch(&data, &options).unwrap());
    }
    let run = |on: Option<&[Worker]>| {
        let s = session(on);
        let frame = s
            .read_stream()
            .format("delta")
            .option("maxFilesPerTrigger", 3)
            .load(&table)
            .unwrap()
            .drop_duplicates(["id"])
            .unwrap();
        let checkpoint = tmp.path().join(format!("ck-{}", rand_suffix()));
        let (query, out) = capture(frame, &checkpoint.display().to_string());
        let ran = ran(query, &out);
        assert_eq!(ran.batches, 6, "three files a batch");
        (ran.rows, ran.input_rows)
    };
    let (alone_rows, alone_input) = run(None);
    assert_eq!(alone_input, 180, "every row of the table read once");
    assert_eq!(alone_rows.len(), 130, "each id once");
    let reads_before: usize = workers.iter().map(Worker::reads).sum();
    let (rows, input) = run(Some(&workers));
    assert_eq!(rows, alone_rows, "the rows of one process");
    assert_eq!(input, alone_input, "numInputRows");
    let reads: usize = workers.iter().map(Worker::reads).sum::<usize>() - reads_before;
    assert!(
        reads >= 6,
        "{reads} reads of the table's files on the workers"
    );
}

/// A CA, a worker certificate for 127.0.0.1 and a driver's client certificate, both signed by
/// the CA, made with `openssl` in `dir` (`ca.pem`, `worker.pem`/`.key`, `driver.pem`/`.key`).
fn certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        &["req", "-x509", "-days", "2", "-subj", "/CN=sluice test CA"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem"],
        &["-addext", "basicConstraints=critical,CA:TRUE"],
        &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
    ]
    .concat();
    openssl(&ca);
    for (name, ext) in [
        (
            "worker",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        (
            "driver",
            "subjectAltName=DNS:driver\nextendedKeyUsage=clientAuth\n",
        ),
    ] {
        let (key, csr, pem, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        std::fs::write(dir.join(&extfile), ext).unwrap();
        let subject = format!("/CN={name}");
        let req = [
            &["req", "-subj", &subject][..],
            &ec,
            &["-keyout", &key, "-out", &csr],
        ]
        .concat();
        openssl(&req);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &extfile,
            "-out",
            &pem,
        ]);
    }
}

/// `sluice run PIPELINE` with `args`: whether it succeeded, and its stderr.
fn sluice_run(pipeline: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(pipeline)
        .args(["--progress", "none"])
        .args(args)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Workers that serve TLS only, to drivers whose certificate their CA signed (mutual TLS): a
/// driver with the CA and its certificate runs the windowed aggregation on them (reads and state
/// there, every row counted once); one without TLS, or without a certificate, is refused.
#[test]
fn workers_over_mutual_tls_serve_only_drivers_their_ca_signed() {
    sluice_distributed::register();
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    certificates(&certs);
    let file = |name: &str| certs.join(name).display().to_string();
    // How a driver with its certificate reaches the workers; the workers reach each other
    // (rows routed to the state's owners) the same way.
    let (ca, cert, key) = (file("ca.pem"), file("driver.pem"), file("driver.key"));
    let client = [
        "--workers-tls-ca",
        &ca,
        "--workers-tls-cert",
        &cert,
        "--workers-tls-key",
        &key,
    ];
    let workers: Vec<Worker> = (0..2)
        .map(|_| {
            let (wcert, wkey) = (file("worker.pem"), file("worker.key"));
            let mut args = vec![
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                &wcert,
                "--tls-key",
                &wkey,
                "--tls-client-ca",
                &ca,
            ];
            args.extend(client);
            Worker::start_with(&args)
        })
        .collect();
    let list: Vec<&str> = workers.iter().map(|w| w.address.as_str()).collect();
    let set = format!(
        "SET sluice.distributed.workers = '{}';\nSET spark.sql.shuffle.partitions = 2;\n",
        list.join(",")
    );
    let (pipeline, rows) = crate::memory::windowed_pipeline(tmp.path(), &set);
    // Refused: a driver without TLS, and one over TLS without a certificate of the CA.
    let (ok, plain) = sluice_run(&pipeline, &[]);
    assert!(!ok, "a plain driver ran on TLS workers");
    let (ok, anonymous) = sluice_run(&pipeline, &["--workers-tls-ca", &file("ca.pem")]);
    assert!(
        !ok,
        "a driver without a certificate ran on mutual-TLS workers"
    );
    for refused in [&plain, &anonymous] {
        // the workers answer, and refuse the connection: the error says how to reach them
        assert!(
            refused.contains("--workers-tls-ca") && !refused.contains("none of the workers"),
            "{refused}"
        );
    }
    assert!(
        workers.iter().all(|w| w.tasks() == 0),
        "a refused driver's task ran\n{plain}\n{anonymous}"
    );
    // Served: the driver with its certificate.
    let (ok, stderr) = sluice_run(&pipeline, &client);
    assert!(ok, "{stderr}");
    crate::memory::check_windowed(tmp.path(), rows);
    for w in &workers {
        assert!(
            w.reads() >= 1 && w.state_tasks() >= 1,
            "{}: {} reads, {} state tasks",
            w.address,
            w.reads(),
            w.state_tasks()
        );
    }
}

/// A batch that fails on the driver while it routes rows to the workers (a `FAILFAST` record in
/// its last file) fails with the record's error, and the workers, whose tasks were started and
/// got no end of their rows, commit no state: no version 1 in any partition of the checkpoint.
#[test]
fn a_batch_that_fails_while_its_rows_are_routed_commits_no_state_on_the_workers() {
    sluice_distributed::register();
    let workers: Vec<Worker> = (0..2).map(|_| Worker::start()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    write_files(&input, 0..3);
    add_file(
        &input,
        "3.json",
        "{\"id\": 1, \"user\": \"u0\", \"ts\": nope}\n",
        3,
    );
    let s = session(Some(&workers));
    let frame = s
        .read_stream()
        .format("json")
        .schema("id BIGINT, user STRING, ts TIMESTAMP")
        .unwrap()
        .option("mode", "FAILFAST")
        .load(input.display().to_string())
        .unwrap()
        .drop_duplicates(["id"])
        .unwrap();
    let checkpoint = tmp.path().join("ck");
    let (query, _) = capture(frame, &checkpoint.display().to_string());
    let err = query.await_termination().unwrap_err();
    assert!(
        err.to_string().contains("MALFORMED_RECORD"),
        "the record's error: {err}"
    );
    assert!(
        workers.iter().all(|w| w.state_tasks() >= 1),
        "the state tasks were started"
    );
    // each worker's task ends after the driver stopped: wait for it to say how
    let ended = |w: &Worker| {
        let log = w.log.lock().unwrap();
        log.contains("a stateful task committed") || log.contains("a stateful task failed")
    };
    for _ in 0..200 {
        if workers.iter().all(ended) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for w in &workers {
        let log = w.log.lock().unwrap();
        assert!(
            log.contains("a stateful task failed") && !log.contains("a stateful task committed"),
            "{}: {log}",
            w.address
        );
    }
    let mut versions = Vec::new();
    let partitions = std::fs::read_dir(checkpoint.join("state/0"))
        .into_iter()
        .flatten();
    for p in partitions.flatten().filter(|p| p.path().is_dir()) {
        for f in std::fs::read_dir(p.path()).unwrap() {
            versions.push(f.unwrap().file_name().to_string_lossy().into_owned());
        }
    }
    assert!(
        !versions.iter().any(|v| v.starts_with("1.")),
        "a worker committed the failed batch: {versions:?}"
    );
}

/// Counts each user's events until the user is idle: every call adds the rows and sets an
/// event-time timeout a minute past the key's latest event; a key that timed out says it ended
/// (called in a later batch, or in a no-data batch the watermark's advance runs).
fn count_until_idle(
    key: &[datafusion::common::ScalarValue],
    rows: &RecordBatch,
    state: &mut sluice::GroupState<i64>,
) -> sluice::Result<Vec<RecordBatch>> {
    let user = key[0].to_string();
    let (n, phase) = if state.has_timed_out() {
        let n = state.get().copied().unwrap_or(0);
        state.remove();
        (n, "ended")
    } else {
        let n = state.get().copied().unwrap_or(0) + rows.num_rows() as i64;
        state.update(n);
        let ts = rows
            .column_by_name("ts")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
            .unwrap();
        let latest_ms = ts.iter().flatten().max().unwrap_or(0) / 1000;
        state.set_timeout_timestamp(latest_ms + 60_000)?;
        (n, "open")
    };
    let schema = idle_schema();
    Ok(vec![RecordBatch::try_new(
        schema,
        vec![
            Arc::new(arrow::array::StringArray::from(vec![user])),
            Arc::new(arrow::array::Int64Array::from(vec![n])),
            Arc::new(arrow::array::StringArray::from(vec![phase])),
        ],
    )?])
}

fn idle_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    Arc::new(Schema::new(vec![
        Field::new("user", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
        Field::new("phase", DataType::Utf8, true),
    ]))
}

/// Not a test by itself: the worker process of
/// `a_flat_map_groups_with_state_function_registered_by_name_runs_on_workers_that_register_it`,
/// as a user's own binary serves a worker: it registers its functions, then serves.
#[test]
#[ignore = "a worker process that the flatMapGroupsWithState cluster test starts"]
fn a_worker_that_registers_count_until_idle() {
    let Ok(listen) = std::env::var("SLUICE_TEST_WORKER_LISTEN") else {
        return;
    };
    let _ = env_logger::try_init();
    sluice::register_group_function("count_until_idle", count_until_idle);
    sluice_distributed::worker::serve(listen.parse().unwrap(), None, |addr| {
        use std::io::Write;
        println!("Sluice worker listening on {addr}");
        let _ = std::io::stdout().flush();
    })
    .unwrap();
}

/// `flatMapGroupsWithState` with a function registered by name, on two workers of a binary
/// that registers it too (this test's own, as a user's binary would): its state partitions run
/// on the workers and the rows are one process's, the timeouts that no-data batches fire
/// included (the driver learns the earliest timeout from the workers); on `sluice worker`,
/// which does not have the function, the query fails and says how to register it.
#[test]
fn a_flat_map_groups_with_state_function_registered_by_name_runs_on_workers_that_register_it() {
    sluice_distributed::register();
    sluice::register_group_function("count_until_idle", count_until_idle);
    let input = tempfile::tempdir().unwrap();
    // file k: the user u{k} and the user "steady", ten events each at minutes 10k..10k+9
    for k in 0..5u64 {
        let body: String = (0..10u64)
            .flat_map(|m| {
                let minute = 10 * k + m;
                let ts = format!("2026-09-15T{:02}:{:02}:00Z", 10 + minute / 60, minute % 60);
                [format!("u{k}"), "steady".to_string()].map(|user| {
                    format!("{{\"id\": {minute}, \"user\": \"{user}\", \"ts\": \"{ts}\"}}\n")
                })
            })
            .collect();
        add_file(input.path(), &format!("{k}.json"), &body, k);
    }
    let run = |workers: Option<&[Worker]>| -> Result<Ran, String> {
        let s = session(workers);
        let frame = events(&s, input.path(), "events")
            .group_by_key(["user"])
            .flat_map_groups_with_state_named(
                "count_until_idle",
                idle_schema(),
                sluice::OutputMode::Update,
                sluice::GroupStateTimeout::EventTimeTimeout,
            )
            .unwrap();
        let checkpoint = tempfile::tempdir().unwrap();
        let at = checkpoint.path().display().to_string();
        let (query, out) = capture_in(frame, &at, sluice::OutputMode::Update);
        query.await_termination().map_err(|e| e.to_string())?;
        Ok(ran_of(&query, &out))
    };
    let alone = run(None).unwrap();
    let ended = alone.rows.iter().filter(|r| r.ends_with("|ended")).count();
    assert!(ended >= 3, "{:?}", alone.rows);
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "distributed::a_worker_that_registers_count_until_idle",
            "--ignored",
            "--nocapture",
        ])
        .env("SLUICE_TEST_WORKER_LISTEN", "127.0.0.1:0");
    let workers: Vec<Worker> = (0..2)
        .map(|_| {
            let mut c = Command::new(command.get_program());
            c.args(command.get_args());
            c.envs(command.get_envs().filter_map(|(k, v)| Some((k, v?))));
            Worker::spawn(c)
        })
        .collect();
    let cluster = run(Some(&workers)).unwrap();
    assert_eq!(cluster.rows, alone.rows, "on two workers");
    assert_eq!(cluster.batches, alone.batches, "the no-data batches too");
    // the state partitions ran on the workers: a state task on each, every batch
    for w in &workers {
        assert!(
            w.state_tasks() >= cluster.batches,
            "{}: {} state tasks in {} batches\n{}",
            w.address,
            w.state_tasks(),
            cluster.batches,
            w.log.lock().unwrap()
        );
    }
    // a worker without the function refuses the task and says how to give it one
    let plain = [Worker::start()];
    let err = run(Some(&plain)).unwrap_err();
    assert!(
        err.contains("register_group_function") && err.contains("count_until_idle"),
        "{err}"
    );
}
