//! Where a (re)started query resumes: a pure function of the logs (Spark's
//! `MicroBatchExecution.populateStartOffsets`).

use super::commits::CommitMetadata;
use super::offsets::OffsetSeq;
use crate::error::class;
use crate::error::{Result, SluiceError};

/// What a starting query does first.
#[derive(Debug, Clone, PartialEq)]
pub enum RecoveryPlan {
    /// No offsets logged: a new query, batch 0, no watermark.
    Fresh,
    /// The latest planned batch was committed: plan batch `next_batch_id` from `start_offsets`.
    ResumeAfter {
        /// The batch to plan next: the committed batch's id + 1.
        next_batch_id: u64,
        /// The end offsets of the committed batch (`offsets/<next_batch_id - 1>`); its metadata
        /// carries the pinned conf.
        start_offsets: OffsetSeq,
        /// The watermark the next batch runs with (`nextBatchWatermarkMs` of the commit).
        watermark_ms: i64,
    },
    /// The latest planned batch was not committed: re-run it with exactly the logged offsets
    /// (and the logged batch timestamp), without writing `offsets/<batch_id>` again.
    Replay {
        /// The uncommitted batch to re-run.
        batch_id: u64,
        /// `offsets/<batch_id>`: the end offsets and metadata to re-run with.
        offsets: OffsetSeq,
        /// `offsets/<batch_id - 1>`: where the batch starts; `None` for batch 0.
        start_offsets: Option<OffsetSeq>,
        /// The watermark the batch was planned with (`batchWatermarkMs`).
        watermark_ms: i64,
    },
}

/// Decides how to resume from the newest offsets entry, the one before it, and the newest commit.
///
/// | offsets      | commit     | plan |
/// |--------------|------------|------|
/// | none         | none       | `Fresh` |
/// | none         | some       | error (commit without a planned batch) |
/// | N            | N          | `ResumeAfter(N+1)`, watermark = max(commit's, batch's) |
/// | N            | N-1        | `Replay(N)` from offsets N-1 (error if they were purged) |
/// | 0            | none       | `Replay(0)` |
/// | N > 0        | none / < N-1 | error `CHECKPOINT_INCONSISTENT` |
/// | N            | > N        | error `CHECKPOINT_INCONSISTENT` |
///
/// Spark only warns when the commit log trails by more than one batch and then replays N;
/// Sluice refuses, because the batches in between were planned but never committed and
/// replaying only the last one would silently skip the others' sink writes.
pub fn plan_recovery(
    latest_offsets: Option<(u64, OffsetSeq)>,
    previous_offsets: Option<OffsetSeq>,
    latest_commit: Option<(u64, CommitMetadata)>,
) -> Result<RecoveryPlan> {
    let Some((n, offsets)) = latest_offsets else {
        return match latest_commit {
            None => Ok(RecoveryPlan::Fresh),
            Some((c, _)) => Err(inconsistent(format!(
                "commits/{c} exists but offsets/ holds no batch"
            ))),
        };
    };
    match latest_commit {
        Some((c, commit)) if c == n => Ok(RecoveryPlan::ResumeAfter {
            next_batch_id: n + 1,
            watermark_ms: commit
                .next_batch_watermark_ms
                .max(offsets.metadata.batch_watermark_ms),
            start_offsets: offsets,
        }),
        Some((c, _)) if c > n => Err(inconsistent(format!(
            "the newest commit is commits/{c} but the newest planned batch is offsets/{n}: a \
             batch cannot be committed before it is planned"
        ))),
        Some((c, _)) if c + 1 == n => replay(n, offsets, previous_offsets),
        None if n == 0 => replay(0, offsets, None),
        Some((c, _)) => Err(inconsistent(format!(
            "the newest planned batch is offsets/{n} but the newest commit is commits/{c}: \
             batches {} to {n} were planned and never committed",
            c + 1
        ))),
        None => Err(inconsistent(format!(
            "the newest planned batch is offsets/{n} but commits/ holds no batch (expected \
             commits/{})",
            n - 1
        ))),
    }
}

fn replay(n: u64, offsets: OffsetSeq, previous: Option<OffsetSeq>) -> Result<RecoveryPlan> {
    let start_offsets = if n == 0 {
        None
    } else {
        Some(previous.ok_or_else(|| {
            inconsistent(format!(
                "batch {n} must be re-run (offsets/{n} exists, commits/{n} does not) but \
                 offsets/{}, where it starts, is missing (purged?)",
                n - 1
            ))
        })?)
    };
    Ok(RecoveryPlan::Replay {
        batch_id: n,
        watermark_ms: offsets.metadata.batch_watermark_ms,
        offsets,
        start_offsets,
    })
}

