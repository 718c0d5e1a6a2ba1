//! `MemoryStream`: an in-memory source for tests (Spark's `MemoryStream`). Data added with
//! [`MemoryStream::add_batch`] appears in the next trigger. Offsets are the index of the last
//! added batch (Spark's `LongOffset`). Not fault-tolerant across process restarts.

use crate::error::class;
use crate::sync::MutexExt;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use super::{Offset, ReadLimit, Source, SourceBatch, SourceContext, SourceProvider};
use crate::error::{Result, SluiceError};

#[derive(Debug)]
struct Inner {
    schema: SchemaRef,
    batches: Mutex<Vec<RecordBatch>>,
}

/// A stream whose rows a test adds by hand.
#[derive(Debug, Clone)]
pub struct MemoryStream {
    inner: Arc<Inner>,
}

impl MemoryStream {
    /// An empty stream of rows of `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        Self {
            inner: Arc::new(Inner {
                schema,
                batches: Mutex::new(Vec::new()),
            }),
        }
    }
    /// Adds rows; returns the offset at which they become visible.
    pub fn add_batch(&self, batch: RecordBatch) -> Result<i64> {
        if batch.schema().fields() != self.inner.schema.fields() {
            return Err(SluiceError::query(
                class::MEMORY_STREAM_SCHEMA_MISMATCH,
                format!(
                    "the batch's schema {:?} differs from the stream's {:?}",
                    batch.schema(),
                    self.inner.schema
                ),
            ));
        }
        let mut b = self.inner.batches.lock_unpoisoned();
        b.push(batch);
        Ok(b.len() as i64 - 1)
    }
}

impl SourceProvider for MemoryStream {
    fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }
    fn description(&self) -> String {
        let cols: Vec<String> = self
            .inner
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        format!("MemoryStream[{}]", cols.join(","))
    }
    fn kind(&self) -> &'static str {
        "memory"
    }
    fn create_source(&self, _ctx: &SourceContext) -> Result<Box<dyn Source>> {
        Ok(Box::new(MemorySource {
            inner: self.inner.clone(),
        }))
    }
}

struct MemorySource {
    inner: Arc<Inner>,
}

fn as_index(o: Option<&Offset>) -> Result<i64> {
    match o {
        None => Ok(-1),
        Some(v) => v.as_i64().ok_or_else(|| {
            SluiceError::checkpoint(
                class::CHECKPOINT_CORRUPT_LOG,
                format!("memory stream offset must be a number, got {v}"),
            )
        }),
    }
}

impl Source for MemorySource {
    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        _limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        let n = self.inner.batches.lock_unpoisoned().len() as i64;
        if n == 0 {
            return Ok(start.cloned());
        }
        Ok(Some(serde_json::json!(n - 1)))
    }
    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        let from = (as_index(start)? + 1) as usize;
        let to = as_index(Some(end))?;
        let all = self.inner.batches.lock_unpoisoned();
        if to >= all.len() as i64 {
            return Err(SluiceError::checkpoint(
                class::MEMORY_STREAM_DATA_LOST,
                format!(
                    "the checkpoint asks for memory stream batch {to} but only {} exist (a memory \
                     stream does not survive a process restart); use a new checkpoint",
                    all.len()
                ),
            ));
        }
        let batches = if to < 0 {
            vec![]
        } else {
            all[from..=(to as usize)].to_vec()
        };
        Ok(SourceBatch {
            batches,
            ..Default::default()
        })
    }
}
