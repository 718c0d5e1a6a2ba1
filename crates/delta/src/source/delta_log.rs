//! The table's log as the source follows it: the newest version, a commit's added files (and
//! the commits that stop the query or are skipped), a version's snapshot, where a new query
//! starts, and offsets as positions in the log and the files between two of them.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::datatypes::DataType;
use serde_json::{json, Value};
use sluice::error::class;
use sluice::source::Offset;
use sluice::{Result, SluiceError};

use super::{DataFile, DeltaSource, Position, Start};
use crate::run;

impl DeltaSource {
    fn log_file(&self, version: i64) -> PathBuf {
        self.def
            .dir
            .join("_delta_log")
            .join(format!("{version:020}.json"))
    }

    /// The newest committed version (the highest `N.json` in `_delta_log`).
    pub(super) fn latest_version(&self) -> Result<i64> {
        let log = self.def.dir.join("_delta_log");
        let rd = sluice::storage::list_dir(&log).map_err(|e| {
            SluiceError::io(
                sluice::Fault::Input,
                format!("listing {}", log.display()),
                e,
            )
        })?;
        let mut latest = -1;
        for e in rd {
            if let Some(v) = e
                .name
                .strip_suffix(".json")
                .filter(|n| n.len() == 20)
                .and_then(|n| n.parse::<i64>().ok())
            {
                latest = latest.max(v);
            }
        }
        Ok(latest)
    }

