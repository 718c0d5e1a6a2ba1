//! A scalar function evaluated one row at a time over `ScalarValue`s, and a wrapper that sends
//! some argument types to such a function and the rest to a registered one.
//!
//! For functions whose cost is in the values, not the loop (collections, JSON text, masks):
//! `RowFn` holds three plain functions (argument coercion, result type, one row), so each Spark
//! function is a few lines with Spark's argument rules and null handling spelled out. The
//! helpers those functions share (a value's text, the usage error, common result types) are at
//! the end.

use std::sync::Arc;

use arrow::array::{new_empty_array, ArrayRef};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

/// The argument types a function casts its arguments to (Spark's implicit casts), or an error.
pub(super) type Coerce = fn(&str, &[DataType]) -> DfResult<Vec<DataType>>;
/// The result type for the coerced argument types.
pub(super) type Returns = fn(&[DataType]) -> DfResult<DataType>;
/// One row: the argument values (typed as coerced) and the result type.
pub(super) type Eval = fn(&[ScalarValue], &DataType) -> DfResult<ScalarValue>;

/// A Spark function computed row by row.
pub(super) struct RowFn {
    pub(super) name: &'static str,
    pub(super) coerce: Coerce,
    pub(super) returns: Returns,
    pub(super) eval: Eval,
    pub(super) signature: Signature,
}

impl RowFn {
    pub(super) fn new(name: &'static str, coerce: Coerce, returns: Returns, eval: Eval) -> Self {
        RowFn {
            name,
            coerce,
            returns,
            eval,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
    pub(super) fn udf(self) -> ScalarUDF {
        ScalarUDF::new_from_impl(self)
    }
    fn run(&self, args: &[ColumnarValue], rows: usize, ret: &DataType) -> DfResult<ColumnarValue> {
        let all_scalar = args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = if all_scalar { 1 } else { rows };
        let mut out = Vec::with_capacity(n);
        let mut row = Vec::with_capacity(args.len());
        for i in 0..n {
            row.clear();
            for a in args {
                row.push(match a {
                    ColumnarValue::Scalar(s) => s.clone(),
                    ColumnarValue::Array(a) => ScalarValue::try_from_array(a, i)?,
                });
            }
            let v = (self.eval)(&row, ret)?;
            out.push(if v.is_null() && v.data_type() != *ret {
                ScalarValue::try_from(ret)?
            } else {
                v
            });
        }
        if all_scalar {
            let v = out
                .pop()
                .map(Ok)
                .unwrap_or_else(|| ScalarValue::try_from(ret))?;
            return Ok(ColumnarValue::Scalar(v));
        }
        let array: ArrayRef = if out.is_empty() {
            new_empty_array(ret)
        } else {
            ScalarValue::iter_to_array(out)?
        };
        Ok(ColumnarValue::Array(array))
    }
}

impl std::fmt::Debug for RowFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowFn").field("name", &self.name).finish()
    }
}
impl PartialEq for RowFn {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for RowFn {}
impl std::hash::Hash for RowFn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl ScalarUDFImpl for RowFn {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        (self.coerce)(self.name, arg_types)
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        (self.returns)(arg_types)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let ret = args.return_field.data_type().clone();
        self.run(&args.args, args.number_rows, &ret)
    }
}

/// A registered function, except for calls whose first argument's type `takes`: those go to
/// `alt` (e.g. `reverse` of an array, `startswith` of binaries).
pub(super) struct Dispatch {
    inner: Arc<ScalarUDF>,
    alt: RowFn,
    takes: Takes,
}

/// Which calls go to the row-wise function: by the first argument's type, or by all of them.
#[derive(Clone, Copy)]
pub(super) enum Takes {
    First(fn(&DataType) -> bool),
    All(fn(&[DataType]) -> bool),
}

impl Dispatch {
    pub(super) fn udf(
        inner: Arc<ScalarUDF>,
        alt: RowFn,
        takes: fn(&DataType) -> bool,
    ) -> ScalarUDF {
        ScalarUDF::new_from_impl(Dispatch {
            inner,
            alt,
            takes: Takes::First(takes),
        })
    }
    pub(super) fn udf_when(
        inner: Arc<ScalarUDF>,
        alt: RowFn,
        takes: fn(&[DataType]) -> bool,
    ) -> ScalarUDF {
        ScalarUDF::new_from_impl(Dispatch {
            inner,
            alt,
            takes: Takes::All(takes),
        })
    }
    fn alt_for(&self, types: &[DataType]) -> bool {
        match self.takes {
            Takes::First(f) => types.first().is_some_and(f),
            Takes::All(f) => f(types),
        }
    }
}

impl std::fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatch")
            .field("name", &self.inner.name())
            .finish()
    }
}
impl PartialEq for Dispatch {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && self.alt == other.alt
    }
}
impl Eq for Dispatch {}
impl std::hash::Hash for Dispatch {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
        self.alt.hash(state)
    }
}

