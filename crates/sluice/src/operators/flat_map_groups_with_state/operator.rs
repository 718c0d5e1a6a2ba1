//! The operator that runs a `flatMapGroupsWithState` node: groups each batch's rows by key, calls
//! the user function with each key's stored state, fires due timeouts (keys without rows whose
//! timeout passed) and stores what the function left.
//!
//! A key's state is stored as `crate::state::layout::group_state` lays it out: the grouping
//! columns as the key, the timeout and the JSON of the user's state as the value.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;

use super::{ErasedState, FlatMapGroupsWithState, GroupFunction, GroupStateTimeout};
use crate::error::{class, Result, SluiceError};
use crate::operators::stateful::context::StateLocation;
use crate::operators::stateful::remote::Routed;
use crate::operators::stateful::{
    nullable, partition_of, BatchContext, OperatorOutput, PartitionedStores, StageInput, StateInfo,
    StatefulOperator,
};
use crate::progress::StateOperatorProgress;
use crate::state::layout::group_state::{GroupStateLayout, GroupStateValue};
use crate::state::schema::{state_fields, StateField, StateSchema};
use crate::state::{PairTimes, StateStore};
use crate::types::{OperatorId, WatermarkMs};

/// The `flatMapGroupsWithState` operator (Spark's `FlatMapGroupsWithStateExec`).
pub(crate) struct StreamingFlatMapGroupsWithState {
    operator_id: OperatorId,
    key_columns: Vec<usize>,
    key_fields: Vec<Arc<arrow::datatypes::Field>>,
    /// The user's state type, as the schema records it.
    state_type: String,
    /// The state's key layout (values are `GroupStateValue`s).
    layout: GroupStateLayout,
    /// Where the state is, for errors.
    location: StateLocation,
    func: Arc<dyn GroupFunction>,
    timeout: GroupStateTimeout,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    partitions: usize,
    /// Earliest timeout in state (ms), for no-data batches; None until known.
    min_timeout_ms: Option<i64>,
    /// The name the function was registered under, if it was (then it runs on workers).
    function_name: Option<String>,
}

impl StreamingFlatMapGroupsWithState {
    /// Builds the operator for the logical node, with its state described by `info`.
    pub(crate) fn try_new(node: &FlatMapGroupsWithState, info: &StateInfo) -> Result<Self> {
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
        let key_types: Vec<_> = fields.iter().map(|f| f.data_type().clone()).collect();
        Ok(Self {
            operator_id: info.operator_id,
            key_columns,
            key_fields: fields,
            state_type: node.state_type.clone(),
            layout: GroupStateLayout::new(&key_types)?,
            location: info.location(),
            func: node.func.clone(),
            timeout: node.timeout,
            input_schema,
            output_schema: nullable(&Arc::new(node.output_schema.as_arrow().clone())),
            partitions: info.partitions,
            min_timeout_ms: None,
            function_name: node.function_name.clone(),
        })
    }

