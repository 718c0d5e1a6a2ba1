//! The scenario file model of `shared/conformance/FORMAT.md`, with the extensions of Sluice's own
//! corpus (`crates/conformance/scenarios/README.md`): scenario-level `conf`, the `text` source
//! format, nested values in rows and `expect_error.class` with the `error_class` kind.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, Deserialize)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_partitions")]
    pub shuffle_partitions: usize,
    /// Spark confs set on the session before the sources and the query are defined.
    #[serde(default)]
    pub conf: BTreeMap<String, String>,
    pub sources: BTreeMap<String, SourceDef>,
    pub query: String,
    pub output_mode: String,
    #[serde(default)]
    pub ordered: bool,
    pub runs: Vec<Run>,
}

fn default_partitions() -> usize {
    2
}

/// The schema of Spark's text source.
fn default_text_schema() -> String {
    "value STRING".to_string()
}

#[derive(Debug, Clone, Deserialize)]
pub struct SourceDef {
    /// `json`, `csv`, `text` (streaming file sources) or `static`.
    pub format: String,
    #[serde(default = "default_text_schema")]
    pub schema: String,
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    pub watermark: Option<Watermark>,
    pub dedup: Option<Dedup>,
    /// For `static` sources: rows as JSON objects.
    #[serde(default)]
    pub rows: Vec<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Watermark {
    pub column: String,
    pub delay: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Dedup {
    pub columns: Vec<String>,
    #[serde(default)]
    pub within_watermark: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    #[serde(default)]
    pub add_files: BTreeMap<String, Vec<InputFile>>,
    pub query: Option<String>,
    pub expect: Option<Expect>,
    pub expect_error: Option<ExpectError>,
    pub sluice_intended: Option<SluiceIntended>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct InputFile {
    pub name: String,
    pub lines: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Expect {
    pub batches: Vec<ExpectBatch>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ExpectBatch {
    pub batch_id: u64,
    pub num_input_rows: Option<i64>,
    pub num_input_rows_without_pushdown: Option<i64>,
    #[serde(default)]
    pub rows: Vec<BTreeMap<String, Value>>,
    pub watermark: Option<String>,
    pub num_rows_dropped_by_watermark: Option<i64>,
    pub num_rows_total: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ExpectError {
    /// `output_mode`, `state_schema` or `error_class`.
    pub kind: String,
    /// Spark's error class (recorded); with kind `error_class`, Sluice's must equal it.
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub contains: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SluiceIntended {
    pub expect: Option<Expect>,
    pub expect_error: Option<ExpectError>,
    #[serde(default)]
    pub why: String,
}
