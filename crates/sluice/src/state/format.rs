//! The bytes of one state file (`<v>.delta` or `<v>.snapshot`): a streaming writer, a
//! validating streaming reader, and the k-way merge that rebuilds a version from a snapshot
//! and the deltas after it. See the module doc of [`crate::state`] for the layout.
//!
//! Every length read from a file is bounded before anything is allocated for it, every chunk is
//! checksummed before it is decompressed, and the whole file is checksummed before its last
//! record is trusted, so a corrupt or truncated file NEVER panics: it gives
//! `STATE_STORE_CORRUPT` naming the file.

use crate::error::class;
use std::cmp::Ordering;
use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

use crate::error::{Fault, Result, SluiceError};

/// First bytes of every state file.
pub(crate) const MAGIC: &[u8; 8] = b"SLUICEST";
/// Last bytes of every state file (after the whole-file checksum).
pub(crate) const END_MAGIC: &[u8; 4] = b"SLND";
/// The format version this code writes; it reads this one and version 1.
pub(crate) const FORMAT_VERSION: u8 = 2;
/// Header of format version 1: magic (8), format version (1), kind (1), flags (2, zero), state
/// version (8, LE).
const V1_HEADER_LEN: usize = 20;
/// Header of format version 2: version 1's, then the store it belongs to: operator id (4, LE)
/// and partition id (4, LE), so a file copied into another store's folder is refused.
pub(crate) const HEADER_LEN: usize = 28;
/// Raw bytes per chunk the writer aims for.
const CHUNK_TARGET: usize = 64 * 1024;
/// Largest raw chunk the reader accepts (bounds every allocation made for a chunk).
const CHUNK_MAX: usize = 1 << 20;
/// Chunk codecs.
const CODEC_RAW: u8 = 0;
const CODEC_LZ4: u8 = 1;
/// Marks the end of the chunk sequence.
const END_OF_CHUNKS: u8 = 0xFF;
/// Chunk header: codec (1), raw length (4), stored length (4), crc32 of the stored bytes (4).
const CHUNK_HEADER_LEN: usize = 13;
/// Record tags (in the decompressed stream).
const TAG_END: u8 = 0;
const TAG_PUT: u8 = 1;
const TAG_REMOVE: u8 = 2;
/// A key or value longer than this is refused by the writer (lengths are u32 on disk).
const MAX_FIELD_LEN: usize = u32::MAX as usize;
/// Initial buffer reserved for one key/value; larger fields grow as their bytes arrive, so a
/// wrong length can never make the reader allocate more than the file holds.
const INITIAL_FIELD_RESERVE: usize = 64 * 1024;

/// Which of the two file kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FileKind {
    /// `<v>.delta`: the changes of one version (puts and removes).
    Delta,
    /// `<v>.snapshot`: every live pair at one version (puts only).
    Snapshot,
}

impl FileKind {
    pub(crate) fn extension(self) -> &'static str {
        match self {
            FileKind::Delta => "delta",
            FileKind::Snapshot => "snapshot",
        }
    }
    fn byte(self) -> u8 {
        match self {
            FileKind::Delta => b'D',
            FileKind::Snapshot => b'S',
        }
    }
}

/// One record: a put (`value` is `Some`) or a removal (`None`, deltas only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// `STATE_STORE_CORRUPT` for `path`, with the fix.
pub(crate) fn corrupt(path: &Path, detail: impl std::fmt::Display) -> SluiceError {
    SluiceError::checkpoint(
        class::STATE_STORE_CORRUPT,
        format!(
            "state file {} is corrupt: {detail}. Restore the file from a backup or start the \
             query with a new checkpoint location",
            path.display()
        ),
    )
}

// ------------------------------------------------------------------------------------------
// Writer
// ------------------------------------------------------------------------------------------

/// A `Write` that keeps a running crc32 of everything written through it.
struct CrcWriter<W> {
    inner: W,
    hasher: crc32fast::Hasher,
}

impl<W: Write> CrcWriter<W> {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hasher.update(bytes);
        self.inner.write_all(bytes)
    }
}

