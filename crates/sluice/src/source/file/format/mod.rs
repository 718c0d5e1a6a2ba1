//! Reading files into Arrow record batches: a piece at a time ([`read_files_lazy`];
//! [`read_file`] the same way into one [`Assembler`]), line-based text (JSON lines, CSV and text
//! without `multiLine`/`wholetext`) through the file's (decompressing) stream, about
//! `chunk_bytes` of whole lines at a time, the line count and the CSV header state carried from
//! piece to piece; a file parsed as one document (`multiLine`, `wholetext`) whole; Parquet as
//! the reader decodes its batches. The records themselves are parsed by `sluice-spark`'s
//! `records` (Spark's JSON/CSV rules, parse modes, the corrupt-record column).

pub(crate) mod parquet;

pub(crate) use sluice_spark::records::*;

use crate::error::class;
use crate::sync::MutexExt;
use sluice_common::threads::on_threads;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::RecordBatch;

use crate::error::{Fault, Result, SluiceError};

/// What to say when a file listed for reading has vanished.
pub(crate) fn file_not_found(uri: &str, context: &str) -> SluiceError {
    SluiceError::input(
        class::FILE_NOT_FOUND,
        format!(
            "the file {uri} does not exist any more, but it is part of {context}. Files must \
             not be deleted or moved out of a streaming source directory before the query has \
             processed them: restore the file, set the option ignoreMissingFiles=true to skip \
             missing files, or restart the query with a new checkpoint location"
        ),
    )
}

/// Reads `files` (URIs, in order) into rows, decoding on up to `available_parallelism` threads:
/// each thread takes a contiguous run of files with its own [`Assembler`], and the results are
/// put back together in file order, so the rows (and the first error, for FAILFAST) are the
/// same as reading the files one after another.
pub(crate) fn read_files_parallel(
    opts: &ParseOptions,
    files: &[&str],
    context: &str,
    to_path: impl Fn(&str) -> PathBuf + Sync,
) -> Result<AssembledRows> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(files.len()).max(1);
    // Fewer files than cores: each file's pieces are parsed on the cores left over.
    let fan_out = (cores / threads).max(1);
    let read_run = |run: &[&str]| -> Result<AssembledRows> {
        let mut asm = Assembler::new(opts)?;
        for uri in run {
            read_file_into(&to_path(uri), uri, context, &mut asm, fan_out)?;
        }
        asm.finish()
    };
    if threads == 1 {
        return read_run(files);
    }
    // Contiguous runs of about equal size.
    let per = files.len().div_ceil(threads);
    let panicked = format!("a file decoding thread panicked while reading {context}");
    let results = on_threads(files.chunks(per), &panicked, |_, run| read_run(run));
    let mut all = AssembledRows {
        batches: Vec::new(),
        malformed: 0,
        dropped: 0,
        files_read: 0,
    };
    for r in results {
        let r = r?;
        all.batches.extend(r.batches);
        all.malformed += r.malformed;
        all.dropped += r.dropped;
        all.files_read += r.files_read;
    }
    Ok(all)
}

/// Reads one file into `asm`. `uri` names the file in messages; `context` says what the file
/// is part of (e.g. "batch range (2, 3] of FileStreamSource[file:/in]").
#[cfg(test)]
pub(crate) fn read_file(
    path: &Path,
    uri: &str,
    context: &str,
    asm: &mut Assembler<'_>,
) -> Result<()> {
    read_file_into(path, uri, context, asm, 1)
}

/// Reads one file into `asm` (`uri` names it in messages, `context` says what it is part of),
/// `fan_out` pieces at a time.
fn read_file_into(
    path: &Path,
    uri: &str,
    context: &str,
    asm: &mut Assembler<'_>,
    fan_out: usize,
) -> Result<()> {
    if let Some(mut file) = FileReader::open(asm.opts, path, uri, context, CHUNK_BYTES) {
        while file.step(asm, fan_out)? {}
    }
    Ok(())
}

/// How much file text a read holds at a time (a longer record is held whole).
pub(crate) const CHUNK_BYTES: usize = 8 << 20;

/// Counters a lazy read fills in as it produces batches (read them after the iterator ended).
#[derive(Debug, Default)]
pub(crate) struct ReadCounters {
    /// Rows in the batches returned.
    pub rows: AtomicU64,
    /// As [`AssembledRows::malformed`].
    pub malformed: AtomicU64,
    /// As [`AssembledRows::dropped`].
    pub dropped: AtomicU64,
    /// As [`AssembledRows::files_read`].
    pub files_read: AtomicU64,
}

