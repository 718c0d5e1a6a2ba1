//! Event-time watermarks (Spark's `EventTimeWatermark`, `EventTimeWatermarkExec` and
//! `WatermarkTracker`).
//!
//! `with_watermark(column, delay)` puts an [`EventTimeWatermark`] node into the logical plan. It
//! passes rows through unchanged and marks the column with the field metadata
//! `spark.watermarkDelayMs`, so stateful operators above it know which column carries event time.
//! Each batch, `plan::incremental` gives every such node a fresh [`EventTimeStats`] handle; the
//! physical [`EventTimeWatermarkExec`] records max/min/avg event time of the rows that pass. At
//! the end of the batch the [`WatermarkTracker`] turns them into the next watermark:
//! `max event time - delay`, per node never moving back, combined over nodes by the
//! `multipleWatermarkPolicy` (`min` by default), and globally never moving back.

use crate::error::class;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Column, DFSchema, DFSchemaRef};
use datafusion::error::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion::prelude::Expr;
use futures::StreamExt;

use crate::error::{Result, SluiceError};

/// Field metadata key marking the event-time column (Spark's name).
pub(crate) const WATERMARK_DELAY_KEY: &str = "spark.watermarkDelayMs";

pub(crate) use crate::types::EventTimeStats;

/// Shared between a watermark node's exec and the query loop for one batch.
pub(crate) type StatsHandle = Arc<Mutex<EventTimeStats>>;

/// The logical node of `with_watermark`.
#[derive(Debug, Clone)]
pub(crate) struct EventTimeWatermark {
    /// The plan whose rows pass through.
    pub input: LogicalPlan,
    /// The event-time column.
    pub column: Column,
    /// The delay (ms): the watermark is the latest event time minus it.
    pub delay_ms: i64,
    schema: DFSchemaRef,
    /// Set per batch by `plan::incremental`.
    pub stats: Option<StatsHandle>,
}

impl EventTimeWatermark {
    /// `with_watermark(column, delay)` over `input`; the column must be a timestamp.
    pub(crate) fn try_new(input: LogicalPlan, column: &str, delay_ms: i64) -> Result<Self> {
        let in_schema = input.schema();
        let col = in_schema
            .qualified_field_with_unqualified_name(column)
            .map_err(|_| {
                SluiceError::query(
                    class::UNRESOLVED_COLUMN,
                    format!(
                        "with_watermark: no column {column:?}; the columns are {:?}",
                        in_schema
                            .fields()
                            .iter()
                            .map(|f| f.name())
                            .collect::<Vec<_>>()
                    ),
                )
            })?;
        let (qualifier, field) = (col.0.cloned(), col.1.clone());
        if !matches!(field.data_type(), DataType::Timestamp(_, _)) {
            return Err(SluiceError::query(
                class::EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE,
                format!(
                    "Event time must be defined on a window or a timestamp, but {column} is of type {}",
                    crate::schema::spark_type_name(field.data_type())
                ),
            ));
        }
        let fields: Vec<(Option<datafusion::common::TableReference>, Arc<Field>)> = in_schema
            .iter()
            .map(|(q, f)| {
                if f.name() == field.name() && q == qualifier.as_ref() {
                    let mut md = f.metadata().clone();
                    md.insert(WATERMARK_DELAY_KEY.to_string(), delay_ms.to_string());
                    (q.cloned(), Arc::new(f.as_ref().clone().with_metadata(md)))
                } else {
                    (q.cloned(), f.clone())
                }
            })
            .collect();
        let schema = DFSchema::new_with_metadata(fields, in_schema.metadata().clone())?;
        Ok(Self {
            input,
            column: Column::new(qualifier, field.name()),
            delay_ms,
            schema: Arc::new(schema),
            stats: None,
        })
    }

    /// The node as a logical plan.
    pub(crate) fn into_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(self),
        })
    }

    /// The node behind an extension plan, if it is a watermark.
    pub(crate) fn of(plan: &LogicalPlan) -> Option<&EventTimeWatermark> {
        match plan {
            LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<EventTimeWatermark>(),
            _ => None,
        }
    }

    fn key(&self) -> (&LogicalPlan, &Column, i64) {
        (&self.input, &self.column, self.delay_ms)
    }
}

impl PartialEq for EventTimeWatermark {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl Eq for EventTimeWatermark {}
impl Hash for EventTimeWatermark {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}
impl PartialOrd for EventTimeWatermark {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        match self.column.partial_cmp(&o.column) {
            Some(Ordering::Equal) => self.delay_ms.partial_cmp(&o.delay_ms),
            c => c,
        }
    }
}

