//! Streaming configuration, typed: every conf key the engine reads is named here once, with its
//! default, and parsed once per query into a [`StreamingConf`] (as DataFusion's
//! `config_namespace!` does for its options). The subset Spark pins into a checkpoint's
//! `offsets/N` (`OffsetSeqMetadata.conf`) is [`PinnedConf`]: it comes back from the log on a
//! restart and overrides the session.
//!
//! Keys keep Spark's names (`spark.sql.streaming.minBatchesToRetain`, ...); Sluice-only keys start
//! with `sluice.`. Test hooks (`sluice.testing.*`) are not read here: they live in
//! [`crate::testing`] behind the `testing` feature, and the production loop never reads them.

use std::collections::{BTreeMap, HashMap};

use crate::error::{class, Result, SluiceError};

/// `spark.sql.shuffle.partitions`: the number of state partitions, pinned at a query's first run.
pub const SHUFFLE_PARTITIONS: &str = "spark.sql.shuffle.partitions";
/// `spark.sql.streaming.minBatchesToRetain`: batches of `offsets/`, `commits/` and state kept.
pub const MIN_BATCHES_TO_RETAIN: &str = "spark.sql.streaming.minBatchesToRetain";
/// `spark.sql.streaming.multipleWatermarkPolicy`: `min` (default) or `max`; pinned.
pub const WATERMARK_POLICY: &str = "spark.sql.streaming.multipleWatermarkPolicy";
/// `spark.sql.streaming.stateStore.minDeltasForSnapshot`: deltas between two state snapshots.
pub const MIN_DELTAS_FOR_SNAPSHOT: &str = "spark.sql.streaming.stateStore.minDeltasForSnapshot";
/// `spark.sql.streaming.statefulOperator.checkCorrectness.enabled`: Spark 3.4's check of chained
/// stateful operators (on by default).
pub const CHECK_CORRECTNESS: &str = "spark.sql.streaming.statefulOperator.checkCorrectness.enabled";
/// `spark.sql.streaming.checkpointLocation`: the root under which named queries keep their
/// checkpoint when the writer gives none.
pub const CHECKPOINT_LOCATION: &str = "spark.sql.streaming.checkpointLocation";
/// `spark.sql.streaming.stateStore.providerClass`: where state stores hold their committed
/// version; pinned at a query's first run, as Spark pins it.
pub const STATE_STORE_PROVIDER_CLASS: &str = "spark.sql.streaming.stateStore.providerClass";
/// Spark's default provider class: state in memory ([`StateStoreKind::InMemory`]).
pub const HDFS_PROVIDER_CLASS: &str =
    "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider";
/// Spark's RocksDB provider class: state in a local on-disk cache ([`StateStoreKind::OnDisk`]).
pub const ROCKSDB_PROVIDER_CLASS: &str =
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider";
/// `spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage`: the on-disk provider's cache
/// and write buffers together stay within [`ROCKSDB_MAX_MEMORY_MB`].
pub const ROCKSDB_BOUNDED_MEMORY: &str =
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage";
/// `spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB` (Spark's default 500).
pub const ROCKSDB_MAX_MEMORY_MB: &str = "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB";
/// `spark.sql.streaming.stateStore.rocksdb.writeBufferCacheRatio`: the write buffers' share of
/// the bounded memory (Spark's default 0.5).
pub const ROCKSDB_WRITE_BUFFER_RATIO: &str =
    "spark.sql.streaming.stateStore.rocksdb.writeBufferCacheRatio";
/// `sluice.streaming.stateSchema.allowKeyRename`: accept a restart whose state key fields were
/// renamed (same types), which Spark refuses.
pub const ALLOW_KEY_RENAME: &str = "sluice.streaming.stateSchema.allowKeyRename";

/// `spark.sql.ansi.enabled`: Spark's ANSI mode (off by default, as in Spark 3.5): a cast, an
/// overflow or a division by zero fails the query with Spark's error class instead of giving
/// null (`plan::ansi`). Read when a query is analysed.
pub const ANSI_ENABLED: &str = "spark.sql.ansi.enabled";
/// `spark.sql.parser.escapedStringLiterals`: when true, SQL string literals keep backslashes as
/// written (Spark 1.6's behaviour); false (the default) applies Spark's escapes (`'\t'` is a tab,
/// `plan::sql_syntax`). Read when a query is parsed.
pub const ESCAPED_STRING_LITERALS: &str = "spark.sql.parser.escapedStringLiterals";

