//! The `Generate` logical node (Spark's `Generate`): the input's kept columns, then the columns a
//! generator produces from each input row.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::datatypes::{Field, FieldRef};
use datafusion::common::{Column, DFSchema, DFSchemaRef, ScalarValue, TableReference};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{ExprSchemable, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::prelude::Expr;

use super::{output_fields, GeneratorKind, SparkGenerator};
use crate::error::{Result, SluiceError};

/// A generator call in a plan: the placeholder and its arguments.
pub(crate) struct GeneratorCall<'a> {
    pub(crate) generator: &'a SparkGenerator,
    pub(crate) name: &'a str,
    pub(crate) args: &'a [Expr],
}

/// The generator `e` calls, if it is a generator call.
pub(crate) fn as_generator(e: &Expr) -> Option<GeneratorCall<'_>> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    let generator = f.func.inner().downcast_ref::<SparkGenerator>()?;
    Some(GeneratorCall {
        generator,
        name: f.func.name(),
        args: &f.args,
    })
}

/// The columns generator `call` produces over `input` (types and Spark's default names).
pub(crate) fn generated_fields(call: &GeneratorCall<'_>, input: &DFSchema) -> Result<Vec<Field>> {
    let fields: Vec<FieldRef> = call
        .args
        .iter()
        .map(|a| a.to_field(input).map(|(_, f)| f))
        .collect::<DfResult<_>>()?;
    let scalars: Vec<Option<&ScalarValue>> = call
        .args
        .iter()
        .map(|a| match a {
            Expr::Literal(v, _) => Some(v),
            _ => None,
        })
        .collect();
    output_fields(call.name, call.generator.kind, &fields, &scalars)
}

/// The logical node: `input`'s `kept` columns, then the generated columns `names` (qualified by
/// `qualifier`, a LATERAL VIEW's name), one output row per generated row.
#[derive(Debug, Clone)]
pub(crate) struct Generate {
    pub(crate) input: LogicalPlan,
    /// The generator call (a placeholder `ScalarFunction`).
    pub(crate) generator: Expr,
    /// A null or empty input gives one row of nulls (the `_outer` variants, LATERAL VIEW OUTER).
    pub(crate) outer: bool,
    /// The input columns kept in the output, in input order.
    pub(crate) kept: Vec<Column>,
    pub(crate) qualifier: Option<TableReference>,
    pub(crate) names: Vec<String>,
    schema: DFSchemaRef,
}

impl Generate {
    /// A `Generate` of `generator` over `input`, keeping the columns `kept` (all when `None`),
    /// naming the output `names` (Spark's names when `None`; else their count must match).
    pub(crate) fn try_new(
        input: LogicalPlan,
        generator: Expr,
        outer: bool,
        kept: Option<Vec<Column>>,
        qualifier: Option<TableReference>,
        names: Option<Vec<String>>,
    ) -> Result<Self> {
        // The optimiser may wrap the call in an alias (to keep its name) and fold its arguments.
        let mut generator = generator;
        while let Expr::Alias(a) = generator {
            generator = *a.expr;
        }
        let call = as_generator(&generator).ok_or_else(|| {
            SluiceError::internal(format!("Generate over a non-generator: {generator}"))
        })?;
        let outer = outer || call.generator.outer;
        let fields = generated_fields(&call, input.schema())?;
        let names = match names {
            None => fields.iter().map(|f| f.name().clone()).collect(),
            Some(n) if n.len() == fields.len() => n,
            Some(n) => {
                super::rewrite::check_alias_count(&generator, fields.len(), &n)?;
                n
            }
        };
        let in_schema = input.schema();
        let kept = match kept {
            Some(k) => k,
            None => in_schema.columns(),
        };
        let mut out: Vec<(Option<TableReference>, Arc<Field>)> = Vec::new();
        for c in &kept {
            let (q, f) = in_schema.qualified_field_from_column(c)?;
            out.push((q.cloned(), f.clone()));
        }
        for (f, n) in fields.iter().zip(&names) {
            out.push((
                qualifier.clone(),
                Arc::new(Field::new(n, f.data_type().clone(), true)),
            ));
        }
        let schema = DFSchema::new_with_metadata(out, in_schema.metadata().clone())?;
        Ok(Self {
            input,
            generator,
            outer,
            kept,
            qualifier,
            names,
            schema: Arc::new(schema),
        })
    }