/// Reads `files` (URIs, in order) lazily: the same rows, in the same order, with the same
/// errors, bad-record counts and `ignoreMissingFiles` / `ignoreCorruptFiles` behaviour as
/// [`read_file`] over each file in turn, but holding about `chunk_bytes` of file text at a time
/// (a record longer than that is held whole; the formats that parse a file as one document,
/// JSON and CSV with `multiLine`, text with `wholetext`, hold one file). Parquet files give
/// their batches as the reader decodes them. Each batch has at most [`BATCH_ROWS`] rows and
/// comes from one piece of one file. After an error the iterator ends.
pub(crate) fn read_files_lazy(
    opts: Arc<ParseOptions>,
    files: Vec<String>,
    context: String,
    to_path: fn(&str) -> PathBuf,
    chunk_bytes: usize,
    fan_out: usize,
    counters: Arc<ReadCounters>,
) -> Box<dyn Iterator<Item = Result<RecordBatch>> + Send> {
    Box::new(LazyRead {
        opts,
        files: files.into_iter(),
        context,
        to_path,
        chunk_bytes,
        fan_out,
        counters,
        current: None,
        ready: VecDeque::new(),
        ended: false,
    })
}

struct LazyRead {
    opts: Arc<ParseOptions>,
    files: std::vec::IntoIter<String>,
    context: String,
    to_path: fn(&str) -> PathBuf,
    chunk_bytes: usize,
    /// How many pieces of a line-based file are parsed at a time (on threads of their own).
    fan_out: usize,
    counters: Arc<ReadCounters>,
    /// The file being read.
    current: Option<FileReader>,
    /// Batches of the last piece read, not returned yet.
    ready: VecDeque<RecordBatch>,
    /// All files read, or an error returned.
    ended: bool,
}

impl LazyRead {
    /// Reads the next piece of the current file (or opens the next file) into `ready`; false
    /// when every file was read.
    fn advance(&mut self) -> Result<bool> {
        let opts = self.opts.clone();
        let mut asm = Assembler::new(&opts)?;
        match &mut self.current {
            Some(file) => {
                if !file.step(&mut asm, self.fan_out)? {
                    self.current = None;
                }
            }
            None => {
                let Some(uri) = self.files.next() else {
                    return Ok(false);
                };
                let path = (self.to_path)(&uri);
                self.current =
                    FileReader::open(&opts, &path, &uri, &self.context, self.chunk_bytes);
            }
        }
        let out = asm.finish()?;
        let c = &self.counters;
        c.malformed.fetch_add(out.malformed, Ordering::Relaxed);
        c.dropped.fetch_add(out.dropped, Ordering::Relaxed);
        c.files_read.fetch_add(out.files_read, Ordering::Relaxed);
        self.ready.extend(out.batches);
        Ok(true)
    }
}

