//! `<checkpoint>/sluice/lease/<generation>`: one running query per checkpoint on an object
//! store, where there is no OS lock to take.
//!
//! The lease is a sequence of objects, each created with a conditional create
//! ([`storage::create_new`]), so of two queries taking generation `G + 1` exactly one wins. The
//! holder rewrites its generation's object every `timeout / 4` (a heartbeat: the object's
//! modification time) and, on a clean stop, marks it released. A query may take generation
//! `G + 1` when `G` is released, when its heartbeat is older than the timeout, or when its holder
//! was a process on this machine that is gone (a SIGKILL: no need to wait for the timeout). A
//! holder whose generation was overtaken (it stalled past the timeout and another query took
//! over) sees `G + 1` at its next heartbeat and stops before its next batch. The conditional
//! creates of `offsets/N` and `commits/N` stay the last line: whatever the clocks say, two
//! writers never both log one batch.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{class, Fault, Result, SluiceError};
use crate::storage;

/// The lease timeout (`sluice.storage.checkpointLeaseTimeoutMs`, 60 s): how long after its
/// last heartbeat a holder on another machine counts as gone.
pub(crate) const LEASE_TIMEOUT_KEY: &str = "sluice.storage.checkpointLeaseTimeoutMs";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct LeaseRecord {
    owner: String,
    host: String,
    pid: u32,
    /// The holder process's start time (Linux clock ticks since boot), so a reused pid is not
    /// taken for the holder.
    #[serde(default)]
    process_start: Option<u64>,
    heartbeat_ms: i64,
    #[serde(default)]
    released: bool,
}

/// A held lease; released when dropped.
#[derive(Debug)]
pub(crate) struct Lease {
    file: PathBuf,
    record: LeaseRecord,
    stop: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the command name's closing parenthesis.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn io_err(what: String, e: std::io::Error) -> SluiceError {
    SluiceError::io(Fault::Checkpoint, what, e)
}