    /// The node as a logical plan.
    pub(crate) fn into_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(self),
        })
    }

    /// The node behind an extension plan, if it is a `Generate`.
    pub(crate) fn of(plan: &LogicalPlan) -> Option<&Generate> {
        match plan {
            LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<Generate>(),
            _ => None,
        }
    }

    /// The generator's kind.
    pub(crate) fn kind(&self) -> GeneratorKind {
        as_generator(&self.generator)
            .map(|c| c.generator.kind)
            .unwrap_or(GeneratorKind::Explode)
    }

    /// The generator's arguments.
    pub(crate) fn args(&self) -> &[Expr] {
        as_generator(&self.generator)
            .map(|c| c.args)
            .unwrap_or_default()
    }

    #[allow(clippy::type_complexity)]
    fn key(
        &self,
    ) -> (
        &LogicalPlan,
        &Expr,
        bool,
        &[Column],
        &Option<TableReference>,
        &[String],
    ) {
        (
            &self.input,
            &self.generator,
            self.outer,
            &self.kept,
            &self.qualifier,
            &self.names,
        )
    }
}

impl PartialEq for Generate {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl Eq for Generate {}
impl Hash for Generate {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}
impl PartialOrd for Generate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        match self.generator.partial_cmp(&o.generator) {
            Some(Ordering::Equal) => (self.outer, &self.names).partial_cmp(&(o.outer, &o.names)),
            c => c,
        }
    }
}

impl UserDefinedLogicalNodeCore for Generate {
    fn name(&self) -> &str {
        "Generate"
    }
    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }
    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }
    fn expressions(&self) -> Vec<Expr> {
        vec![self.generator.clone()]
    }
    /// Filters on the kept columns move below the generator (they hold for every generated row
    /// of an input row); filters on generated columns stay above.
    fn prevent_predicate_push_down_columns(&self) -> HashSet<String> {
        self.names.iter().cloned().collect()
    }
    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let q = self
            .qualifier
            .as_ref()
            .map(|q| format!("{q}."))
            .unwrap_or_default();
        write!(
            f,
            "Generate: {}, outer={}, output=[{}], kept=[{}]",
            self.generator,
            self.outer,
            self.names
                .iter()
                .map(|n| format!("{q}{n}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.kept
                .iter()
                .map(|c| c.flat_name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
    /// Keeps the kept columns the new input still has: the optimiser drops from the input the
    /// columns no one above needs (see `necessary_children_exprs`).
    fn with_exprs_and_inputs(
        &self,
        mut exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        let (Some(input), Some(generator)) = (inputs.pop(), exprs.pop()) else {
            return Err(DataFusionError::Internal(
                "Generate needs one input and one generator".into(),
            ));
        };
        let kept = self
            .kept
            .iter()
            .filter(|c| input.schema().has_column(c))
            .cloned()
            .collect();
        Generate::try_new(
            input,
            generator,
            self.outer,
            Some(kept),
            self.qualifier.clone(),
            Some(self.names.clone()),
        )
        .map_err(|e| DataFusionError::External(Box::new(e)))
    }
    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        let in_schema = self.input.schema();
        let mut needed = BTreeSet::new();
        for &i in output_columns {
            if let Some(c) = self.kept.get(i) {
                needed.insert(in_schema.index_of_column(c).ok()?);
            }
        }
        for c in self.generator.column_refs() {
            needed.insert(in_schema.index_of_column(c).ok()?);
        }
        Some(vec![needed.into_iter().collect()])
    }
}
