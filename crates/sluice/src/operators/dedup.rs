//! Streaming deduplication (Spark's `StreamingDeduplicateExec` and
//! `StreamingDeduplicateWithinWatermarkExec`).
//!
//! - `drop_duplicates(cols)`: the first row of each key passes, later copies are dropped. When
//!   the watermarked event-time column is among the keys, rows at or before the watermark are
//!   late (dropped and counted) and keys behind the watermark are evicted; otherwise every key is
//!   kept forever (state grows with the number of distinct keys).
//! - `drop_duplicates_within_watermark(cols)`: keys on `cols` alone; a key lives until the
//!   watermark passes the first occurrence's event time plus the watermark delay, after which a
//!   new copy passes again. Requires a watermark.
//! - `SELECT DISTINCT` on a stream is `drop_duplicates` of all columns.

use crate::error::class;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{Field, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::DFSchemaRef;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::prelude::Expr;

use super::stateful::{
    check_state_schema, nullable, open_stores, partition_of, state_fields, to_micros, StateSchema,
    StatefulOperator,
};
use super::watermark::WATERMARK_DELAY_KEY;
use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::{DefaultStateStoreProvider, StateStore, StateStoreConf};

/// The logical node of `drop_duplicates` / `drop_duplicates_within_watermark`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Deduplicate {
    pub input: LogicalPlan,
    /// Key column names (unqualified), in the input.
    pub keys: Vec<String>,
    pub within_watermark: bool,
}

impl PartialOrd for Deduplicate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        (&self.keys, self.within_watermark).partial_cmp(&(&o.keys, o.within_watermark))
    }
}

impl Deduplicate {
    pub fn try_new(input: LogicalPlan, keys: Vec<String>, within_watermark: bool) -> Result<Self> {
        let schema = input.schema();
        for k in &keys {
            if schema.qualified_field_with_unqualified_name(k).is_err() {
                return Err(SluiceError::query(
                    class::UNRESOLVED_COLUMN,
                    format!(
                        "Cannot resolve column name {k:?} for deduplication among ({})",
                        schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        if within_watermark && watermark_column(schema).is_none() {
            return Err(SluiceError::query(
                class::UNSUPPORTED_STREAMING_OPERATION,
                "dropDuplicatesWithinWatermark is not supported on streaming DataFrames/DataSets \
                 without watermark. Call with_watermark(..) before drop_duplicates_within_watermark.",
            ));
        }
        Ok(Self {
            input,
            keys,
            within_watermark,
        })
    }
    pub fn into_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(self),
        })
    }
    pub fn of(plan: &LogicalPlan) -> Option<&Deduplicate> {
        match plan {
            LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<Deduplicate>(),
            _ => None,
        }
    }
}

/// The input's watermarked column: (index, delay ms).
fn watermark_column(schema: &datafusion::common::DFSchema) -> Option<(usize, i64)> {
    schema.fields().iter().enumerate().find_map(|(i, f)| {
        f.metadata()
            .get(WATERMARK_DELAY_KEY)
            .and_then(|d| d.parse().ok())
            .map(|d| (i, d))
    })
}

impl UserDefinedLogicalNodeCore for Deduplicate {
    fn name(&self) -> &str {
        if self.within_watermark {
            "DeduplicateWithinWatermark"
        } else {
            "Deduplicate"
        }
    }
    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }
    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }
    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }
    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{}: [{}]",
            UserDefinedLogicalNodeCore::name(self),
            self.keys.join(", ")
        )
    }
    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        let input = inputs.pop().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("Deduplicate needs one input".into())
        })?;
        Ok(Self {
            input,
            keys: self.keys.clone(),
            within_watermark: self.within_watermark,
        })
    }
}

/// How a key's lifetime is bounded.
#[derive(Debug, Clone, Copy)]
enum Expiry {
    /// No watermark on the keys: kept forever.
    Never,
    /// The key column at this position is the event time: late and evicted at the watermark.
    KeyEventTime(usize),
    /// Within watermark: the value holds first event time + delay (µs); input column index of
    /// the event time and the delay in µs.
    WithinWatermark { column: usize, delay_us: i64 },
}

/// The deduplication operator.
pub struct StreamingDeduplicate {
    key_columns: Vec<usize>,
    converter: RowConverter,
    expiry: Expiry,
    input_schema: SchemaRef,
    partitions: usize,
    stores: Vec<DefaultStateStoreProvider>,
    min_expiry_us: i64,
    within: bool,
    /// The late-row side output is on: this batch's input rows dropped as late.
    late_rows: Option<Vec<RecordBatch>>,
}