impl Iterator for LazyRead {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                self.counters
                    .rows
                    .fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                return Some(Ok(b));
            }
            if self.ended {
                return None;
            }
            match self.advance() {
                Ok(true) => {}
                Ok(false) => {
                    self.ended = true;
                    return None;
                }
                Err(e) => {
                    self.ended = true;
                    self.current = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// One file being read, a piece at a time.
struct FileReader {
    uri: String,
    context: String,
    kind: FileKind,
}

enum FileKind {
    /// Lines, a piece of about `chunk_bytes` at a time.
    Lines(Box<LineReader>),
    /// A file parsed as one document (JSON and CSV with `multiLine`, text with `wholetext`).
    Whole(TextSource),
    /// Parquet batches, and whether the file was counted as read.
    Parquet(Box<parquet::ParquetFile>, bool),
    /// A file that could not be opened: the error, at the first step.
    Failed(SluiceError),
    Done,
}

/// What opening a file failed with: a missing file, or another error.
fn open_failed(opts: &ParseOptions, uri: &str, context: &str, e: std::io::Error) -> Result<()> {
    if e.kind() == ErrorKind::NotFound {
        if opts.ignore_missing_files {
            log::warn!("skipping the missing file {uri} (ignoreMissingFiles=true)");
            return Ok(());
        }
        return Err(file_not_found(uri, context));
    }
    unreadable(opts, uri, context, e)
}

/// A file that could not be read (not a decoding error): skipped with `ignoreCorruptFiles`.
fn unreadable(opts: &ParseOptions, uri: &str, context: &str, e: std::io::Error) -> Result<()> {
    if opts.ignore_corrupt_files {
        log::warn!("skipping the unreadable file {uri}: {e} (ignoreCorruptFiles=true)");
        return Ok(());
    }
    Err(SluiceError::io(
        Fault::Connector,
        format!(
            "reading {uri}, part of {context} (make the file readable, or set the option \
             ignoreCorruptFiles=true to skip files that cannot be read)"
        ),
        e,
    ))
}

impl FileReader {
    /// Opens a file of `opts`'s format. A file that cannot be opened gives a reader that fails
    /// at its first step (or, when the options skip such files, that reads nothing).
    fn open(
        opts: &ParseOptions,
        path: &Path,
        uri: &str,
        context: &str,
        chunk_bytes: usize,
    ) -> Option<FileReader> {
        let kind = match &opts.kind {
            FormatKind::Parquet => match parquet::open(opts, path, uri, context) {
                Ok(Some(f)) => FileKind::Parquet(Box::new(f), false),
                Ok(None) => return None,
                Err(e) => FileKind::Failed(e),
            },
            _ => match TextSource::open(path) {
                Ok(src) => {
                    let whole = match &opts.kind {
                        FormatKind::Json(j) => j.multi_line,
                        FormatKind::Csv(c) => c.multi_line,
                        FormatKind::Text(t) => t.whole_text,
                        FormatKind::Parquet => true,
                    };
                    if whole {
                        FileKind::Whole(src)
                    } else {
                        FileKind::Lines(Box::new(LineReader::new(opts, src, chunk_bytes)))
                    }
                }
                Err(e) => match open_failed(opts, uri, context, e) {
                    Ok(()) => return None,
                    Err(e) => FileKind::Failed(e),
                },
            },
        };
        Some(FileReader {
            uri: uri.to_string(),
            context: context.to_string(),
            kind,
        })
    }

    /// Reads the next piece of the file into `asm`; false once the file has been read (its
    /// last piece may have been read by this call).
    /// With `fan_out` > 1, a line-based file parses that many pieces at a time.
    fn step(&mut self, asm: &mut Assembler<'_>, fan_out: usize) -> Result<bool> {
        let opts = asm.opts;
        let (uri, context) = (self.uri.as_str(), self.context.as_str());
        match std::mem::replace(&mut self.kind, FileKind::Done) {
            FileKind::Done => Ok(false),
            FileKind::Failed(e) => Err(e),
            FileKind::Parquet(mut f, counted) => {
                if !counted {
                    asm.files_read += 1;
                }
                match f.next_batch()? {
                    Some(batch) => {
                        asm.push_batch(batch)?;
                        self.kind = FileKind::Parquet(f, true);
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
            FileKind::Whole(mut src) => {
                let mut bytes = Vec::new();
                if let Err(e) = src.reader.read_to_end(&mut bytes) {
                    if !src.is_damage() {
                        unreadable(opts, uri, context, e)?;
                        return Ok(false);
                    }
                    src.keep_damaged(opts, uri, &e)?;
                    // Nothing of a document before its damaged part is kept.
                    bytes.clear();
                }
                asm.files_read += 1;
                let bytes = bytes.strip_prefix(BOM).unwrap_or(&bytes);
                let text = utf8_lossy(bytes);
                // A CSV file parsed whole (multiLine) still starts with its header.
                let header = matches!(&opts.kind, FormatKind::Csv(c) if c.header);
                parse_piece(&text, uri, asm, &mut PieceState::file_start(header))?;
                Ok(false)
            }
            FileKind::Lines(mut lines) => {
                let more = lines.step(uri, context, asm, fan_out)?;
                if more {
                    self.kind = FileKind::Lines(lines);
                }
                Ok(more)
            }
        }
    }
}

/// The UTF-8 byte order mark, dropped at the start of a file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// A file's bytes, decompressed when its extension names a codec.
struct TextSource {
    reader: Box<dyn Read + Send>,
    codec: Option<super::compression::Codec>,
    /// Set when reading the file itself failed (rather than decoding it).
    file_failed: Arc<AtomicBool>,
}

/// A reader that notes its failures (to tell a file that cannot be read from a damaged one).
struct NoteFailure<R> {
    inner: R,
    failed: Arc<AtomicBool>,
}

impl<R: Read> Read for NoteFailure<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let r = self.inner.read(buf);
        if matches!(&r, Err(e) if e.kind() != ErrorKind::Interrupted) {
            self.failed.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl TextSource {
    fn open(path: &Path) -> std::io::Result<TextSource> {
        let file = crate::storage::open(path)?;
        let file_failed = Arc::new(AtomicBool::new(false));
        let raw = NoteFailure {
            inner: file,
            failed: file_failed.clone(),
        };
        // gzip, bzip2, zstd, .. by the file's extension, as Hadoop's codec factory picks them.
        let codec = super::compression::Codec::of(path);
        let reader: Box<dyn Read + Send> = match codec {
            Some(c) => c.reader(Box::new(raw)),
            None => Box::new(raw),
        };
        Ok(TextSource {
            reader,
            codec,
            file_failed,
        })
    }

    /// Whether the error reading failed with was the decoder's (a damaged compressed file),
    /// not the file's own.
    fn is_damage(&self) -> bool {
        self.codec.is_some() && !self.file_failed.load(Ordering::Relaxed)
    }

    /// Decoding failed with `e`: the error, or with `ignoreCorruptFiles` a warning (the records
    /// before the damaged part are kept, as Spark keeps them, and the rest of the file skipped).
    fn keep_damaged(&self, opts: &ParseOptions, uri: &str, e: &std::io::Error) -> Result<()> {
        let Some(codec) = self.codec else {
            return Err(SluiceError::internal(format!(
                "{uri}: a decoding error without a codec"
            )));
        };
        let err = codec.damaged(uri, e);
        if !opts.ignore_corrupt_files {
            return Err(err);
        }
        log::warn!(
            "{} (ignoreCorruptFiles=true: keeping the records before the damaged part)",
            err.message()
        );
        Ok(())
    }
}

/// Text buffers of line-based reads that ended, for the next reads: a buffer used again is not
/// faulted in and zeroed by the kernel again (that was a tenth of a read's time). At most two
/// per core (a reader holds its piece and the next), each about a piece of the memory budget.
static TEXT_BUFFERS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// An empty text buffer, one used before if there is one.
fn text_buffer() -> Vec<u8> {
    TEXT_BUFFERS.lock_unpoisoned().pop().unwrap_or_default()
}

/// The largest text buffer kept: twice the largest piece (a buffer grown for a record longer
/// than that is given back to the allocator).
const MAX_KEPT_TEXT_BUFFER: usize = 128 << 20;

/// Keeps `buf` for a later read, if fewer than two per core are kept.
fn keep_text_buffer(mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > MAX_KEPT_TEXT_BUFFER {
        return;
    }
    buf.clear();
    let most = 2 * std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut kept = TEXT_BUFFERS.lock_unpoisoned();
    if kept.len() < most {
        kept.push(buf);
    }
}

impl Drop for LineReader {
    fn drop(&mut self) {
        keep_text_buffer(std::mem::take(&mut self.buf));
        keep_text_buffer(std::mem::take(&mut self.spare));
    }
}

/// A line-based file read a piece at a time: the bytes are read into a buffer of about
/// `chunk_bytes`, and the whole lines in it are parsed while the rest (a line cut off) waits for
/// the next piece. Pieces end right after a line terminator, so they split neither a `\r\n`,
/// nor a custom `lineSep`, nor a UTF-8 character.
struct LineReader {
    src: TextSource,
    /// A custom line separator (`lineSep`), else Hadoop's `\n`, `\r\n` and `\r`.
    sep: Option<Vec<u8>>,
    chunk_bytes: usize,
    /// How many bytes to read before cutting a piece (more when a line is longer).
    target: usize,
    buf: Vec<u8>,
    /// An empty buffer to read the next piece into (the last piece's, once parsed).
    spare: Vec<u8>,
    /// How much of `buf` was searched for line ends.
    scanned: usize,
    /// The end of the last whole line found in `buf` (0: none).
    cut: usize,
    /// The byte order mark was dealt with.
    started: bool,
    eof: bool,
    /// Some of the file was parsed already.
    parsed: bool,
    at: PieceState,
}

impl LineReader {
    fn new(opts: &ParseOptions, src: TextSource, chunk_bytes: usize) -> Self {
        let (sep, header) = match &opts.kind {
            FormatKind::Json(j) => (j.line_sep.clone(), false),
            FormatKind::Csv(c) => (c.line_sep.clone(), c.header),
            FormatKind::Text(t) => (t.line_sep.clone(), false),
            FormatKind::Parquet => (None, false),
        };
        let chunk_bytes = chunk_bytes.max(1);
        LineReader {
            src,
            sep: sep.map(String::into_bytes),
            chunk_bytes,
            target: chunk_bytes,
            buf: text_buffer(),
            spare: Vec::new(),
            scanned: 0,
            cut: 0,
            started: false,
            eof: false,
            parsed: false,
            at: PieceState::file_start(header),
        }
    }

    /// Reads and parses the next piece; false once the file has ended.
    /// Reads and parses the next piece, or (`fan_out` > 1) up to `fan_out` pieces at the same
    /// time on threads of their own, each from the line the one before it ends at (counted
    /// before parsing: [`count_lines`]); false once the file has ended. The rows, counts and
    /// first error are those of parsing the pieces one after another.
    fn step(
        &mut self,
        uri: &str,
        context: &str,
        asm: &mut Assembler<'_>,
        fan_out: usize,
    ) -> Result<bool> {
        // A CSV header still to come is found by parsing: pieces after it may fan out.
        if fan_out <= 1 || self.at.header_pending || self.sep.as_ref().is_some_and(Vec::is_empty) {
            return match self.next_piece(uri, context, asm)? {
                Some((piece, more)) => {
                    self.parse(piece, uri, asm)?;
                    Ok(more)
                }
                None => Ok(false),
            };
        }
        let mut pieces: Vec<(Vec<u8>, PieceState)> = Vec::with_capacity(fan_out);
        let mut more = true;
        let mut cut_error = None;
        while more && pieces.len() < fan_out {
            match self.next_piece(uri, context, asm) {
                Ok(Some((piece, m))) => {
                    let at = self.at;
                    self.at.lines_before += count_lines(&piece, self.sep.as_deref());
                    pieces.push((piece, at));
                    more = m;
                }
                Ok(None) => more = false,
                Err(e) => {
                    // The pieces cut before the error are parsed first (their errors come
                    // first, as they would one piece at a time).
                    cut_error = Some(e);
                    more = false;
                }
            }
        }
        let opts = asm.opts;
        let parse_one = |piece: &[u8], mut at: PieceState| -> Result<(AssembledRows, usize)> {
            let mut part = Assembler::new(opts)?;
            parse_piece(&utf8_lossy(piece), uri, &mut part, &mut at)?;
            Ok((part.finish()?, at.lines_before))
        };
        let panicked = format!("a thread parsing a piece of {uri} panicked");
        let parsed = on_threads(pieces.iter(), &panicked, |_, (p, at)| parse_one(p, *at));
        for (i, result) in parsed.into_iter().enumerate() {
            let (rows, lines_after) = result?;
            let expected = match pieces.get(i + 1) {
                Some((_, next)) => next.lines_before,
                None => self.at.lines_before,
            };
            if lines_after != expected {
                return Err(SluiceError::internal(format!(
                    "{uri}: a piece parsed to line {lines_after}, but {expected} lines were \
                     counted in it"
                )));
            }
            asm.absorb(rows)?;
        }
        let mut buffers = pieces.into_iter().map(|(buf, _)| buf);
        if let Some(mut buf) = buffers.next() {
            buf.clear();
            self.spare = buf;
        }
        buffers.for_each(keep_text_buffer);
        match cut_error {
            Some(e) => Err(e),
            None => Ok(more),
        }
    }

    /// Cuts the next piece off the file: the piece and whether the file goes on after it, or
    /// None when the file ended without another piece (an unreadable part skipped).
    fn next_piece(
        &mut self,
        uri: &str,
        context: &str,
        asm: &mut Assembler<'_>,
    ) -> Result<Option<(Vec<u8>, bool)>> {
        loop {
            if self.cut > 0 && self.buf.len() >= self.target && !self.eof {
                // The cut-off line starts the next piece's buffer (of its full size, read into
                // without moving).
                let mut rest = std::mem::take(&mut self.spare);
                if rest.capacity() == 0 {
                    rest = text_buffer();
                }
                rest.reserve(self.chunk_bytes.max(self.buf.len() - self.cut));
                rest.extend_from_slice(&self.buf[self.cut..]);
                self.buf.truncate(self.cut);
                let piece = std::mem::replace(&mut self.buf, rest);
                self.scanned -= self.cut;
                self.cut = 0;
                self.target = self.chunk_bytes;
                self.parsed = true;
                return Ok(Some((piece, true)));
            }
            if self.eof {
                // The last piece: the rest of the file.
                let piece = std::mem::take(&mut self.buf);
                asm.files_read += 1;
                self.parsed = true;
                return Ok(Some((piece, false)));
            }
            if self.buf.len() >= self.target {
                // No whole line yet: a record longer than a piece is read whole.
                self.target = self.buf.len() + self.chunk_bytes;
            }
            if let Err(e) = self.fill() {
                self.begin(true);
                let opts = asm.opts;
                if !self.src.is_damage() {
                    if self.parsed && opts.ignore_corrupt_files {
                        // What was parsed stays (rows may be out already).
                        log::warn!(
                            "stopping at an unreadable part of {uri}: {e} \
                             (ignoreCorruptFiles=true: keeping the records read before it)"
                        );
                        asm.files_read += 1;
                        return Ok(None);
                    }
                    // A file that cannot be read is skipped whole, or an error.
                    unreadable(opts, uri, context, e)?;
                    return Ok(None);
                }
                self.src.keep_damaged(opts, uri, &e)?;
                // The whole lines before the damaged part. (The whole-file reader kept the text
                // up to the last `\n`: the same lines, unless lines end with a lone `\r` or a
                // custom `lineSep` after the last `\n`, which are now kept too, as Spark does.)
                self.buf.truncate(self.cut);
                let piece = std::mem::take(&mut self.buf);
                asm.files_read += 1;
                self.parsed = true;
                return Ok(Some((piece, false)));
            }
            self.begin(false);
        }
    }

    /// Parses a piece, then keeps its buffer for the next one.
    fn parse(&mut self, mut piece: Vec<u8>, uri: &str, asm: &mut Assembler<'_>) -> Result<()> {
        let parsed = parse_piece(&utf8_lossy(&piece), uri, asm, &mut self.at);
        piece.clear();
        self.spare = piece;
        parsed
    }

    /// Reads into `buf` until it holds `target` bytes or the file ends (`eof`). On an error,
    /// the bytes read before it are in `buf`.
    fn fill(&mut self) -> std::io::Result<()> {
        let want = self.target.saturating_sub(self.buf.len()).max(1);
        let n = (&mut self.src.reader)
            .take(want as u64)
            .read_to_end(&mut self.buf)?;
        if n < want {
            self.eof = true;
        }
        Ok(())
    }

    /// Drops the byte order mark once the file's first bytes are in (or all of them, `all_in`),
    /// then finds line ends.
    fn begin(&mut self, all_in: bool) {
        if !self.started {
            if self.buf.len() < BOM.len() && !self.eof && !all_in {
                return;
            }
            self.started = true;
            if self.buf.starts_with(BOM) {
                self.buf.drain(..BOM.len());
            }
        }
        self.scan();
    }

    /// Finds the end of the last whole line in `buf` (past what was searched before).
    fn scan(&mut self) {
        let b = &self.buf;
        match &self.sep {
            // Separators are found left to right, as `for_each_line` splits: the search goes on
            // from the end of the last one found.
            Some(sep) => {
                let Some(&first) = sep.first() else {
                    return;
                };
                let mut i = self.scanned;
                while i + sep.len() <= b.len() {
                    match b[i..=b.len() - sep.len()].iter().position(|&c| c == first) {
                        None => {
                            i = b.len() + 1 - sep.len();
                            break;
                        }
                        Some(k) => {
                            let at = i + k;
                            if b[at..].starts_with(sep) {
                                self.cut = at + sep.len();
                                i = self.cut;
                            } else {
                                i = at + 1;
                            }
                        }
                    }
                }
                self.scanned = self.scanned.max(i.min(b.len()));
            }
            // `\n`, `\r\n` or `\r`: the last one ends the last whole line, but a `\r` at the
            // end may be the start of a `\r\n`.
            None => {
                let end = if b.last() == Some(&b'\r') {
                    b.len() - 1
                } else {
                    b.len()
                };
                if let Some(k) = b[self.scanned.min(end)..end]
                    .iter()
                    .rposition(|&c| c == b'\n' || c == b'\r')
                {
                    self.cut = self.scanned.min(end) + k + 1;
                }
                self.scanned = end;
            }
        }
    }
}

#[cfg(test)]
mod lazy_tests;
