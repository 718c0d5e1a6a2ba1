//! Streaming deduplication (Spark's `StreamingDeduplicateExec` and
//! `StreamingDeduplicateWithinWatermarkExec`).
//!
//! - `drop_duplicates(cols)`: the first row of each key passes, later copies are dropped. When
//!   the watermarked event-time column is among the keys, rows at or before the watermark are
//!   late (dropped and counted) and keys behind the watermark are evicted. When the input has a
//!   watermarked event-time column that is not a key, late rows are still dropped and counted
//!   but keys are never evicted (Spark's `watermarkPredicateForData` without
//!   `watermarkPredicateForKeys`), and no-data batches run when the watermark moves, as in
//!   Spark. Without a watermark every key is kept forever (state grows with the number of
//!   distinct keys).
//! - `drop_duplicates_within_watermark(cols)`: keys on `cols` alone; a key lives until the
//!   watermark passes the first occurrence's event time plus the watermark delay, after which a
//!   new copy passes again. Requires a watermark.
//! - `SELECT DISTINCT` on a stream is `drop_duplicates` of all columns.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{Field, SchemaRef};
use datafusion::common::DFSchemaRef;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::prelude::Expr;

use super::stateful::context::StateLocation;
use super::stateful::event_time::{
    event_time_column, is_event_time, key_event_time_index, to_micros,
};
use super::stateful::{
    BatchContext, OperatorOutput, OutputRows, PartitionedStores, Routed, StageInput, StateInfo,
    StatefulOperator,
};
use crate::error::{class, Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::layout::dedup::{
    decode_expiry, encode_expiry, DedupLayout, DedupValue, EMPTY_VALUE,
};
use crate::state::schema::{state_fields, StateSchema};
use crate::state::PairTimes;
use crate::types::{OperatorId, WatermarkMs};

/// The logical node of `drop_duplicates` / `drop_duplicates_within_watermark`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Deduplicate {
    /// The plan whose rows are deduplicated.
    pub input: LogicalPlan,
    /// Key column names (unqualified), in the input.
    pub keys: Vec<String>,
    /// `drop_duplicates_within_watermark`: a key lives until the watermark passes its first
    /// event time plus the delay.
    pub within_watermark: bool,
}

impl PartialOrd for Deduplicate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        (&self.keys, self.within_watermark).partial_cmp(&(&o.keys, o.within_watermark))
    }
}

impl Deduplicate {
    /// Deduplicates `input` on the columns `keys`; within watermark needs a watermark.
    pub(crate) fn try_new(
        input: LogicalPlan,
        keys: Vec<String>,
        within_watermark: bool,
    ) -> Result<Self> {
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
        if within_watermark && event_time_column(schema).is_none() {
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
    /// The node as a logical plan.
    pub(crate) fn into_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(self),
        })
    }
    /// The node, when `plan` is one.
    pub(crate) fn of(plan: &LogicalPlan) -> Option<&Deduplicate> {
        match plan {
            LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<Deduplicate>(),
            _ => None,
        }
    }
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
    /// No watermark at all: kept forever.
    Never,
    /// The input's event-time column (at this input position) is not a key: rows at or before
    /// the watermark are late, keys are kept forever.
    DataEventTime(usize),
    /// The key column at this position is the event time: late and evicted at the watermark.
    KeyEventTime(usize),
    /// Within watermark: the value holds first event time + delay (µs); input column index of
    /// the event time and the delay in µs.
    WithinWatermark { column: usize, delay_us: i64 },
}

/// What the chunks of one deduplication batch counted.
#[derive(Debug, Default)]
struct ChunkCounts {
    late: i64,
    duplicates: i64,
    updated: i64,
}

/// The deduplication operator.
pub(crate) struct StreamingDeduplicate {
    operator_id: OperatorId,
    key_columns: Vec<usize>,
    key_fields: Vec<Arc<Field>>,
    value_fields: Vec<Arc<Field>>,
    /// The state's key and value layout.
    layout: DedupLayout,
    /// Where the state is, for errors.
    location: StateLocation,
    expiry: Expiry,
    input_schema: SchemaRef,
    within: bool,
    /// The late-row side output is on: this batch's input rows dropped as late.
    late_rows: Option<Vec<RecordBatch>>,
}

