//! `MicroBatchExecution`: the loop that runs a streaming query as a sequence of batches (Spark's
//! `MicroBatchExecution`). The shared core (`core.rs`) opened the checkpoint and made the sources
//! and the sink; this file is only the loop. One batch, in this order (and only here):
//!
//! 1. construct (`run_trigger`): ask every source for its latest offset (within its read
//!    limit); no new data means no batch (the trigger is idle), unless the watermark moved and a
//!    stateful operator would emit or evict at the new value (a no-data batch).
//! 2. WAL (`run_trigger`): `offsets/N` is written (offsets, batch watermark, batch timestamp,
//!    pinned conf) BEFORE the batch runs; sources are told the previous batch is committed; old
//!    log entries are purged behind `minBatchesToRetain`.
//! 3. getBatch (`get_batch`): each source returns the rows of `(start, end]`.
//! 4. addBatch (`add_batch`): the staged plan (`plan::staged`) is bound to those rows, planned by
//!    DataFusion and executed, stateful operators included; the result goes to
//!    `sink.add_batch(N)` (and late rows to the late-row sink).
//! 5. commit (`commit`): the next watermark from the event times seen; `commits/N` is written
//!    AFTER the sink.
//! 6. progress (`report`): a `StreamingQueryProgress` for the batch.
//!
//! Restart follows `checkpoint::plan_recovery` (`recover`): after a committed batch N the next
//! is N+1; an uncommitted batch N is re-run with exactly the offsets logged in `offsets/N`.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::checkpoint::{OffsetSeq, RecoveryPlan};
use crate::error::Result;
use crate::operators::stateful::BatchContext;
use crate::operators::watermark::{EventTimeStats, WatermarkTracker};
use crate::plan::incremental::BatchInputs;
use crate::plan::staged::{StagedOutput, StagedPlan};
use crate::progress::SinkProgress;
use crate::query::writer::LateRowsSpec;
use crate::query::StreamingQuery;
use crate::source::Offset;
use crate::testing::CrashPoint;
use crate::types::{BatchId, WatermarkMs};

use super::core::{now_ms, Driver, QuerySpec, StreamExecution};
use super::late_rows::LateRowsSink;
use super::progress::{
    event_time, ms_since, source_rows, Durations, FirstTriggerRate, TriggerProgress,
};
use super::sources::{MicroBatchSources, SourcesRead};
use super::trigger::MicroBatchTrigger;

/// The micro-batch loop of one query run.
pub struct MicroBatchExecution {
    plan: StagedPlan,
    sources: MicroBatchSources,
    trigger: MicroBatchTrigger,
    late_sink: Option<LateRowsSink>,
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
    /// Last, so that it is dropped last (see `StreamExecution`).
    core: StreamExecution,
}

/// One batch in flight: its id and logged offsets, and what its phases measured so far.
#[derive(Default)]
struct Batch {
    id: u64,
    offsets: OffsetSeq,
    durations: Durations,
    /// Rows and metrics of each source (getBatch).
    read: SourcesRead,
    /// Rows written to the late-row sink (addBatch).
    late_rows_written: Option<usize>,
    /// The batch's result rows (addBatch).
    output_rows: usize,
}

/// How many times one batch runs again after losing a worker before the query fails.
const MAX_WORKER_LOSSES: usize = 3;

