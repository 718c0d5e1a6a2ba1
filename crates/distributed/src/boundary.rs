//! Where a batch's plan leaves the driver: [`OnWorkers`], the physical optimizer rule that puts
//! the stateless work over a batch's rows on the workers and the rest on the driver.
//!
//! A read on the workers ([`WorkerReadExec`]) takes the nodes over it that work row by row
//! (watermark nodes too), to run on each run's worker with the read ([`with_read`]).
//!
//! A source's rows (an in-memory scan) become a [`BatchRowsExec`] split over the workers; the
//! nodes above it that work row by row or partition by partition and that the wire carries
//! (projections, filters, Spark's generators, partial aggregations) run with it, on every
//! worker; a `NetworkCoalesceExec` brings their output back to the driver below the first node that needs
//! all of it, or that must run where the query loop is (a watermark node, whose event times the
//! driver reads; a stateful operator's input is the end of its stage plan). The rule places the
//! boundaries itself, so datafusion-distributed does not add its own.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::physical_expr::ScalarFunctionExpr;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::Partitioning;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, PlanProperties};
use datafusion_distributed::NetworkCoalesceExec;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use prost::Message;
use sluice::source::remote::WorkerReadExec;

use crate::codec::SluiceCodec;
use crate::gather::GatherExec;
use crate::resolver::Workers;
use crate::rows::BatchRowsExec;
use crate::tasks::TaskLog;

/// The rule (added after DataFusion's own physical optimizer rules).
#[derive(Debug)]
pub(crate) struct OnWorkers {
    pub(crate) workers: Workers,
    /// Where the driver records the tasks it reads.
    pub(crate) log: Arc<TaskLog>,
}

/// A subtree that can run on the workers, on how many tasks, and the properties (partitions)
/// of its root as planned for one process.
struct Shippable {
    tasks: usize,
    original: Arc<PlanProperties>,
}