impl Lease {
    /// Takes the lease of the checkpoint at `root`, or refuses with `CONCURRENT_QUERY`.
    pub(crate) fn acquire(root: &Path, timeout: Option<Duration>) -> Result<Lease> {
        let timeout = timeout
            .unwrap_or(DEFAULT_TIMEOUT)
            .max(Duration::from_millis(400));
        let dir = root.join("sluice").join("lease");
        let generations = match storage::list_dir(&dir) {
            Ok(entries) => entries
                .into_iter()
                .filter_map(|e| e.name.parse::<u64>().ok())
                .collect::<Vec<_>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(format!("listing {}", dir.display()), e)),
        };
        let current = generations.iter().max().copied();
        let next = match current {
            None => 1,
            Some(g) => {
                let file = dir.join(g.to_string());
                let meta = storage::metadata(&file)
                    .map_err(|e| io_err(format!("reading {}", file.display()), e))?;
                let bytes = storage::read(&file)
                    .map_err(|e| io_err(format!("reading {}", file.display()), e))?;
                let held: Option<LeaseRecord> = serde_json::from_slice(&bytes).ok();
                if let Some(held) = held.filter(|h| !h.released) {
                    let age = now_ms().saturating_sub(meta.modified_ms.max(held.heartbeat_ms));
                    // A holder on this machine whose process is gone (or whose pid now names
                    // another process) holds nothing; where /proc cannot tell, the timeout does.
                    let can_tell = process_start(std::process::id()).is_some();
                    let gone_here = can_tell
                        && held.host == storage::host_name()
                        && match (held.process_start, process_start(held.pid)) {
                            (_, None) => true,
                            (Some(was), Some(now)) => was != now,
                            (None, Some(_)) => false,
                        };
                    let expired = age > timeout.as_millis() as i64;
                    if !gone_here && !expired {
                        return Err(concurrent_query(root, &file, &held, timeout));
                    }
                }
                g + 1
            }
        };
        let record = LeaseRecord {
            owner: uuid::Uuid::new_v4().to_string(),
            host: storage::host_name(),
            pid: std::process::id(),
            process_start: process_start(std::process::id()),
            heartbeat_ms: now_ms(),
            released: false,
        };
        let file = dir.join(next.to_string());
        let bytes =
            serde_json::to_vec(&record).map_err(|e| SluiceError::internal(e.to_string()))?;
        if !storage::create_new(&file, &bytes)
            .map_err(|e| io_err(format!("writing {}", file.display()), e))?
        {
            let theirs = storage::read(&file)
                .ok()
                .and_then(|b| serde_json::from_slice::<LeaseRecord>(&b).ok());
            return Err(match theirs {
                Some(t) => concurrent_query(root, &file, &t, timeout),
                None => SluiceError::checkpoint(
                    class::CONCURRENT_QUERY,
                    format!(
                        "another query took the checkpoint {} at the same moment ({}). Stop \
                         that query first, or give this query another checkpointLocation",
                        root.display(),
                        file.display()
                    ),
                ),
            });
        }
        // Older generations are history now.
        for g in generations.iter().filter(|g| **g + 1 < next) {
            let _ = storage::remove_file(dir.join(g.to_string()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicBool::new(false));
        let heartbeat = {
            let (stop, lost, record) = (stop.clone(), lost.clone(), record.clone());
            let (file, successor) = (file.clone(), dir.join((next + 1).to_string()));
            std::thread::Builder::new()
                .name("sluice-lease".to_string())
                .spawn(move || heartbeat(&file, &successor, record, timeout / 4, &stop, &lost))
                .map_err(|e| SluiceError::internal(format!("starting the lease thread: {e}")))?
        };
        Ok(Lease {
            file,
            record,
            stop,
            lost,
            heartbeat: Some(heartbeat),
        })
    }

    /// The lease object.
    pub(crate) fn path(&self) -> &Path {
        &self.file
    }

    /// Fails with `CONCURRENT_QUERY` when another query took the lease over.
    pub(crate) fn check(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(SluiceError::checkpoint(
                class::CONCURRENT_QUERY,
                format!(
                    "another query took over the checkpoint lease {} (this query's heartbeats \
                     stopped for longer than {LEASE_TIMEOUT_KEY}); this query stops so that \
                     only one writes the checkpoint. Restart it once the other one is stopped",
                    self.file.display()
                ),
            ));
        }
        Ok(())
    }
}

fn heartbeat(
    file: &Path,
    successor: &Path,
    mut record: LeaseRecord,
    every: Duration,
    stop: &AtomicBool,
    lost: &AtomicBool,
) {
    let mut last = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50).min(every));
        if last.elapsed() < every {
            continue;
        }
        last = Instant::now();
        if storage::exists(successor) {
            lost.store(true, Ordering::SeqCst);
            log::error!("the checkpoint lease {} was taken over", file.display());
            return;
        }
        record.heartbeat_ms = now_ms();
        if let Ok(bytes) = serde_json::to_vec(&record) {
            if let Err(e) = storage::write(file, bytes) {
                log::warn!("cannot renew the checkpoint lease {}: {e}", file.display());
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
        if !self.lost.load(Ordering::SeqCst) {
            self.record.released = true;
            self.record.heartbeat_ms = now_ms();
            if let Ok(bytes) = serde_json::to_vec(&self.record) {
                let _ = storage::write(&self.file, bytes);
            }
        }
    }
}

fn concurrent_query(
    root: &Path,
    file: &Path,
    held: &LeaseRecord,
    timeout: Duration,
) -> SluiceError {
    SluiceError::checkpoint(
        class::CONCURRENT_QUERY,
        format!(
            "another query is already running on the checkpoint {} (lease {}, held by pid {} on \
             {}). Stop that query first, or give this query another checkpointLocation. If \
             that query is gone with its machine, the lease is free {} s after its last \
             heartbeat ({LEASE_TIMEOUT_KEY})",
            root.display(),
            file.display(),
            held.pid,
            held.host,
            timeout.as_secs()
        ),
    )
}
