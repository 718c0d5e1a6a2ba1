//! The engine's shared vocabulary: plain types every layer uses and that depend on nothing else
//! in the crate (output modes, triggers, batch and operator ids, watermarks and event times,
//! offsets, a batch's rows). Everything here is re-exported where users expect it
//! (`sluice::OutputMode`, `sluice::Trigger`, `sluice::BatchData`).

use std::fmt;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::error::{class, Result, SluiceError};

/// How a batch's result is written (Spark's `OutputMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputMode {
    /// Only new rows that will never change.
    Append,
    /// Rows that changed in this batch.
    Update,
    /// The whole result table every batch (aggregations only).
    Complete,
}

impl std::str::FromStr for OutputMode {
    type Err = SluiceError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "append" => Ok(OutputMode::Append),
            "update" => Ok(OutputMode::Update),
            "complete" => Ok(OutputMode::Complete),
            other => Err(SluiceError::query(
                class::STREAMING_OUTPUT_MODE_INVALID,
                format!("Unknown output mode {other:?}. Accepted output modes are 'append', 'complete', 'update'."),
            )),
        }
    }
}

/// When batches run (Spark's `Trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A batch every interval; `Duration::ZERO` is Spark's default trigger (as fast as possible).
    ProcessingTime(Duration),
    /// One batch with everything available, then stop (deprecated in Spark for AvailableNow).
    Once,
    /// Everything available at start, in as many batches as the read limits need, then stop.
    AvailableNow,
    /// Continuous processing (`query/execution/continuous.rs`): rows are processed as they arrive; an
    /// epoch is committed every checkpoint interval. At-least-once: after a restart, rows since
    /// the last committed epoch are written again.
    Continuous(Duration),
}

impl Default for Trigger {
    fn default() -> Self {
        Trigger::ProcessingTime(Duration::ZERO)
    }
}

impl OutputMode {
    /// Spark's name for the mode (`append`, `update`, `complete`).
    pub fn as_str(self) -> &'static str {
        match self {
            OutputMode::Append => "append",
            OutputMode::Update => "update",
            OutputMode::Complete => "complete",
        }
    }
}

/// The materialised result of one micro-batch, split in partitions as it was computed.
#[derive(Debug, Clone)]
pub struct BatchData {
    /// The schema every record batch in `partitions` has.
    pub schema: SchemaRef,
    /// The record batches, one `Vec` per partition, in partition order.
    pub partitions: Vec<Vec<RecordBatch>>,
}

impl BatchData {
    /// The number of rows across all partitions.
    pub fn num_rows(&self) -> usize {
        self.batches().map(|b| b.num_rows()).sum()
    }
    /// All record batches, partition by partition.
    pub fn batches(&self) -> impl Iterator<Item = &RecordBatch> {
        self.partitions.iter().flatten()
    }
    /// The whole batch as one `RecordBatch`.
    pub fn concat(&self) -> Result<RecordBatch> {
        Ok(arrow::compute::concat_batches(
            &self.schema,
            self.batches(),
        )?)
    }
}

/// A source's position. Offsets are JSON; equal JSON means an equal offset. They are written as
/// one compact line of `offsets/N` (e.g. `{"logOffset":3}` for the file source).
pub type Offset = serde_json::Value;

/// Event-time statistics of the rows that passed a watermark node in one batch, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EventTimeStats {
    /// The latest event time seen (ms).
    pub max: i64,
    /// The earliest event time seen (ms).
    pub min: i64,
    /// The sum of the event times seen (ms), for the average.
    pub sum: f64,
    /// How many rows with an event time were seen.
    pub count: u64,
}

impl EventTimeStats {
    /// Adds one row's event time (ms).
    pub fn add(&mut self, ms: i64) {
        if self.count == 0 {
            self.max = ms;
            self.min = ms;
        } else {
            self.max = self.max.max(ms);
            self.min = self.min.min(ms);
        }
        self.sum += ms as f64;
        self.count += 1;
    }
    /// Adds the statistics `o` of other rows (another partition, another batch).
    pub fn merge(&mut self, o: &EventTimeStats) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *o;
            return;
        }
        self.max = self.max.max(o.max);
        self.min = self.min.min(o.min);
        self.sum += o.sum;
        self.count += o.count;
    }
    /// The average event time (ms); none without rows.
    pub fn avg(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// Rows produced as they are pulled: one partition of a lazily read range, a stage's input or
/// output. After an error it ends.
pub type RowIter = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// A micro-batch's id: `N` in `offsets/N` and `commits/N` (Spark's `batchId`). In continuous
/// processing the same number is an epoch id ([`EpochId`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BatchId(pub u64);

/// A continuous-processing epoch: `E` in `offsets/E` and `commits/E`.
pub type EpochId = BatchId;

impl BatchId {
    /// The batch after this one.
    pub fn next(self) -> BatchId {
        BatchId(self.0 + 1)
    }
    /// The state store version this batch reads (`N`); it commits version `N + 1`.
    pub fn state_version(self) -> u64 {
        self.0
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A stateful operator's id: `op` in `state/<op>/`, counted bottom-up in the plan (Spark's
/// `operatorId`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct OperatorId(pub u32);

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An event-time watermark in milliseconds since the epoch (Spark's `batchWatermarkMs`). A
/// watermark never goes backwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WatermarkMs(pub i64);

impl WatermarkMs {
    /// The same instant in microseconds (Arrow's `Timestamp(Microsecond)`, Spark's timestamps).
    pub fn as_micros(self) -> EventTimeUs {
        EventTimeUs(self.0.saturating_mul(1000))
    }
}

impl fmt::Display for WatermarkMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An event time in microseconds since the epoch, the unit of Spark's `TimestampType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EventTimeUs(pub i64);

impl EventTimeUs {
    /// Whether a row at this event time is at or before `watermark` (Spark's lateness rule).
    pub fn is_at_or_before(self, watermark: WatermarkMs) -> bool {
        self <= watermark.as_micros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_mode_parses_spark_names_in_any_case() {
        for m in [OutputMode::Append, OutputMode::Update, OutputMode::Complete] {
            assert_eq!(m.as_str().to_uppercase().parse::<OutputMode>().unwrap(), m);
        }
        let e = "upsert".parse::<OutputMode>().unwrap_err();
        assert!(e.is(class::STREAMING_OUTPUT_MODE_INVALID), "{e}");
    }

    #[test]
    fn watermark_and_event_time_units() {
        let wm = WatermarkMs(1_500);
        assert_eq!(wm.as_micros(), EventTimeUs(1_500_000));
        assert!(EventTimeUs(1_500_000).is_at_or_before(wm));
        assert!(!EventTimeUs(1_500_001).is_at_or_before(wm));
        assert_eq!(WatermarkMs(i64::MAX).as_micros(), EventTimeUs(i64::MAX));
        assert_eq!(BatchId(3).next(), BatchId(4));
    }
}
