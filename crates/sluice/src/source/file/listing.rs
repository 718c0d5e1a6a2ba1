//! Where a file source looks for files: a directory (or a glob in its last component, or a single
//! file), how it lists them (hidden files skipped, modification times in milliseconds), and the
//! `file:///` URIs the source log records.

use crate::error::class;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use crate::error::{Fault, Result, SluiceError};

/// The files a source path designates.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    /// The directory that is listed.
    pub dir: PathBuf,
    pub filter: NameFilter,
    /// `file:/abs/path` (Hadoop's qualified path), for descriptions.
    pub qualified: String,
}

#[derive(Debug, Clone)]
pub(crate) enum NameFilter {
    /// Every visible file of the directory.
    All,
    /// The files whose name matches a glob (`dir/*.json`).
    Glob(Glob),
    /// Exactly one file (the path named a file).
    Exact(std::ffi::OsString),
}

/// A file found by a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedFile {
    pub path: PathBuf,
    /// `file:///abs/path`, percent-encoded as Hadoop's `Path.toUri` does.
    pub uri: String,
    /// Modification time in milliseconds since the epoch.
    pub mtime_ms: i64,
    pub size: u64,
}

impl Location {
    /// Parses a user path: relative paths are made absolute against the current directory,
    /// `file:` prefixes are accepted, and glob characters are allowed in the last component.
    pub(super) fn parse(path: &str) -> Result<Self> {
        let trimmed = path.trim();
        if trimmed.is_empty() {
            return Err(SluiceError::query(
                class::PATH_NOT_SPECIFIED,
                "a file source needs a path: give the directory to read, e.g. \
                 .load(\"/data/events\")",
            ));
        }
        let raw = strip_file_scheme(trimmed);
        let abs = absolute(Path::new(&raw))?;
        let remote = crate::storage::is_remote(&abs);
        let name = abs.file_name().map(|n| n.to_string_lossy().into_owned());
        let parent_has_glob = abs
            .parent()
            .map(|p| has_glob_chars(&p.to_string_lossy()))
            .unwrap_or(false);
        if parent_has_glob {
            return Err(SluiceError::not_supported_yet(format!(
                "the file source path {} has glob characters before its last component; only \
                 the last component may be a glob (e.g. /data/in/*.json)",
                abs.display()
            )));
        }
        let qualified = if remote {
            abs.display().to_string()
        } else {
            format!("file:{}", abs.display())
        };
        match name {
            Some(n) if has_glob_chars(&n) => {
                let glob = Glob::new(&n).map_err(|e| {
                    SluiceError::query(
                        class::INVALID_PATH_GLOB,
                        format!("the glob `{n}` in the file source path {path} is invalid: {e}"),
                    )
                })?;
                let dir = abs
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| abs.clone());
                Ok(Self {
                    dir,
                    filter: NameFilter::Glob(glob),
                    qualified,
                })
            }
            _ => {
                if crate::storage::is_file(&abs) {
                    if let (Some(dir), Some(name)) = (abs.parent(), abs.file_name()) {
                        return Ok(Self {
                            dir: dir.to_path_buf(),
                            filter: NameFilter::Exact(name.to_os_string()),
                            qualified,
                        });
                    }
                }
                Ok(Self {
                    dir: abs,
                    filter: NameFilter::All,
                    qualified,
                })
            }
        }
    }

    /// Whether the path is a glob (Spark does not check that a glob path exists).
    pub(super) fn is_glob(&self) -> bool {
        matches!(self.filter, NameFilter::Glob(_))
    }

    /// Whether the directory (or file) exists.
    pub(super) fn exists(&self) -> bool {
        match &self.filter {
            NameFilter::Exact(n) => crate::storage::is_file(self.dir.join(n)),
            _ => crate::storage::is_dir(&self.dir),
        }
    }

    /// The visible files, unsorted. A missing directory lists as empty.
    pub(super) fn list(&self, name_filter: Option<&Glob>) -> Result<Vec<ListedFile>> {
        let rd = match crate::storage::list_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) if e.raw_os_error() == Some(40) => {
                return Err(listing_error(&self.dir, &self.dir, e))
            }
            Err(e) => {
                return Err(SluiceError::io(
                    Fault::Connector,
                    format!("listing the source directory {}", self.dir.display()),
                    e,
                ))
            }
        };
        let mut out = Vec::new();
        for ent in rd {
            let name_str = ent.name.as_str();
            if is_hidden(name_str) || ent.is_dir || !self.keeps(name_str, name_filter) {
                continue;
            }
            out.push(ListedFile {
                uri: path_to_uri(&ent.path),
                path: ent.path,
                mtime_ms: ent.modified_ms,
                size: ent.size,
            });
        }
        Ok(out)
    }
}

