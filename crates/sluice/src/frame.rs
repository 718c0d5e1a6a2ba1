//! `StreamFrame`: a DataFrame that may read streams (Spark's `DataFrame` with `isStreaming`).
//!
//! Every operation builds a DataFusion `LogicalPlan`; nothing runs until `write_stream().start()`
//! (streams) or `collect()` (batch frames). Expressions are DataFusion's (`col`, `lit`, ...), or
//! SQL text through `filter_sql`/`select_sql`.

use crate::error::class;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::Column;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::Expr;

use crate::error::{Result, SluiceError};
use crate::plan::is_streaming;
use crate::plan::names::{self, NameRules};
use crate::query::DataStreamWriter;
use crate::session::Session;

/// A column reference by name (`"user"`, or qualified `"t.user"`), spelled as written: it
/// resolves as Spark resolves names (ignoring case unless `spark.sql.caseSensitive=true`), and a
/// projection of it keeps the written spelling as its output name (Spark's `col`).
pub fn col(name: impl AsRef<str>) -> Expr {
    Expr::Column(Column::from_qualified_name_ignore_case(name.as_ref()))
}

/// A streaming (or batch) frame.
#[derive(Clone)]
pub struct StreamFrame {
    session: Session,
    plan: LogicalPlan,
}

impl std::fmt::Debug for StreamFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamFrame\n{}", self.plan.display_indent())
    }
}

impl StreamFrame {
    pub(crate) fn new(session: Session, plan: LogicalPlan) -> Self {
        Self { session, plan }
    }
    /// The session the frame was created in.
    pub fn session(&self) -> &Session {
        &self.session
    }
    /// The DataFusion logical plan the frame's operations have built so far.
    pub fn logical_plan(&self) -> &LogicalPlan {
        &self.plan
    }
    /// True when the frame reads at least one stream.
    pub fn is_streaming(&self) -> bool {
        is_streaming(&self.plan)
    }
    /// The frame's output schema, as an Arrow schema.
    pub fn schema(&self) -> SchemaRef {
        Arc::new(self.plan.schema().as_arrow().clone())
    }

    fn with_plan(
        &self,
        f: impl FnOnce(LogicalPlanBuilder) -> datafusion::error::Result<LogicalPlanBuilder>,
    ) -> Result<Self> {
        let plan = f(LogicalPlanBuilder::from(self.plan.clone()))?.build()?;
        let plan = crate::plan::generate::plan_generators(plan)?; // generators as Generate nodes
        Ok(Self::new(self.session.clone(), plan))
    }

    /// Spark's name rules of the session (`spark.sql.caseSensitive`).
    fn rules(&self) -> Result<NameRules> {
        NameRules::of(&self.session)
    }
    /// `expr` with its column names resolved as Spark resolves them (`col("leftkey")` reads
    /// `leftKey`, see `plan/names.rs`).
    fn resolve(&self, expr: Expr) -> Result<Expr> {
        names::resolve_expr(self.rules()?, self.plan.schema(), expr)
    }
    /// The schema's spelling of the column `name`.
    fn column_name(&self, name: &str) -> Result<String> {
        names::resolve_column_name(self.rules()?, self.plan.schema(), name)
    }

