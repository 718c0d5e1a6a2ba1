//! (feature `testing`) An object store that fails on request, in front of a real one: what the
//! tests of retries and of permanent store errors register with [`register_store`].
//!
//! [`register_store`]: super::register_store

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use crate::sync::MutexExt;

/// Fails requests of the store it wraps: every `n`-th request with a transient error (HTTP 503,
/// as object_store reports it), and every request whose key contains a given text with a
/// permanent one (403).
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    every: AtomicU64,
    seen: AtomicU64,
    injected: AtomicU64,
    denied: Mutex<Option<String>>,
}

impl FaultyStore {
    /// No faults yet.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<FaultyStore> {
        Arc::new(FaultyStore {
            inner,
            every: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            denied: Mutex::new(None),
        })
    }

    /// Fails every `n`-th request with a 503 (0: none).
    pub fn fail_every(&self, n: u64) {
        self.every.store(n, Ordering::SeqCst);
    }

    /// Refuses (403) every request whose key contains `text` (`None`: none).
    pub fn deny(&self, text: Option<&str>) {
        *self.denied.lock_unpoisoned() = text.map(str::to_string);
    }

    /// How many transient failures were injected.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    fn check(&self, key: &ObjectPath) -> object_store::Result<()> {
        if let Some(d) = self.denied.lock_unpoisoned().as_deref() {
            if key.as_ref().contains(d) {
                return Err(object_store::Error::PermissionDenied {
                    path: key.to_string(),
                    source: "403 Forbidden: access denied (injected)".into(),
                });
            }
        }
        let every = self.every.load(Ordering::SeqCst);
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if every > 0 && n.is_multiple_of(every) {
            self.injected.fetch_add(1, Ordering::SeqCst);
            return Err(object_store::Error::Generic {
                store: "FaultyStore",
                source: format!("503 Service Unavailable (injected) for {key}").into(),
            });
        }
        Ok(())
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check(location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check(location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.check(location)?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.check(location)?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.check(prefix.unwrap_or(&ObjectPath::default()))?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.check(to)?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.check(to)?;
        self.inner.rename_opts(from, to, options).await
    }
}