fn inconsistent(detail: String) -> SluiceError {
    SluiceError::checkpoint(
        class::CHECKPOINT_INCONSISTENT,
        format!(
            "the checkpoint's logs disagree: {detail}. Restore the missing files or start with \
             a new checkpoint location"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::OffsetSeqMetadata;

    fn off(n: i64, wm: i64) -> OffsetSeq {
        OffsetSeq::new(
            OffsetSeqMetadata {
                batch_watermark_ms: wm,
                batch_timestamp_ms: 1000 + n,
                conf: Default::default(),
            },
            vec![Some(serde_json::json!({ "logOffset": n }))],
        )
    }
    fn cm(wm: i64) -> CommitMetadata {
        CommitMetadata::new(wm)
    }

    #[test]
    fn recovery_table() {
        use RecoveryPlan::*;
        type Case = (
            &'static str,
            Option<(u64, OffsetSeq)>,
            Option<OffsetSeq>,
            Option<(u64, CommitMetadata)>,
            std::result::Result<RecoveryPlan, &'static str>,
        );
        let cases: Vec<Case> = vec![
            ("new query", None, None, None, Ok(Fresh)),
            (
                "commit without offsets",
                None,
                None,
                Some((0, cm(0))),
                Err("commits/0"),
            ),
            (
                "batch 0 planned, not committed",
                Some((0, off(0, 0))),
                None,
                None,
                Ok(Replay {
                    batch_id: 0,
                    offsets: off(0, 0),
                    start_offsets: None,
                    watermark_ms: 0,
                }),
            ),
            (
                "batch 0 committed",
                Some((0, off(0, 0))),
                None,
                Some((0, cm(500))),
                Ok(ResumeAfter {
                    next_batch_id: 1,
                    start_offsets: off(0, 0),
                    watermark_ms: 500,
                }),
            ),
            (
                "batch 5 committed",
                Some((5, off(5, 100))),
                Some(off(4, 50)),
                Some((5, cm(200))),
                Ok(ResumeAfter {
                    next_batch_id: 6,
                    start_offsets: off(5, 100),
                    watermark_ms: 200,
                }),
            ),
            (
                "watermark never goes back on resume",
                Some((5, off(5, 300))),
                Some(off(4, 50)),
                Some((5, cm(200))),
                Ok(ResumeAfter {
                    next_batch_id: 6,
                    start_offsets: off(5, 300),
                    watermark_ms: 300,
                }),
            ),
            (
                "batch 5 planned, 4 committed",
                Some((5, off(5, 100))),
                Some(off(4, 50)),
                Some((4, cm(100))),
                Ok(Replay {
                    batch_id: 5,
                    offsets: off(5, 100),
                    start_offsets: Some(off(4, 50)),
                    watermark_ms: 100,
                }),
            ),
            (
                "replay with purged previous offsets",
                Some((5, off(5, 0))),
                None,
                Some((4, cm(0))),
                Err("offsets/4"),
            ),
            (
                "commit two behind",
                Some((5, off(5, 0))),
                Some(off(4, 0)),
                Some((3, cm(0))),
                Err("commits/3"),
            ),
            (
                "no commit at all for batch 5",
                Some((5, off(5, 0))),
                Some(off(4, 0)),
                None,
                Err("offsets/5"),
            ),
            (
                "commit ahead of offsets",
                Some((5, off(5, 0))),
                Some(off(4, 0)),
                Some((7, cm(0))),
                Err("commits/7"),
            ),
        ];
        for (name, latest, prev, commit, expected) in cases {
            let got = plan_recovery(latest, prev, commit);
            match (got, expected) {
                (Ok(g), Ok(e)) => assert_eq!(g, e, "{name}"),
                (Err(g), Err(needle)) => {
                    assert_eq!(g.class(), "CHECKPOINT_INCONSISTENT", "{name}");
                    assert_eq!(g.fault(), crate::Fault::Checkpoint, "{name}");
                    assert!(g.message().contains(needle), "{name}: {}", g.message());
                }
                (g, e) => panic!("{name}: got {g:?}, expected {e:?}"),
            }
        }
    }
}
