//! Reading records: a range of offsets per partition into Arrow batches (a micro-batch's
//! `getBatch`, and batch reads with [`read_batch`]), with Spark's data-loss rules.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::{Offset as KOffset, TopicPartitionList};

use super::remote::OffsetRange;
use super::rows::KafkaRows;
use super::spec::Side;
use super::{
    bad_option, get, kafka_schema_with, KafkaSource, KafkaSourceProvider, PartitionOffsets,
};
use crate::error::{class, Result, SluiceError};

/// A batch read, `spark.read.format("kafka")...load()`: the records of the subscribed
/// partitions from the starting offsets (`startingOffsets`, `startingTimestamp`,
/// `startingOffsetsByTimestamp`; default earliest) to the ending ones (`endingOffsets`,
/// `endingTimestamp`, `endingOffsetsByTimestamp`; default latest), read once, in Spark's Kafka
/// schema. Nothing is written anywhere.
pub fn read_batch(options: &HashMap<String, String>) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let p = KafkaSourceProvider::parse(options, true)?;
    // No checkpoint: the initial offsets file is never read nor written (no `latest_offset`).
    let mut src = p.source(None, std::path::PathBuf::new())?;
    let ranges = src.ranges()?;
    let start = src.resolve(&p.starting, Side::Starting, &ranges)?;
    let mut end = src.resolve(&p.ending, Side::Ending, &ranges)?;
    // Spark's rule: an ending offset before the starting one is an error.
    for (t, parts) in &mut end {
        for (part, e) in parts.iter_mut() {
            let s = get(&start, t, *part).unwrap_or(0);
            if *e < s {
                return Err(bad_option(format!(
                    "The ending offset {e} of {t}-{part} is before its starting offset {s}: \
                     check endingOffsets (or endingTimestamp) against startingOffsets"
                )));
            }
        }
    }
    let (batches, _) = src.read(&start, &end)?;
    Ok((kafka_schema_with(p.include_headers), batches))
}

impl KafkaSource {
    /// The records from `start` to `end` (exclusive) of each partition in `end`, as one batch
    /// per partition (more with `minPartitions`), and how many were skipped as lost.
    pub(super) fn read(
        &mut self,
        start: &PartitionOffsets,
        end: &PartitionOffsets,
    ) -> Result<(Vec<RecordBatch>, u64)> {
        let (ranges, lost) = self.ranges_between(start, end)?;
        let out = ranges
            .iter()
            .map(|(t, p, s, e)| self.read_partition(t, *p, *s, *e))
            .collect::<Result<Vec<_>>>()?;
        let total: usize = out.iter().map(RecordBatch::num_rows).sum();
        let batches = match self.p.min_partitions {
            Some(min) if min > out.len() && total > 0 => out
                .into_iter()
                .flat_map(|b| {
                    // Spark's KafkaOffsetRangeCalculator: pieces in proportion to the size.
                    let pieces = ((b.num_rows() as f64 / total as f64) * min as f64)
                        .round()
                        .max(1.0) as usize;
                    let step = b.num_rows().div_ceil(pieces).max(1);
                    (0..b.num_rows())
                        .step_by(step)
                        .map(|at| b.slice(at, step.min(b.num_rows() - at)))
                        .collect::<Vec<_>>()
                })
                .collect(),
            _ if out.is_empty() => vec![KafkaRows::new(self.p.include_headers).finish()?],
            _ => out,
        };
        Ok((batches, lost))
    }

