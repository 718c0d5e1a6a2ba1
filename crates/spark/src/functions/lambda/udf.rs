//! The `__lambda_<name>` scalar functions: argument layout, planning of the lambda bodies (once
//! per argument types, cached) and result types.
//!
//! Arguments: the data arguments, the number of lambdas `L`, `L` string literals
//! `"<arity>:<len>:<lambda as written><body>"` (`len` the byte length of the written lambda),
//! then the outer columns the bodies reference as `__lo<j>`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SessionState;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::sql::sqlparser::ast::ExprWithAlias;
use datafusion::sql::sqlparser::dialect::SparkSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::{Kind, OUTER, PARAM, PREFIX};
use crate::error::{class, SluiceError};

/// The session snapshot that plans lambda bodies (set once by [`super::register`]).
#[derive(Default)]
pub(super) struct BodyPlanner {
    state: OnceLock<SessionState>,
}

impl BodyPlanner {
    pub(super) fn set(&self, state: SessionState) {
        let _ = self.state.set(state);
    }
}

/// The session's functions hold the planner; the snapshot's own (nested) ones point back weakly.
pub(super) enum Handle {
    Strong(Arc<BodyPlanner>),
    Weak(Weak<BodyPlanner>),
}

/// One planned lambda: its parameters and outer columns as a schema, and its body.
pub(super) struct Lambda {
    pub(super) written: String,
    pub(super) schema: SchemaRef,
    pub(super) body: Arc<dyn PhysicalExpr>,
    pub(super) ty: DataType,
}

/// The lambdas of one call, planned for its argument types, and the call's result type.
pub(super) struct Planned {
    pub(super) lambdas: Vec<Lambda>,
    pub(super) ret: DataType,
}

type Key = (Vec<DataType>, Vec<String>);

/// A higher-order function of [`Kind`] as a DataFusion scalar function.
pub(super) struct HigherOrder {
    kind: Kind,
    name: String,
    signature: Signature,
    planner: Handle,
    cache: Mutex<HashMap<Key, Arc<Planned>>>,
}

