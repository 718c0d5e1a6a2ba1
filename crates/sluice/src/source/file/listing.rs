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
            if is_hidden(name_str) || ent.is_dir {
                continue;
            }
            let keep = match &self.filter {
                NameFilter::All => true,
                NameFilter::Glob(g) => g.matches(name_str),
                NameFilter::Exact(n) => n.to_str() == Some(name_str),
            };
            if !keep || name_filter.is_some_and(|g| !g.matches(name_str)) {
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
