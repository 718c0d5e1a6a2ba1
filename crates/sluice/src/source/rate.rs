//! Rate sources: `rate` (rows per second of wall-clock time) and `rate-micro-batch` (a fixed
//! number of rows per batch, deterministic whatever the trigger). Columns: `timestamp
//! TIMESTAMP`, `value BIGINT` (from 0). On a cluster the workers generate a micro-batch's rows,
//! a contiguous run of its values each, as Spark's executors generate a rate source's
//! partitions.

use crate::error::class;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use arrow::array::{Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::remote::{read_in_runs, ReadSpec};
use super::{
    ContinuousReader, LazyRows, Offset, ReadLimit, Source, SourceBatch, SourceContext,
    SourceProvider,
};
use crate::checkpoint::write_atomic_new;
use crate::distributed::{ReadCounts, ReadItem, ReadItems, ReadOnWorkers};
use crate::error::{Fault, Result, SluiceError};

fn rate_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("value", DataType::Int64, false),
    ]))
}

fn opt_i64(options: &HashMap<String, String>, key: &str, default: Option<i64>) -> Result<i64> {
    let v = options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim().to_string());
    match (v, default) {
        (Some(v), _) => v.parse().map_err(|_| {
            SluiceError::query(
                class::INVALID_OPTION,
                format!("option {key} must be an integer, got {v:?}"),
            )
        }),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(SluiceError::query(
            class::INVALID_OPTION,
            format!("option {key} is required"),
        )),
    }
}

/// How a micro-batch's rate rows are stamped: spread over the batch's seconds (`rate`: value
/// `v` at `start_ms + (v - from) * ms_per_value`, rounded to the millisecond), or all at one
/// time (`rate-micro-batch`). The same on the driver and on a worker that generates them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Stamp {
    Spread {
        start_ms: i64,
        from: i64,
        ms_per_value: f64,
    },
    Fixed {
        ms: i64,
    },
}

impl Stamp {
    fn ts_us(&self, v: i64) -> i64 {
        match *self {
            Stamp::Spread {
                start_ms,
                from,
                ms_per_value,
            } => (start_ms + ((v - from) as f64 * ms_per_value).round() as i64) * 1000,
            Stamp::Fixed { ms } => ms * 1000,
        }
    }
}

/// A micro-batch's rate rows `values` stamped by `stamp`: generated here, or on a cluster's
/// workers (a contiguous run of slices each).
fn batch_rows(
    values: std::ops::Range<i64>,
    stamp: Stamp,
    on_workers: Option<&ReadOnWorkers>,
) -> Result<SourceBatch> {
    let Some(on) = on_workers else {
        return Ok(SourceBatch {
            batches: vec![rows(values, |v| stamp.ts_us(v))?],
            ..Default::default()
        });
    };
    let slices: Vec<(i64, i64)> = values
        .clone()
        .step_by(MAX_ROWS_PER_SLICE as usize)
        .map(|s| (s, (s + MAX_ROWS_PER_SLICE).min(values.end)))
        .collect();
    let read = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&read);
    let reads = read_in_runs(
        on,
        &slices,
        &rate_schema(),
        |run, _| {
            Ok(ReadSpec::Rate(RateRead {
                slices: run.to_vec(),
                stamp,
            }))
        },
        Arc::new(move |c: ReadCounts| {
            counted.fetch_add(c.rows, Ordering::Relaxed);
        }),
    )?;
    let report = move || (read.load(Ordering::Relaxed) as usize, Default::default());
    Ok(SourceBatch {
        lazy: Some(LazyRows::on_workers(rate_schema(), reads, Box::new(report))),
        ..Default::default()
    })
}

/// A rate read's spec on a worker ([`ReadSpec::Rate`]): its slices of the batch's values and
/// how they are stamped.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RateRead {
    slices: Vec<(i64, i64)>,
    stamp: Stamp,
}

