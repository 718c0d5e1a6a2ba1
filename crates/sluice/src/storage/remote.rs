//! Object store locations: parsing a URL path, and the file calls as object store requests,
//! run to completion on the storage runtime from the engine's threads.

use std::future::Future;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};

use super::{registry, retry, Entry, ObjectLocation, Publish};

/// The runtime every object store request runs on (the engine's calls are synchronous and come
/// from query, partition and sink threads, some of them inside other runtimes).
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sluice-storage")
        .enable_all()
        .build()
        .expect("the object store runtime starts")
});

/// Runs `fut` on the storage runtime and waits for it (never blocks a runtime it is called from
/// by entering it: the future is spawned, and this thread waits on its handle).
fn run<T: Send + 'static>(
    fut: impl Future<Output = io::Result<T>> + Send + 'static,
) -> io::Result<T> {
    let handle = RUNTIME.spawn(fut);
    match futures::executor::block_on(handle) {
        Ok(r) => r,
        Err(e) => Err(io::Error::other(format!(
            "object store request aborted: {e}"
        ))),
    }
}

/// `scheme://authority/key` as an object store location.
#[derive(Clone)]
pub(super) struct Location {
    /// Normalised: `s3`, `gs`, `abfss`, `abfs`, `az`, `memory`.
    scheme: &'static str,
    authority: String,
    key: ObjectPath,
    store: Arc<dyn ObjectStore>,
}

/// The URL schemes of object stores, and the scheme each is served as.
const SCHEMES: &[(&str, &str)] = &[
    ("s3", "s3"),
    ("s3a", "s3"),
    ("s3n", "s3"),
    ("gs", "gs"),
    ("abfss", "abfss"),
    ("abfs", "abfs"),
    ("az", "az"),
    ("memory", "memory"),
];

/// `s3a://b/x/` -> `s3://b/x`.
pub(super) fn normalise_prefix(url: &str) -> String {
    match split(url) {
        Some((scheme, authority, "")) => format!("{scheme}://{authority}"),
        Some((scheme, authority, key)) => format!("{scheme}://{authority}/{key}"),
        None => url.trim_end_matches('/').to_string(),
    }
}

/// `(normalised scheme, authority, key without slashes at either end)`.
fn split(text: &str) -> Option<(&'static str, &str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let lower = scheme.to_ascii_lowercase();
    let (_, normal) = SCHEMES.iter().find(|(s, _)| *s == lower)?;
    let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
    Some((normal, authority, key.trim_matches('/')))
}

