//! A stateful operator's input for one batch ([`StageInput`]): the rows its input plan produces,
//! pulled chunk by chunk as the plan runs, so a batch larger than memory reaches the operator a
//! piece of the memory budget at a time (`crate::conf::MemoryBudget::stateful_chunk_bytes`).

use arrow::array::RecordBatch;

use crate::error::Result;
use crate::types::RowIter;

/// How a stateful operator's input is cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunking {
    /// A chunk ends once its batches hold this many bytes of Arrow memory.
    pub bytes: usize,
    /// A chunk has at most this many rows (a test hook: `crate::testing`); batches are sliced.
    pub rows: Option<usize>,
}

#[cfg(test)]
impl Chunking {
    /// The whole input as one chunk.
    pub(crate) const WHOLE: Chunking = Chunking {
        bytes: usize::MAX,
        rows: None,
    };
}

/// One input of a stateful operator in one batch (one per child of the operator). An operator
/// that can work chunk by chunk calls [`next_chunk`](Self::next_chunk) until it returns `None`;
/// one that needs every row at once (its rows become in-memory state anyway) calls
/// [`collect_all`](Self::collect_all).
pub(crate) struct StageInput {
    rows: RowIter,
    chunking: Chunking,
    /// The rest of a batch cut by `chunking.rows`.
    rest: Option<RecordBatch>,
}

impl std::fmt::Debug for StageInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StageInput({:?})", self.chunking)
    }
}

impl StageInput {
    /// The rows `rows` yields, cut by `chunking`.
    pub(crate) fn new(rows: RowIter, chunking: Chunking) -> Self {
        Self {
            rows,
            chunking,
            rest: None,
        }
    }

    /// Rows already in memory, cut by `chunking`.
    #[cfg(test)]
    pub(crate) fn from_batches(batches: Vec<RecordBatch>, chunking: Chunking) -> Self {
        Self::new(Box::new(batches.into_iter().map(Ok)), chunking)
    }

    /// The bytes of rows a chunk holds (a share of the memory budget).
    pub(crate) fn chunk_bytes(&self) -> usize {
        self.chunking.bytes
    }

    /// Every row that is left.
    pub(crate) fn collect_all(mut self) -> Result<Vec<RecordBatch>> {
        let mut all: Vec<RecordBatch> = self.rest.take().into_iter().collect();
        for b in self.rows {
            all.push(b?);
        }
        Ok(all)
    }

    /// The next chunk of rows: batches until they hold the chunk's bytes (or rows), or `None`
    /// once the input ended. Empty batches are skipped.
    pub(crate) fn next_chunk(&mut self) -> Result<Option<Vec<RecordBatch>>> {
        let mut chunk = Vec::new();
        let (mut bytes, mut rows) = (0usize, 0usize);
        let max_rows = self.chunking.rows.unwrap_or(usize::MAX);
        loop {
            let batch = match self.rest.take() {
                Some(b) => b,
                None => match self.rows.next() {
                    Some(b) => b?,
                    None => break,
                },
            };
            if batch.num_rows() == 0 {
                continue;
            }
            let room = max_rows - rows;
            let batch = if batch.num_rows() > room {
                self.rest = Some(batch.slice(room, batch.num_rows() - room));
                batch.slice(0, room)
            } else {
                batch
            };
            rows += batch.num_rows();
            bytes = bytes.saturating_add(batch.get_array_memory_size());
            chunk.push(batch);
            if rows >= max_rows || bytes >= self.chunking.bytes {
                break;
            }
        }
        Ok((!chunk.is_empty()).then_some(chunk))
    }

    /// The chunks of the input, each handed to `each` with whether it is the last one. An input
    /// without rows gives one empty last chunk (a batch without rows still runs: a global
    /// aggregation emits, state is evicted). `each` sees the first chunk with `last = true` when
    /// the input fits one chunk: the common case runs as if there were no chunks.
    pub(crate) fn for_each_chunk(
        mut self,
        mut each: impl FnMut(Vec<RecordBatch>, bool) -> Result<()>,
    ) -> Result<()> {
        let mut chunk = self.next_chunk()?.unwrap_or_default();
        loop {
            match self.next_chunk()? {
                None => return each(chunk, true),
                Some(next) => {
                    each(chunk, false)?;
                    chunk = next;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use std::sync::Arc;

    fn batch(schema: &SchemaRef, values: std::ops::Range<i64>) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(values))],
        )
        .unwrap()
    }

    fn chunks(input: StageInput) -> Vec<(Vec<usize>, bool)> {
        let mut seen = Vec::new();
        input
            .for_each_chunk(|c, last| {
                seen.push((c.iter().map(|b| b.num_rows()).collect(), last));
                Ok(())
            })
            .unwrap();
        seen
    }

    #[test]
    fn chunks_cut_by_rows_and_bytes_keep_every_row_in_order() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batches = vec![
            batch(&schema, 0..5),
            batch(&schema, 5..5),
            batch(&schema, 5..12),
        ];
        let by_rows = Chunking {
            bytes: usize::MAX,
            rows: Some(4),
        };
        let input = StageInput::from_batches(batches.clone(), by_rows);
        assert_eq!(
            chunks(input),
            vec![(vec![4], false), (vec![1, 3], false), (vec![4], true)]
        );
        // Every row, in order, whatever the cut.
        let mut input = StageInput::from_batches(batches.clone(), by_rows);
        let mut values = Vec::new();
        while let Some(c) = input.next_chunk().unwrap() {
            for b in c {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                values.extend(a.values().iter().copied());
            }
        }
        assert_eq!(values, (0..12).collect::<Vec<_>>());
        // A byte limit below one batch: a chunk per batch.
        let by_bytes = Chunking {
            bytes: 1,
            rows: None,
        };
        let input = StageInput::from_batches(batches.clone(), by_bytes);
        assert_eq!(chunks(input), vec![(vec![5], false), (vec![7], true)]);
        // The whole input fits: one last chunk, as without chunks.
        let input = StageInput::from_batches(batches, Chunking::WHOLE);
        assert_eq!(chunks(input), vec![(vec![5, 7], true)]);
        // No rows: one empty last chunk.
        let input = StageInput::from_batches(vec![], by_rows);
        assert_eq!(chunks(input), vec![(vec![], true)]);
    }

    #[test]
    fn an_error_of_the_input_plan_reaches_the_operator() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let rows: RowIter = Box::new(
            vec![
                Ok(batch(&schema, 0..3)),
                Err(crate::error::SluiceError::internal("boom")),
            ]
            .into_iter(),
        );
        let input = StageInput::new(
            rows,
            Chunking {
                bytes: 1,
                rows: None,
            },
        );
        let e = input.for_each_chunk(|_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("boom"), "{e}");
    }
}
