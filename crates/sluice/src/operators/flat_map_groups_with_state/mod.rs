//! Arbitrary stateful processing: Spark's `flatMapGroupsWithState` / `mapGroupsWithState`.
//!
//! A user function receives a key, the rows of that key in this batch, and a [`GroupState`]
//! handle; it returns output rows. The state of each key (any serde type) and its timeout live
//! in the state store, so they survive restarts. Timeouts fire in later batches, no-data batches
//! included: a processing-time timeout when the batch's processing time passes it, an
//! event-time timeout when the watermark passes it. A timed-out key is called with no rows and
//! `has_timed_out() == true`.

use crate::error::class;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::common::{DFSchema, DFSchemaRef, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::prelude::Expr;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::stateful::{
    check_state_schema, nullable, open_stores, partition_of, state_fields, StateSchema,
    StatefulOperator,
};
use super::watermark::WATERMARK_DELAY_KEY;
use crate::error::{Result, SluiceError};
use crate::progress::StateOperatorProgress;
use crate::state::{DefaultStateStoreProvider, StateStore, StateStoreConf};
use crate::types::OutputMode;

/// Which timeouts a stateful function uses (Spark's `GroupStateTimeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
pub enum GroupStateTimeout {
    NoTimeout,
    /// `set_timeout_duration`: fires when the batch processing time passes it.
    ProcessingTimeTimeout,
    /// `set_timeout_timestamp`: fires when the watermark passes it; needs a watermark.
    EventTimeTimeout,
}

/// The state of one key, handed to the user function (Spark's `GroupState`).
#[derive(Debug)]
pub struct GroupState<S> {
    value: Option<S>,
    changed: bool,
    timeout_kind: GroupStateTimeout,
    timeout_at_ms: Option<i64>,
    timed_out: bool,
    watermark_ms: Option<i64>,
    processing_time_ms: i64,
}

impl<S> GroupState<S> {
    pub fn get(&self) -> Option<&S> {
        self.value.as_ref()
    }
    pub fn exists(&self) -> bool {
        self.value.is_some()
    }
    pub fn update(&mut self, value: S) {
        self.value = Some(value);
        self.changed = true;
    }
    pub fn remove(&mut self) {
        self.value = None;
        self.changed = true;
        self.timeout_at_ms = None;
    }
    /// True when this call is the key's timeout (no rows come with it).
    pub fn has_timed_out(&self) -> bool {
        self.timed_out
    }
    /// Processing-time timeout: `d` after this batch's processing time.
    pub fn set_timeout_duration(&mut self, d: Duration) -> Result<()> {
        if self.timeout_kind != GroupStateTimeout::ProcessingTimeTimeout {
            return Err(SluiceError::query(
                class::GROUP_STATE_TIMEOUT,
                "set_timeout_duration needs GroupStateTimeout::ProcessingTimeTimeout",
            ));
        }
        self.timeout_at_ms = Some(self.processing_time_ms + d.as_millis() as i64);
        Ok(())
    }
    /// Event-time timeout at `ms` (epoch milliseconds); must not be before the watermark.
    pub fn set_timeout_timestamp(&mut self, ms: i64) -> Result<()> {
        if self.timeout_kind != GroupStateTimeout::EventTimeTimeout {
            return Err(SluiceError::query(
                class::GROUP_STATE_TIMEOUT,
                "set_timeout_timestamp needs GroupStateTimeout::EventTimeTimeout",
            ));
        }
        if let Some(w) = self.watermark_ms {
            if ms < w {
                return Err(SluiceError::query(
                    class::GROUP_STATE_TIMEOUT,
                    format!("Timeout timestamp ({ms}) cannot be earlier than the current watermark ({w})"),
                ));
            }
        }
        self.timeout_at_ms = Some(ms);
        Ok(())
    }
    /// The current watermark (epoch ms), with event-time timeouts.
    pub fn current_watermark_ms(&self) -> Option<i64> {
        self.watermark_ms
    }
    /// This batch's processing time (epoch ms): the batch timestamp of `offsets/N`.
    pub fn current_processing_time_ms(&self) -> i64 {
        self.processing_time_ms
    }
}

/// The type-erased user function: key values, this batch's rows of the key, the encoded state.
pub(crate) trait GroupFunction: Send + Sync {
    fn call(
        &self,
        key: &[ScalarValue],
        rows: &RecordBatch,
        state: &mut ErasedState,
    ) -> Result<Vec<RecordBatch>>;
}

/// A key's state as stored: JSON of the user's state, plus timeout bookkeeping.
pub(crate) struct ErasedState {
    json: Option<Vec<u8>>,
    changed: bool,
    timeout_kind: GroupStateTimeout,
    timeout_at_ms: Option<i64>,
    timed_out: bool,
    watermark_ms: Option<i64>,
    processing_time_ms: i64,
}

struct Typed<S, F> {
    f: F,
    _s: std::marker::PhantomData<fn() -> S>,
}

impl<S, F> GroupFunction for Typed<S, F>
where
    S: Serialize + DeserializeOwned + Send + Sync + 'static,
    F: Fn(&[ScalarValue], &RecordBatch, &mut GroupState<S>) -> Result<Vec<RecordBatch>>
        + Send
        + Sync,
{
    fn call(
        &self,
        key: &[ScalarValue],
        rows: &RecordBatch,
        st: &mut ErasedState,
    ) -> Result<Vec<RecordBatch>> {
        let value: Option<S> = match &st.json {
            Some(b) => Some(serde_json::from_slice(b).map_err(|e| {
                SluiceError::checkpoint(
                    class::STATE_SCHEMA_INCOMPATIBLE,
                    format!("the stored group state does not decode as this query's state type ({e}); the state type changed: start with a new checkpointLocation"),
                )
            })?),
            None => None,
        };
        let mut gs = GroupState {
            value,
            changed: false,
            timeout_kind: st.timeout_kind,
            timeout_at_ms: None,
            timed_out: st.timed_out,
            watermark_ms: st.watermark_ms,
            processing_time_ms: st.processing_time_ms,
        };
        let out = (self.f)(key, rows, &mut gs)?;
        if gs.changed {
            st.json = match &gs.value {
                Some(v) => Some(
                    serde_json::to_vec(v)
                        .map_err(|e| SluiceError::internal(format!("group state: {e}")))?,
                ),
                None => None,
            };
            st.changed = true;
        }
        st.timeout_at_ms = gs.timeout_at_ms;
        Ok(out)
    }
}

/// The logical node of `flat_map_groups_with_state`.
#[derive(Clone)]
pub struct FlatMapGroupsWithState {
    pub input: LogicalPlan,
    pub keys: Vec<String>,
    pub output_schema: DFSchemaRef,
    pub mode: OutputMode,
    pub timeout: GroupStateTimeout,
    pub state_type: String,
    pub(crate) func: Arc<dyn GroupFunction>,
    id: u64,
}

impl fmt::Debug for FlatMapGroupsWithState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FlatMapGroupsWithState(keys={:?}, mode={:?}, timeout={:?})",
            self.keys, self.mode, self.timeout
        )
    }
}
impl PartialEq for FlatMapGroupsWithState {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id
    }
}
impl Eq for FlatMapGroupsWithState {}
impl Hash for FlatMapGroupsWithState {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state)
    }
}
impl PartialOrd for FlatMapGroupsWithState {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        self.id.partial_cmp(&o.id)
    }
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl FlatMapGroupsWithState {
    #[allow(clippy::too_many_arguments)]
    pub fn try_new<S, F>(
        input: LogicalPlan,
        keys: Vec<String>,
        output_schema: SchemaRef,
        mode: OutputMode,
        timeout: GroupStateTimeout,
        f: F,
    ) -> Result<Self>
    where
        S: Serialize + DeserializeOwned + Send + Sync + 'static,
        F: Fn(&[ScalarValue], &RecordBatch, &mut GroupState<S>) -> Result<Vec<RecordBatch>>
            + Send
            + Sync
            + 'static,
    {
        for k in &keys {
            if input
                .schema()
                .qualified_field_with_unqualified_name(k)
                .is_err()
            {
                return Err(SluiceError::query(
                    class::UNRESOLVED_COLUMN,
                    format!("no grouping column {k:?}"),
                ));
            }
        }
        if timeout == GroupStateTimeout::EventTimeTimeout && !has_watermark(input.schema()) {
            return Err(SluiceError::query(
                class::UNSUPPORTED_STREAMING_OPERATION,
                "Watermark must be specified in the query using '[Dataset/DataFrame].withWatermark()' for \
                 using event-time timeout in a [map|flatMap]GroupsWithState. Event-time timeout not \
                 supported without watermark.",
            ));
        }
        if !matches!(mode, OutputMode::Append | OutputMode::Update) {
            return Err(SluiceError::query(
                class::STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION,
                "flatMapGroupsWithState takes output mode append or update",
            ));
        }
        Ok(Self {
            input,
            keys,
            output_schema: Arc::new(DFSchema::try_from(output_schema.as_ref().clone())?),
            mode,
            timeout,
            state_type: std::any::type_name::<S>().to_string(),
            func: Arc::new(Typed {
                f,
                _s: std::marker::PhantomData,
            }),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }
    pub fn into_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(self),
        })
    }
    pub fn of(plan: &LogicalPlan) -> Option<&FlatMapGroupsWithState> {
        match plan {
            LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<FlatMapGroupsWithState>(),
            _ => None,
        }
    }
}

