//! The memory sink: a named in-memory table that `session.sql` can query (for tests and
//! notebooks; not fault-tolerant across process restarts).

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use super::{BatchData, Sink, SinkContext, SinkProvider};
use crate::error::Result;
use crate::types::OutputMode;

type Partition = Arc<tokio::sync::RwLock<Vec<RecordBatch>>>;

/// Writes every batch into the table named by `queryName`.
#[derive(Debug)]
pub struct MemorySinkProvider {
    name: String,
    partition: Partition,
}

impl MemorySinkProvider {
    /// Registers the (empty) table `name` in `catalog` (the session's) right away, as Spark does.
    pub fn new(catalog: &SessionContext, name: String, schema: SchemaRef) -> Result<Self> {
        let table = MemTable::try_new(schema, vec![vec![]])?;
        let partition = table.batches[0].clone();
        let ctx = catalog;
        let _ = ctx.deregister_table(name.as_str())?;
        ctx.register_table(name.as_str(), Arc::new(table))?;
        Ok(Self { name, partition })
    }
}

impl SinkProvider for MemorySinkProvider {
    fn description(&self) -> String {
        format!("MemorySink[{}]", self.name)
    }
    fn create_sink(&self, ctx: &SinkContext) -> Result<Box<dyn Sink>> {
        Ok(Box::new(MemorySink {
            partition: self.partition.clone(),
            complete: ctx.output_mode == OutputMode::Complete,
            seen: BTreeSet::new(),
        }))
    }
    fn supports_continuous(&self) -> bool {
        true
    }
}

struct MemorySink {
    partition: Partition,
    complete: bool,
    seen: BTreeSet<u64>,
}

impl Sink for MemorySink {
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        if !self.seen.insert(batch_id) {
            log::info!("memory sink: skipping already committed batch {batch_id}");
            return Ok(());
        }
        let mut rows = self.partition.blocking_write();
        if self.complete {
            rows.clear();
        }
        rows.extend(data.batches().filter(|b| b.num_rows() > 0).cloned());
        Ok(())
    }
    fn write_continuous(&mut self, _epoch: u64, data: &BatchData) -> Result<()> {
        let mut rows = self.partition.blocking_write();
        rows.extend(data.batches().filter(|b| b.num_rows() > 0).cloned());
        Ok(())
    }
}