impl UserDefinedLogicalNodeCore for EventTimeWatermark {
    fn name(&self) -> &str {
        "EventTimeWatermark"
    }
    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }
    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }
    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }
    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "EventTimeWatermark: {}, delay={}ms",
            self.column, self.delay_ms
        )
    }
    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        let input = inputs.pop().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(
                "EventTimeWatermark needs one input".into(),
            )
        })?;
        let mut node = EventTimeWatermark::try_new(input, self.column.name(), self.delay_ms)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        node.stats = self.stats.clone();
        Ok(node)
    }
}

/// Passes batches through and records event-time statistics.
#[derive(Debug)]
pub(crate) struct EventTimeWatermarkExec {
    input: Arc<dyn ExecutionPlan>,
    column_index: usize,
    delay_ms: i64,
    stats: StatsHandle,
}

impl EventTimeWatermarkExec {
    /// Passes `input`'s rows through, recording the event times of column `column_index` in
    /// `stats`.
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        column_index: usize,
        delay_ms: i64,
        stats: StatsHandle,
    ) -> Self {
        Self {
            input,
            column_index,
            delay_ms,
            stats,
        }
    }
}

impl DisplayAs for EventTimeWatermarkExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "EventTimeWatermarkExec: column={}, delay={}ms",
            self.column_index, self.delay_ms
        )
    }
}

/// A watermark node over `input` (its event times in column `column_index`, `delay_ms` behind),
/// as the wire rebuilds it on a worker: its statistics are its own, sent back with the read's
/// counts after it ran (`ReadCounts::event_times`).
pub fn watermark_exec(
    input: Arc<dyn ExecutionPlan>,
    column_index: usize,
    delay_ms: i64,
) -> Arc<dyn ExecutionPlan> {
    Arc::new(EventTimeWatermarkExec::new(
        input,
        column_index,
        delay_ms,
        StatsHandle::default(),
    ))
}

/// A watermark node's event-time column and delay (ms), for the wire.
pub fn watermark_parts(plan: &Arc<dyn ExecutionPlan>) -> Option<(usize, i64)> {
    let w = plan.downcast_ref::<EventTimeWatermarkExec>()?;
    Some((w.column_index, w.delay_ms))
}

/// The statistics of the watermark nodes of `plan`, depth first: the same nodes in the same
/// order on the driver and on a worker that decoded the plan.
pub(crate) fn watermark_handles(plan: &Arc<dyn ExecutionPlan>) -> Vec<StatsHandle> {
    let mut out = Vec::new();
    fn walk(p: &Arc<dyn ExecutionPlan>, out: &mut Vec<StatsHandle>) {
        if let Some(w) = p.downcast_ref::<EventTimeWatermarkExec>() {
            out.push(w.stats.clone());
        }
        for c in p.children() {
            walk(c, out);
        }
    }
    walk(plan, &mut out);
    out
}

/// What the watermark nodes of `plan` ([`watermark_handles`]) saw.
pub(crate) fn watermark_stats(plan: &Arc<dyn ExecutionPlan>) -> Vec<EventTimeStats> {
    watermark_handles(plan)
        .iter()
        .map(|h| *h.lock().unwrap_or_else(|p| p.into_inner()))
        .collect()
}

fn record(stats: &StatsHandle, batch: &RecordBatch, column: usize) {
    let Some(col) = batch.columns().get(column) else {
        return;
    };
    let Ok(ts) = arrow::compute::cast(col, &DataType::Timestamp(TimeUnit::Microsecond, None))
    else {
        return;
    };
    let Some(ts) = ts.as_any().downcast_ref::<TimestampMicrosecondArray>() else {
        return;
    };
    let mut local = EventTimeStats::default();
    for i in 0..ts.len() {
        if ts.is_valid(i) {
            local.add(ts.value(i).div_euclid(1000));
        }
    }
    stats
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .merge(&local);
}

