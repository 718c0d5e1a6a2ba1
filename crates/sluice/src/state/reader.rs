//! Reading a checkpoint's state from outside the query (what Spark 4's state data source
//! does; `sluice state read`): which operators and versions are on disk, and the live pairs of
//! one operator as of a committed batch, decoded into an Arrow [`RecordBatch`] with columns
//! `partition`, the key columns and the value columns.
//!
//! Everything here only reads. Stores are opened with
//! [`DefaultStateStoreProvider::open_read_only`] (no temporary-file cleanup, no commits, no
//! maintenance) and loaded with the engine's own loader, so the file format lives in one place.
//!
//! # Versions and batches
//!
//! Batch `b` reads state version `b` and commits version `b + 1` (see the
//! [module doc](crate::state)), so the state *as of committed batch `b`* is version `b + 1`.
//! A version can be read while its files are on disk: the newest snapshot at or below it and
//! every delta after that snapshot (maintenance purges older files).
//!
//! # Decoding
//!
//! The operator's recorded schema (`state/<op>/_metadata/schema`, a
//! [`StateSchema`]) names the operator and its key and value fields. Each field's exact Arrow
//! type is its `arrowType` (recorded since state inspection exists); for schema files without
//! it, the type is rebuilt from the Spark type name (`BIGINT`, `STRUCT<start: TIMESTAMP, ..>`).
//! Every decoded row is encoded again and compared with the stored bytes, so a type that does
//! not fit is an error, never wrong values.
//!
//! | operator (schema `operator`) | key | value |
//! |---|---|---|
//! | `stateStoreSave` (aggregation, windows and session windows included) | grouping columns (arrow row format) | the accumulators' state fields (arrow row format), e.g. `count[count]` |
//! | `dedupe` | the deduplication columns | none |
//! | `dedupeWithinWatermark` | the deduplication columns | `expiresAtMicros` |
//! | `flatMapGroupsWithState` | the grouping columns | `timeoutTimestampMs`, `groupState` (the user's state as JSON) |
//! | `symmetricHashJoin ..` (stream-stream join) | `side` (`left`/`right`), the join-key columns (arrow row format), `seq` (the row's sequence number) | `matched`, then the left side's fields and the right side's fields (arrow row format of the row's own side; the other side's columns are null) |
//!
//! A join's value schema is the left fields followed by the right fields; where the left ones
//! end is the schema's `leftFields`. Join schema files written before it was recorded are
//! refused with `SLUICE_NOT_SUPPORTED_YET` (the file is written once, when the operator first
//! runs, and is not rewritten on restart).

use crate::error::class;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{
    new_null_array, ArrayRef, BooleanBuilder, Int64Builder, RecordBatch, StringBuilder,
    UInt32Array, UInt64Builder,
};
use arrow::compute::interleave;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use serde::Serialize;

use super::files::FileIndex;
use super::{DefaultStateStoreProvider, StateStoreConf, StateStoreId, StateStoreProvider};
use crate::checkpoint::CheckpointDir;
use crate::error::{Result, SluiceError};
use crate::state::schema::{StateField, StateSchema};

/// Error class: no such stateful operator in the checkpoint.
/// Error class: the batch asked for is not committed (or nothing is committed yet).
/// Error class: the batch is committed but its state version is no longer (or not) on disk.
/// Error class: the stored pairs do not decode with the recorded schema.
/// Error class: the directory is not a query checkpoint.

/// `fmgws`' marker for "no timeout" in the first 8 bytes of a value.
const NO_TIMEOUT: i64 = i64::MIN;

/// An inclusive range of versions or batch ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IdRange {
    pub first: u64,
    pub last: u64,
}

impl fmt::Display for IdRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// Collapses ascending ids into ranges.
pub fn to_ranges(ids: impl IntoIterator<Item = u64>) -> Vec<IdRange> {
    let mut out: Vec<IdRange> = Vec::new();
    for id in ids {
        match out.last_mut() {
            Some(r) if r.last.checked_add(1) == Some(id) => r.last = id,
            Some(r) if r.last == id => {}
            _ => out.push(IdRange {
                first: id,
                last: id,
            }),
        }
    }
    out
}

