//! `ProgressReporter` (Spark's `ProgressReporter`): turns what one trigger did — a micro-batch,
//! or a continuous epoch — into a [`StreamingQueryProgress`], hands it to the listeners and keeps
//! it in `recent_progress` (the last [`NUM_RECENT_PROGRESS`]); also posts `onQueryIdle` events.
//! Both drivers report through it, so the rates and the JSON are computed in one place.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::operators::watermark::EventTimeStats;
use crate::progress::{
    format_timestamp_ms, QueryIdleEvent, SinkProgress, SourceProgress, StateOperatorProgress,
    StreamingQueryListener, StreamingQueryProgress,
};
use crate::query::{QueryShared, NUM_RECENT_PROGRESS};
use crate::source::SourceProvider;
use crate::types::Offset;

use super::core::now_ms;

/// Interval between `onQueryIdle` events (`spark.sql.streaming.noDataProgressEventInterval`).
const IDLE_EVENT_INTERVAL: Duration = Duration::from_secs(10);

/// The phases of one trigger in milliseconds: `durationMs` of the progress, with Spark's keys.
/// A phase that did not run (e.g. `latestOffset` in a replayed batch) is `None` and not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Durations {
    /// `latestOffset`: asking the sources for their latest offsets.
    pub latest_offset: Option<i64>,
    /// `walCommit`: writing `offsets/N` (and, in micro-batch, the sources' commits and the purge).
    pub wal_commit: Option<i64>,
    /// `getBatch`: reading the batch's rows from the sources.
    pub get_batch: Option<i64>,
    /// `queryPlanning`: DataFusion's planning of the batch.
    pub query_planning: Option<i64>,
    /// `addBatch`: executing the batch and writing it to the sink.
    pub add_batch: Option<i64>,
    /// `sinkCommit` (continuous only): the sink's flush at the end of an epoch.
    pub sink_commit: Option<i64>,
    /// `commitOffsets`: writing `commits/N`.
    pub commit_offsets: Option<i64>,
    /// `triggerExecution`: the whole trigger (set by the reporter).
    pub trigger_execution: Option<i64>,
}

impl Durations {
    /// `durationMs` as the progress JSON carries it: Spark's camelCase key per phase that ran.
    pub(crate) fn to_map(self) -> BTreeMap<String, i64> {
        [
            ("latestOffset", self.latest_offset),
            ("walCommit", self.wal_commit),
            ("getBatch", self.get_batch),
            ("queryPlanning", self.query_planning),
            ("addBatch", self.add_batch),
            ("sinkCommit", self.sink_commit),
            ("commitOffsets", self.commit_offsets),
            ("triggerExecution", self.trigger_execution),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
        .collect()
    }
}

/// Milliseconds since `t`, as progress reports durations.
pub(crate) fn ms_since(t: Instant) -> i64 {
    t.elapsed().as_millis() as i64
}

/// The progress's `eventTime`: `avg`, `max`, `min` of the event times the batch's watermark nodes
/// saw (`watermarks`: delay and statistics per node), and the `watermark` it ran with.
pub(crate) fn event_time(
    watermarks: &[(i64, EventTimeStats)],
    batch_watermark_ms: i64,
) -> BTreeMap<String, String> {
    let mut all = EventTimeStats::default();
    for (_, st) in watermarks {
        all.merge(st);
    }
    let mut event_time = BTreeMap::new();
    if let Some(avg) = all.avg() {
        event_time.insert("avg".to_string(), format_timestamp_ms(avg as i64));
        event_time.insert("max".to_string(), format_timestamp_ms(all.max));
        event_time.insert("min".to_string(), format_timestamp_ms(all.min));
    }
    let watermark = format_timestamp_ms(batch_watermark_ms);
    event_time.insert("watermark".to_string(), watermark);
    event_time
}

/// What one source did in a trigger.
pub(crate) struct SourceRows {
    pub description: String,
    /// Where the trigger started reading (the previous trigger's end).
    pub start_offset: Option<Offset>,
    /// Where it stopped (also reported as the latest offset).
    pub end_offset: Option<Offset>,
    pub rows: usize,
    pub metrics: BTreeMap<String, String>,
}

/// What each source did in a trigger, in the query's source order: its provider, where it started
/// and stopped, and its rows and metrics.
pub(crate) fn source_rows<'a>(
    providers: impl Iterator<Item = &'a Arc<dyn SourceProvider>>,
    starts: Vec<Option<Offset>>,
    ends: Vec<Option<Offset>>,
    read: Vec<(usize, BTreeMap<String, String>)>,
) -> Vec<SourceRows> {
    let ranges = starts.into_iter().zip(ends);
    (providers.zip(ranges).zip(read))
        .map(
            |((provider, (start_offset, end_offset)), (rows, metrics))| SourceRows {
                description: crate::redact::redacted(provider.description()),
                start_offset,
                end_offset,
                rows,
                metrics,
            },
        )
        .collect()
}

/// What one trigger did, for its progress report.
pub(crate) struct TriggerProgress {
    /// The batch id, or the epoch.
    pub batch_id: u64,
    /// The trigger's timestamp (ms since the epoch; `batchTimestampMs` in micro-batch).
    pub timestamp_ms: i64,
    pub trigger_start: Instant,
    pub durations: Durations,
    /// Time spent processing the rows (`processedRowsPerSecond`'s base); `None`: the whole
    /// trigger, as in Spark's micro-batch.
    pub processing: Option<Duration>,
    pub sources: Vec<SourceRows>,
    pub event_time: BTreeMap<String, String>,
    pub state_operators: Vec<StateOperatorProgress>,
    pub sink: SinkProgress,
    /// The tasks each worker ran (a query on a cluster).
    pub workers: Vec<crate::progress::WorkerProgress>,
}

