//! `writeStream` and the query handle: `WriteStreamOperationStart` starts a Sluice streaming
//! query (format, options, output mode, trigger, query name, a Python `foreachBatch`);
//! `StreamingQueryCommand` is `StreamingQuery`'s methods; `StreamingQueryManagerCommand` is
//! `spark.streams`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice::error::class;
use sluice::{Fault, OutputMode, SluiceError, StreamingQuery, Trigger};

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::streaming_query_command::Command as QueryCommand;
use crate::proto::streaming_query_command_result as query_result;
use crate::proto::streaming_query_manager_command::Command as ManagerCommand;
use crate::proto::streaming_query_manager_command_result as manager_result;
use crate::proto::write_stream_operation_start::{SinkDestination, Trigger as ProtoTrigger};
use crate::python::{ForeachBatchWorker, ForeachWriterWorker, ListenerWorker, PythonConfig};
use crate::session::ConnectSession;

use crate::queries::lock;
pub use crate::queries::{Queries, QueryLimit, DEFAULT_MAX_QUERIES};

/// Starts `writeStream ... start()`.
pub fn start(
    session: &Arc<ConnectSession>,
    op: &proto::WriteStreamOperationStart,
) -> Result<proto::WriteStreamOperationStartResult> {
    let slot = session.settings.queries.reserve()?;
    let input = op
        .input
        .as_ref()
        .ok_or_else(|| ConnectError::illegal_argument("writeStream without an input plan"))?;
    let frame = crate::plan::frame(session, input)?;
    let mut writer = frame.write_stream();
    if !op.output_mode.is_empty() {
        let mode: OutputMode = op
            .output_mode
            .parse()
            .map_err(|e: SluiceError| ConnectError::illegal_argument(e.message().to_string()))?;
        writer = writer.output_mode(mode);
    }
    if !op.query_name.is_empty() {
        writer = writer.query_name(&op.query_name);
    }
    if let Some(trigger) = &op.trigger {
        writer = writer.trigger(trigger_of(trigger)?);
    }
    let format = if op.format.is_empty() {
        // Spark's default is spark.sql.sources.default, parquet.
        "parquet".to_string()
    } else {
        op.format.clone()
    };
    for (k, v) in &op.options {
        writer = writer.option(k, v);
    }
    if !op.partitioning_column_names.is_empty() {
        writer = writer.partition_by(&op.partitioning_column_names);
    }
    let mut table = None;
    match &op.sink_destination {
        Some(SinkDestination::Path(path)) => writer = writer.option("path", path),
        Some(SinkDestination::TableName(name)) => table = Some(name.clone()),
        None => {}
    }
    if let Some(f) = &op.foreach_writer {
        writer = foreach_writer(session, writer, python_function(f, "foreach")?)?;
    } else if let Some(f) = &op.foreach_batch {
        writer = foreach_batch(session, writer, python_function(f, "foreachBatch")?)?;
    } else {
        writer = writer.format(format);
    }
    let query = match table {
        // A file table in the session's warehouse (sluice::catalog).
        Some(name) => writer.to_table(&name)?,
        None => writer.start()?,
    };
    slot.started(&query);
    let result = proto::WriteStreamOperationStartResult {
        query_id: Some(instance_id(&query)),
        name: query.name().unwrap_or_default().to_string(),
        query_started_event_json: Some(crate::python::query_started_event_json(
            query.id(),
            query.run_id(),
            query.name(),
            &sluice::progress::format_timestamp_ms(now_ms()),
        )),
    };
    // Its listener events follow the started event the client posts from this result.
    session.listener_bus.started(query.id());
    session.queries.insert(query);
    Ok(result)
}

fn python_function<'a>(
    f: &'a proto::StreamingForeachFunction,
    what: &str,
) -> Result<&'a proto::PythonUdf> {
    match &f.function {
        Some(proto::streaming_foreach_function::Function::PythonFunction(udf)) => Ok(udf),
        Some(proto::streaming_foreach_function::Function::ScalaFunction(_)) => Err(
            ConnectError::not_supported(format!("a Scala {what} function (Sluice runs Python)")),
        ),
        None => Err(ConnectError::illegal_argument(format!(
            "{what} without a function"
        ))),
    }
}

fn python_config(session: &ConnectSession) -> PythonConfig {
    let mut config = PythonConfig::from_env(
        session.settings.python.clone(),
        session.settings.connect_url.clone(),
    )
    .for_user(&session.user_id);
    config.token = session.settings.worker_token.clone();
    config
}

/// The Python `foreach` writer: each batch's partitions go to the worker, which calls the
/// writer's `open`/`process`/`close` (or the function per row).
fn foreach_writer(
    session: &Arc<ConnectSession>,
    writer: sluice::query::DataStreamWriter,
    udf: &proto::PythonUdf,
) -> Result<sluice::query::DataStreamWriter> {
    let worker = Mutex::new(ForeachWriterWorker::start(&python_config(session), udf)?);
    Ok(writer.foreach_batch(move |data, batch_id| {
        lock(&worker)
            .call(batch_id as i64, data)
            .map_err(|e| user_function_error("foreach writer", batch_id, &e))
    }))
}

