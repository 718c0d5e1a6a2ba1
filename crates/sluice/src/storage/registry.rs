//! Which object store serves a URL: stores registered by hand, or built on first use from the
//! Hadoop options (`spark.hadoop.*` conf) and the environment, cached per scheme and bucket.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

use object_store::ObjectStore;

use super::retry::RetryingStore;
use crate::sync::RwLockExt;

/// How object store requests are retried (`sluice.storage.retry.*` conf).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (`sluice.storage.retry.maxRetries`, 8).
    pub max_retries: u32,
    /// The first backoff (`sluice.storage.retry.initialBackoffMs`, 100 ms); doubled each time.
    pub initial_backoff: Duration,
    /// The longest backoff (`sluice.storage.retry.maxBackoffMs`, 5000 ms).
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(5000),
        }
    }
}

#[derive(Default)]
struct Registry {
    /// Hadoop options (`fs.s3a.endpoint`, ...: `spark.hadoop.` removed) and `sluice.storage.*`.
    options: BTreeMap<String, String>,
    /// Stores put there by [`register_store`], by URL prefix (`s3://bucket`).
    registered: HashMap<String, Arc<dyn ObjectStore>>,
    /// Stores built from the options, by `scheme://authority`.
    built: HashMap<String, Arc<dyn ObjectStore>>,
}

static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(|| RwLock::new(Registry::default()));

/// Sets the options stores are built from: the `spark.hadoop.*` entries of `conf` (Hadoop's
/// keys, `spark.hadoop.` removed, as Spark hands them to Hadoop) and `sluice.storage.*`. When
/// they change, the stores built from the old ones are dropped and rebuilt on next use.
/// Process-wide, as Hadoop's `FileSystem` cache is.
pub fn configure<'a>(conf: impl IntoIterator<Item = (&'a String, &'a String)>) {
    let options: BTreeMap<String, String> = conf
        .into_iter()
        .filter_map(|(k, v)| {
            if let Some(h) = k.strip_prefix("spark.hadoop.") {
                Some((h.to_string(), v.clone()))
            } else if k.starts_with("sluice.storage.") {
                Some((k.clone(), v.clone()))
            } else {
                None
            }
        })
        .collect();
    let mut reg = REGISTRY.write_unpoisoned();
    if reg.options != options {
        reg.options = options;
        reg.built.clear();
    }
}

/// Serves every path under `url_prefix` (`s3://bucket`, `memory://name`) from `store`, with
/// Sluice's retries and counters around it. Replaces what was registered there before.
pub fn register_store(url_prefix: &str, store: Arc<dyn ObjectStore>) {
    let prefix = super::remote::normalise_prefix(url_prefix);
    let policy = retry_policy();
    let mut reg = REGISTRY.write_unpoisoned();
    reg.registered
        .insert(prefix, Arc::new(RetryingStore::new(store, policy)));
}

/// One of the current options (a Hadoop key without `spark.hadoop.`, or `sluice.storage.*`).
pub(crate) fn option(key: &str) -> Option<String> {
    REGISTRY.read_unpoisoned().options.get(key).cloned()
}

/// The retry policy of the current options.
pub(crate) fn retry_policy() -> RetryPolicy {
    let reg = REGISTRY.read_unpoisoned();
    policy_from(&reg.options)
}

fn policy_from(options: &BTreeMap<String, String>) -> RetryPolicy {
    let d = RetryPolicy::default();
    let num = |k: &str| options.get(k).and_then(|v| v.trim().parse::<u64>().ok());
    RetryPolicy {
        max_retries: num("sluice.storage.retry.maxRetries")
            .map(|v| v.min(u32::MAX as u64) as u32)
            .unwrap_or(d.max_retries),
        initial_backoff: num("sluice.storage.retry.initialBackoffMs")
            .map(Duration::from_millis)
            .unwrap_or(d.initial_backoff),
        max_backoff: num("sluice.storage.retry.maxBackoffMs")
            .map(Duration::from_millis)
            .unwrap_or(d.max_backoff),
    }
}

