//! `ContinuousExecution`: a query under `Trigger::Continuous(checkpointInterval)` (Spark's
//! continuous processing). The shared core (`core.rs`) opened the checkpoint and made the
//! readers and the sink; this file is only the loop.
//!
//! One long-running thread per query repeatedly reads whatever rows its source has right now
//! (a small slice: the rate source's rows due by now, or what a Kafka poll returns within a few
//! milliseconds), runs the query's projections and filters over them with a DataFusion physical
//! plan that is planned once and re-executed for every slice, and writes the result to the sink
//! immediately (`poll`). Every checkpoint interval an *epoch* ends (`end_epoch`):
//!
//! 1. `offsets/E` = the sources' current positions (Spark's offset log format);
//! 2. the sink flushes everything written for the epoch (`Sink::commit_epoch`);
//! 3. `commits/E`;
//! 4. a `StreamingQueryProgress` for the epoch (Sluice only; Spark reports none).
//!
//! A restart resumes from the last committed epoch's offsets: rows written after it are
//! written again. The guarantee is **at-least-once**.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use datafusion::logical_expr::LogicalPlan;

use crate::checkpoint::{CheckpointDir, OffsetSeq};
use crate::error::{class, Fault, Result, SluiceError};
use crate::formats::sink::SinkFormat;
use crate::plan::continuous::ContinuousPlan;
use crate::plan::streaming_relations;
use crate::progress::SinkProgress;
use crate::query::StreamingQuery;
use crate::sink::SinkProvider;
use crate::source::{ContinuousReader, Offset};
use crate::types::{BatchData, OutputMode, Trigger};

use super::core::{now_ms, Driver, QuerySpec, SourceSlot, StreamExecution};
use super::progress::{ms_since, source_rows, Durations, FirstTriggerRate, TriggerProgress};

/// How long one poll of a source may wait for its first row.
const POLL_WAIT: Duration = Duration::from_millis(10);

/// The continuous loop of one query run.
pub struct ContinuousExecution {
    plan: ContinuousPlan,
    readers: Vec<SourceSlot<Box<dyn ContinuousReader>>>,
    interval: Duration,
    /// The running epoch.
    epoch: u64,
    /// The sources' offsets at the last committed epoch (where the running epoch started).
    committed: Vec<Option<Offset>>,
    /// Last, so that it is dropped last (see `StreamExecution`).
    core: StreamExecution,
}

/// Checks a query for continuous processing (before anything is written).
pub(crate) fn check(
    plan: &LogicalPlan,
    output_mode: OutputMode,
    sink_format: &str,
    sink: &dyn SinkProvider,
) -> Result<()> {
    crate::plan::analysis::check_continuous_plan(plan)?;
    if output_mode != OutputMode::Append {
        return Err(SluiceError::query(
            class::STREAMING_OUTPUT_MODE_UNSUPPORTED_OPERATION,
            format!(
                "{output_mode:?} output mode not supported with continuous trigger; continuous \
                 processing supports append mode only"
            ),
        ));
    }
    for (_, provider) in streaming_relations(plan) {
        if !provider.supports_continuous() {
            return Err(SluiceError::query(
                class::UNSUPPORTED_STREAMING_OPERATION,
                format!(
                    "Data source {} does not support continuous processing.",
                    provider.format_name()
                ),
            ));
        }
    }
    let format = SinkFormat::parse(sink_format).ok();
    if format == Some(SinkFormat::ForeachBatch) {
        return Err(SluiceError::query(
            class::UNSUPPORTED_STREAMING_OPERATION,
            "'foreachBatch' is not supported with continuous trigger: use foreach (a writer per \
             row), or a processing-time trigger with foreach_batch",
        ));
    }
    if !sink.supports_continuous() {
        let name = if format == Some(SinkFormat::Kafka) {
            "kafka (exactlyOnce=true)".to_string()
        } else {
            sink_format.to_string()
        };
        return Err(SluiceError::query(
            class::UNSUPPORTED_STREAMING_OPERATION,
            format!(
                "Data source {name} does not support continuous processing. Continuous sinks: \
                 kafka (at-least-once), memory, console, foreach."
            ),
        ));
    }
    Ok(())
}

