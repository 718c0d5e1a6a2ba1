//! Inspecting a query checkpoint from outside the query (`sluice checkpoint describe`,
//! `sluice state read`): what the checkpoint holds, and the state of one stateful operator as
//! of a committed batch. Everything here only reads.
//!
//! This module sits above the engine: it depends on [`crate::checkpoint`] and [`crate::state`],
//! and nothing in the engine depends on it.
//!
//! | file | what |
//! |---|---|
//! | `describe.rs` | [`describe_checkpoint`]: logs, watermark, sources, sink, conf, operators |
//! | `state_read.rs` | [`read_state`]: one operator's state as of a committed batch |
//! | `probe.rs` | is it a checkpoint, its operators, partitions, schemas, readable batches |
//! | `decode.rs` | `StateDecoder`: stored pairs to Arrow rows, from the recorded schema |
//! | `ranges.rs` | [`IdRange`] and the `1-4, 7` text |

mod decode;
mod describe;
mod probe;
mod ranges;
mod state_read;

#[cfg(test)]
mod tests;

pub use describe::{
    describe_checkpoint, BatchesDescription, CheckpointDescription, OperatorDescription,
    PartitionDescription, SinkDescription, SourceDescription, WatermarkDescription,
};
pub use ranges::{format_ranges, to_ranges, IdRange};
pub use state_read::{read_state, StateSnapshot};
