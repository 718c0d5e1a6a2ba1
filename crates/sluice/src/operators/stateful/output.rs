//! A stateful operator's output rows for one batch ([`OutputRows`]): kept in memory up to a
//! share of the memory budget, written to an Arrow IPC spill file past it, and read back as the
//! plan above the operator pulls them. A deduplication's output can be as large as its input;
//! with the input taken a chunk at a time, this keeps its output from filling memory instead.

use std::fs::File;
use std::io::{BufReader, BufWriter, Seek, SeekFrom};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::error::{Result, SluiceError};

/// An operator's output rows as the plan above it takes them: in memory, or read back from the
/// spill file as they are pulled.
pub(crate) enum StageRows {
    /// The rows, in memory.
    InMemory(Vec<RecordBatch>),
    /// The rows, read back from the spill file as they are pulled.
    Spilled(crate::types::RowIter),
}

impl StageRows {
    /// The rows, in order, as they are pulled.
    pub(crate) fn into_rows(self) -> crate::types::RowIter {
        match self {
            StageRows::InMemory(b) => Box::new(b.into_iter().map(Ok)),
            StageRows::Spilled(rows) => rows,
        }
    }
}

/// One batch's output rows of a stateful operator.
pub(crate) struct OutputRows {
    /// The schema of every batch pushed.
    schema: SchemaRef,
    kept: Vec<RecordBatch>,
    kept_bytes: usize,
    /// Past this many bytes in memory, the rows go to a spill file.
    limit: usize,
    spill: Option<StreamWriter<BufWriter<File>>>,
    rows: usize,
}

impl std::fmt::Debug for OutputRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OutputRows({} rows, {})",
            self.rows,
            if self.spill.is_some() {
                "spilled"
            } else {
                "in memory"
            }
        )
    }
}

impl From<RecordBatch> for OutputRows {
    /// Rows already in memory: they stay there.
    fn from(batch: RecordBatch) -> Self {
        Self {
            schema: batch.schema(),
            rows: batch.num_rows(),
            kept_bytes: 0,
            kept: vec![batch],
            limit: usize::MAX,
            spill: None,
        }
    }
}

impl OutputRows {
    /// No rows yet, of `schema`; spilled past `limit` bytes in memory.
    pub(crate) fn spilling(schema: SchemaRef, limit: usize) -> Self {
        Self {
            schema,
            kept: Vec::new(),
            kept_bytes: 0,
            limit,
            spill: None,
            rows: 0,
        }
    }

    /// The schema of the rows.
    pub(crate) fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The number of rows.
    #[cfg(test)]
    pub(crate) fn num_rows(&self) -> usize {
        self.rows
    }

    /// Whether the rows went to a spill file.
    #[cfg(test)]
    pub(crate) fn spilled(&self) -> bool {
        self.spill.is_some()
    }

    /// Adds `batch` (of the schema given at the start).
    pub(crate) fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.rows += batch.num_rows();
        if let Some(w) = &mut self.spill {
            w.write(&batch)?;
            return Ok(());
        }
        self.kept_bytes += batch.get_array_memory_size();
        self.kept.push(batch);
        if self.kept_bytes > self.limit {
            let file = tempfile::tempfile().map_err(|e| spill_error("create", e))?;
            let mut w = StreamWriter::try_new(BufWriter::new(file), &self.schema)?;
            for b in self.kept.drain(..) {
                w.write(&b)?;
            }
            self.kept_bytes = 0;
            self.spill = Some(w);
        }
        Ok(())
    }

    /// The rows, in order, as they are read (back from the spill file when they were spilled).
    pub(crate) fn into_rows(self) -> Result<crate::types::RowIter> {
        let schema = self.schema.clone();
        Ok(self.into_stage_rows(&schema, 1)?.into_rows())
    }

    /// The rows as a relation of `schema` (the same columns; names and nullability from it)
    /// that the plan scans `scans` times: in memory, or read back from the spill file as the
    /// plan pulls them (read back first when the plan scans them more than once).
    pub(crate) fn into_stage_rows(self, schema: &SchemaRef, scans: usize) -> Result<StageRows> {
        let Some(w) = self.spill else {
            let batches = self
                .kept
                .into_iter()
                .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(StageRows::InMemory(batches));
        };
        let mut file = w
            .into_inner()?
            .into_inner()
            .map_err(|e| spill_error("write", e.into_error()))?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| spill_error("read", e))?;
        let reader = StreamReader::try_new(BufReader::new(file), None)?;
        let rows: crate::types::RowIter = Box::new(reader.map(|b| b.map_err(SluiceError::from)));
        if scans > 1 {
            return Ok(StageRows::InMemory(rows.collect::<Result<_>>()?));
        }
        Ok(StageRows::Spilled(rows))
    }
}

fn spill_error(what: &str, e: std::io::Error) -> SluiceError {
    SluiceError::io(
        crate::error::Fault::Connector,
        format!(
            "cannot {what} the spill file of a stateful operator's output in the temporary \
             directory {} (free space there, or point TMPDIR at a disk with room)",
            std::env::temp_dir().display()
        ),
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn values(rows: StageRows) -> Vec<i64> {
        let batches: Vec<RecordBatch> = match rows {
            StageRows::InMemory(b) => b,
            lazy => lazy.into_rows().map(|b| b.unwrap()).collect(),
        };
        batches
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                assert!(!b.schema().field(0).is_nullable() || a.null_count() == 0);
                a.values().to_vec()
            })
            .collect()
    }

    #[test]
    fn rows_past_the_limit_spill_and_come_back_in_order() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let named = Arc::new(Schema::new(vec![Field::new("out", DataType::Int64, true)]));
        let batch = |r: std::ops::Range<i64>| {
            RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from_iter_values(r))],
            )
            .unwrap()
        };
        // Under the limit: in memory.
        let mut small = OutputRows::spilling(schema.clone(), 1 << 20);
        small.push(batch(0..10)).unwrap();
        assert!(!small.spilled());
        assert_eq!(
            values(small.into_stage_rows(&named, 1).unwrap()),
            (0..10).collect::<Vec<_>>()
        );
        // Past it: every row from the file, in order, in the relation's schema.
        let mut big = OutputRows::spilling(schema.clone(), 1_000);
        for k in 0..20 {
            big.push(batch(k * 100..(k + 1) * 100)).unwrap();
            big.push(batch(0..0)).unwrap();
        }
        assert!(big.spilled());
        assert_eq!(big.num_rows(), 2_000);
        let relation = big.into_stage_rows(&named, 1).unwrap();
        assert!(matches!(relation, StageRows::Spilled(_)));
        assert_eq!(values(relation), (0..2_000).collect::<Vec<_>>());
        // Scanned twice: read back into memory.
        let mut twice = OutputRows::spilling(schema.clone(), 1_000);
        for k in 0..20 {
            twice.push(batch(k * 100..(k + 1) * 100)).unwrap();
        }
        let relation = twice.into_stage_rows(&named, 2).unwrap();
        assert!(matches!(relation, StageRows::InMemory(_)));
        assert_eq!(values(relation), (0..2_000).collect::<Vec<_>>());
    }
}
