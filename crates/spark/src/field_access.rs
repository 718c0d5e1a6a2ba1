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
//! - `element_at(arr, i)` (1-based, negative from the end, null out of range, `0` is
//!   `INVALID_INDEX_OF_ZERO`), `element_at(map, key)` (null for a missing key) and `get(arr, i)`
//!   (0-based) are [`SparkElementAt`]; `m['missing']` (null) is DataFusion's own.
//! - `struct(a, b AS q, 1)` names its fields `a`, `q`, `col3` as Spark does.

use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{plan_err, DFSchema, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawFieldAccessExpr};
use datafusion::logical_expr::{
    lit, when, ColumnarValue, Expr, ExprSchemable, GetFieldAccess, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// `arr[i]` with Spark's 0-based index, and `s.field` / `s['field']` through
/// [`SparkGetField`]; everything else goes on to DataFusion's planner.
#[derive(Debug)]
pub struct SparkFieldAccessPlanner {
    get_field: Arc<ScalarUDF>,
}

impl SparkFieldAccessPlanner {
    /// A planner matching field names with `spark.sql.caseSensitive`'s rule.
    pub fn new(case_sensitive: bool) -> Self {
        Self {
            get_field: Arc::new(spark_get_field(
                datafusion::functions::core::get_field(),
                case_sensitive,
            )),
        }
    }
}

impl ExprPlanner for SparkFieldAccessPlanner {
    /// `struct(a, b AS q, s.c, 1)` names its fields as Spark does: after the column (`a`),
    /// the alias (`q`) or the accessed field (`c`), else `col1`, `col2`, .. by position
    /// (DataFusion names them `c0`, `c1`, ..).
    fn plan_struct_literal(
        &self,
        args: Vec<Expr>,
        is_named_struct: bool,
    ) -> DfResult<PlannerResult<Vec<Expr>>> {
        if is_named_struct {
            return Ok(PlannerResult::Original(args));
        }
        let mut pairs = Vec::with_capacity(args.len() * 2);
        for (i, e) in args.into_iter().enumerate() {
            let (name, e) = match e {
                Expr::Alias(a) => (a.name.clone(), *a.expr),
                Expr::Column(c) => (c.name.clone(), Expr::Column(c)),
                Expr::ScalarFunction(f) if f.func.name() == "get_field" && f.args.len() >= 2 => {
                    let name = match f.args.last() {
                        Some(Expr::Literal(v, _)) => v.try_as_str().flatten().map(str::to_string),
                        _ => None,
                    };
                    (
                        name.unwrap_or_else(|| format!("col{}", i + 1)),
                        Expr::ScalarFunction(f),
                    )
                }
                other => (format!("col{}", i + 1), other),
            };
            pairs.push(lit(name));
            pairs.push(e);
        }
        Ok(PlannerResult::Planned(
            datafusion::functions::core::named_struct().call(pairs),
        ))
    }
    fn plan_compound_identifier(
        &self,
        field: &arrow::datatypes::Field,
        qualifier: Option<&datafusion::common::TableReference>,
        nested_names: &[String],
    ) -> DfResult<PlannerResult<Vec<Expr>>> {
        let column = Expr::Column(datafusion::common::Column::from((qualifier, field)));
        let mut args = vec![column];
        args.extend(nested_names.iter().map(|n| lit(n.as_str())));
        Ok(PlannerResult::Planned(self.get_field.call(args)))
    }

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
            GetFieldAccess::NamedStructField { name }
                if matches!(expr.get_type(schema)?, DataType::Struct(_)) =>
            {
                Ok(PlannerResult::Planned(
                    self.get_field.call(vec![expr, Expr::Literal(name, None)]),
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
pub struct SparkGetField {
    inner: Arc<ScalarUDF>,
    case_sensitive: bool,
}

impl SparkGetField {
    /// DataFusion's `get_field` (`inner`) with Spark's name matching.
    pub fn new(inner: Arc<ScalarUDF>, case_sensitive: bool) -> Self {
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
                    let f = fields.iter().find(|f| f.name() == name).or_else(|| {
                        if self.case_sensitive {
                            return None;
                        }
                        let mut m = fields
                            .iter()
                            .filter(|f| f.name().eq_ignore_ascii_case(name));
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
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    /// Spark names `s.a.b` (and `get_field(s, 'a')`) after the last field, `b`.
    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        match args.last() {
            Some(Expr::Literal(v, _)) if args.len() >= 2 => match v.try_as_str().flatten() {
                Some(name) => Ok(name.to_string()),
                None => self.inner.schema_name(args),
            },
            _ => self.inner.schema_name(args),
        }
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let Some(base) = args.arg_fields.first() else {
            return self.inner.return_field_from_args(args);
        };
        let names = self.resolve(base.data_type(), &args.scalar_arguments[1..])?;
        let values: Vec<ScalarValue> = names
            .into_iter()
            .map(|n| ScalarValue::Utf8(Some(n)))
            .collect();
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
pub fn spark_get_field(inner: Arc<ScalarUDF>, case_sensitive: bool) -> ScalarUDF {
    ScalarUDF::new_from_impl(SparkGetField::new(inner, case_sensitive))
}

/// Spark's `element_at(array, i)` (1-based, negative from the end, null out of range, `0` is
/// `INVALID_INDEX_OF_ZERO`) and `element_at(map, key)` (the value, null for a missing key), and
/// `get(array, i)` (0-based, null out of range). DataFusion's `element_at` is `map_extract`,
/// which returns a list and refuses arrays.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SparkElementAt {
    signature: Signature,
    /// `get`: 0-based and never an error.
    zero_based: bool,
}

impl SparkElementAt {
    /// `element_at` (1-based) or, `zero_based`, the `arr[i]` subscript.
    pub fn new(zero_based: bool) -> Self {
        Self {
            signature: Signature::user_defined(datafusion::logical_expr::Volatility::Immutable),
            zero_based,
        }
    }
}

impl ScalarUDFImpl for SparkElementAt {
    fn name(&self) -> &str {
        if self.zero_based {
            "get"
        } else {
            "element_at"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [DataType::Map(entries, sorted), _] if !self.zero_based => {
                let key = match entries.data_type() {
                    DataType::Struct(kv) if kv.len() == 2 => kv[0].data_type().clone(),
                    _ => return plan_err!("element_at: a map without key and value"),
                };
                Ok(vec![DataType::Map(entries.clone(), *sorted), key])
            }
            [l @ (DataType::List(_) | DataType::LargeList(_)), _] => {
                Ok(vec![l.clone(), DataType::Int64])
            }
            [DataType::Null, k] => Ok(vec![DataType::Null, k.clone()]),
            _ => plan_err!(
                "{}(array, index){} takes an array{} and an index, got {arg_types:?}",
                self.name(),
                if self.zero_based {
                    ""
                } else {
                    " or element_at(map, key)"
                },
                if self.zero_based { "" } else { " or a map" }
            ),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(match arg_types.first() {
            Some(DataType::List(f) | DataType::LargeList(f)) => f.data_type().clone(),
            Some(DataType::Map(entries, _)) => match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => kv[1].data_type().clone(),
                _ => return plan_err!("element_at: a map without key and value"),
            },
            _ => DataType::Null,
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        use arrow::array::{Array, AsArray, Int64Array, UInt32Array};
        let n = args.number_rows;
        let base = args.args[0].to_array(n)?;
        let key = args.args[1].to_array(n)?;
        let mut take: Vec<Option<u32>> = Vec::with_capacity(n);
        let values = match base.data_type() {
            DataType::List(_) | DataType::LargeList(_) => {
                let idx = key
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| datafusion::error::DataFusionError::Internal("index".into()))?;
                let (offsets, values): (Vec<usize>, arrow::array::ArrayRef) = match base.data_type()
                {
                    DataType::List(_) => {
                        let l = base.as_list::<i32>();
                        (
                            l.offsets().iter().map(|o| *o as usize).collect(),
                            l.values().clone(),
                        )
                    }
                    _ => {
                        let l = base.as_list::<i64>();
                        (
                            l.offsets().iter().map(|o| *o as usize).collect(),
                            l.values().clone(),
                        )
                    }
                };
                for i in 0..n {
                    if base.is_null(i) || idx.is_null(i) {
                        take.push(None);
                        continue;
                    }
                    let (start, len) = (offsets[i], (offsets[i + 1] - offsets[i]) as i64);
                    let k = idx.value(i);
                    let pos = if self.zero_based {
                        (0..len).contains(&k).then_some(k)
                    } else if k == 0 {
                        return datafusion::common::exec_err!(
                            "[INVALID_INDEX_OF_ZERO] The index 0 is invalid. An index shall be \
                             either < 0 or > 0 (the first element has index 1)."
                        );
                    } else if k > 0 {
                        (k <= len).then_some(k - 1)
                    } else {
                        (-k <= len).then_some(len + k)
                    };
                    take.push(pos.map(|p| (start as i64 + p) as u32));
                }
                values
            }
            DataType::Map(_, _) => {
                let m = base.as_map();
                let offsets = m.value_offsets();
                for i in 0..n {
                    if base.is_null(i) || key.is_null(i) {
                        take.push(None);
                        continue;
                    }
                    let start = offsets[i] as usize;
                    let len = offsets[i + 1] as usize - start;
                    let ks = m.keys().slice(start, len);
                    let k = arrow::array::Scalar::new(key.slice(i, 1));
                    let eq = arrow::compute::kernels::cmp::eq(&ks, &k)?;
                    let pos = eq.iter().position(|b| b == Some(true));
                    take.push(pos.map(|p| (start + p) as u32));
                }
                m.values().clone()
            }
            _ => {
                return Ok(ColumnarValue::Array(arrow::array::new_null_array(
                    &DataType::Null,
                    n,
                )))
            }
        };
        let indices = UInt32Array::from(take);
        Ok(ColumnarValue::Array(arrow::compute::take(
            values.as_ref(),
            &indices,
            None,
        )?))
    }
}

/// Spark refuses to group by a map (maps are not orderable):
/// `GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE`, for every `GROUP BY` of the plan.
pub fn check_grouping_types(
    plan: &datafusion::logical_expr::LogicalPlan,
) -> crate::error::Result<()> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::LogicalPlan;
    fn has_map(t: &DataType) -> bool {
        match t {
            DataType::Map(..) => true,
            DataType::Struct(fs) => fs.iter().any(|f| has_map(f.data_type())),
            DataType::List(f) | DataType::LargeList(f) => has_map(f.data_type()),
            _ => false,
        }
    }
    let mut err = None;
    plan.apply(|node| {
        if let LogicalPlan::Aggregate(a) = node {
            for e in &a.group_expr {
                if let Ok(t) = e.get_type(a.input.schema()) {
                    if has_map(&t) {
                        err = Some(crate::error::SluiceError::query(
                            crate::error::class::GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE,
                            format!(
                                "The expression \"{}\" cannot be used as a grouping expression \
                                 because its data type \"{}\" is not an orderable data type. \
                                 Group by its keys or values instead (map_keys, map_values, \
                                 m['key'])",
                                match e {
                                    Expr::Column(c) => c.name.clone(),
                                    other => other.schema_name().to_string(),
                                },
                                crate::schema::spark_type_name(&t)
                            ),
                        ));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
