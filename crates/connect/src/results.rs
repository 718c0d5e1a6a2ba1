//! What one `ExecutePlan` returns ([`Results`]): the responses of a relation or a command, in
//! order, each sent as one `ExecutePlanResponse` (Spark's `SparkConnectPlanExecution` output).

use crate::proto;
use crate::proto::execute_plan_response::ResponseType;

/// The results of one plan, in order (each becomes one `ExecutePlanResponse`).
#[derive(Default)]
pub(crate) struct Results {
    /// The result's schema, when it has one (a relation's rows).
    pub(crate) schema: Option<proto::DataType>,
    /// The responses, in order.
    pub(crate) items: Vec<ResponseType>,
}

impl Results {
    /// One result.
    pub(crate) fn one(item: ResponseType) -> Self {
        Self {
            schema: None,
            items: vec![item],
        }
    }
    /// No result.
    pub(crate) fn none() -> Self {
        Self::default()
    }
}