/// The Python `foreachBatch`: each batch is materialised once, cached for the worker under a
/// fresh id (it reads it back as a `CachedRemoteRelation`), and the worker runs the function.
fn foreach_batch(
    session: &Arc<ConnectSession>,
    writer: sluice::query::DataStreamWriter,
    udf: &proto::PythonUdf,
) -> Result<sluice::query::DataStreamWriter> {
    let worker = Mutex::new(ForeachBatchWorker::start(
        &python_config(session),
        &session.session_id,
        udf,
    )?);
    let session = Arc::downgrade(session);
    Ok(writer.foreach_batch(move |data, batch_id| {
        let session = session.upgrade().ok_or_else(|| {
            SluiceError::query(
                class::FOREACH_BATCH_USER_FUNCTION_ERROR,
                "the Spark Connect session of this foreachBatch query was released",
            )
        })?;
        let view = session.fresh_name("batch");
        let rows = data.partitions.concat();
        session
            .sluice
            .register_batches(&view, data.schema.clone(), rows)?;
        let frame = session.sluice.table(&view)?;
        let df_id = uuid::Uuid::new_v4().to_string();
        session.cache_frame(&df_id, frame);
        let result = lock(&worker).call(&df_id, batch_id as i64);
        session.uncache_frame(&df_id);
        let _ = session.sluice.context().deregister_table(view.as_str());
        result.map_err(|e| user_function_error("function in foreach batch sink", batch_id, &e))
    }))
}

/// A Python function's failure as the query's error (Spark's
/// `FOREACH_BATCH_USER_FUNCTION_ERROR`), with the worker's traceback.
fn user_function_error(what: &str, batch_id: u64, e: &ConnectError) -> SluiceError {
    SluiceError::new(
        Fault::Query,
        class::FOREACH_BATCH_USER_FUNCTION_ERROR,
        format!(
            "An error occurred in the user provided {what} (batch {batch_id}). Reason: {}",
            e.message
        ),
    )
}

