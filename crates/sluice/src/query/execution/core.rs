//! `StreamExecution` (Spark's `StreamExecution`): what every execution of a streaming query
//! shares. Like ripgrep's searcher `Core`, it is held by the two drivers (`microbatch.rs`,
//! `continuous.rs`), which differ only in their loop. The core:
//!
//! - opens the checkpoint through [`CheckpointDir`]: creates it, takes its lock, sets a torn
//!   log tail aside, reads or creates its `metadata` (the query id) and its logs;
//! - resolves the conf the query runs with: the [`StreamingConf`] parsed once from the session,
//!   and the [`PinnedConf`] the checkpoint's offsets log brings back on a restart;
//! - checks that a restarted query has the shape its checkpoint recorded
//!   ([`check_query_shape`]);
//! - creates the sources (given [`SourceContext`]) and the sink (given [`SinkContext`]);
//! - runs the driver on the query's own thread with the query's lifecycle (started and
//!   terminated events, a panic turned into `INTERNAL_ERROR`, the stopped status), deletes a
//!   temporary checkpoint after a clean end, and asks the thread to stop when dropped;
//! - updates the query's status, and holds its [`ProgressReporter`] and test hooks.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use datafusion::logical_expr::LogicalPlan;

use crate::checkpoint::{
    CheckpointDir, CheckpointLock, CommitLog, CommitMetadata, OffsetSeq, OffsetSeqLog,
    OffsetSeqMetadata,
};
use crate::conf::{PinnedConf, StreamingConf};
use crate::error::{class, Fault, Result, SluiceError};
use crate::plan::streaming_relations;
use crate::progress::{format_timestamp_ms, QueryStartedEvent, QueryTerminatedEvent};
use crate::query::{QueryShared, StreamingQuery, StreamingQueryStatus};
use crate::session::Session;
use crate::sink::{Sink, SinkContext, SinkProvider};
use crate::source::{SourceContext, SourceProvider};
use crate::testing::{CrashPoint, TestHooks};
use crate::types::{Offset, OutputMode, Trigger};

use super::progress::{FirstTriggerRate, ProgressReporter};

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A query as the writer resolved it, ready to run.
pub(crate) struct QuerySpec {
    pub session: Session,
    /// The analysed plan.
    pub plan: LogicalPlan,
    pub sink: Arc<dyn SinkProvider>,
    pub output_mode: OutputMode,
    pub checkpoint_root: PathBuf,
    /// The checkpoint is the writer's own temporary directory, deleted after a clean end.
    pub temporary_checkpoint: bool,
    /// `queryName`.
    pub name: Option<String>,
    /// The session's conf, parsed once for this query.
    pub conf: StreamingConf,
}

/// One source of the query: its relation in the plan, its provider and the driver's reader.
pub(crate) struct SourceSlot<S> {
    /// The `StreamingRelation` id its rows are bound to.
    pub relation_id: u64,
    pub provider: Arc<dyn SourceProvider>,
    /// How many scans of the query read it; its input rows count once per use, as in Spark.
    pub uses: usize,
    /// A micro-batch `Source` or a `ContinuousReader`.
    pub source: S,
}

/// A driver: one kind of execution's loop around the core.
pub(crate) trait Driver: Send + 'static {
    /// The core the driver holds.
    fn core(&self) -> &StreamExecution;
    /// Runs the loop until the query stops (`Ok`) or fails.
    fn run(&mut self) -> Result<()>;
    /// The `INTERNAL_ERROR` message for a panic (`msg`) in the loop: where it happened, and what
    /// a restart does.
    fn panic_message(&self, msg: &str) -> String;
}

