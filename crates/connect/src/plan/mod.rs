//! Spark Connect plans to Sluice frames.
//!
//! A `Relation` tree becomes a [`StreamFrame`]; expressions become Spark SQL text, planned by
//! Sluice's own Spark SQL (one function library for SQL and `pyspark.sql.functions`).

use sluice::StreamFrame;

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::session::ConnectSession;

pub mod types;

/// The frame a relation describes, in `session`.
pub fn frame(session: &ConnectSession, relation: &proto::Relation) -> Result<StreamFrame> {
    let _ = session;
    Err(ConnectError::not_supported(format!(
        "the relation {:?}",
        relation.rel_type.as_ref().map(|_| "..")
    )))
}
