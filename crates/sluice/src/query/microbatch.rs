//! `MicroBatchExecution`: the loop that runs a streaming query as a sequence of batches.
//!
//! One batch, in this order (and only here):
//! 1. construct: ask every source for its latest offset (within its read limit); no new data
//!    means no batch (the trigger is idle).
//! 2. `offsets/N` is written (offsets, batch watermark, batch timestamp, pinned conf) BEFORE the
//!    batch runs; old log entries are purged behind `minBatchesToRetain`.
//! 3. each source returns the rows of `(start, end]`; the plan is bound to them and planned by
//!    DataFusion (`plan::IncrementalExecution`).
//! 4. the result goes to `sink.add_batch(N)`.
//! 5. `commits/N` is written AFTER the sink; sources are told the range is committed.
//! 6. progress is reported.
//!
//! Restart follows `checkpoint::plan_recovery`: after a committed batch N the next is N+1; an
//! uncommitted batch N is re-run with exactly the offsets logged in `offsets/N`.

use crate::error::class;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::logical_expr::LogicalPlan;

use crate::checkpoint::{
    plan_recovery, CheckpointDir, CheckpointLock, CommitLog, CommitMetadata, OffsetSeq,
    OffsetSeqLog, OffsetSeqMetadata, RecoveryPlan, StreamMetadata,
};
use crate::error::{Fault, Result, SluiceError};
use crate::operators::watermark::{EventTimeStats, WatermarkPolicy, WatermarkTracker};
use crate::plan::streaming_relations;
use crate::progress::{
    format_timestamp_ms, QueryIdleEvent, SinkProgress, SourceProgress, StreamingQueryListener,
    StreamingQueryProgress,
};
use crate::session::Session;
use crate::sink::{Sink, SinkContext, SinkProvider};
use crate::source::{Offset, ReadLimit, Source, SourceContext, SourceProvider};
use crate::types::BatchData;

use super::now_ms;
use super::pipeline::Pipeline;
use super::{
    OutputMode, QueryShared, StreamingQuery, StreamingQueryStatus, Trigger, NUM_RECENT_PROGRESS,
};
use crate::testing::{CrashPoint, TestHooks};

/// Conf key of the number of state partitions, pinned in the checkpoint at the first run.
pub const SHUFFLE_PARTITIONS: &str = "spark.sql.shuffle.partitions";
/// Conf key: how many batches of `offsets/` and `commits/` to keep (Spark's default 100).
pub const MIN_BATCHES_TO_RETAIN: &str = "spark.sql.streaming.minBatchesToRetain";
/// Conf key of the watermark policy.
pub const WATERMARK_POLICY: &str = "spark.sql.streaming.multipleWatermarkPolicy";

/// Interval between `onQueryIdle` events (`spark.sql.streaming.noDataProgressEventInterval`).
const IDLE_EVENT_INTERVAL: Duration = Duration::from_secs(10);
/// Sleep of the default trigger when no data arrived (`spark.sql.streaming.pollingDelay`).
const POLLING_DELAY: Duration = Duration::from_millis(10);

struct SourceSlot {
    relation_id: u64,
    provider: Arc<dyn SourceProvider>,
    source: Box<dyn Source>,
}

/// The micro-batch loop of one query run.
pub struct MicroBatchExecution {
    session: Session,
    pipeline: Pipeline,
    sources: Vec<SourceSlot>,
    sink: Box<dyn Sink>,
    sink_description: String,
    trigger: Trigger,
    checkpoint: CheckpointDir,
    temporary_checkpoint: bool,
    offset_log: OffsetSeqLog,
    commit_log: CommitLog,
    _lock: CheckpointLock,
    shared: Arc<QueryShared>,
    listeners: Vec<Arc<dyn StreamingQueryListener>>,
    conf: BTreeMap<String, String>,
    min_batches_to_retain: u64,
    hooks: TestHooks,
    batches_this_run: u64,
    /// Id of the next batch to run.
    batch_id: u64,
    /// End offsets of the last committed batch = start offsets of the next.
    committed: Vec<Option<Offset>>,
    /// The global watermark: what the next batch runs with (`batchWatermarkMs`).
    tracker: WatermarkTracker,
    /// `batchWatermarkMs` of the last batch run in this process (None right after start).
    last_batch_watermark_ms: Option<i64>,
    /// Watermark for late rows: the previous batch's `batchWatermarkMs` (Spark 3.4+).
    late_watermark_ms: i64,
    last_trigger_start: Option<Instant>,
    last_idle_event: Option<Instant>,
    late_sink: Option<LateSink>,
}

