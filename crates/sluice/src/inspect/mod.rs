//! Inspecting a query checkpoint from outside the query (`sluice checkpoint describe`,
//! `sluice state read`): what the checkpoint holds, and the state of one stateful operator as
//! of a committed batch. Everything here only reads.
//!
//! This module sits above the engine: it depends on [`crate::checkpoint`] and [`crate::state`],
//! and nothing in the engine depends on it.

pub mod describe;
pub mod state_read;

pub use describe::{describe_checkpoint, CheckpointDescription};
pub use state_read::{read_state, StateSnapshot};
