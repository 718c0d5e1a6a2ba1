//! Where every byte Sluice keeps goes: a local path or an object store, behind one set of file
//! calls (Spark's `CheckpointFileManager` over Hadoop's `FileSystem`).
//!
//! A path stays a [`Path`] everywhere in the engine. A path whose text starts with an object
//! store's URL scheme names an object store location, as a Hadoop `Path` with a scheme does:
//!
//! | scheme | store | credentials and endpoint |
//! |---|---|---|
//! | `s3://bucket/key`, `s3a://`, `s3n://` | Amazon S3 or an S3-compatible server | `spark.hadoop.fs.s3a.*` (per bucket: `fs.s3a.bucket.<b>.*`), then `AWS_*` |
//! | `gs://bucket/key` | Google Cloud Storage | `spark.hadoop.fs.gs.auth.service.account.json.keyfile`, then `GOOGLE_*` |
//! | `abfss://container@account.dfs.core.windows.net/key`, `abfs://`, `az://container/key` | Azure Blob Storage / ADLS Gen2 | `spark.hadoop.fs.azure.account.key.<account>.dfs.core.windows.net`, then `AZURE_*` |
//! | `memory://name/key` | a store in this process's memory (tests, embedders) | — |
//!
//! Every other path is local, and every call below is then exactly the `std::fs` call it
//! replaces. On an object store:
//! - a "directory" is a key prefix: it exists when an object is under it, creating one does
//!   nothing, listing it lists one level (`list_with_delimiter`);
//! - [`create_new`] is a conditional create (`PutMode::Create`, S3's `If-None-Match: *`), the
//!   rename-free equivalent of the local hard-link: of two writers exactly one wins;
//! - [`PendingFile`] buffers the bytes and puts the object once, under its final name;
//! - transient failures (5xx, timeouts, connection errors) are retried with exponential backoff
//!   and counted ([`metrics`]); permanent ones (access denied, a missing bucket) come back as
//!   [`std::io::Error`]s whose text names the URL and the fix.
//!
//! Stores are built on first use from the options [`configure`] was given (a [`Session`]'s
//! `spark.hadoop.*` conf) and cached per bucket, as Hadoop caches its `FileSystem`s per scheme
//! and authority: the options are process-wide. [`register_store`] puts a store of one's own
//! under a URL prefix (tests wrap stores with faults this way).
//!
//! [`Session`]: crate::session::Session

#[cfg(feature = "testing")]
pub mod faulty;
mod local;
mod registry;
mod remote;
mod retry;

use std::io;
use std::path::{Path, PathBuf};

pub(crate) use local::system_time_ms;
pub(crate) use registry::option;
pub use registry::{configure, register_store, RetryPolicy};
pub use retry::{metrics, StoreCounts, StoreMetrics};

/// What [`list_dir`] and [`metadata`] say about one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's full path (a URL for an object).
    pub path: PathBuf,
    /// The last component of the path.
    pub name: String,
    /// A directory (locally) or a key prefix with objects under it (on an object store).
    pub is_dir: bool,
    /// Size in bytes (0 for a directory).
    pub size: u64,
    /// Modification time, milliseconds since the epoch (0 when unknown).
    pub modified_ms: i64,
}

/// Whether `path` names an object store location (it starts with a known URL scheme).
pub fn is_remote(path: &Path) -> bool {
    remote::Location::scheme_of(path).is_some()
}

/// The whole content of a file.
pub fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let path = path.as_ref();
    match remote::Location::parse(path)? {
        Some(loc) => loc.read(),
        None => std::fs::read(path),
    }
}

/// The whole content of a file, as UTF-8 text.
pub fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    let path = path.as_ref();
    let bytes = read(path)?;
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// What is at `path`: a file (or object), a directory (or a prefix with objects under it), or
/// `NotFound`. Local symlinks are followed.
pub fn metadata(path: impl AsRef<Path>) -> io::Result<Entry> {
    let path = path.as_ref();
    match remote::Location::parse(path)? {
        Some(loc) => loc.metadata(),
        None => local::metadata(path),
    }
}

/// Whether anything is at `path`.
pub fn exists(path: impl AsRef<Path>) -> bool {
    let path = path.as_ref();
    metadata(path).is_ok()
}

/// Whether `path` is a file (or an object: one HEAD request, no listing).
pub fn is_file(path: impl AsRef<Path>) -> bool {
    let path = path.as_ref();
    match remote::Location::parse(path) {
        Ok(Some(loc)) => loc.is_object(),
        Ok(None) => std::fs::metadata(path).is_ok_and(|m| !m.is_dir()),
        Err(_) => false,
    }
}