/// The late-row side output of a query.
struct LateSink {
    sink: Box<dyn Sink>,
    schema: arrow::datatypes::SchemaRef,
    description: String,
}

impl MicroBatchExecution {
    /// Prepares the checkpoint and starts the loop on its own thread.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        session: Session,
        plan: LogicalPlan,
        sink_provider: Arc<dyn SinkProvider>,
        output_mode: OutputMode,
        trigger: Trigger,
        checkpoint_root: PathBuf,
        temporary_checkpoint: bool,
        name: Option<String>,
        late_rows: Option<super::writer::LateRowsSpec>,
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

        // Pinned conf: from the log if the query ran before, else from the session.
        let session_partitions = session.shuffle_partitions();
        let mut conf: BTreeMap<String, String> = BTreeMap::new();
        conf.insert(SHUFFLE_PARTITIONS.into(), session_partitions.to_string());
        conf.insert(
            "spark.sql.streaming.multipleWatermarkPolicy".into(),
            "min".into(),
        );
        let latest = offset_log.get_latest()?;
        if let Some((_, seq)) = &latest {
            for (k, v) in &seq.metadata.conf {
                if k == SHUFFLE_PARTITIONS && *v != session_partitions.to_string() {
                    log::warn!(
                        "{SHUFFLE_PARTITIONS} is {v} in the checkpoint {} and {session_partitions} \
                         in the session; the checkpoint's value is kept (state is partitioned by it)",
                        checkpoint_root.display()
                    );
                }
                conf.insert(k.clone(), v.clone());
            }
        }
        let partitions: usize = conf
            .get(SHUFFLE_PARTITIONS)
            .and_then(|v| v.parse().ok())
            .unwrap_or(session_partitions);

        let relations = streaming_relations(&plan);
        super::check_query_shape(
            checkpoint.root(),
            latest.as_ref().map(|(_, seq)| seq.offsets.len()),
            &relations,
            sink_provider.as_ref(),
        )?;
        let mut sources = Vec::with_capacity(relations.len());
        for (i, (relation_id, provider)) in relations.into_iter().enumerate() {
            let ctx = SourceContext {
                index: i,
                metadata_dir: checkpoint.source_dir(i),
            };
            let source = provider.create_source(&ctx)?;
            sources.push(SourceSlot {
                relation_id,
                provider,
                source,
            });
        }
        let sink = sink_provider.create_sink(&SinkContext {
            checkpoint_dir: checkpoint_root.clone(),
            output_mode,
            query_name: name.clone(),
        })?;