/// `spark.sql.streaming.fileSink.log.deletion`: whether the file sink's manifest
/// (`_spark_metadata/`) deletes the files a compaction superseded (default true).
pub const FILE_SINK_LOG_DELETION: &str = "spark.sql.streaming.fileSink.log.deletion";
/// `spark.sql.streaming.fileSink.log.cleanupDelay`: how old a superseded manifest file must be
/// before it is deleted (default 10 minutes; Spark's time strings: `600s`, `10m`, ms if bare).
pub const FILE_SINK_LOG_CLEANUP_DELAY: &str = "spark.sql.streaming.fileSink.log.cleanupDelay";
/// `spark.sql.streaming.fileSource.log.deletion`: the same for the file source's `sources/<i>/`.
pub const FILE_SOURCE_LOG_DELETION: &str = "spark.sql.streaming.fileSource.log.deletion";
/// `spark.sql.streaming.fileSource.log.cleanupDelay`: the same for the file source's log.
pub const FILE_SOURCE_LOG_CLEANUP_DELAY: &str = "spark.sql.streaming.fileSource.log.cleanupDelay";

/// `sluice.memory.limit`: the memory one query's batches may use (bytes, or Spark's byte strings
/// `512k`, `256m`, `2g`): a batch's input is read in pieces of this budget, output files are
/// written as they fill, and DataFusion's operators that buffer (sorts, aggregations, join build
/// sides) spill to disk past their share. Sluice only; Spark bounds a task by its executor's
/// memory instead.
pub const MEMORY_LIMIT: &str = "sluice.memory.limit";
/// Sluice only: the workers (`host:port,...`, each a `sluice worker`) a query runs each batch's
/// plan on, the process that runs the query keeping the loop (Spark's driver). Unset: the
/// batch runs in this process.
pub const DISTRIBUTED_WORKERS: &str = "sluice.distributed.workers";
/// [`MEMORY_LIMIT`]'s default: 256 MiB.
pub const DEFAULT_MEMORY_LIMIT: u64 = 256 << 20;
/// Spark's default of [`MIN_BATCHES_TO_RETAIN`].
pub const DEFAULT_MIN_BATCHES_TO_RETAIN: u64 = 100;
/// Spark's default of [`MIN_DELTAS_FOR_SNAPSHOT`].
pub const DEFAULT_MIN_DELTAS_FOR_SNAPSHOT: u64 = 10;

/// How several watermarks combine into the query's one (Spark's `MultipleWatermarkPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatermarkPolicy {
    /// The slowest stream decides (Spark's default, safe).
    #[default]
    Min,
    /// The fastest stream decides; slower streams' rows may be dropped as late.
    Max,
}

impl WatermarkPolicy {
    /// Parses Spark's value (`min`/`max`, any case).
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "min" => Ok(Self::Min),
            "max" => Ok(Self::Max),
            other => Err(SluiceError::query(
                class::INVALID_CONF_VALUE,
                format!("{WATERMARK_POLICY} must be min or max, got {other:?}"),
            )),
        }
    }
    /// Spark's value, as written into `offsets/N`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Min => "min",
            Self::Max => "max",
        }
    }
}

/// The conf a query runs with, read from the session once when it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamingConf {
    /// The session's [`SHUFFLE_PARTITIONS`]; the checkpoint's pinned value wins on a restart.
    pub shuffle_partitions: usize,
    /// [`MIN_BATCHES_TO_RETAIN`], at least 1.
    pub min_batches_to_retain: u64,
    /// [`MIN_DELTAS_FOR_SNAPSHOT`].
    pub min_deltas_for_snapshot: u64,
    /// [`WATERMARK_POLICY`] as the session sets it (`None` when unset); pinned at the first run.
    pub watermark_policy: Option<WatermarkPolicy>,
    /// [`CHECK_CORRECTNESS`].
    pub check_correctness: bool,
    /// [`ALLOW_KEY_RENAME`].
    pub allow_key_rename: bool,
    /// [`STATE_STORE_PROVIDER_CLASS`] as the session sets it (`None` when unset); pinned at the
    /// first run.
    pub state_store: Option<StateStoreKind>,
    /// The on-disk provider's memory ([`ROCKSDB_BOUNDED_MEMORY`] and its companions).
    pub local_cache: LocalCacheMemory,
    /// [`CHECKPOINT_LOCATION`].
    pub checkpoint_location: Option<String>,
    /// [`ANSI_ENABLED`].
    pub ansi_enabled: bool,
    /// The file sink manifest's cleanup ([`FILE_SINK_LOG_DELETION`],
    /// [`FILE_SINK_LOG_CLEANUP_DELAY`], [`MIN_BATCHES_TO_RETAIN`]).
    pub file_sink_log: LogCleanup,
    /// The file source log's cleanup ([`FILE_SOURCE_LOG_DELETION`],
    /// [`FILE_SOURCE_LOG_CLEANUP_DELAY`], [`MIN_BATCHES_TO_RETAIN`]).
    pub file_source_log: LogCleanup,
    /// [`MEMORY_LIMIT`].
    pub memory: MemoryBudget,
    /// [`DISTRIBUTED_WORKERS`]: the workers' `host:port`s, none to run on this process alone.
    pub distributed_workers: Vec<String>,
}