    /// The data files a commit adds (in log order); none when the commit is skipped.
    fn commit_files(&self, version: i64) -> Result<Vec<DataFile>> {
        let file = self.log_file(version);
        let text = sluice::storage::read_to_string(&file).map_err(|e| {
            SluiceError::io(
                sluice::Fault::Input,
                format!("reading the Delta commit {}", file.display()),
                e,
            )
        })?;
        let (mut adds, mut removes, mut schema_change) = (Vec::new(), 0usize, false);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let action: Value = serde_json::from_str(line).map_err(|e| {
                SluiceError::input(
                    class::DELTA_TABLE_INVALID,
                    format!(
                        "the Delta commit {} is not valid JSON ({e})",
                        file.display()
                    ),
                )
            })?;
            if let Some(add) = action.get("add") {
                if add
                    .get("dataChange")
                    .and_then(Value::as_bool)
                    .unwrap_or(true)
                {
                    adds.push(data_file(add));
                }
            } else if let Some(rm) = action.get("remove") {
                if rm
                    .get("dataChange")
                    .and_then(Value::as_bool)
                    .unwrap_or(true)
                {
                    removes += 1;
                }
            } else if let Some(md) = action.get("metaData") {
                let schema = md.get("schemaString").and_then(Value::as_str).unwrap_or("");
                schema_change |= version > 0 && !schema.is_empty() && !self.same_schema(schema);
            }
        }
        if schema_change {
            return Err(SluiceError::input(
                class::DELTA_TABLE_INVALID,
                format!(
                    "the Delta table {} changed its schema at version {version}: restart the \
                     query to read the new schema (the checkpoint keeps its position)",
                    self.def.url
                ),
            ));
        }
        if removes > 0 {
            if self.def.skip_change_commits || (self.def.ignore_deletes && adds.is_empty()) {
                return Ok(Vec::new());
            }
            return Err(SluiceError::input(
                class::DELTA_TABLE_INVALID,
                format!(
                    "Detected {} data (removed files) in the Delta source {} at version \
                     {version}; a stream reads only appends. Set .option(\"ignoreDeletes\", \
                     \"true\") to skip commits that only delete, or \
                     .option(\"skipChangeCommits\", \"true\") to skip every commit that removes \
                     files",
                    if adds.is_empty() {
                        "deleted"
                    } else {
                        "updated"
                    },
                    self.def.url
                ),
            ));
        }
        Ok(adds)
    }

    fn same_schema(&self, schema_string: &str) -> bool {
        // The field names and types of the table's first schema, compared as JSON.
        let Ok(v) = serde_json::from_str::<Value>(schema_string) else {
            return false;
        };
        let names: Vec<&str> = v
            .get("fields")
            .and_then(Value::as_array)
            .map(|f| f.iter().filter_map(|x| x.get("name")?.as_str()).collect())
            .unwrap_or_default();
        names.len() == self.def.schema.fields().len()
            && names
                .iter()
                .zip(self.def.schema.fields())
                .all(|(a, b)| a == b.name())
    }

    /// The snapshot of `version`: every live data file, by modification time then path.
    fn snapshot(&mut self, version: i64) -> Result<Arc<Vec<DataFile>>> {
        if let Some(s) = self.snapshots.get(&version) {
            return Ok(s.clone());
        }
        let url = url::Url::parse(&self.def.url)
            .map_err(|e| SluiceError::internal(format!("the table URL {}: {e}", self.def.url)))?;
        let partition_columns = self.def.partition_columns.clone();
        let files = run(async move {
            let table = crate::open_table(&url, Some(version as u64))
                .await
                .map_err(|e| crate::delta_error("reading", &url, e))?;
            let state = table
                .snapshot()
                .map_err(|e| crate::delta_error("reading", &url, e))?;
            let adds = state
                .add_actions_table(true)
                .map_err(|e| crate::delta_error("reading", &url, e))?;
            let col = |name: &str| -> Option<ArrayRef> { adds.column_by_name(name).cloned() };
            let text = |a: &ArrayRef| -> Result<StringArray> {
                let c = arrow::compute::cast(a, &DataType::Utf8)
                    .map_err(|e| SluiceError::internal(format!("Delta add actions: {e}")))?;
                Ok(c.as_any()
                    .downcast_ref::<StringArray>()
                    .cloned()
                    .unwrap_or_else(|| StringArray::from(Vec::<Option<&str>>::new())))
            };
            let paths = text(&col("path").ok_or_else(|| {
                SluiceError::internal("Delta add actions without a path column")
            })?)?;
            let sizes = col("size_bytes").map(|c| text(&c)).transpose()?;
            let mtimes = col("modification_time").map(|c| text(&c)).transpose()?;
            let parts: Vec<(String, StringArray)> = partition_columns
                .iter()
                .filter_map(|p| col(&format!("partition.{p}")).map(|c| (p.clone(), c)))
                .map(|(p, c)| text(&c).map(|t| (p, t)))
                .collect::<Result<_>>()?;
            let mut files: Vec<(String, DataFile)> = (0..paths.len())
                .map(|i| {
                    let partition_values = parts
                        .iter()
                        .map(|(p, c)| (p.clone(), (!c.is_null(i)).then(|| c.value(i).to_string())))
                        .collect();
                    let mtime = mtimes
                        .as_ref()
                        .filter(|m| !m.is_null(i))
                        .map(|m| m.value(i).to_string())
                        .unwrap_or_default();
                    (
                        mtime,
                        DataFile {
                            path: paths.value(i).to_string(),
                            size: sizes
                                .as_ref()
                                .and_then(|s| s.value(i).parse().ok())
                                .unwrap_or(0),
                            partition_values,
                        },
                    )
                })
                .collect();
            files.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.path.cmp(&b.1.path)));
            Ok::<_, SluiceError>(files.into_iter().map(|(_, f)| f).collect::<Vec<_>>())
        })??;
        let files = Arc::new(files);
        self.snapshots.insert(version, files.clone());
        Ok(files)
    }

    /// The files of `pos`'s version (snapshot or commit).
    fn files_of(&mut self, version: i64, starting: bool) -> Result<Arc<Vec<DataFile>>> {
        if starting {
            self.snapshot(version)
        } else {
            Ok(Arc::new(self.commit_files(version)?))
        }
    }

    /// The position a new query starts before.
    pub(super) fn initial(&self) -> Result<Position> {
        let latest = self.latest_version()?;
        Ok(match self.def.start {
            None => Position {
                version: latest,
                index: -1,
                starting: true,
            },
            Some(Start::Latest) => Position {
                version: latest + 1,
                index: -1,
                starting: false,
            },
            Some(Start::Version(v)) => {
                if v > latest {
                    return Err(SluiceError::query(
                        class::INVALID_OPTION_VALUE,
                        format!(
                            "startingVersion {v} is after the Delta table's latest version \
                             {latest}: use a version up to {latest}, or latest"
                        ),
                    ));
                }
                Position {
                    version: v,
                    index: -1,
                    starting: false,
                }
            }
            Some(Start::Timestamp(ms)) => {
                let mut first = latest + 1;
                for v in 0..=latest {
                    let t = sluice::storage::metadata(self.log_file(v))
                        .map(|m| m.modified_ms)
                        .unwrap_or(0);
                    if t >= ms {
                        first = v;
                        break;
                    }
                }
                Position {
                    version: first,
                    index: -1,
                    starting: false,
                }
            }
        })
    }

    pub(super) fn offset(&self, p: Position) -> Offset {
        json!({
            "sourceVersion": 1,
            "reservoirId": self.def.table_id,
            "reservoirVersion": p.version,
            "index": p.index,
            "isStartingVersion": p.starting,
        })
    }

    pub(super) fn position(&self, o: &Offset) -> Result<Position> {
        let bad = || {
            SluiceError::checkpoint(
                class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                format!("{o} is not a Delta source offset"),
            )
        };
        if let Some(id) = o.get("reservoirId").and_then(Value::as_str) {
            if id != self.def.table_id {
                return Err(SluiceError::checkpoint(
                    class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                    format!(
                        "the checkpoint's Delta offsets are for table {id}, but {} is table {}: \
                         the table was re-created; start the query on a new checkpoint",
                        self.def.url, self.def.table_id
                    ),
                ));
            }
        }
        Ok(Position {
            version: o
                .get("reservoirVersion")
                .and_then(Value::as_i64)
                .ok_or_else(bad)?,
            index: o.get("index").and_then(Value::as_i64).ok_or_else(bad)?,
            starting: o
                .get("isStartingVersion")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// The files after `from`, through version `newest`, within the limits, and the position
    /// after the last one taken (walking from a snapshot into the later commits).
    pub(super) fn files_after(
        &mut self,
        from: Position,
        newest: i64,
        max_files: Option<usize>,
        max_bytes: Option<u64>,
    ) -> Result<(Vec<DataFile>, Position)> {
        let mut out: Vec<DataFile> = Vec::new();
        let mut bytes = 0u64;
        let mut pos = from;
        loop {
            if pos.version > newest {
                return Ok((out, pos));
            }
            let files = self.files_of(pos.version, pos.starting)?;
            for i in (pos.index + 1) as usize..files.len() {
                let f = &files[i];
                let full = max_files.is_some_and(|m| out.len() >= m)
                    || max_bytes.is_some_and(|m| !out.is_empty() && bytes + f.size > m);
                if full {
                    return Ok((out, pos));
                }
                bytes += f.size;
                out.push(f.clone());
                pos.index = i as i64;
            }
            // This version is read whole: on to the next commit, if there is one.
            if pos.version >= newest {
                return Ok((out, pos));
            }
            pos = Position {
                version: pos.version + 1,
                index: -1,
                starting: false,
            };
        }
    }

    /// The files in `(from, end]`.
    pub(super) fn files_between(&mut self, from: Position, end: Position) -> Result<Vec<DataFile>> {
        let mut out = Vec::new();
        let mut pos = from;
        loop {
            let at_end = pos.version == end.version && pos.starting == end.starting;
            if pos.version > end.version || (pos.version == end.version && !at_end) {
                return Err(SluiceError::checkpoint(
                    class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                    format!(
                        "the Delta source cannot reach version {} index {} from version {} \
                         index {} of {}: the checkpoint's offsets do not follow each other; \
                         start the query on a new checkpoint",
                        end.version, end.index, from.version, from.index, self.def.url
                    ),
                ));
            }
            let files = self.files_of(pos.version, pos.starting)?;
            let last = if at_end {
                end.index
            } else {
                files.len() as i64 - 1
            };
            if last >= files.len() as i64 {
                return Err(SluiceError::checkpoint(
                    class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                    format!(
                        "the checkpoint's Delta offset names file {last} of version {} of {}, \
                         which has {} files: the table's log changed under the checkpoint; \
                         start the query on a new checkpoint",
                        pos.version,
                        self.def.url,
                        files.len()
                    ),
                ));
            }
            for i in (pos.index + 1)..=last {
                out.push(files[i as usize].clone());
            }
            if at_end {
                return Ok(out);
            }
            pos = Position {
                version: pos.version + 1,
                index: -1,
                starting: false,
            };
        }
    }
}

fn data_file(add: &Value) -> DataFile {
    DataFile {
        path: add
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        size: add.get("size").and_then(Value::as_u64).unwrap_or(0),
        partition_values: add
            .get("partitionValues")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                    .collect()
            })
            .unwrap_or_default(),
    }
}