impl MicroBatchExecution {
    /// Opens the checkpoint, plans the query and starts the loop on its own thread.
    pub(crate) fn start(
        spec: QuerySpec,
        trigger: MicroBatchTrigger,
        late_rows: Option<LateRowsSpec>,
    ) -> Result<StreamingQuery> {
        let (core, mut sources, _) = StreamExecution::open(
            &spec,
            trigger.as_trigger(),
            FirstTriggerRate::Zero,
            |checkpoint| Ok(checkpoint.offset_log().get_latest()?.map(|(_, seq)| seq)),
            |provider, ctx, _| provider.create_source(ctx),
        )?;
        let mut plan = StagedPlan::try_new(
            &core.session,
            spec.plan,
            spec.output_mode,
            core.checkpoint.root(),
            &core.pinned,
            &core.conf,
            core.hooks,
        )?;
        let late_sink = match late_rows {
            Some(spec) => Some(LateRowsSink::open(&core, &mut plan, &spec)?),
            None => None,
        };
        let explain = core.session.block_on(plan.explain())?;
        if let Some(cluster) = plan.cluster() {
            let reads = crate::distributed::ReadOnWorkers {
                cluster: std::sync::Arc::clone(cluster),
                workers: core.conf.distributed_workers.clone(),
                storage: core.session.storage_conf(),
                tasks: plan.worker_tasks().cloned(),
            };
            for slot in &mut sources {
                slot.source.read_on_workers(&reads);
            }
        }
        let execution = MicroBatchExecution {
            committed: vec![None; sources.len()],
            tracker: WatermarkTracker::new(core.pinned.watermark_policy, 0),
            core,
            plan,
            sources: MicroBatchSources::new(sources),
            trigger,
            late_sink,
            batch_id: 0,
            last_batch_watermark_ms: None,
            late_watermark_ms: 0,
        };
        StreamExecution::spawn(execution, "sluice-query", explain)
    }

    /// Restores the position of the last run from the checkpoint; returns the batch to re-run
    /// with its logged offsets, if the last one was not committed.
    fn recover(&mut self) -> Result<Option<OffsetSeq>> {
        let (start, watermark_ms, replay) = match self.core.checkpoint.recovery_plan()? {
            RecoveryPlan::Fresh => return Ok(None),
            RecoveryPlan::ResumeAfter {
                next_batch_id,
                start_offsets,
                watermark_ms,
            } => {
                self.batch_id = next_batch_id;
                // A no-data batch that was due when the query stopped still runs: a restart at any
                // batch boundary continues exactly as the uninterrupted query would.
                self.last_batch_watermark_ms = Some(start_offsets.metadata.batch_watermark_ms);
                (Some(start_offsets), watermark_ms, None)
            }
            RecoveryPlan::Replay {
                batch_id,
                offsets,
                start_offsets,
                watermark_ms,
            } => {
                self.batch_id = batch_id;
                (start_offsets, watermark_ms, Some(offsets))
            }
        };
        if let Some(start) = start {
            self.late_watermark_ms = start.metadata.batch_watermark_ms;
            self.committed = start.offsets;
        }
        self.tracker.restore(watermark_ms);
        Ok(replay)
    }

    /// One trigger: construct the next batch, write it to the WAL and run it. False when idle.
    fn run_trigger(&mut self, trigger_start: Instant) -> Result<bool> {
        self.core
            .set_status("Getting offsets from sources", false, true);
        let t = Instant::now();
        let (sources, committed) = (&mut self.sources, &self.committed);
        let (trigger, id) = (self.trigger, self.batch_id);
        let Some(ends) = self.core.wait_out_outages("getting offsets", || {
            sources.latest_offsets(committed, trigger, id)
        })?
        else {
            return Ok(false);
        };
        let new_data = ends
            .iter()
            .zip(&self.committed)
            .any(|(end, start)| end.is_some() && end != start);
        let latest_offset = ms_since(t);
        let no_data_batch = !new_data
            && self.last_batch_watermark_ms.is_some_and(|last| {
                self.plan
                    .should_run_another_batch(last, self.tracker.current_ms())
            });
        if !new_data && !no_data_batch {
            self.core.idle_trigger(trigger_start);
            return Ok(false);
        }
        let t = Instant::now();
        let watermark_ms = self.tracker.current_ms();
        let seq = self
            .core
            .write_offsets(self.batch_id, ends, watermark_ms, now_ms(), "batch")?;
        // Sources may forget what is before the previous batch's end.
        self.sources.commit(&self.committed)?;
        self.core.purge_logs(self.batch_id)?;
        let durations = Durations {
            latest_offset: Some(latest_offset),
            wal_commit: Some(ms_since(t)),
            ..Durations::default()
        };
        self.core
            .check_crash(CrashPoint::AfterOffsets, self.batch_id)?;
        self.run_batch(seq, trigger_start, durations)?;
        Ok(true)
    }

