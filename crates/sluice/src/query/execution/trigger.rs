//! Micro-batch triggers (Spark's `Trigger` and its `TriggerExecutor`s): how much a batch may
//! read, and when the next one runs.

use std::time::{Duration, Instant};

use crate::query::QueryShared;
use crate::source::{ReadLimit, Source};
use crate::types::Trigger;

/// Sleep of the default trigger when no data arrived (`spark.sql.streaming.pollingDelay`).
const POLLING_DELAY: Duration = Duration::from_millis(10);

/// When a micro-batch query runs its batches: Spark's triggers but continuous, which runs as
/// `ContinuousExecution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MicroBatchTrigger {
    /// A batch every interval; `Duration::ZERO` is Spark's default trigger (as fast as possible).
    ProcessingTime(Duration),
    /// One batch with everything available, then stop.
    Once,
    /// Everything available at start, in as many batches as the read limits need, then stop.
    AvailableNow,
}

impl MicroBatchTrigger {
    /// The trigger as the query handle reports it.
    pub(crate) fn as_trigger(self) -> Trigger {
        match self {
            Self::ProcessingTime(d) => Trigger::ProcessingTime(d),
            Self::Once => Trigger::Once,
            Self::AvailableNow => Trigger::AvailableNow,
        }
    }

    /// How much `source` may read in one batch: everything under `Once`, else its own limit.
    pub(crate) fn read_limit(self, source: &dyn Source) -> ReadLimit {
        match self {
            Self::Once => ReadLimit::AllAvailable,
            _ => source.default_read_limit(),
        }
    }

    /// Waits for the next trigger after one that started at `trigger_start` and ran a batch
    /// (`ran`) or was idle; false when the query ends instead. A stop request ends the wait.
    pub(crate) fn await_next(
        self,
        shared: &QueryShared,
        trigger_start: Instant,
        ran: bool,
    ) -> bool {
        match self {
            Self::Once => false,
            Self::AvailableNow => ran,
            Self::ProcessingTime(interval) if interval.is_zero() => {
                if !ran {
                    shared.sleep(POLLING_DELAY);
                }
                true
            }
            Self::ProcessingTime(interval) => {
                let next = trigger_start + interval;
                let now = Instant::now();
                if next > now {
                    shared.sleep(next - now);
                } else {
                    log::warn!(
                        "Current batch is falling behind. The trigger interval is {} ms, but the \
                         batch took {} ms",
                        interval.as_millis(),
                        (now - trigger_start).as_millis()
                    );
                }
                true
            }
        }
    }
}