    /// Each partition's offsets to read from `start` to `end` (exclusive), Spark's data-loss
    /// rules applied, and how many were skipped as lost.
    pub(super) fn ranges_between(
        &mut self,
        start: &PartitionOffsets,
        end: &PartitionOffsets,
    ) -> Result<(Vec<OffsetRange>, u64)> {
        let mut lost: u64 = 0;
        let mut ranges: Vec<OffsetRange> = Vec::new();
        for (t, parts) in end {
            for (p, e) in parts {
                let (low, _) = self.watermarks(t, *p)?;
                let mut s = get(start, t, *p).unwrap_or(low);
                if *e < s {
                    // The partition was reset (recreated topic, failOnDataLoss=false): from its start.
                    log::warn!(
                        "Partition {t}-{p} went back from offset {s} to {e}: the topic was \
                         probably deleted and recreated, and records may have been missed. \
                         Reading it again from offset {low} (failOnDataLoss=false)."
                    );
                    s = low;
                }
                if *e <= s {
                    continue;
                }
                if s < low {
                    let msg = format!(
                        "Some data may have been lost because they are not available in Kafka any more; \
                         either the data was aged out by Kafka or the topic may have been deleted before \
                         all the data in the topic was processed: topic {t}, partition {p}, offsets {s} to {} \
                         are gone. If you want your streaming query to continue, set the source option \
                         failOnDataLoss to false.",
                        low.min(*e) - 1
                    );
                    if self.p.fail_on_data_loss {
                        return Err(SluiceError::input(class::KAFKA_DATA_LOSS, msg));
                    }
                    log::warn!("{msg} Skipping them (failOnDataLoss=false).");
                    lost += (low.min(*e) - s) as u64;
                    s = low;
                    if *e <= s {
                        continue;
                    }
                }
                ranges.push((t.clone(), *p, s, *e));
            }
        }
        Ok((ranges, lost))
    }

    /// Offsets `s..e` of `t`-`p`, read with the consumer (transaction markers and compacted
    /// records leave gaps, which are not data loss).
    pub(super) fn read_partition(
        &mut self,
        t: &str,
        p: i32,
        s: i64,
        e: i64,
    ) -> Result<RecordBatch> {
        let mut rows = KafkaRows::new(self.p.include_headers);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(t, p, KOffset::Offset(s))
            .map_err(|e| self.err("cannot assign", e))?;
        self.fetcher
            .assign(&tpl)
            .map_err(|e| self.err("cannot assign", e))?;
        let deadline = Instant::now() + self.p.poll_timeout;
        let mut next = s;
        while next < e {
            if Instant::now() > deadline && self.was_reached() {
                return Err(self.unavailable(
                    &format!("reading {t}-{p} offsets {next}..{e}"),
                    format!(
                        "nothing came for {} ms (kafkaConsumer.pollTimeoutMs)",
                        self.p.poll_timeout.as_millis()
                    ),
                ));
            }
            if Instant::now() > deadline {
                return Err(SluiceError::connector(
                    class::KAFKA_TIMEOUT,
                    format!(
                        "timed out reading {t}-{p} offsets {next}..{e} after {} ms \
                         (kafkaConsumer.pollTimeoutMs): is the broker at {} running?",
                        self.p.poll_timeout.as_millis(),
                        self.p.client[0].1
                    ),
                ));
            }
            let Some(msg) = self.fetcher.poll(Duration::from_millis(200)) else {
                continue;
            };
            let msg = match msg {
                Ok(m) => m,
                // The end of the partition before `e`: the offsets left hold no record for a
                // consumer (transaction markers, records of aborted transactions under
                // read_committed, compacted records) if the partition still reaches `e`.
                Err(rdkafka::error::KafkaError::PartitionEOF(_)) => {
                    if self.watermarks(t, p)?.1 >= e {
                        break;
                    }
                    continue;
                }
                // A broker restarting: the consumer reconnects and fetches again.
                Err(err) if crate::kafka::log::is_unreachable(&err) => {
                    log::debug!("reading {t}-{p}: {err}; the consumer reconnects");
                    continue;
                }
                Err(err) => return Err(self.err(&format!("cannot read {t}-{p}"), err)),
            };
            if msg.offset() < next {
                continue;
            }
            if msg.offset() >= e {
                break;
            }
            rows.push(&msg)?;
            next = msg.offset() + 1;
        }
        // No fetching in the background until the next range.
        self.fetcher
            .unassign()
            .map_err(|e| self.err("cannot unassign", e))?;
        rows.finish()
    }
}