/// Whether `path` is a directory (or a prefix with objects under it).
pub fn is_dir(path: impl AsRef<Path>) -> bool {
    let path = path.as_ref();
    metadata(path).is_ok_and(|m| m.is_dir)
}

/// The entries directly in `dir`, unsorted; `NotFound` when `dir` does not exist (on an object
/// store: when nothing is under the prefix). Local symlinks are followed, and an entry that
/// vanishes while being listed is left out.
pub fn list_dir(dir: impl AsRef<Path>) -> io::Result<Vec<Entry>> {
    let dir = dir.as_ref();
    match remote::Location::parse(dir)? {
        Some(loc) => loc.list_dir(),
        None => local::list_dir(dir),
    }
}

/// Creates a directory and its parents (nothing to do on an object store).
pub fn create_dir_all(dir: impl AsRef<Path>) -> io::Result<()> {
    let dir = dir.as_ref();
    match remote::Location::parse(dir)? {
        Some(_) => Ok(()),
        None => std::fs::create_dir_all(dir),
    }
}

/// Removes a file (`NotFound` when it is not there).
pub fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    match remote::Location::parse(path)? {
        Some(loc) => loc.remove_file(),
        None => std::fs::remove_file(path),
    }
}

/// Removes a directory and everything under it.
pub fn remove_dir_all(dir: impl AsRef<Path>) -> io::Result<()> {
    let dir = dir.as_ref();
    match remote::Location::parse(dir)? {
        Some(loc) => loc.remove_prefix(),
        None => std::fs::remove_dir_all(dir),
    }
}

/// Moves a file to a new name, replacing what is there. Atomic locally; on an object store a
/// copy then a delete (used only to set damaged files aside).
pub fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (from, to) = (from.as_ref(), to.as_ref());
    match (remote::Location::parse(from)?, remote::Location::parse(to)?) {
        (None, None) => std::fs::rename(from, to),
        (Some(a), Some(b)) => a.rename_to(&b),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot move {} to {}: not on the same store",
                from.display(),
                to.display()
            ),
        )),
    }
}

/// Writes `bytes` to `path`, replacing it; a reader never sees a partial file (locally a
/// temporary file renamed over the name, on an object store one put).
pub fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    let (path, bytes) = (path.as_ref(), bytes.as_ref());
    let mut pending = PendingFile::create(path)?;
    io::Write::write_all(&mut pending, bytes)?;
    pending.publish(Publish::Replace).map(|_| ())
}

/// Writes `bytes` to `path` only if `path` does not exist yet, atomically: `Ok(true)` if this
/// call created it, `Ok(false)` if something was there (left untouched). Two writers racing
/// for one name never both win. Creates the parent directory if needed.
pub fn create_new(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<bool> {
    let (path, bytes) = (path.as_ref(), bytes.as_ref());
    let mut pending = PendingFile::create(path)?;
    io::Write::write_all(&mut pending, bytes)?;
    pending.publish(Publish::CreateNew)
}

/// Makes the names created or removed in `dir` durable (fsync locally; nothing to do on an
/// object store, where a put is durable when it returns).
pub fn sync_dir(dir: impl AsRef<Path>) -> io::Result<()> {
    let dir = dir.as_ref();
    match remote::Location::parse(dir)? {
        Some(_) => Ok(()),
        None => local::sync_dir(dir),
    }
}

/// How a [`PendingFile`] takes its final name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// Replace whatever is there.
    Replace,
    /// Only if nothing is there (atomic create-if-absent).
    CreateNew,
}

/// A file being written: the bytes go to a temporary file next to the final name (locally) or
/// to memory (object store), and [`PendingFile::publish`] puts them under the final name in one
/// step. Dropped without publishing, it leaves nothing behind.
pub struct PendingFile {
    inner: PendingInner,
}

enum PendingInner {
    Local(local::PendingLocal),
    Remote(remote::Location, Vec<u8>),
    Done,
}

impl PendingFile {
    /// Starts writing the file `path` (creating its parent directory locally).
    pub fn create(path: &Path) -> io::Result<PendingFile> {
        let inner = match remote::Location::parse(path)? {
            Some(loc) => PendingInner::Remote(loc, Vec::new()),
            None => PendingInner::Local(local::PendingLocal::create(path)?),
        };
        Ok(PendingFile { inner })
    }

    /// The temporary file's path (locally), for messages.
    pub fn temp_path(&self) -> Option<&Path> {
        match &self.inner {
            PendingInner::Local(l) => Some(l.tmp()),
            _ => None,
        }
    }

