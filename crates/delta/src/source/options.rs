//! The `delta` format's factory: a stream's options read and checked (`maxFilesPerTrigger`,
//! `maxBytesPerTrigger`, `startingVersion`, `startingTimestamp`, `ignoreDeletes`,
//! `skipChangeCommits`) against the table's schema and id, into a [`DeltaSourceProvider`].

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Schema, SchemaRef, TimeUnit};
use sluice::error::class;
use sluice::formats::source::SourceFactory;
use sluice::source::SourceProvider;
use sluice::{Result, SluiceError};

use super::DeltaSourceProvider;
use crate::{bool_option, option, run, table_url};

#[derive(Debug)]
pub(crate) struct DeltaSourceFactory;

impl SourceFactory for DeltaSourceFactory {
    fn create(
        &self,
        path: &str,
        schema: Option<SchemaRef>,
        options: &HashMap<String, String>,
    ) -> Result<Arc<dyn SourceProvider>> {
        let path = if path.trim().is_empty() {
            option(options, "path").unwrap_or("")
        } else {
            path
        };
        let url = table_url(path)?;
        let dir = crate::table_dir(&url);
        let (table_schema, table_id, partition_columns) = {
            let url = url.clone();
            run(async move {
                let table = crate::open_table(&url, None).await.map_err(|e| {
                    SluiceError::query(
                        class::DELTA_TABLE_INVALID,
                        format!(
                            "{url} is not a Delta table ({e}): stream from a folder with a \
                             _delta_log, written by a Delta writer first"
                        ),
                    )
                })?;
                let state = table
                    .snapshot()
                    .map_err(|e| crate::delta_error("reading", &url, e))?;
                let metadata = state.metadata();
                Ok::<_, SluiceError>((
                    sluice_schema(&state.snapshot().arrow_schema()),
                    metadata.id().to_string(),
                    metadata.partition_columns().to_vec(),
                ))
            })??
        };
        if let Some(user) = &schema {
            let theirs = sluice::schema::schema_to_ddl(&table_schema);
            if sluice::schema::schema_to_ddl(user) != theirs {
                return Err(SluiceError::query(
                    class::DELTA_TABLE_INVALID,
                    format!(
                        "a Delta table has its own schema ({theirs}); the reader's schema differs: \
                         leave .schema(..) out"
                    ),
                ));
            }
        }
        let max_files = match option(options, "maxFilesPerTrigger") {
            None => Some(1000),
            Some(v) => Some(positive(v, "maxFilesPerTrigger")? as usize),
        };
        let max_bytes = option(options, "maxBytesPerTrigger")
            .map(|v| positive(v, "maxBytesPerTrigger"))
            .transpose()?;
        let starting_version = match option(options, "startingVersion") {
            None => None,
            Some(v) if v.trim().eq_ignore_ascii_case("latest") => Some(Start::Latest),
            Some(v) => Some(Start::Version(v.trim().parse::<i64>().map_err(|_| {
                SluiceError::query(
                    class::INVALID_OPTION_VALUE,
                    format!("startingVersion must be a version number or latest, got {v:?}"),
                )
            })?)),
        };
        let starting_timestamp = option(options, "startingTimestamp")
            .map(|t| parse_timestamp_ms(t.trim()))
            .transpose()?;
        if starting_version.is_some() && starting_timestamp.is_some() {
            return Err(SluiceError::query(
                class::INVALID_OPTION_VALUE,
                "give startingVersion or startingTimestamp, not both",
            ));
        }
        Ok(Arc::new(DeltaSourceProvider {
            dir,
            url: url.to_string(),
            schema: table_schema,
            table_id,
            partition_columns,
            max_files,
            max_bytes,
            start: match (starting_version, starting_timestamp) {
                (Some(s), _) => Some(s),
                (_, Some(ms)) => Some(Start::Timestamp(ms)),
                _ => None,
            },
            ignore_deletes: bool_option(options, "ignoreDeletes")?,
            skip_change_commits: bool_option(options, "skipChangeCommits")?
                || bool_option(options, "ignoreChanges")?,
        }))
    }
}

fn positive(v: &str, key: &str) -> Result<u64> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            SluiceError::query(
                class::INVALID_OPTION_VALUE,
                format!("option {key} must be a positive whole number, got {v:?}"),
            )
        })
}

/// `2026-02-14`, `2026-02-14 10:00:00` or `2026-02-14T10:00:00Z` (UTC) in milliseconds.
fn parse_timestamp_ms(s: &str) -> Result<i64> {
    let bad = || {
        SluiceError::query(
            class::INVALID_OPTION_VALUE,
            format!("startingTimestamp {s:?} is not a timestamp: write 2026-02-14 10:00:00"),
        )
    };
    let t = s.trim_end_matches('Z').replace('T', " ");
    for f in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(d) = chrono::NaiveDateTime::parse_from_str(&t, f) {
            return Ok(d.and_utc().timestamp_millis());
        }
    }
    chrono::NaiveDate::parse_from_str(&t, "%Y-%m-%d")
        .map(|d| {
            d.and_hms_opt(0, 0, 0)
                .map(|x| x.and_utc().timestamp_millis())
        })
        .ok()
        .flatten()
        .ok_or_else(bad)
}

/// The table's schema in Sluice's types: timestamps (Delta `timestamp` and `timestamp_ntz`)
/// as UTC microseconds without a zone, as Sluice's `TIMESTAMP`.
fn sluice_schema(schema: &SchemaRef) -> SchemaRef {
    fn t(d: &DataType) -> DataType {
        match d {
            DataType::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Microsecond, None),
            DataType::Struct(fs) => DataType::Struct(
                fs.iter()
                    .map(|f| f.as_ref().clone().with_data_type(t(f.data_type())))
                    .collect(),
            ),
            DataType::List(f) => DataType::List(Arc::new(
                f.as_ref().clone().with_data_type(t(f.data_type())),
            )),
            other => other.clone(),
        }
    }
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_data_type(t(f.data_type())))
            .collect::<Vec<_>>(),
    ))
}

/// Where a new query starts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Start {
    Version(i64),
    Latest,
    Timestamp(i64),
}