/// Generates a rate read on this worker: a batch per slice, then the count of the rows.
pub(crate) fn run_on_worker(spec: RateRead) -> Result<ReadItems> {
    let stamp = spec.stamp;
    let count: i64 = spec.slices.iter().map(|(s, e)| e - s).sum();
    let batches = spec
        .slices
        .into_iter()
        .map(move |(s, e)| rows(s..e, |v| stamp.ts_us(v)).map(ReadItem::Rows));
    let counts = std::iter::once(Ok(ReadItem::Counts(ReadCounts {
        rows: count as u64,
        ..Default::default()
    })));
    Ok(Box::new(batches.chain(counts)))
}

fn rows(values: std::ops::Range<i64>, ts_us: impl Fn(i64) -> i64) -> Result<RecordBatch> {
    let v: Int64Array = values.clone().collect();
    let t = TimestampMicrosecondArray::from_iter_values(values.map(ts_us));
    Ok(RecordBatch::try_new(
        rate_schema(),
        vec![Arc::new(t), Arc::new(v)],
    )?)
}

/// `rate`: `rowsPerSecond` (1), `rampUpTime` (0s; other values not supported yet),
/// `numPartitions`. Offsets are whole seconds since the query's first start, which is kept in
/// `sources/<i>/0`.
#[derive(Debug, Clone)]
pub struct RateSourceProvider {
    rows_per_second: i64,
}

impl RateSourceProvider {
    /// A `rate` source from its options `rowsPerSecond` (positive) and `rampUpTime` (only 0).
    pub fn try_new(options: &HashMap<String, String>) -> Result<Self> {
        let rows_per_second = opt_i64(options, "rowsPerSecond", Some(1))?;
        if rows_per_second <= 0 {
            return Err(SluiceError::query(
                class::INVALID_OPTION,
                format!("Invalid value '{rows_per_second}'. The option 'rowsPerSecond' must be positive"),
            ));
        }
        if let Some((_, v)) = options
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("rampUpTime"))
        {
            if !matches!(v.trim(), "0" | "0s") {
                return Err(SluiceError::not_supported_yet(
                    "the rate source's rampUpTime option",
                ));
            }
        }
        Ok(Self { rows_per_second })
    }
}

impl SourceProvider for RateSourceProvider {
    fn schema(&self) -> SchemaRef {
        rate_schema()
    }
    fn description(&self) -> String {
        format!(
            "RateStreamV2[rowsPerSecond={}, rampUpTimeSeconds=0]",
            self.rows_per_second
        )
    }
    fn kind(&self) -> &'static str {
        "rate"
    }
    fn create_source(&self, ctx: &SourceContext) -> Result<Box<dyn Source>> {
        Ok(Box::new(RateSource {
            rows_per_second: self.rows_per_second,
            start_ms: self.start_ms(ctx)?,
            on_workers: None,
        }))
    }
    fn supports_continuous(&self) -> bool {
        true
    }
    fn create_continuous_reader(
        &self,
        ctx: &SourceContext,
        start: Option<&Offset>,
    ) -> Result<Box<dyn ContinuousReader>> {
        let start_ms = self.start_ms(ctx)?;
        // Spark's continuous rate offset: per partition, the last value emitted and its time.
        let last = match start {
            None => -1,
            Some(o) => o
                .get("0")
                .and_then(|p| p.get("value"))
                .and_then(|v| v.as_i64())
                .ok_or_else(|| {
                    SluiceError::checkpoint(
                        class::CHECKPOINT_CORRUPT_LOG,
                        format!(
                            "a continuous rate offset must be {{\"0\":{{\"value\":N,\"runTimeMs\":T}}}}, \
                             got {o}; was the checkpoint written by a micro-batch query? Use a new \
                             checkpointLocation for continuous processing"
                        ),
                    )
                })?,
        };
        Ok(Box::new(RateContinuousReader {
            rows_per_second: self.rows_per_second,
            start_ms,
            next: last + 1,
        }))
    }
}

