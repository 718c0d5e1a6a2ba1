//! Spark's generators: `explode`, `explode_outer`, `posexplode`, `posexplode_outer`, `inline`,
//! `inline_outer`, `stack`, `json_tuple`, in a SELECT list, in `LATERAL VIEW [OUTER]` or as a
//! table function in FROM (`SELECT * FROM posexplode(array(1, 2))`), on streams and
//! batches alike (Spark's `Generate` node and `GenerateExec`).
//!
//! A generator turns one input row into zero or more output rows. DataFusion's planner does not
//! know them, so Sluice plans them in three steps:
//!
//! 1. **Placeholders.** Each generator is registered as a scalar function (`SparkGenerator`) whose
//!    type is the generator's output (the element type for `explode` of an array, else a struct
//!    of the output columns) and which refuses to run. DataFusion's SQL planner and the
//!    DataFrame API build ordinary projections with them. `sql.rs` rewrites the syntax DataFusion
//!    lacks before it plans: `gen(..) AS (a, b)` and `LATERAL VIEW [OUTER] gen(..) t AS a, b`
//!    (a `CROSS JOIN LATERAL` subquery whose only column is the generator), both through the
//!    marker `__sluice_generator_column('gen', outer, j, args..)`, one per output column.
//! 2. **Rewrite** (`rewrite.rs`, [`plan_generators`]). A projection holding generators becomes a
//!    projection over one [`node::Generate`] per generator (Spark's `ExtractGenerator`); a lateral
//!    join becomes a `Generate` over its left side (qualified by the view's name). Generators
//!    anywhere else are refused with Spark's classes (`UNSUPPORTED_GENERATOR.*`).
//! 3. **Execution** (`exec.rs`). `GenerateExec` is stateless: per input batch it evaluates the
//!    generator's argument and emits the kept input columns repeated (`take`) next to the
//!    generated ones. So it runs per micro-batch below stateful operators, and their event-time
//!    columns keep their watermark marker.
//!
//! Output columns follow Spark: `col` (array elements), `pos` (INT, from 0), `key`/`value` (map
//! entries), the struct's field names (`inline`), `col0`, `col1`, .. (`stack`), `c0`, `c1`, ..
//! (`json_tuple`, strings). Spark's named argument of the explodes (`explode(collection =>
//! ..)`) is accepted. A null or empty
//! input gives no row, or with the `_outer` variants (and `LATERAL VIEW OUTER`) one row of nulls.

pub(crate) mod exec;
pub(crate) mod node;
pub(crate) mod rewrite;
pub(crate) mod split;
pub(crate) mod sql;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::prelude::lit;

use crate::error::{class, SluiceError};
use crate::schema::spark_type_name;

pub(crate) use rewrite::plan_generators;

/// What a generator does with its argument(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
pub(crate) enum GeneratorKind {
    /// One row per array element (`col`) or map entry (`key`, `value`).
    Explode,
    /// As `Explode`, with the element's position first (`pos`).
    PosExplode,
    /// One row per struct of an array of structs, one column per field.
    Inline,
    /// `stack(n, e1, .., ek)`: `n` rows of `ceil(k / n)` columns, filled row by row.
    Stack,
    /// `json_tuple(json, 'f1', .., 'fk')`: one row of `k` string columns `c0`, .. per input row
    /// (nulls for a null or malformed document).
    JsonTuple,
}

/// The generator functions, Spark's names: (name, kind, outer).
const GENERATORS: [(&str, GeneratorKind, bool); 8] = [
    ("explode", GeneratorKind::Explode, false),
    ("explode_outer", GeneratorKind::Explode, true),
    ("posexplode", GeneratorKind::PosExplode, false),
    ("posexplode_outer", GeneratorKind::PosExplode, true),
    ("inline", GeneratorKind::Inline, false),
    ("inline_outer", GeneratorKind::Inline, true),
    ("stack", GeneratorKind::Stack, false),
    ("json_tuple", GeneratorKind::JsonTuple, false),
];

/// The name Spark gives a generator's parameter in named-argument calls
/// (`explode(collection => ..)`), for the generators that take one.
pub(crate) fn parameter_name(kind: GeneratorKind) -> Option<&'static str> {
    match kind {
        GeneratorKind::Explode | GeneratorKind::PosExplode => Some("collection"),
        GeneratorKind::Inline | GeneratorKind::Stack | GeneratorKind::JsonTuple => None,
    }
}

