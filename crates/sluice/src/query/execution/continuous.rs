//! `ContinuousExecution`: a query under `Trigger::Continuous(checkpointInterval)` (Spark's
//! continuous processing).
//!
//! One long-running thread per query repeatedly reads whatever rows its source has right now
//! (a small slice: the rate source's rows due by now, or what a Kafka poll returns within a few
//! milliseconds), runs the query's projections and filters over them with a DataFusion physical
//! plan that is planned once and re-executed for every slice, and writes the result to the sink
//! immediately. Every checkpoint interval an *epoch* ends:
//!
//! 1. `offsets/E` = the sources' current positions (Spark's offset log format);
//! 2. the sink flushes everything written for the epoch (`Sink::commit_epoch`);
//! 3. `commits/E`;
//! 4. a `StreamingQueryProgress` for the epoch (Sluice only; Spark reports none).
//!
//! A restart resumes from the last committed epoch's offsets: rows written after it are
//! written again. The guarantee is **at-least-once**.

use crate::error::class;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::displayable;

use crate::checkpoint::{
    CheckpointDir, CheckpointLock, CommitLog, CommitMetadata, OffsetSeq, OffsetSeqLog,
    OffsetSeqMetadata, StreamMetadata,
};
use crate::error::{Fault, Result, SluiceError};
use crate::plan::continuous::ContinuousPlan;
use crate::plan::streaming_relations;
use crate::progress::{
    format_timestamp_ms, SinkProgress, SourceProgress, StreamingQueryListener,
    StreamingQueryProgress,
};
use crate::session::Session;
use crate::sink::{Sink, SinkContext, SinkProvider};
use crate::source::{ContinuousReader, Offset, SourceContext, SourceProvider};
use crate::types::BatchData;

use super::microbatch::{MIN_BATCHES_TO_RETAIN, SHUFFLE_PARTITIONS};
use crate::query::now_ms;
use crate::query::{
    OutputMode, QueryShared, StreamingQuery, StreamingQueryStatus, Trigger, NUM_RECENT_PROGRESS,
};

/// How long one poll of a source may wait for its first row.
const POLL_WAIT: Duration = Duration::from_millis(10);

struct ReaderSlot {
    relation_id: u64,
    provider: Arc<dyn SourceProvider>,
    reader: Box<dyn ContinuousReader>,
}