impl RateSourceProvider {
    /// The query's first start time, kept in `sources/<i>/0`.
    fn start_ms(&self, ctx: &SourceContext) -> Result<i64> {
        let file = ctx.metadata_dir.join("0");
        let start_ms = match crate::storage::read_to_string(&file) {
            Ok(s) => s
                .lines()
                .nth(1)
                .and_then(|l| l.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    SluiceError::checkpoint(
                        class::CHECKPOINT_CORRUPT_LOG,
                        format!(
                            "{} should hold the rate source's start time (v1 and milliseconds); \
                             restore it or use a new checkpoint",
                            file.display()
                        ),
                    )
                })?,
            Err(_) => {
                let now = chrono::Utc::now().timestamp_millis();
                crate::storage::create_dir_all(&ctx.metadata_dir).map_err(|e| {
                    SluiceError::io(Fault::Checkpoint, ctx.metadata_dir.display(), e)
                })?;
                write_atomic_new(&file, format!("v1\n{now}").as_bytes())?;
                now
            }
        };
        Ok(start_ms)
    }
}

/// At most this many rows per slice (a restart catching up emits several slices).
const MAX_ROWS_PER_SLICE: i64 = 65_536;

/// The rate source under continuous processing: value `v` is due at `start + v / rowsPerSecond`
/// seconds and is returned as soon as it is due, stamped with its due time.
struct RateContinuousReader {
    rows_per_second: i64,
    start_ms: i64,
    /// The next value to emit.
    next: i64,
}

impl RateContinuousReader {
    fn due_us(&self, v: i64) -> i64 {
        self.start_ms * 1000 + ((v as i128 * 1_000_000) / self.rows_per_second as i128) as i64
    }
    /// How many values are due at `now_us` (value 0 is due at the start).
    fn due_count(&self, now_us: i64) -> i64 {
        let elapsed = now_us - self.start_ms * 1000;
        if elapsed < 0 {
            return 0;
        }
        ((elapsed as i128 * self.rows_per_second as i128) / 1_000_000) as i64 + 1
    }
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl ContinuousReader for RateContinuousReader {
    fn poll(&mut self, max_wait: std::time::Duration) -> Result<Vec<RecordBatch>> {
        let mut now = now_us();
        if self.due_count(now) <= self.next {
            let wait_us = (self.due_us(self.next) - now).clamp(0, max_wait.as_micros() as i64);
            std::thread::sleep(std::time::Duration::from_micros(wait_us as u64));
            now = now_us();
        }
        let end = self.due_count(now).min(self.next + MAX_ROWS_PER_SLICE);
        if end <= self.next {
            return Ok(vec![]);
        }
        let batch = rows(self.next..end, |v| self.due_us(v))?;
        self.next = end;
        Ok(vec![batch])
    }
    fn offset(&self) -> Offset {
        let last = self.next - 1;
        serde_json::json!({"0": {"value": last, "runTimeMs": self.due_us(last.max(0)) / 1000}})
    }
    fn caught_up(&mut self) -> Result<bool> {
        Ok(self.due_count(now_us()) <= self.next)
    }
}

struct RateSource {
    rows_per_second: i64,
    start_ms: i64,
    /// A query on a cluster: the workers generate the batches.
    on_workers: Option<ReadOnWorkers>,
}

fn offset_i64(o: Option<&Offset>) -> i64 {
    o.and_then(|v| v.as_i64()).unwrap_or(0)
}

impl Source for RateSource {
    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        _limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        let elapsed_s = (chrono::Utc::now().timestamp_millis() - self.start_ms).max(0) / 1000;
        if elapsed_s <= offset_i64(start) {
            return Ok(start.cloned());
        }
        Ok(Some(serde_json::json!(elapsed_s)))
    }
    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        let (s, e) = (offset_i64(start), offset_i64(Some(end)));
        let (from, to) = (s * self.rows_per_second, e * self.rows_per_second);
        if to <= from {
            return Ok(SourceBatch::default());
        }
        let stamp = Stamp::Spread {
            start_ms: self.start_ms + s * 1000,
            from,
            ms_per_value: ((e - s) * 1000) as f64 / (to - from) as f64,
        };
        batch_rows(from..to, stamp, self.on_workers.as_ref())
    }
    fn read_on_workers(&mut self, on: &ReadOnWorkers) {
        self.on_workers = Some(on.clone());
    }
}