/// What every execution of one query run shares (see the module doc).
pub(crate) struct StreamExecution {
    /// The session the query runs in (its runtime executes every batch).
    pub session: Session,
    /// The query's sink, and its description for progress and errors.
    pub sink: Box<dyn Sink>,
    pub sink_description: String,
    /// The checkpoint location.
    pub checkpoint: CheckpointDir,
    temporary_checkpoint: bool,
    offset_log: OffsetSeqLog,
    commit_log: CommitLog,
    /// The conf the query runs with.
    pub conf: StreamingConf,
    /// The conf pinned in the checkpoint (written into every `offsets/N`).
    pub pinned: PinnedConf,
    /// The test hooks (none without the `testing` feature).
    pub hooks: TestHooks,
    /// Batches run so far in this run (for the test hook `maxBatchesPerRun`).
    batches_this_run: u64,
    /// What the query's handles see.
    pub shared: Arc<QueryShared>,
    pub progress: ProgressReporter,
    /// Dropped last (a driver holds its core last too): the checkpoint is released only once
    /// the sources and the sink are closed.
    lock: CheckpointLock,
}

impl StreamExecution {
    /// Opens the query's checkpoint and creates its sources and sink.
    ///
    /// `resume` reads the checkpoint's logs and returns the offsets the run resumes from (their
    /// conf is the pinned conf, their number of sources the recorded one), `None` for a first run.
    /// `create_source` makes the driver's reader of each source, given the resumed offset of
    /// that source. Returns the core, the sources in plan order, and the resumed offsets.
    pub(crate) fn open<S>(
        spec: &QuerySpec,
        trigger: Trigger,
        first_trigger_rate: FirstTriggerRate,
        resume: impl FnOnce(&CheckpointDir) -> Result<Option<OffsetSeq>>,
        mut create_source: impl FnMut(
            &Arc<dyn SourceProvider>,
            &SourceContext,
            Option<&Offset>,
        ) -> Result<S>,
    ) -> Result<(Self, Vec<SourceSlot<S>>, Option<OffsetSeq>)> {
        let checkpoint = CheckpointDir::new(spec.checkpoint_root.clone());
        // Before anything is written to the checkpoint.
        check_no_feedback(
            checkpoint.root(),
            &streaming_relations(&spec.plan),
            spec.sink.as_ref(),
        )?;
        crate::storage::create_dir_all(checkpoint.root()).map_err(|e| {
            SluiceError::io(
                Fault::Checkpoint,
                format!(
                    "cannot create checkpoint directory {}",
                    checkpoint.root().display()
                ),
                e,
            )
        })?;
        let lock = checkpoint.lock()?;
        crate::checkpoint::recover_torn_tail(&checkpoint)?;
        let metadata = checkpoint.read_or_create_metadata()?;
        let resumed = resume(&checkpoint)?;
        let pinned = PinnedConf::resolve(
            &spec.conf,
            resumed.as_ref().map(|seq| &seq.metadata.conf),
            checkpoint.root(),
        )?;

        let relations = streaming_relations(&spec.plan);
        check_query_shape(
            checkpoint.root(),
            resumed.as_ref().map(|seq| seq.offsets.len()),
            &relations,
            spec.sink.as_ref(),
        )?;
        let mut sources = Vec::with_capacity(relations.len());
        for (i, (relation_id, provider)) in relations.into_iter().enumerate() {
            let ctx = SourceContext {
                index: i,
                metadata_dir: checkpoint.source_dir(i),
                log_cleanup: spec.conf.file_source_log,
                memory: spec.conf.memory,
            };
            let start = resumed
                .as_ref()
                .and_then(|seq| seq.offsets.get(i))
                .and_then(Option::as_ref);
            let source = create_source(&provider, &ctx, start)?;
            sources.push(SourceSlot {
                relation_id,
                uses: crate::plan::relation_uses(&spec.plan, relation_id),
                provider,
                source,
            });
        }
        let sink = spec.sink.create_sink(&SinkContext {
            checkpoint_dir: checkpoint.root().to_path_buf(),
            output_mode: spec.output_mode,
            query_name: spec.name.clone(),
            query_id: metadata.id.clone(),
            last_planned: checkpoint.offset_log().latest_id()?,
            log_cleanup: spec.conf.file_sink_log,
            memory: spec.conf.memory,
        })?;

        let shared = Arc::new(QueryShared::new(
            metadata.id,
            uuid::Uuid::new_v4().to_string(),
            spec.name.clone(),
            trigger,
        ));
        let core = StreamExecution {
            session: spec.session.clone(),
            offset_log: checkpoint.offset_log(),
            commit_log: checkpoint.commit_log(),
            checkpoint,
            temporary_checkpoint: spec.temporary_checkpoint,
            lock,
            conf: spec.conf.clone(),
            pinned,
            hooks: TestHooks::from_lookup(|k| spec.session.conf(k)),
            batches_this_run: 0,
            sink,
            sink_description: crate::redact::redacted(spec.sink.description()),
            progress: ProgressReporter::new(
                shared.clone(),
                spec.session.listeners(),
                first_trigger_rate,
            ),
            shared,
        };
        Ok((core, sources, resumed))
    }