/// A file modified less than this long ago has its size and modification time read again at
/// each listing ([`Location::list_cached`]), so a file still being written is seen to change;
/// an older one is not stat'ed again unless its name is replaced.
pub(crate) const RECENT_FILE_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);

/// A local folder's files kept between listings, so that a trigger costs one `stat` of the
/// folder plus work for the files that are new (or recent), not a `stat` of every file: with
/// 50,000 files Spark (and Sluice before) spent about half a second listing each trigger.
/// Files the source has admitted are marked settled ([`ListingCache::settle`]) and are not
/// handed back again unless they change.
#[derive(Debug, Default)]
pub(crate) struct ListingCache {
    /// The folder's modification time when its names were last read, and when that was.
    dir_mtime: Option<std::time::SystemTime>,
    read_at: Option<std::time::SystemTime>,
    /// Counts the reads of the names: a cached file not met in the newest read is gone.
    generation: u64,
    files: std::collections::HashMap<std::ffi::OsString, CachedFile>,
}

#[derive(Debug)]
struct CachedFile {
    file: ListedFile,
    /// The inode (0 where unknown): a name replaced by another file (`mv new old`) is stat'ed.
    ino: u64,
    generation: u64,
    /// Admitted by the source: handed back only when stat'ed again.
    settled: bool,
}

impl ListingCache {
    /// Marks a listed file as admitted: later listings hand it back only if it is stat'ed
    /// again (it is new under that name, or was modified recently).
    pub(crate) fn settle(&mut self, f: &ListedFile) {
        if let Some(c) = f.path.file_name().and_then(|n| self.files.get_mut(n)) {
            c.settled = true;
        }
    }
}