/// Streams records into a state file. Keys MUST arrive in strictly increasing byte order (the
/// reader and the snapshot merge rely on it); a key out of order is refused with an
/// `InvalidInput` I/O error, which callers report as an internal error.
pub(crate) struct StateFileWriter<W: Write> {
    out: CrcWriter<W>,
    kind: FileKind,
    /// Raw bytes of the chunk being filled.
    chunk: Vec<u8>,
    /// Scratch space for the compressed chunk.
    packed: Vec<u8>,
    compress: bool,
    records: u64,
    prev_key: Vec<u8>,
    has_prev: bool,
}

impl<W: Write> StateFileWriter<W> {
    /// Writes the header. `compress` asks for lz4 chunks (each chunk is stored raw when lz4
    /// does not make it smaller).
    /// `store` is the (operator id, partition id) of the store the file belongs to.
    pub(crate) fn new(
        out: W,
        kind: FileKind,
        version: u64,
        store: (u32, u32),
        compress: bool,
    ) -> io::Result<Self> {
        let mut out = CrcWriter {
            inner: out,
            hasher: crc32fast::Hasher::new(),
        };
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(MAGIC);
        header[8] = FORMAT_VERSION;
        header[9] = kind.byte();
        // header[10..12]: flags, zero.
        header[12..20].copy_from_slice(&version.to_le_bytes());
        header[20..24].copy_from_slice(&store.0.to_le_bytes());
        header[24..28].copy_from_slice(&store.1.to_le_bytes());
        out.write_all(&header)?;
        Ok(Self {
            out,
            kind,
            chunk: Vec::with_capacity(CHUNK_TARGET),
            packed: Vec::new(),
            compress,
            records: 0,
            prev_key: Vec::new(),
            has_prev: false,
        })
    }

    /// Appends a put record.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.check_key(key)?;
        check_len(value.len())?;
        self.emit(&[TAG_PUT])?;
        self.emit(&(key.len() as u32).to_le_bytes())?;
        self.emit(key)?;
        self.emit(&(value.len() as u32).to_le_bytes())?;
        self.emit(value)?;
        self.records += 1;
        Ok(())
    }

    /// Appends a removal (tombstone) record; deltas only.
    pub(crate) fn remove(&mut self, key: &[u8]) -> io::Result<()> {
        if self.kind != FileKind::Delta {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "a snapshot cannot hold removal records",
            ));
        }
        self.check_key(key)?;
        self.emit(&[TAG_REMOVE])?;
        self.emit(&(key.len() as u32).to_le_bytes())?;
        self.emit(key)?;
        self.records += 1;
        Ok(())
    }

    /// Writes the end record, the last chunk, the end-of-chunks byte, the whole-file crc32 and
    /// the end magic, and returns the underlying writer (not flushed or synced).
    pub(crate) fn finish(mut self) -> io::Result<W> {
        let mut end = [0u8; 9];
        end[0] = TAG_END;
        end[1..9].copy_from_slice(&self.records.to_le_bytes());
        self.emit(&end)?;
        self.flush_chunk()?;
        self.out.write_all(&[END_OF_CHUNKS])?;
        let crc = self.out.hasher.clone().finalize();
        let mut trailer = [0u8; 8];
        trailer[..4].copy_from_slice(&crc.to_le_bytes());
        trailer[4..].copy_from_slice(END_MAGIC);
        self.out.inner.write_all(&trailer)?;
        Ok(self.out.inner)
    }

    fn check_key(&mut self, key: &[u8]) -> io::Result<()> {
        check_len(key.len())?;
        if self.has_prev && key <= self.prev_key.as_slice() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "state file keys must be written in strictly increasing order",
            ));
        }
        self.prev_key.clear();
        self.prev_key.extend_from_slice(key);
        self.has_prev = true;
        Ok(())
    }

    /// Adds bytes to the stream, cutting chunks at `CHUNK_TARGET` (a record may span chunks).
    fn emit(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let room = CHUNK_TARGET - self.chunk.len();
            let n = room.min(bytes.len());
            self.chunk.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.chunk.len() >= CHUNK_TARGET {
                self.flush_chunk()?;
            }
        }
        Ok(())
    }

    fn flush_chunk(&mut self) -> io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let raw = &self.chunk;
        let mut codec = CODEC_RAW;
        let mut stored: &[u8] = raw;
        if self.compress {
            self.packed
                .resize(lz4_flex::block::get_maximum_output_size(raw.len()), 0);
            if let Ok(n) = lz4_flex::block::compress_into(raw, &mut self.packed) {
                if n < raw.len() {
                    codec = CODEC_LZ4;
                    stored = &self.packed[..n];
                }
            }
        }
        let mut header = [0u8; CHUNK_HEADER_LEN];
        header[0] = codec;
        header[1..5].copy_from_slice(&(raw.len() as u32).to_le_bytes());
        header[5..9].copy_from_slice(&(stored.len() as u32).to_le_bytes());
        header[9..13].copy_from_slice(&crc32fast::hash(stored).to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(stored)?;
        self.chunk.clear();
        Ok(())
    }
}

