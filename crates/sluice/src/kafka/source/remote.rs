//! A Kafka source's batch read by a cluster's workers (`sluice.distributed.workers`), as
//! Spark's executors read a Kafka source's offset ranges: the driver resolves the batch's ranges
//! per partition (data loss and reset partitions handled there, as in one process) and cuts them
//! into contiguous runs, one per worker that answers; each worker reads its ranges with a
//! consumer of its own, made from the same options (`kafka.*` security settings included), and
//! sends one batch of records per range, in order. The rows are those of a read in one process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{kafka_schema_with, KafkaSourceProvider};
use crate::distributed::{ReadCounts, ReadItem, ReadItems, ReadOnWorkers};
use crate::error::Result;
use crate::source::remote::{read_in_runs, ReadSpec, WorkerReads};

/// One partition's offsets to read: topic, partition, first offset, end offset (exclusive).
pub(crate) type OffsetRange = (String, i32, i64, i64);

/// A Kafka read's spec ([`ReadSpec::Kafka`]).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KafkaRead {
    options: HashMap<String, String>,
    ranges: Vec<OffsetRange>,
}

/// The records of `ranges` read by the workers of `on`, a partition per worker (its run of the
/// ranges, one batch per range in order), as the batch's plan pulls them, each a few batches
/// ahead of this process. `rows` counts them.
pub(super) fn read_on_workers(
    p: &KafkaSourceProvider,
    on: &ReadOnWorkers,
    ranges: Vec<OffsetRange>,
    rows: Arc<AtomicU64>,
) -> Result<Arc<WorkerReads>> {
    read_in_runs(
        on,
        &ranges,
        &kafka_schema_with(p.include_headers),
        |run, _| {
            Ok(ReadSpec::Kafka(KafkaRead {
                options: p.options.0.clone(),
                ranges: run.to_vec(),
            }))
        },
        Arc::new(move |c: ReadCounts| {
            rows.fetch_add(c.rows, Ordering::Relaxed);
        }),
    )
}

/// Runs a Kafka read on this worker: a consumer of its own from the spec's options, each range
/// read as one batch, then the count of the rows.
pub(crate) fn run(spec: KafkaRead) -> Result<ReadItems> {
    let provider = KafkaSourceProvider::try_new(&spec.options)?;
    let mut source = provider.source(None, std::path::PathBuf::new())?;
    let mut ranges = spec.ranges.into_iter();
    let (mut rows, mut ended) = (0u64, false);
    Ok(Box::new(std::iter::from_fn(move || {
        if ended {
            return None;
        }
        let Some((t, p, s, e)) = ranges.next() else {
            ended = true;
            return Some(Ok(ReadItem::Counts(ReadCounts {
                rows,
                ..Default::default()
            })));
        };
        let read = source.read_partition(&t, p, s, e);
        match &read {
            Ok(batch) => rows += batch.num_rows() as u64,
            Err(_) => ended = true,
        }
        Some(read.map(ReadItem::Rows))
    })))
}
