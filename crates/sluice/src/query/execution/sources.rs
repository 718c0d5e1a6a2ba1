//! The micro-batch sources of a query, in plan order (the order of the lines of `offsets/N`):
//! the calls the micro-batch loop makes on all of them at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::plan::incremental::{BatchInputs, RelationRows};
use crate::source::{Offset, Source, SourceProvider};
use crate::types::RowIter;

use super::core::SourceSlot;
use super::trigger::MicroBatchTrigger;

/// Rows and metrics each source read in one batch.
pub(crate) type SourcesRead = Vec<SourceRead>;

/// What a lazy read reports once it ran (see [`LazyRows::report`]).
type LazyReport = Box<dyn Fn() -> (usize, BTreeMap<String, String>) + Send + Sync>;

/// Rows and metrics one source read in one batch; for a lazy read, known once the batch ran.
#[derive(Default)]
pub(crate) struct SourceRead {
    rows: usize,
    metrics: BTreeMap<String, String>,
    lazy: Option<(LazyReport, usize)>,
}

impl SourceRead {
    /// The rows (counted once per use of the source in the plan, as Spark counts them) and the
    /// metrics.
    pub(crate) fn settle(self) -> (usize, BTreeMap<String, String>) {
        let (mut rows, mut metrics) = (self.rows, self.metrics);
        if let Some((report, uses)) = self.lazy {
            let (read, more) = report();
            rows += read * uses;
            metrics.extend(more);
        }
        (rows, metrics)
    }
}

/// The query's micro-batch sources.
pub(crate) struct MicroBatchSources {
    slots: Vec<SourceSlot<Box<dyn Source>>>,
}

impl MicroBatchSources {
    /// The sources the core created, in plan order.
    pub(crate) fn new(slots: Vec<SourceSlot<Box<dyn Source>>>) -> Self {
        Self { slots }
    }

    /// How many sources the query reads.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The sources' providers, in order.
    pub(crate) fn providers(&self) -> impl Iterator<Item = &Arc<dyn SourceProvider>> {
        self.slots.iter().map(|slot| &slot.provider)
    }

    /// `Trigger.AvailableNow`: each source fixes what "available now" means.
    pub(crate) fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        for slot in &mut self.slots {
            slot.source.prepare_for_trigger_available_now()?;
        }
        Ok(())
    }

    /// Each source's end offset for batch `batch_id`, from its start in `starts` and within the
    /// read limit of `trigger`; a source without an offset stays at its start.
    pub(crate) fn latest_offsets(
        &mut self,
        starts: &[Option<Offset>],
        trigger: MicroBatchTrigger,
        batch_id: u64,
    ) -> Result<Vec<Option<Offset>>> {
        let mut ends = Vec::with_capacity(self.slots.len());
        for (slot, start) in self.slots.iter_mut().zip(starts) {
            let limit = trigger.read_limit(slot.source.as_ref());
            let end = slot
                .source
                .latest_offset(start.as_ref(), limit)
                .map_err(|e| {
                    let source = slot.provider.description();
                    e.context(format!("batch {batch_id}: source {source}"))
                })?;
            ends.push(end.or_else(|| start.clone()));
        }
        Ok(ends)
    }

    /// Tells each source that its rows up to `ends` (the previous batch's end) are committed:
    /// it may forget what is before.
    pub(crate) fn commit(&mut self, ends: &[Option<Offset>]) -> Result<()> {
        for (slot, end) in self.slots.iter_mut().zip(ends) {
            if let Some(end) = end {
                slot.source.commit(end)?;
            }
        }
        Ok(())
    }

    /// getBatch of batch `batch_id`: each source's rows of `(start, end]` (none when the range is
    /// empty), by relation id, and what each source read.
    pub(crate) fn get_batch(
        &mut self,
        starts: &[Option<Offset>],
        ends: &[Option<Offset>],
        batch_id: u64,
    ) -> Result<(BatchInputs, SourcesRead)> {
        let mut inputs = BatchInputs::new();
        let mut read = Vec::with_capacity(self.slots.len());
        for (slot, (start, end)) in self.slots.iter_mut().zip(starts.iter().zip(ends)) {
            let Some(end) = end.as_ref().filter(|end| Some(*end) != start.as_ref()) else {
                read.push(SourceRead::default());
                continue;
            };
            let from = start.as_ref().map(|o| o.to_string());
            let context = format!(
                "batch {batch_id}: reading {} from {} to {end}",
                slot.provider.description(),
                from.unwrap_or_else(|| "the start".into()),
            );
            let got = slot
                .source
                .get_batch(start.as_ref(), end)
                .map_err(|e| e.context(&context))?;
            let rows = got.num_rows() * slot.uses;
            let (mut batches, metrics) = (got.batches, got.metrics);
            let Some(mut lazy) = got.lazy else {
                read.push(SourceRead {
                    rows,
                    metrics,
                    lazy: None,
                });
                inputs.insert(slot.relation_id, RelationRows::Batches(batches));
                continue;
            };
            if let (Some(reads), 1, true) = (&lazy.on_workers, slot.uses, batches.is_empty()) {
                // The workers' reads start as the plan pulls them, with the stateless plan
                // over them that runs there too.
                reads.set_context(context);
                inputs.insert(slot.relation_id, RelationRows::OnWorkers(Arc::clone(reads)));
                read.push(SourceRead {
                    rows,
                    metrics,
                    lazy: Some((lazy.report, slot.uses)),
                });
                continue;
            }
            let (partitions, report) = (lazy.take_partitions(), lazy.report);
            // Errors of a read that runs with the plan name the source and the range too.
            let partitions: Vec<RowIter> = partitions
                .into_iter()
                .map(|p| {
                    let context = context.clone();
                    Box::new(p.map(move |r| r.map_err(|e| e.context(&context)))) as RowIter
                })
                .collect();
            read.push(SourceRead {
                rows,
                metrics,
                lazy: Some((report, slot.uses)),
            });
            if slot.uses == 1 && batches.is_empty() {
                // Read as the plan pulls the rows (on a cluster, the workers' reads stream
                // to the stage that takes them).
                inputs.insert(slot.relation_id, RelationRows::lazy(partitions));
            } else {
                // A source the plan scans more than once (a self-join, a self-union) is read
                // before the batch runs.
                for p in partitions {
                    for b in p {
                        batches.push(b?);
                    }
                }
                inputs.insert(slot.relation_id, RelationRows::Batches(batches));
            }
        }
        Ok((inputs, read))
    }
}