fn check_len(len: usize) -> io::Result<()> {
    if len > MAX_FIELD_LEN {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!("a state key or value of {len} bytes is over the 4 GiB limit"),
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Reader
// ------------------------------------------------------------------------------------------

/// A `Read` that keeps a running crc32 and a byte count of everything read through it.
struct CrcReader<R> {
    inner: R,
    hasher: crc32fast::Hasher,
    offset: u64,
}

impl<R: Read> CrcReader<R> {
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_exact(buf)?;
        self.hasher.update(buf);
        self.offset += buf.len() as u64;
        Ok(())
    }
}

/// Reads and validates a state file record by record.
pub(crate) struct StateFileReader<R: Read> {
    input: CrcReader<R>,
    path: PathBuf,
    kind: FileKind,
    /// Decompressed bytes of the current chunk and the read position in it.
    chunk: Vec<u8>,
    pos: usize,
    packed: Vec<u8>,
    records: u64,
    prev_key: Vec<u8>,
    has_prev: bool,
    finished: bool,
}

impl<R: Read> StateFileReader<R> {
    /// Reads and checks the header: magic, format version, kind, the version the file claims to
    /// hold (it must be the one its name says) and, when `expected_store` is given, the
    /// (operator id, partition id) of the store it was written for (format 2; a format 1 file
    /// does not say).
    pub(crate) fn open(
        input: R,
        path: &Path,
        kind: FileKind,
        expected_version: u64,
        expected_store: Option<(u32, u32)>,
    ) -> Result<Self> {
        let mut reader = Self {
            input: CrcReader {
                inner: input,
                hasher: crc32fast::Hasher::new(),
                offset: 0,
            },
            path: path.to_path_buf(),
            kind,
            chunk: Vec::new(),
            pos: 0,
            packed: Vec::new(),
            records: 0,
            prev_key: Vec::new(),
            has_prev: false,
            finished: false,
        };
        let mut header = [0u8; HEADER_LEN];
        reader.read_raw(&mut header[..V1_HEADER_LEN])?;
        if &header[..8] != MAGIC {
            return Err(reader.corrupt("it does not start with the Sluice state file magic"));
        }
        if header[8] != FORMAT_VERSION && header[8] != 1 {
            return Err(SluiceError::checkpoint(
                class::STATE_STORE_UNSUPPORTED_FORMAT,
                format!(
                    "state file {} has format version {}, but this Sluice reads versions 1 \
                     to {FORMAT_VERSION}; run a Sluice that wrote it, or start the query with a \
                     new checkpoint location",
                    path.display(),
                    header[8]
                ),
            ));
        }
        if header[9] != kind.byte() {
            return Err(reader.corrupt(format!(
                "its header does not mark it as a {} file",
                kind.extension()
            )));
        }
        if header[10] != 0 || header[11] != 0 {
            return Err(reader.corrupt("unknown header flags are set"));
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&header[12..20]);
        let version = u64::from_le_bytes(v);
        if version != expected_version {
            return Err(reader.corrupt(format!(
                "its header says it holds version {version}, not {expected_version}"
            )));
        }
        if header[8] >= 2 {
            reader.read_raw(&mut header[V1_HEADER_LEN..HEADER_LEN])?;
            let word = |i: usize| {
                u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]])
            };
            let (op, part) = (word(20), word(24));
            if let Some((want_op, want_part)) = expected_store.filter(|s| *s != (op, part)) {
                return Err(SluiceError::checkpoint(
                    class::STATE_STORE_CORRUPT,
                    format!(
                        "state file {} was written for operator {op}, partition {part}, but lies \
                         in the folder of operator {want_op}, partition {want_part}: it was copied \
                         or moved from another store, and reading it would give this partition \
                         another partition's keys. Put back this store's own file (from a backup \
                         of state/{want_op}/{want_part}/), or start the query with a new \
                         checkpoint location",
                        path.display()
                    ),
                ));
            }
        }
        Ok(reader)
    }

    /// The next record, or `None` after the end record once the trailer is verified. Keys are
    /// strictly increasing (checked).
    pub(crate) fn next_record(&mut self) -> Result<Option<Record>> {
        if self.finished {
            return Ok(None);
        }
        let mut tag = [0u8; 1];
        self.read_stream(&mut tag)?;
        match tag[0] {
            TAG_END => {
                self.finish()?;
                Ok(None)
            }
            TAG_PUT | TAG_REMOVE => {
                if tag[0] == TAG_REMOVE && self.kind == FileKind::Snapshot {
                    return Err(self.corrupt("a snapshot holds a removal record"));
                }
                let key = self.read_field()?;
                if self.has_prev && key.as_slice() <= self.prev_key.as_slice() {
                    return Err(
                        self.corrupt(format!("record {} is out of key order", self.records + 1))
                    );
                }
                let value = if tag[0] == TAG_PUT {
                    Some(self.read_field()?)
                } else {
                    None
                };
                self.records += 1;
                self.prev_key.clear();
                self.prev_key.extend_from_slice(&key);
                self.has_prev = true;
                Ok(Some(Record { key, value }))
            }
            other => Err(self.corrupt(format!(
                "unknown record tag {other} in record {}",
                self.records + 1
            ))),
        }
    }

    /// After the end record: count, end of data, end of chunks, checksum, end magic, EOF.
    fn finish(&mut self) -> Result<()> {
        let mut count = [0u8; 8];
        self.read_stream(&mut count)?;
        let count = u64::from_le_bytes(count);
        if count != self.records {
            return Err(self.corrupt(format!(
                "its end marker counts {count} records but {} were read",
                self.records
            )));
        }
        if self.pos != self.chunk.len() || self.next_chunk()? {
            return Err(self.corrupt("data follows the end marker"));
        }
        let computed = self.input.hasher.clone().finalize();
        let mut trailer = [0u8; 8];
        self.read_raw(&mut trailer)?;
        let mut stored = [0u8; 4];
        stored.copy_from_slice(&trailer[..4]);
        if &trailer[4..] != END_MAGIC {
            return Err(self.corrupt("its end magic is missing"));
        }
        if u32::from_le_bytes(stored) != computed {
            return Err(self.corrupt("its checksum does not match its content"));
        }
        let mut extra = [0u8; 1];
        loop {
            match self.input.inner.read(&mut extra) {
                Ok(0) => break,
                Ok(_) => return Err(self.corrupt("bytes follow the end of the file")),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err(e)),
            }
        }
        self.finished = true;
        Ok(())
    }

    /// One length-prefixed key or value.
    fn read_field(&mut self) -> Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.read_stream(&mut len)?;
        let len = u32::from_le_bytes(len) as usize;
        let mut out = Vec::with_capacity(len.min(INITIAL_FIELD_RESERVE));
        let mut left = len;
        while left > 0 {
            if self.pos == self.chunk.len() && !self.next_chunk()? {
                return Err(self.corrupt("a record runs past the end of the data"));
            }
            let n = left.min(self.chunk.len() - self.pos);
            out.extend_from_slice(&self.chunk[self.pos..self.pos + n]);
            self.pos += n;
            left -= n;
        }
        Ok(out)
    }

    /// Fills `buf` from the decompressed record stream.
    fn read_stream(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut filled = 0;
        while filled < buf.len() {
            if self.pos == self.chunk.len() && !self.next_chunk()? {
                return Err(self.corrupt("the data ends before the end marker"));
            }
            let n = (buf.len() - filled).min(self.chunk.len() - self.pos);
            buf[filled..filled + n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
            self.pos += n;
            filled += n;
        }
        Ok(())
    }

    /// Loads the next chunk into `self.chunk`; `false` at the end-of-chunks marker.
    fn next_chunk(&mut self) -> Result<bool> {
        let mut codec = [0u8; 1];
        self.read_raw(&mut codec)?;
        if codec[0] == END_OF_CHUNKS {
            return Ok(false);
        }
        let at = self.input.offset - 1;
        let mut header = [0u8; CHUNK_HEADER_LEN - 1];
        self.read_raw(&mut header)?;
        let raw_len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let stored_len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let crc = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if raw_len == 0 || raw_len > CHUNK_MAX {
            return Err(self.corrupt(format!("the chunk at byte {at} claims {raw_len} bytes")));
        }
        let stored_ok = match codec[0] {
            CODEC_RAW => stored_len == raw_len,
            CODEC_LZ4 => {
                stored_len > 0 && stored_len <= lz4_flex::block::get_maximum_output_size(raw_len)
            }
            other => {
                return Err(
                    self.corrupt(format!("the chunk at byte {at} has unknown codec {other}"))
                )
            }
        };
        if !stored_ok {
            return Err(self.corrupt(format!(
                "the chunk at byte {at} has an impossible stored length {stored_len}"
            )));
        }
        let mut packed = std::mem::take(&mut self.packed);
        packed.resize(stored_len, 0);
        let read = self.read_raw(&mut packed);
        self.packed = packed;
        read?;
        if crc32fast::hash(&self.packed) != crc {
            return Err(self.corrupt(format!("the chunk at byte {at} fails its checksum")));
        }
        self.chunk.clear();
        if codec[0] == CODEC_RAW {
            self.chunk.extend_from_slice(&self.packed);
        } else {
            self.chunk.resize(raw_len, 0);
            match lz4_flex::block::decompress_into(&self.packed, &mut self.chunk) {
                Ok(n) if n == raw_len => {}
                _ => {
                    return Err(self.corrupt(format!(
                        "the chunk at byte {at} does not decompress to {raw_len} bytes"
                    )))
                }
            }
        }
        self.pos = 0;
        Ok(true)
    }

    fn read_raw(&mut self, buf: &mut [u8]) -> Result<()> {
        self.input.read_exact(buf).map_err(|e| self.io_err(e))
    }

    fn io_err(&self, e: io::Error) -> SluiceError {
        if e.kind() == ErrorKind::UnexpectedEof {
            corrupt(
                &self.path,
                format!("it is truncated (it ends near byte {})", self.input.offset),
            )
        } else {
            SluiceError::io(
                Fault::Checkpoint,
                format!("reading state file {}", self.path.display()),
                e,
            )
        }
    }

    fn corrupt(&self, detail: impl std::fmt::Display) -> SluiceError {
        corrupt(&self.path, detail)
    }
}

