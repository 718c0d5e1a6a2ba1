//! # sluice-spark: Spark SQL semantics on Arrow and DataFusion
//!
//! What Spark means by its SQL, independent of streaming: the function library, casts and ANSI
//! mode, the type grammar, Spark's text of values, and Spark's JSON/CSV record parsers. The
//! second layer of the workspace: it depends only on `sluice-common` (`cargo tree -e normal -p
//! sluice-spark`). The engine (`sluice`) installs it into every session and reads files through
//! [`records`]. The reference of these rules is `crates/sluice/docs/spark-semantics.md`.
//!
//! | module | concept (Spark's name) |
//! |---|---|
//! | [`functions`] | Spark's built-in functions beyond `datafusion-spark`, by family (`FUNCTIONS.md` is their status table) |
//! | [`ansi`] | casts, overflow and division, non-ANSI and ANSI (`spark.sql.ansi.enabled`): `Cast`, `Add`, `Divide`, `try_*` |
//! | [`fixes`] | what DataFusion gets wrong for Spark: `round` HALF_UP, timestamp casts, `date_format` patterns (`SparkCastRule`) |
//! | [`promote_strings`] | string operands promoted as Spark's type coercion does |
//! | [`field_access`] | `s.field` (case-insensitive), `arr[i]`, `element_at`, `get_field` (`ExtractValue`) |
//! | [`json`] | `from_json`, `to_json`, `schema_of_json` (`JsonToStructs`, `StructsToJson`) |
//! | [`schema`] | Spark's DDL schema strings and type names, one grammar (`DataType.fromDDL`, `simpleString`) |
//! | [`value_text`] | Spark's text of values: JSON (`JacksonGenerator`) and `show()`'s form |
//! | [`records`] | JSON and CSV records into rows (`JacksonParser`, `UnivocityParser`, `FailureSafeParser`), datetime patterns, Java number forms |

#![warn(missing_docs, unreachable_pub)]

pub mod ansi;
pub mod field_access;
pub mod fixes;
pub mod functions;
pub mod json;
pub mod promote_strings;
pub mod records;
pub mod schema;
pub mod value_text;

// The vocabulary, at the paths the modules above name it by.
use sluice_common::{conf, error, time_text};
