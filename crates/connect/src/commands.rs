//! Commands (`ExecutePlan` with a `Command`): `spark.sql`, temp views, `writeStream`, the
//! query handle and `spark.streams`, cached batch frames. Each runs on a blocking thread.

use std::sync::Arc;

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::command::CommandType;
use crate::proto::execute_plan_response::ResponseType;
use crate::results::Results;
use crate::session::ConnectSession;

/// Runs one command.
pub(crate) fn run(session: &Arc<ConnectSession>, command: &proto::Command) -> Result<Results> {
    let Some(command) = &command.command_type else {
        return Err(ConnectError::illegal_argument("the command is empty"));
    };
    match command {
        CommandType::SqlCommand(sql) => sql_command(session, sql),
        CommandType::CreateDataframeView(view) => {
            let input = view.input.as_ref().ok_or_else(|| {
                ConnectError::illegal_argument("createOrReplaceTempView without a DataFrame")
            })?;
            if view.is_global {
                return Err(ConnectError::not_supported(
                    "global temporary views (use createOrReplaceTempView)",
                ));
            }
            crate::plan::create_temp_view(session, &view.name, input, view.replace)?;
            Ok(Results::none())
        }
        CommandType::WriteStreamOperationStart(op) => Ok(Results::one(
            ResponseType::WriteStreamOperationStartResult(crate::streaming::start(session, op)?),
        )),
        CommandType::StreamingQueryCommand(cmd) => {
            Ok(Results::one(ResponseType::StreamingQueryCommandResult(
                crate::streaming::query_command(session, cmd)?,
            )))
        }
        CommandType::StreamingQueryManagerCommand(cmd) => Ok(Results::one(
            ResponseType::StreamingQueryManagerCommandResult(crate::streaming::manager_command(
                session, cmd,
            )?),
        )),
        CommandType::RemoveCachedRemoteRelationCommand(cmd) => {
            if let Some(r) = &cmd.relation {
                session.uncache_frame(&r.relation_id);
            }
            Ok(Results::none())
        }
        CommandType::WriteOperation(write) => {
            save(session, write)?;
            Ok(Results::none())
        }
        CommandType::WriteOperationV2(_) => Err(ConnectError::not_supported(
            "df.writeTo (DataFrameWriterV2: Sluice has no table catalog; use df.write.save(path))",
        )),
        CommandType::RegisterFunction(_) => Err(ConnectError::not_supported(
            "Python UDFs (spark.udf.register / @udf); use the built-in functions",
        )),
        CommandType::RegisterTableFunction(_) => Err(ConnectError::not_supported(
            "Python table functions (UDTFs)",
        )),
        CommandType::RegisterDataSource(_) => {
            Err(ConnectError::not_supported("Python data sources"))
        }
        CommandType::StreamingQueryListenerBusCommand(bus) => {
            use proto::streaming_query_listener_bus_command::Command as Bus;
            // `add` streams from server.rs; anything else asks for nothing.
            if let Some(Bus::RemoveListenerBusListener(true)) = bus.command {
                session.listener_bus.close();
            }
            Ok(Results::none())
        }
        CommandType::GetResourcesCommand(_) => Ok(Results::one(
            ResponseType::GetResourcesCommandResult(proto::GetResourcesCommandResult {
                resources: Default::default(),
            }),
        )),
        CommandType::CreateResourceProfileCommand(_) => {
            Err(ConnectError::not_supported("resource profiles"))
        }
        CommandType::CheckpointCommand(_) => Err(ConnectError::not_supported(
            "df.checkpoint()/localCheckpoint() (batch lineage checkpoints)",
        )),
        CommandType::MergeIntoTableCommand(_) => Err(ConnectError::not_supported("MERGE INTO")),
        CommandType::MlCommand(_) => Err(ConnectError::not_supported("Spark ML")),
        CommandType::ExecuteExternalCommand(_) => {
            Err(ConnectError::not_supported("external commands"))
        }
        CommandType::PipelineCommand(_) => Err(ConnectError::not_supported(
            "declarative pipelines over Spark Connect (Sluice runs pipeline files: sluice run)",
        )),
        CommandType::Extension(_) => Err(ConnectError::not_supported("command extensions")),
    }
}