/// How a query's memory budget ([`MEMORY_LIMIT`]) is shared: the pieces a file source reads at
/// once, what a file sink buffers before it writes, and DataFusion's memory pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    /// The whole budget, in bytes.
    pub limit: u64,
}

impl Default for MemoryBudget {
    fn default() -> Self {
        Self {
            limit: DEFAULT_MEMORY_LIMIT,
        }
    }
}

impl MemoryBudget {
    /// The file text one reading partition holds at once (the rows decoded from it, and their
    /// way through the plan, take a few times as much): a 32nd of the budget over
    /// `partitions`, within 64 KiB..64 MiB.
    pub fn read_chunk_bytes(&self, partitions: usize) -> usize {
        let per = self.limit / 32 / partitions.max(1) as u64;
        per.clamp(64 << 10, 64 << 20) as usize
    }

    /// The rows one writing partition buffers before it writes them out (a parquet row group):
    /// a sixteenth of the budget over `partitions`, within 1..128 MiB.
    pub fn write_buffer_bytes(&self, partitions: usize) -> usize {
        let per = self.limit / 16 / partitions.max(1) as u64;
        per.clamp(1 << 20, 128 << 20) as usize
    }

    /// The input rows a stateful operator takes at once (Arrow memory; the operator's work on
    /// them takes a few times as much, its state is apart): a sixteenth of the budget, within
    /// 1..256 MiB. A batch with more input is handed to the operator chunk by chunk.
    pub fn stateful_chunk_bytes(&self) -> usize {
        (self.limit / 16).clamp(1 << 20, 256 << 20) as usize
    }

    /// DataFusion's memory pool: half the budget. Operators that buffer spill to disk when
    /// their share is used up; those that cannot fail with `MEMORY_LIMIT_EXCEEDED`.
    pub fn pool_bytes(&self) -> usize {
        (self.limit / 2) as usize
    }

    /// Reads [`MEMORY_LIMIT`] through `get`.
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        match get(MEMORY_LIMIT) {
            None => Ok(Self::default()),
            Some(v) => match parse_byte_string(&v) {
                Some(limit) if limit >= 16 << 20 => Ok(Self { limit }),
                _ => Err(SluiceError::query(
                    class::INVALID_CONF_VALUE,
                    format!(
                        "{MEMORY_LIMIT} must be a size of at least 16m, such as 256m or 2g \
                         (bytes with an optional k, m, g or t suffix), got {v:?}"
                    ),
                )),
            },
        }
    }
}

