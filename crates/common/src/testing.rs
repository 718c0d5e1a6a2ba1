//! Test hooks (feature `testing`): faults injected at named points of a query, so crash tests are
//! ordinary tests. Without the feature, [`TestHooks`] is empty and every check is a constant
//! `false` the compiler removes: the production loop never reads a test conf key.
//!
//! With the feature, hooks are read once per query from the session's conf:
//! - [`CRASH_POINT`] = `afterOffsets:N` | `afterSink:N` | `inStateCommit:N` fails batch N at that
//!   point with class [`SLUICE_INJECTED_CRASH`](crate::error::class::SLUICE_INJECTED_CRASH), as a
//!   crash would (`inStateCommit` after the first state partition committed);
//! - [`MAX_BATCHES_PER_RUN`] = `K` stops the query cleanly after K batches of one run (the
//!   conformance crash matrix restarts after every batch with it);
//! - [`STOP_WITHOUT_COMMIT`] = `true` makes a continuous query stop without committing its last
//!   epoch;
//! - [`STATEFUL_INPUT_CHUNK_ROWS`] = `K` hands every stateful operator its input in chunks of at
//!   most K rows (the conformance matrix runs each scenario with 1-row chunks, so the chunked path
//!   a large batch takes is checked against Spark's outputs).

/// Conf key of the injected crash point (`afterOffsets:N`, `afterSink:N`, `inStateCommit:N`).
pub const CRASH_POINT: &str = "sluice.testing.crashPoint";
/// Conf key: stop (as a clean stop) after this many batches in one run.
pub const MAX_BATCHES_PER_RUN: &str = "sluice.testing.maxBatchesPerRun";
/// Conf key: a continuous query stops without committing its last epoch.
pub const STOP_WITHOUT_COMMIT: &str = "sluice.testing.continuous.stopWithoutCommit";

/// Conf key: stateful operators take their input in chunks of at most this many rows.
pub const STATEFUL_INPUT_CHUNK_ROWS: &str = "sluice.testing.statefulInputChunkRows";

/// Where in a batch an injected crash happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After `offsets/N` was written, before the batch ran.
    AfterOffsets,
    /// After the sink took batch N, before `commits/N`.
    AfterSink,
    /// In the middle of the state commit of batch N: the first partition committed, the rest not.
    InStateCommit,
}

impl CrashPoint {
    /// The name used in [`CRASH_POINT`]'s value.
    pub fn as_str(self) -> &'static str {
        match self {
            CrashPoint::AfterOffsets => "afterOffsets",
            CrashPoint::AfterSink => "afterSink",
            CrashPoint::InStateCommit => "inStateCommit",
        }
    }
}

/// The hooks of one query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestHooks {
    #[cfg(feature = "testing")]
    crash: Option<(CrashPoint, u64)>,
    #[cfg(feature = "testing")]
    max_batches_per_run: Option<u64>,
    #[cfg(feature = "testing")]
    stop_without_commit: bool,
    #[cfg(feature = "testing")]
    stateful_input_chunk_rows: Option<usize>,
}

impl TestHooks {
    /// The hooks a conf sets, read through `get` (a session's conf; none without the `testing`
    /// feature).
    #[allow(unused_variables)]
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        #[cfg(feature = "testing")]
        {
            let crash = get(CRASH_POINT).and_then(|v| {
                let (point, n) = v.split_once(':')?;
                let point = match point {
                    "afterOffsets" => CrashPoint::AfterOffsets,
                    "afterSink" => CrashPoint::AfterSink,
                    "inStateCommit" => CrashPoint::InStateCommit,
                    _ => return None,
                };
                Some((point, n.trim().parse().ok()?))
            });
            Self {
                crash,
                max_batches_per_run: get(MAX_BATCHES_PER_RUN).and_then(|v| v.trim().parse().ok()),
                stop_without_commit: get(STOP_WITHOUT_COMMIT)
                    .is_some_and(|v| v.eq_ignore_ascii_case("true")),
                stateful_input_chunk_rows: get(STATEFUL_INPUT_CHUNK_ROWS)
                    .and_then(|v| v.trim().parse().ok())
                    .filter(|n| *n > 0),
            }
        }
        #[cfg(not(feature = "testing"))]
        Self::default()
    }

    /// Whether batch `batch_id` must crash at `point`.
    #[allow(unused_variables)]
    pub fn crashes_at(&self, point: CrashPoint, batch_id: u64) -> bool {
        #[cfg(feature = "testing")]
        return self.crash == Some((point, batch_id));
        #[cfg(not(feature = "testing"))]
        false
    }

    /// Whether a run that has run `batches_this_run` batches must stop now.
    #[allow(unused_variables)]
    pub fn stops_after(&self, batches_this_run: u64) -> bool {
        #[cfg(feature = "testing")]
        return self
            .max_batches_per_run
            .is_some_and(|k| batches_this_run >= k);
        #[cfg(not(feature = "testing"))]
        false
    }

    /// Whether a continuous query stops without committing its last epoch.
    pub fn stop_without_commit(&self) -> bool {
        #[cfg(feature = "testing")]
        return self.stop_without_commit;
        #[cfg(not(feature = "testing"))]
        false
    }

    /// The most rows a chunk of a stateful operator's input may have (none: chunks are cut by
    /// the memory budget only).
    pub fn stateful_input_chunk_rows(&self) -> Option<usize> {
        #[cfg(feature = "testing")]
        return self.stateful_input_chunk_rows;
        #[cfg(not(feature = "testing"))]
        None
    }
}

/// The error an injected crash raises.
pub fn injected_crash(what: &str) -> crate::error::SluiceError {
    crate::error::SluiceError::new(
        crate::error::Fault::Internal,
        crate::error::class::SLUICE_INJECTED_CRASH,
        format!("injected crash {what} ({CRASH_POINT})"),
    )
}