/// `1-4, 7` (or `none`).
pub fn format_ranges(ranges: &[IdRange]) -> String {
    if ranges.is_empty() {
        return "none".into();
    }
    ranges
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The state files of one store directory (`state/<op>/<partition>/`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreVersions {
    /// Versions with a `<v>.delta`, ascending.
    pub deltas: BTreeSet<u64>,
    /// Versions with a `<v>.snapshot`, ascending.
    pub snapshots: BTreeSet<u64>,
}

impl StoreVersions {
    /// Lists a store directory (a missing directory has no versions). Only reads.
    pub fn list(dir: &Path) -> Result<Self> {
        let index = FileIndex::list(dir)?;
        Ok(Self {
            deltas: index.deltas,
            snapshots: index.snapshots,
        })
    }

    /// The newest version with a file (0 when there is none).
    pub fn latest(&self) -> u64 {
        let d = self.deltas.last().copied().unwrap_or(0);
        let s = self.snapshots.last().copied().unwrap_or(0);
        d.max(s)
    }

    /// The versions (>= 1) that can be loaded from these files, as the engine loads them: the
    /// newest snapshot at or below the version, then every delta after it.
    pub fn loadable(&self) -> Vec<IdRange> {
        let mut ok = Vec::new();
        // loadable(v) = snapshot at v, or delta v and loadable(v - 1); version 0 is the empty map.
        let mut previous = true;
        for v in 1..=self.latest() {
            let now = self.snapshots.contains(&v) || (previous && self.deltas.contains(&v));
            if now {
                ok.push(v);
            }
            previous = now;
        }
        to_ranges(ok)
    }
}

/// Checks that `dir` looks like a query checkpoint: it exists and holds `metadata`,
/// `offsets/` or `commits/`.
pub fn check_is_checkpoint(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        return Err(SluiceError::checkpoint(
            class::CHECKPOINT_NOT_FOUND,
            format!(
                "{} is not a directory{}: pass the checkpointLocation of a query (the directory \
                 that holds metadata, offsets/ and commits/)",
                dir.display(),
                if dir.exists() {
                    ""
                } else {
                    " (it does not exist)"
                }
            ),
        ));
    }
    let d = CheckpointDir::new(dir);
    if !d.metadata_file().is_file() && !d.offsets_dir().is_dir() && !d.commits_dir().is_dir() {
        return Err(SluiceError::checkpoint(
            class::CHECKPOINT_NOT_FOUND,
            format!(
                "{} is not a query checkpoint: it has no metadata file and no offsets/ or \
                 commits/ log. Pass the checkpointLocation of a query (the directory that holds \
                 metadata, offsets/ and commits/)",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// The decimal-named subdirectories of `dir`, ascending (a missing directory has none).
fn numeric_subdirs(dir: &Path) -> Result<Vec<u32>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(super::files::io_err(
                format!("listing {}", dir.display()),
                e,
            ))
        }
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| super::files::io_err(format!("listing {}", dir.display()), e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if !entry.path().is_dir() {
            continue;
        }
        if let Ok(id) = name.parse::<u32>() {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// The stateful operator ids with a directory under `<checkpoint>/state/`, ascending.
pub fn list_operators(checkpoint: &Path) -> Result<Vec<u32>> {
    numeric_subdirs(&CheckpointDir::new(checkpoint).state_dir())
}

/// `<checkpoint>/state/<operator>`.
pub fn operator_dir(checkpoint: &Path, operator_id: u32) -> PathBuf {
    CheckpointDir::new(checkpoint)
        .state_dir()
        .join(operator_id.to_string())
}

/// The partitions of an operator: the decimal subdirectories of `state/<op>/`, ascending.
pub fn list_partitions(checkpoint: &Path, operator_id: u32) -> Result<Vec<u32>> {
    numeric_subdirs(&operator_dir(checkpoint, operator_id))
}

/// Reads `state/<op>/_metadata/schema`; `None` when the file does not exist.
pub fn read_state_schema(checkpoint: &Path, operator_id: u32) -> Result<Option<StateSchema>> {
    let file = operator_dir(checkpoint, operator_id)
        .join("_metadata")
        .join("schema");
    match std::fs::read(&file) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            SluiceError::checkpoint(
                class::CHECKPOINT_CORRUPT_LOG,
                format!(
                    "{} is not a Sluice state schema ({e}); restore it, or start the query with a \
                     new checkpoint location",
                    file.display()
                ),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(super::files::io_err(
            format!("reading {}", file.display()),
            e,
        )),
    }
}

/// The operator's name in a recorded schema: `0 (stateStoreSave)` -> `stateStoreSave`,
/// `1 (symmetricHashJoin Inner)` -> `symmetricHashJoin Inner`.
pub fn operator_name(schema: &StateSchema) -> &str {
    let s = schema.operator.as_str();
    match (s.find('('), s.rfind(')')) {
        (Some(open), Some(close)) if open < close => &s[open + 1..close],
        _ => s,
    }
}

/// The committed batches whose state (version `batch + 1`) can be loaded in every partition of
/// the operator, up to `last_committed`.
pub fn readable_batches(
    checkpoint: &Path,
    operator_id: u32,
    last_committed: Option<u64>,
) -> Result<Vec<IdRange>> {
    let Some(last) = last_committed else {
        return Ok(Vec::new());
    };
    let partitions = list_partitions(checkpoint, operator_id)?;
    if partitions.is_empty() {
        return Ok(Vec::new());
    }
    let mut common: Option<BTreeSet<u64>> = None;
    for p in partitions {
        let dir = StateStoreId::new(checkpoint, operator_id, p).dir();
        let versions: BTreeSet<u64> = StoreVersions::list(&dir)?
            .loadable()
            .iter()
            .flat_map(|r| r.first..=r.last)
            .collect();
        common = Some(match common {
            None => versions,
            Some(c) => c.intersection(&versions).copied().collect(),
        });
    }
    Ok(to_ranges(
        common
            .unwrap_or_default()
            .into_iter()
            .map(|v| v - 1)
            .filter(|b| *b <= last),
    ))
}

/// The state of one operator as of one committed batch.
#[derive(Debug, Clone)]
pub struct StateSnapshot {
    pub operator_id: u32,
    /// The operator's name from its schema (`stateStoreSave`, `dedupe`, ...).
    pub operator_name: String,
    /// The committed batch the state is as of.
    pub batch_id: u64,
    /// The state version read (`batch_id + 1`).
    pub version: u64,
    /// The number of partitions (state stores) read.
    pub partitions: usize,
    /// `partition`, the key columns, the value columns; one row per live key, by partition and
    /// then in key order (a stream-stream join: one row per stored row of either side, see the
    /// [module doc](self)).
    pub rows: RecordBatch,
}

impl StateSnapshot {
    /// A one-line header and the rows as an arrow pretty-printed table.
    pub fn to_table(&self) -> Result<String> {
        let table = arrow::util::pretty::pretty_format_batches(std::slice::from_ref(&self.rows))?;
        Ok(format!(
            "state of operator {} ({}) as of batch {} (state version {}), {} partition(s), {} \
             row(s)\n{table}\n",
            self.operator_id,
            self.operator_name,
            self.batch_id,
            self.version,
            self.partitions,
            self.rows.num_rows()
        ))
    }

    /// The rows as JSON lines (one object per row; timestamps as strings, a window as an
    /// object with `start` and `end`).
    pub fn to_json_lines(&self) -> Result<Vec<u8>> {
        let mut w = arrow::json::LineDelimitedWriter::new(Vec::new());
        w.write(&self.rows)?;
        w.finish()?;
        Ok(w.into_inner())
    }
}

/// Reads the state of operator `operator_id` as of committed batch `batch_id` (default: the
/// last committed batch) from the checkpoint at `checkpoint`, without writing anything there.
///
/// Errors (each names the path and what to do): `class::CHECKPOINT_NOT_FOUND` (not a checkpoint),
/// `class::STATE_OPERATOR_NOT_FOUND` (lists the operators there), `class::STATE_BATCH_NOT_COMMITTED` and
/// `class::STATE_VERSION_NOT_AVAILABLE` (list the batches whose state can be read),
/// `SLUICE_NOT_SUPPORTED_YET` for operators whose state cannot be decoded (unknown operators,
/// and stream-stream joins whose schema file has no `leftFields`), `class::STATE_DECODE_FAILED` when
/// the pairs do not decode with the recorded schema.
pub fn read_state(
    checkpoint: &Path,
    operator_id: u32,
    batch_id: Option<u64>,
) -> Result<StateSnapshot> {
    check_is_checkpoint(checkpoint)?;
    let operators = list_operators(checkpoint)?;
    let schema = match read_state_schema(checkpoint, operator_id)? {
        Some(s) if operators.contains(&operator_id) => s,
        _ => {
            let state = CheckpointDir::new(checkpoint).state_dir();
            return Err(SluiceError::checkpoint(
                class::STATE_OPERATOR_NOT_FOUND,
                if operators.is_empty() {
                    format!(
                        "the checkpoint {} has no stateful operator (no {}): its query keeps no \
                         state",
                        checkpoint.display(),
                        state.display()
                    )
                } else {
                    format!(
                        "the checkpoint {} has no stateful operator {operator_id} (no schema at \
                         {}); its operators are {}. Pass one of them with --operator",
                        checkpoint.display(),
                        operator_dir(checkpoint, operator_id)
                            .join("_metadata")
                            .join("schema")
                            .display(),
                        operators
                            .iter()
                            .map(|o| o.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            ));
        }
    };
    let decoder = StateDecoder::new(&schema)?;
    let last_committed = CheckpointDir::new(checkpoint).commit_log().latest_id()?;
    let readable = readable_batches(checkpoint, operator_id, last_committed)?;
    let readable_text = || {
        if readable.is_empty() {
            "no batch's state can be read".to_string()
        } else {
            format!(
                "the state can be read as of batches {}",
                format_ranges(&readable)
            )
        }
    };
    let batch_id = match (batch_id, last_committed) {
        (_, None) => {
            return Err(SluiceError::checkpoint(
                class::STATE_BATCH_NOT_COMMITTED,
                format!(
                    "no batch of the checkpoint {} is committed yet (commits/ is empty): there is \
                     no state to read. Run the query until it commits a batch",
                    checkpoint.display()
                ),
            ))
        }
        (Some(b), Some(last)) if b > last => {
            return Err(SluiceError::checkpoint(
                class::STATE_BATCH_NOT_COMMITTED,
                format!(
                    "batch {b} of the checkpoint {} is not committed (the last committed batch is \
                     {last}); {}. Pass one of them with --batch",
                    checkpoint.display(),
                    readable_text()
                ),
            ))
        }
        (Some(b), Some(_)) => b,
        (None, Some(last)) => last,
    };
    let version = batch_id + 1;
    let partitions = list_partitions(checkpoint, operator_id)?;
    if !readable
        .iter()
        .any(|r| r.first <= batch_id && batch_id <= r.last)
    {
        return Err(SluiceError::checkpoint(
            class::STATE_VERSION_NOT_AVAILABLE,
            format!(
                "the state of operator {operator_id} as of batch {batch_id} (version {version}) \
                 is not on disk under {} (its files were purged by maintenance, or the operator \
                 did not run in that batch); {}. Pass one of them with --batch",
                operator_dir(checkpoint, operator_id).display(),
                readable_text()
            ),
        ));
    }
    let mut part_ids: Vec<u32> = Vec::new();
    let mut keys: Vec<Box<[u8]>> = Vec::new();
    let mut values: Vec<Box<[u8]>> = Vec::new();
    for p in &partitions {
        let mut provider = DefaultStateStoreProvider::open_read_only(
            StateStoreId::new(checkpoint, operator_id, *p),
            StateStoreConf::default(),
        )?;
        let store = provider.get_store(version)?;
        for (k, v) in store.iter() {
            part_ids.push(*p);
            keys.push(k.into());
            values.push(v.into());
        }
    }
    let rows = decoder.decode(&part_ids, &keys, &values).map_err(|e| {
        e.context(format!(
            "operator {operator_id} in {}",
            checkpoint.display()
        ))
    })?;
    Ok(StateSnapshot {
        operator_id,
        operator_name: operator_name(&schema).to_string(),
        batch_id,
        version,
        partitions: partitions.len(),
        rows,
    })
}

/// How one operator's values are laid out.
enum ValueLayout {
    /// Arrow row format of the value fields (aggregation: accumulator states).
    Rows(RowConverter),
    /// No value (deduplication).
    Empty,
    /// One little-endian i64 (deduplication within watermark: the expiry in µs).
    I64,
    /// Timeout (i64 LE, `i64::MIN` = none) + the user's state as JSON (flatMapGroupsWithState).
    GroupState,
    /// Stream-stream join: keys are `side (u8) + u32 LE length + join-key row + u64 BE
    /// sequence`, values `matched (u8) + that side's row` (arrow row format of its fields).
    Join {
        left: RowConverter,
        right: RowConverter,
        left_types: Vec<DataType>,
        right_types: Vec<DataType>,
    },
}

/// Decodes one operator's stored pairs into rows, from its recorded [`StateSchema`].
pub struct StateDecoder {
    operator: String,
    keys: Option<RowConverter>,
    values: ValueLayout,
    schema: SchemaRef,
    /// Whether every type came from a recorded `arrowType` (for error messages).
    exact_types: bool,
}

impl fmt::Debug for StateDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDecoder")
            .field("operator", &self.operator)
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl StateDecoder {
    /// A decoder for the operator the schema describes. Stream-stream joins whose schema does
    /// not record where the left side's fields end (`leftFields`, absent in files written
    /// before it was recorded) are `SLUICE_NOT_SUPPORTED_YET`, as are operators this build does
    /// not know.
    pub fn new(schema: &StateSchema) -> Result<Self> {
        let name = operator_name(schema);
        let base = name.split_whitespace().next().unwrap_or("");
        let key_types = field_types(&schema.key_schema)?;
        let mut exact_types = all_exact(&schema.key_schema);
        let keys = if key_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                key_types
                    .iter()
                    .map(|t| SortField::new(t.clone()))
                    .collect(),
            )?)
        };
        let mut fields: Vec<Field> = vec![Field::new("partition", DataType::UInt32, false)];
        for (f, t) in schema.key_schema.iter().zip(&key_types) {
            fields.push(Field::new(&f.name, t.clone(), true));
        }
        let values = match base {
            "stateStoreSave" => {
                let types = field_types(&schema.value_schema)?;
                exact_types &= all_exact(&schema.value_schema);
                for (f, t) in schema.value_schema.iter().zip(&types) {
                    fields.push(Field::new(&f.name, t.clone(), true));
                }
                ValueLayout::Rows(RowConverter::new(
                    types.into_iter().map(SortField::new).collect(),
                )?)
            }
            "dedupe" => ValueLayout::Empty,
            "dedupeWithinWatermark" => {
                let name = schema
                    .value_schema
                    .first()
                    .map_or("expiresAtMicros", |f| f.name.as_str());
                fields.push(Field::new(name, DataType::Int64, true));
                ValueLayout::I64
            }
            "flatMapGroupsWithState" => {
                fields.push(Field::new("timeoutTimestampMs", DataType::Int64, true));
                fields.push(Field::new("groupState", DataType::Utf8, true));
                ValueLayout::GroupState
            }
            "symmetricHashJoin" => {
                let Some(left_len) = schema.left_fields else {
                    return Err(SluiceError::not_supported_yet(format!(
                        "reading the state of the stream-stream join operator {:?}: its schema \
                         file predates Sluice recording where the left side's fields end in the \
                         value schema (`leftFields`), so the rows of the two sides cannot be \
                         decoded. The schema file is written once, when the operator first runs, \
                         and restarting the query on this checkpoint does not rewrite it: run the \
                         query with this build on a new checkpoint location to inspect its join \
                         state; `sluice checkpoint describe` shows this one's schema and versions",
                        schema.operator
                    )));
                };
                if left_len > schema.value_schema.len() {
                    return Err(SluiceError::checkpoint(
                        class::STATE_DECODE_FAILED,
                        format!(
                            "the schema of the stream-stream join operator {:?} records {left_len} \
                             left-side fields but only {} value fields: restore the checkpoint, \
                             or start the query with a new checkpoint location",
                            schema.operator,
                            schema.value_schema.len()
                        ),
                    ));
                }
                let types = field_types(&schema.value_schema)?;
                exact_types &= all_exact(&schema.value_schema);
                // partition, side, the key columns, seq, matched, left fields, right fields.
                fields.insert(1, Field::new("side", DataType::Utf8, false));
                fields.push(Field::new("seq", DataType::UInt64, false));
                fields.push(Field::new("matched", DataType::Boolean, false));
                for (f, t) in schema.value_schema.iter().zip(&types) {
                    fields.push(Field::new(&f.name, t.clone(), true));
                }
                let conv = |ts: &[DataType]| {
                    RowConverter::new(ts.iter().map(|t| SortField::new(t.clone())).collect())
                };
                ValueLayout::Join {
                    left: conv(&types[..left_len])?,
                    right: conv(&types[left_len..])?,
                    left_types: types[..left_len].to_vec(),
                    right_types: types[left_len..].to_vec(),
                }
            }
            _ => {
                return Err(SluiceError::not_supported_yet(format!(
                    "reading the state of operator {:?}: this build does not know how it encodes \
                     its state",
                    schema.operator
                )))
            }
        };
        Ok(Self {
            operator: schema.operator.clone(),
            keys,
            values,
            schema: Arc::new(Schema::new(unique_names(fields))),
            exact_types,
        })
    }

    /// The schema of [`decode`](Self::decode)'s batches: `partition`, keys, values (for a
    /// join: `partition`, `side`, keys, `seq`, `matched`, left fields, right fields).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn failed(&self, detail: impl fmt::Display) -> SluiceError {
        let hint = if self.exact_types {
            "the state files do not match the recorded schema: restore the checkpoint, or start \
             the query with a new checkpoint location"
        } else {
            "the schema file was written before Sluice recorded exact Arrow types, and the types \
             rebuilt from the Spark type names do not fit; run the query once with this build \
             on a new checkpoint location to inspect its state"
        };
        SluiceError::checkpoint(
            class::STATE_DECODE_FAILED,
            format!(
                "the state of operator {:?} does not decode with its recorded schema ({detail}): \
                 {hint}",
                self.operator
            ),
        )
    }

    /// Decodes pairs (with the partition each came from) into one batch.
    pub fn decode(
        &self,
        partitions: &[u32],
        keys: &[Box<[u8]>],
        values: &[Box<[u8]>],
    ) -> Result<RecordBatch> {
        if partitions.len() != keys.len() || keys.len() != values.len() {
            return Err(SluiceError::internal("decode: lengths differ"));
        }
        if let ValueLayout::Join {
            left,
            right,
            left_types,
            right_types,
        } = &self.values
        {
            return self.decode_join(
                partitions,
                keys,
                values,
                [(left, left_types), (right, right_types)],
            );
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(partitions.to_vec()))];
        if let Some(conv) = &self.keys {
            columns.extend(self.decode_rows(conv, keys, "key")?);
        } else if let Some(i) = keys.iter().position(|k| !k.is_empty()) {
            return Err(self.failed(format!(
                "the operator has no key columns but key {i} has {} bytes",
                keys[i].len()
            )));
        }
        match &self.values {
            ValueLayout::Rows(conv) => columns.extend(self.decode_rows(conv, values, "value")?),
            ValueLayout::Empty => {}
            ValueLayout::I64 => {
                let mut b = Int64Builder::with_capacity(values.len());
                for v in values {
                    let bytes: [u8; 8] = (**v)
                        .try_into()
                        .map_err(|_| self.failed(format!("a value of {} bytes, not 8", v.len())))?;
                    b.append_value(i64::from_le_bytes(bytes));
                }
                columns.push(Arc::new(b.finish()));
            }
            ValueLayout::Join { .. } => return Err(SluiceError::internal("decode: join layout")),
            ValueLayout::GroupState => {
                let mut timeouts = Int64Builder::with_capacity(values.len());
                let mut states = StringBuilder::new();
                for v in values {
                    let (t, json) = v
                        .split_first_chunk::<8>()
                        .ok_or_else(|| self.failed(format!("a value of {} bytes", v.len())))?;
                    let t = i64::from_le_bytes(*t);
                    timeouts.append_option((t != NO_TIMEOUT).then_some(t));
                    if json.is_empty() {
                        states.append_null();
                    } else {
                        let text = std::str::from_utf8(json)
                            .map_err(|e| self.failed(format!("a group state is not UTF-8: {e}")))?;
                        states.append_value(text);
                    }
                }
                columns.push(Arc::new(timeouts.finish()));
                columns.push(Arc::new(states.finish()));
            }
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Decodes stream-stream join pairs: one row per stored row of either side, with the other
    /// side's columns null.
    fn decode_join(
        &self,
        partitions: &[u32],
        keys: &[Box<[u8]>],
        values: &[Box<[u8]>],
        sides: [(&RowConverter, &Vec<DataType>); 2],
    ) -> Result<RecordBatch> {
        let n = keys.len();
        let mut side_names = StringBuilder::new();
        let mut seqs = UInt64Builder::with_capacity(n);
        let mut matched = BooleanBuilder::with_capacity(n);
        let mut join_keys: Vec<Box<[u8]>> = Vec::with_capacity(n);
        let mut rows: [Vec<Box<[u8]>>; 2] = [Vec::new(), Vec::new()];
        // Per stored row: (side, index among that side's rows).
        let mut at: Vec<(usize, usize)> = Vec::with_capacity(n);
        for (i, (k, v)) in keys.iter().zip(values).enumerate() {
            let (side, key, seq) = parse_join_key(k).ok_or_else(|| {
                self.failed(format!(
                    "key {i} ({} bytes) is not side + length + join key + sequence",
                    k.len()
                ))
            })?;
            let (flag, row) = v
                .split_first()
                .ok_or_else(|| self.failed(format!("value {i} is empty")))?;
            if *flag > 1 {
                return Err(self.failed(format!("value {i} has matched flag {flag}, not 0 or 1")));
            }
            side_names.append_value(if side == 0 { "left" } else { "right" });
            seqs.append_value(seq);
            matched.append_value(*flag == 1);
            join_keys.push(key.into());
            at.push((side as usize, rows[side as usize].len()));
            rows[side as usize].push(row.into());
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(partitions.to_vec())),
            Arc::new(side_names.finish()),
        ];
        match &self.keys {
            Some(conv) => columns.extend(self.decode_rows(conv, &join_keys, "join key")?),
            None => return Err(self.failed("the join's schema records no key fields")),
        }
        columns.push(Arc::new(seqs.finish()));
        columns.push(Arc::new(matched.finish()));
        for (s, (conv, types)) in sides.into_iter().enumerate() {
            let what = if s == 0 { "left row" } else { "right row" };
            let decoded = self.decode_rows(conv, &rows[s], what)?;
            for (col, t) in decoded.iter().zip(types.iter()) {
                // Source 0: this side's rows; source 1: one null for the other side's rows.
                let null = new_null_array(t, 1);
                let indices: Vec<(usize, usize)> = at
                    .iter()
                    .map(|(side, j)| if *side == s { (0, *j) } else { (1, 0) })
                    .collect();
                columns.push(interleave(&[col.as_ref(), null.as_ref()], &indices)?);
            }
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Decodes row-format bytes and checks that they encode back to the same bytes.
    fn decode_rows(
        &self,
        conv: &RowConverter,
        rows: &[Box<[u8]>],
        what: &str,
    ) -> Result<Vec<ArrayRef>> {
        if rows.is_empty() {
            // Empty arrays of the converter's types.
            return Ok(conv.convert_rows(std::iter::empty())?);
        }
        let parser = conv.parser();
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            conv.convert_rows(rows.iter().map(|r| parser.parse(r)))
        }))
        .map_err(|_| self.failed(format!("a {what} is not in the recorded types' row format")))?
        .map_err(|e| self.failed(format!("{what}: {e}")))?;
        if decoded.is_empty() {
            // No fields: every row must be empty.
            return match rows.iter().position(|r| !r.is_empty()) {
                Some(i) => Err(self.failed(format!(
                    "{what} {i} has {} bytes but the recorded schema has no fields for it",
                    rows[i].len()
                ))),
                None => Ok(decoded),
            };
        }
        let again = conv
            .convert_columns(&decoded)
            .map_err(|e| self.failed(format!("{what}: {e}")))?;
        for (i, r) in rows.iter().enumerate() {
            if again.row(i).data() != &**r {
                return Err(self.failed(format!(
                    "{what} {i} decodes to values that encode differently"
                )));
            }
        }
        Ok(decoded)
    }
}

/// A stream-stream join state key (as `StreamingJoin` writes it): `side (u8: 0 left, 1 right)
/// + u32 LE length + join-key row + u64 BE sequence`, nothing after.
fn parse_join_key(k: &[u8]) -> Option<(u8, &[u8], u64)> {
    let side = *k.first()?;
    if side > 1 {
        return None;
    }
    let len = u32::from_le_bytes(k.get(1..5)?.try_into().ok()?) as usize;
    let key = k.get(5..5usize.checked_add(len)?)?;
    let seq: [u8; 8] = k.get(5 + len..)?.try_into().ok()?;
    Some((side, key, u64::from_be_bytes(seq)))
}

fn all_exact(fields: &[StateField]) -> bool {
    fields.iter().all(|f| f.arrow_type.is_some())
}

/// Column names made unique (`partition` first): a repeated name gets its position appended.
fn unique_names(fields: Vec<Field>) -> Vec<Field> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    fields
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let mut name = f.name().clone();
            if seen.contains(&name) {
                name = format!("{name}#{i}");
            }
            seen.insert(name.clone());
            f.with_name(name)
        })
        .collect()
}

/// The Arrow types of recorded state fields.
pub fn field_types(fields: &[StateField]) -> Result<Vec<DataType>> {
    fields.iter().map(field_type).collect()
}

/// The Arrow type of one recorded state field: its `arrowType` when recorded, else rebuilt from
/// the Spark type name.
pub fn field_type(f: &StateField) -> Result<DataType> {
    match &f.arrow_type {
        Some(t) => DataType::from_str(t).map_err(|e| {
            SluiceError::checkpoint(
                class::STATE_DECODE_FAILED,
                format!(
                    "the recorded Arrow type {t:?} of state field {:?} does not parse ({e})",
                    f.name
                ),
            )
        }),
        None => spark_type(&f.data_type).map_err(|e| {
            SluiceError::checkpoint(
                class::STATE_DECODE_FAILED,
                format!(
                    "the Spark type {:?} of state field {:?} cannot be turned into an Arrow type \
                     ({}); the schema file has no arrowType (it was written before Sluice \
                     recorded them)",
                    f.data_type,
                    f.name,
                    e.message()
                ),
            )
        }),
    }
}

/// An Arrow type from a Spark type name as [`crate::schema::spark_type_name`] writes it:
/// scalars as in DDL (via [`crate::schema::parse_ddl_schema`]), `<INT> UNSIGNED`, `VOID`, and
/// nested `ARRAY<..>`, `STRUCT<name: type, ..>`, `MAP<k, v>`. Timestamps are microseconds
/// without a time zone (the row format does not depend on it).
pub fn spark_type(name: &str) -> Result<DataType> {
    let mut p = TypeParser { s: name, pos: 0 };
    let t = p.parse_type()?;
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(p.error("unexpected text after the type"));
    }
    Ok(t)
}

struct TypeParser<'a> {
    s: &'a str,
    pos: usize,
}