fn trigger_of(trigger: &ProtoTrigger) -> Result<Trigger> {
    let interval = |text: &str| -> Result<Duration> {
        let micros = sluice::time_text::parse_interval_micros(text).map_err(|e| {
            ConnectError::illegal_argument(format!(
                "the trigger interval {text:?}: {}",
                e.message()
            ))
        })?;
        if micros < 0 {
            return Err(ConnectError::illegal_argument(format!(
                "the trigger interval must not be negative, got {text:?}"
            )));
        }
        Ok(Duration::from_micros(micros as u64))
    };
    Ok(match trigger {
        ProtoTrigger::ProcessingTimeInterval(t) => Trigger::ProcessingTime(interval(t)?),
        ProtoTrigger::AvailableNow(_) => Trigger::AvailableNow,
        ProtoTrigger::Once(_) => Trigger::Once,
        ProtoTrigger::ContinuousCheckpointInterval(t) => Trigger::Continuous(interval(t)?),
        ProtoTrigger::RealTimeBatchDuration(_) => {
            return Err(ConnectError::not_supported("the real-time trigger"))
        }
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn instance_id(query: &StreamingQuery) -> proto::StreamingQueryInstanceId {
    proto::StreamingQueryInstanceId {
        id: query.id().to_string(),
        run_id: query.run_id().to_string(),
    }
}

/// A `StreamingQuery` method.
pub fn query_command(
    session: &ConnectSession,
    cmd: &proto::StreamingQueryCommand,
) -> Result<proto::StreamingQueryCommandResult> {
    let id = cmd
        .query_id
        .as_ref()
        .ok_or_else(|| ConnectError::illegal_argument("a query command without a query id"))?;
    let query = session.queries.get(&id.id)?;
    let command = cmd
        .command
        .as_ref()
        .ok_or_else(|| ConnectError::illegal_argument("a query command without a command"))?;
    let progress = |all: bool| {
        let list = if all {
            query.recent_progress()
        } else {
            query.last_progress().into_iter().collect()
        };
        query_result::ResultType::RecentProgress(query_result::RecentProgressResult {
            recent_progress_json: list.iter().map(|p| p.json()).collect(),
        })
    };
    let result = match command {
        QueryCommand::Status(_) => {
            let status = query.status();
            Some(query_result::ResultType::Status(
                query_result::StatusResult {
                    status_message: status.message,
                    is_data_available: status.is_data_available,
                    is_trigger_active: status.is_trigger_active,
                    is_active: query.is_active(),
                },
            ))
        }
        QueryCommand::LastProgress(_) => Some(progress(false)),
        QueryCommand::RecentProgress(_) => Some(progress(true)),
        QueryCommand::Stop(_) => {
            query.stop();
            None
        }
        QueryCommand::ProcessAllAvailable(_) => {
            query
                .process_all_available()
                .map_err(|e| ConnectError::streaming_query(&e))?;
            None
        }
        QueryCommand::Explain(_) => Some(query_result::ResultType::Explain(
            query_result::ExplainResult {
                result: query.explain(),
            },
        )),
        QueryCommand::Exception(_) => {
            let e = query.exception();
            Some(query_result::ResultType::Exception(
                query_result::ExceptionResult {
                    exception_message: e
                        .as_ref()
                        .map(|e| format!("[{}] {}", e.class(), e.message())),
                    error_class: e.as_ref().map(|e| e.class().to_string()),
                    stack_trace: None,
                },
            ))
        }
        QueryCommand::AwaitTermination(a) => {
            let terminated = match a.timeout_ms {
                Some(ms) => query
                    .await_termination_timeout(Duration::from_millis(ms.max(0) as u64))
                    .map_err(|e| ConnectError::streaming_query(&e))?,
                None => {
                    query
                        .await_termination()
                        .map_err(|e| ConnectError::streaming_query(&e))?;
                    true
                }
            };
            Some(query_result::ResultType::AwaitTermination(
                query_result::AwaitTerminationResult { terminated },
            ))
        }
    };
    Ok(proto::StreamingQueryCommandResult {
        query_id: Some(instance_id(&query)),
        result_type: result,
    })
}

fn query_instance(query: &StreamingQuery) -> manager_result::StreamingQueryInstance {
    manager_result::StreamingQueryInstance {
        id: Some(instance_id(query)),
        name: query.name().map(str::to_string),
    }
}

/// A `spark.streams` method.
pub fn manager_command(
    session: &ConnectSession,
    cmd: &proto::StreamingQueryManagerCommand,
) -> Result<proto::StreamingQueryManagerCommandResult> {
    let command = cmd
        .command
        .as_ref()
        .ok_or_else(|| ConnectError::illegal_argument("a manager command without a command"))?;
    let queries = &session.queries;
    let result = match command {
        ManagerCommand::Active(_) => {
            let mut active: Vec<StreamingQuery> = queries
                .all()
                .into_iter()
                .filter(|q| q.is_active())
                .collect();
            active.sort_by(|a, b| a.id().cmp(b.id()));
            manager_result::ResultType::Active(manager_result::ActiveResult {
                active_queries: active.iter().map(query_instance).collect(),
            })
        }
        ManagerCommand::GetQuery(id) => {
            // Spark's `get` returns only active queries (null otherwise).
            let query = queries.get(id).ok().filter(|q| q.is_active());
            match query {
                Some(q) => manager_result::ResultType::Query(query_instance(&q)),
                None => return Ok(proto::StreamingQueryManagerCommandResult { result_type: None }),
            }
        }
        ManagerCommand::AwaitAnyTermination(a) => {
            let deadline = a
                .timeout_ms
                .map(|ms| Instant::now() + Duration::from_millis(ms.max(0) as u64));
            let terminated = loop {
                let reset = lock(&queries.reset).clone();
                let done = queries
                    .all()
                    .into_iter()
                    .find(|q| !q.is_active() && !reset.contains(q.id()));
                if let Some(q) = done {
                    if let Some(e) = q.exception() {
                        return Err(ConnectError::streaming_query(&e));
                    }
                    break true;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            manager_result::ResultType::AwaitAnyTermination(
                manager_result::AwaitAnyTerminationResult { terminated },
            )
        }
        ManagerCommand::ResetTerminated(_) => {
            let mut reset = lock(&queries.reset);
            for q in queries.all() {
                if !q.is_active() {
                    reset.insert(q.id().to_string());
                }
            }
            manager_result::ResultType::ResetTerminated(true)
        }
        // PySpark 3.5's listeners run on the server (4.x keeps them on the client, through the
        // listener bus).
        ManagerCommand::AddListener(listener) => {
            let worker = ListenerWorker::from_command(
                &python_config(session),
                &session.session_id,
                listener,
            )?;
            session
                .listener_bus
                .add_server_listener(&session.sluice, &listener.id, worker)?;
            manager_result::ResultType::AddListener(true)
        }
        ManagerCommand::RemoveListener(listener) => manager_result::ResultType::RemoveListener(
            session.listener_bus.remove_server_listener(&listener.id),
        ),
        ManagerCommand::ListListeners(_) => manager_result::ResultType::ListListeners(
            manager_result::ListStreamingQueryListenerResult {
                listener_ids: session.listener_bus.server_listeners(),
            },
        ),
    };
    Ok(proto::StreamingQueryManagerCommandResult {
        result_type: Some(result),
    })
}
