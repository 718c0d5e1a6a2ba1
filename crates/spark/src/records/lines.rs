//! Lines as Hadoop's `LineRecordReader` splits them, and where a piece of a file stands in it.

use crate::error::Result;

/// Splits text in lines as Hadoop's `LineRecordReader` does: at `\n`, `\r\n` or `\r` (or at a
/// custom separator); a final terminator does not start an extra empty line. Calls
/// `f(line_number, line)`.
pub fn for_each_line<'t>(
    text: &'t str,
    line_sep: Option<&str>,
    f: impl FnMut(usize, &'t str) -> Result<()>,
) -> Result<()> {
    for_each_line_from(text, line_sep, 0, f).map(|_| ())
}

/// [`for_each_line`] for a piece of a file that starts after its line `before`: the first
/// line of `text` is line `before + 1`. Returns the number of the last line (`before` for an
/// empty text).
pub fn for_each_line_from<'t>(
    text: &'t str,
    line_sep: Option<&str>,
    before: usize,
    mut f: impl FnMut(usize, &'t str) -> Result<()>,
) -> Result<usize> {
    let mut n = before;
    for (start, end) in LineEnds::new(text.as_bytes(), line_sep.map(str::as_bytes)) {
        n += 1;
        f(n, &text[start..end])?;
    }
    Ok(n)
}

/// The number of lines [`for_each_line_from`] finds in `text` (the bytes of a piece), counted
/// without parsing them: a piece's first line number is the one after the pieces before it.
pub fn count_lines(text: &[u8], line_sep: Option<&[u8]>) -> usize {
    LineEnds::new(text, line_sep).count()
}

/// The lines of a text as Hadoop's `LineRecordReader` cuts them, as byte ranges (terminators
/// left out): at `\n`, `\r\n` or `\r`, or at a custom separator; a final terminator does not
/// start an extra empty line.
struct LineEnds<'t> {
    text: &'t [u8],
    sep: Option<&'t [u8]>,
    pos: usize,
}

impl<'t> LineEnds<'t> {
    fn new(text: &'t [u8], sep: Option<&'t [u8]>) -> Self {
        // An empty separator would match everywhere: Hadoop's line ends instead.
        let sep = sep.filter(|s| !s.is_empty());
        LineEnds { text, sep, pos: 0 }
    }
}

impl Iterator for LineEnds<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let (b, start) = (self.text, self.pos);
        if start >= b.len() {
            return None;
        }
        let (end, next) = match self.sep {
            Some(sep) => match memchr::memmem::find(&b[start..], sep) {
                Some(k) => (start + k, start + k + sep.len()),
                None => (b.len(), b.len()),
            },
            None => match memchr::memchr2(b'\n', b'\r', &b[start..]) {
                Some(k) => {
                    let end = start + k;
                    let crlf = b[end] == b'\r' && b.get(end + 1) == Some(&b'\n');
                    (end, end + 1 + usize::from(crlf))
                }
                None => (b.len(), b.len()),
            },
        };
        self.pos = next;
        Some((start, end))
    }
}

/// Where a piece of a file's text stands in its file, and the state a reader carries from one
/// piece of the file to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceState {
    /// Lines of the file before the piece (its first line is line `lines_before + 1`).
    pub lines_before: usize,
    /// CSV `header=true`: the file's header line has not been seen yet.
    pub header_pending: bool,
}

impl PieceState {
    /// The state at a file's start (`header`: CSV `header=true`).
    pub fn file_start(header: bool) -> Self {
        PieceState {
            lines_before: 0,
            header_pending: header,
        }
    }
}
