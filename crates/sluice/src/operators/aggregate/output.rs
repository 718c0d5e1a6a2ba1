//! Output rows: the final values of stored states, every key in state (complete mode), the
//! output batch in the operator's schema, and the batch's progress.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::Schema;
use datafusion::logical_expr::EmitTo;

use super::StreamingAggregate;
use crate::error::Result;
use crate::operators::stateful::OperatorOutput;
use crate::progress::StateOperatorProgress;
use crate::state::StateStore;

impl StreamingAggregate {
    /// The batch's output and progress: `counts` = (updated, removed, dropped by watermark),
    /// `timings` = (all updates ms, all removals ms).
    pub(super) fn report(
        &self,
        rows: RecordBatch,
        counts: (u64, u64, u64),
        timings: (i64, i64),
    ) -> OperatorOutput {
        let (updated, removed, dropped) = counts;
        OperatorOutput {
            rows: rows.into(),
            progress: StateOperatorProgress {
                num_rows_updated: updated as i64,
                num_rows_removed: removed as i64,
                all_updates_time_ms: timings.0,
                all_removals_time_ms: timings.1,
                num_rows_dropped_by_watermark: dropped as i64,
                ..Default::default()
            },
        }
    }

    /// Every key in state with its final values (complete mode).
    pub(super) fn all_rows(&self, stores: &[&mut dyn StateStore]) -> Result<RecordBatch> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::new();
        for store in stores {
            for (k, v) in store.iter() {
                keys.push(k.to_vec());
                values.push(v.to_vec());
            }
        }
        if keys.is_empty() {
            return Ok(RecordBatch::new_empty(self.output_schema.clone()));
        }
        let key_arrays = self.decode_keys(None, &keys)?;
        let states = self.decode_states(None, &values)?;
        let finals = self.evaluate_states(&states, values.len())?;
        self.output_batch(key_arrays, finals)
    }

    /// Decodes stored keys (from partition `p`'s store; `None`: from any) into the key
    /// columns (none for a global aggregation).
    pub(super) fn decode_keys<B: AsRef<[u8]>>(
        &self,
        p: Option<usize>,
        keys: &[B],
    ) -> Result<Vec<ArrayRef>> {
        self.layout
            .key()
            .decode_trusted(keys)
            .map_err(|e| self.location.corrupt(p, "an aggregation key", e))
    }

    /// Decodes stored values (from partition `p`'s store; `None`: from any) into the
    /// accumulators' state fields.
    pub(super) fn decode_states<B: AsRef<[u8]>>(
        &self,
        p: Option<usize>,
        values: &[B],
    ) -> Result<Vec<ArrayRef>> {
        self.layout
            .value()
            .decode_trusted(values)
            .map_err(|e| self.location.corrupt(p, "an aggregation state value", e))
    }

    /// The final values of `n` stored states (all aggregates' state fields, in order).
    pub(super) fn evaluate_states(&self, states: &[ArrayRef], n: usize) -> Result<Vec<ArrayRef>> {
        let ident: Vec<usize> = (0..n).collect();
        let mut out = Vec::new();
        let mut offset = 0;
        for a in &self.aggs {
            let mut acc = a.accumulator()?;
            acc.merge_batch(&states[offset..offset + a.n_state], &ident, n)?;
            out.push(acc.evaluate(EmitTo::All)?);
            offset += a.n_state;
        }
        Ok(out)
    }

    /// Key columns and final values as one batch of the output schema.
    pub(super) fn output_batch(
        &self,
        keys: Vec<ArrayRef>,
        finals: Vec<ArrayRef>,
    ) -> Result<RecordBatch> {
        let mut cols = keys;
        cols.extend(finals);
        let fields = self.output_schema.fields();
        let cols: Vec<ArrayRef> = cols
            .into_iter()
            .zip(fields.iter())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    cast(&c, f.data_type())
                }
            })
            .collect::<Result<_, _>>()?;
        // Fields may be declared non-nullable by the planner while the batch has nulls; use the
        // arrays' own nullability.
        let schema = Arc::new(Schema::new(
            fields
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        Ok(RecordBatch::try_new(schema, cols)?)
    }
}
