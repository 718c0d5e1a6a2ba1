//! One client session (Spark Connect's `session_id`): a Sluice [`Session`] of its own, so temp
//! views, conf and queries of one client are invisible to another, plus the frames the server
//! caches for it (the batches handed to a Python `foreachBatch`) and its streaming queries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use sluice::{Session, StreamFrame};

use crate::error::Result;
use crate::queries::Queries;

/// What a session is started with.
#[derive(Clone, Default)]
pub struct SessionSettings {
    /// The Python interpreter for the client's workers (`--python`, else `PYSPARK_PYTHON`, else
    /// `python3`).
    pub python: Option<String>,
    /// The address the Python workers connect back to (`sc://host:port`).
    pub connect_url: String,
    /// Listeners every session registers (`ServerConfig::listeners`).
    pub listeners: crate::observe::Listeners,
    /// The token the Python workers send (`SPARK_CONNECT_AUTHENTICATE_TOKEN`) when the server
    /// wants one: a secret of the process, for its loopback port of its own workers.
    pub worker_token: Option<String>,
    /// The server's streaming queries, against its `--max-queries` (shared by every session).
    pub queries: Arc<crate::queries::QueryLimit>,
}

impl std::fmt::Debug for SessionSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSettings")
            .field("python", &self.python)
            .field("connect_url", &self.connect_url)
            .field("worker_token", &self.worker_token.as_ref().map(|_| "(set)"))
            .field("queries", &self.queries)
            .finish()
    }
}

/// One client's session.
pub struct ConnectSession {
    /// The client's session id (a UUID it chose).
    pub session_id: String,
    /// The server's id of this session: a new one after a restart tells the client that
    /// server-side state is gone.
    pub server_side_session_id: String,
    /// The user id the client sent.
    pub user_id: String,
    /// The engine session: conf, views, listeners.
    pub sluice: Session,
    /// The session's streaming queries (`spark.streams`).
    pub queries: Queries,
    /// Settings from the server's command line.
    pub settings: SessionSettings,
    /// Where query events go while the client listens (`spark.streams.addListener`).
    pub listener_bus: Arc<crate::listener_bus::ListenerBus>,
    cached: Mutex<HashMap<String, StreamFrame>>,
    artifacts: Mutex<HashMap<String, Vec<u8>>>,
    next_name: AtomicU64,
    last_used: Mutex<Instant>,
}

impl std::fmt::Debug for ConnectSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectSession")
            .field("session_id", &self.session_id)
            .field("user_id", &self.user_id)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ConnectSession {
    /// A new session with Sluice's defaults (session time zone UTC, as `sluice` has it).
    pub fn new(session_id: &str, user_id: &str, settings: SessionSettings) -> Result<Arc<Self>> {
        let sluice = Session::builder().build()?;
        // Before any query: the server's log lines, then the embedding program's listeners.
        sluice.add_listener(Arc::new(crate::observe::QueryLog::new(session_id)));
        settings.listeners.register(&sluice);
        Ok(Arc::new(Self {
            session_id: session_id.to_string(),
            server_side_session_id: uuid::Uuid::new_v4().to_string(),
            user_id: user_id.to_string(),
            sluice,
            queries: Queries::default(),
            settings,
            listener_bus: Arc::default(),
            cached: Mutex::new(HashMap::new()),
            artifacts: Mutex::new(HashMap::new()),
            next_name: AtomicU64::new(0),
            last_used: Mutex::new(Instant::now()),
        }))
    }

    /// A name no view of this session has yet, for the server's own views (`__sluice_<what>_N`).
    pub fn fresh_name(&self, what: &str) -> String {
        let n = self.next_name.fetch_add(1, Ordering::Relaxed);
        format!("__sluice_{what}_{n}")
    }

    /// Keeps `frame` under `id` for `CachedRemoteRelation` (a foreachBatch batch).
    pub fn cache_frame(&self, id: &str, frame: StreamFrame) {
        lock(&self.cached).insert(id.to_string(), frame);
    }
    /// The frame cached under `id`.
    pub fn cached_frame(&self, id: &str) -> Option<StreamFrame> {
        lock(&self.cached).get(id).cloned()
    }
    /// Forgets the frame cached under `id` (`RemoveCachedRemoteRelationCommand`).
    pub fn uncache_frame(&self, id: &str) {
        lock(&self.cached).remove(id);
    }

    /// Keeps an uploaded artifact (`pyfiles/..`, `cache/<hash>`, ...).
    pub fn add_artifact(&self, name: &str, data: Vec<u8>) {
        lock(&self.artifacts).insert(name.to_string(), data);
    }
    /// An uploaded artifact's bytes.
    pub fn artifact(&self, name: &str) -> Option<Vec<u8>> {
        lock(&self.artifacts).get(name).cloned()
    }

    /// Marks the session used now.
    pub fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }
    /// When the session was last used.
    pub fn last_used(&self) -> Instant {
        *lock(&self.last_used)
    }
}