impl StreamingDeduplicate {
    pub fn try_new(
        node: &Deduplicate,
        operator_id: u32,
        checkpoint_root: &Path,
        partitions: usize,
        allow_rename: bool,
        store_conf: StateStoreConf,
    ) -> Result<Self> {
        let schema = node.input.schema();
        let input_schema: SchemaRef = Arc::new(schema.as_arrow().clone());
        let mut key_columns = Vec::new();
        for k in &node.keys {
            let (q, f) = schema
                .qualified_field_with_unqualified_name(k)
                .map_err(|_| {
                    SluiceError::query(
                        class::UNRESOLVED_COLUMN,
                        format!("no column {k:?} to deduplicate on"),
                    )
                })?;
            key_columns.push(
                schema
                    .index_of_column_by_name(q, f.name())
                    .ok_or_else(|| SluiceError::internal("dedup key"))?,
            );
        }
        let fields: Vec<Arc<Field>> = key_columns
            .iter()
            .map(|i| Arc::new(input_schema.field(*i).clone()))
            .collect();
        let converter = RowConverter::new(
            fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let expiry = if node.within_watermark {
            let (column, delay_ms) = watermark_column(schema).ok_or_else(|| {
                SluiceError::query(
                    class::UNSUPPORTED_STREAMING_OPERATION,
                    "dropDuplicatesWithinWatermark is not supported on streaming DataFrames/DataSets without watermark",
                )
            })?;
            Expiry::WithinWatermark {
                column,
                delay_us: delay_ms * 1000,
            }
        } else {
            match key_columns.iter().position(|c| {
                schema
                    .field(*c)
                    .metadata()
                    .contains_key(WATERMARK_DELAY_KEY)
            }) {
                Some(p) => Expiry::KeyEventTime(p),
                None => Expiry::Never,
            }
        };
        let value_schema = match expiry {
            Expiry::WithinWatermark { .. } => vec![Arc::new(Field::new(
                "expiresAtMicros",
                arrow::datatypes::DataType::Int64,
                false,
            ))],
            _ => vec![],
        };
        let dir = checkpoint_root.join("state").join(operator_id.to_string());
        let op = if node.within_watermark {
            "dedupeWithinWatermark"
        } else {
            "dedupe"
        };
        check_state_schema(
            &dir,
            &StateSchema {
                operator: format!("{operator_id} ({op})"),
                key_schema: state_fields(&fields),
                value_schema: state_fields(&value_schema),
                left_fields: None,
            },
            allow_rename,
        )?;
        Ok(Self {
            key_columns,
            converter,
            expiry,
            input_schema,
            partitions,
            stores: open_stores(checkpoint_root, operator_id, partitions, &store_conf)?,
            min_expiry_us: i64::MIN,
            within: node.within_watermark,
            late_rows: None,
        })
    }

    fn run(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        batch: &RecordBatch,
        late_us: i64,
        evict_us: i64,
    ) -> Result<(RecordBatch, StateOperatorProgress)> {
        let n = batch.num_rows();
        let keys: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|c| batch.column(*c).clone())
            .collect();
        let rows = self.converter.convert_columns(&keys)?;
        let event_time = match self.expiry {
            Expiry::Never => None,
            Expiry::KeyEventTime(p) => Some(to_micros(&keys[p])?),
            Expiry::WithinWatermark { column, .. } => Some(to_micros(batch.column(column))?),
        };
        let mut kept: Vec<u32> = Vec::new();
        let mut seen: HashSet<&[u8]> = HashSet::new();
        let (mut late, mut duplicates, mut updated) = (0i64, 0i64, 0i64);
        let mut late_idx: Vec<u32> = Vec::new();
        for i in 0..n {
            if let Some(ts) = &event_time {
                if ts.is_valid(i) && ts.value(i) <= late_us {
                    late += 1;
                    late_idx.push(i as u32);
                    continue;
                }
            }
            let key = rows.row(i).data();
            let p = partition_of(key, self.partitions);
            if seen.contains(key) || stores[p].get(key).is_some() {
                duplicates += 1;
                continue;
            }
            seen.insert(key);
            let value: Vec<u8> = match (&self.expiry, &event_time) {
                (Expiry::WithinWatermark { delay_us, .. }, Some(ts)) => {
                    let expires = if ts.is_valid(i) {
                        ts.value(i) + delay_us
                    } else {
                        i64::MAX
                    };
                    self.min_expiry_us = self.min_expiry_us.min(expires);
                    expires.to_le_bytes().to_vec()
                }
                (Expiry::KeyEventTime(_), Some(ts)) => {
                    if ts.is_valid(i) {
                        self.min_expiry_us = self.min_expiry_us.min(ts.value(i));
                    }
                    Vec::new()
                }
                _ => Vec::new(),
            };
            stores[p].put(key, &value);
            updated += 1;
            kept.push(i as u32);
        }
        if let (Some(rows), false) = (&mut self.late_rows, late_idx.is_empty()) {
            rows.push(take_record_batch(batch, &UInt32Array::from(late_idx))?);
        }
        let out = take_record_batch(batch, &UInt32Array::from(kept))?;
        let removed = self.evict(stores, evict_us)?;
        let t = std::time::Instant::now();
        let (total, memory) = super::stateful::commit_stores(stores)?;
        let mut custom = std::collections::BTreeMap::new();
        custom.insert("numDroppedDuplicateRows".to_string(), duplicates);
        let progress = StateOperatorProgress {
            operator_name: if self.within {
                "dedupeWithinWatermark".into()
            } else {
                "dedupe".into()
            },
            num_rows_total: total as i64,
            num_rows_updated: updated,
            num_rows_removed: removed as i64,
            commit_time_ms: t.elapsed().as_millis() as i64,
            num_rows_dropped_by_watermark: late,
            memory_used_bytes: memory as i64,
            num_shuffle_partitions: self.partitions as i64,
            num_state_store_instances: self.partitions as i64,
            custom_metrics: custom,
            ..Default::default()
        };
        let schema = nullable(&self.input_schema);
        Ok((
            RecordBatch::try_new(schema, out.columns().to_vec())?,
            progress,
        ))
    }

