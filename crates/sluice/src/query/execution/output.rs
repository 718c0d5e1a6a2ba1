//! A batch's result rows on their way to the sink: counted as they pass (`numOutputRows`), and
//! checked when the sink returns, so that an error of the plan is reported as the plan's (not
//! the sink's) and a sink that returned before the plan ran to its end is caught.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Result, SluiceError};
use crate::sink::BatchStreams;
use crate::sync::MutexExt;
use crate::types::RowIter;

/// What the partitions of one batch's rows did.
pub(crate) struct Watch {
    shared: Arc<Shared>,
    partitions: usize,
}

#[derive(Default)]
struct Shared {
    rows: AtomicUsize,
    ended: AtomicUsize,
    /// The first error a partition returned.
    error: Mutex<Option<SluiceError>>,
}

/// `streams`, counted and watched.
pub(crate) fn watched(streams: BatchStreams) -> (BatchStreams, Watch) {
    let shared = Arc::new(Shared::default());
    let schema = streams.schema().clone();
    let parts: Vec<RowIter> = streams
        .into_partitions()
        .into_iter()
        .map(|inner| {
            Box::new(Watched {
                inner: Some(inner),
                shared: shared.clone(),
            }) as RowIter
        })
        .collect();
    let partitions = parts.len();
    (
        BatchStreams::new(schema, parts),
        Watch { shared, partitions },
    )
}

struct Watched {
    inner: Option<RowIter>,
    shared: Arc<Shared>,
}

impl Iterator for Watched {
    type Item = Result<arrow::array::RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.inner.as_mut()?.next();
        match &next {
            Some(Ok(b)) => {
                self.shared.rows.fetch_add(b.num_rows(), Ordering::Relaxed);
            }
            Some(Err(e)) => {
                self.shared.error.lock_unpoisoned().get_or_insert(e.clone());
                self.end();
            }
            None => self.end(),
        }
        next
    }
}

impl Watched {
    fn end(&mut self) {
        if self.inner.take().is_some() {
            self.shared.ended.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Watch {
    /// The rows the partitions returned.
    pub(crate) fn rows(&self) -> usize {
        self.shared.rows.load(Ordering::Relaxed)
    }

    /// The outcome of batch `batch_id` given what the sink returned: the plan's own error first
    /// (the sink's is then only its echo), then the sink's (with `sink` named), then whether
    /// every partition ran to its end.
    pub(crate) fn check(&self, written: Result<()>, batch_id: u64, sink: &str) -> Result<()> {
        if let Some(e) = self.shared.error.lock_unpoisoned().take() {
            let prefix = format!("batch {batch_id}:");
            return Err(match e.message().starts_with(&prefix) {
                true => e,
                false => e.context(format!("batch {batch_id}")),
            });
        }
        written.map_err(|e| e.context(format!("batch {batch_id}: sink {sink}")))?;
        let ended = self.shared.ended.load(Ordering::Relaxed);
        if ended < self.partitions {
            return Err(SluiceError::internal(format!(
                "batch {batch_id}: the sink {sink} returned before the batch's plan ran to its end \
                 ({ended} of {} partitions); the batch is not committed and a restart runs it \
                 again",
                self.partitions
            )));
        }
        Ok(())
    }
}
