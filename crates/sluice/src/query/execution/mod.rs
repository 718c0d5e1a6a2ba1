//! The executions of a streaming query (Spark's `StreamExecution` and its subclasses): one core
//! ([`core`]: checkpoint, conf, sources and sink, thread and lifecycle, status) and one
//! progress reporter ([`progress`]) shared by two thin drivers, each only its loop:
//! [`MicroBatchExecution`] (a sequence of batches) and [`ContinuousExecution`] (epochs of rows
//! processed as they arrive).

pub(crate) mod continuous;
pub(crate) mod core;
mod late_rows;
mod microbatch;
mod output;
pub(crate) mod progress;
mod sources;
mod trigger;

pub use continuous::ContinuousExecution;
pub use microbatch::MicroBatchExecution;
pub(crate) use trigger::MicroBatchTrigger;