impl Location {
    /// The object store scheme `path` starts with, if any.
    pub(super) fn scheme_of(path: &Path) -> Option<&'static str> {
        split(path.to_str()?).map(|(s, _, _)| s)
    }

    /// `None` for a local path; an error for an object store URL that names no bucket or holds
    /// a `.`/`..` component, or whose store cannot be set up.
    pub(super) fn parse(path: &Path) -> io::Result<Option<Location>> {
        let Some(text) = path.to_str() else {
            return Ok(None);
        };
        let Some((scheme, authority, key)) = split(text) else {
            return Ok(None);
        };
        if authority.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{text}: an object store path names its bucket: {scheme}://BUCKET/path"),
            ));
        }
        // Repeated slashes inside a key are one separator, as in a local path.
        let cleaned: Vec<&str> = key.split('/').filter(|s| !s.is_empty()).collect();
        let key = ObjectPath::parse(cleaned.join("/"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{text}: {e}")))?;
        let store = registry::store_for(scheme, authority)?;
        Ok(Some(Location {
            scheme,
            authority: authority.to_string(),
            key,
            store,
        }))
    }

    fn root(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }

    fn url(&self) -> String {
        url_of(&self.root(), &self.key)
    }

    pub(super) fn object_location(&self) -> ObjectLocation {
        ObjectLocation {
            store: self.store.clone(),
            root_url: self.root(),
            key: self.key.clone(),
        }
    }

    pub(super) fn read(&self) -> io::Result<Vec<u8>> {
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url());
        let policy = registry::retry_policy();
        run(async move {
            // The request is retried inside the store (RetryingStore); a body cut off half way
            // is fetched again here, up to the same number of times.
            let mut cut_off = 0;
            loop {
                let got = store.get(&key).await.map_err(|e| to_io(e, &url))?;
                match got.bytes().await {
                    Ok(b) => return Ok(b.to_vec()),
                    Err(e) if retry::is_transient(&e) && cut_off < policy.max_retries => {
                        cut_off += 1;
                    }
                    Err(e) => return Err(to_io(e, &url)),
                }
            }
        })
    }

    /// The object's first bytes, `limit` of them (all of it when it is not longer), its
    /// size and its ETag: one GET, whose body is read no further (the rest of a longer object
    /// is read by [`Location::read_range`]).
    pub(super) fn read_start(&self, limit: usize) -> io::Result<(Bytes, u64, Option<String>)> {
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url());
        let policy = registry::retry_policy();
        run(async move {
            let mut cut_off = 0;
            'get: loop {
                let got = store.get(&key).await.map_err(|e| to_io(e, &url))?;
                let (size, etag) = (got.meta.size, got.meta.e_tag.clone());
                let mut body = got.into_stream();
                let mut out = Vec::with_capacity(size.min(limit as u64) as usize);
                while out.len() < limit {
                    match body.next().await {
                        None => break,
                        Some(Ok(b)) => out.extend_from_slice(&b),
                        Some(Err(e)) if retry::is_transient(&e) && cut_off < policy.max_retries => {
                            cut_off += 1;
                            continue 'get;
                        }
                        Some(Err(e)) => return Err(to_io(e, &url)),
                    }
                }
                // A body arrives in pieces of the transport's size: keep `limit` bytes.
                out.truncate(limit);
                return Ok((Bytes::from(out), size, etag));
            }
        })
    }

    /// The bytes of `range` (inside the object) of the version `etag` names, if any (as
    /// Hadoop's S3A detects a change: a file replaced while it is read fails the read).
    pub(super) fn read_range(&self, range: Range<u64>, etag: Option<String>) -> io::Result<Bytes> {
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url());
        let policy = registry::retry_policy();
        run(async move { get_range(&*store, &key, &url, range, etag, &policy).await })
    }

    /// The bytes of `ranges` (inside the object) of the version `etag` names, if any: ranges
    /// less than 1 MiB apart are read by one request, the requests are concurrent.
    pub(super) fn read_ranges(
        &self,
        ranges: Vec<Range<u64>>,
        etag: Option<String>,
    ) -> io::Result<Vec<Bytes>> {
        const GAP: u64 = 1 << 20;
        let mut merged: Vec<Range<u64>> = ranges.clone();
        merged.sort_by_key(|r| r.start);
        merged.dedup_by(|next, prev| {
            if next.start <= prev.end.saturating_add(GAP) {
                prev.end = prev.end.max(next.end);
                true
            } else {
                false
            }
        });
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url());
        let policy = registry::retry_policy();
        let requests = merged.clone();
        let got = run(async move {
            let gets = requests
                .into_iter()
                .map(|r| get_range(&*store, &key, &url, r, etag.clone(), &policy));
            futures::future::try_join_all(gets).await
        })?;
        Ok(ranges
            .iter()
            .map(|r| {
                let i = merged.partition_point(|m| m.end < r.end);
                let (m, b) = (&merged[i], &got[i]);
                b.slice((r.start - m.start) as usize..(r.end - m.start) as usize)
            })
            .collect())
    }

    /// The object's size and ETag (a HEAD).
    pub(super) fn head(&self) -> io::Result<(u64, Option<String>)> {
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url());
        run(async move {
            let meta = store.head(&key).await.map_err(|e| to_io(e, &url))?;
            Ok((meta.size, meta.e_tag))
        })
    }

    /// Whether an object is at this key (a HEAD; a prefix with objects under it is not one).
    pub(super) fn is_object(&self) -> bool {
        if self.key.as_ref().is_empty() {
            return false;
        }
        let (store, key) = (self.store.clone(), self.key.clone());
        run(async move { Ok(store.head(&key).await.is_ok()) }).unwrap_or(false)
    }

    pub(super) fn metadata(&self) -> io::Result<Entry> {
        let (store, key, root, url) = (
            self.store.clone(),
            self.key.clone(),
            self.root(),
            self.url(),
        );
        run(async move {
            if !key.as_ref().is_empty() {
                match store.head(&key).await {
                    Ok(meta) => return Ok(object_entry(&root, &meta)),
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(to_io(e, &url)),
                }
            }
            // A "directory": something under the prefix.
            let mut under = store.list(Some(&key));
            match under.next().await {
                Some(Ok(_)) => Ok(Entry {
                    name: key.filename().unwrap_or_default().to_string(),
                    path: PathBuf::from(&url),
                    is_dir: true,
                    size: 0,
                    modified_ms: 0,
                }),
                Some(Err(e)) => Err(to_io(e, &url)),
                None => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{url}: no such object or prefix"),
                )),
            }
        })
    }

    pub(super) fn list_dir(&self) -> io::Result<Vec<Entry>> {
        let (store, key, root, url) = (
            self.store.clone(),
            self.key.clone(),
            self.root(),
            self.url(),
        );
        run(async move {
            let prefix = (!key.as_ref().is_empty()).then_some(&key);
            let listed = store
                .list_with_delimiter(prefix)
                .await
                .map_err(|e| to_io(e, &url))?;
            if listed.objects.is_empty() && listed.common_prefixes.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{url}: nothing under this prefix"),
                ));
            }
            let mut out: Vec<Entry> = listed
                .objects
                .iter()
                .filter(|m| m.location != key)
                .map(|m| object_entry(&root, m))
                .collect();
            out.extend(listed.common_prefixes.iter().map(|p| Entry {
                name: p.filename().unwrap_or_default().to_string(),
                path: PathBuf::from(url_of(&root, p)),
                is_dir: true,
                size: 0,
                modified_ms: 0,
            }));
            Ok(out)
        })
    }

    pub(super) fn remove_file(&self) -> io::Result<()> {
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url());
        let policy = registry::retry_policy();
        run(async move {
            // S3 answers a delete of a missing key with success: say NotFound as a file system.
            match store.head(&key).await {
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{url}: no such object"),
                    ))
                }
                Err(e) => return Err(to_io(e, &url)),
                Ok(_) => {}
            }
            retry::with_retries(&policy, || store.delete(&key))
                .await
                .map_err(|e| to_io(e, &url))
        })
    }

    pub(super) fn remove_prefix(&self) -> io::Result<()> {
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url());
        let policy = registry::retry_policy();
        run(async move {
            let prefix = (!key.as_ref().is_empty()).then_some(&key);
            let objects: Vec<ObjectPath> = store
                .list(prefix)
                .map_ok(|m| m.location)
                .try_collect()
                .await
                .map_err(|e| to_io(e, &url))?;
            for o in objects {
                retry::with_retries(&policy, || store.delete(&o))
                    .await
                    .map_err(|e| to_io(e, &url_of(&url, &o)))?;
            }
            Ok(())
        })
    }

    pub(super) fn rename_to(&self, to: &Location) -> io::Result<()> {
        if self.root() != to.root() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot move {} to {}: not in one bucket",
                    self.url(),
                    to.url()
                ),
            ));
        }
        let (store, from, dest, url) = (
            self.store.clone(),
            self.key.clone(),
            to.key.clone(),
            self.url(),
        );
        run(async move { store.rename(&from, &dest).await.map_err(|e| to_io(e, &url)) })
    }

    /// One put of the whole object: `CreateNew` is a conditional create (`PutMode::Create`), so
    /// of two writers exactly one succeeds.
    pub(super) fn put(&self, bytes: Vec<u8>, how: Publish) -> io::Result<bool> {
        let (store, key, url) = (self.store.clone(), self.key.clone(), self.url());
        run(async move {
            let mode = match how {
                Publish::Replace => PutMode::Overwrite,
                Publish::CreateNew => PutMode::Create,
            };
            let opts = PutOptions {
                mode,
                ..PutOptions::default()
            };
            match store.put_opts(&key, PutPayload::from(bytes), opts).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::AlreadyExists { .. }) if how == Publish::CreateNew => {
                    Ok(false)
                }
                Err(e) => Err(to_io(e, &url)),
            }
        })
    }
}

