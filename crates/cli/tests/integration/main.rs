//! The integration tests of the `sluice` command as one test binary, each module in its own
//! file; they run the built binary (`CARGO_BIN_EXE_sluice`). `cargo test -p sluice-cli --test
//! integration chaos::` runs one module. Helpers shared by the modules (one copy each) are in
//! `../support/mod.rs`. The tests whose names contain `kafka` need `scripts/kafka-broker start`.

#[path = "../support/mod.rs"]
mod support;

// `sluice run PIPELINE.sql` on every example pipeline, Ctrl-C, errors with their place, the
// dashboard, and the Kafka pipelines (micro-batch and continuous).
mod pipelines;

// `sluice run --ui` under load: 5,000 idle connections, huge headers, clients that never read.
mod dashboard;

// SIGKILLed `sluice run` processes restarted on their checkpoint: every row exactly once.
mod chaos;

// `sluice checkpoint describe` and `sluice state read` on a checkpoint made by a test query.
mod inspect;

// One batch many times sluice.memory.limit, run within it.
mod memory;

// The command as a command: `--version`, `--help` of every subcommand, bad arguments (exit 2),
// and the engine's warnings on stderr (`RUST_LOG`).
mod cli;

// A file -> Delta pipeline on S3 (scripts/s3-server), SIGKILLed 30 times; read back with Python
// deltalake (feature `delta`).
#[cfg(feature = "delta")]
mod s3_delta_chaos;

// `sluice connect`: no token, no address other than loopback; its access and limit flags
// (feature `connect`).
#[cfg(feature = "connect")]
mod connect;

// A query on three `sluice worker` processes, its checkpoint on S3: the rows of one process,
// with and without a worker SIGKILLed (feature `distributed`).
#[cfg(feature = "distributed")]
mod distributed;