/// Spark's byte strings (`JavaUtils.byteStringAsBytes`): a number of bytes with an optional
/// suffix `b`, `k`/`kb`, `m`/`mb`, `g`/`gb`, `t`/`tb`, `p`/`pb` (powers of 1024).
pub fn parse_byte_string(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_lowercase();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(digits);
    let n: u64 = num.parse().ok()?;
    let shift = match unit.trim() {
        "" | "b" => 0,
        "k" | "kb" => 10,
        "m" | "mb" => 20,
        "g" | "gb" => 30,
        "t" | "tb" => 40,
        "p" | "pb" => 50,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

impl Default for StreamingConf {
    fn default() -> Self {
        Self {
            shuffle_partitions: 1,
            min_batches_to_retain: DEFAULT_MIN_BATCHES_TO_RETAIN,
            min_deltas_for_snapshot: DEFAULT_MIN_DELTAS_FOR_SNAPSHOT,
            watermark_policy: None,
            check_correctness: true,
            allow_key_rename: false,
            state_store: None,
            local_cache: LocalCacheMemory::default(),
            checkpoint_location: None,
            ansi_enabled: false,
            file_sink_log: LogCleanup::default(),
            file_source_log: LogCleanup::default(),
            memory: MemoryBudget::default(),
            distributed_workers: Vec::new(),
        }
    }
}

impl StreamingConf {
    /// Reads and checks every key through `get` (a session's conf or a pipeline file's `SET`s).
    /// A value that does not parse is an error naming the key, not a silent default.
    pub fn from_lookup(
        shuffle_partitions: usize,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let d = Self::default();
        let min_batches_to_retain = parse_num(&get, MIN_BATCHES_TO_RETAIN)?
            .unwrap_or(d.min_batches_to_retain)
            .max(1);
        let log_cleanup = |deletion: &str, delay: &str| -> Result<LogCleanup> {
            let dflt = LogCleanup::default();
            Ok(LogCleanup {
                enabled: parse_bool(&get, deletion)?.unwrap_or(dflt.enabled),
                delay_ms: parse_time_ms(&get, delay)?.unwrap_or(dflt.delay_ms),
                min_batches_to_retain,
            })
        };
        Ok(Self {
            shuffle_partitions: shuffle_partitions.max(1),
            min_batches_to_retain,
            file_sink_log: log_cleanup(FILE_SINK_LOG_DELETION, FILE_SINK_LOG_CLEANUP_DELAY)?,
            file_source_log: log_cleanup(FILE_SOURCE_LOG_DELETION, FILE_SOURCE_LOG_CLEANUP_DELAY)?,
            min_deltas_for_snapshot: parse_num(&get, MIN_DELTAS_FOR_SNAPSHOT)?
                .unwrap_or(d.min_deltas_for_snapshot),
            watermark_policy: get(WATERMARK_POLICY)
                .map(|v| WatermarkPolicy::parse(&v))
                .transpose()?,
            check_correctness: parse_bool(&get, CHECK_CORRECTNESS)?.unwrap_or(d.check_correctness),
            allow_key_rename: parse_bool(&get, ALLOW_KEY_RENAME)?.unwrap_or(d.allow_key_rename),
            state_store: get(STATE_STORE_PROVIDER_CLASS)
                .map(|v| provider_class(&v, STATE_STORE_PROVIDER_CLASS))
                .transpose()?,
            local_cache: local_cache_memory(&get)?,
            checkpoint_location: get(CHECKPOINT_LOCATION),
            ansi_enabled: parse_bool(&get, ANSI_ENABLED)?.unwrap_or(d.ansi_enabled),
            memory: MemoryBudget::from_lookup(&get)?,
            distributed_workers: match get(DISTRIBUTED_WORKERS) {
                Some(v) => parse_workers(&v)?,
                None => default_workers(),
            },
        })
    }
}

/// When a compactible log deletes the files a compaction superseded (Spark's
/// `spark.sql.streaming.fileSink.log.deletion` / `.cleanupDelay`, the same for `fileSource`, and
/// `spark.sql.streaming.minBatchesToRetain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCleanup {
    /// Whether files are deleted at all (`...log.deletion`, default true).
    pub enabled: bool,
    /// Only files older than this are deleted (`...log.cleanupDelay`, default 10 minutes), so a
    /// reader that listed the log a moment ago still finds what it listed.
    pub delay_ms: u64,
    /// The newest batches whose entries stay readable from their own files or the compaction
    /// before them (`minBatchesToRetain`, default 100).
    pub min_batches_to_retain: u64,
}

impl Default for LogCleanup {
    fn default() -> Self {
        Self {
            enabled: true,
            delay_ms: 10 * 60 * 1000,
            min_batches_to_retain: DEFAULT_MIN_BATCHES_TO_RETAIN,
        }
    }
}

/// Where a store holds its committed version (`spark.sql.streaming.stateStore.providerClass`).
/// The checkpoint files are the same either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StateStoreKind {
    /// In memory (Spark's `HDFSBackedStateStoreProvider`, Sluice's default).
    #[default]
    InMemory,
    /// In a local on-disk cache, memory bounded by its cache and write buffers (Spark's
    /// `RocksDBStateStoreProvider`).
    OnDisk,
}

/// The memory of the on-disk provider's local cache: fjall's block cache and its write buffer
/// (memtable) per store. The process's cache is sized by the first store that opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalCacheMemory {
    /// The block cache, shared by every store of the process.
    pub cache_bytes: u64,
    /// The write buffer of each store's pairs before they go to disk.
    pub write_buffer_bytes: u64,
}

impl Default for LocalCacheMemory {
    fn default() -> Self {
        Self {
            cache_bytes: 64 << 20,
            write_buffer_bytes: 64 << 20,
        }
    }
}

/// The store kind a [`STATE_STORE_PROVIDER_CLASS`] value selects (`whence` names where it was
/// read, for the error).
fn provider_class(v: &str, whence: &str) -> Result<StateStoreKind> {
    match v.trim() {
        HDFS_PROVIDER_CLASS => Ok(StateStoreKind::InMemory),
        ROCKSDB_PROVIDER_CLASS => Ok(StateStoreKind::OnDisk),
        other => Err(SluiceError::query(
            class::INVALID_CONF_VALUE,
            format!(
                "{whence} is {other:?}, a state store provider Sluice does not have; it takes \
                 Spark's {HDFS_PROVIDER_CLASS} (state in memory, the default) or \
                 {ROCKSDB_PROVIDER_CLASS} (state on local disk, memory bounded)"
            ),
        )),
    }
}

