//! # sluice-common: the vocabulary every Sluice crate speaks
//!
//! The bottom layer of the workspace; it depends on no other Sluice crate (`cargo tree -p
//! sluice-common`). The engine (`sluice`) re-exports each module under its old path
//! (`sluice::error`, `sluice::types`, ...), so users see one API.
//!
//! | module | concept (Spark's name) |
//! |---|---|
//! | [`types`] | `OutputMode`, `Trigger`, `BatchData`, `Offset`, batch/operator ids, watermark and event-time units |
//! | [`error`] | `SluiceError`: fault, stable class (every class listed once in [`error::class`]), message with the fix |
//! | [`conf`] | every conf key the engine reads, its default, `StreamingConf` (parsed once per query from a conf lookup) and `PinnedConf` (frozen into `offsets/N`) |
//! | [`progress`] | `StreamingQueryProgress` and friends with Spark's JSON keys, `StreamingQueryListener` |
//! | [`redact`] | secrets are never printed: secret keys (Spark's `spark.redaction.regex`, extended), remembered secret values, `redact_text` |
//! | [`time_text`] | timestamps as text, in Spark's two forms, and Spark's interval strings |
//! | [`testing`] | test hooks (feature `testing`): injected crashes and stops, no-ops without the feature |
//! | [`rows`] | rows between blocking code and DataFusion's streams (`row_stream`, `blocking_rows`) |
//! | [`sync`] | locks that survive poisoning (`MutexExt`, `RwLockExt`) |
//! | [`threads`] | `on_threads`: work spread over scoped threads, results in order |

#![warn(missing_docs, unreachable_pub)]

pub mod conf;
pub mod error;
pub mod progress;
pub mod redact;
pub mod rows;
#[doc(hidden)]
pub mod sync;
pub mod testing;
pub mod threads;
pub mod time_text;
pub mod types;

pub use error::{Fault, Result, SluiceError};
