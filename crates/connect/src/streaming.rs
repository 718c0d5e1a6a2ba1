//! `writeStream` and the query handle.

use std::collections::HashMap;
use std::sync::Mutex;

use sluice::StreamingQuery;

/// The streaming queries of one session (`spark.streams`), by query id.
#[derive(Default)]
pub struct Queries {
    /// By `id`; stopped and failed queries stay until `resetTerminated`.
    pub by_id: Mutex<HashMap<String, StreamingQuery>>,
}