impl ScalarUDFImpl for Dispatch {
    fn name(&self) -> &str {
        self.alt.name
    }
    fn aliases(&self) -> &[String] {
        if self.alt.name == self.inner.name() {
            self.inner.aliases()
        } else {
            &[]
        }
    }
    fn signature(&self) -> &Signature {
        &self.alt.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if self.alt_for(arg_types) {
            return self.alt.coerce_types(arg_types);
        }
        super::coerced_by(&self.inner, arg_types.iter().cloned())
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        if self.alt_for(arg_types) {
            return self.alt.return_type(arg_types);
        }
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        if self.alt_for(&types) {
            return Ok(Arc::new(Field::new(
                self.name(),
                self.alt.return_type(&types)?,
                true,
            )));
        }
        self.inner.return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        if self.alt_for(&types) {
            return self.alt.invoke_with_args(args);
        }
        self.inner.invoke_with_args(args)
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        let types: Option<Vec<DataType>> =
            args.iter().map(|e| info.get_data_type(e).ok()).collect();
        if types.as_deref().is_none_or(|t| self.alt_for(t)) {
            return Ok(ExprSimplifyResult::Original(args));
        }
        self.inner.simplify(args, info)
    }
}

/// An execution error with Spark's error class in front.
pub(super) fn spark_err(class: &str, msg: String) -> DataFusionError {
    DataFusionError::Execution(format!("[{class}] {msg}"))
}

// ---- what the row-wise functions share ----

/// Spark's error for a call with arguments the function does not take (`{name} takes {what}`).
pub(super) fn usage(name: &str, what: &str) -> DataFusionError {
    spark_err(
        crate::error::class::WRONG_NUM_ARGS_WITHOUT_SUGGESTION,
        format!("{name} takes {what}"),
    )
}

/// The text of a STRING value; `None` for a null or another type.
pub(super) fn text(v: &ScalarValue) -> Option<&str> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s),
        _ => None,
    }
}

/// `n` arguments of type `t`.
pub(super) fn all(t: DataType, n: usize) -> Vec<DataType> {
    vec![t; n]
}

/// Result types: STRING, INT, ARRAY<STRING>.
pub(super) fn r_str(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Utf8)
}
pub(super) fn r_i32(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Int32)
}
pub(super) fn r_str_list(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::List(Arc::new(Field::new_list_field(
        DataType::Utf8,
        true,
    ))))
}

/// A registered function whose failing rows are null: always (`try_to_timestamp`), or only with
/// `spark.sql.ansi.enabled=false` (Spark's non-ANSI `to_timestamp('foo', 'yyyy-MM-dd')` is null).
pub(super) struct NullOnError {
    name: String,
    inner: Arc<ScalarUDF>,
    always: bool,
}

impl NullOnError {
    pub(super) fn udf(name: &str, inner: Arc<ScalarUDF>, always: bool) -> ScalarUDF {
        ScalarUDF::new_from_impl(NullOnError {
            name: name.to_string(),
            inner,
            always,
        })
    }
}

impl std::fmt::Debug for NullOnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NullOnError")
            .field("name", &self.name)
            .finish()
    }
}
impl PartialEq for NullOnError {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.inner == other.inner && self.always == other.always
    }
}
impl Eq for NullOnError {}
impl std::hash::Hash for NullOnError {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.always.hash(state)
    }
}

impl ScalarUDFImpl for NullOnError {
    fn name(&self) -> &str {
        &self.name
    }
    fn aliases(&self) -> &[String] {
        if self.name == self.inner.name() {
            self.inner.aliases()
        } else {
            &[]
        }
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        super::coerced_by(&self.inner, arg_types.iter().cloned())
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if !self.always && args.config_options.execution.enable_ansi_mode {
            return self.inner.invoke_with_args(args);
        }
        // A pattern Sluice cannot read is the query's error, not a row's.
        if let Some(ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(p))
            | ScalarValue::LargeUtf8(Some(p))
            | ScalarValue::Utf8View(Some(p)),
        )) = args.args.get(1)
        {
            crate::fixes::spark_pattern_to_chrono(p).map_err(DataFusionError::Execution)?;
        }
        let ret = args.return_field.data_type().clone();
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        match self.inner.invoke_with_args(args.clone()) {
            Ok(v) => Ok(v),
            Err(_) if all_scalar => Ok(ColumnarValue::Scalar(ScalarValue::try_from(&ret)?)),
            Err(_) => {
                // Row by row: a failing row is null.
                let mut out: Vec<ArrayRef> = Vec::with_capacity(args.number_rows);
                for i in 0..args.number_rows {
                    let row: Vec<ColumnarValue> = args
                        .args
                        .iter()
                        .map(|a| match a {
                            ColumnarValue::Scalar(s) => ColumnarValue::Scalar(s.clone()),
                            ColumnarValue::Array(a) => ColumnarValue::Array(a.slice(i, 1)),
                        })
                        .collect();
                    let one = ScalarFunctionArgs {
                        args: row,
                        arg_fields: args.arg_fields.clone(),
                        number_rows: 1,
                        return_field: Arc::clone(&args.return_field),
                        config_options: Arc::clone(&args.config_options),
                    };
                    out.push(match self.inner.invoke_with_args(one) {
                        Ok(v) => v.into_array(1)?,
                        Err(_) => arrow::array::new_null_array(&ret, 1),
                    });
                }
                if out.is_empty() {
                    return Ok(ColumnarValue::Array(new_empty_array(&ret)));
                }
                let refs: Vec<&dyn arrow::array::Array> = out.iter().map(|a| a.as_ref()).collect();
                Ok(ColumnarValue::Array(arrow::compute::concat(&refs)?))
            }
        }
    }
    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        Ok(ExprSimplifyResult::Original(args))
    }
}