fn has_watermark(schema: &DFSchema) -> bool {
    schema
        .fields()
        .iter()
        .any(|f| f.metadata().contains_key(WATERMARK_DELAY_KEY))
}

impl UserDefinedLogicalNodeCore for FlatMapGroupsWithState {
    fn name(&self) -> &str {
        "FlatMapGroupsWithState"
    }
    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }
    fn schema(&self) -> &DFSchemaRef {
        &self.output_schema
    }
    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }
    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "FlatMapGroupsWithState: keys=[{}], {:?}, {:?}",
            self.keys.join(", "),
            self.mode,
            self.timeout
        )
    }
    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        let mut n = self.clone();
        n.input = inputs.pop().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(
                "FlatMapGroupsWithState needs one input".into(),
            )
        })?;
        Ok(n)
    }
}

const NO_TIMEOUT: i64 = i64::MIN;

/// The operator.
pub struct FlatMapGroupsWithStateExec {
    key_columns: Vec<usize>,
    converter: RowConverter,
    func: Arc<dyn GroupFunction>,
    timeout: GroupStateTimeout,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    partitions: usize,
    stores: Vec<DefaultStateStoreProvider>,
    /// Earliest timeout in state (ms), for no-data batches; None until known.
    min_timeout_ms: Option<i64>,
    /// Processing time of the batch being run (the batch timestamp).
    batch_timestamp_ms: i64,
}

