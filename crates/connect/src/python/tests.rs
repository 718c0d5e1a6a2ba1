//! Tests that run the client's REAL worker modules (`SLUICE_TEST_PYTHON`: a virtualenv, or its
//! interpreter, with `pyspark-client==4.2.0`) on functions pickled by the real client code
//! (`DataStreamWriter.foreachBatch` / `.foreach`, `CloudPickleSerializer` for listeners). The
//! functions only touch files, so no Spark Connect server is needed; the `foreachBatch` ones keep
//! the batch DataFrame alive, because a released `CachedRemoteRelation` asks the server to
//! remove it (`RemoveCachedRemoteRelationCommand`), which would retry against no server. Without the variable those
//! tests print `SKIPPED` and return; the interpreter-missing and timeout tests always run.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::proto;

/// The test interpreter, or `None` (with a message) when `SLUICE_TEST_PYTHON` is unset.
fn test_python(test: &str) -> Option<String> {
    let Some(path) = std::env::var_os("SLUICE_TEST_PYTHON") else {
        eprintln!(
            "SKIPPED {test}: set SLUICE_TEST_PYTHON to a virtualenv with pyspark-client==4.2.0 \
             (python3 -m venv V && V/bin/pip install pyspark-client==4.2.0)"
        );
        return None;
    };
    let path = PathBuf::from(path);
    let python = if path.is_dir() {
        path.join("bin/python")
    } else {
        path
    };
    assert!(
        python.exists(),
        "SLUICE_TEST_PYTHON names {}, which does not exist",
        python.display()
    );
    Some(python.to_string_lossy().into_owned())
}

/// The lines a test sink kept.
type Lines = Arc<Mutex<Vec<(OutputStream, String)>>>;

/// A sink that keeps the lines.
fn line_sink() -> (LineSink, Lines) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let keep = lines.clone();
    let sink: LineSink = Arc::new(move |stream, line| {
        keep.lock().unwrap().push((stream, line.to_string()));
    });
    (sink, lines)
}

fn config(python: &str, sink: LineSink) -> PythonConfig {
    let mut config = PythonConfig::from_env(Some(python.to_string()), "sc://127.0.0.1:1".into());
    config.lines = sink;
    config
}

/// Pickles `func` (defined by `source`, run as `__main__`, so cloudpickle keeps it by value) the
/// way the client does for `kind`: "foreachBatch", "foreach" or "listener".
fn pickle(python: &str, dir: &Path, kind: &str, source: &str) -> proto::PythonUdf {
    let script = dir.join("pickle_command.py");
    std::fs::write(
        &script,
        r#"import json, sys
exec(compile(open(sys.argv[2]).read(), "user_code", "exec"), globals())
from pyspark.sql.connect.streaming.readwriter import DataStreamWriter
from pyspark.serializers import CloudPickleSerializer
from pyspark.sql.connect.utils import get_python_ver
writer = DataStreamWriter(None, None)
if sys.argv[1] == "foreachBatch":
    writer.foreachBatch(func)
    f = writer._write_proto.foreach_batch.python_function
    command, ver = f.command, f.python_ver
elif sys.argv[1] == "foreach":
    writer.foreach(func)
    f = writer._write_proto.foreach_writer.python_function
    command, ver = f.command, f.python_ver
else:
    command, ver = CloudPickleSerializer().dumps(func), get_python_ver()
print(json.dumps({"command": command.hex(), "python_ver": ver}))
"#,
    )
    .unwrap();
    let user = dir.join("user_code.py");
    std::fs::write(&user, source).unwrap();
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(kind)
        .arg(&user)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pickling failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let hex = json["command"].as_str().unwrap();
    let command: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    proto::PythonUdf {
        command: command.into(),
        python_ver: json["python_ver"].as_str().unwrap().to_string(),
        ..Default::default()
    }
}

