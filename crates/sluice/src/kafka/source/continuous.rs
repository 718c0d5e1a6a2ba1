//! The Kafka source in continuous processing (Spark's `KafkaContinuousStream`): records read
//! slice by slice as they arrive.

use super::*;

/// At most this many records per continuous slice.
pub(super) const MAX_RECORDS_PER_SLICE: usize = 8192;

/// The Kafka source under continuous processing: one consumer assigned to every partition at
/// the epoch's start offsets, polled with a short timeout. Partitions added while the query
/// runs are picked up at the next restart (from their earliest offset).
pub(super) struct KafkaContinuousReader {
    pub(super) src: KafkaSource,
    /// Next offset per partition.
    pub(super) next: PartitionOffsets,
}

impl ContinuousReader for KafkaContinuousReader {
    fn poll(&mut self, max_wait: Duration) -> Result<Vec<RecordBatch>> {
        let mut rows = KafkaRows::new(self.src.p.include_headers);
        let mut wait = max_wait;
        while rows.len() < MAX_RECORDS_PER_SLICE {
            let Some(msg) = self.src.fetcher.poll(wait) else {
                break;
            };
            if matches!(msg, Err(rdkafka::error::KafkaError::PartitionEOF(_))) {
                wait = Duration::ZERO;
                continue;
            }
            let msg = msg.map_err(|e| {
                let msg = format!("cannot read from Kafka: {e}");
                if matches!(
                    e.rdkafka_error_code(),
                    Some(rdkafka::types::RDKafkaErrorCode::OffsetOutOfRange)
                ) {
                    SluiceError::input(class::KAFKA_DATA_LOSS, format!("{msg}: some data may have been lost because they are not available in Kafka any more"))
                } else {
                    self.src.err("cannot read from Kafka", e)
                }
            })?;
            let slot = self
                .next
                .entry(msg.topic().to_string())
                .or_default()
                .entry(msg.partition())
                .or_insert(0);
            if msg.offset() < *slot {
                continue;
            }
            *slot = msg.offset() + 1;
            rows.push(&msg)?;
            wait = Duration::ZERO;
        }
        if rows.len() == 0 {
            return Ok(vec![]);
        }
        Ok(vec![rows.finish()?])
    }
    fn offset(&self) -> Offset {
        offsets_json(&self.next)
    }
    fn caught_up(&mut self) -> Result<bool> {
        for (t, parts) in &self.next {
            for (p, next) in parts {
                let (_, high) = self.src.watermarks(t, *p)?;
                if high > *next {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}