/// `rate-micro-batch`: `rowsPerBatch` (required), `startTimestamp` (0 ms), `advanceMillisPerBatch`
/// (1000). Batch k holds values `k*rowsPerBatch ..`, all stamped `startTimestamp +
/// k*advanceMillisPerBatch`. Offsets: `{"offset":N,"timestamp":T}`.
#[derive(Debug, Clone)]
pub struct RatePerMicroBatchProvider {
    rows_per_batch: i64,
    start_timestamp_ms: i64,
    advance_ms: i64,
}

impl RatePerMicroBatchProvider {
    /// A `rate-micro-batch` source from its options `rowsPerBatch`, `startTimestamp` and
    /// `advanceMillisPerBatch`.
    pub fn try_new(options: &HashMap<String, String>) -> Result<Self> {
        let rows_per_batch = opt_i64(options, "rowsPerBatch", None)?;
        if rows_per_batch <= 0 {
            return Err(SluiceError::query(
                class::INVALID_OPTION,
                format!(
                    "Invalid value '{rows_per_batch}'. The option 'rowsPerBatch' must be positive"
                ),
            ));
        }
        Ok(Self {
            rows_per_batch,
            start_timestamp_ms: opt_i64(options, "startTimestamp", Some(0))?,
            advance_ms: opt_i64(options, "advanceMillisPerBatch", Some(1000))?,
        })
    }
}

impl SourceProvider for RatePerMicroBatchProvider {
    fn schema(&self) -> SchemaRef {
        rate_schema()
    }
    fn description(&self) -> String {
        format!(
            "RatePerMicroBatchStream[rowsPerBatch={}, startTimestamp={}, advanceMillisPerBatch={}]",
            self.rows_per_batch, self.start_timestamp_ms, self.advance_ms
        )
    }
    fn kind(&self) -> &'static str {
        "rate-micro-batch"
    }
    fn create_source(&self, _ctx: &SourceContext) -> Result<Box<dyn Source>> {
        Ok(Box::new(RatePerMicroBatchSource {
            p: self.clone(),
            available_now: false,
            available_now_end: None,
            on_workers: None,
        }))
    }
}

struct RatePerMicroBatchSource {
    p: RatePerMicroBatchProvider,
    available_now: bool,
    available_now_end: Option<Offset>,
    /// A query on a cluster: the workers generate the batches.
    on_workers: Option<ReadOnWorkers>,
}

impl RatePerMicroBatchSource {
    fn parse(&self, o: Option<&Offset>) -> Result<(i64, i64)> {
        match o {
            None => Ok((0, self.p.start_timestamp_ms)),
            Some(v) => match (
                v.get("offset").and_then(|x| x.as_i64()),
                v.get("timestamp").and_then(|x| x.as_i64()),
            ) {
                (Some(o), Some(t)) => Ok((o, t)),
                _ => Err(SluiceError::checkpoint(
                    class::CHECKPOINT_CORRUPT_LOG,
                    format!(
                        "rate-micro-batch offset must be {{\"offset\":N,\"timestamp\":T}}, got {v}"
                    ),
                )),
            },
        }
    }
}

impl Source for RatePerMicroBatchSource {
    fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        self.available_now = true;
        Ok(())
    }
    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        _limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        if let Some(end) = &self.available_now_end {
            return Ok(Some(end.clone()));
        }
        let (o, t) = self.parse(start)?;
        let end = serde_json::json!({"offset": o + self.p.rows_per_batch, "timestamp": t + self.p.advance_ms});
        if self.available_now {
            self.available_now_end = Some(end.clone());
        }
        Ok(Some(end))
    }
    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        let (s, ts) = self.parse(start)?;
        let (e, _) = self.parse(Some(end))?;
        if e <= s {
            return Ok(SourceBatch::default());
        }
        batch_rows(s..e, Stamp::Fixed { ms: ts }, self.on_workers.as_ref())
    }
    fn read_on_workers(&mut self, on: &ReadOnWorkers) {
        self.on_workers = Some(on.clone());
    }
}
