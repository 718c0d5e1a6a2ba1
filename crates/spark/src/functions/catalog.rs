//! The names of Spark 3.5's built-in functions, from `spark-functions/functions.json`
//! (recorded by `scripts/spark-functions`).

use std::collections::HashMap;
use std::sync::OnceLock;

const FUNCTIONS_JSON: &str = include_str!("../../spark-functions/functions.json");

/// One Spark built-in, as recorded.
#[derive(Debug, Clone, serde::Deserialize)]
pub(super) struct SparkFunction {
    pub name: String,
    pub kind: String,
    pub stream: bool,
    #[serde(default)]
    pub why_not_in_stream: Option<String>,
}

#[derive(serde::Deserialize)]
struct File {
    functions: Vec<SparkFunction>,
}

/// Every Spark built-in, sorted by name.
pub(super) fn spark_functions() -> &'static [SparkFunction] {
    static ALL: OnceLock<Vec<SparkFunction>> = OnceLock::new();
    ALL.get_or_init(|| {
        serde_json::from_str::<File>(FUNCTIONS_JSON)
            .map(|f| f.functions)
            .unwrap_or_default()
    })
}

/// The Spark built-in called `name` (lower case), if there is one.
pub(super) fn spark_function(name: &str) -> Option<&'static SparkFunction> {
    static BY_NAME: OnceLock<HashMap<String, usize>> = OnceLock::new();
    let i = BY_NAME.get_or_init(|| {
        spark_functions()
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect()
    });
    i.get(name).map(|i| &spark_functions()[*i])
}