impl StreamingDeduplicate {
    /// Builds the operator for the logical `Deduplicate` node, with its state described by
    /// `info`.
    pub(crate) fn try_new(node: &Deduplicate, info: &StateInfo) -> Result<Self> {
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
        let key_types: Vec<_> = fields.iter().map(|f| f.data_type().clone()).collect();
        let value = if node.within_watermark {
            DedupValue::ExpiresAtMicros
        } else {
            DedupValue::Empty
        };
        let layout = DedupLayout::new(&key_types, value)?;
        let expiry = if node.within_watermark {
            let (column, delay_ms) = event_time_column(schema).ok_or_else(|| {
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
            match key_columns
                .iter()
                .position(|c| is_event_time(schema.field(*c)))
            {
                Some(p) => Expiry::KeyEventTime(p),
                None => match event_time_column(schema) {
                    Some((column, _)) => Expiry::DataEventTime(column),
                    None => Expiry::Never,
                },
            }
        };
        let value_fields = match expiry {
            Expiry::WithinWatermark { .. } => vec![Arc::new(Field::new(
                "expiresAtMicros",
                arrow::datatypes::DataType::Int64,
                false,
            ))],
            _ => vec![],
        };
        Ok(Self {
            operator_id: info.operator_id,
            key_columns,
            key_fields: fields,
            value_fields,
            layout,
            location: info.location(),
            expiry,
            input_schema,
            within: node.within_watermark,
            late_rows: None,
        })
    }

    /// The keys by the time they expire (their event time, or within watermark their expiry),
    /// for the stores' time index; none when keys never expire.
    fn expiry_times(&self) -> Result<Option<PairTimes>> {
        let location = self.location.clone();
        Ok(Some(match self.expiry {
            Expiry::Never | Expiry::DataEventTime(_) => return Ok(None),
            Expiry::WithinWatermark { .. } => PairTimes {
                times: Arc::new(move |p, _: &[&[u8]], values: &[&[u8]]| {
                    values
                        .iter()
                        .map(|v| {
                            decode_expiry(v)
                                .map(Some)
                                .map_err(|e| location.corrupt(Some(p), "a deduplication expiry", e))
                        })
                        .collect()
                }),
                from_key: false,
            },
            Expiry::KeyEventTime(k) => key_event_time_index(
                &self.key_fields,
                &self.location,
                "a deduplication key",
                move |arrays| {
                    to_micros(
                        arrays
                            .get(k)
                            .ok_or_else(|| SluiceError::internal("dedup event-time key"))?,
                    )
                },
            )?,
        }))
    }

    /// Runs one batch over `input`, chunk by chunk: each chunk's new keys are staged before the
    /// next chunk is read, so a key seen in an earlier chunk is a duplicate in a later one.
    fn run(
        &mut self,
        stores: &mut PartitionedStores<'_>,
        input: StageInput,
        late_us: i64,
        evict_us: i64,
    ) -> Result<OperatorOutput> {
        let mut counts = ChunkCounts::default();
        // The kept rows: as many as the input, at most; spilled past a chunk's share.
        let mut outputs = OutputRows::spilling(self.input_schema.clone(), input.chunk_bytes());
        input.for_each_chunk(|chunk, _| {
            let batch = concat_batches(&self.input_schema, &chunk)?;
            drop(chunk);
            outputs.push(self.run_chunk(stores, &batch, late_us, &mut counts)?)
        })?;
        let removed = self.evict(stores, evict_us)?;
        let mut custom = std::collections::BTreeMap::new();
        custom.insert("numDroppedDuplicateRows".to_string(), counts.duplicates);
        let progress = StateOperatorProgress {
            num_rows_updated: counts.updated,
            num_rows_removed: removed as i64,
            num_rows_dropped_by_watermark: counts.late,
            custom_metrics: custom,
            ..Default::default()
        };
        Ok(OperatorOutput {
            rows: outputs,
            progress,
        })
    }

    /// One chunk of a batch: drops late rows and duplicates (of the state, and of earlier rows),
    /// stages the new keys; returns the rows kept.
    fn run_chunk(
        &mut self,
        stores: &mut PartitionedStores<'_>,
        batch: &RecordBatch,
        late_us: i64,
        counts: &mut ChunkCounts,
    ) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let keys: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|c| batch.column(*c).clone())
            .collect();
        // None without key columns: every key is the empty key.
        let rows = self.layout.key().encode(&keys)?;
        let event_time = match self.expiry {
            Expiry::Never => None,
            Expiry::KeyEventTime(p) => Some(to_micros(&keys[p])?),
            Expiry::DataEventTime(column) => Some(to_micros(batch.column(column))?),
            Expiry::WithinWatermark { column, .. } => Some(to_micros(batch.column(column))?),
        };
        let mut kept: Vec<u32> = Vec::new();
        let mut seen: HashSet<&[u8]> = HashSet::new();
        let mut late_idx: Vec<u32> = Vec::new();
        for i in 0..n {
            if let Some(ts) = &event_time {
                if ts.is_valid(i) && ts.value(i) <= late_us {
                    counts.late += 1;
                    late_idx.push(i as u32);
                    continue;
                }
            }
            let key: &[u8] = match &rows {
                Some(rows) => rows.row(i).data(),
                None => &[],
            };
            let p = stores.partition_of(key);
            if seen.contains(key) || stores[p].get(key).is_some() {
                counts.duplicates += 1;
                continue;
            }
            seen.insert(key);
            let expiry_value: [u8; 8];
            let value: &[u8] = match (&self.expiry, &event_time) {
                (Expiry::WithinWatermark { delay_us, .. }, Some(ts)) => {
                    let expires = if ts.is_valid(i) {
                        ts.value(i) + delay_us
                    } else {
                        i64::MAX
                    };
                    expiry_value = encode_expiry(expires);
                    &expiry_value
                }
                _ => EMPTY_VALUE,
            };
            stores[p].put(key, value);
            counts.updated += 1;
            kept.push(i as u32);
        }
        if let (Some(rows), false) = (&mut self.late_rows, late_idx.is_empty()) {
            rows.push(take_record_batch(batch, &UInt32Array::from(late_idx))?);
        }
        Ok(take_record_batch(batch, &UInt32Array::from(kept))?)
    }