/// The marker of one output column of a generator (`AS (a, b)`, `LATERAL VIEW`).
pub(crate) const GENERATOR_COLUMN: &str = "__sluice_generator_column";
/// The DataFrame API's multi-alias marker.
const MULTI_ALIAS: &str = "__sluice_multi_alias";

/// The placeholder of one generator function. Its type is the generator's output; it never runs
/// (the rewrite replaces it by a `Generate` node), and says so if it is reached anyway.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct SparkGenerator {
    name: &'static str,
    pub(crate) kind: GeneratorKind,
    pub(crate) outer: bool,
    signature: Signature,
}

impl SparkGenerator {
    fn new(name: &'static str, kind: GeneratorKind, outer: bool) -> Self {
        Self {
            name,
            kind,
            outer,
            // Volatile: never folded into a constant, so the rewrite always finds it.
            signature: Signature::user_defined(Volatility::Volatile),
        }
    }
}

fn external(e: SluiceError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The rows `stack(n, ..)` produces: `n`, which must be an integer literal above 0.
fn stack_rows(name: &str, n: Option<&ScalarValue>, arg: &Field) -> Result<usize, SluiceError> {
    let shown = || format!("{name}({}, ..)", arg.name());
    let value = match n {
        Some(v) if v.data_type().is_integer() => v.clone(),
        Some(v) if !v.data_type().is_null() => {
            return Err(SluiceError::query(
                class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                format!(
                    "Cannot resolve \"{}\" due to data type mismatch: Parameter 1 requires the \
                     \"INT\" type, however \"{v}\" has the type \"{}\". Give the number of rows as \
                     an integer literal.",
                    shown(),
                    spark_type_name(&v.data_type())
                ),
            ))
        }
        Some(_) => ScalarValue::Int64(None),
        None => {
            return Err(SluiceError::query(
                class::DATATYPE_MISMATCH_NON_FOLDABLE_INPUT,
                format!(
                    "Cannot resolve \"{}\" due to data type mismatch: the input n should be a \
                     foldable \"INT\" expression; however, got \"{}\". Give the number of rows as \
                     an integer literal.",
                    shown(),
                    arg.name()
                ),
            ))
        }
    };
    let rows = value.cast_to(&DataType::Int64).ok().and_then(|v| match v {
        ScalarValue::Int64(Some(n)) => Some(n),
        _ => None,
    });
    match rows {
        Some(n) if n > 0 && n <= i64::from(i32::MAX) => Ok(n as usize),
        _ => Err(SluiceError::query(
            class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE,
            format!(
                "Cannot resolve \"{}\" due to data type mismatch: The `n` must be between (0, \
                 2147483647] (current value = {value}).",
                shown()
            ),
        )),
    }
}

/// The output columns of generator `name` over arguments `args` (`scalars[i]`: argument `i`'s
/// value when it is a literal), with Spark's names and its argument checks.
pub(crate) fn output_fields(
    name: &str,
    kind: GeneratorKind,
    args: &[FieldRef],
    scalars: &[Option<&ScalarValue>],
) -> Result<Vec<Field>, SluiceError> {
    let wrong_args = |wanted: &str| {
        SluiceError::query(
            class::WRONG_NUM_ARGS,
            format!(
                "The `{name}` requires {wanted} parameters but the actual number is {}.",
                args.len()
            ),
        )
    };
    let mismatch = |wanted: &str, arg: &Field| {
        SluiceError::query(
            class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
            format!(
                "Cannot resolve \"{name}({})\" due to data type mismatch: Parameter 1 requires \
                 the {wanted} type, however \"{}\" has the type \"{}\".",
                arg.name(),
                arg.name(),
                spark_type_name(arg.data_type())
            ),
        )
    };
    let nullable = |n: &str, t: &DataType| Field::new(n, t.clone(), true);
    match kind {
        GeneratorKind::Explode | GeneratorKind::PosExplode => {
            let [arg] = args else {
                return Err(wrong_args("1"));
            };
            let mut out = Vec::new();
            if kind == GeneratorKind::PosExplode {
                out.push(nullable("pos", &DataType::Int32));
            }
            match arg.data_type() {
                DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                    out.push(nullable("col", f.data_type()))
                }
                DataType::Map(entries, _) => match entries.data_type() {
                    DataType::Struct(kv) if kv.len() == 2 => {
                        out.push(nullable("key", kv[0].data_type()));
                        out.push(nullable("value", kv[1].data_type()));
                    }
                    _ => return Err(mismatch("(\"ARRAY\" or \"MAP\")", arg)),
                },
                _ => return Err(mismatch("(\"ARRAY\" or \"MAP\")", arg)),
            }
            Ok(out)
        }
        GeneratorKind::Inline => {
            let [arg] = args else {
                return Err(wrong_args("1"));
            };
            match arg.data_type() {
                DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                    match f.data_type() {
                        DataType::Struct(fields) => Ok(fields
                            .iter()
                            .map(|f| nullable(f.name(), f.data_type()))
                            .collect()),
                        _ => Err(mismatch("\"ARRAY<STRUCT>\"", arg)),
                    }
                }
                _ => Err(mismatch("\"ARRAY<STRUCT>\"", arg)),
            }
        }
        GeneratorKind::JsonTuple => {
            if args.len() < 2 {
                return Err(wrong_args("> 1"));
            }
            if let Some(bad) = args.iter().find(|a| {
                !matches!(
                    a.data_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                )
            }) {
                return Err(SluiceError::query(
                    class::DATATYPE_MISMATCH_NON_STRING_TYPE,
                    format!(
                        "Cannot resolve \"{name}(..)\" due to data type mismatch: all arguments \
                         must be strings; \"{}\" has the type \"{}\". Give the JSON document \
                         and the field names as strings (CAST(NULL AS STRING) for a null).",
                        bad.name(),
                        spark_type_name(bad.data_type())
                    ),
                ));
            }
            Ok((0..args.len() - 1)
                .map(|j| nullable(&format!("c{j}"), &DataType::Utf8))
                .collect())
        }
        GeneratorKind::Stack => {
            if args.len() < 2 {
                return Err(wrong_args("> 1"));
            }
            let rows = stack_rows(name, scalars.first().copied().flatten(), &args[0])?;
            Ok(stack_column_types(name, rows, &args[1..])?
                .iter()
                .enumerate()
                .map(|(j, t)| nullable(&format!("col{j}"), t))
                .collect())
        }
    }
}