/// The input rate of a run's first trigger, which has no previous trigger to measure from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstTriggerRate {
    /// 0 rows per second (Spark's micro-batch).
    Zero,
    /// Over the trigger's own duration (continuous epochs).
    OverItsDuration,
}

/// Reports the progress of one query run.
pub(crate) struct ProgressReporter {
    shared: Arc<QueryShared>,
    listeners: Vec<Arc<dyn StreamingQueryListener>>,
    first_trigger_rate: FirstTriggerRate,
    last_trigger_start: Option<Instant>,
    last_idle_event: Option<Instant>,
    last_store_counts: crate::storage::StoreCounts,
}

impl ProgressReporter {
    /// A reporter for the query `shared`, posting to `listeners`.
    pub(crate) fn new(
        shared: Arc<QueryShared>,
        listeners: Vec<Arc<dyn StreamingQueryListener>>,
        first_trigger_rate: FirstTriggerRate,
    ) -> Self {
        Self {
            shared,
            listeners,
            first_trigger_rate,
            last_trigger_start: None,
            last_idle_event: None,
            last_store_counts: crate::storage::metrics().counts(),
        }
    }

    /// The listeners of the query (for its lifecycle events).
    pub(crate) fn listeners(&self) -> &[Arc<dyn StreamingQueryListener>] {
        &self.listeners
    }

    /// Reports a trigger that ran: builds its progress (`triggerExecution` = now minus its start),
    /// posts it to the listeners and keeps it in `recent_progress`.
    pub(crate) fn report(&mut self, t: TriggerProgress) {
        let trigger_ms = ms_since(t.trigger_start);
        let mut durations = t.durations;
        durations.trigger_execution = Some(trigger_ms);
        let since_last = match (self.last_trigger_start, self.first_trigger_rate) {
            (Some(last), _) => t.trigger_start.duration_since(last).as_secs_f64(),
            (None, FirstTriggerRate::Zero) => 0.0,
            (None, FirstTriggerRate::OverItsDuration) => trigger_ms as f64 / 1000.0,
        };
        self.last_trigger_start = Some(t.trigger_start);
        let processing_secs = match t.processing {
            Some(d) => d.as_secs_f64(),
            None => trigger_ms as f64 / 1000.0,
        };
        let rate = |n: usize, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let num_input_rows: usize = t.sources.iter().map(|s| s.rows).sum();
        let sources = t
            .sources
            .into_iter()
            .map(|s| SourceProgress {
                description: s.description,
                start_offset: s.start_offset,
                latest_offset: s.end_offset.clone(),
                end_offset: s.end_offset,
                num_input_rows: s.rows as i64,
                input_rows_per_second: rate(s.rows, since_last),
                processed_rows_per_second: rate(s.rows, processing_secs),
                metrics: s.metrics,
            })
            .collect();
        let progress = StreamingQueryProgress {
            id: self.shared.id.clone(),
            run_id: self.shared.run_id.clone(),
            name: self.shared.name.clone(),
            timestamp: format_timestamp_ms(t.timestamp_ms),
            batch_id: t.batch_id as i64,
            batch_duration: trigger_ms,
            num_input_rows: num_input_rows as i64,
            input_rows_per_second: rate(num_input_rows, since_last),
            processed_rows_per_second: rate(num_input_rows, processing_secs),
            duration_ms: durations.to_map(),
            event_time: t.event_time,
            state_operators: t.state_operators,
            sources,
            sink: t.sink,
            object_store: self.object_store_counts(),
            workers: t.workers,
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
    }

    /// The object store requests since the last report, when the process uses object stores.
    fn object_store_counts(&mut self) -> Option<crate::progress::ObjectStoreProgress> {
        let now = crate::storage::metrics().counts();
        let d = now.since(&self.last_store_counts);
        self.last_store_counts = now;
        (now.requests > 0).then_some(crate::progress::ObjectStoreProgress {
            requests: d.requests,
            retries: d.retries,
            failures: d.failures,
        })
    }

    /// A trigger found no new data: posts `onQueryIdle`, at most every
    /// [`IDLE_EVENT_INTERVAL`].
    pub(crate) fn idle(&mut self) {
        if self
            .last_idle_event
            .is_some_and(|t| t.elapsed() < IDLE_EVENT_INTERVAL)
        {
            return;
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_use_sparks_keys_and_skip_phases_that_did_not_run() {
        let d = Durations {
            latest_offset: Some(1),
            wal_commit: Some(2),
            get_batch: Some(3),
            query_planning: Some(4),
            add_batch: Some(5),
            sink_commit: None,
            commit_offsets: Some(6),
            trigger_execution: Some(21),
        };
        assert_eq!(
            serde_json::to_string(&d.to_map()).unwrap(),
            "{\"addBatch\":5,\"commitOffsets\":6,\"getBatch\":3,\"latestOffset\":1,\
             \"queryPlanning\":4,\"triggerExecution\":21,\"walCommit\":2}"
        );
        let epoch = Durations {
            wal_commit: Some(1),
            sink_commit: Some(2),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&epoch.to_map()).unwrap(),
            "{\"sinkCommit\":2,\"walCommit\":1}"
        );
    }
}