    /// Removes keys whose event time (or expiry) is at or before `evict_us`, through the
    /// stores' time index (a range scan: only the expired keys are read).
    fn evict(&mut self, stores: &mut PartitionedStores<'_>, evict_us: i64) -> Result<u64> {
        if !matches!(
            self.expiry,
            Expiry::WithinWatermark { .. } | Expiry::KeyEventTime(_)
        ) {
            return Ok(0);
        }
        let mut removed = 0u64;
        for store in stores.all_mut() {
            for pair in store.scan_by_time(evict_us, true)? {
                store.remove(&pair.key);
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The input carries a watermark: late rows are dropped, and a moving watermark runs a
    /// no-data batch (Spark's `shouldRunAnotherBatch` for deduplication).
    fn watches_watermark(&self) -> bool {
        !matches!(self.expiry, Expiry::Never)
    }
}

impl StatefulOperator for StreamingDeduplicate {
    fn name(&self) -> &str {
        if self.within {
            "dedupeWithinWatermark"
        } else {
            "dedupe"
        }
    }

    fn state_times(&self) -> Result<Option<PairTimes>> {
        self.expiry_times()
    }

    fn state_schema(&self) -> StateSchema {
        StateSchema::new(
            self.operator_id,
            self.name(),
            state_fields(&self.key_fields),
            state_fields(&self.value_fields),
        )
    }

    fn process(
        &mut self,
        mut inputs: Vec<StageInput>,
        stores: &mut PartitionedStores<'_>,
        ctx: &BatchContext,
    ) -> Result<OperatorOutput> {
        let input = inputs
            .pop()
            .ok_or_else(|| SluiceError::internal("a deduplication without its input"))?;
        let late_us = if self.watches_watermark() {
            ctx.late_watermark.as_micros().0
        } else {
            i64::MIN
        };
        let evict_us = ctx.eviction_watermark.as_micros().0;
        if let Some(kept) = &mut self.late_rows {
            kept.clear();
        }
        self.run(stores, input, late_us, evict_us)
    }

    fn keep_late_rows(&mut self) -> Result<SchemaRef> {
        self.late_rows = Some(Vec::new());
        Ok(self.input_schema.clone())
    }

    /// A worker drops late rows itself, so the late-row output keeps the operator here.
    fn routes(&self) -> bool {
        self.late_rows.is_none()
    }

    fn routes_where_read(&self) -> bool {
        self.late_rows.is_none()
    }

    /// Each row goes to the owner of its key's partition, late or not (its worker drops it).
    fn route(
        &mut self,
        mut inputs: Vec<StageInput>,
        _ctx: &BatchContext,
        routed: &mut Routed,
    ) -> Result<()> {
        let input = inputs
            .pop()
            .ok_or_else(|| SluiceError::internal("a deduplication without its input"))?;
        routed.push_by_key(
            input,
            &self.input_schema,
            &self.key_columns,
            self.layout.key(),
        )
    }

    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        self.late_rows
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// A no-data batch evicts when the watermark moved and keys expire.
    fn should_run_another_batch(
        &self,
        batch_watermark: WatermarkMs,
        next_watermark: WatermarkMs,
    ) -> bool {
        self.watches_watermark() && next_watermark > batch_watermark
    }
}