    /// The sink of a side output (the late-row sink): it runs under its own checkpoint `side`
    /// (`CheckpointDir::late_rows_dir`), with an id of its own in that directory's `metadata`, in
    /// append mode.
    pub(crate) fn create_side_sink(
        &self,
        provider: &dyn SinkProvider,
        side: CheckpointDir,
    ) -> Result<Box<dyn Sink>> {
        let query_id = side.read_or_create_metadata()?.id;
        provider.create_sink(&SinkContext {
            checkpoint_dir: side.root().to_path_buf(),
            output_mode: OutputMode::Append,
            query_name: None,
            query_id,
            // The side output writes the main query's batch ids.
            last_planned: self.offset_log.latest_id()?,
            log_cleanup: self.conf.file_sink_log,
            memory: self.conf.memory,
        })
    }

    /// Runs `step` (`doing` says what, for the status) until it succeeds or fails with an error
    /// that is not transient ([`SluiceError::is_transient`]); between attempts the status says
    /// what the query waits for. None when the query was stopped while waiting.
    pub(crate) fn wait_out_outages<T>(
        &self,
        doing: &str,
        mut step: impl FnMut() -> Result<T>,
    ) -> Result<Option<T>> {
        let mut since: Option<Instant> = None;
        loop {
            match step() {
                Ok(v) => {
                    if let Some(t) = since {
                        log::warn!(
                            "Query at {}: {doing} works again after {:.1} s; resuming",
                            self.checkpoint.as_ref().display(),
                            t.elapsed().as_secs_f64()
                        );
                    }
                    return Ok(Some(v));
                }
                Err(e) if e.is_transient() && !self.shared.stopping() => {
                    if since.is_none() {
                        log::warn!(
                            "Query at {}: {e}; waiting and trying again",
                            self.checkpoint.as_ref().display()
                        );
                    }
                    let t = *since.get_or_insert_with(Instant::now);
                    self.set_status(
                        &format!(
                            "Waiting for a source to come back ({doing}), {} s so far: {}",
                            t.elapsed().as_secs(),
                            e.message()
                        ),
                        false,
                        true,
                    );
                    self.shared.sleep(std::time::Duration::from_secs(1));
                }
                Err(e) if e.is_transient() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Sets the query's status (`StreamingQueryStatus`).
    pub(crate) fn set_status(&self, message: &str, data_available: bool, trigger_active: bool) {
        self.shared.update(|st| {
            st.status = StreamingQueryStatus {
                message: message.into(),
                is_data_available: data_available,
                is_trigger_active: trigger_active,
            }
        });
    }

    /// WAL: writes `offsets/<id>` (the sources' `offsets`, the batch's watermark and timestamp,
    /// the pinned conf) and returns it. An entry already there is another query's (`what`: batch
    /// or epoch).
    pub(crate) fn write_offsets(
        &self,
        id: u64,
        offsets: Vec<Option<Offset>>,
        batch_watermark_ms: i64,
        batch_timestamp_ms: i64,
        what: &str,
    ) -> Result<OffsetSeq> {
        let seq = OffsetSeq {
            metadata: OffsetSeqMetadata {
                batch_watermark_ms,
                batch_timestamp_ms,
                conf: self.pinned.entries.clone(),
            },
            offsets,
        };
        self.lock.check()?;
        if !self.offset_log.add(id, &seq)? {
            return Err(concurrent_update(id, what));
        }
        Ok(seq)
    }

    /// Writes `commits/<id>` with the watermark the next batch runs with.
    pub(crate) fn write_commit(
        &self,
        id: u64,
        next_batch_watermark_ms: i64,
        what: &str,
    ) -> Result<()> {
        let commit = CommitMetadata {
            next_batch_watermark_ms,
        };
        if !self.commit_log.add(id, &commit)? {
            return Err(concurrent_update(id, what));
        }
        Ok(())
    }

    /// Retention: removes the log entries `minBatchesToRetain` behind batch `current`.
    pub(crate) fn purge_logs(&self, current: u64) -> Result<()> {
        self.checkpoint
            .purge_logs(current, self.conf.min_batches_to_retain)
    }

    /// Checks that `offsets/<batch_id>` lists one offset per source of the query (`sources`).
    pub(crate) fn check_logged_sources(
        &self,
        batch_id: u64,
        offsets: &OffsetSeq,
        sources: usize,
    ) -> Result<()> {
        if offsets.offsets.len() == sources {
            return Ok(());
        }
        Err(SluiceError::checkpoint(
            class::CHECKPOINT_CORRUPT_LOG,
            format!(
                "offsets/{batch_id} in {} lists {} source offsets but the query has {sources} \
                 sources",
                self.checkpoint.as_ref().display(),
                offsets.offsets.len(),
            ),
        ))
    }

    /// A trigger that started at `trigger_start` found no new data: the status says so, what was
    /// available then is processed (`process_all_available` returns), and `onQueryIdle` is due.
    pub(crate) fn idle_trigger(&mut self, trigger_start: Instant) {
        self.set_status("Waiting for data to arrive", false, false);
        self.shared
            .update(|st| st.last_idle_trigger_start = Some(trigger_start));
        self.progress.idle();
    }

    /// Counts a batch against the test hook `maxBatchesPerRun`; true when the budget is spent.
    pub(crate) fn run_budget_spent(&mut self) -> bool {
        self.batches_this_run += 1;
        self.hooks.stops_after(self.batches_this_run)
    }

    /// Fails batch `batch_id` at `point` when a test hook asks for it.
    pub(crate) fn check_crash(&self, point: CrashPoint, batch_id: u64) -> Result<()> {
        if self.hooks.crashes_at(point, batch_id) {
            return Err(crate::testing::injected_crash(&format!(
                "{} in batch {batch_id}",
                point.as_str()
            )));
        }
        Ok(())
    }

    /// Starts `driver`'s loop on the query's own thread (named `<thread>-<query id prefix>`).
    pub(crate) fn spawn<D: Driver>(
        driver: D,
        thread: &str,
        explain: String,
    ) -> Result<StreamingQuery> {
        let shared = driver.core().shared.clone();
        let name = format!("{thread}-{}", &shared.id[..8.min(shared.id.len())]);
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || run_query_thread(driver))
            .map_err(|e| SluiceError::internal(format!("cannot start the query thread: {e}")))?;
        Ok(StreamingQuery::new(shared, handle, explain))
    }
}

impl Drop for StreamExecution {
    fn drop(&mut self) {
        self.shared.stop_requested.store(true, Ordering::SeqCst);
    }
}

/// What a query thread does around its loop, for micro-batch and continuous execution alike:
/// the started event, the loop (a panic — a bug — becomes an `INTERNAL_ERROR` worded by
/// [`Driver::panic_message`], never a hung query), the temporary checkpoint's deletion after a
/// clean end, the terminated event, and, once the driver is dropped (its checkpoint lock and
/// sources released, so a restart right after `await_termination` can take the checkpoint), the
/// stopped status.
fn run_query_thread<D: Driver>(mut driver: D) {
    let shared = driver.core().shared.clone();
    let listeners = driver.core().progress.listeners().to_vec();
    let started = QueryStartedEvent {
        id: shared.id.clone(),
        run_id: shared.run_id.clone(),
        name: shared.name.clone(),
        timestamp: format_timestamp_ms(now_ms()),
    };
    for l in &listeners {
        l.on_query_started(&started);
    }
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.run())) {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(SluiceError::internal(driver.panic_message(&msg)))
        }
    };
    let (exception, class) = match &result {
        Ok(()) => {
            let core = driver.core();
            if core.temporary_checkpoint {
                let _ = crate::storage::remove_dir_all(core.checkpoint.root());
            }
            (None, None)
        }
        Err(e) => {
            log::error!("query {} failed: {e}", shared.id);
            (Some(e.to_string()), Some(e.class().to_string()))
        }
    };
    let terminated = QueryTerminatedEvent {
        id: shared.id.clone(),
        run_id: shared.run_id.clone(),
        exception,
        error_class_on_exception: class,
    };
    for l in &listeners {
        l.on_query_terminated(&terminated);
    }
    drop(driver);
    shared.update(|st| {
        st.active = false;
        st.exception = result.err();
        st.status = StreamingQueryStatus {
            message: "Stopped".into(),
            is_data_available: false,
            is_trigger_active: false,
        };
    });
}