impl HigherOrder {
    pub(super) fn udf(kind: Kind, planner: Handle) -> ScalarUDF {
        ScalarUDF::new_from_impl(HigherOrder {
            kind,
            name: format!("{PREFIX}{}", kind.name()),
            signature: Signature::variadic_any(Volatility::Immutable),
            planner,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The lambdas' encoded texts from the literal arguments (`None`: not literals).
    fn texts(
        &self,
        literal: impl Fn(usize) -> Option<ScalarValue>,
        n_args: usize,
    ) -> DfResult<Vec<String>> {
        let n_data = self.kind.data_args();
        let count = match literal(n_data) {
            Some(ScalarValue::Int64(Some(n))) if n >= 0 => n as usize,
            Some(ScalarValue::Int32(Some(n))) if n >= 0 => n as usize,
            _ => return Err(self.internal("the lambda count is not an integer literal")),
        };
        if n_args < n_data + 1 + count {
            return Err(self.internal("fewer arguments than lambdas"));
        }
        (0..count)
            .map(|i| match literal(n_data + 1 + i) {
                Some(ScalarValue::Utf8(Some(s)))
                | Some(ScalarValue::LargeUtf8(Some(s)))
                | Some(ScalarValue::Utf8View(Some(s))) => Ok(s),
                _ => Err(self.internal("a lambda is not a string literal")),
            })
            .collect()
    }

    fn internal(&self, what: &str) -> DataFusionError {
        DataFusionError::External(Box::new(SluiceError::internal(format!(
            "`{}`: {what} (its calls come from the SQL rewrite of higher-order functions; do not \
             call {} directly)",
            self.kind.name(),
            self.name
        ))))
    }

    /// The planned lambdas for `types` (all arguments' types) and `texts`, cached.
    fn planned(
        &self,
        types: &[DataType],
        names: &[String],
        texts: Vec<String>,
    ) -> DfResult<Arc<Planned>> {
        let key = (types.to_vec(), texts);
        if let Some(p) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(p);
        }
        let planner = match &self.planner {
            Handle::Strong(p) => p.clone(),
            Handle::Weak(w) => w
                .upgrade()
                .ok_or_else(|| self.internal("the session that planned this lambda is gone"))?,
        };
        let state = planner
            .state
            .get()
            .ok_or_else(|| self.internal("lambda functions are not set up on this session"))?;
        let p = Arc::new(
            plan(state, self.kind, types, names, &key.1)
                .map_err(|e| DataFusionError::External(Box::new(e)))?,
        );
        if let Ok(mut c) = self.cache.lock() {
            c.insert(key, p.clone());
        }
        Ok(p)
    }
}

impl std::fmt::Debug for HigherOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HigherOrder")
            .field("name", &self.name)
            .finish()
    }
}
impl PartialEq for HigherOrder {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for HigherOrder {}
impl std::hash::Hash for HigherOrder {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl ScalarUDFImpl for HigherOrder {
    fn name(&self) -> &str {
        &self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        // `transform(xs, x -> x + 1)`, as written.
        let n_data = self.kind.data_args();
        let mut parts = Vec::new();
        for a in args.iter().take(n_data) {
            parts.push(a.schema_name().to_string());
        }
        let count = match args.get(n_data) {
            Some(Expr::Literal(ScalarValue::Int64(Some(n)), _)) => *n as usize,
            _ => 0,
        };
        for a in args.iter().skip(n_data + 1).take(count) {
            if let Expr::Literal(ScalarValue::Utf8(Some(s)), _) = a {
                if let Some((_, written, _)) = decode(s) {
                    parts.push(written.to_string());
                }
            }
        }
        Ok(format!("{}({})", self.kind.name(), parts.join(", ")))
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Err(self.internal("return_type without the literal arguments"))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let texts = self.texts(
            |i| args.scalar_arguments.get(i).copied().flatten().cloned(),
            args.arg_fields.len(),
        )?;
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let names: Vec<String> = args.arg_fields.iter().map(|f| f.name().clone()).collect();
        let p = self.planned(&types, &names, texts)?;
        Ok(Arc::new(Field::new(self.kind.name(), p.ret.clone(), true)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let texts = self.texts(
            |i| match args.args.get(i) {
                Some(ColumnarValue::Scalar(s)) => Some(s.clone()),
                _ => None,
            },
            args.args.len(),
        )?;
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let names: Vec<String> = args.arg_fields.iter().map(|f| f.name().clone()).collect();
        let count = texts.len();
        let p = self.planned(&types, &names, texts)?;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let n_data = self.kind.data_args();
        let mut data = Vec::new();
        let mut outer = Vec::new();
        for (i, a) in args.args.iter().enumerate() {
            if i < n_data {
                data.push(a.to_array(rows)?);
            } else if i > n_data + count {
                outer.push(a.to_array(rows)?);
            }
        }
        let out = super::eval::run(self.kind, &p, &data, &outer, rows)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        super::super::columnar(out, scalar)
    }
}

/// `(arity, written, body)` of an encoded lambda.
pub(super) fn decode(text: &str) -> Option<(usize, &str, &str)> {
    let (arity, rest) = text.split_once(':')?;
    let (len, rest) = rest.split_once(':')?;
    let len: usize = len.parse().ok()?;
    if !rest.is_char_boundary(len.min(rest.len())) || len > rest.len() {
        return None;
    }
    Some((arity.parse().ok()?, &rest[..len], &rest[len..]))
}

/// The element type of an array argument (`Null`: a null literal).
fn element(kind: Kind, t: &DataType) -> Result<DataType, SluiceError> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Ok(f.data_type().clone())
        }
        DataType::Null => Ok(DataType::Null),
        other => Err(mismatch(kind, 1, "ARRAY", other)),
    }
}

/// The key and value types of a map argument `i` (1-based).
fn entries(kind: Kind, i: usize, t: &DataType) -> Result<(DataType, DataType), SluiceError> {
    match t {
        DataType::Map(f, _) => match f.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                Ok((kv[0].data_type().clone(), kv[1].data_type().clone()))
            }
            _ => Err(mismatch(kind, i, "MAP", t)),
        },
        DataType::Null => Ok((DataType::Null, DataType::Null)),
        other => Err(mismatch(kind, i, "MAP", other)),
    }
}

fn mismatch(kind: Kind, i: usize, want: &str, got: &DataType) -> SluiceError {
    SluiceError::query(
        class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
        format!(
            "Cannot resolve `{}`: parameter {i} requires the \"{want}\" type, however it has the \
             type {got}. Call it as {}.",
            kind.name(),
            kind.usage()
        ),
    )
}

pub(super) fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(t, true)))
}