impl TypeParser<'_> {
    fn error(&self, what: &str) -> SluiceError {
        SluiceError::checkpoint(
            class::STATE_DECODE_FAILED,
            format!("{what} at position {} of {:?}", self.pos, self.s),
        )
    }

    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.s.len() - trimmed.len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.rest().starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(&format!("expected `{c}`")))
        }
    }

    /// A keyword-like word (letters, digits, `_`).
    fn word(&mut self) -> String {
        self.skip_ws();
        let len = self
            .rest()
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.rest().len());
        let w = self.rest()[..len].to_string();
        self.pos += len;
        w
    }

    /// A struct field name: a word or a backquoted name (``` `` ``` for a backquote).
    fn name(&mut self) -> Result<String> {
        self.skip_ws();
        if !self.rest().starts_with('`') {
            let w = self.word();
            return if w.is_empty() {
                Err(self.error("expected a field name"))
            } else {
                Ok(w)
            };
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = self.rest();
            let Some(i) = rest.find('`') else {
                return Err(self.error("unterminated backquoted name"));
            };
            out.push_str(&rest[..i]);
            self.pos += i + 1;
            if self.rest().starts_with('`') {
                out.push('`');
                self.pos += 1;
            } else {
                return Ok(out);
            }
        }
    }

    fn parse_type(&mut self) -> Result<DataType> {
        let start = self.pos;
        let word = self.word().to_ascii_uppercase();
        match word.as_str() {
            "" => Err(self.error("expected a type")),
            "ARRAY" => {
                self.expect('<')?;
                let item = self.parse_type()?;
                self.expect('>')?;
                Ok(DataType::new_list(item, true))
            }
            "MAP" => {
                self.expect('<')?;
                let k = self.parse_type()?;
                self.expect(',')?;
                let v = self.parse_type()?;
                self.expect('>')?;
                let entries = Field::new_struct(
                    "entries",
                    vec![Field::new("key", k, false), Field::new("value", v, true)],
                    false,
                );
                Ok(DataType::Map(Arc::new(entries), false))
            }
            "STRUCT" => {
                self.expect('<')?;
                let mut fields = Vec::new();
                if !self.eat('>') {
                    loop {
                        let name = self.name()?;
                        self.expect(':')?;
                        let t = self.parse_type()?;
                        fields.push(Field::new(name, t, true));
                        if self.eat('>') {
                            break;
                        }
                        self.expect(',')?;
                    }
                }
                Ok(DataType::Struct(fields.into()))
            }
            "VOID" => Ok(DataType::Null),
            "TINYINT" | "SMALLINT" | "INT" | "BIGINT" => {
                let save = self.pos;
                if self.word().eq_ignore_ascii_case("UNSIGNED") {
                    return Ok(match word.as_str() {
                        "TINYINT" => DataType::UInt8,
                        "SMALLINT" => DataType::UInt16,
                        "INT" => DataType::UInt32,
                        _ => DataType::UInt64,
                    });
                }
                self.pos = save;
                self.scalar(start)
            }
            "DECIMAL" | "DEC" | "NUMERIC" => {
                if self.eat('(') {
                    while !self.eat(')') {
                        if self.rest().is_empty() {
                            return Err(self.error("unterminated DECIMAL(p, s)"));
                        }
                        self.pos += self.rest().chars().next().map_or(1, char::len_utf8);
                    }
                }
                self.scalar(start)
            }
            _ => self.scalar(start),
        }
    }

    /// The scalar type spelled from `start` to here, as the engine's DDL parser reads it.
    fn scalar(&mut self, start: usize) -> Result<DataType> {
        let text = self.s[start..self.pos].trim();
        let schema = crate::schema::parse_ddl_schema(&format!("c {text}"))
            .map_err(|e| self.error(e.message()))?;
        Ok(schema.field(0).data_type().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Fields, TimeUnit};

    #[test]
    fn loadable_versions_follow_the_engine_load_plan() {
        let v = |d: &[u64], s: &[u64]| StoreVersions {
            deltas: d.iter().copied().collect(),
            snapshots: s.iter().copied().collect(),
        };
        let r = |a: u64, b: u64| IdRange { first: a, last: b };
        assert_eq!(v(&[1, 2, 3], &[]).loadable(), vec![r(1, 3)]);
        // Purged up to the snapshot at 10: 10..=12 load from it.
        assert_eq!(v(&[11, 12], &[10]).loadable(), vec![r(10, 12)]);
        // A hole in the deltas: versions after it need a snapshot.
        assert_eq!(v(&[1, 2, 4, 5, 7], &[5]).loadable(), vec![r(1, 2), r(5, 5)]);
        assert_eq!(v(&[], &[]).loadable(), vec![]);
        // Cross-check with the engine's own plan.
        let files = v(&[1, 2, 4, 5, 6, 8, 9], &[5, 8]);
        let index = FileIndex {
            deltas: files.deltas.clone(),
            snapshots: files.snapshots.clone(),
        };
        let expect: Vec<u64> = (1..=9).filter(|x| index.plan_load(*x).is_ok()).collect();
        assert_eq!(files.loadable(), to_ranges(expect));
    }

    #[test]
    fn a_read_only_provider_loads_but_never_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let id = StateStoreId::new(tmp.path(), 0, 0);
        let eager = StateStoreConf {
            min_deltas_for_snapshot: 1,
            min_versions_to_retain: 1,
            ..Default::default()
        };
        {
            let mut p = DefaultStateStoreProvider::new(id.clone(), eager.clone()).unwrap();
            let s = p.get_store(0).unwrap();
            s.put(b"a", b"1");
            s.commit().unwrap();
        }
        let stale = id.dir().join(".2.delta.0f3c.tmp");
        std::fs::write(&stale, b"partial").unwrap();
        let mut ro = DefaultStateStoreProvider::open_read_only(id.clone(), eager.clone()).unwrap();
        assert!(ro.is_read_only());
        let s = ro.get_store(1).unwrap();
        assert_eq!(s.get(b"a"), Some(&b"1"[..]));
        s.put(b"b", b"2");
        assert_eq!(s.commit().unwrap_err().class(), "STATE_STORE_READ_ONLY");
        assert_eq!(
            ro.do_maintenance().unwrap_err().class(),
            "STATE_STORE_READ_ONLY"
        );
        ro.maintain_in_background();
        ro.wait_for_background_maintenance();
        drop(ro);
        assert!(stale.exists(), "temporary files are left alone");
        let files = StoreVersions::list(&id.dir()).unwrap();
        assert_eq!(files.deltas, BTreeSet::from([1]));
        assert!(files.snapshots.is_empty(), "no maintenance ran");
        // Nothing is created for a store that does not exist.
        let missing = StateStoreId::new(tmp.path().join("none"), 0, 0);
        let mut ro = DefaultStateStoreProvider::open_read_only(missing, eager).unwrap();
        assert_eq!(ro.get_store(0).unwrap().iter().count(), 0);
        assert!(!tmp.path().join("none").exists());
    }

    #[test]
    fn ranges() {
        assert_eq!(format_ranges(&to_ranges([1, 2, 3, 5, 7, 8])), "1-3, 5, 7-8");
        assert_eq!(format_ranges(&[]), "none");
    }

    #[test]
    fn recorded_arrow_types_round_trip() {
        let window = DataType::Struct(Fields::from(vec![
            Field::new(
                "start",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
            Field::new(
                "end",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
        ]));
        for t in [
            window,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            DataType::Utf8View,
            DataType::Decimal128(38, 10),
            DataType::UInt64,
            DataType::new_list(DataType::Int32, true),
        ] {
            let f =
                crate::state::schema::state_fields(&[Arc::new(Field::new("x", t.clone(), true))]);
            assert_eq!(field_type(&f[0]).unwrap(), t);
        }
    }

    #[test]
    fn spark_type_names_rebuild_arrow_types() {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert_eq!(spark_type("BIGINT").unwrap(), DataType::Int64);
        assert_eq!(spark_type("BIGINT UNSIGNED").unwrap(), DataType::UInt64);
        assert_eq!(spark_type("string").unwrap(), DataType::Utf8);
        assert_eq!(
            spark_type("DECIMAL(10,2)").unwrap(),
            DataType::Decimal128(10, 2)
        );
        assert_eq!(
            spark_type("STRUCT<start: TIMESTAMP, `the end`: TIMESTAMP>").unwrap(),
            DataType::Struct(Fields::from(vec![
                Field::new("start", ts.clone(), true),
                Field::new("the end", ts, true),
            ]))
        );
        assert_eq!(
            spark_type("ARRAY<INT>").unwrap(),
            DataType::new_list(DataType::Int32, true)
        );
        // Every name the engine writes for the supported types parses back to a type that
        // spark_type_name names the same way.
        for t in [
            DataType::Int8,
            DataType::UInt32,
            DataType::Float64,
            DataType::Boolean,
            DataType::Date32,
            DataType::Binary,
            DataType::Decimal128(7, 3),
        ] {
            let name = crate::schema::spark_type_name(&t);
            assert_eq!(
                crate::schema::spark_type_name(&spark_type(&name).unwrap()),
                name
            );
        }
        for bad in ["", "STRUCT<a INT>", "INT INT", "NOPE", "ARRAY<INT"] {
            assert!(spark_type(bad).is_err(), "{bad}");
        }
    }

    fn schema(op: &str, keys: Vec<StateField>, values: Vec<StateField>) -> StateSchema {
        StateSchema {
            operator: format!("0 ({op})"),
            key_schema: keys,
            value_schema: values,
            left_fields: None,
        }
    }

    fn field(name: &str, t: DataType, exact: bool) -> StateField {
        let mut f =
            crate::state::schema::state_fields(&[Arc::new(Field::new(name, t, true))]).remove(0);
        if !exact {
            f.arrow_type = None;
        }
        f
    }

    #[test]
    fn aggregation_pairs_decode_and_a_wrong_type_is_an_error() {
        let key_t = DataType::Utf8;
        let keys = RowConverter::new(vec![SortField::new(key_t.clone())]).unwrap();
        let vals = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let k = keys
            .convert_columns(&[Arc::new(arrow::array::StringArray::from(vec!["a", "b"]))])
            .unwrap();
        let v = vals
            .convert_columns(&[Arc::new(arrow::array::Int64Array::from(vec![3, 4]))])
            .unwrap();
        let kb: Vec<Box<[u8]>> = (0..2).map(|i| k.row(i).data().into()).collect();
        let vb: Vec<Box<[u8]>> = (0..2).map(|i| v.row(i).data().into()).collect();
        for exact in [true, false] {
            let d = StateDecoder::new(&schema(
                "stateStoreSave",
                vec![field("user", key_t.clone(), exact)],
                vec![field("count[count]", DataType::Int64, exact)],
            ))
            .unwrap();
            let b = d.decode(&[0, 1], &kb, &vb).unwrap();
            assert_eq!(
                arrow::util::pretty::pretty_format_batches(&[b])
                    .unwrap()
                    .to_string(),
                "+-----------+------+--------------+\n\
                 | partition | user | count[count] |\n\
                 +-----------+------+--------------+\n\
                 | 0         | a    | 3            |\n\
                 | 1         | b    | 4            |\n\
                 +-----------+------+--------------+"
            );
        }
        // Values recorded as INT (4 bytes) but stored as BIGINT (8 bytes).
        let d = StateDecoder::new(&schema(
            "stateStoreSave",
            vec![field("user", key_t, true)],
            vec![field("n", DataType::Int32, true)],
        ))
        .unwrap();
        assert_eq!(
            d.decode(&[0, 1], &kb, &vb).unwrap_err().class(),
            class::STATE_DECODE_FAILED
        );
    }

    #[test]
    fn group_state_values_decode_and_joins_are_not_supported_yet() {
        let keys = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let k = keys
            .convert_columns(&[Arc::new(arrow::array::Int64Array::from(vec![7, 8]))])
            .unwrap();
        let kb: Vec<Box<[u8]>> = (0..2).map(|i| k.row(i).data().into()).collect();
        let mut v1 = 1234i64.to_le_bytes().to_vec();
        v1.extend_from_slice(b"{\"n\":1}");
        let v2 = NO_TIMEOUT.to_le_bytes().to_vec();
        let d = StateDecoder::new(&schema(
            "flatMapGroupsWithState",
            vec![field("id", DataType::Int64, true)],
            vec![],
        ))
        .unwrap();
        let b = d.decode(&[0, 0], &kb, &[v1.into(), v2.into()]).unwrap();
        assert_eq!(
            arrow::util::pretty::pretty_format_batches(&[b])
                .unwrap()
                .to_string(),
            "+-----------+----+--------------------+------------+\n\
             | partition | id | timeoutTimestampMs | groupState |\n\
             +-----------+----+--------------------+------------+\n\
             | 0         | 7  | 1234               | {\"n\":1}    |\n\
             | 0         | 8  |                    |            |\n\
             +-----------+----+--------------------+------------+"
        );
        let e = StateDecoder::new(&schema(
            "symmetricHashJoin Inner",
            vec![field("id", DataType::Int64, true)],
            vec![],
        ))
        .unwrap_err();
        assert_eq!(e.class(), "SLUICE_NOT_SUPPORTED_YET");
        assert!(e.message().contains("symmetricHashJoin Inner"));
        assert!(e.message().contains("leftFields"), "{e}");
    }

    /// A join state key and value as `StreamingJoin` writes them.
    fn join_pair(
        side: u8,
        key: &[u8],
        seq: u64,
        matched: bool,
        row: &[u8],
    ) -> (Box<[u8]>, Box<[u8]>) {
        let mut k = vec![side];
        k.extend_from_slice(&(key.len() as u32).to_le_bytes());
        k.extend_from_slice(key);
        k.extend_from_slice(&seq.to_be_bytes());
        let mut v = vec![matched as u8];
        v.extend_from_slice(row);
        (k.into(), v.into())
    }

    #[test]
    fn join_pairs_decode_by_side_and_a_wrong_split_is_an_error() {
        use arrow::array::{Float64Array, Int64Array, StringArray};
        let conv = |ts: Vec<DataType>| {
            RowConverter::new(ts.into_iter().map(SortField::new).collect()).unwrap()
        };
        let k = conv(vec![DataType::Utf8])
            .convert_columns(&[Arc::new(StringArray::from(vec!["x", "y"]))])
            .unwrap();
        let l = conv(vec![DataType::Utf8, DataType::Int64])
            .convert_columns(&[
                Arc::new(StringArray::from(vec!["x", "y"])),
                Arc::new(Int64Array::from(vec![Some(1), None])),
            ])
            .unwrap();
        let r = conv(vec![DataType::Utf8, DataType::Float64])
            .convert_columns(&[
                Arc::new(StringArray::from(vec!["x"])),
                Arc::new(Float64Array::from(vec![2.5])),
            ])
            .unwrap();
        let pairs = [
            join_pair(0, k.row(0).data(), 0, true, l.row(0).data()),
            join_pair(1, k.row(0).data(), 1, true, r.row(0).data()),
            join_pair(0, k.row(1).data(), 7, false, l.row(1).data()),
        ];
        let keys: Vec<Box<[u8]>> = pairs.iter().map(|p| p.0.clone()).collect();
        let values: Vec<Box<[u8]>> = pairs.iter().map(|p| p.1.clone()).collect();
        let join = |left: Option<usize>, exact: bool| StateSchema {
            left_fields: left,
            ..schema(
                "symmetricHashJoin Inner",
                vec![field("l.k", DataType::Utf8, exact)],
                vec![
                    field("k", DataType::Utf8, exact),
                    field("a", DataType::Int64, exact),
                    field("k", DataType::Utf8, exact),
                    field("b", DataType::Float64, exact),
                ],
            )
        };
        for exact in [true, false] {
            let d = StateDecoder::new(&join(Some(2), exact)).unwrap();
            let b = d.decode(&[0, 1, 1], &keys, &values).unwrap();
            assert_eq!(
                arrow::util::pretty::pretty_format_batches(&[b])
                    .unwrap()
                    .to_string(),
                "+-----------+-------+-----+-----+---------+---+---+-----+-----+\n\
                 | partition | side  | l.k | seq | matched | k | a | k#7 | b   |\n\
                 +-----------+-------+-----+-----+---------+---+---+-----+-----+\n\
                 | 0         | left  | x   | 0   | true    | x | 1 |     |     |\n\
                 | 1         | right | x   | 1   | true    |   |   | x   | 2.5 |\n\
                 | 1         | left  | y   | 7   | false   | y |   |     |     |\n\
                 +-----------+-------+-----+-----+---------+---+---+-----+-----+"
            );
        }
        // Every other split misreads the rows: refused, never wrong values.
        for left in [0, 1, 3, 4] {
            let d = StateDecoder::new(&join(Some(left), true)).unwrap();
            let e = d.decode(&[0, 1, 1], &keys, &values).unwrap_err();
            assert_eq!(
                e.class(),
                class::STATE_DECODE_FAILED,
                "leftFields {left}: {e}"
            );
        }
        assert_eq!(
            StateDecoder::new(&join(Some(5), true)).unwrap_err().class(),
            class::STATE_DECODE_FAILED
        );
        // Malformed keys and values.
        let d = StateDecoder::new(&join(Some(2), true)).unwrap();
        let mut bad_side = keys.clone();
        bad_side[0][0] = 2;
        let mut short = keys.clone();
        short[1] = short[1][..short[1].len() - 1].into();
        let mut flag = values.clone();
        flag[2][0] = 9;
        for (k, v) in [(&bad_side, &values), (&short, &values), (&keys, &flag)] {
            assert_eq!(
                d.decode(&[0, 1, 1], k, v).unwrap_err().class(),
                class::STATE_DECODE_FAILED
            );
        }
        // No pairs: an empty batch of the decoder's schema.
        assert_eq!(d.decode(&[], &[], &[]).unwrap().num_rows(), 0);
    }
}