impl Location {
    /// The visible files, as [`Location::list`], through `cache` on a local folder, leaving
    /// out the settled files that were not stat'ed again. The names are read again only when
    /// the folder's modification time changed since they were last read, or was less than a
    /// second before that read (a file added in the same clock tick would not change it); a
    /// name is stat'ed when it is new or now names another inode, or when the file was
    /// modified less than [`RECENT_FILE_WINDOW`] ago. Object stores list fully.
    pub(crate) fn list_cached(
        &self,
        name_filter: Option<&Glob>,
        cache: &mut ListingCache,
    ) -> Result<Vec<ListedFile>> {
        if crate::storage::is_remote(&self.dir) || !cfg!(unix) {
            return self.list(name_filter);
        }
        let io = |what: String, e: std::io::Error| SluiceError::io(Fault::Connector, what, e);
        let dir_md = match std::fs::metadata(&self.dir) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                *cache = ListingCache::default();
                return Ok(Vec::new());
            }
            Err(e) => {
                return Err(io(
                    format!("listing the source directory {}", self.dir.display()),
                    e,
                ))
            }
        };
        let dir_mtime = dir_md.modified().ok();
        let now = std::time::SystemTime::now();
        let settled = |m: std::time::SystemTime| {
            cache
                .read_at
                .and_then(|r| r.duration_since(m).ok())
                .is_some_and(|d| d >= std::time::Duration::from_secs(1))
        };
        let unchanged =
            dir_mtime.is_some() && cache.dir_mtime == dir_mtime && dir_mtime.is_some_and(settled);
        let mut out = Vec::new();
        let mut stated: std::collections::HashSet<std::ffi::OsString> = Default::default();
        if !unchanged {
            cache.generation += 1;
            let generation = cache.generation;
            let rd = std::fs::read_dir(&self.dir).map_err(|e| {
                io(
                    format!("listing the source directory {}", self.dir.display()),
                    e,
                )
            })?;
            for ent in rd {
                let ent = match ent {
                    Ok(e) => e,
                    Err(e) if e.kind() == ErrorKind::NotFound => continue,
                    Err(e) => {
                        return Err(io(
                            format!("listing the source directory {}", self.dir.display()),
                            e,
                        ))
                    }
                };
                let name = ent.file_name();
                let ino = dir_entry_ino(&ent);
                if let Some(c) = cache.files.get_mut(&name).filter(|c| c.ino == ino) {
                    c.generation = generation;
                    continue;
                }
                let name_str = name.to_string_lossy();
                if is_hidden(&name_str) || !self.keeps(&name_str, name_filter) {
                    continue;
                }
                cache.files.remove(&name);
                if let Some(file) = self.stat(ent.path())? {
                    stated.insert(name.clone());
                    cache.files.insert(
                        name,
                        CachedFile {
                            file,
                            ino,
                            generation,
                            settled: false,
                        },
                    );
                }
            }
            cache.files.retain(|_, c| c.generation == generation);
            cache.dir_mtime = dir_mtime;
            cache.read_at = Some(now);
        }
        // Files modified recently may still be written to: read their size again.
        let recent_ms = crate::storage::system_time_ms(now)
            - i64::try_from(RECENT_FILE_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let mut gone = Vec::new();
        for (name, c) in cache.files.iter_mut() {
            let fresh = if stated.contains(name) {
                true
            } else if c.file.mtime_ms >= recent_ms {
                match self.stat(c.file.path.clone())? {
                    Some(f) => {
                        c.file = f;
                        true
                    }
                    None => {
                        gone.push(name.clone());
                        continue;
                    }
                }
            } else {
                false
            };
            if fresh || !c.settled {
                out.push(c.file.clone());
            }
        }
        for name in gone {
            cache.files.remove(&name);
        }
        Ok(out)
    }

    fn keeps(&self, name: &str, name_filter: Option<&Glob>) -> bool {
        let keep = match &self.filter {
            NameFilter::All => true,
            NameFilter::Glob(g) => g.matches(name),
            NameFilter::Exact(n) => n.to_str() == Some(name),
        };
        keep && name_filter.is_none_or(|g| g.matches(name))
    }

    /// A listed file (following symbolic links); None for a folder or a file that vanished.
    fn stat(&self, path: PathBuf) -> Result<Option<ListedFile>> {
        match std::fs::metadata(&path) {
            Ok(md) if md.is_dir() => Ok(None),
            Ok(md) => Ok(Some(ListedFile {
                uri: path_to_uri(&path),
                mtime_ms: md
                    .modified()
                    .map(crate::storage::system_time_ms)
                    .unwrap_or(0),
                size: md.len(),
                path,
            })),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(listing_error(&self.dir, &path, e)),
        }
    }
}

/// The error for an entry of a source folder that cannot be stat'ed, with the fix for a
/// symbolic link loop (`ELOOP`).
pub(crate) fn listing_error(dir: &Path, path: &Path, e: std::io::Error) -> SluiceError {
    if e.raw_os_error() == Some(40) {
        return SluiceError::input(
            class::FILE_SOURCE_SYMLINK_LOOP,
            format!(
                "{} in the source folder {} is a symbolic link that loops (it points back to \
                 itself through other links), so it names no file. Remove the link or point it \
                 at a file (`ls -l {}` shows where it points), or move it out of the folder",
                path.display(),
                dir.display(),
                path.display()
            ),
        );
    }
    SluiceError::io(
        Fault::Connector,
        format!(
            "listing {} in the source directory {}",
            path.display(),
            dir.display()
        ),
        e,
    )
}