fn encode(timeout: Option<i64>, json: &[u8]) -> Vec<u8> {
    let mut v = timeout.unwrap_or(NO_TIMEOUT).to_le_bytes().to_vec();
    v.extend_from_slice(json);
    v
}

fn decode(v: &[u8]) -> Result<(Option<i64>, Vec<u8>)> {
    let t: [u8; 8] = v.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(|| {
        SluiceError::checkpoint(
            class::STATE_STORE_CORRUPT,
            "a group state value is truncated; use a new checkpoint location",
        )
    })?;
    let t = i64::from_le_bytes(t);
    Ok(((t != NO_TIMEOUT).then_some(t), v[8..].to_vec()))
}

impl FlatMapGroupsWithStateExec {
    pub fn try_new(
        node: &FlatMapGroupsWithState,
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
            key_columns.push(input_schema.index_of(k).map_err(|_| {
                SluiceError::query(
                    class::UNRESOLVED_COLUMN,
                    format!("no grouping column {k:?}"),
                )
            })?);
        }
        let fields: Vec<_> = key_columns
            .iter()
            .map(|i| Arc::new(input_schema.field(*i).clone()))
            .collect();
        let converter = RowConverter::new(
            fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let dir = checkpoint_root.join("state").join(operator_id.to_string());
        check_state_schema(
            &dir,
            &StateSchema {
                operator: format!("{operator_id} (flatMapGroupsWithState)"),
                key_schema: state_fields(&fields),
                value_schema: vec![super::stateful::StateField {
                    name: "groupState".into(),
                    data_type: node.state_type.clone(),
                    nullable: true,
                    arrow_type: None,
                }],
                left_fields: None,
            },
            allow_rename,
        )?;
        Ok(Self {
            key_columns,
            converter,
            func: node.func.clone(),
            timeout: node.timeout,
            input_schema,
            output_schema: nullable(&Arc::new(node.output_schema.as_arrow().clone())),
            partitions,
            stores: open_stores(checkpoint_root, operator_id, partitions, &store_conf)?,
            min_timeout_ms: None,
            batch_timestamp_ms: 0,
        })
    }

