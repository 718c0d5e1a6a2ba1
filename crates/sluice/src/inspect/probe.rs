//! Probing a checkpoint without the query: is it one, which stateful operators and
//! partitions it has, their recorded schemas, and which committed batches' state is on disk.

use std::collections::BTreeSet;
use std::path::Path;

use super::ranges::{to_ranges, IdRange};
use crate::checkpoint::CheckpointDir;
use crate::error::class;
use crate::error::{Result, SluiceError};
use crate::state::files::FileIndex;
use crate::state::schema::StateSchema;
use crate::state::StateStoreId;
use crate::types::OperatorId;

/// Checks that `dir` looks like a query checkpoint: it exists and holds `metadata`,
/// `offsets/` or `commits/`.
pub(crate) fn check_is_checkpoint(dir: &Path) -> Result<()> {
    if !crate::storage::is_dir(dir) {
        return Err(SluiceError::checkpoint(
            class::CHECKPOINT_NOT_FOUND,
            format!(
                "{} is not a directory{}: pass the checkpointLocation of a query (the directory \
                 that holds metadata, offsets/ and commits/)",
                dir.display(),
                if crate::storage::exists(dir) {
                    ""
                } else {
                    " (it does not exist)"
                }
            ),
        ));
    }
    let d = CheckpointDir::new(dir);
    if !crate::storage::is_file(d.metadata_file())
        && !crate::storage::is_dir(d.offsets_dir())
        && !crate::storage::is_dir(d.commits_dir())
    {
        return Err(SluiceError::checkpoint(
            class::CHECKPOINT_NOT_FOUND,
            format!(
                "{} is not a query checkpoint: it has no metadata file and no offsets/ or \
                 commits/ log. Pass the checkpointLocation of a query (the directory that holds \
                 metadata, offsets/ and commits/)",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// The decimal-named subdirectories of `dir`, ascending (a missing directory has none).
fn numeric_subdirs(dir: &Path) -> Result<Vec<u32>> {
    let entries = match crate::storage::list_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(crate::state::files::io_err(
                format!("listing {}", dir.display()),
                e,
            ))
        }
    };
    let mut ids = Vec::new();
    for entry in entries {
        let name = entry.name.as_str();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if !entry.is_dir {
            continue;
        }
        if let Ok(id) = name.parse::<u32>() {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// The stateful operator ids with a directory under `<checkpoint>/state/`, ascending.
pub(crate) fn list_operators(checkpoint: &Path) -> Result<Vec<u32>> {
    numeric_subdirs(&CheckpointDir::new(checkpoint).state_dir())
}

/// The partitions of an operator: the decimal subdirectories of `state/<op>/`, ascending.
pub(crate) fn list_partitions(checkpoint: &Path, operator_id: u32) -> Result<Vec<u32>> {
    numeric_subdirs(&CheckpointDir::new(checkpoint).state_operator_dir(OperatorId(operator_id)))
}

/// Reads `state/<op>/_metadata/schema`; `None` when the file does not exist.
pub(crate) fn read_state_schema(
    checkpoint: &Path,
    operator_id: u32,
) -> Result<Option<StateSchema>> {
    let file = CheckpointDir::new(checkpoint).state_schema_file(OperatorId(operator_id));
    match crate::storage::read(&file) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            SluiceError::checkpoint(
                class::CHECKPOINT_CORRUPT_LOG,
                format!(
                    "{} is not a Sluice state schema ({e}); restore it, or start the query with a \
                     new checkpoint location",
                    file.display()
                ),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(crate::state::files::io_err(
            format!("reading {}", file.display()),
            e,
        )),
    }
}

/// The operator's name in a recorded schema: `0 (stateStoreSave)` -> `stateStoreSave`,
/// `1 (symmetricHashJoin Inner)` -> `symmetricHashJoin Inner`.
pub(crate) fn operator_name(schema: &StateSchema) -> &str {
    let s = schema.operator.as_str();
    match (s.find('('), s.rfind(')')) {
        (Some(open), Some(close)) if open < close => &s[open + 1..close],
        _ => s,
    }
}

/// The committed batches whose state (version `batch + 1`) can be loaded in every partition of
/// the operator, up to `last_committed`.
pub(crate) fn readable_batches(
    checkpoint: &Path,
    operator_id: u32,
    last_committed: Option<u64>,
) -> Result<Vec<IdRange>> {
    let Some(last) = last_committed else {
        return Ok(Vec::new());
    };
    let partitions = list_partitions(checkpoint, operator_id)?;
    if partitions.is_empty() {
        return Ok(Vec::new());
    }
    let mut common: Option<BTreeSet<u64>> = None;
    for p in partitions {
        let dir = StateStoreId::new(checkpoint, operator_id, p).dir();
        let versions: BTreeSet<u64> = FileIndex::list(&dir)?.loadable().into_iter().collect();
        common = Some(match common {
            None => versions,
            Some(c) => c.intersection(&versions).copied().collect(),
        });
    }
    Ok(to_ranges(
        common
            .unwrap_or_default()
            .into_iter()
            .map(|v| v - 1)
            .filter(|b| *b <= last),
    ))
}