impl ExecutionPlan for EventTimeWatermarkExec {
    fn name(&self) -> &str {
        "EventTimeWatermarkExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children.pop().unwrap_or_else(|| self.input.clone());
        Ok(Arc::new(EventTimeWatermarkExec::new(
            input,
            self.column_index,
            self.delay_ms,
            self.stats.clone(),
        )))
    }
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(
                datafusion::physical_plan::execution_plan::ChildrenPropertiesMode::Recompute,
            ),
        )
    }
    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let stats = self.stats.clone();
        let column = self.column_index;
        let stream = input.map(move |b| {
            if let Ok(batch) = &b {
                record(&stats, batch, column);
            }
            b
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

pub(crate) use crate::conf::WatermarkPolicy;

/// The query's watermark across batches (Spark's `WatermarkTracker`).
#[derive(Debug, Clone)]
pub(crate) struct WatermarkTracker {
    policy: WatermarkPolicy,
    per_node: BTreeMap<usize, i64>,
    global_ms: i64,
}

impl WatermarkTracker {
    /// A tracker combining nodes by `policy`, starting at the checkpoint's watermark.
    pub(crate) fn new(policy: WatermarkPolicy, restored_ms: i64) -> Self {
        Self {
            policy,
            per_node: BTreeMap::new(),
            global_ms: restored_ms,
        }
    }
    /// The global watermark (ms).
    pub(crate) fn current_ms(&self) -> i64 {
        self.global_ms
    }
    /// Restores the global watermark from the checkpoint (per-node values start afresh, as in
    /// Spark; only the global value is fault-tolerant).
    pub(crate) fn restore(&mut self, ms: i64) {
        self.global_ms = self.global_ms.max(ms);
    }
    /// Updates with one batch's statistics per watermark node (node index -> (delay, stats)).
    /// Nodes that saw no rows keep their value; a node that has seen no rows since the query
    /// (re)started counts as 0, as in Spark, so after a restart the global watermark waits until
    /// every input has had data again. The global watermark never moves back.
    pub(crate) fn update(&mut self, observed: &HashMap<usize, (i64, EventTimeStats)>) -> i64 {
        for (node, (delay, stats)) in observed {
            if stats.count == 0 {
                self.per_node.entry(*node).or_insert(0);
                continue;
            }
            let candidate = stats.max - delay;
            let e = self.per_node.entry(*node).or_insert(candidate);
            if candidate > *e {
                *e = candidate;
            }
        }
        let chosen = match self.policy {
            WatermarkPolicy::Min => self.per_node.values().min().copied(),
            WatermarkPolicy::Max => self.per_node.values().max().copied(),
        };
        if let Some(c) = chosen {
            if c > self.global_ms {
                self.global_ms = c;
            }
        }
        self.global_ms
    }
}

/// The watermark nodes of a plan, in a stable order (depth first).
pub(crate) fn watermark_nodes(plan: &LogicalPlan) -> Vec<&EventTimeWatermark> {
    let mut out = Vec::new();
    fn walk<'a>(p: &'a LogicalPlan, out: &mut Vec<&'a EventTimeWatermark>) {
        if let Some(w) = EventTimeWatermark::of(p) {
            out.push(w);
        }
        for i in p.inputs() {
            walk(i, out);
        }
    }
    walk(plan, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(max: i64) -> EventTimeStats {
        EventTimeStats {
            max,
            min: max,
            sum: max as f64,
            count: 1,
        }
    }

    #[test]
    fn watermark_is_max_minus_delay_and_never_moves_back() {
        let mut t = WatermarkTracker::new(WatermarkPolicy::Min, 0);
        assert_eq!(t.update(&[(0, (10, stats(100)))].into_iter().collect()), 90);
        assert_eq!(t.update(&[(0, (10, stats(50)))].into_iter().collect()), 90);
        assert_eq!(t.update(&HashMap::new()), 90, "no data: no move");
        assert_eq!(
            t.update(&[(0, (10, stats(200)))].into_iter().collect()),
            190
        );
    }

    #[test]
    fn several_inputs_combine_by_policy() {
        let obs: HashMap<usize, (i64, EventTimeStats)> =
            [(0, (0, stats(100))), (1, (0, stats(300)))]
                .into_iter()
                .collect();
        assert_eq!(
            WatermarkTracker::new(WatermarkPolicy::Min, 0).update(&obs),
            100
        );
        assert_eq!(
            WatermarkTracker::new(WatermarkPolicy::Max, 0).update(&obs),
            300
        );
        assert_eq!(
            WatermarkTracker::new(WatermarkPolicy::Min, 500).update(&obs),
            500,
            "restored value is a floor"
        );
    }

    /// Spark's `WatermarkTracker` puts 0 for a node that has seen no rows since the query
    /// started: after a restart (per-node values are not in the checkpoint) the min policy keeps
    /// the restored watermark until every input has had data again.
    #[test]
    fn after_a_restart_an_input_without_data_holds_the_min_watermark() {
        let empty = EventTimeStats::default();
        let mut t = WatermarkTracker::new(WatermarkPolicy::Min, 0);
        t.restore(1_000);
        let only_left: HashMap<usize, (i64, EventTimeStats)> =
            [(0, (0, stats(5_000))), (1, (0, empty))]
                .into_iter()
                .collect();
        assert_eq!(
            t.update(&only_left),
            1_000,
            "right input unseen: counts as 0"
        );
        let right_too: HashMap<usize, (i64, EventTimeStats)> =
            [(0, (0, empty)), (1, (0, stats(3_000)))]
                .into_iter()
                .collect();
        assert_eq!(
            t.update(&right_too),
            3_000,
            "both seen: min of their values"
        );
        let mut max = WatermarkTracker::new(WatermarkPolicy::Max, 0);
        assert_eq!(
            max.update(&only_left),
            5_000,
            "max policy ignores the unseen input"
        );
    }
}