/// The continuous loop of one query run.
pub struct ContinuousExecution {
    plan: ContinuousPlan,
    readers: Vec<ReaderSlot>,
    sink: Box<dyn Sink>,
    sink_description: String,
    interval: Duration,
    checkpoint: CheckpointDir,
    temporary_checkpoint: bool,
    offset_log: OffsetSeqLog,
    commit_log: CommitLog,
    _lock: CheckpointLock,
    shared: Arc<QueryShared>,
    listeners: Vec<Arc<dyn StreamingQueryListener>>,
    conf: BTreeMap<String, String>,
    min_batches_to_retain: u64,
    stop_without_commit: bool,
    /// The running epoch.
    epoch: u64,
    /// The sources' offsets at the last committed epoch (where the running epoch started).
    committed: Vec<Option<Offset>>,
    last_epoch_start: Option<Instant>,
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
    if sink_format == "foreachBatch" {
        return Err(SluiceError::query(
            class::UNSUPPORTED_STREAMING_OPERATION,
            "'foreachBatch' is not supported with continuous trigger: use foreach (a writer per \
             row), or a processing-time trigger with foreach_batch",
        ));
    }
    if !sink.supports_continuous() {
        let name = if sink.kind() == "kafka" {
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

impl ContinuousExecution {
    /// Prepares the checkpoint (lock, metadata, logs, as micro-batch does) and starts the loop.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        session: Session,
        plan: LogicalPlan,
        sink_provider: Arc<dyn SinkProvider>,
        output_mode: OutputMode,
        interval: Duration,
        checkpoint_root: PathBuf,
        temporary_checkpoint: bool,
        name: Option<String>,
    ) -> Result<StreamingQuery> {
        let checkpoint = CheckpointDir::new(checkpoint_root.clone());
        std::fs::create_dir_all(checkpoint.root()).map_err(|e| {
            SluiceError::io(
                Fault::Checkpoint,
                format!(
                    "cannot create checkpoint directory {}",
                    checkpoint_root.display()
                ),
                e,
            )
        })?;
        let lock = CheckpointLock::acquire(checkpoint.root())?;
        crate::checkpoint::recover_torn_tail(&checkpoint)?;
        let metadata = StreamMetadata::read_or_create(checkpoint.root())?;
        let offset_log = OffsetSeqLog::new(checkpoint.offsets_dir());
        let commit_log = CommitLog::new(checkpoint.commits_dir());

        let mut conf: BTreeMap<String, String> = BTreeMap::new();
        conf.insert(
            SHUFFLE_PARTITIONS.into(),
            session.shuffle_partitions().to_string(),
        );
        conf.insert(
            "spark.sql.streaming.multipleWatermarkPolicy".into(),
            "min".into(),
        );
        // Spark's continuous recovery: start after the last *committed* epoch; an epoch whose
        // offsets were logged but never committed is dropped and re-run.
        let committed_epoch = commit_log.get_latest()?.map(|(e, _)| e);
        let start_seq = match committed_epoch {
            Some(e) => Some(offset_log.get(e)?.ok_or_else(|| {
                SluiceError::checkpoint(
                    class::CHECKPOINT_CORRUPT_LOG,
                    format!(
                        "commits/{e} exists in {} but offsets/{e} does not; restore it or start \
                         with a new checkpointLocation",
                        checkpoint_root.display()
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
                std::fs::remove_file(&path)
                    .map_err(|e| SluiceError::io(Fault::Checkpoint, path.display(), e))?;
            }
        }
        if let Some(seq) = &start_seq {
            for (k, v) in &seq.metadata.conf {
                conf.insert(k.clone(), v.clone());
            }
        }

        let relations = streaming_relations(&plan);
        crate::query::check_query_shape(
            checkpoint.root(),
            start_seq.as_ref().map(|seq| seq.offsets.len()),
            &relations,
            sink_provider.as_ref(),
        )?;
        let committed: Vec<Option<Offset>> = match &start_seq {
            Some(seq) => seq.offsets.clone(),
            None => vec![None; relations.len()],
        };
        let mut readers = Vec::with_capacity(relations.len());
        for (i, (relation_id, provider)) in relations.into_iter().enumerate() {
            let ctx = SourceContext {
                index: i,
                metadata_dir: checkpoint.source_dir(i),
            };
            let reader = provider.create_continuous_reader(&ctx, committed[i].as_ref())?;
            readers.push(ReaderSlot {
                relation_id,
                provider,
                reader,
            });
        }
        let sink = sink_provider.create_sink(&SinkContext {
            checkpoint_dir: checkpoint_root.clone(),
            output_mode,
            query_name: name.clone(),
        })?;
        let cplan = ContinuousPlan::try_new(&session, &plan)?;
        let explain = format!(
            "== Analyzed Logical Plan ==\n{}\n\n== Physical Plan (continuous, planned once) ==\n{}",
            plan.display_indent(),
            displayable(cplan.plan.as_ref()).indent(true)
        );
        let min_batches_to_retain = session
            .conf(MIN_BATCHES_TO_RETAIN)
            .and_then(|v| v.parse().ok())
            .unwrap_or(100u64)
            .max(1);
        let stop_without_commit =
            crate::testing::TestHooks::from_session(&session).stop_without_commit();
        let shared = Arc::new(QueryShared::new(
            metadata.id.clone(),
            uuid::Uuid::new_v4().to_string(),
            name,
            Trigger::Continuous(interval),
        ));
        let execution = ContinuousExecution {
            plan: cplan,
            readers,
            sink,
            sink_description: sink_provider.description(),
            interval: interval.max(Duration::from_millis(1)),
            checkpoint,
            temporary_checkpoint,
            offset_log,
            commit_log,
            _lock: lock,
            shared: shared.clone(),
            listeners: session.listeners(),
            conf,
            min_batches_to_retain,
            stop_without_commit,
            epoch: committed_epoch.map(|e| e + 1).unwrap_or(0),
            committed,
            last_epoch_start: None,
        };
        let thread_name = format!("sluice-continuous-{}", &shared.id[..8.min(shared.id.len())]);
        let thread = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || execution.run_to_end())
            .map_err(|e| SluiceError::internal(format!("cannot start the query thread: {e}")))?;
        Ok(StreamingQuery::new(shared, thread, explain))
    }

    fn run_to_end(self) {
        let (shared, listeners) = (self.shared.clone(), self.listeners.clone());
        crate::query::run_query_thread(
            self,
            shared,
            listeners,
            |e| e.run(),
            |e, msg| {
                format!(
                    "the continuous query thread panicked in epoch {}: {msg}. This is a bug in \
                 Sluice; a restart resumes from the last committed epoch.",
                    e.epoch
                )
            },
            |e| {
                if e.temporary_checkpoint {
                    let _ = std::fs::remove_dir_all(e.checkpoint.root());
                }
            },
        );
    }

    fn run(&mut self) -> Result<()> {
        self.shared.update(|st| {
            st.status = StreamingQueryStatus {
                message: "Running continuous processing".into(),
                is_data_available: true,
                is_trigger_active: true,
            }
        });
        let mut epoch = EpochStats::new(self.readers.len());
        loop {
            if self.shared.stopping() {
                if !self.stop_without_commit && epoch.rows > 0 {
                    self.end_epoch(&mut epoch)?;
                }
                return Ok(());
            }
            let iteration_start = Instant::now();
            let mut got_rows = false;
            let wait = if self.readers.len() == 1 {
                POLL_WAIT
            } else {
                Duration::from_millis(1)
            };
            for i in 0..self.readers.len() {
                let remaining = self.interval.saturating_sub(epoch.start.elapsed());
                let slice = self.readers[i]
                    .reader
                    .poll(wait.min(remaining))
                    .map_err(|e| {
                        e.context(format!(
                            "epoch {}: source {}",
                            self.epoch,
                            self.readers[i].provider.description()
                        ))
                    })?;
                let n: usize = slice.iter().map(|b| b.num_rows()).sum();
                if n == 0 {
                    continue;
                }
                got_rows = true;
                let t = Instant::now();
                let out = self.plan.run(self.readers[i].relation_id, slice)?;
                let data = BatchData {
                    schema: self.plan.plan.schema(),
                    partitions: vec![out],
                };
                let written = data.num_rows();
                self.sink.write_continuous(self.epoch, &data).map_err(|e| {
                    e.context(format!(
                        "epoch {}: sink {}",
                        self.epoch, self.sink_description
                    ))
                })?;
                epoch.process += t.elapsed();
                epoch.rows += n;
                epoch.per_source[i] += n;
                epoch.output_rows += written;
            }
            if !got_rows {
                let mut all = true;
                for slot in &mut self.readers {
                    if !slot.reader.caught_up()? {
                        all = false;
                        break;
                    }
                }
                if all {
                    // Everything available when this iteration started is in the sink.
                    self.shared
                        .update(|st| st.last_idle_trigger_start = Some(iteration_start));
                }
            }
            if epoch.start.elapsed() >= self.interval {
                self.end_epoch(&mut epoch)?;
            }
        }
    }

    /// Ends the running epoch: `offsets/E`, the sink's flush, `commits/E`, progress.
    fn end_epoch(&mut self, stats: &mut EpochStats) -> Result<()> {
        let epoch = self.epoch;
        let trigger_start = stats.start;
        let ends: Vec<Option<Offset>> = self
            .readers
            .iter()
            .map(|s| Some(s.reader.offset()))
            .collect();
        let ts = now_ms();
        let seq = OffsetSeq {
            metadata: OffsetSeqMetadata {
                batch_watermark_ms: 0,
                batch_timestamp_ms: ts,
                conf: self.conf.clone(),
            },
            offsets: ends.clone(),
        };
        let mut durations = BTreeMap::new();
        let t = Instant::now();
        if !self.offset_log.add(epoch, &seq)? {
            return Err(crate::query::concurrent_update(epoch, "epoch"));
        }
        durations.insert("walCommit".to_string(), t.elapsed().as_millis() as i64);
        let t = Instant::now();
        self.sink.commit_epoch(epoch).map_err(|e| {
            e.context(format!(
                "epoch {epoch}: committing sink {}",
                self.sink_description
            ))
        })?;
        durations.insert("sinkCommit".to_string(), t.elapsed().as_millis() as i64);
        let t = Instant::now();
        if !self.commit_log.add(
            epoch,
            &CommitMetadata {
                next_batch_watermark_ms: 0,
            },
        )? {
            return Err(crate::query::concurrent_update(epoch, "epoch"));
        }
        self.checkpoint
            .purge_logs(epoch + 1, self.min_batches_to_retain)?;
        durations.insert("commitOffsets".to_string(), t.elapsed().as_millis() as i64);
        durations.insert("addBatch".to_string(), stats.process.as_millis() as i64);
        let trigger_ms = trigger_start.elapsed().as_millis() as i64;
        durations.insert("triggerExecution".to_string(), trigger_ms);

        let since_last = self
            .last_epoch_start
            .map(|t| trigger_start.duration_since(t).as_secs_f64())
            .unwrap_or(trigger_ms as f64 / 1000.0);
        self.last_epoch_start = Some(trigger_start);
        let rate = |n: usize, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let processing_secs = stats.process.as_secs_f64();
        let start_offsets = std::mem::replace(&mut self.committed, ends.clone());
        let sources = self
            .readers
            .iter()
            .enumerate()
            .map(|(i, slot)| SourceProgress {
                description: slot.provider.description(),
                start_offset: start_offsets[i].clone(),
                end_offset: ends[i].clone(),
                latest_offset: ends[i].clone(),
                num_input_rows: stats.per_source[i] as i64,
                input_rows_per_second: rate(stats.per_source[i], since_last),
                processed_rows_per_second: rate(stats.per_source[i], processing_secs),
                metrics: BTreeMap::new(),
            })
            .collect();
        let progress = StreamingQueryProgress {
            id: self.shared.id.clone(),
            run_id: self.shared.run_id.clone(),
            name: self.shared.name.clone(),
            timestamp: format_timestamp_ms(ts),
            batch_id: epoch as i64,
            batch_duration: trigger_ms,
            num_input_rows: stats.rows as i64,
            input_rows_per_second: rate(stats.rows, since_last),
            processed_rows_per_second: rate(stats.rows, processing_secs),
            duration_ms: durations,
            event_time: BTreeMap::new(),
            state_operators: vec![],
            sources,
            sink: SinkProgress {
                description: self.sink_description.clone(),
                num_output_rows: stats.output_rows as i64,
                metrics: self.sink.metrics(),
            },
        };
        for l in &self.listeners {
            l.on_query_progress(&progress);
        }
        self.shared.update(|st| {
            st.progress.push_back(progress);
            while st.progress.len() > NUM_RECENT_PROGRESS {
                st.progress.pop_front();
            }
        });
        self.epoch += 1;
        *stats = EpochStats::new(self.readers.len());
        Ok(())
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

impl Drop for ContinuousExecution {
    fn drop(&mut self) {
        self.shared.stop_requested.store(true, Ordering::SeqCst);
    }
}