/// One ranged GET, of the version `etag` names if any; a body cut off half way is fetched again.
async fn get_range(
    store: &dyn ObjectStore,
    key: &ObjectPath,
    url: &str,
    range: Range<u64>,
    etag: Option<String>,
    policy: &registry::RetryPolicy,
) -> io::Result<Bytes> {
    let mut cut_off = 0;
    loop {
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: etag.clone(),
            ..GetOptions::default()
        };
        let got = match store.get_opts(key, opts).await {
            Ok(g) => g,
            Err(object_store::Error::Precondition { .. }) => {
                return Err(changed(url, etag.as_deref()))
            }
            Err(e) => return Err(to_io(e, url)),
        };
        match got.bytes().await {
            Ok(b) if b.len() as u64 == range.end - range.start => return Ok(b),
            Ok(b) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{url}: {} bytes at offset {} where {} were asked for (the object is \
                         shorter than when it was opened)",
                        b.len(),
                        range.start,
                        range.end - range.start
                    ),
                ))
            }
            Err(e) if retry::is_transient(&e) && cut_off < policy.max_retries => cut_off += 1,
            Err(e) => return Err(to_io(e, url)),
        }
    }
}

/// An object that changed between two ranged reads of it.
fn changed(url: &str, etag: Option<&str>) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{url} changed while it was being read (its ETag is no longer {}): files must not \
             be overwritten once they are in a source directory; write a new file instead",
            etag.unwrap_or("the same")
        ),
    )
}