    /// Keeps rows where `predicate` is true (null counts as false, as in Spark).
    pub fn filter(&self, predicate: Expr) -> Result<Self> {
        let predicate = self.resolve(predicate)?;
        self.with_plan(|b| b.filter(predicate))
    }
    /// `filter` with a SQL predicate, e.g. `"amount > 10 AND user <> 'bot'"`.
    pub fn filter_sql(&self, predicate: &str) -> Result<Self> {
        let expr = self.parse_sql_expr(predicate, false)?;
        self.filter(expr)
    }
    /// Keeps the named columns, in order.
    pub fn select<I, S>(&self, columns: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let exprs: Vec<Expr> = columns.into_iter().map(|c| col(c.as_ref())).collect();
        self.select_exprs(exprs)
    }
    /// A projection with expressions (alias them with `.alias("name")`). A column named in
    /// another case than the schema's keeps the name as written, as in Spark. A generator
    /// (`sluice::explode(col("xs"))`, ..) as a whole item generates rows; name several columns
    /// with `sluice::multi_alias`.
    pub fn select_exprs(&self, exprs: Vec<Expr>) -> Result<Self> {
        let exprs = crate::plan::generate::expand_multi_aliases(exprs)?
            .into_iter()
            .map(|e| {
                let written = match &e {
                    Expr::Column(c) => Some(c.name.clone()),
                    _ => None,
                };
                let r = self.resolve(e)?;
                Ok(match (written, &r) {
                    (Some(w), Expr::Column(c)) if c.name != w => r.alias(w),
                    _ => r,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.with_plan(|b| b.project(exprs))
    }
    /// A projection with SQL expressions, e.g. `["user", "amount * 2 AS doubled"]`.
    pub fn select_sql<I, S>(&self, exprs: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let exprs = exprs
            .into_iter()
            .map(|e| self.parse_sql_expr(e.as_ref(), true))
            .collect::<Result<Vec<_>>>()?;
        self.select_exprs(exprs)
    }
    /// Adds or replaces a column (one named `name` under Spark's name rules; the new column
    /// takes the spelling `name`).
    pub fn with_column(&self, name: &str, expr: Expr) -> Result<Self> {
        let expr = self.resolve(expr)?;
        let rules = self.rules()?;
        let mut exprs: Vec<Expr> = Vec::new();
        let mut replaced = false;
        for f in self.plan.schema().columns() {
            if rules.matches(name, &f.name) {
                exprs.push(expr.clone().alias(name));
                replaced = true;
            } else {
                exprs.push(Expr::Column(f));
            }
        }
        if !replaced {
            exprs.push(expr.alias(name));
        }
        self.select_exprs(exprs)
    }
    /// Renames a column (no-op if it does not exist, as in Spark).
    pub fn with_column_renamed(&self, existing: &str, new: &str) -> Result<Self> {
        let rules = self.rules()?;
        let exprs = self
            .plan
            .schema()
            .columns()
            .into_iter()
            .map(|c| {
                if rules.matches(existing, &c.name) {
                    Expr::Column(c).alias(new)
                } else {
                    Expr::Column(c)
                }
            })
            .collect();
        self.select_exprs(exprs)
    }
    /// Declares `column` (a timestamp) as event time with an allowed lateness of `delay`
    /// (`"10 minutes"`). The watermark is the max event time seen minus the delay; stateful
    /// operators that group by this column or a window over it drop rows older than it and evict
    /// state behind it.
    pub fn with_watermark(&self, column: &str, delay: &str) -> Result<Self> {
        let delay_us = crate::time_text::parse_interval_micros(delay)?;
        if delay_us < 0 {
            return Err(SluiceError::query(
                class::INVALID_WATERMARK_DELAY,
                format!("the watermark delay must not be negative, got {delay:?}"),
            ));
        }
        let column = self.column_name(column)?;
        let node = crate::operators::watermark::EventTimeWatermark::try_new(
            self.plan.clone(),
            &column,
            delay_us / 1000,
        )?;
        Ok(Self::new(self.session.clone(), node.into_plan()))
    }

    /// Drops rows whose `columns` repeat an earlier row's (Spark's `dropDuplicates`); all
    /// columns when `columns` is empty. On a stream the seen keys are state: evicted behind the
    /// watermark when the watermarked event-time column is among `columns`, else kept forever.
    pub fn drop_duplicates<I, S>(&self, columns: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.dedup(columns, false)
    }

    /// Drops copies of a key while the first occurrence is within the watermark delay (Spark's
    /// `dropDuplicatesWithinWatermark`); needs `with_watermark` before it.
    pub fn drop_duplicates_within_watermark<I, S>(&self, columns: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.dedup(columns, true)
    }

    fn dedup<I, S>(&self, columns: I, within: bool) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut keys: Vec<String> = columns
            .into_iter()
            .map(|c| self.column_name(c.as_ref()))
            .collect::<Result<_>>()?;
        if keys.is_empty() {
            keys = self
                .plan
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
        }
        if !self.is_streaming() {
            if within {
                return Err(SluiceError::query(
                    class::UNSUPPORTED_STREAMING_OPERATION,
                    "dropDuplicatesWithinWatermark is not supported with batch DataFrames/DataSets",
                ));
            }
            let on: Vec<Expr> = keys.iter().map(|k| col(k.as_str())).collect();
            let select: Vec<Expr> = self
                .plan
                .schema()
                .columns()
                .into_iter()
                .map(Expr::Column)
                .collect();
            return self.with_plan(|b| b.distinct_on(on, select, None));
        }
        let node = crate::operators::dedup::Deduplicate::try_new(self.plan.clone(), keys, within)?;
        Ok(Self::new(self.session.clone(), node.into_plan()))
    }

    /// Groups rows by key columns for arbitrary stateful processing (Spark's `groupByKey`).
    pub fn group_by_key<I, S>(&self, columns: I) -> KeyedFrame
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        KeyedFrame {
            frame: self.clone(),
            keys: columns
                .into_iter()
                .map(|c| c.as_ref().to_string())
                .collect(),
        }
    }

    /// Groups by expressions: columns (`col("user")`), `window(col("ts"), "5 minutes")`, ...
    pub fn group_by<I: IntoIterator<Item = Expr>>(&self, exprs: I) -> GroupedFrame {
        GroupedFrame {
            frame: self.clone(),
            keys: exprs.into_iter().collect(),
        }
    }

    /// Rows of both frames (Spark's `union`, by position).
    pub fn union(&self, other: &StreamFrame) -> Result<Self> {
        let other = other.plan.clone();
        self.with_plan(|b| b.union(other))
    }

    /// A SQL expression over the frame's columns, names resolved as Spark resolves them.
    fn parse_sql_expr(&self, sql: &str, alias_allowed: bool) -> Result<Expr> {
        let df_schema = self.plan.schema();
        let text =
            crate::plan::sql::resolve_sql_expr(&self.session, df_schema, sql, alias_allowed)?;
        let expr = self.session.context().parse_sql_expr(&text, df_schema)?;
        crate::plan::literals::spark_literal_types_in_expr(expr, alias_allowed)
    }

    /// Registers the frame as a view that `session.sql` can read; a streaming frame stays a
    /// stream inside any query over the view.
    pub fn create_or_replace_temp_view(&self, name: &str) -> Result<()> {
        let ctx = self.session.context();
        let _ = ctx.deregister_table(name)?;
        let view = datafusion::datasource::ViewTable::new(self.plan.clone(), None);
        ctx.register_table(name, Arc::new(view))?;
        Ok(())
    }

    /// Starts building a streaming query over this frame.
    pub fn write_stream(&self) -> DataStreamWriter {
        DataStreamWriter::new(self.clone())
    }

    /// Runs a batch frame. A streaming frame cannot be collected (Spark's rule); start it with
    /// `write_stream()` (e.g. into the memory sink) instead.
    pub fn collect(&self) -> Result<Vec<RecordBatch>> {
        if self.is_streaming() {
            return Err(SluiceError::query(
                class::STREAMING_QUERY_WITHOUT_WRITE_STREAM,
                "Queries with streaming sources must be executed with write_stream().start(); \
                 collect() runs batch frames only.",
            ));
        }
        let state = self.session.context().state();
        let plan = self.plan.clone();
        let batches = self.session.block_on(async move {
            let physical = state.create_physical_plan(&plan).await?;
            datafusion::physical_plan::collect(physical, state.task_ctx()).await
        })?;
        Ok(batches)
    }

    /// The number of rows of a batch frame.
    pub fn count(&self) -> Result<usize> {
        Ok(self.collect()?.iter().map(|b| b.num_rows()).sum())
    }

    /// The analysed logical plan, indented.
    pub fn explain(&self) -> String {
        self.plan.display_indent().to_string()
    }
}

/// A grouped frame, waiting for its aggregates (Spark's `RelationalGroupedDataset`).
#[derive(Debug, Clone)]
pub struct GroupedFrame {
    frame: StreamFrame,
    keys: Vec<Expr>,
}

impl GroupedFrame {
    /// Any DataFusion aggregate: `sum(col("amount")).alias("total")`, `count(lit(1))`, ...
    pub fn agg<I: IntoIterator<Item = Expr>>(&self, aggregates: I) -> Result<StreamFrame> {
        let keys = self
            .keys
            .iter()
            .map(|k| self.frame.resolve(k.clone()))
            .collect::<Result<Vec<_>>>()?;
        let aggs: Vec<Expr> = aggregates
            .into_iter()
            .map(|a| self.frame.resolve(a))
            .collect::<Result<_>>()?;
        self.frame.with_plan(|b| b.aggregate(keys, aggs))
    }
    /// `count(*)` per group, in a column named `count` (as Spark's `count()`).
    pub fn count(&self) -> Result<StreamFrame> {
        self.agg([
            datafusion::functions_aggregate::expr_fn::count(datafusion::prelude::lit(1))
                .alias("count"),
        ])
    }
}

/// A frame grouped by key columns, for `flat_map_groups_with_state` (Spark's
/// `KeyValueGroupedDataset`).
#[derive(Debug, Clone)]
pub struct KeyedFrame {
    frame: StreamFrame,
    keys: Vec<String>,
}

impl KeyedFrame {
    /// Calls `f(key, rows, state)` for every key with rows in a batch, and for every key whose
    /// timeout fired (with no rows and `state.has_timed_out()`). `f` returns rows of
    /// `output_schema`. `mode` is the operator's output mode (the query must run in it).
    pub fn flat_map_groups_with_state<S, F>(
        &self,
        output_schema: SchemaRef,
        mode: crate::OutputMode,
        timeout: crate::operators::flat_map_groups_with_state::GroupStateTimeout,
        f: F,
    ) -> Result<StreamFrame>
    where
        S: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
        F: Fn(
                &[datafusion::common::ScalarValue],
                &RecordBatch,
                &mut crate::operators::flat_map_groups_with_state::GroupState<S>,
            ) -> Result<Vec<RecordBatch>>
            + Send
            + Sync
            + 'static,
    {
        let keys = self
            .keys
            .iter()
            .map(|k| self.frame.column_name(k))
            .collect::<Result<Vec<_>>>()?;
        let node = crate::operators::flat_map_groups_with_state::FlatMapGroupsWithState::try_new(
            self.frame.plan.clone(),
            keys,
            output_schema,
            mode,
            timeout,
            f,
        )?;
        Ok(StreamFrame::new(
            self.frame.session.clone(),
            node.into_plan(),
        ))
    }

    /// [`Self::flat_map_groups_with_state`] with the function registered as `name`
    /// ([`crate::register_group_function`]). On a cluster whose workers have it registered
    /// under that name too (a binary of yours that registers it and serves them with
    /// `sluice_distributed::worker::serve`), the operator's state partitions run on the workers,
    /// as every other stateful operator's; an unnamed function's stay on the driver.
    pub fn flat_map_groups_with_state_named(
        &self,
        name: &str,
        output_schema: SchemaRef,
        mode: crate::OutputMode,
        timeout: crate::operators::flat_map_groups_with_state::GroupStateTimeout,
    ) -> Result<StreamFrame> {
        use crate::operators::flat_map_groups_with_state::{
            registered_function, FlatMapGroupsWithState,
        };
        let keys = self
            .keys
            .iter()
            .map(|k| self.frame.column_name(k))
            .collect::<Result<Vec<_>>>()?;
        let node = FlatMapGroupsWithState::of_function(
            self.frame.plan.clone(),
            keys,
            output_schema,
            mode,
            timeout,
            registered_function(name)?,
            Some(name.to_string()),
        )?;
        Ok(StreamFrame::new(
            self.frame.session.clone(),
            node.into_plan(),
        ))
    }

    /// One output row per call (Spark's `mapGroupsWithState`, update mode only).
    pub fn map_groups_with_state<S, F>(
        &self,
        output_schema: SchemaRef,
        timeout: crate::operators::flat_map_groups_with_state::GroupStateTimeout,
        f: F,
    ) -> Result<StreamFrame>
    where
        S: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
        F: Fn(
                &[datafusion::common::ScalarValue],
                &RecordBatch,
                &mut crate::operators::flat_map_groups_with_state::GroupState<S>,
            ) -> Result<RecordBatch>
            + Send
            + Sync
            + 'static,
    {
        self.flat_map_groups_with_state(
            output_schema,
            crate::OutputMode::Update,
            timeout,
            move |k, rows, st| {
                let out = f(k, rows, st)?;
                if out.num_rows() != 1 {
                    return Err(SluiceError::query(
                        class::GROUP_FUNCTION_OUTPUT,
                        format!(
                            "map_groups_with_state must return exactly one row per call, got {}",
                            out.num_rows()
                        ),
                    ));
                }
                Ok(vec![out])
            },
        )
    }
}