/// The type of each column of `stack(rows, values..)`: the values of a column must have one type
/// (null literals take it), as in Spark.
fn stack_column_types(
    name: &str,
    rows: usize,
    values: &[FieldRef],
) -> Result<Vec<DataType>, SluiceError> {
    let columns = values.len().div_ceil(rows);
    let mut types: Vec<(DataType, usize)> = vec![(DataType::Null, 0); columns];
    for (i, v) in values.iter().enumerate() {
        let j = i % columns;
        let t = v.data_type();
        if t.is_null() {
            continue;
        }
        if types[j].0.is_null() {
            types[j] = (t.clone(), i + 1);
        } else if !t.equals_datatype(&types[j].0) {
            return Err(SluiceError::query(
                class::DATATYPE_MISMATCH_STACK_COLUMN_DIFF_TYPES,
                format!(
                    "Cannot resolve \"{name}(..)\" due to data type mismatch: The data type of the \
                     column ({j}) do not have the same type: \"{}\" ({}) <> \"{}\" ({}). Cast the \
                     values of a column to one type.",
                    spark_type_name(&types[j].0),
                    types[j].1,
                    spark_type_name(t),
                    i + 1
                ),
            ));
        }
    }
    Ok(types.into_iter().map(|(t, _)| t).collect())
}

/// The placeholder's type: the one output column's type, or a struct of the output columns.
pub(crate) fn placeholder_type(fields: &[Field]) -> DataType {
    match fields {
        [one] => one.data_type().clone(),
        many => DataType::Struct(Fields::from(many.to_vec())),
    }
}

impl ScalarUDFImpl for SparkGenerator {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        // No implicit casts (Spark has none either); a null stack value is cast to its column's
        // type when the generator runs.
        Ok(arg_types.to_vec())
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Err(DataFusionError::Internal(format!(
            "{} is typed by return_field_from_args",
            self.name
        )))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let fields = output_fields(self.name, self.kind, args.arg_fields, args.scalar_arguments)
            .map_err(external)?;
        Ok(Arc::new(Field::new(
            self.name,
            placeholder_type(&fields),
            true,
        )))
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(external(unsupported_generator_here(self.name)))
    }
}