/// A map type with `like`'s field names and the given key and value types.
pub(super) fn map_of(like: &DataType, k: DataType, v: DataType) -> DataType {
    let (entries, kn, vn) = match like {
        DataType::Map(f, _) => match f.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                (f.name().clone(), kv[0].name().clone(), kv[1].name().clone())
            }
            _ => ("entries".into(), "key".into(), "value".into()),
        },
        _ => ("entries".into(), "key".into(), "value".into()),
    };
    let fields = Fields::from(vec![Field::new(kn, k, false), Field::new(vn, v, true)]);
    DataType::Map(
        Arc::new(Field::new(entries, DataType::Struct(fields), false)),
        false,
    )
}

/// Plans the lambdas of a `kind` call with argument types `types` (argument names `names`).
fn plan(
    state: &SessionState,
    kind: Kind,
    types: &[DataType],
    names: &[String],
    texts: &[String],
) -> Result<Planned, SluiceError> {
    let n_data = kind.data_args();
    let outer_start = n_data + 1 + texts.len();
    let outers: Vec<(String, DataType)> = types[outer_start.min(types.len())..]
        .iter()
        .cloned()
        .enumerate()
        .map(|(j, t)| (names.get(outer_start + j).cloned().unwrap_or_default(), t))
        .collect();
    let lambda = |i: usize, params: &[DataType]| -> Result<Lambda, SluiceError> {
        plan_lambda(state, kind, &texts[i], params, &outers)
    };
    let t0 = &types[0];
    let boolean = |l: &Lambda| -> Result<(), SluiceError> {
        match l.ty {
            DataType::Boolean | DataType::Null => Ok(()),
            ref other => Err(SluiceError::query(
                class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                format!(
                    "Cannot resolve `{}`: parameter 2 requires the \"BOOLEAN\" type, however the \
                     lambda function `{}` returns {other}. Make its body a condition.",
                    kind.name(),
                    l.written
                ),
            )),
        }
    };
    let (lambdas, ret) = match kind {
        Kind::Transform | Kind::Filter => {
            let e = element(kind, t0)?;
            let l = lambda(0, &[e.clone(), DataType::Int32])?;
            let ret = if kind == Kind::Transform {
                list_of(l.ty.clone())
            } else {
                boolean(&l)?;
                list_of(e)
            };
            (vec![l], ret)
        }
        Kind::Exists | Kind::Forall => {
            let l = lambda(0, &[element(kind, t0)?])?;
            boolean(&l)?;
            (vec![l], DataType::Boolean)
        }
        Kind::Aggregate | Kind::Reduce => {
            let e = element(kind, t0)?;
            let mut acc = types[1].clone();
            let mut merge = lambda(0, &[acc.clone(), e.clone()])?;
            // Sluice's integers may be wider than Spark's (literals are bigint): a merge that
            // widens an integral zero keeps the wider type.
            if merge.ty != acc && merge.ty.is_integer() && acc.is_integer() {
                acc = merge.ty.clone();
                merge = lambda(0, &[acc.clone(), e.clone()])?;
            }
            if merge.ty != acc && merge.ty != DataType::Null {
                return Err(SluiceError::query(
                    class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!(
                        "Cannot resolve `{}`: the merge function `{}` returns {}, but the zero \
                         (argument 2) has the type {acc}; they must be the same. Cast the zero \
                         (e.g. `cast(0 AS {})`) or the merge result to one type.",
                        kind.name(),
                        merge.written,
                        merge.ty,
                        merge.ty
                    ),
                ));
            }
            let mut out = vec![merge];
            let ret = if texts.len() > 1 {
                let finish = lambda(1, &[acc.clone()])?;
                let t = finish.ty.clone();
                out.push(finish);
                t
            } else {
                acc
            };
            (out, ret)
        }
        Kind::ArraySort => {
            let e = element(kind, t0)?;
            let l = lambda(0, &[e.clone(), e.clone()])?;
            if !l.ty.is_integer() {
                return Err(SluiceError::query(
                    class::DATATYPE_MISMATCH_UNEXPECTED_RETURN_TYPE,
                    format!(
                        "Cannot resolve `array_sort`: the comparator `{}` must return an \
                         integer (negative, 0 or positive), but it returns {}.",
                        l.written, l.ty
                    ),
                ));
            }
            (vec![l], list_of(e))
        }
        Kind::ZipWith => {
            let l = lambda(
                0,
                &[
                    element(kind, t0)?,
                    element(kind, &types[1]).map_err(|_| mismatch(kind, 2, "ARRAY", &types[1]))?,
                ],
            )?;
            let ret = list_of(l.ty.clone());
            (vec![l], ret)
        }
        Kind::MapFilter | Kind::TransformKeys | Kind::TransformValues => {
            let (k, v) = entries(kind, 1, t0)?;
            let l = lambda(0, &[k.clone(), v.clone()])?;
            let ret = match kind {
                Kind::MapFilter => {
                    boolean(&l)?;
                    map_of(t0, k, v)
                }
                Kind::TransformKeys => map_of(t0, l.ty.clone(), v),
                _ => map_of(t0, k, l.ty.clone()),
            };
            (vec![l], ret)
        }
        Kind::MapZipWith => {
            let (k1, v1) = entries(kind, 1, t0)?;
            let (k2, v2) = entries(kind, 2, &types[1])?;
            let k = if k1 == DataType::Null {
                k2.clone()
            } else {
                k1.clone()
            };
            if k1 != k2 && k1 != DataType::Null && k2 != DataType::Null {
                return Err(SluiceError::query(
                    class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!(
                        "Cannot resolve `map_zip_with`: the maps' keys must have the same type, \
                         got {k1} and {k2}. Cast the keys of one map (e.g. with \
                         transform_keys)."
                    ),
                ));
            }
            let l = lambda(0, &[k.clone(), v1, v2])?;
            let ret = map_of(t0, k, l.ty.clone());
            (vec![l], ret)
        }
    };
    Ok(Planned { lambdas, ret })
}