/// The on-disk provider's memory: without [`ROCKSDB_BOUNDED_MEMORY`], Sluice's defaults; with
/// it, [`ROCKSDB_MAX_MEMORY_MB`] split between write buffers ([`ROCKSDB_WRITE_BUFFER_RATIO`])
/// and the block cache, as Spark splits it.
fn local_cache_memory(get: &impl Fn(&str) -> Option<String>) -> Result<LocalCacheMemory> {
    if !parse_bool(get, ROCKSDB_BOUNDED_MEMORY)?.unwrap_or(false) {
        return Ok(LocalCacheMemory::default());
    }
    let total = parse_num(get, ROCKSDB_MAX_MEMORY_MB)?.unwrap_or(500).max(2) << 20;
    let ratio = match get(ROCKSDB_WRITE_BUFFER_RATIO) {
        None => 0.5,
        Some(v) => match v.trim().parse::<f64>() {
            Ok(r) if (0.0..1.0).contains(&r) => r,
            _ => {
                return Err(SluiceError::query(
                    class::INVALID_CONF_VALUE,
                    format!(
                        "{ROCKSDB_WRITE_BUFFER_RATIO} must be a fraction from 0 up to (not \
                         including) 1, got {v:?}"
                    ),
                ))
            }
        },
    };
    let write_buffer = ((total as f64 * ratio) as u64).max(1 << 20);
    Ok(LocalCacheMemory {
        cache_bytes: total.saturating_sub(write_buffer).max(1 << 20),
        write_buffer_bytes: write_buffer,
    })
}

/// The provider class of `kind`, as Spark names it.
pub fn provider_class_name(kind: StateStoreKind) -> &'static str {
    match kind {
        StateStoreKind::InMemory => HDFS_PROVIDER_CLASS,
        StateStoreKind::OnDisk => ROCKSDB_PROVIDER_CLASS,
    }
}

/// The value of source/sink option `key`: option names are case-insensitive, as in Spark's
/// `CaseInsensitiveMap`.
pub fn option<'a>(options: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_str())
}

/// Parses a positive number of partitions (`spark.sql.shuffle.partitions`).
pub fn parse_partitions(v: &str) -> Result<usize> {
    match v.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(SluiceError::query(
            class::INVALID_CONF_VALUE,
            format!("{SHUFFLE_PARTITIONS} must be a positive integer, got {v:?}"),
        )),
    }
}

fn parse_num(get: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<u64>> {
    get(key)
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| {
                SluiceError::query(
                    class::INVALID_CONF_VALUE,
                    format!("{key} must be a non-negative integer, got {v:?}"),
                )
            })
        })
        .transpose()
}

fn parse_time_ms(get: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<u64>> {
    get(key)
        .map(|v| {
            crate::time_text::parse_duration_ms(&v)
                .and_then(|ms| u64::try_from(ms).ok())
                .ok_or_else(|| {
                    SluiceError::query(
                        class::INVALID_CONF_VALUE,
                        format!(
                            "{key} must be a time such as 600s, 10m or 600000 (milliseconds), \
                             got {v:?}"
                        ),
                    )
                })
        })
        .transpose()
}

fn process_workers() -> &'static std::sync::RwLock<Vec<String>> {
    static WORKERS: std::sync::OnceLock<std::sync::RwLock<Vec<String>>> =
        std::sync::OnceLock::new();
    WORKERS.get_or_init(Default::default)
}

/// Sets the process's default of [`DISTRIBUTED_WORKERS`] (`--workers` of `sluice run` and
/// `sluice connect`, as Spark's `--master`): the workers of every query whose session does not
/// set the key. Checked as the key's value is.
pub fn set_default_distributed_workers(workers: &str) -> Result<()> {
    use crate::sync::RwLockExt;
    *process_workers().write_unpoisoned() = parse_workers(workers)?;
    Ok(())
}

fn default_workers() -> Vec<String> {
    use crate::sync::RwLockExt;
    process_workers().read_unpoisoned().clone()
}

