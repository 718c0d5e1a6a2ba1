//! The streaming queries of a session (`spark.streams`, Spark's `StreamingQueryManager` state)
//! and the server's limit on active queries (`--max-queries`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice::StreamingQuery;

use crate::error::{ConnectError, Result};

/// The streaming queries of one session (`spark.streams`), by query id.
#[derive(Default)]
pub struct Queries {
    pub(crate) by_id: Mutex<HashMap<String, StreamingQuery>>,
    /// Terminated queries `resetTerminated` already accounted for.
    pub(crate) reset: Mutex<HashSet<String>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Queries {
    pub(crate) fn insert(&self, query: StreamingQuery) {
        lock(&self.by_id).insert(query.id().to_string(), query);
    }
    pub(crate) fn get(&self, id: &str) -> Result<StreamingQuery> {
        lock(&self.by_id).get(id).cloned().ok_or_else(|| {
            ConnectError::illegal_argument(format!(
                "no streaming query with id {id} in this session (queries belong to the session \
                 that started them)"
            ))
        })
    }
    /// Every query of the session, active or not.
    pub fn all(&self) -> Vec<StreamingQuery> {
        lock(&self.by_id).values().cloned().collect()
    }
    /// Stops every query after its current batch (session release, server shutdown).
    pub fn stop_all(&self) {
        for q in self.all() {
            q.stop();
        }
    }
}

/// The server's active streaming queries, across its sessions, and its limit on them
/// (`sluice connect --max-queries`): each holds a thread, its state and maybe a Python worker.
pub struct QueryLimit {
    pub(crate) max: usize,
    pub(crate) slots: Mutex<QuerySlots>,
}

#[derive(Default)]
pub(crate) struct QuerySlots {
    pub(crate) active: Vec<StreamingQuery>,
    /// Queries being started (their Python worker, their first plan) and not yet active.
    pub(crate) starting: usize,
}

/// The default of `--max-queries`.
pub const DEFAULT_MAX_QUERIES: usize = 100;

impl Default for QueryLimit {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_QUERIES)
    }
}

impl std::fmt::Debug for QueryLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryLimit")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl QueryLimit {
    /// At most `max` active streaming queries.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            slots: Mutex::default(),
        }
    }

    /// A place for one more query, or the error naming the limit.
    pub(crate) fn reserve(self: &Arc<Self>) -> Result<QuerySlot> {
        let mut slots = lock(&self.slots);
        slots.active.retain(StreamingQuery::is_active);
        if slots.active.len() + slots.starting >= self.max {
            return Err(crate::limits::too_many_queries(self.max));
        }
        slots.starting += 1;
        Ok(QuerySlot(self.clone()))
    }

    /// How many queries are active now.
    pub fn active(&self) -> usize {
        let mut slots = lock(&self.slots);
        slots.active.retain(StreamingQuery::is_active);
        slots.active.len()
    }
}

/// A reserved place for a query being started; given back when dropped.
pub(crate) struct QuerySlot(Arc<QueryLimit>);

impl QuerySlot {
    pub(crate) fn started(self, query: &StreamingQuery) {
        lock(&self.0.slots).active.push(query.clone());
    }
}

impl Drop for QuerySlot {
    fn drop(&mut self) {
        let mut slots = lock(&self.0.slots);
        slots.starting = slots.starting.saturating_sub(1);
    }
}
