//! The local file system: `std::fs`, plus the atomic publish of a temporary file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

use super::{Entry, Publish};

pub(super) fn metadata(path: &Path) -> io::Result<Entry> {
    let md = fs::metadata(path)?;
    Ok(entry(path.to_path_buf(), &md))
}

fn entry(path: PathBuf, md: &fs::Metadata) -> Entry {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Entry {
        name,
        is_dir: md.is_dir(),
        size: if md.is_dir() { 0 } else { md.len() },
        modified_ms: md.modified().map(system_time_ms).unwrap_or(0),
        path,
    }
}

pub(crate) fn system_time_ms(t: std::time::SystemTime) -> i64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -(i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
    }
}

pub(super) fn list_dir(dir: &Path) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(dir)? {
        let ent = match ent {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let path = ent.path();
        // Follow symlinks; an entry that vanished between listing and stat is left out.
        match fs::metadata(&path) {
            Ok(md) => out.push(entry(path, &md)),
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Fsyncs a directory so that names created in it survive a crash.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        // Some file systems (and platforms) refuse fsync on a directory; nothing more to do.
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) => Ok(()),
        Err(e) if e.raw_os_error() == Some(22) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A temporary file `.<name>.<uuid>.tmp` next to the final name.
pub(super) struct PendingLocal {
    tmp: PathBuf,
    path: PathBuf,
    dir: PathBuf,
    file: Option<BufWriter<File>>,
}

impl PendingLocal {
    pub(super) fn create(path: &Path) -> io::Result<PendingLocal> {
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
            io::Error::new(
                ErrorKind::InvalidInput,
                format!("not a file path: {}", path.display()),
            )
        })?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&dir)
            .map_err(|e| annotate(e, format!("creating directory {}", dir.display())))?;
        let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| annotate(e, format!("creating {}", tmp.display())))?;
        Ok(PendingLocal {
            tmp,
            path: path.to_path_buf(),
            dir,
            file: Some(BufWriter::with_capacity(64 * 1024, file)),
        })
    }

    pub(super) fn tmp(&self) -> &Path {
        &self.tmp
    }

    pub(super) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("the file was already published")),
        }
    }

    pub(super) fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }

    pub(super) fn publish(mut self, how: Publish) -> io::Result<bool> {
        let result = self.finish_and_publish(how);
        // Whatever happened, the temporary name must not stay behind.
        let _ = fs::remove_file(&self.tmp);
        let created = result?;
        if created {
            sync_dir(&self.dir)
                .map_err(|e| annotate(e, format!("syncing directory {}", self.dir.display())))?;
        }
        Ok(created)
    }

    fn finish_and_publish(&mut self, how: Publish) -> io::Result<bool> {
        let file = self
            .file
            .take()
            .ok_or_else(|| io::Error::other("published twice"))?;
        let file = file
            .into_inner()
            .map_err(|e| annotate(e.into_error(), format!("writing {}", self.tmp.display())))?;
        file.sync_all()
            .map_err(|e| annotate(e, format!("syncing {}", self.tmp.display())))?;
        drop(file);
        match how {
            Publish::Replace => fs::rename(&self.tmp, &self.path)
                .map(|_| true)
                .map_err(|e| {
                    annotate(
                        e,
                        format!("renaming {} to {}", self.tmp.display(), self.path.display()),
                    )
                }),
            Publish::CreateNew => {
                if self.path.exists() {
                    return Ok(false);
                }
                link_new(&self.tmp, &self.path)
            }
        }
    }

    pub(super) fn discard(mut self) {
        self.file = None;
        let _ = fs::remove_file(&self.tmp);
    }
}

/// Hard-links the temporary file to the final name: the link fails if the name exists, so two
/// writers racing for one name cannot both win and a reader never sees a partial file.
fn link_new(tmp: &Path, path: &Path) -> io::Result<bool> {
    match fs::hard_link(tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        // File systems without hard links: fall back to check-then-rename (not race-free
        // between two writers, but still never exposes a partial file).
        Err(e) if e.kind() == ErrorKind::Unsupported || e.kind() == ErrorKind::PermissionDenied => {
            if path.exists() {
                return Ok(false);
            }
            fs::rename(tmp, path)
                .map(|_| true)
                .map_err(|e| annotate(e, format!("renaming to {}", path.display())))
        }
        Err(e) => Err(annotate(
            e,
            format!("linking {} to {}", tmp.display(), path.display()),
        )),
    }
}

/// The error with what was being done in front of its text (its kind kept).
fn annotate(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
