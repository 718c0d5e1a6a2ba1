//! Rows between blocking code and DataFusion's streams: a [`RowIter`] (a source's blocking
//! reads) as a stream of batches on tokio's blocking pool ([`row_stream`]), a running stream as
//! a blocking iterator for sinks ([`blocking_rows`]), and a stream that fails
//! ([`failed_stream`]).

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;

use crate::error::{Result, SluiceError};
use crate::types::RowIter;

/// A stream of rows of `schema` that fails with `err`.
pub fn failed_stream(schema: SchemaRef, err: SluiceError) -> SendableRecordBatchStream {
    let once = futures::stream::once(async move { Err(DataFusionError::External(Box::new(err))) });
    Box::pin(RecordBatchStreamAdapter::new(schema, once))
}

/// The rows of `iter` (a source's blocking reads, on tokio's blocking pool one piece at a
/// time) as a stream of batches with `schema`'s names and nullability.
pub fn row_stream(iter: RowIter, schema: SchemaRef) -> SendableRecordBatchStream {
    let conform = schema.clone();
    let stream = futures::stream::unfold(Some(iter), move |iter| {
        let schema = conform.clone();
        async move {
            let mut iter = iter?;
            let pulled = tokio::task::spawn_blocking(move || {
                let next = iter.next();
                (next, iter)
            })
            .await;
            let (next, iter) = match pulled {
                Ok(pulled) => pulled,
                Err(e) => {
                    let err = SluiceError::internal(format!("a source read panicked: {e}"));
                    return Some((Err(DataFusionError::External(Box::new(err))), None));
                }
            };
            match next? {
                Ok(b) => Some((conform_batch(b, &schema), Some(iter))),
                Err(e) => Some((Err(DataFusionError::External(Box::new(e))), None)),
            }
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// `batch` with the relation's `schema` (same columns; names and nullability from it).
pub fn conform_batch(
    batch: RecordBatch,
    schema: &SchemaRef,
) -> std::result::Result<RecordBatch, DataFusionError> {
    if batch.schema().as_ref() == schema.as_ref() {
        return Ok(batch);
    }
    Ok(RecordBatch::try_new(
        schema.clone(),
        batch.columns().to_vec(),
    )?)
}

/// A running partition of a batch's plan as a blocking iterator (for sinks, which are called
/// from ordinary threads).
pub struct BlockingStream {
    handle: tokio::runtime::Handle,
    stream: Option<SendableRecordBatchStream>,
}

/// `stream`'s batches as a blocking iterator, each polled on `handle`'s runtime.
pub fn blocking_rows(stream: SendableRecordBatchStream, handle: tokio::runtime::Handle) -> RowIter {
    Box::new(BlockingStream {
        handle,
        stream: Some(stream),
    })
}

impl Iterator for BlockingStream {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let stream = self.stream.as_mut()?;
        match self.handle.block_on(stream.next()) {
            Some(Ok(b)) => Some(Ok(b)),
            Some(Err(e)) => {
                self.stream = None;
                Some(Err(e.into()))
            }
            None => {
                self.stream = None;
                None
            }
        }
    }
}