    /// Sets the processing time of the next batch (called by the pipeline before `process`).
    pub fn set_batch_timestamp(&mut self, ms: i64) {
        self.batch_timestamp_ms = ms;
    }

    fn run(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        batch: RecordBatch,
        watermark_ms: i64,
    ) -> Result<(RecordBatch, StateOperatorProgress)> {
        let n = batch.num_rows();
        let keys: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|c| batch.column(*c).clone())
            .collect();
        let rows = self.converter.convert_columns(&keys)?;
        let mut groups: Vec<(Vec<u8>, Vec<u32>)> = Vec::new();
        let mut pos: HashMap<&[u8], usize> = HashMap::new();
        for i in 0..n {
            let k = rows.row(i).data();
            let g = *pos.entry(k).or_insert_with(|| {
                groups.push((k.to_vec(), Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(i as u32);
        }
        let wm = (self.timeout == GroupStateTimeout::EventTimeTimeout).then_some(watermark_ms);
        let mut outputs: Vec<RecordBatch> = Vec::new();
        let (mut updated, mut removed) = (0i64, 0i64);
        let key_values = |idx: u32| -> Result<Vec<ScalarValue>> {
            keys.iter()
                .map(|a| Ok(ScalarValue::try_from_array(a, idx as usize)?))
                .collect()
        };
        let mut call = |key: &[u8],
                        key_vals: Vec<ScalarValue>,
                        rows: RecordBatch,
                        stored: Option<Vec<u8>>,
                        timed_out: bool,
                        stores: &mut [&mut dyn StateStore]|
         -> Result<()> {
            let (timeout_at, json) = match &stored {
                Some(v) => {
                    let (t, j) = decode(v)?;
                    (t, Some(j))
                }
                None => (None, None),
            };
            let mut st = ErasedState {
                json,
                changed: false,
                timeout_kind: self.timeout,
                timeout_at_ms: timeout_at,
                timed_out,
                watermark_ms: wm,
                processing_time_ms: self.batch_timestamp_ms,
            };
            let out = self.func.call(&key_vals, &rows, &mut st)?;
            for b in out {
                if b.schema().fields() != self.output_schema.fields()
                    && b.num_columns() != self.output_schema.fields().len()
                {
                    return Err(SluiceError::query(
                        class::GROUP_FUNCTION_OUTPUT,
                        format!("the stateful function returned rows with schema {:?}; it must return {:?}", b.schema(), self.output_schema),
                    ));
                }
                outputs.push(RecordBatch::try_new(
                    self.output_schema.clone(),
                    b.columns().to_vec(),
                )?);
            }
            let p = partition_of(key, self.partitions);
            let timeout_after = st.timeout_at_ms;
            match (&st.json, st.changed || timeout_after != timeout_at) {
                (_, false) => {}
                (Some(j), true) => {
                    stores[p].put(key, &encode(timeout_after, j));
                    updated += 1;
                }
                (None, true) => {
                    if stored.is_some() {
                        stores[p].remove(key);
                        removed += 1;
                    }
                }
            }
            Ok(())
        };
        let mut with_data: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
        for (k, idx) in &groups {
            let p = partition_of(k, self.partitions);
            let stored = stores[p].get(k).map(|v| v.to_vec());
            let rows_of_key = take_record_batch(&batch, &UInt32Array::from(idx.clone()))?;
            call(k, key_values(idx[0])?, rows_of_key, stored, false, stores)?;
            with_data.insert(k.clone());
        }
        // Timeouts of keys without data in this batch.
        let deadline = match self.timeout {
            GroupStateTimeout::NoTimeout => None,
            GroupStateTimeout::ProcessingTimeTimeout => Some(self.batch_timestamp_ms),
            GroupStateTimeout::EventTimeTimeout => Some(watermark_ms),
        };
        let mut min_timeout: Option<i64> = None;
        if let Some(deadline) = deadline {
            let mut due: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            for store in stores.iter() {
                for (k, v) in store.iter() {
                    if with_data.contains(k) {
                        continue;
                    }
                    if let (Some(t), _) = decode(v)? {
                        let fires = match self.timeout {
                            GroupStateTimeout::EventTimeTimeout => t < deadline,
                            _ => t <= deadline,
                        };
                        if fires {
                            due.push((k.to_vec(), v.to_vec()));
                        }
                    }
                }
            }
            let empty = RecordBatch::new_empty(self.input_schema.clone());
            for (k, v) in due {
                let parser = self.converter.parser();
                let arrays = self
                    .converter
                    .convert_rows(std::iter::once(parser.parse(&k)))?;
                let kv: Vec<ScalarValue> = arrays
                    .iter()
                    .map(|a| ScalarValue::try_from_array(a, 0))
                    .collect::<DfResult<_>>()?;
                call(&k, kv, empty.clone(), Some(v), true, stores)?;
            }
            for store in stores.iter() {
                for (_, v) in store.iter() {
                    if let (Some(t), _) = decode(v)? {
                        min_timeout = Some(min_timeout.map_or(t, |m: i64| m.min(t)));
                    }
                }
            }
        }
        self.min_timeout_ms = min_timeout;
        let t = std::time::Instant::now();
        let (total, memory) = super::stateful::commit_stores(stores)?;
        let out = if outputs.is_empty() {
            RecordBatch::new_empty(self.output_schema.clone())
        } else {
            concat_batches(&self.output_schema, &outputs)?
        };
        Ok((
            out,
            StateOperatorProgress {
                operator_name: "flatMapGroupsWithState".into(),
                num_rows_total: total as i64,
                num_rows_updated: updated,
                num_rows_removed: removed,
                commit_time_ms: t.elapsed().as_millis() as i64,
                memory_used_bytes: memory as i64,
                num_shuffle_partitions: self.partitions as i64,
                num_state_store_instances: self.partitions as i64,
                ..Default::default()
            },
        ))
    }
}

impl StatefulOperator for FlatMapGroupsWithStateExec {
    fn process(
        &mut self,
        mut inputs: Vec<Vec<RecordBatch>>,
        _late_watermark_ms: i64,
        eviction_watermark_ms: i64,
        batch_id: u64,
    ) -> Result<(RecordBatch, StateOperatorProgress)> {
        let input = inputs.pop().unwrap_or_default();
        let batch = concat_batches(&self.input_schema, &input)?;
        let mut providers = std::mem::take(&mut self.stores);
        let result = super::stateful::with_stores(&mut providers, batch_id, |stores| {
            self.run(stores, batch, eviction_watermark_ms)
        });
        self.stores = providers;
        result
    }

    fn should_run_another_batch(&self, batch_watermark_ms: i64, next_watermark_ms: i64) -> bool {
        match (self.timeout, self.min_timeout_ms) {
            (GroupStateTimeout::EventTimeTimeout, Some(t)) => {
                next_watermark_ms > batch_watermark_ms && t < next_watermark_ms
            }
            (GroupStateTimeout::ProcessingTimeTimeout, Some(t)) => {
                t <= chrono::Utc::now().timestamp_millis()
            }
            _ => false,
        }
    }

    fn set_batch_timestamp(&mut self, ms: i64) {
        FlatMapGroupsWithStateExec::set_batch_timestamp(self, ms)
    }
}
