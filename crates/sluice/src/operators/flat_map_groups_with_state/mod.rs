//! Arbitrary stateful processing: Spark's `flatMapGroupsWithState` / `mapGroupsWithState`.
//!
//! A user function receives a key, the rows of that key in this batch, and a [`GroupState`]
//! handle; it returns output rows. The state of each key (any serde type) and its timeout live
//! in the state store, so they survive restarts. Timeouts fire in later batches, no-data batches
//! included: a processing-time timeout when the batch's processing time passes it, an
//! event-time timeout when the watermark passes it. A timed-out key is called with no rows and
//! `has_timed_out() == true`.

//!
//! This module holds the user-facing parts (the [`GroupState`] handle, [`GroupStateTimeout`])
//! and the logical node; `operator` holds the stateful operator that runs it.

mod operator;

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::{DFSchema, DFSchemaRef, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::prelude::Expr;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::stateful::event_time::event_time_column;
use crate::error::{class, Result, SluiceError};
use crate::types::OutputMode;

pub(crate) use self::operator::StreamingFlatMapGroupsWithState;

/// Which timeouts a stateful function uses (Spark's `GroupStateTimeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Serialize, serde::Deserialize)]
pub enum GroupStateTimeout {
    /// Keys never time out.
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
    /// The key's state, when it has one.
    pub fn get(&self) -> Option<&S> {
        self.value.as_ref()
    }
    /// Whether the key has a state.
    pub fn exists(&self) -> bool {
        self.value.is_some()
    }
    /// Sets the key's state (stored when the batch commits).
    pub fn update(&mut self, value: S) {
        self.value = Some(value);
        self.changed = true;
    }
    /// Removes the key's state and its timeout.
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
    pub(crate) json: Option<Vec<u8>>,
    pub(crate) changed: bool,
    pub(crate) timeout_kind: GroupStateTimeout,
    pub(crate) timeout_at_ms: Option<i64>,
    pub(crate) timed_out: bool,
    pub(crate) watermark_ms: Option<i64>,
    pub(crate) processing_time_ms: i64,
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
pub(crate) struct FlatMapGroupsWithState {
    /// The plan whose rows are grouped.
    pub input: LogicalPlan,
    /// The grouping columns.
    pub keys: Vec<String>,
    /// The schema of the rows the function returns.
    pub output_schema: DFSchemaRef,
    /// The output mode the function's rows are written in (append or update).
    pub mode: OutputMode,
    /// Which timeouts the function uses.
    pub timeout: GroupStateTimeout,
    /// The state type's Rust name, recorded in the state schema.
    pub state_type: String,
    pub(crate) func: Arc<dyn GroupFunction>,
    /// The name the function was registered under ([`register_group_function`]): a worker of
    /// a cluster that has it registered too runs the operator's state partitions.
    pub(crate) function_name: Option<String>,
    id: u64,
}

/// A registered function: the function, and its state type's Rust name.
type Registered = (Arc<dyn GroupFunction>, String);

fn registered() -> &'static std::sync::RwLock<std::collections::HashMap<String, Registered>> {
    static FUNCTIONS: std::sync::OnceLock<
        std::sync::RwLock<std::collections::HashMap<String, Registered>>,
    > = std::sync::OnceLock::new();
    FUNCTIONS.get_or_init(Default::default)
}

/// Registers `f` as the `flat_map_groups_with_state` function `name` of this process
/// ([`crate::KeyedFrame::flat_map_groups_with_state_named`]). A function is Rust code of its
/// process: for a query's state partitions to run on a cluster's workers, the driver and each
/// worker register it under the same name (a binary of the user's that registers its
/// functions, then runs the query or serves a worker with `sluice_distributed::worker::serve`);
/// the function of an unnamed call stays on the driver.
pub fn register_group_function<S, F>(name: &str, f: F)
where
    S: Serialize + DeserializeOwned + Send + Sync + 'static,
    F: Fn(&[ScalarValue], &RecordBatch, &mut GroupState<S>) -> Result<Vec<RecordBatch>>
        + Send
        + Sync
        + 'static,
{
    use crate::sync::RwLockExt;
    registered()
        .write_unpoisoned()
        .insert(name.to_string(), erased(f));
}

/// `f` type-erased, with its state type's Rust name.
fn erased<S, F>(f: F) -> Registered
where
    S: Serialize + DeserializeOwned + Send + Sync + 'static,
    F: Fn(&[ScalarValue], &RecordBatch, &mut GroupState<S>) -> Result<Vec<RecordBatch>>
        + Send
        + Sync
        + 'static,
{
    let function: Arc<dyn GroupFunction> = Arc::new(Typed {
        f,
        _s: std::marker::PhantomData,
    });
    (function, std::any::type_name::<S>().to_string())
}

/// The function registered as `name`, and its state type's name.
pub(crate) fn registered_function(name: &str) -> Result<Registered> {
    use crate::sync::RwLockExt;
    registered()
        .read_unpoisoned()
        .get(name)
        .cloned()
        .ok_or_else(|| {
            SluiceError::query(
                class::UNRESOLVED_ROUTINE,
                format!(
                    "no flat_map_groups_with_state function is registered as {name:?} in this \
                     process: register it with sluice::register_group_function(\"{name}\", f) \
                     before the query starts (on a cluster, in the driver and in every worker, \
                     which then run from a binary of yours that serves them with \
                     sluice_distributed::worker::serve)"
                ),
            )
        })
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
    /// Calls `f` for each key of `input` grouped by `keys`, with the key's rows in the batch
    /// and its [`GroupState`]; `f` returns rows of `output_schema`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn try_new<S, F>(
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
        Self::of_function(input, keys, output_schema, mode, timeout, erased(f), None)
    }

    /// The node over the function `function` (and its state type's name), registered as
    /// `name` if it was.
    pub(crate) fn of_function(
        input: LogicalPlan,
        keys: Vec<String>,
        output_schema: SchemaRef,
        mode: OutputMode,
        timeout: GroupStateTimeout,
        function: Registered,
        name: Option<String>,
    ) -> Result<Self> {
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
            state_type: function.1,
            func: function.0,
            function_name: name,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }
    /// The node as a logical plan.
    pub(crate) fn into_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(self),
        })
    }
    /// The node, when `plan` is one.
    pub(crate) fn of(plan: &LogicalPlan) -> Option<&FlatMapGroupsWithState> {
        match plan {
            LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<FlatMapGroupsWithState>(),
            _ => None,
        }
    }
}

fn has_watermark(schema: &DFSchema) -> bool {
    event_time_column(schema).is_some()
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