// ------------------------------------------------------------------------------------------
// Merge
// ------------------------------------------------------------------------------------------

/// The live pairs of a version, in key order, merged from a snapshot and the deltas after it
/// (oldest first): for each key the newest file's record wins, and a winning removal drops the
/// key. Memory is one record per input file, whatever the size of the state.
pub(crate) struct MergedPairs<'a, R: Read> {
    readers: Vec<StateFileReader<R>>,
    heads: Vec<Option<Record>>,
    started: bool,
    stop: Option<&'a AtomicBool>,
    produced: u64,
}

impl<'a, R: Read> MergedPairs<'a, R> {
    /// `readers` oldest first (a snapshot, if any, comes first). `stop`, when set, aborts the
    /// merge with an internal error (used to stop background maintenance on shutdown).
    pub(crate) fn new(readers: Vec<StateFileReader<R>>, stop: Option<&'a AtomicBool>) -> Self {
        let heads = readers.iter().map(|_| None).collect();
        Self {
            readers,
            heads,
            started: false,
            stop,
            produced: 0,
        }
    }

    /// The next live pair, or `None` when every input is exhausted and verified.
    pub(crate) fn next_pair(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if !self.started {
            for i in 0..self.readers.len() {
                self.heads[i] = self.readers[i].next_record()?;
            }
            self.started = true;
        }
        loop {
            self.produced += 1;
            if self.produced.is_multiple_of(4096) {
                if let Some(stop) = self.stop {
                    if stop.load(AtomicOrdering::Relaxed) {
                        return Err(SluiceError::internal("state merge stopped on shutdown"));
                    }
                }
            }
            // The smallest key; among equal keys the newest file (highest index) wins.
            let mut best: Option<usize> = None;
            for (i, head) in self.heads.iter().enumerate() {
                let Some(rec) = head else { continue };
                best = match best {
                    None => Some(i),
                    Some(b) => match self.heads[b].as_ref().map(|r| rec.key.cmp(&r.key)) {
                        Some(Ordering::Greater) => Some(b),
                        _ => Some(i),
                    },
                };
            }
            let Some(best) = best else { return Ok(None) };
            let Some(winner) = self.heads[best].take() else {
                return Ok(None);
            };
            for i in 0..self.heads.len() {
                let same = match &self.heads[i] {
                    Some(r) => r.key == winner.key,
                    None => i == best,
                };
                if same {
                    self.heads[i] = self.readers[i].next_record()?;
                }
            }
            if let Some(value) = winner.value {
                return Ok(Some((winner.key, value)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(kind: FileKind, version: u64, compress: bool, recs: &[Record]) -> Vec<u8> {
        let mut w = StateFileWriter::new(Vec::new(), kind, version, (0, 0), compress).unwrap();
        for r in recs {
            match &r.value {
                Some(v) => w.put(&r.key, v).unwrap(),
                None => w.remove(&r.key).unwrap(),
            }
        }
        w.finish().unwrap()
    }

    fn read(bytes: &[u8], kind: FileKind, version: u64) -> Result<Vec<Record>> {
        let mut r =
            StateFileReader::open(bytes, Path::new("/x/3.delta"), kind, version, Some((0, 0)))?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push(rec);
        }
        Ok(out)
    }

    fn put(k: &[u8], v: &[u8]) -> Record {
        Record {
            key: k.to_vec(),
            value: Some(v.to_vec()),
        }
    }

    fn del(k: &[u8]) -> Record {
        Record {
            key: k.to_vec(),
            value: None,
        }
    }

    /// Deterministic pseudo-random bytes (incompressible).
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn round_trips_puts_removes_and_empty_fields() {
        let recs = vec![put(b"", b""), put(b"a", b"1"), del(b"b"), put(b"c", b"")];
        for compress in [false, true] {
            let bytes = write(FileKind::Delta, 3, compress, &recs);
            assert_eq!(&bytes[..8], MAGIC);
            assert_eq!(&bytes[bytes.len() - 4..], END_MAGIC);
            assert_eq!(read(&bytes, FileKind::Delta, 3).unwrap(), recs);
        }
    }

    #[test]
    fn empty_file_is_small_and_valid() {
        let bytes = write(FileKind::Delta, 1, true, &[]);
        // header + one chunk holding the 9-byte end record + end byte + trailer
        assert_eq!(bytes.len(), HEADER_LEN + CHUNK_HEADER_LEN + 9 + 1 + 8);
        assert!(read(&bytes, FileKind::Delta, 1).unwrap().is_empty());
    }

    #[test]
    fn large_fields_span_chunks_compressed_and_raw() {
        let big_random = noise(300_000, 7);
        let big_repetitive = vec![b'z'; 500_000];
        let recs = vec![
            put(b"k1", &big_random),
            put(b"k2", &big_repetitive),
            put(&noise(100_000, 9), b"v"),
        ];
        let mut sorted = recs.clone();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        let bytes = write(FileKind::Snapshot, 9, true, &sorted);
        // The repetitive value compresses; the random one does not grow much.
        assert!(bytes.len() < 300_000 + 100_000 + 100_000, "{}", bytes.len());
        assert_eq!(read(&bytes, FileKind::Snapshot, 9).unwrap(), sorted);
    }

    #[test]
    fn writer_refuses_unsorted_or_duplicate_keys_and_snapshot_removals() {
        let mut w = StateFileWriter::new(Vec::new(), FileKind::Delta, 1, (0, 0), false).unwrap();
        w.put(b"b", b"1").unwrap();
        assert_eq!(
            w.put(b"a", b"1").unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert_eq!(w.remove(b"b").unwrap_err().kind(), ErrorKind::InvalidInput);
        let mut s = StateFileWriter::new(Vec::new(), FileKind::Snapshot, 1, (0, 0), false).unwrap();
        assert_eq!(s.remove(b"a").unwrap_err().kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn every_truncation_is_reported_as_corrupt() {
        let recs: Vec<Record> = (0..50u32)
            .map(|i| put(&i.to_be_bytes(), format!("value-{i}").as_bytes()))
            .collect();
        for compress in [false, true] {
            let bytes = write(FileKind::Delta, 3, compress, &recs);
            for len in 0..bytes.len() {
                let err = read(&bytes[..len], FileKind::Delta, 3).unwrap_err();
                assert_eq!(err.class(), "STATE_STORE_CORRUPT", "len {len}: {err}");
                assert!(err.message().contains("/x/3.delta"), "{err}");
            }
        }
    }

    #[test]
    fn every_flipped_byte_is_an_error() {
        let recs: Vec<Record> = (0..20u32)
            .map(|i| put(&i.to_be_bytes(), b"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"))
            .collect();
        let bytes = write(FileKind::Delta, 3, true, &recs);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x5A;
            let err = read(&bad, FileKind::Delta, 3).unwrap_err();
            let expected = if i == 8 {
                "STATE_STORE_UNSUPPORTED_FORMAT"
            } else {
                "STATE_STORE_CORRUPT"
            };
            assert_eq!(err.class(), expected, "byte {i}: {err}");
        }
    }

    #[test]
    fn trailing_garbage_wrong_kind_and_wrong_version_are_corrupt() {
        let bytes = write(FileKind::Delta, 3, false, &[put(b"a", b"1")]);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            read(&longer, FileKind::Delta, 3).unwrap_err().class(),
            "STATE_STORE_CORRUPT"
        );
        let e = read(&bytes, FileKind::Snapshot, 3).unwrap_err();
        assert_eq!(e.class(), "STATE_STORE_CORRUPT");
        let e = read(&bytes, FileKind::Delta, 4).unwrap_err();
        assert!(e.message().contains("version 3, not 4"), "{e}");
    }

    #[test]
    fn merge_takes_newest_record_per_key_and_drops_removed_keys() {
        let snap = write(
            FileKind::Snapshot,
            2,
            true,
            &[put(b"a", b"a2"), put(b"b", b"b2"), put(b"c", b"c2")],
        );
        let d3 = write(
            FileKind::Delta,
            3,
            true,
            &[del(b"a"), put(b"b", b"b3"), put(b"d", b"d3")],
        );
        let d4 = write(
            FileKind::Delta,
            4,
            true,
            &[put(b"a", b"a4"), del(b"d"), del(b"e")],
        );
        let readers = vec![
            StateFileReader::open(
                &snap[..],
                Path::new("2.snapshot"),
                FileKind::Snapshot,
                2,
                None,
            )
            .unwrap(),
            StateFileReader::open(&d3[..], Path::new("3.delta"), FileKind::Delta, 3, None).unwrap(),
            StateFileReader::open(&d4[..], Path::new("4.delta"), FileKind::Delta, 4, None).unwrap(),
        ];
        let mut m = MergedPairs::new(readers, None);
        let mut out = Vec::new();
        while let Some((k, v)) = m.next_pair().unwrap() {
            out.push((String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()));
        }
        let expect: Vec<(String, String)> = [("a", "a4"), ("b", "b3"), ("c", "c2")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(out, expect);
    }
}