#[cfg(unix)]
fn dir_entry_ino(ent: &std::fs::DirEntry) -> u64 {
    std::os::unix::fs::DirEntryExt::ino(ent)
}

#[cfg(not(unix))]
fn dir_entry_ino(_ent: &std::fs::DirEntry) -> u64 {
    0
}

/// Hadoop's hidden-file rule: `_name` (unless it holds `=`), `.name`, `name._COPYING_`.
pub(crate) fn is_hidden(name: &str) -> bool {
    (name.starts_with('_') && !name.contains('='))
        || name.starts_with('.')
        || name.ends_with("._COPYING_")
}

fn has_glob_chars(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

fn strip_file_scheme(p: &str) -> String {
    if let Some(rest) = p.strip_prefix("file://") {
        // file:///abs -> /abs ; file://host/abs is not a local path, keep as is.
        if rest.starts_with('/') {
            return percent_decode_lossy(rest);
        }
        return p.to_string();
    }
    if let Some(rest) = p.strip_prefix("file:") {
        if rest.starts_with('/') {
            return percent_decode_lossy(rest);
        }
    }
    p.to_string()
}

/// Absolute and lexically normalized (`.` and `..` removed), without touching the file system.
/// An object store URL is kept as it is (without a trailing `/`).
pub(crate) fn absolute(p: &Path) -> Result<PathBuf> {
    if crate::storage::is_remote(p) {
        return Ok(PathBuf::from(p.to_string_lossy().trim_end_matches('/')));
    }
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        let cwd = std::env::current_dir()
            .map_err(|e| SluiceError::io(Fault::Query, "finding the current directory", e))?;
        cwd.join(p)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}

/// `file:///abs/path`, percent-encoding what `java.net.URI` quotes in a path (space, `%`, `#`,
/// `?`, brackets, ...); non-ASCII characters are kept.
pub(crate) fn path_to_uri(p: &Path) -> String {
    if crate::storage::is_remote(p) {
        return p.to_string_lossy().into_owned();
    }
    let mut out = String::from("file://");
    let s = path_bytes(p);
    let text = String::from_utf8_lossy(&s);
    let valid_utf8 = std::str::from_utf8(&s).is_ok();
    if !p.is_absolute() {
        out.push('/');
    }
    if valid_utf8 {
        for ch in text.chars() {
            if ch.is_ascii() {
                push_ascii_encoded(&mut out, ch as u8);
            } else if ch.is_control() || ch.is_whitespace() {
                let mut buf = [0u8; 4];
                for b in ch.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            } else {
                out.push(ch);
            }
        }
    } else {
        for b in s {
            if b.is_ascii() {
                push_ascii_encoded(&mut out, b);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

fn push_ascii_encoded(out: &mut String, b: u8) {
    let keep = b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'_'
                | b'.'
                | b'!'
                | b'~'
                | b'*'
                | b'\''
                | b'('
                | b')'
                | b','
                | b';'
                | b':'
                | b'$'
                | b'&'
                | b'+'
                | b'='
                | b'/'
                | b'@'
        );
    if keep {
        out.push(b as char);
    } else {
        out.push_str(&format!("%{b:02X}"));
    }
}

#[cfg(unix)]
fn path_bytes(p: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str().as_bytes().to_vec()
}

#[cfg(not(unix))]
fn path_bytes(p: &Path) -> Vec<u8> {
    p.to_string_lossy().replace('\\', "/").into_bytes()
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn percent_decode_lossy(s: &str) -> String {
    String::from_utf8_lossy(&percent_decode(s)).into_owned()
}

/// The local path of a `file:` URI recorded in a source log (also accepts a bare path).
pub(crate) fn uri_to_path(uri: &str) -> PathBuf {
    if crate::storage::is_remote(Path::new(uri)) {
        return PathBuf::from(uri);
    }
    let rest = if let Some(r) = uri.strip_prefix("file://") {
        r
    } else if let Some(r) = uri.strip_prefix("file:") {
        r
    } else {
        return PathBuf::from(uri);
    };
    bytes_to_path(percent_decode(rest))
}

#[cfg(unix)]
fn bytes_to_path(b: Vec<u8>) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(b))
}

#[cfg(not(unix))]
fn bytes_to_path(b: Vec<u8>) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(&b).into_owned())
}

/// The decoded file name of a URI (`fileNameOnly=true` dedupes by it).
pub(crate) fn uri_file_name(uri: &str) -> String {
    let p = uri_to_path(uri);
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| uri.to_string())
}

