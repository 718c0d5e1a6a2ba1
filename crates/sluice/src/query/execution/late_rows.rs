//! The late-row side output (`lateRows.*` writer options): a sink of its own, fed the input rows
//! a stateful operator drops as late in each batch, before `commits/N` (a replayed batch drops
//! the same rows again, and the sink takes a batch id once).

use std::collections::BTreeMap;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::error::Result;
use crate::plan::staged::StagedPlan;
use crate::query::writer::{sink_provider, LateRowsSpec};
use crate::sink::Sink;
use crate::types::BatchData;

use super::core::StreamExecution;

/// The running late-row sink of a query.
pub(crate) struct LateRowsSink {
    sink: Box<dyn Sink>,
    /// The stateful operator's input schema.
    schema: SchemaRef,
    description: String,
}

impl LateRowsSink {
    /// Turns on the late-row output of `plan` and opens its sink (`spec`) under
    /// `<checkpoint>/lateRows`.
    pub(crate) fn open(
        core: &StreamExecution,
        plan: &mut StagedPlan,
        spec: &LateRowsSpec,
    ) -> Result<Self> {
        let schema = plan.keep_late_rows()?;
        let (provider, _) = sink_provider(
            &core.session,
            &spec.format,
            &spec.options,
            schema.clone(),
            None,
        )?;
        Ok(Self {
            sink: core.create_side_sink(provider.as_ref(), core.checkpoint.late_rows_dir())?,
            schema,
            description: crate::redact::redacted(provider.description()),
        })
    }

    /// Writes batch `batch_id`'s late rows; returns how many there were.
    pub(crate) fn add_batch(&mut self, batch_id: u64, rows: Vec<RecordBatch>) -> Result<usize> {
        let rows = BatchData {
            schema: self.schema.clone(),
            partitions: vec![rows],
        };
        self.sink.add_batch(batch_id, &rows).map_err(|e| {
            e.context(format!(
                "batch {batch_id}: late-row sink {}",
                self.description
            ))
        })?;
        Ok(rows.num_rows())
    }

    /// Adds the batch's late-row figures (`written` rows) to the main sink's progress metrics.
    pub(crate) fn add_metrics(&self, written: usize, metrics: &mut BTreeMap<String, String>) {
        metrics.insert("numLateRowsWritten".into(), written.to_string());
        metrics.insert("lateRowsSink".into(), self.description.clone());
    }
}