/// Waits (up to 10 s) until a line matching `pred` arrived.
fn wait_line(
    lines: &Mutex<Vec<(OutputStream, String)>>,
    pred: impl Fn(OutputStream, &str) -> bool,
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if lines.lock().unwrap().iter().any(|(s, l)| pred(*s, l)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

const SESSION: &str = "9b6c4ba8-52a2-4a9e-9a36-0f7c3a5b2d11";

#[test]
fn foreach_batch_runs_the_real_worker_per_batch_and_forwards_prints() {
    let Some(python) = test_python("foreach_batch_runs_the_real_worker_per_batch") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("calls.txt");
    let source = format!(
        "import sys\n\
         KEEP = []\n\
         def func(df, batch_id):\n\
         \x20   KEEP.append(df)\n\
         \x20   with open({out:?}, 'a') as f:\n\
         \x20       f.write(f'{{batch_id}} {{df._plan._relation_id}} {{type(batch_id).__name__}}\\n')\n\
         \x20   print(f'user print {{batch_id}}')\n\
         \x20   print(f'user warning {{batch_id}}', file=sys.stderr)\n"
    );
    let function = pickle(&python, dir.path(), "foreachBatch", &source);
    let (sink, lines) = line_sink();
    let mut worker = ForeachBatchWorker::start(&config(&python, sink), SESSION, &function).unwrap();
    for batch in 0..3 {
        worker.call(&format!("df-{batch}"), batch).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "0 df-0 int\n1 df-1 int\n2 df-2 int\n"
    );
    assert!(wait_line(&lines, |s, l| s == OutputStream::Stdout
        && l == "user print 2"));
    assert!(wait_line(&lines, |s, l| s == OutputStream::Stderr
        && l == "user warning 1"));
    // The worker's own log lines name the session it attached to.
    assert!(wait_line(&lines, |_, l| l.contains(SESSION)));
    drop(worker);
}

#[test]
fn foreach_batch_exception_is_an_error_with_the_traceback() {
    let Some(python) = test_python("foreach_batch_exception_is_an_error_with_the_traceback") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = "KEEP = []\n\
                  def helper(b):\n    raise ValueError(f'boom in batch {b}')\n\
                  def func(df, batch_id):\n    KEEP.append(df)\n    if batch_id == 1:\n        helper(batch_id)\n";
    let function = pickle(&python, dir.path(), "foreachBatch", source);
    let (sink, _) = line_sink();
    let mut worker = ForeachBatchWorker::start(&config(&python, sink), SESSION, &function).unwrap();
    worker.call("a", 0).unwrap();
    let err = worker.call("b", 1).unwrap_err();
    assert_eq!(
        err.java_class,
        "org.apache.spark.api.python.PythonException"
    );
    assert_eq!(err.error_class, "PYTHON_EXCEPTION");
    assert!(
        err.message.contains("Traceback (most recent call last)"),
        "{}",
        err.message
    );
    assert!(err.message.contains("in helper"), "{}", err.message);
    assert!(
        err.message.contains("ValueError: boom in batch 1"),
        "{}",
        err.message
    );
    // The worker exits after an exception (as Spark's): a further call says so, no hang.
    let err = worker.call("c", 2).unwrap_err();
    assert!(err.message.contains("exit"), "{}", err.message);
}

#[test]
fn foreach_batch_worker_dying_mid_batch_is_an_error_with_status_and_stderr() {
    let Some(python) = test_python("foreach_batch_worker_dying_mid_batch") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = "import os, sys\n\
                  def func(df, batch_id):\n\
                  \x20   print('about to die', file=sys.stderr, flush=True)\n\
                  \x20   os._exit(3)\n";
    let function = pickle(&python, dir.path(), "foreachBatch", source);
    let (sink, _) = line_sink();
    let mut worker = ForeachBatchWorker::start(&config(&python, sink), SESSION, &function).unwrap();
    let err = worker.call("a", 0).unwrap_err();
    assert!(err.message.contains("exit status 3"), "{}", err.message);
    assert!(err.message.contains("about to die"), "{}", err.message);
    assert!(err.message.contains("batch 0"), "{}", err.message);
}

#[test]
fn python_version_mismatch_surfaces_the_workers_message() {
    let Some(python) = test_python("python_version_mismatch_surfaces_the_workers_message") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut function = pickle(
        &python,
        dir.path(),
        "foreachBatch",
        "def func(df, b):\n    pass\n",
    );
    function.python_ver = "2.7".into();
    let (sink, _) = line_sink();
    let err = ForeachBatchWorker::start(&config(&python, sink), SESSION, &function).unwrap_err();
    assert_eq!(err.error_class, "PYTHON_VERSION_MISMATCH");
    assert!(
        err.message.contains("PYTHON_VERSION_MISMATCH"),
        "{}",
        err.message
    );
    assert!(err.message.contains("2.7"), "{}", err.message);
}

#[test]
fn missing_interpreter_is_a_clear_error() {
    let (sink, _) = line_sink();
    let function = proto::PythonUdf::default();
    let config = config("/nonexistent/bin/python3", sink);
    let err = ForeachBatchWorker::start(&config, SESSION, &function).unwrap_err();
    assert!(
        err.message
            .contains("`/nonexistent/bin/python3` was not found"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("pip install pyspark-client==4.2.0"),
        "{}",
        err.message
    );
    assert!(err.message.contains("PYSPARK_PYTHON"), "{}", err.message);
}

/// A shell script standing in for an interpreter.
fn fake_python(dir: &Path, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-python");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn missing_pyspark_module_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // python3 without site-packages: the worker module cannot be found.
    let python = fake_python(dir.path(), "exec python3 -S \"$@\"");
    let (sink, _) = line_sink();
    let err = ForeachBatchWorker::start(
        &config(&python, sink),
        SESSION,
        &proto::PythonUdf::default(),
    )
    .unwrap_err();
    assert!(
        err.message.contains("before it connected"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("No module named 'pyspark'"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("-m pip install pyspark-client==4.2.0"),
        "{}",
        err.message
    );
}

#[test]
fn a_worker_that_never_connects_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let python = fake_python(dir.path(), "echo starting >&2\nexec sleep 30");
    let (sink, lines) = line_sink();
    let mut config = config(&python, sink);
    config.connect_timeout = Duration::from_secs(1);
    let started = Instant::now();
    let err =
        ForeachBatchWorker::start(&config, SESSION, &proto::PythonUdf::default()).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        err.message
            .contains("did not connect to the server within 1 s"),
        "{}",
        err.message
    );
    assert!(err.message.contains("--python"), "{}", err.message);
    assert!(wait_line(&lines, |s, l| s == OutputStream::Stderr && l == "starting"));
}

#[test]
fn for_user_adds_the_user_id_once() {
    let config = PythonConfig::from_env(Some("py".into()), "sc://127.0.0.1:15002".into());
    assert_eq!(config.python, "py");
    let alice = config.for_user("alice");
    assert_eq!(alice.connect_url, "sc://127.0.0.1:15002/;user_id=alice");
    assert_eq!(
        alice.for_user("bob").connect_url,
        "sc://127.0.0.1:15002/;user_id=bob"
    );
    assert_eq!(worker_url("sc://127.0.0.1:15002"), "sc://127.0.0.1:15002/");
    assert_eq!(worker_url("sc://h:1/;user_id=a"), "sc://h:1/;user_id=a");
    assert_eq!(worker_url("sc://h:1;token=t"), "sc://h:1/;token=t");
}

/// A full `StreamingQueryProgress` JSON, as `lastProgress` carries it.
const PROGRESS: &str = r#"{"id":"1f0b7a3e-5d4c-4b1a-9e8f-2a3b4c5d6e7f","runId":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d","name":"q","timestamp":"2026-12-01T19:00:00.000Z","batchId":4,"batchDuration":12,"numInputRows":3,"inputRowsPerSecond":0.0,"processedRowsPerSecond":250.0,"durationMs":{"triggerExecution":12},"eventTime":{"watermark":"2026-12-01T18:50:00.000Z"},"stateOperators":[{"operatorName":"stateStoreSave","numRowsTotal":2,"numRowsUpdated":1,"allUpdatesTimeMs":1,"numRowsRemoved":0,"allRemovalsTimeMs":0,"commitTimeMs":1,"memoryUsedBytes":100,"numRowsDroppedByWatermark":7,"numShufflePartitions":1,"numStateStoreInstances":1,"customMetrics":{}}],"sources":[{"description":"FileStreamSource[events]","startOffset":{"logOffset":3},"endOffset":{"logOffset":4},"latestOffset":null,"numInputRows":3,"inputRowsPerSecond":0.0,"processedRowsPerSecond":250.0,"metrics":{}}],"sink":{"description":"ForeachBatchSink","numOutputRows":-1,"metrics":{}}}"#;

#[test]
fn listener_worker_receives_every_event_kind() {
    let Some(python) = test_python("listener_worker_receives_every_event_kind") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.txt");
    let source = format!(
        "from pyspark.sql.streaming import StreamingQueryListener\n\
         def log(s):\n    open({out:?}, 'a').write(s + '\\n')\n\
         class L(StreamingQueryListener):\n\
         \x20   def onQueryStarted(self, e):\n        log(f'started {{e.id}} {{e.runId}} {{e.name}} {{e.timestamp}}')\n\
         \x20   def onQueryProgress(self, e):\n        p = e.progress\n        log(f'progress {{p.batchId}} {{p.stateOperators[0].numRowsDroppedByWatermark}} {{p.sources[0].endOffset}} {{p.name}}')\n\
         \x20   def onQueryIdle(self, e):\n        log(f'idle {{e.id}} {{e.timestamp}}')\n\
         \x20   def onQueryTerminated(self, e):\n        if e.exception == 'poison':\n            raise RuntimeError('listener failed')\n        log(f'terminated {{e.exception}} {{e.errorClassOnException}}')\n\
         func = L()\n"
    );
    let listener = pickle(&python, dir.path(), "listener", &source);
    let (sink, _) = line_sink();
    let command = proto::streaming_query_manager_command::StreamingQueryListenerCommand {
        python_listener_payload: Some(listener),
        ..Default::default()
    };
    let mut worker =
        ListenerWorker::from_command(&config(&python, sink), SESSION, &command).unwrap();
    let id = "1f0b7a3e-5d4c-4b1a-9e8f-2a3b4c5d6e7f";
    let run = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    let ts = "2026-12-01T19:00:00.000Z";
    worker
        .on_query_started(&query_started_event_json(id, run, Some("q"), ts))
        .unwrap();
    worker
        .on_query_progress(&query_progress_event_json(PROGRESS).unwrap())
        .unwrap();
    worker
        .on_query_idle(&query_idle_event_json(id, run, ts))
        .unwrap();
    let poison = query_terminated_event_json(id, run, Some("poison"), None);
    let err = worker.on_query_terminated(&poison).unwrap_err();
    assert!(
        err.message.contains("RuntimeError: listener failed"),
        "{}",
        err.message
    );
    // The listener worker survives an exception in the listener.
    worker
        .on_query_terminated(&query_terminated_event_json(id, run, None, None))
        .unwrap();
    worker
        .on_query_terminated(&query_terminated_event_json(
            id,
            run,
            Some("boom"),
            Some("DIVIDE_BY_ZERO"),
        ))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!(
            "started {id} {run} q {ts}\nprogress 4 7 {{\"logOffset\": 4}} q\nidle {id} {ts}\n\
             terminated None None\nterminated boom DIVIDE_BY_ZERO\n"
        )
    );
}

#[test]
fn bus_events_use_the_bus_numbering() {
    let e = bus_event(ListenerEventKind::Idle, "{}".into()).unwrap();
    assert_eq!(
        e.event_type,
        proto::StreamingQueryEventType::QueryIdleEvent as i32
    );
    let e = bus_event(ListenerEventKind::Terminated, "{}".into()).unwrap();
    assert_eq!(
        e.event_type,
        proto::StreamingQueryEventType::QueryTerminatedEvent as i32
    );
    assert!(bus_event(ListenerEventKind::Started, "{}".into()).is_none());
    let started: serde_json::Value =
        serde_json::from_str(&query_started_event_json("a", "b", None, "t")).unwrap();
    assert_eq!(started["name"], serde_json::Value::Null);
    assert_eq!(started["jobTags"], serde_json::json!([]));
}

fn batch_data() -> sluice::BatchData {
    use arrow::array::{Int64Array, StringViewArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8View, true),
        Field::new("n", DataType::Int64, false),
    ]));
    let batch = |k: Vec<Option<&str>>, n: Vec<i64>| {
        arrow::array::RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringViewArray::from(k)),
                Arc::new(Int64Array::from(n)),
            ],
        )
        .unwrap()
    };
    sluice::BatchData {
        schema: schema.clone(),
        partitions: vec![
            vec![
                batch(vec![Some("a"), None], vec![1, 2]),
                batch(vec![Some("c")], vec![3]),
            ],
            vec![],
        ],
    }
}