    /// Puts the bytes under the final name. Locally the temporary file is fsynced, then
    /// renamed (`Replace`) or hard-linked (`CreateNew`), and the directory fsynced. Returns
    /// whether the file was written (`false`: `CreateNew` found the name taken).
    pub fn publish(mut self, how: Publish) -> io::Result<bool> {
        match std::mem::replace(&mut self.inner, PendingInner::Done) {
            PendingInner::Local(l) => l.publish(how),
            PendingInner::Remote(loc, bytes) => loc.put(bytes, how),
            PendingInner::Done => Ok(false),
        }
    }
}

impl io::Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.inner {
            PendingInner::Local(l) => l.write(buf),
            PendingInner::Remote(_, bytes) => {
                bytes.extend_from_slice(buf);
                Ok(buf.len())
            }
            PendingInner::Done => Err(io::Error::other("the file was already published")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.inner {
            PendingInner::Local(l) => l.flush(),
            _ => Ok(()),
        }
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if let PendingInner::Local(l) = std::mem::replace(&mut self.inner, PendingInner::Done) {
            l.discard();
        }
    }
}

/// An object store location, for code that talks to the store itself (the Delta crate hands
/// the store to delta-rs).
#[derive(Debug, Clone)]
pub struct ObjectLocation {
    /// The store, with Sluice's retries and counters around it.
    pub store: std::sync::Arc<dyn object_store::ObjectStore>,
    /// The store's root URL (`s3://bucket`), scheme normalised (`s3a` is `s3`).
    pub root_url: String,
    /// The key under the root (no leading `/`).
    pub key: object_store::path::Path,
}

/// The object store and key of `path`; `None` for a local path.
pub fn object_location(path: impl AsRef<Path>) -> io::Result<Option<ObjectLocation>> {
    let path = path.as_ref();
    Ok(remote::Location::parse(path)?.map(|loc| loc.object_location()))
}

/// This machine's host name, for the checkpoint lease and its messages.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests;

/// A file opened for reading: the open file locally, an object read by ranges on an object
/// store. Reads sequentially ([`io::Read`]) and by range (parquet's `ChunkReader`).
pub enum ReadFile {
    /// A local file.
    Local(std::fs::File),
    /// An object, read a range at a time.
    Remote(Box<RemoteRead>),
}

/// How much of an object one request reads as a sequential read advances.
const REMOTE_BLOCK: usize = 8 << 20;

/// Opens `path` for reading (`NotFound` when it is not there). On an object store this reads
/// the object's first 8 MiB (all of a smaller object, in one request); a sequential read then
/// gets the rest 8 MiB at a time, each from the version first read (a replaced object fails
/// the read, as Hadoop's S3A change detection does).
pub fn open(path: impl AsRef<Path>) -> io::Result<ReadFile> {
    open_ranged(path, REMOTE_BLOCK)
}

/// [`open`] with object store requests of `block` bytes.
pub(crate) fn open_ranged(path: impl AsRef<Path>, block: usize) -> io::Result<ReadFile> {
    let path = path.as_ref();
    match remote::Location::parse(path)? {
        Some(loc) => {
            let block = block.max(1);
            let (head, size, etag) = loc.read_start(block)?;
            Ok(ReadFile::Remote(Box::new(RemoteRead {
                loc,
                size,
                etag,
                block_bytes: block,
                sequential: head.clone(),
                sequential_start: 0,
                pos: 0,
                head,
                whole: std::sync::OnceLock::new(),
            })))
        }
        None => std::fs::File::open(path).map(ReadFile::Local),
    }
}

/// An object on a store, read by ranges: sequentially a block at a time, or (parquet's
/// `ChunkReader`) from the first block when the bytes asked for are in it, else from the whole
/// object, fetched once.
pub struct RemoteRead {
    loc: remote::Location,
    size: u64,
    /// The version read first (later ranges must come from it).
    etag: Option<String>,
    block_bytes: usize,
    /// The object's first block, read when it was opened (dropped once a sequential read is
    /// past it).
    head: bytes::Bytes,
    /// The block a sequential read is in, and the offset it starts at.
    sequential: bytes::Bytes,
    sequential_start: u64,
    /// The offset of the next sequential read.
    pos: u64,
    /// The whole object, once a random access needed more than the first block.
    whole: std::sync::OnceLock<bytes::Bytes>,
}