fn unsupported_generator_here(name: &str) -> SluiceError {
    SluiceError::query(
        class::UNSUPPORTED_GENERATOR_OUTSIDE_SELECT,
        format!(
            "The generator is not supported: {name}(..) was planned outside a SELECT list. Use a \
             generator as a whole item of a SELECT list or in LATERAL VIEW."
        ),
    )
}

/// `__sluice_generator_column('name', outer, j, args..)`: output column `j` of generator
/// `name(args..)` (a null type past the last column; the rewrite reports the count).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct GeneratorColumn {
    signature: Signature,
}

/// The parts of a `__sluice_generator_column` call: (generator name, outer, column, arguments).
pub(crate) fn as_generator_column(e: &Expr) -> Option<(&'static str, bool, usize, &[Expr])> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    f.func.inner().downcast_ref::<GeneratorColumn>()?;
    let (name, outer, j) = marker_literals(&f.args)?;
    Some((name, outer, j, &f.args[3..]))
}

fn marker_literals(args: &[Expr]) -> Option<(&'static str, bool, usize)> {
    let lit_of = |i: usize| match args.get(i) {
        Some(Expr::Literal(v, _)) => Some(v),
        _ => None,
    };
    let name = match lit_of(0)? {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => {
            GENERATORS.iter().map(|(n, _, _)| *n).find(|n| n == s)?
        }
        _ => return None,
    };
    let outer = matches!(lit_of(1)?, ScalarValue::Boolean(Some(true)));
    let j = match lit_of(2)?.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(Some(j)) if j >= 0 => j as usize,
        _ => return None,
    };
    Some((name, outer, j))
}

pub(crate) fn kind_of(name: &str) -> GeneratorKind {
    GENERATORS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, k, _)| *k)
        .unwrap_or(GeneratorKind::Explode)
}

impl ScalarUDFImpl for GeneratorColumn {
    fn name(&self) -> &str {
        GENERATOR_COLUMN
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        Ok(arg_types.to_vec())
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Err(DataFusionError::Internal(format!(
            "{GENERATOR_COLUMN} is typed by return_field_from_args"
        )))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let parts: Vec<Expr> = args
            .scalar_arguments
            .iter()
            .take(3)
            .map(|s| match s {
                Some(v) => Expr::Literal((*v).clone(), None),
                None => lit(ScalarValue::Null),
            })
            .collect();
        let Some((name, _, j)) = marker_literals(&parts) else {
            return Err(DataFusionError::Internal(format!(
                "{GENERATOR_COLUMN}(name, outer, column, args..) takes literals first"
            )));
        };
        let fields = output_fields(
            name,
            kind_of(name),
            &args.arg_fields[3..],
            &args.scalar_arguments[3..],
        )
        .map_err(external)?;
        let t = fields
            .get(j)
            .map(|f| f.data_type().clone())
            .unwrap_or(DataType::Null);
        Ok(Arc::new(Field::new(name, t, true)))
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(external(unsupported_generator_here("a generator")))
    }
}

/// `__sluice_multi_alias(generator, 'a', 'b', ..)`: the DataFrame API's multi-alias, expanded
/// by `StreamFrame::select_exprs` into one `__sluice_generator_column` item per name.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct MultiAlias {
    signature: Signature,
}

impl ScalarUDFImpl for MultiAlias {
    fn name(&self) -> &str {
        MULTI_ALIAS
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        Ok(arg_types.to_vec())
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        arg_types.first().cloned().ok_or_else(|| {
            DataFusionError::Plan(format!("{MULTI_ALIAS} needs a generator argument"))
        })
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(external(unsupported_generator_here(
            "a multi-aliased generator",
        )))
    }
}

/// The session's generator placeholders and the markers of the rewrite.
pub(crate) fn generator_udfs() -> Vec<ScalarUDF> {
    let mut out: Vec<ScalarUDF> = GENERATORS
        .iter()
        .map(|(n, k, o)| ScalarUDF::new_from_impl(SparkGenerator::new(n, *k, *o)))
        .collect();
    out.push(ScalarUDF::new_from_impl(GeneratorColumn {
        signature: Signature::user_defined(Volatility::Volatile),
    }));
    out
}