/// A Hadoop-style glob for one path component: `*`, `?`, `[abc]`, `[a-z]`, `[^a]`/`[!a]`,
/// `{a,b}` and `\` escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    alternatives: Vec<Vec<GlobTok>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GlobTok {
    Lit(char),
    AnyChar,
    Star,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

const MAX_GLOB_ALTERNATIVES: usize = 1024;

impl Glob {
    pub(super) fn new(pattern: &str) -> std::result::Result<Self, String> {
        let expanded = expand_braces(pattern)?;
        let mut alternatives = Vec::with_capacity(expanded.len());
        for p in expanded {
            alternatives.push(tokenize_glob(&p)?);
        }
        Ok(Self { alternatives })
    }

    pub(super) fn matches(&self, name: &str) -> bool {
        let chars: Vec<char> = name.chars().collect();
        self.alternatives
            .iter()
            .any(|toks| glob_match(toks, &chars))
    }
}

/// Expands `{a,b}` alternations (nested allowed) into plain patterns.
fn expand_braces(p: &str) -> std::result::Result<Vec<String>, String> {
    let chars: Vec<char> = p.chars().collect();
    // Find the first top-level `{` not escaped and not inside a class.
    let mut i = 0;
    let mut in_class = false;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '{' if !in_class => {
                let mut depth = 0;
                let mut j = i;
                let mut parts = Vec::new();
                let mut start = i + 1;
                while j < chars.len() {
                    match chars[j] {
                        '\\' => j += 1,
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                parts.push(chars[start..j].iter().collect::<String>());
                                break;
                            }
                        }
                        ',' if depth == 1 => {
                            parts.push(chars[start..j].iter().collect::<String>());
                            start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                if j >= chars.len() {
                    return Err("an `{` is not closed".into());
                }
                let prefix: String = chars[..i].iter().collect();
                let suffix: String = chars[j + 1..].iter().collect();
                let mut out = Vec::new();
                for part in parts {
                    for rest in expand_braces(&format!("{part}{suffix}"))? {
                        out.push(format!("{prefix}{rest}"));
                        if out.len() > MAX_GLOB_ALTERNATIVES {
                            return Err("too many `{..}` alternatives".into());
                        }
                    }
                }
                return Ok(out);
            }
            '}' if !in_class => return Err("an unmatched `}`".into()),
            _ => {}
        }
        i += 1;
    }
    Ok(vec![p.to_string()])
}

