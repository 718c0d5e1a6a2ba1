//! `StreamingRelation`: how a streaming source appears inside a DataFusion logical plan.
//!
//! `read_stream().load()` puts a `TableScan` over a [`StreamingRelation`] into the plan. The
//! relation is a placeholder: it is never scanned. Each micro-batch, `plan::incremental` swaps it
//! for an in-memory table holding exactly that batch's rows.

use crate::error::class;
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session as DfSession;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::{LogicalPlan, TableScan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::Expr;

use crate::error::SluiceError;
use crate::source::SourceProvider;

static NEXT_RELATION_ID: AtomicU64 = AtomicU64::new(1);

/// A streaming source inside a logical plan. Two scans with the same `id` read the same source.
///
/// Without a provider it is a *placeholder*: rows computed by a stateful operator for the part
/// of the plan above it, bound per batch like a source.
#[derive(Debug)]
pub(crate) struct StreamingRelation {
    id: u64,
    provider: Option<Arc<dyn SourceProvider>>,
    schema: SchemaRef,
}

impl StreamingRelation {
    pub(crate) fn new(provider: Arc<dyn SourceProvider>) -> Self {
        let schema = provider.schema();
        Self {
            id: NEXT_RELATION_ID.fetch_add(1, Ordering::Relaxed),
            provider: Some(provider),
            schema,
        }
    }
    /// A placeholder for rows that an operator produces each batch.
    pub(crate) fn placeholder(schema: SchemaRef) -> Self {
        Self {
            id: NEXT_RELATION_ID.fetch_add(1, Ordering::Relaxed),
            provider: None,
            schema,
        }
    }
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    pub(crate) fn relation_schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The relation behind a table scan, if the scan reads a stream.
    pub(crate) fn of_scan(scan: &TableScan) -> Option<&StreamingRelation> {
        let any: &dyn Any = scan.source.as_ref();
        let default_source = any.downcast_ref::<datafusion::datasource::DefaultTableSource>()?;
        let table: &dyn Any = default_source.table_provider.as_ref();
        table.downcast_ref::<StreamingRelation>()
    }
}

/// The streaming relations of a plan, in order of first appearance (depth first, left to right);
/// the position is the source index `i` of `sources/<i>/` and of the lines in `offsets/N`.
pub(crate) fn streaming_relations(plan: &LogicalPlan) -> Vec<(u64, Arc<dyn SourceProvider>)> {
    let mut out: Vec<(u64, Arc<dyn SourceProvider>)> = Vec::new();
    collect(plan, &mut out);
    out
}

fn collect(plan: &LogicalPlan, out: &mut Vec<(u64, Arc<dyn SourceProvider>)>) {
    if let LogicalPlan::TableScan(scan) = plan {
        if let Some(rel) = StreamingRelation::of_scan(scan) {
            if let Some(provider) = &rel.provider {
                if !out.iter().any(|(id, _)| *id == rel.id) {
                    out.push((rel.id, provider.clone()));
                }
            }
        }
    }
    for input in plan.inputs() {
        collect(input, out);
    }
    // Subqueries (e.g. `IN (SELECT ..)`) can hold streams too.
    let _ = plan.apply_subqueries(|sub| {
        collect(sub, out);
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
}

/// How many scans of the plan read the stream `relation_id` (a view used twice is read twice:
/// Spark counts a source's input rows per use, e.g. both sides of a `UNION ALL` of one view).
pub(crate) fn relation_uses(plan: &LogicalPlan, relation_id: u64) -> usize {
    let mut n = 0;
    count_uses(plan, relation_id, &mut n);
    n.max(1)
}

fn count_uses(plan: &LogicalPlan, relation_id: u64, n: &mut usize) {
    if let LogicalPlan::TableScan(scan) = plan {
        if StreamingRelation::of_scan(scan).is_some_and(|rel| rel.id == relation_id) {
            *n += 1;
        }
    }
    for input in plan.inputs() {
        count_uses(input, relation_id, n);
    }
    let _ = plan.apply_subqueries(|sub| {
        count_uses(sub, relation_id, n);
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
}

/// True when the plan reads at least one stream.
pub(crate) fn is_streaming(plan: &LogicalPlan) -> bool {
    !streaming_relations(plan).is_empty()
}

/// True when the plan reads a stream or the output of a stateful operator (a placeholder).
pub(crate) fn reads_stream_or_operator(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|p| {
        if let LogicalPlan::TableScan(scan) = p {
            if StreamingRelation::of_scan(scan).is_some() {
                found = true;
                return Ok(datafusion::common::tree_node::TreeNodeRecursion::Stop);
            }
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

#[async_trait]
impl TableProvider for StreamingRelation {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    async fn scan(
        &self,
        _state: &dyn DfSession,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Err(datafusion::error::DataFusionError::External(Box::new(
            SluiceError::query(
                class::STREAMING_QUERY_WITHOUT_WRITE_STREAM,
                format!(
                    "Queries with streaming sources must be executed with write_stream().start(): \
                     {} is a stream. Use write_stream() (e.g. the memory sink) to run it.",
                    self.provider
                        .as_ref()
                        .map(|p| p.description())
                        .unwrap_or_else(|| "an operator's output".into())
                ),
            ),
        )))
    }
}