/// The workers of [`DISTRIBUTED_WORKERS`]: `host:port`s separated by commas (blank entries
/// ignored), each checked for its port.
pub fn parse_workers(v: &str) -> Result<Vec<String>> {
    v.split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(|w| {
            let port = w
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            match port {
                Some((host, Ok(port))) if !host.is_empty() && port > 0 => Ok(w.to_string()),
                _ => Err(SluiceError::query(
                    class::INVALID_CONF_VALUE,
                    format!(
                        "{DISTRIBUTED_WORKERS} must list workers as host:port separated by \
                         commas (e.g. 10.0.0.5:7078,10.0.0.6:7078), got {w:?}"
                    ),
                )),
            }
        })
        .collect()
}

/// `key`'s value as a Spark boolean (`true`/`false`, any case), or an error naming the key.
pub fn parse_bool(get: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<bool>> {
    get(key)
        .map(|v| match v.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(SluiceError::query(
                class::INVALID_CONF_VALUE,
                format!("{key} must be true or false, got {v:?}"),
            )),
        })
        .transpose()
}

/// The conf Spark pins into `offsets/N` at a query's first run: the checkpoint's values win
/// over the session's on every restart, because state was partitioned and watermarks combined
/// by them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedConf {
    /// Every pinned key as written into `offsets/N` (the checkpoint's keys are kept as they are,
    /// including ones Sluice does not read, so a Spark checkpoint round-trips).
    pub entries: BTreeMap<String, String>,
    /// The number of state partitions.
    pub shuffle_partitions: usize,
    /// The watermark policy.
    pub watermark_policy: WatermarkPolicy,
    /// Where the state stores hold their committed version.
    pub state_store: StateStoreKind,
}