fn tokenize_glob(p: &str) -> std::result::Result<Vec<GlobTok>, String> {
    let chars: Vec<char> = p.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let c = chars.get(i + 1).copied().ok_or("a trailing `\\`")?;
                toks.push(GlobTok::Lit(c));
                i += 2;
                continue;
            }
            '*' => {
                if toks.last() != Some(&GlobTok::Star) {
                    toks.push(GlobTok::Star);
                }
            }
            '?' => toks.push(GlobTok::AnyChar),
            '[' => {
                let mut j = i + 1;
                let mut negated = false;
                if j < chars.len() && (chars[j] == '^' || chars[j] == '!') {
                    negated = true;
                    j += 1;
                }
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let Some(&c) = chars.get(j) else {
                        return Err("a `[` is not closed".into());
                    };
                    if c == ']' && !first {
                        break;
                    }
                    first = false;
                    let c = if c == '\\' {
                        j += 1;
                        *chars.get(j).ok_or("a trailing `\\`")?
                    } else {
                        c
                    };
                    if chars.get(j + 1) == Some(&'-') && chars.get(j + 2).is_some_and(|&e| e != ']')
                    {
                        let hi = chars[j + 2];
                        if hi < c {
                            return Err(format!("the range {c}-{hi} is reversed"));
                        }
                        ranges.push((c, hi));
                        j += 3;
                    } else {
                        ranges.push((c, c));
                        j += 1;
                    }
                }
                toks.push(GlobTok::Class { negated, ranges });
                i = j + 1;
                continue;
            }
            c => toks.push(GlobTok::Lit(c)),
        }
        i += 1;
    }
    Ok(toks)
}