/// Spark's continuous recovery: the run starts after the last *committed* epoch, from its
/// offsets; the offset logs of epochs that were never committed are dropped (they run again).
fn resume_after_committed_epoch(checkpoint: &CheckpointDir) -> Result<Option<OffsetSeq>> {
    let (offset_log, commit_log) = (checkpoint.offset_log(), checkpoint.commit_log());
    let committed_epoch = commit_log.get_latest()?.map(|(e, _)| e);
    let start_seq = match committed_epoch {
        Some(e) => Some(offset_log.get(e)?.ok_or_else(|| {
            SluiceError::checkpoint(
                class::CHECKPOINT_CORRUPT_LOG,
                format!(
                    "commits/{e} exists in {} but offsets/{e} does not; restore it or start \
                     with a new checkpointLocation",
                    checkpoint.root().display()
                ),
            )
        })?),
        None => None,
    };
    for id in offset_log.batch_ids()? {
        if committed_epoch.is_none_or(|c| id > c) {
            let path = offset_log.path_of(id);
            log::info!(
                "continuous processing: dropping uncommitted epoch log {}",
                path.display()
            );
            crate::storage::remove_file(&path)
                .map_err(|e| SluiceError::io(Fault::Checkpoint, path.display(), e))?;
        }
    }
    Ok(start_seq)
}

impl ContinuousExecution {
    /// Opens the checkpoint (as micro-batch does), plans the query once and starts the loop.
    pub(crate) fn start(spec: QuerySpec, interval: Duration) -> Result<StreamingQuery> {
        let (core, readers, resumed) = StreamExecution::open(
            &spec,
            Trigger::Continuous(interval),
            FirstTriggerRate::OverItsDuration,
            resume_after_committed_epoch,
            |provider, ctx, start| provider.create_continuous_reader(ctx, start),
        )?;
        if !core.conf.distributed_workers.is_empty() {
            return Err(SluiceError::not_supported_yet(format!(
                "a continuous query on workers ({} is set); run it with a micro-batch trigger, \
                 or unset the key to run it in this process",
                crate::conf::DISTRIBUTED_WORKERS
            )));
        }
        let committed_epoch = core.checkpoint.commit_log().get_latest()?.map(|(e, _)| e);
        let plan = ContinuousPlan::try_new(&core.session, &spec.plan)?;
        let explain = plan.explain(&spec.plan);
        let execution = ContinuousExecution {
            committed: match resumed {
                Some(seq) => seq.offsets,
                None => vec![None; readers.len()],
            },
            core,
            plan,
            readers,
            interval: interval.max(Duration::from_millis(1)),
            epoch: committed_epoch.map(|e| e + 1).unwrap_or(0),
        };
        StreamExecution::spawn(execution, "sluice-continuous", explain)
    }

    /// One pass over the readers: each slice of rows goes through the plan to the sink at once.
    /// Returns whether any reader had rows.
    fn poll(&mut self, epoch: &mut EpochStats) -> Result<bool> {
        let mut got_rows = false;
        let wait = if self.readers.len() == 1 {
            POLL_WAIT
        } else {
            Duration::from_millis(1)
        };
        for (i, slot) in self.readers.iter_mut().enumerate() {
            let remaining = self.interval.saturating_sub(epoch.start.elapsed());
            let slice = slot.source.poll(wait.min(remaining)).map_err(|e| {
                let source = slot.provider.description();
                e.context(format!("epoch {}: source {source}", self.epoch))
            })?;
            let n: usize = slice.iter().map(|b| b.num_rows()).sum();
            if n == 0 {
                continue;
            }
            got_rows = true;
            let t = Instant::now();
            let data = BatchData {
                schema: self.plan.schema(),
                partitions: vec![self.plan.run(slot.relation_id, slice)?],
            };
            let written = data.num_rows();
            let sink = &self.core.sink_description;
            self.core
                .sink
                .write_continuous(self.epoch, &data)
                .map_err(|e| e.context(format!("epoch {}: sink {sink}", self.epoch)))?;
            epoch.process += t.elapsed();
            epoch.rows += n * slot.uses;
            epoch.per_source[i] += n * slot.uses;
            epoch.output_rows += written;
        }
        Ok(got_rows)
    }