        if let Some(p) = session.conf(WATERMARK_POLICY) {
            if latest.is_none() {
                conf.insert(WATERMARK_POLICY.into(), p);
            } else if conf
                .get(WATERMARK_POLICY)
                .is_some_and(|pinned| !pinned.eq_ignore_ascii_case(&p))
            {
                log::warn!(
                    "{WATERMARK_POLICY} is {} in the checkpoint {} and {p} in the session; the \
                     checkpoint's value is kept",
                    conf.get(WATERMARK_POLICY)
                        .map(String::as_str)
                        .unwrap_or("min"),
                    checkpoint_root.display()
                );
            }
        }
        let policy = WatermarkPolicy::parse(
            conf.get(WATERMARK_POLICY)
                .map(String::as_str)
                .unwrap_or("min"),
        )?;
        let mut pipeline =
            Pipeline::try_new(&session, plan, output_mode, &checkpoint_root, partitions)?;
        // The late-row side output: a sink of its own, fed the stateful operator's late input
        // rows of each batch before `commits/N` (a replayed batch drops the same rows again).
        let late_sink = match late_rows {
            None => None,
            Some(spec) => {
                let schema = pipeline.keep_late_rows()?;
                let (provider, _) = super::writer::sink_provider(
                    &session,
                    &spec.format,
                    &spec.options,
                    schema.clone(),
                    None,
                )?;
                let sink = provider.create_sink(&SinkContext {
                    checkpoint_dir: checkpoint_root.join("lateRows"),
                    output_mode: OutputMode::Append,
                    query_name: None,
                })?;
                Some(LateSink {
                    sink,
                    schema,
                    description: provider.description(),
                })
            }
        };
        let explain = session.block_on(pipeline.explain())?;
        let min_batches_to_retain = session
            .conf(MIN_BATCHES_TO_RETAIN)
            .and_then(|v| v.parse().ok())
            .unwrap_or(100u64)
            .max(1);
        let hooks = TestHooks::from_session(&session);
        let shared = Arc::new(QueryShared::new(
            metadata.id.clone(),
            uuid::Uuid::new_v4().to_string(),
            name,
            trigger,
        ));
        let n_sources = sources.len();
        let listeners = session.listeners();
        let execution = MicroBatchExecution {
            session,
            pipeline,
            sources,
            sink,
            sink_description: sink_provider.description(),
            trigger,
            checkpoint,
            temporary_checkpoint,
            offset_log,
            commit_log,
            _lock: lock,
            shared: shared.clone(),
            listeners,
            conf,
            min_batches_to_retain,
            hooks,
            batches_this_run: 0,
            batch_id: 0,
            committed: vec![None; n_sources],
            tracker: WatermarkTracker::new(policy, 0),
            last_batch_watermark_ms: None,
            late_watermark_ms: 0,
            last_trigger_start: None,
            last_idle_event: None,
            late_sink,
        };
        let thread_name = format!("sluice-query-{}", &shared.id[..8.min(shared.id.len())]);
        let thread = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || execution.run_to_end())
            .map_err(|e| SluiceError::internal(format!("cannot start the query thread: {e}")))?;
        Ok(StreamingQuery::new(shared, thread, explain))
    }

    fn run_to_end(self) {
        let (shared, listeners) = (self.shared.clone(), self.listeners.clone());
        super::run_query_thread(
            self,
            shared,
            listeners,
            |e| e.run(),
            |e, msg| {
                format!(
                    "the query thread panicked in batch {}: {msg}. This is a bug in Sluice; the \
                 checkpoint is intact and a restart replays the batch.",
                    e.batch_id
                )
            },
            |e| {
                if e.temporary_checkpoint {
                    let _ = std::fs::remove_dir_all(e.checkpoint.root());
                }
            },
        );
    }

    fn set_status(&self, message: &str, data: bool, active: bool) {
        self.shared.update(|st| {
            st.status = StreamingQueryStatus {
                message: message.into(),
                is_data_available: data,
                is_trigger_active: active,
            }
        });
    }

    fn run(&mut self) -> Result<()> {
        let prev = match self.offset_log.get_latest()? {
            Some((n, _)) if n > 0 => self.offset_log.get(n - 1)?,
            _ => None,
        };
        let plan = plan_recovery(
            self.offset_log.get_latest()?,
            prev,
            self.commit_log.get_latest()?,
        )?;
        let mut replay: Option<OffsetSeq> = None;
        match plan {
            RecoveryPlan::Fresh => {}
            RecoveryPlan::ResumeAfter {
                next_batch_id,
                start_offsets,
                watermark_ms,
            } => {
                self.batch_id = next_batch_id;
                self.late_watermark_ms = start_offsets.metadata.batch_watermark_ms;
                // A no-data batch that was due when the query stopped still runs: a restart at any
                // batch boundary continues exactly as the uninterrupted query would.
                self.last_batch_watermark_ms = Some(start_offsets.metadata.batch_watermark_ms);
                self.committed = start_offsets.offsets;
                self.tracker.restore(watermark_ms);
            }
            RecoveryPlan::Replay {
                batch_id,
                offsets,
                start_offsets,
                watermark_ms,
            } => {
                self.batch_id = batch_id;
                if let Some(s) = start_offsets {
                    self.late_watermark_ms = s.metadata.batch_watermark_ms;
                    self.committed = s.offsets;
                }
                self.tracker.restore(watermark_ms);
                replay = Some(offsets);
            }
        }
        if self.trigger == Trigger::AvailableNow {
            for slot in &mut self.sources {
                slot.source.prepare_for_trigger_available_now()?;
            }
        }
        if let Some(offsets) = replay {
            log::info!(
                "re-running batch {} with the offsets logged in offsets/{} (it was not committed)",
                self.batch_id,
                self.batch_id
            );
            let start = Instant::now();
            self.run_batch(offsets, start, BTreeMap::new())?;
            if self.trigger == Trigger::Once || self.run_budget_spent() {
                return Ok(());
            }
        }
        loop {
            if self.shared.stopping() {
                return Ok(());
            }
            let trigger_start = Instant::now();
            let ran = self.run_trigger(trigger_start)?;
            if ran && self.run_budget_spent() {
                return Ok(());
            }
            match self.trigger {
                Trigger::Once => return Ok(()),
                Trigger::AvailableNow if !ran => return Ok(()),
                Trigger::AvailableNow => {}
                Trigger::ProcessingTime(interval) => {
                    if interval.is_zero() {
                        if !ran {
                            self.shared.sleep(POLLING_DELAY);
                        }
                    } else {
                        let next = trigger_start + interval;
                        let now = Instant::now();
                        if next > now {
                            self.shared.sleep(next - now);
                        } else {
                            log::warn!(
                                "Current batch is falling behind. The trigger interval is {} ms, \
                                 but the batch took {} ms",
                                interval.as_millis(),
                                (now - trigger_start).as_millis()
                            );
                        }
                    }
                }
                Trigger::Continuous(_) => {
                    return Err(SluiceError::not_supported_yet("Trigger::Continuous"))
                }
            }
        }
    }

    /// One trigger: construct the next batch and run it. Returns false when idle.
    fn run_trigger(&mut self, trigger_start: Instant) -> Result<bool> {
        self.set_status("Getting offsets from sources", false, true);
        let limit_all = self.trigger == Trigger::Once;
        let t = Instant::now();
        let mut ends: Vec<Option<Offset>> = Vec::with_capacity(self.sources.len());
        let mut new_data = false;
        for (i, slot) in self.sources.iter_mut().enumerate() {
            let limit = if limit_all {
                ReadLimit::AllAvailable
            } else {
                slot.source.default_read_limit()
            };
            let end = slot
                .source
                .latest_offset(self.committed[i].as_ref(), limit)
                .map_err(|e| {
                    e.context(format!(
                        "batch {}: source {}",
                        self.batch_id,
                        slot.provider.description()
                    ))
                })?;
            let end = end.or_else(|| self.committed[i].clone());
            if end.is_some() && end != self.committed[i] {
                new_data = true;
            }
            ends.push(end);
        }
        let latest_offset_ms = t.elapsed().as_millis() as i64;
        // A batch without new data still runs when the watermark moved and a stateful operator
        // would emit or evict at the new value (Spark's no-data batch).
        let no_data_batch = !new_data
            && self.last_batch_watermark_ms.is_some_and(|last| {
                self.pipeline
                    .should_run_another_batch(last, self.tracker.current_ms())
            });
        if !new_data && !no_data_batch {
            self.set_status("Waiting for data to arrive", false, false);
            self.shared
                .update(|st| st.last_idle_trigger_start = Some(trigger_start));
            let due = self
                .last_idle_event
                .is_none_or(|t| t.elapsed() >= IDLE_EVENT_INTERVAL);
            if due {
                self.last_idle_event = Some(Instant::now());
                let ev = QueryIdleEvent {
                    id: self.shared.id.clone(),
                    run_id: self.shared.run_id.clone(),
                    timestamp: format_timestamp_ms(now_ms()),
                };
                for l in &self.listeners {
                    l.on_query_idle(&ev);
                }
            }
            return Ok(false);
        }
        let seq = OffsetSeq {
            metadata: OffsetSeqMetadata {
                batch_watermark_ms: self.tracker.current_ms(),
                batch_timestamp_ms: now_ms(),
                conf: self.conf.clone(),
            },
            offsets: ends,
        };
        let t = Instant::now();
        if !self.offset_log.add(self.batch_id, &seq)? {
            return Err(super::concurrent_update(self.batch_id, "batch"));
        }
        // Sources may forget what is before the previous batch's end.
        for (i, slot) in self.sources.iter_mut().enumerate() {
            if let Some(prev_end) = &self.committed[i] {
                slot.source.commit(prev_end)?;
            }
        }
        self.checkpoint
            .purge_logs(self.batch_id, self.min_batches_to_retain)?;
        let wal_ms = t.elapsed().as_millis() as i64;
        self.check_crash(CrashPoint::AfterOffsets)?;
        let mut durations = BTreeMap::new();
        durations.insert("latestOffset".to_string(), latest_offset_ms);
        durations.insert("walCommit".to_string(), wal_ms);
        self.run_batch(seq, trigger_start, durations)?;
        Ok(true)
    }

    /// Counts a batch against `sluice.testing.maxBatchesPerRun`; true when the budget is spent.
    fn run_budget_spent(&mut self) -> bool {
        self.batches_this_run += 1;
        self.hooks.stops_after(self.batches_this_run)
    }

    fn check_crash(&self, point: CrashPoint) -> Result<()> {
        if self.hooks.crashes_at(point, self.batch_id) {
            return Err(crate::testing::injected_crash(&format!(
                "{} in batch {}",
                point.as_str(),
                self.batch_id
            )));
        }
        Ok(())
    }

    /// Runs batch `self.batch_id` over the logged `offsets` and commits it.
    fn run_batch(
        &mut self,
        offsets: OffsetSeq,
        trigger_start: Instant,
        mut durations: BTreeMap<String, i64>,
    ) -> Result<()> {
        let batch_id = self.batch_id;
        self.set_status("Processing new data", true, true);
        if offsets.offsets.len() != self.sources.len() {
            return Err(SluiceError::checkpoint(
                class::CHECKPOINT_CORRUPT_LOG,
                format!(
                    "offsets/{batch_id} in {} lists {} source offsets but the query has {} sources",
                    self.checkpoint.root().display(),
                    offsets.offsets.len(),
                    self.sources.len()
                ),
            ));
        }
        // getBatch
        let t = Instant::now();
        let mut inputs: HashMap<u64, Vec<arrow::array::RecordBatch>> = HashMap::new();
        let mut per_source: Vec<(usize, BTreeMap<String, String>)> = Vec::new();
        for (i, slot) in self.sources.iter_mut().enumerate() {
            let start = self.committed[i].clone();
            match &offsets.offsets[i] {
                Some(end) if Some(end) != start.as_ref() => {
                    let got = slot.source.get_batch(start.as_ref(), end).map_err(|e| {
                        e.context(format!(
                            "batch {batch_id}: reading {} from {} to {}",
                            slot.provider.description(),
                            start
                                .as_ref()
                                .map(|o| o.to_string())
                                .unwrap_or_else(|| "the start".into()),
                            end
                        ))
                    })?;
                    per_source.push((got.num_rows(), got.metrics));
                    inputs
                        .entry(slot.relation_id)
                        .or_default()
                        .extend(got.batches);
                }
                _ => per_source.push((0, BTreeMap::new())),
            }
        }
        durations.insert("getBatch".into(), t.elapsed().as_millis() as i64);
        let num_input_rows: usize = per_source.iter().map(|(n, _)| n).sum();

        // queryPlanning + addBatch: plan and execute (stateful operators included), then the sink.
        let t = Instant::now();
        let ts = offsets.metadata.batch_timestamp_ms;
        let batch_watermark_ms = offsets.metadata.batch_watermark_ms;
        let out = self
            .pipeline
            .run(
                &self.session,
                &inputs,
                ts,
                self.late_watermark_ms,
                batch_watermark_ms,
                batch_id,
            )
            .map_err(|e| e.context(format!("batch {batch_id}")))?;
        durations.insert("queryPlanning".into(), out.planning_ms);
        let data = out.data;
        let num_output_rows = data.num_rows();
        self.sink
            .add_batch(batch_id, &data)
            .map_err(|e| e.context(format!("batch {batch_id}: sink {}", self.sink_description)))?;
        let mut late_rows_written = None;
        if let Some(late) = &mut self.late_sink {
            let rows = BatchData {
                schema: late.schema.clone(),
                partitions: vec![out.late_rows],
            };
            late.sink.add_batch(batch_id, &rows).map_err(|e| {
                e.context(format!(
                    "batch {batch_id}: late-row sink {}",
                    late.description
                ))
            })?;
            late_rows_written = Some(rows.num_rows());
        }
        durations.insert(
            "addBatch".into(),
            (t.elapsed().as_millis() as i64 - out.planning_ms).max(0),
        );
        self.check_crash(CrashPoint::AfterSink)?;

        // The watermark for the next batch, from the event times this batch saw.
        let observed: HashMap<usize, (i64, EventTimeStats)> =
            out.watermarks.iter().copied().enumerate().collect();
        let next_watermark_ms = self.tracker.update(&observed);
        let mut event_time = BTreeMap::new();
        if self.pipeline.has_watermark() {
            let mut all = EventTimeStats::default();
            for (_, st) in &out.watermarks {
                all.merge(st);
            }
            if let Some(avg) = all.avg() {
                event_time.insert("avg".to_string(), format_timestamp_ms(avg as i64));
                event_time.insert("max".to_string(), format_timestamp_ms(all.max));
                event_time.insert("min".to_string(), format_timestamp_ms(all.min));
            }
            event_time.insert(
                "watermark".to_string(),
                format_timestamp_ms(batch_watermark_ms),
            );
        }

        // commit
        let t = Instant::now();
        let commit = CommitMetadata {
            next_batch_watermark_ms: next_watermark_ms,
        };
        if !self.commit_log.add(batch_id, &commit)? {
            return Err(super::concurrent_update(batch_id, "batch"));
        }
        durations.insert("commitOffsets".into(), t.elapsed().as_millis() as i64);
        let start_offsets = std::mem::replace(&mut self.committed, offsets.offsets.clone());
        self.batch_id += 1;
        self.last_batch_watermark_ms = Some(batch_watermark_ms);
        self.late_watermark_ms = batch_watermark_ms;

        // progress
        let trigger_ms = trigger_start.elapsed().as_millis() as i64;
        durations.insert("triggerExecution".into(), trigger_ms);
        let since_last = self
            .last_trigger_start
            .map(|t| trigger_start.duration_since(t).as_secs_f64())
            .unwrap_or(0.0);
        self.last_trigger_start = Some(trigger_start);
        let rate = |n: usize, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let processing_secs = trigger_ms as f64 / 1000.0;
        let sources = self
            .sources
            .iter_mut()
            .zip(per_source)
            .enumerate()
            .map(|(i, (slot, (rows, metrics)))| SourceProgress {
                description: slot.provider.description(),
                start_offset: start_offsets[i].clone(),
                end_offset: offsets.offsets[i].clone(),
                latest_offset: offsets.offsets[i].clone(),
                num_input_rows: rows as i64,
                input_rows_per_second: rate(rows, since_last),
                processed_rows_per_second: rate(rows, processing_secs),
                metrics,
            })
            .collect();
        let progress = StreamingQueryProgress {
            id: self.shared.id.clone(),
            run_id: self.shared.run_id.clone(),
            name: self.shared.name.clone(),
            timestamp: format_timestamp_ms(ts),
            batch_id: batch_id as i64,
            batch_duration: trigger_ms,
            num_input_rows: num_input_rows as i64,
            input_rows_per_second: rate(num_input_rows, since_last),
            processed_rows_per_second: rate(num_input_rows, processing_secs),
            duration_ms: durations,
            event_time,
            state_operators: out.state_operators,
            sources,
            sink: SinkProgress {
                description: self.sink_description.clone(),
                num_output_rows: num_output_rows as i64,
                metrics: {
                    let mut m = self.sink.metrics();
                    if let (Some(n), Some(late)) = (late_rows_written, &self.late_sink) {
                        m.insert("numLateRowsWritten".into(), n.to_string());
                        m.insert("lateRowsSink".into(), late.description.clone());
                    }
                    m
                },
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
        Ok(())
    }
}

impl Drop for MicroBatchExecution {
    fn drop(&mut self) {
        self.shared.stop_requested.store(true, Ordering::SeqCst);
    }
}
