//! Query execution: the micro-batch and continuous loops.

pub(crate) mod continuous;
mod microbatch;

pub use continuous::ContinuousExecution;
pub use microbatch::MicroBatchExecution;