    /// Removes keys whose event time (or expiry) is at or before `evict_us`.
    fn evict(&mut self, stores: &mut [&mut dyn StateStore], evict_us: i64) -> Result<u64> {
        if matches!(self.expiry, Expiry::Never) || evict_us < self.min_expiry_us {
            return Ok(0);
        }
        let mut removed = 0u64;
        let mut min_left = i64::MAX;
        for store in stores.iter_mut() {
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = store
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let times: Vec<Option<i64>> = match self.expiry {
                Expiry::WithinWatermark { .. } => pairs
                    .iter()
                    .map(|(_, v)| v.as_slice().try_into().ok().map(i64::from_le_bytes))
                    .collect(),
                Expiry::KeyEventTime(p) => {
                    let parser = self.converter.parser();
                    let arrays = self
                        .converter
                        .convert_rows(pairs.iter().map(|(k, _)| parser.parse(k)))?;
                    let ts = to_micros(&arrays[p])?;
                    (0..ts.len())
                        .map(|i| ts.is_valid(i).then(|| ts.value(i)))
                        .collect()
                }
                Expiry::Never => continue,
            };
            for ((k, _), t) in pairs.iter().zip(times) {
                match t {
                    Some(t) if t <= evict_us => {
                        store.remove(k);
                        removed += 1;
                    }
                    Some(t) => min_left = min_left.min(t),
                    None => {}
                }
            }
        }
        self.min_expiry_us = min_left;
        Ok(removed)
    }

    fn has_expiry(&self) -> bool {
        !matches!(self.expiry, Expiry::Never)
    }
}

impl StatefulOperator for StreamingDeduplicate {
    fn process(
        &mut self,
        mut inputs: Vec<Vec<RecordBatch>>,
        late_watermark_ms: i64,
        eviction_watermark_ms: i64,
        batch_id: u64,
    ) -> Result<(RecordBatch, StateOperatorProgress)> {
        let input = inputs.pop().unwrap_or_default();
        let batch = concat_batches(&self.input_schema, &input)?;
        let late_us = if self.has_expiry() {
            late_watermark_ms.saturating_mul(1000)
        } else {
            i64::MIN
        };
        let evict_us = eviction_watermark_ms.saturating_mul(1000);
        let mut providers = std::mem::take(&mut self.stores);
        if let Some(kept) = &mut self.late_rows {
            kept.clear();
        }
        let result = super::stateful::with_stores(&mut providers, batch_id, |stores| {
            self.run(stores, &batch, late_us, evict_us)
        });
        self.stores = providers;
        result
    }

    fn keep_late_rows(&mut self) -> Result<SchemaRef> {
        self.late_rows = Some(Vec::new());
        Ok(self.input_schema.clone())
    }

    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        self.late_rows
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn should_run_another_batch(&self, batch_watermark_ms: i64, next_watermark_ms: i64) -> bool {
        self.has_expiry() && next_watermark_ms > batch_watermark_ms
    }
}