impl PhysicalOptimizerRule for OnWorkers {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // The workers are probed once per plan, and only when it has rows to ship.
        let mut answering = None;
        let mut workers = || -> Result<usize> {
            if answering.is_none() {
                answering = Some(self.workers.urls()?.len());
            }
            Ok(answering.unwrap_or(0))
        };
        let (plan, ship) = place(plan, &mut workers, &self.log)?;
        let plan = match ship {
            Some(s) => coalesce(plan, s, &self.log)?,
            None => plan,
        };
        // The driver's part of a distributed plan is one partition (datafusion-distributed's
        // `DistributedExec` runs one); a plan that stays on the driver keeps its partitions.
        if !has_boundary(&plan) {
            return Ok(plan);
        }
        let plan: Arc<dyn ExecutionPlan> = match plan.output_partitioning().partition_count() {
            1 => plan,
            _ => Arc::new(GatherExec::concat(plan)),
        };
        if log::log_enabled!(log::Level::Debug) {
            let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(true);
            log::debug!("a batch's plan on the workers:\n{shown}");
        }
        Ok(plan)
    }

    fn name(&self) -> &str {
        "sluice_on_workers"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` with its shippable subtrees cut from the driver's part, and whether `plan` itself
/// can run on the workers.
fn place(
    plan: Arc<dyn ExecutionPlan>,
    workers: &mut dyn FnMut() -> Result<usize>,
    log: &Arc<TaskLog>,
) -> Result<(Arc<dyn ExecutionPlan>, Option<Shippable>)> {
    if let Some((schema, parts)) = batch_rows(&plan) {
        let rows: usize = parts.iter().flatten().map(|b| b.num_rows()).sum();
        // Fewer than two tasks: nothing to gain from the wire.
        let tasks = if rows < 2 { rows } else { workers()?.min(rows) };
        if tasks < 2 {
            return Ok((plan, None));
        }
        let original = Arc::clone(plan.properties());
        let rows = Arc::new(BatchRowsExec::for_tasks(schema, parts, tasks));
        return Ok((rows, Some(Shippable { tasks, original })));
    }
    let children = plan.children().into_iter().cloned().collect::<Vec<_>>();
    if children.is_empty() {
        return Ok((plan, None));
    }
    let mut placed = Vec::with_capacity(children.len());
    for child in children {
        placed.push(place(child, workers, log)?);
    }
    if let [(child, None)] = placed.as_slice() {
        if let Some(fused) = with_read(&plan, child)? {
            return Ok((fused, None));
        }
    }
    let ships = placed.len() == 1 && placed[0].1.is_some();
    if ships && runs_on_workers(&plan) && functions_travel(&plan) && encodes(&plan) {
        if let Some((child, Some(s))) = placed.pop() {
            let original = Arc::clone(plan.properties());
            let shipped = with_children(plan, vec![child])?;
            return Ok((shipped, Some(Shippable { original, ..s })));
        }
    }
    let children = placed
        .into_iter()
        .map(|(child, ship)| match ship {
            Some(s) => coalesce(child, s, log),
            None => Ok(child),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((with_children(plan, children)?, None))
}

/// `plan` run on the workers with the read under it: when `child` is a read on the workers
/// (or a round-robin repartition of one, which `plan` then goes under: a node that works row by
/// row gives the same rows either way) and `plan` works row by row or partition by partition,
/// or is a watermark node (its event-time statistics come back with the read's counts), and
/// its functions travel and the wire carries it. The read's rows then cross the wire once,
/// through `plan`.
fn with_read(
    plan: &Arc<dyn ExecutionPlan>,
    child: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let (read, repartition) = match child.downcast_ref::<WorkerReadExec>() {
        Some(read) => (read, None),
        None => {
            let Some(repartition) = child.downcast_ref::<RepartitionExec>() else {
                return Ok(None);
            };
            if !matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_)) {
                return Ok(None);
            }
            match repartition.input().downcast_ref::<WorkerReadExec>() {
                Some(read) => (read, Some(child)),
                None => return Ok(None),
            }
        }
    };
    let row_by_row = runs_on_workers(plan) || sluice::watermark_parts(plan).is_some();
    if !(row_by_row && functions_travel(plan) && encodes(plan)) {
        return Ok(None);
    }
    let under = read.above().cloned().unwrap_or_else(|| read.leaf());
    let above = with_children(Arc::clone(plan), vec![under])?;
    let encoded =
        PhysicalPlanNode::try_from_physical_plan(Arc::clone(&above), &SluiceCodec)?.encode_to_vec();
    let fused: Arc<dyn ExecutionPlan> = Arc::new(
        read.with_above(above, encoded)
            .map_err(|e| DataFusionError::External(Box::new(e)))?,
    );
    Ok(Some(match repartition {
        Some(repartition) => with_children(Arc::clone(repartition), vec![fused])?,
        None => fused,
    }))
}

/// Whether part of `plan` runs on the workers.
fn has_boundary(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<NetworkCoalesceExec>() || plan.children().into_iter().any(has_boundary)
}

/// `plan` run on `s.tasks` workers, its output gathered on the driver in the partitions it
/// has in one process ([`GatherExec::in_order`]).
fn coalesce(
    plan: Arc<dyn ExecutionPlan>,
    s: Shippable,
    log: &Arc<TaskLog>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let network = Arc::new(NetworkCoalesceExec::try_new(plan, s.tasks, 1)?);
    Ok(Arc::new(GatherExec::in_order(
        network,
        s.original,
        s.tasks,
        Arc::clone(log),
    )))
}

/// A scan of a batch's in-memory rows: its schema and each partition's rows (projected as the
/// scan reads them), unless it has a limit.
fn batch_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<(SchemaRef, Vec<Vec<RecordBatch>>)> {
    let source = plan.downcast_ref::<DataSourceExec>()?;
    let memory = source.data_source().downcast_ref::<MemorySourceConfig>()?;
    if datafusion::datasource::source::DataSource::fetch(memory).is_some() {
        return None;
    }
    let parts = memory
        .partitions()
        .iter()
        .map(|part| {
            part.iter()
                .map(|b| match memory.projection() {
                    Some(p) => b.project(p),
                    None => Ok(b.clone()),
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some((plan.schema(), parts))
}

/// A node that works row by row, or partition by partition, and keeps no state between
/// batches: it runs wherever its input's rows are. (Not a round-robin repartition: the
/// workers' stages drop one at their head, which would change the partitions the driver
/// reads.)
fn runs_on_workers(plan: &Arc<dyn ExecutionPlan>) -> bool {
    sluice::generate_parts(plan).is_some()
        || plan.is::<ProjectionExec>()
        || plan.is::<FilterExec>()
        || plan.is::<CooperativeExec>()
        || plan
            .downcast_ref::<AggregateExec>()
            .is_some_and(|a| *a.mode() == AggregateMode::Partial)
}

/// Whether the wire carries the node `plan` (its expressions included: a function the proto
/// format cannot name keeps the node on the driver). Its input is left out (an empty one).
fn encodes(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let empty = plan
        .children()
        .into_iter()
        .map(|c| Arc::new(EmptyExec::new(c.schema())) as Arc<dyn ExecutionPlan>)
        .collect();
    let Ok(alone) = with_children(Arc::clone(plan), empty) else {
        return false;
    };
    PhysicalPlanNode::try_from_physical_plan(alone, &SluiceCodec).is_ok()
}

/// `plan` over `children`, its properties computed again.
fn with_children(
    plan: Arc<dyn ExecutionPlan>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.replace_children(
        children,
        ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
    )
}

/// Whether every function of `exprs` (logical expressions, a stateful operator's) is, by name,
/// the same function on a worker.
pub(crate) fn exprs_travel(exprs: &[datafusion::logical_expr::Expr]) -> bool {
    use datafusion::logical_expr::Expr;
    let Some(worker) = worker_functions() else {
        return false;
    };
    let mut travel = true;
    for expr in exprs {
        let _ = expr.apply(|e| {
            let same = match e {
                Expr::ScalarFunction(f) => worker
                    .scalars
                    .get(f.func.name())
                    .is_some_and(|w| **w == *f.func),
                Expr::AggregateFunction(f) => worker
                    .aggregates
                    .get(f.func.name())
                    .is_some_and(|w| **w == *f.func),
                Expr::WindowFunction(_) | Expr::ScalarSubquery(_) | Expr::Exists(_) => false,
                _ => true,
            };
            travel &= same;
            Ok(if same {
                TreeNodeRecursion::Continue
            } else {
                TreeNodeRecursion::Stop
            })
        });
    }
    travel
}

/// The functions a worker has: a default session's (the worker's session is one).
struct WorkerFunctions {
    scalars: HashMap<String, Arc<ScalarUDF>>,
    aggregates: HashMap<String, Arc<AggregateUDF>>,
}

fn worker_functions() -> Option<&'static WorkerFunctions> {
    static FUNCTIONS: OnceLock<Option<WorkerFunctions>> = OnceLock::new();
    FUNCTIONS
        .get_or_init(|| {
            let session = sluice::Session::builder().build().ok()?;
            let state = session.context().state();
            let functions = WorkerFunctions {
                scalars: state.scalar_functions().clone(),
                aggregates: state.aggregate_functions().clone(),
            };
            // Kept for the process: its runtime may not be dropped where plans are made.
            std::mem::forget(session);
            Some(functions)
        })
        .as_ref()
}

/// Whether every function of the node `plan` is, by name, the same function on a worker (a
/// function sent by name resolves in the worker's registry: one built for this query's conf, or
/// one simplified away under a name the worker gives another function, stays on the driver).
fn functions_travel(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let Some(worker) = worker_functions() else {
        return false;
    };
    let mut travel = true;
    let _ = plan.apply_expressions(&mut |expr| {
        expr.apply(|e| {
            if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() {
                let fun = f.fun();
                if worker.scalars.get(fun.name()).is_none_or(|w| **w != *fun) {
                    travel = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
    });
    if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        travel &= aggregate.aggr_expr().iter().all(|a| {
            let fun = a.fun();
            worker
                .aggregates
                .get(fun.name())
                .is_some_and(|w| **w == *fun)
        });
    }
    travel
}