fn url_of(root: &str, key: &ObjectPath) -> String {
    if key.as_ref().is_empty() {
        root.to_string()
    } else {
        format!("{}/{}", root.trim_end_matches('/'), key.as_ref())
    }
}

fn object_entry(root: &str, meta: &object_store::ObjectMeta) -> Entry {
    Entry {
        name: meta.location.filename().unwrap_or_default().to_string(),
        path: PathBuf::from(url_of(root, &meta.location)),
        is_dir: false,
        size: meta.size,
        modified_ms: meta.last_modified.timestamp_millis(),
    }
}

/// An object store error as an `io::Error` of the matching kind, whose text names the URL and,
/// for the errors a user can fix, how.
pub(super) fn to_io(e: object_store::Error, url: &str) -> io::Error {
    use io::ErrorKind as K;
    let (kind, fix) = match &e {
        object_store::Error::NotFound { .. } => (K::NotFound, ""),
        object_store::Error::AlreadyExists { .. } => (K::AlreadyExists, ""),
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => (
            K::PermissionDenied,
            ". Check the credentials: spark.hadoop.fs.s3a.access.key / secret.key (or \
             AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), the GCS key file \
             (spark.hadoop.fs.gs.auth.service.account.json.keyfile, GOOGLE_APPLICATION_CREDENTIALS) \
             or the Azure account key, and that they may read and write this path",
        ),
        object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. } => (
            K::Unsupported,
            ". The store does not support this request (Sluice needs conditional creates, \
             `If-None-Match: *`, for its logs on object storage)",
        ),
        object_store::Error::Precondition { .. } | object_store::Error::NotModified { .. } => {
            (K::AlreadyExists, "")
        }
        object_store::Error::InvalidPath { .. } => (K::InvalidInput, ""),
        object_store::Error::Generic { .. } => (
            K::Other,
            ". The request failed after Sluice's retries (sluice.storage.retry.maxRetries); \
             check that the endpoint (spark.hadoop.fs.s3a.endpoint or AWS_ENDPOINT_URL) is \
             reachable and the bucket exists",
        ),
        _ => (K::Other, ""),
    };
    io::Error::new(kind, format!("{url}: {e}{fix}"))
}