#[test]
fn foreach_writer_object_gets_open_process_close_per_partition() {
    let Some(python) = test_python("foreach_writer_object_gets_open_process_close") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rows.txt");
    let source = format!(
        "def log(s):\n    open({out:?}, 'a').write(s + '\\n')\n\
         class W:\n\
         \x20   def open(self, partition_id, epoch_id):\n        log(f'open {{partition_id}} {{epoch_id}}')\n        return True\n\
         \x20   def process(self, row):\n        if row.n == 99:\n            raise ValueError('bad row')\n        log(f'row {{row.k}} {{row.n}} {{row.asDict()}}')\n\
         \x20   def close(self, error):\n        log(f'close {{error!r}}')\n\
         func = W()\n"
    );
    let function = pickle(&python, dir.path(), "foreach", &source);
    let (sink, _) = line_sink();
    let mut worker = ForeachWriterWorker::start(&config(&python, sink), &function).unwrap();
    worker.call(5, &batch_data()).unwrap();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "open 0 5\nrow a 1 {'k': 'a', 'n': 1}\nrow None 2 {'k': None, 'n': 2}\nrow c 3 {'k': 'c', 'n': 3}\n\
         close None\nopen 1 5\nclose None\n"
    );
    // An exception in process: close sees it, the batch fails with the traceback.
    let mut bad = batch_data();
    bad.partitions = vec![vec![bad.partitions[0][1].clone()]];
    let schema = bad.schema.clone();
    bad.partitions[0][0] = arrow::array::RecordBatch::try_new(
        schema,
        vec![
            Arc::new(arrow::array::StringViewArray::from(vec![Some("x")])),
            Arc::new(arrow::array::Int64Array::from(vec![99])),
        ],
    )
    .unwrap();
    let err = worker.call(6, &bad).unwrap_err();
    assert!(
        err.message.contains("ValueError: bad row"),
        "{}",
        err.message
    );
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .ends_with("open 0 6\nclose ValueError('bad row')\n"));
    // The writer worker stays usable for the next batch.
    worker.call(7, &batch_data()).unwrap();
}

