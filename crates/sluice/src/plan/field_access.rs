//! Spark's access to nested values, on top of DataFusion's `get_field` and `array_element`:
//!
//! - `s.field` / `s['field']` / `get_field(s, 'field')` find the struct field
//!   case-insensitively when `spark.sql.caseSensitive` is false (Spark's default): an exact
//!   match first, else the one field whose name equals ignoring case. A missing field is
//!   Spark's `FIELD_NOT_FOUND` (`No such struct field `z` in `a`, `Bc`.`). Map keys stay
//!   case-sensitive (`m['K']` is null when only `k` is there).
//! - `arr[i]` is 0-based, and an index out of range (also a negative one) is null (Spark's
//!   non-ANSI `GetArrayItem`); DataFusion's `array_element` is 1-based and counts negative
//!   indexes from the end, so the planner rewrites `arr[i]` to
//!   `array_element(arr, CASE WHEN i >= 0 THEN i + 1 END)`.
//! - `element_at(arr, i)` (1-based, negative from the end, null out of range) and
//!   `m['missing']` (null) are DataFusion's own and already Spark's.

use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{plan_err, DFSchema, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawFieldAccessExpr};
use datafusion::logical_expr::{
    lit, when, ColumnarValue, Expr, ExprSchemable, GetFieldAccess, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// `arr[i]` with Spark's 0-based index; everything else goes on to DataFusion's planner.
#[derive(Debug)]
pub(crate) struct SparkFieldAccessPlanner;

impl ExprPlanner for SparkFieldAccessPlanner {
    fn plan_field_access(
        &self,
        expr: RawFieldAccessExpr,
        schema: &DFSchema,
    ) -> DfResult<PlannerResult<RawFieldAccessExpr>> {
        let RawFieldAccessExpr { expr, field_access } = expr;
        match field_access {
            GetFieldAccess::ListIndex { key }
                if matches!(
                    expr.get_type(schema)?,
                    DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
                ) && !matches!(expr, Expr::AggregateFunction(_)) =>
            {
                let index = *key;
                let one_based = when(index.clone().gt_eq(lit(0i64)), index + lit(1i64)).end()?;
                Ok(PlannerResult::Planned(
                    datafusion::functions_nested::expr_fn::array_element(expr, one_based),
                ))
            }
            field_access => Ok(PlannerResult::Original(RawFieldAccessExpr {
                expr,
                field_access,
            })),
        }
    }
}

/// `get_field` with Spark's case-insensitive struct field names, delegating to DataFusion's.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct SparkGetField {
    inner: Arc<ScalarUDF>,
    case_sensitive: bool,
}

impl SparkGetField {
    pub(crate) fn new(inner: Arc<ScalarUDF>, case_sensitive: bool) -> Self {
        Self {
            inner,
            case_sensitive,
        }
    }

    /// The field names as the struct spells them, walking the nested types from `base`.
    fn resolve(&self, base: &DataType, names: &[Option<&ScalarValue>]) -> DfResult<Vec<String>> {
        let mut t = base.clone();
        let mut out = Vec::new();
        for sv in names {
            let Some(name) = sv.and_then(|v| v.try_as_str().flatten()) else {
                return plan_err!("get_field: the field name must be a string literal");
            };
            match &t {
                DataType::Struct(fields) => {
                    let f = fields
                        .iter()
                        .find(|f| f.name() == name)
                        .or_else(|| {
                            if self.case_sensitive {
                                return None;
                            }
                            let mut m = fields.iter().filter(|f| f.name().eq_ignore_ascii_case(name));
                            match (m.next(), m.next()) {
                                (Some(f), None) => Some(f),
                                _ => None,
                            }
                        });
                    let Some(f) = f else {
                        let all: Vec<String> =
                            fields.iter().map(|f| format!("`{}`", f.name())).collect();
                        return plan_err!(
                            "[FIELD_NOT_FOUND] No such struct field `{name}` in {}.",
                            all.join(", ")
                        );
                    };
                    out.push(f.name().clone());
                    t = f.data_type().clone();
                }
                DataType::Map(entries, _) => {
                    out.push(name.to_string());
                    t = match entries.data_type() {
                        DataType::Struct(kv) if kv.len() == 2 => kv[1].data_type().clone(),
                        other => other.clone(),
                    };
                }
                _ => {
                    out.push(name.to_string());
                    t = DataType::Null;
                }
            }
        }
        Ok(out)
    }
}

impl ScalarUDFImpl for SparkGetField {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let Some(base) = args.arg_fields.first() else {
            return self.inner.return_field_from_args(args);
        };
        let names = self.resolve(base.data_type(), &args.scalar_arguments[1..])?;
        let values: Vec<ScalarValue> = names.into_iter().map(|n| ScalarValue::Utf8(Some(n))).collect();
        let mut scalars: Vec<Option<&ScalarValue>> = vec![args.scalar_arguments[0]];
        scalars.extend(values.iter().map(Some));
        self.inner.return_field_from_args(ReturnFieldArgs {
            arg_fields: args.arg_fields,
            scalar_arguments: &scalars,
        })
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let Some(base) = args.arg_fields.first() else {
            return self.inner.invoke_with_args(args);
        };
        let given: Vec<Option<ScalarValue>> = args.args[1..]
            .iter()
            .map(|a| match a {
                ColumnarValue::Scalar(s) => Some(s.clone()),
                ColumnarValue::Array(_) => None,
            })
            .collect();
        let refs: Vec<Option<&ScalarValue>> = given.iter().map(|g| g.as_ref()).collect();
        let names = self.resolve(base.data_type(), &refs)?;
        for (i, n) in names.into_iter().enumerate() {
            args.args[i + 1] = ColumnarValue::Scalar(ScalarValue::Utf8(Some(n)));
        }
        self.inner.invoke_with_args(args)
    }
}

/// Replaces the session's `get_field` by [`SparkGetField`].
pub(crate) fn spark_get_field(inner: Arc<ScalarUDF>, case_sensitive: bool) -> ScalarUDF {
    ScalarUDF::new_from_impl(SparkGetField::new(inner, case_sensitive))
}