    /// Runs batch `self.batch_id` over the logged `offsets`, commits it and reports it.
    fn run_batch(
        &mut self,
        offsets: OffsetSeq,
        trigger_start: Instant,
        durations: Durations,
    ) -> Result<()> {
        self.core.set_status("Processing new data", true, true);
        let (id, sources) = (self.batch_id, self.sources.len());
        self.core.check_logged_sources(id, &offsets, sources)?;
        let mut batch = Batch {
            id,
            offsets,
            durations,
            ..Batch::default()
        };
        let mut lost = 0;
        let out = loop {
            // A source read by the workers can lose one too.
            let attempt = match self.get_batch(&mut batch) {
                Ok(inputs) => self.add_batch(&mut batch, inputs),
                Err(e) => Err(e),
            };
            match attempt {
                Err(e) if lost < MAX_WORKER_LOSSES && self.lost_a_worker(&e) => {
                    // The batch runs again, with the same offsets, on the workers that answer;
                    // nothing of it was committed (the sink takes batch N once, by its id).
                    lost += 1;
                    log::warn!("batch {id} is run again on the workers that answer: {e}");
                    batch.output_rows = 0;
                    batch.late_rows_written = None;
                }
                Err(e) if self.lost_a_worker(&e) => {
                    break Err(e.context(format!(
                        "batch {id} lost a worker in each of its {} runs (workers that refuse \
                         this process's connections lose every batch: workers serving TLS need \
                         --workers-tls-ca here, and with --tls-client-ca also \
                         --workers-tls-cert and --workers-tls-key)",
                        lost + 1
                    )))?
                }
                out => break out?,
            }
        };
        self.core.check_crash(CrashPoint::AfterSink, batch.id)?;
        let start_offsets = self.commit(&mut batch, &out.watermarks())?;
        self.report(batch, start_offsets, out, trigger_start);
        Ok(())
    }

    /// Whether `error` says the cluster lost a worker (the batch can run again on the others).
    fn lost_a_worker(&self, error: &crate::error::SluiceError) -> bool {
        self.plan
            .cluster()
            .is_some_and(|c| c.is_worker_lost(error, &self.core.conf.distributed_workers))
    }

    /// getBatch: each source's rows of `(committed, end]`, by relation id.
    fn get_batch(&mut self, batch: &mut Batch) -> Result<BatchInputs> {
        let t = Instant::now();
        let (starts, ends) = (&self.committed, &batch.offsets.offsets);
        let sources = &mut self.sources;
        let Some((inputs, read)) = self.core.wait_out_outages("reading the batch", || {
            sources.get_batch(starts, ends, batch.id)
        })?
        else {
            return Err(crate::error::SluiceError::connector(
                crate::error::class::KAFKA_BROKER_UNAVAILABLE,
                format!(
                    "batch {} was stopped while its source was unavailable; a restart runs it again",
                    batch.id
                ),
            ));
        };
        batch.read = read;
        batch.durations.get_batch = Some(ms_since(t));
        Ok(inputs)
    }

    /// queryPlanning + addBatch: plans and executes the batch (stateful operators included),
    /// then writes the result to the sink and the late rows to the late-row sink.
    fn add_batch(&mut self, batch: &mut Batch, inputs: BatchInputs) -> Result<StagedOutput> {
        let (batch_id, metadata) = (batch.id, &batch.offsets.metadata);
        let t = Instant::now();
        let mut out = self
            .plan
            .run(
                &self.core.session,
                &inputs,
                &BatchContext {
                    batch_id: BatchId(batch_id),
                    batch_timestamp_ms: metadata.batch_timestamp_ms,
                    // Spark 3.4+: late rows by the previous batch's watermark, eviction by this one's
                    late_watermark: WatermarkMs(self.late_watermark_ms),
                    eviction_watermark: WatermarkMs(metadata.batch_watermark_ms),
                },
            )
            .map_err(|e| e.context(format!("batch {batch_id}")))?;
        batch.durations.query_planning = Some(out.planning_ms);
        let sink = &self.core.sink_description;
        let (rows, watch) = super::output::watched(out.streams(&self.core.session)?);
        let written = self.core.sink.add_batch_streams(batch_id, rows);
        watch.check(written, batch_id, sink)?;
        batch.output_rows = watch.rows();
        if let Some(late) = &mut self.late_sink {
            let rows = std::mem::take(&mut out.late_rows);
            batch.late_rows_written = Some(late.add_batch(batch_id, rows)?);
        }
        batch.durations.add_batch = Some((ms_since(t) - out.planning_ms).max(0));
        Ok(out)
    }