#[test]
fn foreach_plain_function_is_called_per_row() {
    let Some(python) = test_python("foreach_plain_function_is_called_per_row") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rows.txt");
    let source = format!("def func(row):\n    open({out:?}, 'a').write(f'{{row.n}}\\n')\n");
    let function = pickle(&python, dir.path(), "foreach", &source);
    let (sink, _) = line_sink();
    let mut worker = ForeachWriterWorker::start(&config(&python, sink), &function).unwrap();
    worker.call(0, &batch_data()).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "1\n2\n3\n");
}

#[test]
fn interrupting_a_wedged_function_ends_the_call() {
    let Some(python) = test_python("interrupting_a_wedged_function_ends_the_call") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source =
        "import time\nKEEP = []\ndef func(df, b):\n    KEEP.append(df)\n    time.sleep(600)\n";
    let function = pickle(&python, dir.path(), "foreachBatch", source);
    let (sink, _) = line_sink();
    let mut worker = ForeachBatchWorker::start(&config(&python, sink), SESSION, &function).unwrap();
    let interrupt = worker.interrupter();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        interrupt.interrupt();
    });
    let started = Instant::now();
    let err = worker.call("a", 0).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        err.message.contains("the query was stopped"),
        "{}",
        err.message
    );
    stopper.join().unwrap();
}