impl RemoteRead {
    /// The bytes `start..start + length` (random access).
    fn bytes(&self, start: u64, length: usize) -> io::Result<bytes::Bytes> {
        let end = start.saturating_add(length as u64);
        if end <= self.head.len() as u64 {
            return Ok(self.head.slice(start as usize..end as usize));
        }
        let whole = self.whole()?;
        if end > whole.len() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "bytes {start}..{end} asked for past the end of an object of {} bytes",
                    whole.len()
                ),
            ));
        }
        Ok(whole.slice(start as usize..end as usize))
    }

    fn whole(&self) -> io::Result<bytes::Bytes> {
        if let Some(w) = self.whole.get() {
            return Ok(w.clone());
        }
        let have = self.head.len() as u64;
        let w = if have >= self.size {
            self.head.clone()
        } else if have > 0 {
            let rest = self.loc.read_range(have..self.size, self.etag.clone())?;
            let mut all = Vec::with_capacity(self.size as usize);
            all.extend_from_slice(&self.head);
            all.extend_from_slice(&rest);
            bytes::Bytes::from(all)
        } else {
            self.loc.read_range(0..self.size, self.etag.clone())?
        };
        Ok(self.whole.get_or_init(|| w).clone())
    }
}

impl io::Read for RemoteRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || self.pos >= self.size {
            return Ok(0);
        }
        let mut at = self.pos - self.sequential_start.min(self.pos);
        if self.pos < self.sequential_start || at >= self.sequential.len() as u64 {
            let end = self
                .pos
                .saturating_add(self.block_bytes as u64)
                .min(self.size);
            self.sequential = self.loc.read_range(self.pos..end, self.etag.clone())?;
            self.sequential_start = self.pos;
            // The first block is kept for random access only.
            self.head = bytes::Bytes::new();
            at = 0;
        }
        let avail = &self.sequential[at as usize..];
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl io::Read for ReadFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ReadFile::Local(f) => f.read(buf),
            ReadFile::Remote(r) => r.read(buf),
        }
    }
}

impl parquet::file::reader::Length for ReadFile {
    fn len(&self) -> u64 {
        match self {
            ReadFile::Local(f) => parquet::file::reader::Length::len(f),
            ReadFile::Remote(r) => r.size,
        }
    }
}

fn parquet_io(e: io::Error) -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::External(Box::new(e))
}

impl parquet::file::reader::ChunkReader for ReadFile {
    type T = Box<dyn io::Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        match self {
            ReadFile::Local(f) => Ok(Box::new(f.get_read(start)?)),
            ReadFile::Remote(r) => {
                let whole = r.whole().map_err(parquet_io)?;
                Ok(Box::new(whole.get_read(start)?))
            }
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        match self {
            ReadFile::Local(f) => f.get_bytes(start, length),
            ReadFile::Remote(r) => r.bytes(start, length).map_err(parquet_io),
        }
    }
}

/// An object read by the ranges its reader names (Parquet's column chunks): [`RangedFile::fetch`]
/// gets the ranges the next reads need in one go (concurrent requests, near ones merged), and
/// a read outside them is one ranged request of its own. Clones share the fetched ranges.
#[derive(Clone)]
pub(crate) struct RangedFile {
    inner: std::sync::Arc<RangedInner>,
}

struct RangedInner {
    loc: remote::Location,
    size: u64,
    etag: Option<String>,
    /// The fetched ranges: start offset and bytes.
    fetched: std::sync::Mutex<Vec<(u64, bytes::Bytes)>>,
}

/// Opens an object for reads by ranges (one HEAD request); `None` for a local path.
pub(crate) fn open_by_ranges(path: impl AsRef<Path>) -> io::Result<Option<RangedFile>> {
    let Some(loc) = remote::Location::parse(path.as_ref())? else {
        return Ok(None);
    };
    let (size, etag) = loc.head()?;
    Ok(Some(RangedFile {
        inner: std::sync::Arc::new(RangedInner {
            loc,
            size,
            etag,
            fetched: std::sync::Mutex::new(Vec::new()),
        }),
    }))
}

impl RangedFile {
    /// Fetches `ranges` (clipped to the object), in place of the ranges fetched before.
    pub(crate) fn fetch(&self, ranges: &[std::ops::Range<u64>]) -> io::Result<()> {
        let size = self.inner.size;
        let ranges: Vec<std::ops::Range<u64>> = ranges
            .iter()
            .map(|r| r.start.min(size)..r.end.min(size))
            .filter(|r| r.start < r.end)
            .collect();
        self.fetched().clear();
        let got = self
            .inner
            .loc
            .read_ranges(ranges.clone(), self.inner.etag.clone())?;
        *self.fetched() = ranges.iter().map(|r| r.start).zip(got).collect();
        Ok(())
    }