/// Expands [`multi_alias`] items into one generator column per name (for a projection).
pub(crate) fn expand_multi_aliases(exprs: Vec<Expr>) -> Result<Vec<Expr>, SluiceError> {
    let mut out = Vec::with_capacity(exprs.len());
    for e in exprs {
        let Expr::ScalarFunction(f) = &e else {
            out.push(e);
            continue;
        };
        if f.func.inner().downcast_ref::<MultiAlias>().is_none() {
            out.push(e);
            continue;
        }
        let Some((generator, names)) = f.args.split_first() else {
            out.push(e);
            continue;
        };
        let Some(call) = node::as_generator(generator) else {
            return Err(SluiceError::query(
                class::UNSUPPORTED_GENERATOR_NOT_GENERATOR,
                format!(
                    "The generator is not supported: multi_alias needs a generator, got {generator}"
                ),
            ));
        };
        for (j, n) in names.iter().enumerate() {
            let Expr::Literal(ScalarValue::Utf8(Some(n)), _) = n else {
                continue;
            };
            let mut args = vec![lit(call.name.to_string()), lit(false), lit(j as i64)];
            args.extend(call.args.iter().cloned());
            out.push(generator_column(args).alias(n.clone()));
        }
    }
    Ok(out)
}

fn generator_column(args: Vec<Expr>) -> Expr {
    Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
        Arc::new(ScalarUDF::new_from_impl(GeneratorColumn {
            signature: Signature::user_defined(Volatility::Volatile),
        })),
        args,
    ))
}

pub(crate) fn generator_call(name: &str, args: Vec<Expr>) -> Expr {
    let (n, k, o) = GENERATORS
        .iter()
        .find(|(n, _, _)| *n == name)
        .copied()
        .unwrap_or(GENERATORS[0]);
    Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
        Arc::new(ScalarUDF::new_from_impl(SparkGenerator::new(n, k, o))),
        args,
    ))
}

/// `explode(e)`: one row per element of the array `e` (column `col`) or entry of the map `e`
/// (columns `key`, `value`); a null or empty `e` gives no row. Use it as a whole item of
/// `StreamFrame::select_exprs` / `with_column`, e.g. `explode(col("words")).alias("word")`.
pub fn explode(e: Expr) -> Expr {
    generator_call("explode", vec![e])
}
/// `explode_outer(e)`: as [`explode`], but a null or empty `e` gives one row of nulls.
pub fn explode_outer(e: Expr) -> Expr {
    generator_call("explode_outer", vec![e])
}
/// `posexplode(e)`: as [`explode`], with the position (from 0) first, in column `pos`.
pub fn posexplode(e: Expr) -> Expr {
    generator_call("posexplode", vec![e])
}
/// `posexplode_outer(e)`: as [`posexplode`], but a null or empty `e` gives one row of nulls.
pub fn posexplode_outer(e: Expr) -> Expr {
    generator_call("posexplode_outer", vec![e])
}
/// `inline(e)`: one row per struct of the array of structs `e`, one column per field.
pub fn inline(e: Expr) -> Expr {
    generator_call("inline", vec![e])
}
/// `inline_outer(e)`: as [`inline`], but a null or empty `e` gives one row of nulls.
pub fn inline_outer(e: Expr) -> Expr {
    generator_call("inline_outer", vec![e])
}
/// `stack(n, values..)`: `n` rows of `ceil(len(values) / n)` columns `col0`, `col1`, ..,
/// filled row by row (missing values are null).
pub fn stack(n: i32, values: Vec<Expr>) -> Expr {
    let mut args = vec![lit(n)];
    args.extend(values);
    generator_call("stack", args)
}
/// Names the columns of a generator with several (Spark's `Column.as(Seq(..))`, SQL's
/// `gen(..) AS (a, b)`), e.g. `multi_alias(posexplode(col("xs")), ["p", "x"])`.
pub fn multi_alias<I, S>(generator: Expr, names: I) -> Expr
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut args = vec![generator];
    args.extend(names.into_iter().map(|n| lit(n.as_ref().to_string())));
    Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
        Arc::new(ScalarUDF::new_from_impl(MultiAlias {
            signature: Signature::user_defined(Volatility::Volatile),
        })),
        args,
    ))
}