    /// commit: the next watermark from the event times the batch saw, then `commits/N`; the
    /// loop moves on to batch N+1. Returns the batch's start offsets.
    fn commit(
        &mut self,
        batch: &mut Batch,
        watermarks: &[(i64, EventTimeStats)],
    ) -> Result<Vec<Option<Offset>>> {
        let observed: HashMap<usize, (i64, EventTimeStats)> =
            watermarks.iter().copied().enumerate().collect();
        let next_batch_watermark_ms = self.tracker.update(&observed);
        let t = Instant::now();
        self.core
            .write_commit(batch.id, next_batch_watermark_ms, "batch")?;
        batch.durations.commit_offsets = Some(ms_since(t));
        let batch_watermark_ms = batch.offsets.metadata.batch_watermark_ms;
        self.batch_id = batch.id + 1;
        self.last_batch_watermark_ms = Some(batch_watermark_ms);
        self.late_watermark_ms = batch_watermark_ms;
        let end_offsets = batch.offsets.offsets.clone();
        Ok(std::mem::replace(&mut self.committed, end_offsets))
    }

    /// progress: the batch's `StreamingQueryProgress`.
    fn report(
        &mut self,
        batch: Batch,
        starts: Vec<Option<Offset>>,
        out: StagedOutput,
        trigger_start: Instant,
    ) {
        let batch_watermark_ms = batch.offsets.metadata.batch_watermark_ms;
        let event_time = match self.plan.has_watermark() {
            true => event_time(&out.watermarks(), batch_watermark_ms),
            false => BTreeMap::new(),
        };
        let providers = self.sources.providers();
        let read = batch.read.into_iter().map(|r| r.settle()).collect();
        let sources = source_rows(providers, starts, batch.offsets.offsets, read);
        let mut metrics = self.core.sink.metrics();
        if let (Some(n), Some(late)) = (batch.late_rows_written, &self.late_sink) {
            late.add_metrics(n, &mut metrics);
        }
        self.core.progress.report(TriggerProgress {
            batch_id: batch.id,
            timestamp_ms: batch.offsets.metadata.batch_timestamp_ms,
            trigger_start,
            durations: batch.durations,
            processing: None,
            sources,
            event_time,
            state_operators: out.state_operators,
            sink: SinkProgress {
                description: self.core.sink_description.clone(),
                num_output_rows: batch.output_rows as i64,
                metrics,
            },
            workers: self.plan.take_worker_tasks(),
        });
    }
}

impl Driver for MicroBatchExecution {
    fn core(&self) -> &StreamExecution {
        &self.core
    }

    fn run(&mut self) -> Result<()> {
        let replay = self.recover()?;
        if self.trigger == MicroBatchTrigger::AvailableNow {
            self.sources.prepare_for_trigger_available_now()?;
        }
        if let Some(offsets) = replay {
            log::info!(
                "re-running batch {} with the offsets logged in offsets/{} (it was not committed)",
                self.batch_id,
                self.batch_id
            );
            self.run_batch(offsets, Instant::now(), Durations::default())?;
            if self.trigger == MicroBatchTrigger::Once || self.core.run_budget_spent() {
                return Ok(());
            }
        }
        loop {
            if self.core.shared.stopping() {
                return Ok(());
            }
            let trigger_start = Instant::now();
            let ran = self.run_trigger(trigger_start)?;
            if ran && self.core.run_budget_spent() {
                return Ok(());
            }
            if !self
                .trigger
                .await_next(&self.core.shared, trigger_start, ran)
            {
                return Ok(());
            }
        }
    }

    fn panic_message(&self, msg: &str) -> String {
        format!(
            "the query thread panicked in batch {}: {msg}. This is a bug in Sluice; the \
             checkpoint is intact and a restart replays the batch.",
            self.batch_id
        )
    }
}