/// `df.write ... save(path)` (`.parquet(..)`, `.json(..)`, `.csv(..)`), with Spark's save modes.
fn save(session: &Arc<ConnectSession>, write: &proto::WriteOperation) -> Result<()> {
    use proto::write_operation::{SaveMode as Mode, SaveType};
    use sluice::sink::file::SaveMode;
    let input = write
        .input
        .as_ref()
        .ok_or_else(|| ConnectError::illegal_argument("df.write without a DataFrame"))?;
    let path = match &write.save_type {
        Some(SaveType::Path(p)) => p.clone(),
        Some(SaveType::Table(t)) => {
            return Err(ConnectError::not_supported(format!(
                "saveAsTable/insertInto ({:?}): Sluice's tables are written by \
                 writeStream.toTable for now; use df.write.save(path)",
                t.table_name
            )))
        }
        None => match write.options.get("path") {
            Some(p) => p.clone(),
            None => {
                return Err(ConnectError::illegal_argument(
                    "df.write.save() needs a path: df.write.parquet(path), or \
                     .option(\"path\", ..)",
                ))
            }
        },
    };
    if write.bucket_by.is_some() {
        return Err(ConnectError::not_supported(
            "bucketBy in df.write (write without it, or use partitionBy)",
        ));
    }
    let mut options = write.options.clone();
    if !write.partitioning_columns.is_empty() {
        options.insert(
            "partitionBy".to_string(),
            serde_json::Value::from(write.partitioning_columns.clone()).to_string(),
        );
    }
    let mode = match Mode::try_from(write.mode).unwrap_or(Mode::Unspecified) {
        Mode::Append => SaveMode::Append,
        Mode::Overwrite => SaveMode::Overwrite,
        Mode::Ignore => SaveMode::Ignore,
        Mode::ErrorIfExists | Mode::Unspecified => SaveMode::ErrorIfExists,
    };
    let format = write
        .source
        .clone()
        .unwrap_or_else(|| "parquet".to_string());
    let frame = crate::plan::frame(session, input)?;
    if frame.is_streaming() {
        return Err(ConnectError::analysis(
            sluice::error::class::WRITE_STREAM_NOT_ALLOWED,
            "'write' can not be called on streaming Dataset/DataFrame; use writeStream",
        ));
    }
    let data = sluice::BatchData {
        schema: frame.schema(),
        partitions: vec![frame.collect()?],
    };
    sluice::sink::file::save_files(std::path::Path::new(&path), &format, &options, mode, &data)?;
    Ok(())
}

/// Whether a statement is a query (its result is a relation the client keeps, planned lazily,
/// as Spark hands it back) rather than a command that runs now.
fn is_query(sql: &str) -> bool {
    let mut text = sql.trim_start();
    // Leading comments and parentheses.
    loop {
        if let Some(rest) = text.strip_prefix("--") {
            text = rest
                .split_once('\n')
                .map(|(_, r)| r)
                .unwrap_or("")
                .trim_start();
        } else if let Some(rest) = text.strip_prefix("/*") {
            text = rest
                .split_once("*/")
                .map(|(_, r)| r)
                .unwrap_or("")
                .trim_start();
        } else if let Some(rest) = text.strip_prefix('(') {
            text = rest.trim_start();
        } else {
            break;
        }
    }
    let word: String = text
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    matches!(
        word.as_str(),
        "SELECT" | "WITH" | "VALUES" | "FROM" | "TABLE"
    )
}

/// `spark.sql(..)`: a query comes back as a `Sql` relation the client builds on; a command
/// (SET, CREATE VIEW, DROP VIEW, ...) runs now and its rows come back as a local relation.
#[allow(deprecated)] // the client sends `input`; the older fields are read when it does not
fn sql_command(session: &Arc<ConnectSession>, sql: &proto::SqlCommand) -> Result<Results> {
    let relation = match &sql.input {
        Some(input) => input.clone(),
        None => proto::Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
                query: sql.sql.clone(),
                args: sql.args.clone(),
                pos_args: sql.pos_args.clone(),
                named_arguments: sql.named_arguments.clone(),
                pos_arguments: sql.pos_arguments.clone(),
            })),
        },
    };
    let query = match &relation.rel_type {
        Some(proto::relation::RelType::Sql(s)) => is_query(&s.query),
        _ => true,
    };
    let relation = if query {
        // Checked now, as Spark analyses it now: a bad query fails at spark.sql(..).
        crate::plan::frame(session, &relation)?;
        relation
    } else {
        let frame = crate::plan::frame(session, &relation)?;
        let schema = frame.schema();
        let batches = if frame.is_streaming() {
            Vec::new()
        } else {
            frame.collect()?
        };
        let data = crate::ipc::write_batches(&schema, &batches)?;
        proto::Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::LocalRelation(
                proto::LocalRelation {
                    data: Some(data.into()),
                    schema: None,
                },
            )),
        }
    };
    Ok(Results::one(ResponseType::SqlCommandResult(
        proto::execute_plan_response::SqlCommandResult {
            relation: Some(relation),
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::is_query;

    #[test]
    fn queries_are_told_from_commands() {
        assert!(is_query("SELECT 1"));
        assert!(is_query("  -- c\n (select * from t)"));
        assert!(is_query("/* x */ WITH a AS (SELECT 1) SELECT * FROM a"));
        assert!(!is_query("SET spark.sql.shuffle.partitions=2"));
        assert!(!is_query("CREATE TEMP VIEW v AS SELECT 1"));
        assert!(!is_query("DROP VIEW v"));
    }
}
