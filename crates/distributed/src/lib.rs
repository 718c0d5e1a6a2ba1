//! A Sluice query on a cluster (`sluice.distributed.workers`), on `datafusion-distributed`:
//! `sluice worker` serves the workers ([`worker::serve`]); [`register`] lets every query of the
//! process that names workers run each batch's plan over them, while this process keeps the
//! query loop (offsets, commits, watermark, progress), as Spark's driver.
//!
//! What runs where: the workers read the sources' batches (files, Kafka ranges, Delta data
//! files, rate values; each a contiguous run, `actions.rs`) and run the stateless work over
//! what they read with it (projections, filters, generators, partial aggregations, watermark
//! nodes, `boundary.rs`), sending the driver only its output and the event-time statistics;
//! the stateless work over the rows of sources the driver reads (memory, socket) runs on the
//! workers through datafusion-distributed, the rows split into one slice per worker; the
//! stateful operators' state partitions are on the workers, each worker owning a range of them
//! for the batch (`actions.rs`), their rows routed by key from the workers that read them
//! (`routes.rs`) or, when an input is not only reads, by the driver. The driver keeps the loop,
//! the watermark, sorts, final aggregations, and an unnamed `flatMapGroupsWithState`'s state.
//! A batch that loses a worker runs again, with the same offsets, on the workers that answer,
//! which then own the lost worker's partitions.

mod actions;
mod boundary;
mod client;
mod codec;
mod gather;
mod resolver;
mod routes;
mod rows;
mod tasks;
mod tls;
mod wire;
pub mod worker;

use std::sync::Arc;

use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion_distributed::grpc::DefaultChannelResolver;
use datafusion_distributed::{DistributedExt, SessionStateBuilderExt};
use sluice::distributed::{Cluster, OnCluster};
use sluice::error::{Result, SluiceError};

pub use codec::SluiceCodec;
pub use tls::{use_tls, DriverTls, WorkerTls};

/// Lets every query of the process that sets `sluice.distributed.workers` run on the workers.
pub fn register() {
    sluice::distributed::register_cluster(Arc::new(DataFusionDistributed));
}

/// The [`Cluster`] on datafusion-distributed.
#[derive(Debug)]
struct DataFusionDistributed;

impl Cluster for DataFusionDistributed {
    fn batch_state(&self, local: SessionState, workers: &[String]) -> Result<OnCluster> {
        let workers = resolver::Workers {
            addresses: workers.to_vec(),
        };
        let log = Arc::new(tasks::TaskLog::default());
        // datafusion-distributed's own placements are off: a plan where `OnWorkers` placed no
        // boundary stays on the driver (unions and joins would otherwise ship Sluice's nodes).
        let builder = SessionStateBuilder::new_from_existing(local)
            .with_physical_optimizer_rule(Arc::new(boundary::OnWorkers {
                workers: workers.clone(),
                log: Arc::clone(&log),
            }))
            .with_distributed_worker_resolver(workers);
        // One channel cache per query: the default one is kept per `RuntimeEnv` address, which
        // a later session can reuse after the earlier one (and the runtime its channels ran on)
        // is gone.
        let builder = match tls::on() {
            true => builder.with_distributed_channel_resolver(tls::TlsChannels::default()),
            false => builder.with_distributed_channel_resolver(DefaultChannelResolver::default()),
        };
        let state = builder
            .with_distributed_planner()
            .with_distributed_user_codec(SluiceCodec)
            .with_distributed_desired_task_count_handler(rows::desired_tasks)
            .with_distributed_scale_up_leaf_node_handler(rows::scale_up)
            .with_distributed_children_isolator_unions(false)?
            .with_distributed_broadcast_joins(false)?
            .build();
        Ok(OnCluster { state, tasks: log })
    }

    fn is_worker_lost(&self, error: &SluiceError, workers: &[String]) -> bool {
        // A batch that failed while one of its workers is gone is run again on the others
        // (whatever the error said: a lost worker surfaces as a transport error, a broken
        // stream or a task that is not found); so is one whose connection to a worker broke
        // (a dying worker's connections can close before its port does, so the probe may still
        // find it: the next plan's probe leaves it out).
        let workers = resolver::Workers {
            addresses: workers.to_vec(),
        };
        broken_wire(&error.to_string()) || workers.one_is_lost()
    }

    fn answering(&self, workers: &[String]) -> Result<Vec<String>> {
        let workers = resolver::Workers {
            addresses: workers.to_vec(),
        };
        let answering: Vec<String> = workers.answering().into_iter().map(String::from).collect();
        if answering.is_empty() {
            // The error that names the workers and how to start them.
            workers.urls().map_err(SluiceError::from)?;
        }
        Ok(answering)
    }

    fn exprs_travel(&self, exprs: &[datafusion::logical_expr::Expr]) -> bool {
        boundary::exprs_travel(exprs)
    }

    fn start_state_task(
        &self,
        worker: &str,
        task: sluice::distributed::StateTask,
    ) -> Result<Box<dyn sluice::distributed::StateTaskRun>> {
        client::start_on(worker, task)
    }

    fn read_files(
        &self,
        worker: &str,
        task: sluice::distributed::ReadTask,
    ) -> Result<sluice::distributed::ReadItems> {
        client::read_on(worker, task)
    }
}

/// Whether `message` is the transport's (a connection to a worker closed, reset, refused or
/// cancelled; an HTTP/2 stream broken), not the query's.
fn broken_wire(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "transport error",
        "h2 protocol error",
        "broken pipe",
        "connection refused",
        "connection closed",
        "connection reset",
        "operation was canceled",
        "service was not ready",
    ]
    .iter()
    .any(|needle| m.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::broken_wire;

    #[test]
    fn transport_failures_are_told_from_the_querys_own_errors() {
        for seen in [
            "batch 1: External error: code: 'The operation was cancelled', message: \"operation \
             was canceled\", source: tonic::transport::Error(Transport, hyper::Error(Canceled, \
             \"connection closed\"))",
            "batch 3: External error: code: 'Unknown error', message: \"transport error\", \
             source: tonic::transport::Error(Transport, hyper::Error(Io, Custom { kind: \
             BrokenPipe, error: \"stream closed because of a broken pipe\" }))",
            "batch 0: External error: code: 'Unknown error', message: \"h2 protocol error: error \
             reading a body from connection\"",
            "batch 0: tonic::transport::Error(Transport, ConnectError(ConnectError(\"tcp connect \
             error\", 127.0.0.1:34207, Os { code: 111, kind: ConnectionRefused, message: \
             \"Connection refused\" })))",
        ] {
            assert!(broken_wire(seen), "{seen}");
        }
        for own in [
            "[CAST_INVALID_INPUT] batch 2: The value 'x' of the type \"STRING\" cannot be cast",
            "[MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION] batch 1: reading FileStreamSource",
        ] {
            assert!(!broken_wire(own), "{own}");
        }
    }
}