    fn fetched(&self) -> std::sync::MutexGuard<'_, Vec<(u64, bytes::Bytes)>> {
        self.inner
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The bytes `start..end`: from a fetched range, else one request.
    fn bytes(&self, start: u64, end: u64) -> io::Result<bytes::Bytes> {
        let end = end.min(self.inner.size);
        if start >= end {
            return Ok(bytes::Bytes::new());
        }
        for (at, b) in self.fetched().iter() {
            if *at <= start && end <= at + b.len() as u64 {
                return Ok(b.slice((start - at) as usize..(end - at) as usize));
            }
        }
        self.inner
            .loc
            .read_range(start..end, self.inner.etag.clone())
    }
}

impl parquet::file::reader::Length for RangedFile {
    fn len(&self) -> u64 {
        self.inner.size
    }
}

impl parquet::file::reader::ChunkReader for RangedFile {
    type T = RangedRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<RangedRead> {
        Ok(RangedRead {
            file: self.clone(),
            pos: start,
            buf: bytes::Bytes::new(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        let end = start.saturating_add(length as u64);
        if end > self.inner.size {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "bytes {start}..{end} asked for past the end of an object of {} bytes",
                self.inner.size
            )));
        }
        self.bytes(start, end).map_err(parquet_io)
    }
}

/// A sequential read of a [`RangedFile`] from an offset: from the fetched range it starts in,
/// else 64 KiB requests (Parquet reads page headers this way).
pub(crate) struct RangedRead {
    file: RangedFile,
    pos: u64,
    buf: bytes::Bytes,
}

impl io::Read for RangedRead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.buf.is_empty() {
            let size = self.file.inner.size;
            if self.pos >= size || out.is_empty() {
                return Ok(0);
            }
            let fetched = self
                .file
                .fetched()
                .iter()
                .find(|(at, b)| *at <= self.pos && self.pos < at + b.len() as u64)
                .map(|(at, b)| b.slice((self.pos - at) as usize..));
            self.buf = match fetched {
                Some(b) => b,
                None => self
                    .file
                    .bytes(self.pos, self.pos.saturating_add(64 << 10))?,
            };
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf = self.buf.slice(n..);
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod ranged_tests {
    use std::io::Read;
    use std::sync::Arc;

    use parquet::file::reader::{ChunkReader, Length};

    use super::*;

    fn memory(name: &str) -> String {
        let url = format!("memory://{name}-{}", uuid::Uuid::new_v4().simple());
        register_store(&url, Arc::new(object_store::memory::InMemory::new()));
        url
    }

    #[test]
    fn an_object_reads_a_block_at_a_time() {
        let root = memory("ranged");
        let data: Vec<u8> = (0..10_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let p = PathBuf::from(format!("{root}/in/a.bin"));
        write(&p, &data).unwrap();
        for block in [1, 7, 4096, 40_000, 1 << 20] {
            let mut f = open_ranged(&p, block).unwrap();
            assert_eq!(f.len(), data.len() as u64);
            let mut got = Vec::new();
            let mut buf = [0u8; 333];
            loop {
                let n = f.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, data, "block {block}");
            // Random access (parquet) works before and after sequential reads.
            let f = open_ranged(&p, block).unwrap();
            assert_eq!(f.get_bytes(5, 10).unwrap(), &data[5..15]);
            assert_eq!(f.get_bytes(39_990, 10).unwrap(), &data[39_990..]);
            let mut tail = Vec::new();
            f.get_read(39_000).unwrap().read_to_end(&mut tail).unwrap();
            assert_eq!(tail, &data[39_000..]);
            assert!(f.get_bytes(39_995, 10).is_err());
        }
        // An empty object, and a missing one.
        let e = PathBuf::from(format!("{root}/in/empty"));
        write(&e, b"").unwrap();
        let mut f = open_ranged(&e, 7).unwrap();
        let mut got = Vec::new();
        f.read_to_end(&mut got).unwrap();
        assert!(got.is_empty());
        assert_eq!(f.get_bytes(0, 0).unwrap().len(), 0);
        let missing = open(format!("{root}/in/none")).err().unwrap();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn an_object_replaced_while_it_is_read_fails_the_read() {
        let root = memory("changed");
        let p = PathBuf::from(format!("{root}/a.json"));
        write(&p, vec![b'a'; 100]).unwrap();
        let mut f = open_ranged(&p, 10).unwrap();
        let mut buf = [0u8; 10];
        f.read_exact(&mut buf).unwrap();
        write(&p, vec![b'b'; 100]).unwrap();
        let err = f.read_exact(&mut buf).unwrap_err();
        assert!(
            err.to_string().contains("changed while it was being read"),
            "{err}"
        );
    }
}
