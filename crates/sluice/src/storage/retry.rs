//! Retries with exponential backoff around every object store request, and the counters that
//! progress reports (`objectStore` in a batch's progress).

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use super::registry::RetryPolicy;

/// Request counters of the object stores this process uses, summed over every store.
#[derive(Debug, Default)]
pub struct StoreMetrics {
    requests: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
}

/// A copy of [`StoreMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Requests sent (each retry counts again).
    pub requests: u64,
    /// Requests sent again after a transient failure (5xx, timeout, connection error).
    pub retries: u64,
    /// Requests that failed for good: a permanent error, or transient ones past the retries.
    pub failures: u64,
}

impl StoreCounts {
    /// `self - earlier`, per counter.
    pub fn since(&self, earlier: &StoreCounts) -> StoreCounts {
        StoreCounts {
            requests: self.requests.saturating_sub(earlier.requests),
            retries: self.retries.saturating_sub(earlier.retries),
            failures: self.failures.saturating_sub(earlier.failures),
        }
    }
}

impl StoreMetrics {
    /// The counters now.
    pub fn counts(&self) -> StoreCounts {
        StoreCounts {
            requests: self.requests.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

static METRICS: StoreMetrics = StoreMetrics {
    requests: AtomicU64::new(0),
    retries: AtomicU64::new(0),
    failures: AtomicU64::new(0),
};

/// The process's object store counters (every store; local files are not counted).
pub fn metrics() -> &'static StoreMetrics {
    &METRICS
}

/// Whether an error may go away when the request is sent again: object_store reports HTTP
/// 5xx, 429, timeouts and connection errors as `Generic` (its own retries are off, so each
/// attempt is seen here); every other kind (not found, already exists, precondition, access
/// denied, not implemented, bad path) is an answer, not a failure.
pub(super) fn is_transient(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { .. })
}

/// Runs `attempt` until it succeeds, fails permanently, or the policy's retries are used up,
/// sleeping with exponential backoff between attempts and counting each one.
pub(super) async fn with_retries<T, F, Fut>(
    policy: &RetryPolicy,
    mut attempt: F,
) -> object_store::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = object_store::Result<T>>,
{
    let mut delay = policy.initial_backoff;
    let mut retries = 0u32;
    loop {
        METRICS.requests.fetch_add(1, Ordering::Relaxed);
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if is_transient(&e) && retries < policy.max_retries => {
                retries += 1;
                METRICS.retries.fetch_add(1, Ordering::Relaxed);
                // Secrets are never printed (an error may echo a signed URL or a key).
                log::warn!(
                    "object store request failed ({}); retry {retries} of {} in {} ms",
                    crate::redact::redact_text(&e.to_string()),
                    policy.max_retries,
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(policy.max_backoff);
            }
            Err(e) => {
                METRICS.failures.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        }
    }
}

/// A store with Sluice's retries and counters around every request: what the engine and the
/// Delta crate talk to.
#[derive(Debug)]
pub(super) struct RetryingStore {
    inner: Arc<dyn ObjectStore>,
    policy: RetryPolicy,
}

impl RetryingStore {
    pub(super) fn new(inner: Arc<dyn ObjectStore>, policy: RetryPolicy) -> Self {
        RetryingStore { inner, policy }
    }
}

impl fmt::Display for RetryingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

#[async_trait]
impl ObjectStore for RetryingStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let create = matches!(opts.mode, object_store::PutMode::Create);
        let mut attempts = 0u32;
        let result = with_retries(&self.policy, || {
            attempts += 1;
            self.inner.put_opts(location, payload.clone(), opts.clone())
        })
        .await;
        match result {
            // A create that was retried may have landed the first time (the answer was lost):
            // the object holding exactly these bytes is this writer's own.
            Err(object_store::Error::AlreadyExists { path, source }) if create && attempts > 1 => {
                let mine = with_retries(&self.policy, || async {
                    self.inner
                        .get_opts(location, GetOptions::default())
                        .await?
                        .bytes()
                        .await
                })
                .await
                .is_ok_and(|b| b.as_ref() == payload_bytes(&payload).as_ref());
                if mine {
                    let meta = self.inner.head(location).await?;
                    Ok(PutResult {
                        e_tag: meta.e_tag,
                        version: meta.version,
                    })
                } else {
                    Err(object_store::Error::AlreadyExists { path, source })
                }
            }
            other => other,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        with_retries(&self.policy, || {
            self.inner.put_multipart_opts(location, opts.clone())
        })
        .await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        with_retries(&self.policy, || {
            self.inner.get_opts(location, options.clone())
        })
        .await
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        with_retries(&self.policy, || self.inner.get_ranges(location, ranges)).await
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

    fn list_with_offset(
        &self,
        prefix: Option<&ObjectPath>,
        offset: &ObjectPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        with_retries(&self.policy, || self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        with_retries(&self.policy, || {
            self.inner.copy_opts(from, to, options.clone())
        })
        .await
    }

    async fn rename_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        with_retries(&self.policy, || {
            self.inner.rename_opts(from, to, options.clone())
        })
        .await
    }
}

fn payload_bytes(p: &PutPayload) -> Bytes {
    let mut out = Vec::with_capacity(p.content_length());
    for b in p.iter() {
        out.extend_from_slice(b);
    }
    Bytes::from(out)
}