fn glob_match(toks: &[GlobTok], s: &[char]) -> bool {
    // Iterative matcher with single-star backtracking.
    let (mut ti, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let step = match toks.get(ti) {
            Some(GlobTok::Star) => {
                star = Some((ti, si));
                ti += 1;
                continue;
            }
            Some(GlobTok::AnyChar) => true,
            Some(GlobTok::Lit(c)) => *c == s[si],
            Some(GlobTok::Class { negated, ranges }) => {
                let inside = ranges.iter().any(|(lo, hi)| *lo <= s[si] && s[si] <= *hi);
                inside != *negated
            }
            None => false,
        };
        if step {
            ti += 1;
            si += 1;
        } else if let Some((st, ss)) = star {
            ti = st + 1;
            si = ss + 1;
            star = Some((st, ss + 1));
        } else {
            return false;
        }
    }
    toks[ti..].iter().all(|t| *t == GlobTok::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_mtime(path: &Path, ago: std::time::Duration) {
        let t = std::time::SystemTime::now() - ago;
        std::fs::File::open(path).unwrap().set_modified(t).unwrap();
    }

    fn sizes(files: &[ListedFile]) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = files
            .iter()
            .map(|f| {
                (
                    f.path.file_name().unwrap().to_string_lossy().into_owned(),
                    f.size,
                )
            })
            .collect();
        v.sort();
        v
    }

    /// Issue 18 part 11: a listing reads again only what may have changed. An old file changed
    /// in place without touching the folder is not stat'ed (its cached size stays); a recent
    /// one is; a new, replaced or deleted name is always seen.
    #[cfg(unix)]
    #[test]
    fn the_listing_cache_stats_only_new_recent_or_replaced_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("in");
        std::fs::create_dir(&dir).unwrap();
        let hour = std::time::Duration::from_secs(3600);
        for name in ["old.json", "recent.json"] {
            std::fs::write(dir.join(name), "1").unwrap();
        }
        set_mtime(&dir.join("old.json"), hour);
        set_mtime(&dir, std::time::Duration::from_secs(5));
        let loc = Location::parse(&dir.display().to_string()).unwrap();
        let mut cache = ListingCache::default();
        let first = loc.list_cached(None, &mut cache).unwrap();
        assert_eq!(
            sizes(&first),
            [("old.json".into(), 1), ("recent.json".into(), 1)]
        );

        // Both grow in place; the folder does not change.
        for name in ["old.json", "recent.json"] {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join(name))
                .unwrap();
            std::io::Write::write_all(&mut f, b"23").unwrap();
        }
        set_mtime(&dir.join("old.json"), hour);
        set_mtime(&dir, std::time::Duration::from_secs(5));
        let second = loc.list_cached(None, &mut cache).unwrap();
        assert_eq!(
            sizes(&second),
            [("old.json".into(), 1), ("recent.json".into(), 3)],
            "the old file's entry is the cached one; the recent one is read again"
        );
        // The uncached listing sees both as they are.
        assert_eq!(sizes(&loc.list(None).unwrap())[0], ("old.json".into(), 3));
        // A settled (admitted) file is not handed back unless it is stat'ed again; the recent
        // one always is.
        for f in &second {
            cache.settle(f);
        }
        let settled = loc.list_cached(None, &mut cache).unwrap();
        assert_eq!(sizes(&settled), [("recent.json".into(), 3)]);

        // A name replaced by another file, a new file and a deleted one change the folder.
        std::fs::write(dir.join(".staging"), "456789").unwrap();
        set_mtime(&dir.join(".staging"), hour);
        std::fs::rename(dir.join(".staging"), dir.join("old.json")).unwrap();
        std::fs::write(dir.join("new.json"), "x").unwrap();
        std::fs::remove_file(dir.join("recent.json")).unwrap();
        let third = loc.list_cached(None, &mut cache).unwrap();
        assert_eq!(
            sizes(&third),
            [("new.json".into(), 1), ("old.json".into(), 6)]
        );
    }

    /// Issue 18 part 11: a symbolic link loop in the folder is named, with the fix.
    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_names_the_link_and_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("in");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(dir.join("b.json"), dir.join("a.json")).unwrap();
        std::os::unix::fs::symlink(dir.join("a.json"), dir.join("b.json")).unwrap();
        let loc = Location::parse(&dir.display().to_string()).unwrap();
        let e = loc
            .list_cached(None, &mut ListingCache::default())
            .unwrap_err();
        assert_eq!(e.class(), "FILE_SOURCE_SYMLINK_LOOP", "{e}");
        assert!(
            e.message().contains("a.json") || e.message().contains("b.json"),
            "{e}"
        );
        assert!(e.message().contains("Remove the link"), "{e}");
    }

    #[test]
    fn globs() {
        let g = Glob::new("*.json").unwrap();
        assert!(g.matches("a.json"));
        assert!(g.matches(".json"));
        assert!(!g.matches("a.csv"));
        let g = Glob::new("part-{001,01[0-9]}.j?on").unwrap();
        assert!(g.matches("part-001.json"));
        assert!(g.matches("part-015.jxon"));
        assert!(!g.matches("part-002.json"));
        let g = Glob::new("[!a]*").unwrap();
        assert!(g.matches("b"));
        assert!(!g.matches("abc"));
        assert!(Glob::new("{a,b").is_err());
        assert!(Glob::new("[ab").is_err());
    }

    #[test]
    fn uris_round_trip() {
        let p = Path::new("/data/in dir/a#1%.json");
        let uri = path_to_uri(p);
        assert_eq!(uri, "file:///data/in%20dir/a%231%25.json");
        assert_eq!(uri_to_path(&uri), p);
        assert_eq!(uri_file_name(&uri), "a#1%.json");
        assert_eq!(
            path_to_uri(Path::new("/data/é.json")),
            "file:///data/é.json"
        );
        assert_eq!(uri_to_path("file:/x/y"), PathBuf::from("/x/y"));
    }

    #[test]
    fn hidden_files() {
        assert!(is_hidden("_SUCCESS"));
        assert!(is_hidden(".a.json.crc"));
        assert!(is_hidden("a.json._COPYING_"));
        assert!(!is_hidden("_k=v"));
        assert!(!is_hidden("a.json"));
    }

    #[test]
    fn locations() {
        let l = Location::parse("/data/in/*.json").unwrap();
        assert_eq!(l.dir, PathBuf::from("/data/in"));
        assert!(l.is_glob());
        let l = Location::parse("/data/./x/../in").unwrap();
        assert_eq!(l.dir, PathBuf::from("/data/in"));
        assert_eq!(l.qualified, "file:/data/in");
        assert!(Location::parse("  ").is_err());
        assert_eq!(
            Location::parse("/a/*/b").unwrap_err().fault(),
            Fault::NotSupportedYet
        );
    }
}
