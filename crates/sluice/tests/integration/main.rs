//! The integration tests of the `sluice` library as one test binary, each module in its own
//! file: `cargo test -p sluice --test integration` runs them all, and a filter such as
//! `cargo test -p sluice --test integration engine_join_state::` runs one module. Helpers
//! shared by the modules (one copy each) are in `../support/mod.rs`. Every Kafka test's name
//! contains `kafka`: they need `scripts/kafka-broker start`, and `-- --skip kafka` runs the
//! rest without a broker.

#[path = "../support/mod.rs"]
mod support;

// The engine spine.

// The seed documents' file example (checkpoint layout, restart, filter).
mod engine_seed;

// Crash between sink and commit, replay with the same id, exactly-once file sink.
mod engine_recovery;

// Output-mode rules, concurrent checkpoint use, missing schema.
mod engine_errors;

// Memory, foreach, foreach_batch, SQL over stream views.
mod engine_sinks;

// sluice.memory.limit on DataFusion's operators: a sort spills, a join build side stops.
mod engine_memory;

// Rate-micro-batch, memory stream, malformed input.
mod engine_sources;

// Triggers, process_all_available, listeners, stop.
mod engine_handle;

// The seed's windowed count, SQL = DataFrame API, restart after every batch, a random reference
// model against one DataFusion batch query, output-mode rules.
mod engine_aggregation;

// Deduplication state bounded by the watermark (and unbounded without), SELECT DISTINCT,
// stream-static joins and the join types Spark refuses.
mod engine_dedup_and_joins;

// The on-disk state store provider: a windowed count across a restart, eviction through the
// store's time index, Spark's rocksdb* custom metrics.
mod engine_on_disk_state;

// Aggregation state held by the operator: the same rows, progress and delta files as the
// state kept in the store.
mod engine_held_state;

// The sessionization example (GroupState, event-time timeouts), with a restart mid-session;
// processing-time timeouts; output-mode rules.
mod engine_stateful_processing;

// Stream-stream join state bounded by the watermark for each join type, left semi joins, equal
// windows as join keys, a changed join type refused on restart.
mod engine_join_state;

// Torn and damaged checkpoint logs, a missing state delta, a changed source type or file sink
// path: recovered or refused with the file named.
mod engine_bad_checkpoints;

// State bytes its operator's layout does not write (a join key with a trailing byte, a matched
// flag above 1, truncated values, keys arrow cannot decode): STATE_STORE_CORRUPT naming the
// store, never a panic.
mod engine_corrupt_state;

// Invalid UTF-8, empty files, a source directory that disappears while running.
mod engine_bad_input;

// Soaks (ignored; benches/log_soak.sh, benches/listing_scale.sh): checkpoint and manifest size
// over many batches, listing cost over many files.
mod log_growth;

// Chained stateful operators in append mode, and Spark's correctness check.
mod engine_chained;

// (ignored; run by `benches/soak_state.sh`) a million events, state bounded by the watermark.
mod engine_soak;

// Stream-stream joins write only each batch's changes to state and evict through a time index;
// Nexmark q8's equal windows as join keys bound the state.
mod engine_join_state_incremental;

// Beyond the spine.

// Spark's non-ANSI casts, overflow, division and dates (a bad value is null, never the end of a
// query), and `spark.sql.ansi.enabled=true` with Spark's error classes.
mod engine_ansi;

// The JSON/CSV readers' timestampFormat/dateFormat/timestampNTZFormat with Spark's pattern
// letters (streaming, batch, pipeline files), and the documented options Sluice refuses.
mod engine_reader_options;

// Generators (explode, posexplode, LATERAL VIEW, ..) in streams: a word count that restarts,
// windowed and session-window counts, dedup and a stream-static join over exploded words, the
// DataFrame API's generators, continuous mode refusing them.
mod engine_generators;

// from_csv over a text stream, to_csv back.
mod engine_csv_functions;

// Continuous processing (`Trigger::Continuous`): epochs, Spark's restrictions, at-least-once
// restarts.
mod continuous;

// The late-row side output (`lateRows.*`): exactly once per batch, counted in progress.
mod late_rows;

// Checkpoint and state inspection (`describe_checkpoint`, `read_state`), read-only.
mod inspect;

// The Kafka source and sink against a real broker (`scripts/kafka-broker start`).
mod kafka;

// Names resolved as Spark resolves them (spark.sql.caseSensitive), Spark's interval literals,
// null-safe join keys, self-joins and three-stream joins.
mod engine_names;

// Spark SQL syntax: `div`, `!`, `~`, string literal escapes, legacy multi-unit intervals.
mod engine_sql_syntax;

// Spark's aggregate functions in a streaming aggregation with a restart.
mod engine_functions;
// mode, percentile_approx, hll_sketch_agg and kin: their state across batches and a restart.
mod engine_aggregate_state;
// Nested types end to end: DDL, the JSON source and functions, field access, sinks, state.
mod engine_nested;

// Issue 14's acceptance path: camelCase nested JSON, an exploded array and a windowed
// aggregation, from the Rust API and a pipeline file, restarted, to parquet read by pyarrow.
mod engine_sql_surface;

// Checkpoints, the file source and sink on S3 (a local S3-compatible server, scripts/s3-server):
// restart, a second query refused, transient and permanent store errors. Every name contains
// `s3`.
mod object_store;

// Issue 18: nothing lost, nothing silent. The file sink writes every row of a query started on
// a folder that another query (or a replaced checkpoint) wrote, or refuses with the option.
mod no_silent_loss;