    /// Runs one batch at the eviction watermark `watermark_ms` and processing time
    /// `batch_timestamp_ms`. The input comes sorted by key (`StatefulNode::input_plans` sorts
    /// it, a sort that spills past the memory budget, as Spark sorts it): it is taken chunk by
    /// chunk, a key's rows held only until its last row came.
    fn run(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        input: StageInput,
        watermark_ms: i64,
        batch_timestamp_ms: i64,
    ) -> Result<OperatorOutput> {
        let wm = (self.timeout == GroupStateTimeout::EventTimeTimeout).then_some(watermark_ms);
        let mut outputs: Vec<RecordBatch> = Vec::new();
        let (mut updated, mut removed) = (0i64, 0i64);
        let mut call = |key: &[u8],
                        key_vals: Vec<ScalarValue>,
                        rows: RecordBatch,
                        stored: Option<Vec<u8>>,
                        timed_out: bool,
                        stores: &mut [&mut dyn StateStore]|
         -> Result<()> {
            let p = partition_of(key, self.partitions);
            let (timeout_at, json) = match &stored {
                Some(v) => {
                    let value = GroupStateValue::decode(v)
                        .map_err(|e| self.location.corrupt(Some(p), "a group state value", e))?;
                    (value.timeout_ms, Some(value.state_json.to_vec()))
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
                processing_time_ms: batch_timestamp_ms,
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
            let timeout_after = st.timeout_at_ms;
            match (&st.json, st.changed || timeout_after != timeout_at) {
                (_, false) => {}
                (Some(j), true) => {
                    let value = GroupStateValue {
                        timeout_ms: timeout_after,
                        state_json: j,
                    };
                    stores[p].put(key, &value.encode());
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
        // The rows of the last key of a chunk, which may go on in the next chunk.
        let mut carry: Option<RecordBatch> = None;
        input.for_each_chunk(|chunk, last| {
            let batch = concat_batches(&self.input_schema, carry.iter().chain(&chunk))?;
            drop(chunk);
            let keys: Vec<ArrayRef> = self
                .key_columns
                .iter()
                .map(|c| batch.column(*c).clone())
                .collect();
            // None without grouping columns: every key is the empty key.
            let rows = self.layout.key().encode(&keys)?;
            let key_at = |i: usize| -> &[u8] {
                match &rows {
                    Some(rows) => rows.row(i).data(),
                    None => &[],
                }
            };
            let n = batch.num_rows();
            let mut end = n;
            if !last {
                while end > 0 && key_at(end - 1) == key_at(n - 1) {
                    end -= 1;
                }
            }
            // Sorted by key: each key's rows are one run, handed over as a slice.
            let mut start = 0;
            while start < end {
                let k = key_at(start);
                let mut stop = start + 1;
                while stop < end && key_at(stop) == k {
                    stop += 1;
                }
                let p = partition_of(k, self.partitions);
                let stored = stores[p].get(k).map(|v| v.to_vec());
                let key_values = keys
                    .iter()
                    .map(|a| ScalarValue::try_from_array(a, start))
                    .collect::<DfResult<Vec<_>>>()?;
                call(
                    k,
                    key_values,
                    batch.slice(start, stop - start),
                    stored,
                    false,
                    stores,
                )?;
                with_data.insert(k.to_vec());
                start = stop;
            }
            carry = (end < n).then(|| batch.slice(end, n - end));
            Ok(())
        })?;
        // Timeouts of keys without data in this batch.
        let deadline = match self.timeout {
            GroupStateTimeout::NoTimeout => None,
            GroupStateTimeout::ProcessingTimeTimeout => Some(batch_timestamp_ms),
            GroupStateTimeout::EventTimeTimeout => Some(watermark_ms),
        };
        let mut min_timeout: Option<i64> = None;
        if let Some(deadline) = deadline {
            // Through the stores' time index: only the keys whose timeout passed are read.
            // An event-time timeout fires once the watermark is past it, a processing-time one
            // once the clock reached it.
            let inclusive = self.timeout != GroupStateTimeout::EventTimeTimeout;
            let mut due: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
            for (p, store) in stores.iter().enumerate() {
                for pair in store.scan_by_time(deadline, inclusive)? {
                    if !with_data.contains(&pair.key[..]) {
                        due.push((p, pair.key, pair.value));
                    }
                }
            }
            let empty = RecordBatch::new_empty(self.input_schema.clone());
            for (p, k, v) in due {
                let arrays = self
                    .layout
                    .key()
                    .decode_trusted(&[&k])
                    .map_err(|e| self.location.corrupt(Some(p), "a group state key", e))?;
                let kv: Vec<ScalarValue> = arrays
                    .iter()
                    .map(|a| ScalarValue::try_from_array(a, 0))
                    .collect::<DfResult<_>>()?;
                call(&k, kv, empty.clone(), Some(v), true, stores)?;
            }
            for store in stores.iter() {
                if let Some(t) = store.first_time()? {
                    min_timeout = Some(min_timeout.map_or(t, |m: i64| m.min(t)));
                }
            }
        }
        self.min_timeout_ms = min_timeout;
        let out = if outputs.is_empty() {
            RecordBatch::new_empty(self.output_schema.clone())
        } else {
            concat_batches(&self.output_schema, &outputs)?
        };
        Ok(OperatorOutput {
            rows: out.into(),
            progress: StateOperatorProgress {
                num_rows_updated: updated,
                num_rows_removed: removed,
                ..Default::default()
            },
        })
    }
}

impl StatefulOperator for StreamingFlatMapGroupsWithState {
    fn name(&self) -> &str {
        "flatMapGroupsWithState"
    }

    /// Groups by their timeout (ms), so due timeouts are found without a scan of the state.
    fn state_times(&self) -> Result<Option<PairTimes>> {
        if self.timeout == GroupStateTimeout::NoTimeout {
            return Ok(None);
        }
        let location = self.location.clone();
        Ok(Some(PairTimes {
            times: Arc::new(move |p, _: &[&[u8]], values: &[&[u8]]| {
                values
                    .iter()
                    .map(|v| {
                        Ok(GroupStateValue::decode(v)
                            .map_err(|e| location.corrupt(Some(p), "a group state value", e))?
                            .timeout_ms)
                    })
                    .collect()
            }),
            from_key: false,
        }))
    }

    fn state_schema(&self) -> StateSchema {
        StateSchema::new(
            self.operator_id,
            "flatMapGroupsWithState",
            state_fields(&self.key_fields),
            vec![StateField {
                name: "groupState".into(),
                data_type: self.state_type.clone(),
                nullable: true,
                arrow_type: None,
            }],
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
            .ok_or_else(|| SluiceError::internal("a flatMapGroupsWithState without its input"))?;
        self.run(
            stores.all_mut(),
            input,
            ctx.eviction_watermark.0,
            ctx.batch_timestamp_ms,
        )
    }

    fn next_timeout_ms(&self) -> Option<i64> {
        self.min_timeout_ms
    }

    fn set_next_timeout_ms(&mut self, at: Option<i64>) {
        self.min_timeout_ms = at;
    }

    /// A function registered by name runs on workers: each key's rows go to the owner of its
    /// key's partition, in the order they come (sorted by key, as the operator takes them).
    fn routes(&self) -> bool {
        self.function_name.is_some()
    }

    fn route(
        &mut self,
        mut inputs: Vec<StageInput>,
        _ctx: &BatchContext,
        routed: &mut Routed,
    ) -> Result<()> {
        let input = inputs
            .pop()
            .ok_or_else(|| SluiceError::internal("a flatMapGroupsWithState without its input"))?;
        routed.push_by_key(
            input,
            &self.input_schema,
            &self.key_columns,
            self.layout.key(),
        )
    }

    fn should_run_another_batch(
        &self,
        batch_watermark: WatermarkMs,
        next_watermark: WatermarkMs,
    ) -> bool {
        match (self.timeout, self.min_timeout_ms) {
            (GroupStateTimeout::EventTimeTimeout, Some(t)) => {
                next_watermark > batch_watermark && t < next_watermark.0
            }
            (GroupStateTimeout::ProcessingTimeTimeout, Some(t)) => {
                t <= chrono::Utc::now().timestamp_millis()
            }
            _ => false,
        }
    }
}
