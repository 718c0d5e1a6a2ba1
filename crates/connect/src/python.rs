//! The client's own Python workers (being written on branch f-python).

use crate::error::{ConnectError, Result};
use crate::proto;

/// How Python workers are started.
#[derive(Debug, Clone)]
pub struct PythonConfig {
    /// The interpreter.
    pub python: String,
    /// The URL the worker connects back to.
    pub connect_url: String,
}

impl PythonConfig {
    /// `--python`, else `PYSPARK_PYTHON`, else `python3`.
    pub fn from_env(python: Option<String>, connect_url: String) -> Self {
        let python = python
            .or_else(|| std::env::var("PYSPARK_PYTHON").ok())
            .unwrap_or_else(|| "python3".to_string());
        Self { python, connect_url }
    }
}

/// The `foreach_batch_worker`.
#[derive(Debug)]
pub struct ForeachBatchWorker {}

impl ForeachBatchWorker {
    /// Starts the worker.
    pub fn start(config: &PythonConfig, session_id: &str, function: &proto::PythonUdf) -> Result<Self> {
        let _ = (config, session_id, function);
        Err(ConnectError::not_supported("Python foreachBatch"))
    }
    /// Runs the function on a cached batch.
    pub fn call(&mut self, df_id: &str, batch_id: i64) -> Result<()> {
        let _ = (df_id, batch_id);
        Err(ConnectError::not_supported("Python foreachBatch"))
    }
}