impl PinnedConf {
    /// Resolves the pinned conf: the checkpoint's (`logged`, from the latest `offsets/N`) when the
    /// query ran before, else the session's. A session value that differs from the checkpoint's
    /// is reported with `log::warn!` naming `checkpoint` and kept out.
    pub fn resolve(
        conf: &StreamingConf,
        logged: Option<&BTreeMap<String, String>>,
        checkpoint: &std::path::Path,
    ) -> Result<Self> {
        let mut entries = BTreeMap::new();
        entries.insert(
            SHUFFLE_PARTITIONS.to_string(),
            conf.shuffle_partitions.to_string(),
        );
        let session_policy = conf.watermark_policy.unwrap_or_default();
        entries.insert(
            WATERMARK_POLICY.to_string(),
            session_policy.as_str().to_string(),
        );
        // Always pinned, as Spark writes it; a checkpoint without it (an older Sluice one)
        // takes the session's.
        entries.insert(
            STATE_STORE_PROVIDER_CLASS.to_string(),
            provider_class_name(conf.state_store.unwrap_or_default()).to_string(),
        );
        if let Some(logged) = logged {
            // A checkpoint written before the policy was pinned ran with Spark's default.
            entries.insert(
                WATERMARK_POLICY.to_string(),
                WatermarkPolicy::Min.as_str().to_string(),
            );
            for (k, v) in logged {
                entries.insert(k.clone(), v.clone());
            }
        }
        let shuffle_partitions = match entries.get(SHUFFLE_PARTITIONS) {
            Some(v) => parse_partitions(v).map_err(|e| {
                SluiceError::checkpoint(
                    class::CHECKPOINT_CORRUPT_LOG,
                    format!(
                        "the latest offsets file of {} pins {SHUFFLE_PARTITIONS} = {v:?}, not a \
                         positive number ({}); restore the file or start a new checkpoint",
                        checkpoint.display(),
                        e.message()
                    ),
                )
            })?,
            None => conf.shuffle_partitions,
        };
        let watermark_policy = WatermarkPolicy::parse(
            entries
                .get(WATERMARK_POLICY)
                .map(String::as_str)
                .unwrap_or("min"),
        )?;
        let state_store = match entries.get(STATE_STORE_PROVIDER_CLASS) {
            Some(v) => provider_class(
                v,
                &format!(
                    "{STATE_STORE_PROVIDER_CLASS} in the latest offsets file of {}",
                    checkpoint.display()
                ),
            )?,
            None => conf.state_store.unwrap_or_default(),
        };
        if logged.is_some() {
            if let Some(k) = conf.state_store.filter(|k| *k != state_store) {
                log::warn!(
                    "{STATE_STORE_PROVIDER_CLASS} is {} in the checkpoint {} and {} in the \
                     session; the checkpoint's value is kept, as Spark keeps it (start a new \
                     checkpoint location to change it)",
                    provider_class_name(state_store),
                    checkpoint.display(),
                    provider_class_name(k)
                );
            }
            if shuffle_partitions != conf.shuffle_partitions {
                log::warn!(
                    "{SHUFFLE_PARTITIONS} is {shuffle_partitions} in the checkpoint {} and {} in \
                     the session; the checkpoint's value is kept (state is partitioned by it)",
                    checkpoint.display(),
                    conf.shuffle_partitions
                );
            }
            if let Some(p) = conf.watermark_policy.filter(|p| *p != watermark_policy) {
                log::warn!(
                    "{WATERMARK_POLICY} is {} in the checkpoint {} and {} in the session; the \
                     checkpoint's value is kept",
                    watermark_policy.as_str(),
                    checkpoint.display(),
                    p.as_str()
                );
            }
        }
        Ok(Self {
            entries,
            shuffle_partitions,
            watermark_policy,
            state_store,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::Path;

    fn conf(pairs: &[(&str, &str)]) -> Result<StreamingConf> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StreamingConf::from_lookup(4, |k| m.get(k).cloned())
    }

    #[test]
    fn defaults_are_sparks() {
        let c = conf(&[]).unwrap();
        assert_eq!(c.min_batches_to_retain, 100);
        assert_eq!(c.min_deltas_for_snapshot, 10);
        assert!(c.check_correctness);
        assert!(!c.allow_key_rename);
        assert_eq!(c.watermark_policy, None);
        assert_eq!(c.shuffle_partitions, 4);
    }

    #[test]
    fn memory_limit_reads_spark_byte_strings_and_refuses_nonsense() {
        assert_eq!(conf(&[]).unwrap().memory.limit, 256 << 20);
        assert_eq!(conf(&[(MEMORY_LIMIT, "2g")]).unwrap().memory.limit, 2 << 30);
        assert_eq!(
            conf(&[(MEMORY_LIMIT, " 512MB ")]).unwrap().memory.limit,
            512 << 20
        );
        assert_eq!(
            conf(&[(MEMORY_LIMIT, "33554432")]).unwrap().memory.limit,
            32 << 20
        );
        for bad in ["lots", "1x", "", "-5m", "1m"] {
            let e = conf(&[(MEMORY_LIMIT, bad)]).unwrap_err();
            assert!(e.is(class::INVALID_CONF_VALUE), "{bad}: {e}");
            assert!(e.message().contains(MEMORY_LIMIT), "{e}");
        }
        let b = MemoryBudget { limit: 256 << 20 };
        assert_eq!(b.read_chunk_bytes(2), 4 << 20);
        assert_eq!(b.write_buffer_bytes(2), 8 << 20);
        assert_eq!(b.pool_bytes(), 128 << 20);
        assert_eq!(b.stateful_chunk_bytes(), 16 << 20);
        assert_eq!(
            MemoryBudget { limit: 16 << 20 }.stateful_chunk_bytes(),
            1 << 20
        );
    }

    /// Spark's provider classes select the store kind; it is pinned at the first run (Spark
    /// writes it into every `offsets/N`), the checkpoint's wins on a restart, and an older
    /// checkpoint without it takes the session's.
    #[test]
    fn the_state_store_provider_class_is_pinned_like_sparks() {
        let rocks = conf(&[(STATE_STORE_PROVIDER_CLASS, ROCKSDB_PROVIDER_CLASS)]).unwrap();
        assert_eq!(rocks.state_store, Some(StateStoreKind::OnDisk));
        let first = PinnedConf::resolve(&rocks, None, Path::new("ck")).unwrap();
        assert_eq!(first.state_store, StateStoreKind::OnDisk);
        assert_eq!(
            first.entries[STATE_STORE_PROVIDER_CLASS],
            ROCKSDB_PROVIDER_CLASS
        );
        // Unset: Spark's default class, written all the same.
        let plain = conf(&[]).unwrap();
        assert_eq!(plain.state_store, None);
        let first = PinnedConf::resolve(&plain, None, Path::new("ck")).unwrap();
        assert_eq!(first.state_store, StateStoreKind::InMemory);
        assert_eq!(
            first.entries[STATE_STORE_PROVIDER_CLASS],
            HDFS_PROVIDER_CLASS
        );
        // A restart keeps the checkpoint's class whatever the session says.
        let again = PinnedConf::resolve(&plain, Some(&first.entries), Path::new("ck")).unwrap();
        assert_eq!(again.state_store, StateStoreKind::InMemory);
        let again = PinnedConf::resolve(&rocks, Some(&first.entries), Path::new("ck")).unwrap();
        assert_eq!(again.state_store, StateStoreKind::InMemory);
        // A checkpoint written before the class was pinned takes the session's.
        let mut old = first.entries.clone();
        old.remove(STATE_STORE_PROVIDER_CLASS);
        let again = PinnedConf::resolve(&rocks, Some(&old), Path::new("ck")).unwrap();
        assert_eq!(again.state_store, StateStoreKind::OnDisk);
        // Another class is refused by name, from the session or from a checkpoint.
        let e = conf(&[(STATE_STORE_PROVIDER_CLASS, "com.example.MyProvider")]).unwrap_err();
        assert!(e.is(class::INVALID_CONF_VALUE), "{e}");
        assert!(e.message().contains(ROCKSDB_PROVIDER_CLASS), "{e}");
        let mut odd = first.entries.clone();
        odd.insert(STATE_STORE_PROVIDER_CLASS.into(), "x.Y".into());
        let e = PinnedConf::resolve(&plain, Some(&odd), Path::new("ck")).unwrap_err();
        assert!(e.message().contains("offsets file of ck"), "{e}");
    }

    /// Spark's bounded-memory settings of its RocksDB provider size the on-disk provider's
    /// cache and write buffers.
    #[test]
    fn rocksdb_bounded_memory_splits_the_limit_as_spark_does() {
        assert_eq!(conf(&[]).unwrap().local_cache, LocalCacheMemory::default());
        let bounded = conf(&[(ROCKSDB_BOUNDED_MEMORY, "true")]).unwrap();
        assert_eq!(
            bounded.local_cache,
            LocalCacheMemory {
                cache_bytes: 250 << 20,
                write_buffer_bytes: 250 << 20
            }
        );
        let c = conf(&[
            (ROCKSDB_BOUNDED_MEMORY, "true"),
            (ROCKSDB_MAX_MEMORY_MB, "100"),
            (ROCKSDB_WRITE_BUFFER_RATIO, "0.25"),
        ])
        .unwrap();
        assert_eq!(c.local_cache.write_buffer_bytes, 25 << 20);
        assert_eq!(c.local_cache.cache_bytes, 75 << 20);
        // Without boundedMemoryUsage, maxMemoryUsageMB changes nothing (as in Spark).
        let c = conf(&[(ROCKSDB_MAX_MEMORY_MB, "100")]).unwrap();
        assert_eq!(c.local_cache, LocalCacheMemory::default());
        let e = conf(&[
            (ROCKSDB_BOUNDED_MEMORY, "true"),
            (ROCKSDB_WRITE_BUFFER_RATIO, "1.5"),
        ])
        .unwrap_err();
        assert!(e.message().contains(ROCKSDB_WRITE_BUFFER_RATIO), "{e}");
    }

    #[test]
    fn values_parse_and_bad_values_name_the_key() {
        let c = conf(&[
            (MIN_BATCHES_TO_RETAIN, "0"),
            (WATERMARK_POLICY, "MAX"),
            (CHECK_CORRECTNESS, "False"),
        ])
        .unwrap();
        assert_eq!(c.min_batches_to_retain, 1, "at least one batch is kept");
        assert_eq!(c.watermark_policy, Some(WatermarkPolicy::Max));
        assert!(!c.check_correctness);
        let e = conf(&[(MIN_DELTAS_FOR_SNAPSHOT, "ten")]).unwrap_err();
        assert!(e.is(class::INVALID_CONF_VALUE));
        assert!(e.message().contains(MIN_DELTAS_FOR_SNAPSHOT), "{e}");
        let e = conf(&[(WATERMARK_POLICY, "avg")]).unwrap_err();
        assert!(e.message().contains(WATERMARK_POLICY), "{e}");
    }

    #[test]
    fn the_checkpoint_pins_partitions_and_policy() {
        let c = conf(&[(WATERMARK_POLICY, "max")]).unwrap();
        let first = PinnedConf::resolve(&c, None, Path::new("ck")).unwrap();
        assert_eq!(first.shuffle_partitions, 4);
        assert_eq!(first.watermark_policy, WatermarkPolicy::Max);
        assert_eq!(first.entries[WATERMARK_POLICY], "max");

        let mut logged = BTreeMap::new();
        logged.insert(SHUFFLE_PARTITIONS.to_string(), "2".to_string());
        logged.insert("spark.custom".to_string(), "x".to_string());
        let again = PinnedConf::resolve(&c, Some(&logged), Path::new("ck")).unwrap();
        assert_eq!(again.shuffle_partitions, 2);
        // a checkpoint without a pinned policy ran with Spark's default, min
        assert_eq!(again.watermark_policy, WatermarkPolicy::Min);
        assert_eq!(again.entries["spark.custom"], "x");

        logged.insert(SHUFFLE_PARTITIONS.to_string(), "zero".to_string());
        let e = PinnedConf::resolve(&c, Some(&logged), Path::new("ck")).unwrap_err();
        assert!(e.is(class::CHECKPOINT_CORRUPT_LOG), "{e}");
    }
}