/// The store for `scheme://authority` (the scheme normalised), and the registered prefix it
/// came from when there is one (`registered_key` is matched against the longest prefix).
pub(super) fn store_for(scheme: &str, authority: &str) -> io::Result<Arc<dyn ObjectStore>> {
    let root = format!("{scheme}://{authority}");
    {
        let reg = REGISTRY.read_unpoisoned();
        if let Some(s) = reg.registered.get(&root).or_else(|| reg.built.get(&root)) {
            return Ok(s.clone());
        }
    }
    let mut reg = REGISTRY.write_unpoisoned();
    if let Some(s) = reg.registered.get(&root).or_else(|| reg.built.get(&root)) {
        return Ok(s.clone());
    }
    let policy = policy_from(&reg.options);
    let inner = build(scheme, authority, &reg.options)?;
    let store: Arc<dyn ObjectStore> = Arc::new(RetryingStore::new(inner, policy));
    reg.built.insert(root, store.clone());
    Ok(store)
}

fn build(
    scheme: &str,
    authority: &str,
    options: &BTreeMap<String, String>,
) -> io::Result<Arc<dyn ObjectStore>> {
    match scheme {
        "memory" => Ok(Arc::new(object_store::memory::InMemory::new())),
        #[cfg(feature = "cloud")]
        "s3" => cloud::s3(authority, options),
        #[cfg(feature = "cloud")]
        "gs" => cloud::gcs(authority, options),
        #[cfg(feature = "cloud")]
        "abfss" | "abfs" | "az" => cloud::azure(scheme, authority, options),
        _ => {
            let _ = (authority, options);
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{scheme}:// paths need Sluice built with the engine's `cloud` feature \
                     (on by default)"
                ),
            ))
        }
    }
}

#[cfg(feature = "cloud")]
mod cloud {
    use super::*;
    use object_store::aws::AmazonS3Builder;
    use object_store::azure::MicrosoftAzureBuilder;
    use object_store::gcp::GoogleCloudStorageBuilder;
    use object_store::{ClientOptions, RetryConfig};