/// Plans one encoded lambda over `params` (its parameters' types) and `outers`.
fn plan_lambda(
    state: &SessionState,
    kind: Kind,
    text: &str,
    params: &[DataType],
    outers: &[(String, DataType)],
) -> Result<Lambda, SluiceError> {
    let (arity, written, body) = decode(text)
        .ok_or_else(|| SluiceError::internal(format!("bad encoded lambda {text:?}")))?;
    let arity = arity.min(params.len());
    let mut fields: Vec<Field> = params[..arity]
        .iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("{PARAM}{i}"), t.clone(), true))
        .collect();
    fields.extend(
        outers
            .iter()
            .enumerate()
            .map(|(j, (_, t))| Field::new(format!("{OUTER}{j}"), t.clone(), true)),
    );
    let schema = Arc::new(Schema::new(fields));
    let names = param_names(written);
    let in_lambda = |e: SluiceError| {
        let mut msg = e.message().to_string();
        for (j, (n, _)) in outers.iter().enumerate().rev() {
            msg = msg.replace(&format!("{OUTER}{j}"), n);
        }
        for (i, n) in names.iter().enumerate().rev() {
            msg = msg.replace(&format!("{PARAM}{i}"), n);
        }
        SluiceError::new(
            e.fault(),
            e.class(),
            format!(
                "in the lambda function `{written}` of `{}`: {msg}",
                kind.name()
            ),
        )
    };
    let mut parser = Parser::new(&SparkSqlDialect {})
        .try_with_sql(body)
        .map_err(|e| SluiceError::internal(format!("lambda body {body:?}: {e}")))?;
    let expr = parser
        .parse_expr()
        .and_then(|e| parser.expect_token(&Token::EOF).map(|_| e))
        .map_err(|e| SluiceError::internal(format!("lambda body {body:?}: {e}")))?;
    let df_schema = DFSchema::try_from(schema.as_ref().clone()).map_err(SluiceError::from)?;
    let logical = state
        .create_logical_expr_from_sql_expr(ExprWithAlias { expr, alias: None }, &df_schema)
        .map_err(|e| in_lambda(crate::functions::unresolved_routine(e.into())))?;
    // Coerced and simplified as DataFusion's optimizer would (some functions, e.g.
    // `coalesce`, exist only until simplified).
    let simplifier = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(Arc::new(df_schema.clone()))
            .with_config_options(state.config_options().clone())
            .build(),
    );
    let logical = simplifier
        .coerce(logical, &df_schema)
        .and_then(|e| simplifier.simplify(e))
        .map_err(|e| in_lambda(e.into()))?;
    let physical = state
        .create_physical_expr(logical, &df_schema)
        .map_err(|e| in_lambda(e.into()))?;
    let ty = physical
        .data_type(&schema)
        .map_err(|e| in_lambda(e.into()))?;
    Ok(Lambda {
        written: written.to_string(),
        schema,
        body: physical,
        ty,
    })
}

/// The parameter names of a lambda as written (`x -> ..`, `(x, i) -> ..`).
fn param_names(written: &str) -> Vec<String> {
    let head = written.split("->").next().unwrap_or_default().trim();
    let head = head.trim_start_matches('(').trim_end_matches(')');
    head.split(',').map(|s| s.trim().to_string()).collect()
}