/// Against a live Spark Connect server (`SLUICE_TEST_CONNECT_URL`, e.g. `sc://127.0.0.1:15002`):
/// the function's own Spark calls go over the worker's attached session, and the batch
/// DataFrame's release (`RemoveCachedRemoteRelationCommand`) is answered before the call ends.
#[test]
fn foreach_batch_function_uses_spark_over_connect() {
    let Some(python) = test_python("foreach_batch_function_uses_spark_over_connect") else {
        return;
    };
    let Ok(url) = std::env::var("SLUICE_TEST_CONNECT_URL") else {
        eprintln!(
            "SKIPPED foreach_batch_function_uses_spark_over_connect: set SLUICE_TEST_CONNECT_URL"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("counts.txt");
    let source = format!(
        "def func(df, batch_id):\n\
         \x20   n = df.sparkSession.range(batch_id + 2).count()\n\
         \x20   open({out:?}, 'a').write(f'{{batch_id}} {{n}} {{df.sparkSession.session_id}}\\n')\n"
    );
    let function = pickle(&python, dir.path(), "foreachBatch", &source);
    let (sink, _) = line_sink();
    let mut config = config(&python, sink);
    config.connect_url = url;
    let session = uuid::Uuid::new_v4().to_string();
    let mut worker = ForeachBatchWorker::start(&config, &session, &function).unwrap();
    let started = Instant::now();
    worker.call("not-cached", 0).unwrap();
    worker.call("not-cached-either", 1).unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!("0 2 {session}\n1 3 {session}\n")
    );
}