/// Another query wrote log entry `id` of this checkpoint (`what`: batch or epoch).
fn concurrent_update(id: u64, what: &str) -> SluiceError {
    SluiceError::checkpoint(
        class::CONCURRENT_QUERY,
        format!(
            "Concurrent update to the log. Multiple streaming jobs detected for {id}: another \
             query wrote the same {what}. Run one query per checkpointLocation."
        ),
    )
}

/// The restart checks both executions make before running: the query reads as many sources as
/// the checkpoint's last offsets record (`recorded_sources`), and its source types and sink are
/// the ones recorded in `<checkpoint>/sluice/query.json` (recorded on the first run).
/// A sink or a checkpoint writing into a folder a file source lists would feed the query its own
/// output (10 rows became 300 in 15 s in a test): refused at start.
fn check_no_feedback(
    checkpoint_root: &std::path::Path,
    relations: &[(u64, Arc<dyn SourceProvider>)],
    sink: &dyn SinkProvider,
) -> Result<()> {
    let same = |a: &std::path::Path, b: &std::path::Path| {
        let canon =
            |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        a == b || canon(a) == canon(b)
    };
    for (i, (_, source)) in relations.iter().enumerate() {
        let Some(dir) = source.listed_dir() else {
            continue;
        };
        if let Some(out) = sink.output_dir().filter(|out| same(out, &dir)) {
            return Err(SluiceError::query(
                class::SINK_WRITES_INTO_SOURCE,
                format!(
                    "the sink writes files into {}, the folder the query's source {i} ({}) \
                     reads: every batch would read the previous batches' output again, without \
                     end. Write to another folder (e.g. {})",
                    out.display(),
                    source.description(),
                    out.with_file_name(format!(
                        "{}-out",
                        out.file_name().and_then(|n| n.to_str()).unwrap_or("output")
                    ))
                    .display()
                ),
            ));
        }
        if same(checkpoint_root, &dir) {
            return Err(SluiceError::query(
                class::CHECKPOINT_IN_SOURCE,
                format!(
                    "the checkpointLocation {} is the folder the query's source {i} ({}) reads: \
                     the checkpoint's own files (metadata) would be read as input. Put the \
                     checkpoint in another folder",
                    checkpoint_root.display(),
                    source.description()
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_query_shape(
    checkpoint_root: &std::path::Path,
    recorded_sources: Option<usize>,
    relations: &[(u64, Arc<dyn SourceProvider>)],
    sink: &dyn SinkProvider,
) -> Result<()> {
    if let Some(n) = recorded_sources.filter(|n| *n != relations.len()) {
        return Err(SluiceError::checkpoint(
            class::STREAMING_QUERY_SOURCES_CHANGED,
            format!(
                "The query reads {} source(s) but the checkpoint {} was written by a query with \
                 {n}. Changing the number of sources is not allowed; start with a new \
                 checkpointLocation.",
                relations.len(),
                checkpoint_root.display(),
            ),
        ));
    }
    crate::checkpoint::shape::check_or_record(
        checkpoint_root,
        &crate::checkpoint::shape::QueryShape {
            sources: relations
                .iter()
                .map(|(_, p)| {
                    (
                        p.kind().to_string(),
                        crate::redact::redacted(p.description()),
                    )
                })
                .collect(),
            sink_kind: sink.kind().to_string(),
            sink_description: crate::redact::redacted(sink.description()),
        },
    )
}
