//! Which of an output folder's manifest entries a query wrote.
//!
//! Spark's file sink skips every batch id at or below the manifest's newest entry, whoever wrote
//! it: a new checkpoint on an existing output folder, or a second query on it, writes nothing,
//! silently. Sluice keeps in the checkpoint (`sluice/file-sink.json`) the folder it writes, the
//! format, and `manifestBatchOffset`: the manifest id of this query's batch `N` is `N + offset`
//! (0, unless the query was told to write after batches already in the folder). At start it
//! checks that the manifest holds nothing this query could not have written: its newest entry is
//! at most the newest planned batch (`offsets/N`) plus the offset. A batch is then skipped only
//! when its own manifest entry exists, which this query wrote before a crash.
//!
//! A folder with entries and no record in the checkpoint is foreign (another query's, or a
//! checkpoint that was replaced), unless the checkpoint planned every entry (a checkpoint Spark
//! or an earlier Sluice wrote with this folder: adopted with offset 0). A foreign or newer
//! manifest is refused (`FILE_SINK_FOREIGN_OUTPUT`, `FILE_SINK_MANIFEST_AHEAD`) unless the
//! sink's option `appendToExistingOutput=true` says to write this query's batches after it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{CheckpointDir, CompactibleLog};
use crate::error::{class, Fault, Result, SluiceError};
use crate::sink::file::SinkFileStatus;
use crate::sink::SinkContext;

/// The sink option that lets a query write after a folder's existing batches.
pub(crate) const APPEND_TO_EXISTING: &str = "appendToExistingOutput";

/// `<checkpoint>/sluice/file-sink.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SinkRecord {
    version: u32,
    /// The output folder, as the sink resolved it.
    path: String,
    /// `parquet`, `json` or `csv`.
    format: String,
    /// The manifest id of this query's batch 0.
    manifest_batch_offset: u64,
}

/// The offset between the query's batch ids and the manifest's, checked and recorded.
pub(crate) fn manifest_offset(
    ctx: &SinkContext,
    path: &Path,
    format: &str,
    log: &CompactibleLog<SinkFileStatus>,
    append_to_existing: bool,
) -> Result<u64> {
    let file = CheckpointDir::new(&ctx.checkpoint_dir).file_sink_file();
    let newest = log.latest_batch_id()?;
    // The first batch this run plans: after the newest planned one, whose manifest entry may
    // exist (a crash after the sink wrote it, before `commits/N`): it is re-run, not planned.
    let next = ctx.last_planned.map_or(0, |p| p + 1);
    let written = |offset: u64| -> Result<u64> {
        let record = SinkRecord {
            version: 1,
            path: path.display().to_string(),
            format: format.to_string(),
            manifest_batch_offset: offset,
        };
        let text = serde_json::to_string_pretty(&record)
            .map_err(|e| SluiceError::internal(format!("file sink record: {e}")))?;
        let io = |e| SluiceError::io(Fault::Checkpoint, file.display(), e);
        if let Some(dir) = file.parent() {
            crate::storage::create_dir_all(dir).map_err(io)?;
        }
        crate::storage::write(&file, text.as_bytes()).map_err(io)?;
        Ok(offset)
    };
    let folder = path.display();
    let option = format!(".option(\"{APPEND_TO_EXISTING}\", \"true\")");
    let Some(record) = read(&file)? else {
        return match newest {
            None => written(0),
            // Every entry planned by this checkpoint: Spark's (or an earlier Sluice's) query.
            Some(l) if ctx.last_planned.is_some_and(|p| l <= p) => written(0),
            Some(l) if append_to_existing => {
                log::warn!(
                    "the file sink writes after the {} batches already in {folder} ({option}): \
                     this query's batch {next} is manifest entry {}",
                    l + 1,
                    l + 1
                );
                written(l + 1 - next)
            }
            Some(l) => Err(SluiceError::connector(
                class::FILE_SINK_FOREIGN_OUTPUT,
                format!(
                    "the output folder {folder} already holds batches 0..={l} of another query \
                     (its manifest {}), and this checkpoint ({}) did not write them. Spark would \
                     skip this query's first {} batches without writing a row. Write to a new \
                     folder, or add {option} to write this query's batches after them",
                    log.dir().display(),
                    ctx.checkpoint_dir.display(),
                    l + 1
                ),
            )),
        };
    };
    if record.format != format {
        return Err(SluiceError::query(
            class::FILE_SINK_FORMAT_CHANGED,
            format!(
                "this query wrote {} files to {folder} (recorded in {}), and is now asked for \
                 {format}: a folder of mixed formats cannot be read back. Keep format(\"{}\"), \
                 or write {format} to a new folder with a new checkpointLocation",
                record.format,
                file.display(),
                record.format
            ),
        ));
    }
    let offset = record.manifest_batch_offset;
    match newest {
        Some(l) if l + 1 > offset + next => {
            if append_to_existing {
                log::warn!(
                    "the manifest of {folder} ends at batch {l}, after this query's newest \
                     ({}); writing after it ({option})",
                    (offset + next).saturating_sub(1)
                );
                return written(l + 1 - next);
            }
            Err(SluiceError::connector(
                class::FILE_SINK_MANIFEST_AHEAD,
                format!(
                    "the manifest of {folder} ends at batch {l}, but this query's checkpoint \
                     ({}) {}: the checkpoint's logs were deleted or \
                     restored from an older copy, or another query writes to this folder. \
                     Spark would skip this query's next batches without writing a row. Write to \
                     a new folder, or add {option} to write this query's batches after them",
                    ctx.checkpoint_dir.display(),
                    match ctx.last_planned {
                        Some(p) => format!(
                            "planned batches up to {p} only (manifest entry {})",
                            offset + p
                        ),
                        None => "has planned no batch (no offsets/ files)".to_string(),
                    },
                ),
            ))
        }
        _ => Ok(offset),
    }
}

fn read(file: &Path) -> Result<Option<SinkRecord>> {
    if !crate::storage::is_file(file) {
        return Ok(None);
    }
    let text = crate::storage::read_to_string(file)
        .map_err(|e| SluiceError::io(Fault::Checkpoint, file.display(), e))?;
    serde_json::from_str(&text).map(Some).map_err(|e| {
        SluiceError::checkpoint(
            class::CHECKPOINT_CORRUPT_LOG,
            format!(
                "{} cannot be read ({e}): it records which file sink batches this query wrote. \
                 Restore it from a backup, or start with a new checkpointLocation and a new \
                 output folder",
                file.display()
            ),
        )
    })
}