    /// object_store's own retries are off: Sluice's (`retry.rs`) count each attempt.
    fn no_retries() -> RetryConfig {
        RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        }
    }

    fn client_options(options: &BTreeMap<String, String>, allow_http: bool) -> ClientOptions {
        let ms = |k: &str, d: u64| {
            options
                .get(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(d)
        };
        ClientOptions::new()
            .with_allow_http(allow_http)
            .with_timeout(Duration::from_millis(ms(
                "sluice.storage.requestTimeoutMs",
                30_000,
            )))
            .with_connect_timeout(Duration::from_millis(ms(
                "sluice.storage.connectTimeoutMs",
                5_000,
            )))
    }

    fn build_error(what: &str, e: object_store::Error) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot set up the {what} store: {e}"),
        )
    }

    /// S3 with Hadoop S3A's keys: `fs.s3a.endpoint` (and `fs.s3a.connection.ssl.enabled`),
    /// `fs.s3a.access.key` / `secret.key` / `session.token`, `fs.s3a.path.style.access`,
    /// `fs.s3a.endpoint.region`, `fs.s3a.aws.credentials.provider` (the anonymous provider);
    /// each may be given per bucket as `fs.s3a.bucket.<bucket>.<key>`. What they leave unset
    /// comes from the `AWS_*` environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...).
    pub(super) fn s3(
        bucket: &str,
        options: &BTreeMap<String, String>,
    ) -> io::Result<Arc<dyn ObjectStore>> {
        let get = |k: &str| {
            options
                .get(&format!("fs.s3a.bucket.{bucket}.{k}"))
                .or_else(|| options.get(&format!("fs.s3a.{k}")))
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_retry(no_retries());
        let env_http =
            std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        let mut allow_http = env_http;
        if let Some(ep) = get("endpoint") {
            let ssl =
                get("connection.ssl.enabled").is_none_or(|v| !v.eq_ignore_ascii_case("false"));
            let ep = if ep.contains("://") {
                ep
            } else if ssl {
                format!("https://{ep}")
            } else {
                format!("http://{ep}")
            };
            allow_http |= ep.starts_with("http://");
            let path_style =
                get("path.style.access").is_some_and(|v| v.eq_ignore_ascii_case("true"));
            if path_style {
                b = b.with_endpoint(ep).with_virtual_hosted_style_request(false);
            } else {
                // S3A's default: the bucket is a host name under the endpoint.
                let (proto, host) = ep.split_once("://").unwrap_or(("https", ep.as_str()));
                b = b
                    .with_endpoint(format!("{proto}://{bucket}.{host}"))
                    .with_virtual_hosted_style_request(true);
            }
        } else if let Some(v) = get("path.style.access") {
            b = b.with_virtual_hosted_style_request(!v.eq_ignore_ascii_case("true"));
        }
        if let Some(v) = get("access.key") {
            b = b.with_access_key_id(v);
        }
        if let Some(v) = get("secret.key") {
            b = b.with_secret_access_key(v);
        }
        if let Some(v) = get("session.token") {
            b = b.with_token(v);
        }
        if let Some(v) = get("endpoint.region").or_else(|| get("region")) {
            b = b.with_region(v);
        }
        if get("aws.credentials.provider").is_some_and(|p| p.contains("Anonymous")) {
            b = b.with_skip_signature(true);
        }
        b = b.with_client_options(client_options(options, allow_http));
        b.build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            .map_err(|e| build_error(&format!("s3://{bucket}"), e))
    }

    /// GCS: `fs.gs.auth.service.account.json.keyfile` (or `google.cloud.auth...`), then the
    /// `GOOGLE_*` environment (`GOOGLE_APPLICATION_CREDENTIALS`, `GOOGLE_SERVICE_ACCOUNT`).
    pub(super) fn gcs(
        bucket: &str,
        options: &BTreeMap<String, String>,
    ) -> io::Result<Arc<dyn ObjectStore>> {
        let mut b = GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(bucket)
            .with_retry(no_retries());
        if let Some(f) = options
            .get("fs.gs.auth.service.account.json.keyfile")
            .or_else(|| options.get("google.cloud.auth.service.account.json.keyfile"))
        {
            b = b.with_service_account_path(f.trim());
        }
        b = b.with_client_options(client_options(options, false));
        b.build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            .map_err(|e| build_error(&format!("gs://{bucket}"), e))
    }

    /// Azure: `abfss://container@account.dfs.core.windows.net` or `az://container` (account
    /// from `AZURE_STORAGE_ACCOUNT_NAME`); the key from
    /// `fs.azure.account.key.<account>.dfs.core.windows.net` (or `.blob.`), then `AZURE_*`.
    pub(super) fn azure(
        scheme: &str,
        authority: &str,
        options: &BTreeMap<String, String>,
    ) -> io::Result<Arc<dyn ObjectStore>> {
        let mut b = MicrosoftAzureBuilder::from_env()
            .with_url(format!("{scheme}://{authority}"))
            .with_retry(no_retries());
        let account = authority
            .split_once('@')
            .and_then(|(_, host)| host.split('.').next())
            .map(str::to_string)
            .or_else(|| std::env::var("AZURE_STORAGE_ACCOUNT_NAME").ok());
        if let Some(account) = account {
            let key = options
                .get(&format!(
                    "fs.azure.account.key.{account}.dfs.core.windows.net"
                ))
                .or_else(|| {
                    options.get(&format!(
                        "fs.azure.account.key.{account}.blob.core.windows.net"
                    ))
                });
            if let Some(k) = key {
                b = b.with_access_key(k.trim());
            }
        }
        b = b.with_client_options(client_options(options, false));
        b.build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            .map_err(|e| build_error(&format!("{scheme}://{authority}"), e))
    }
}
