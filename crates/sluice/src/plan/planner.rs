//! The session's query planner: DataFusion's physical planner plus the planners of Sluice's
//! extension nodes ([`EventTimeWatermark`], generators' `Generate`). `Session` installs
//! [`SluiceQueryPlanner`].

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session as DfSession;
use datafusion::error::Result as DfResult;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

use crate::operators::watermark::{EventTimeWatermark, EventTimeWatermarkExec};

/// Plans [`EventTimeWatermark`] nodes.
#[derive(Debug, Default)]
pub(crate) struct WatermarkExtensionPlanner;

#[async_trait]
impl ExtensionPlanner for WatermarkExtensionPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn DfSession,
        _ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(w) = node.as_any().downcast_ref::<EventTimeWatermark>() else {
            return Ok(None);
        };
        let input = physical_inputs[0].clone();
        let index = input.schema().index_of(w.column.name())?;
        let stats = w.stats.clone().unwrap_or_default();
        Ok(Some(Arc::new(EventTimeWatermarkExec::new(
            input, index, w.delay_ms, stats,
        ))))
    }
}

/// DataFusion's planner plus Sluice's extension nodes.
#[derive(Debug, Default)]
pub(crate) struct SluiceQueryPlanner;

#[async_trait]
impl QueryPlanner for SluiceQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn DfSession,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![
            Arc::new(WatermarkExtensionPlanner),
            Arc::new(crate::plan::generate::exec::GenerateExtensionPlanner),
        ])
        .create_physical_plan(logical_plan, session)
        .await
    }
}