    /// Ends the running epoch: `offsets/E`, the sink's flush, `commits/E`, progress.
    fn end_epoch(&mut self, stats: &mut EpochStats) -> Result<()> {
        let epoch = self.epoch;
        let ends: Vec<Option<Offset>> = (self.readers.iter())
            .map(|s| Some(s.source.offset()))
            .collect();
        let ts = now_ms();
        let mut durations = Durations::default();
        let t = Instant::now();
        self.core
            .write_offsets(epoch, ends.clone(), 0, ts, "epoch")?;
        durations.wal_commit = Some(ms_since(t));
        let t = Instant::now();
        let sink = &self.core.sink_description;
        self.core
            .sink
            .commit_epoch(epoch)
            .map_err(|e| e.context(format!("epoch {epoch}: committing sink {sink}")))?;
        durations.sink_commit = Some(ms_since(t));
        let t = Instant::now();
        self.core.write_commit(epoch, 0, "epoch")?;
        self.core.purge_logs(epoch + 1)?;
        durations.commit_offsets = Some(ms_since(t));
        durations.add_batch = Some(stats.process.as_millis() as i64);

        let start_offsets = std::mem::replace(&mut self.committed, ends.clone());
        let providers = self.readers.iter().map(|slot| &slot.provider);
        let read = stats.per_source.iter().map(|n| (*n, BTreeMap::new()));
        let sources = source_rows(providers, start_offsets, ends, read.collect());
        self.core.progress.report(TriggerProgress {
            batch_id: epoch,
            timestamp_ms: ts,
            trigger_start: stats.start,
            durations,
            processing: Some(stats.process),
            sources,
            event_time: BTreeMap::new(),
            state_operators: vec![],
            sink: SinkProgress {
                description: self.core.sink_description.clone(),
                num_output_rows: stats.output_rows as i64,
                metrics: self.core.sink.metrics(),
            },
            workers: Vec::new(),
        });
        self.epoch += 1;
        *stats = EpochStats::new(self.readers.len());
        Ok(())
    }
}

impl Driver for ContinuousExecution {
    fn core(&self) -> &StreamExecution {
        &self.core
    }

    fn run(&mut self) -> Result<()> {
        self.core
            .set_status("Running continuous processing", true, true);
        let mut epoch = EpochStats::new(self.readers.len());
        loop {
            if self.core.shared.stopping() {
                if !self.core.hooks.stop_without_commit() && epoch.rows > 0 {
                    self.end_epoch(&mut epoch)?;
                }
                return Ok(());
            }
            let iteration_start = Instant::now();
            if !self.poll(&mut epoch)? {
                let mut all = true;
                for slot in &mut self.readers {
                    if !slot.source.caught_up()? {
                        all = false;
                        break;
                    }
                }
                if all {
                    // Everything available when this iteration started is in the sink.
                    self.core
                        .shared
                        .update(|st| st.last_idle_trigger_start = Some(iteration_start));
                }
            }
            if epoch.start.elapsed() >= self.interval {
                self.end_epoch(&mut epoch)?;
            }
        }
    }

    fn panic_message(&self, msg: &str) -> String {
        format!(
            "the continuous query thread panicked in epoch {}: {msg}. This is a bug in Sluice; a \
             restart resumes from the last committed epoch.",
            self.epoch
        )
    }
}

/// What the running epoch did so far.
struct EpochStats {
    start: Instant,
    rows: usize,
    output_rows: usize,
    per_source: Vec<usize>,
    /// Time spent planning nothing, executing the plan and writing the sink.
    process: Duration,
}

impl EpochStats {
    fn new(sources: usize) -> Self {
        Self {
            start: Instant::now(),
            rows: 0,
            output_rows: 0,
            per_source: vec![0; sources],
            process: Duration::ZERO,
        }
    }
}
