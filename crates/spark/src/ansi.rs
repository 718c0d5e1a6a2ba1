//! Spark's cast and arithmetic rules, non-ANSI (Spark 3.5's default) and ANSI
//! (`spark.sql.ansi.enabled=true`, [`crate::conf::ANSI_ENABLED`]).
//!
//! Arrow's casts and DataFusion's operators fail a whole query on one bad value (`CAST('x1' AS
//! INT)`, `1 / 0`). Spark's non-ANSI mode never does: the value is null, or wraps. This module is
//! the one home of those rules; every rule was checked on PySpark 3.5.7.
//!
//! Non-ANSI (the default):
//! - string to TINYINT/SMALLINT/INT/BIGINT: trimmed, an optional sign, digits, optionally `.`
//!   and digits (truncated: `'1.5'` is 1, `'.5'` is 0, `'1.'` is 1); anything else (`'x1'`,
//!   `'1e3'`, `'0x10'`, `''`) or a value out of the type's range is null;
//! - string to DOUBLE/FLOAT: Java's syntax (a trailing `d`/`f` allowed), `NaN`, `Infinity`,
//!   `inf`; too large is infinity; else null;
//! - string to DECIMAL(p, s): rounded HALF_UP to `s`; more than `p` digits is null;
//! - string to BOOLEAN: `t`/`true`/`y`/`yes`/`1` and `f`/`false`/`n`/`no`/`0` (any case, trimmed),
//!   else null;
//! - string to DATE / TIMESTAMP: Spark's lenient forms (`source::file::datetime`); a date that
//!   does not exist (`2023-02-30`) is null;
//! - integer narrowing wraps (`CAST(300 AS TINYINT)` = 44), as does DECIMAL to an integer;
//!   DOUBLE/FLOAT to INT/BIGINT truncates and saturates (NaN is 0), to SMALLINT/TINYINT goes
//!   through INT and wraps (`CAST(1e20 AS TINYINT)` = -1);
//! - a number to DECIMAL(p, s) is rounded HALF_UP; more than `p` digits, NaN or infinity is null;
//! - `+ - *` on integers wrap (DataFusion's operators already do);
//! - `/` on integers is DOUBLE division (`7 / 2` = 3.5); `/`, `%` and `div` by zero are null
//!   (also for DOUBLE: `1.5D / 0.0D` is null); `a div b` is BIGINT (truncated, `div.rs`).
//!
//! ANSI: the same casts and operators raise Spark's errors instead, with Spark's classes
//! (`CAST_INVALID_INPUT`, `CAST_OVERFLOW`, `NUMERIC_VALUE_OUT_OF_RANGE`, `ARITHMETIC_OVERFLOW`,
//! `DIVIDE_BY_ZERO`) and messages that name the value, the expression and the fix (`try_cast`,
//! `try_add`, `try_divide`, or `spark.sql.ansi.enabled=false`). As in Spark, the mode is fixed when
//! the query is analysed (`Session::sql`, or the query's start for DataFrame frames).
//!
//! `try_cast`, `try_add`, `try_subtract`, `try_multiply` and `try_divide` are null where ANSI
//! would fail, in either mode.
//!
//! Two analyzer rules apply this: [`SparkArithmeticRule`] runs before DataFusion's type coercion
//! (it changes types: integer `/` becomes DOUBLE), and `plan::spark::SparkCastRule` runs after it
//! and calls [`rewrite_after_coercion`] for casts and ANSI's checked `+ - *`.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
    Float64Builder, Int64Builder, PrimitiveArray, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Decimal128Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, TimeUnit,
};
use bigdecimal::{BigDecimal, RoundingMode};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::{lit, Expr};

use crate::error::{class, SluiceError};
use crate::records::datetime::{parse_date_days, parse_timestamp_micros};
use crate::schema::spark_type_name;

/// What a cast does with a value it cannot represent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Spark's non-ANSI rules: null, or wrap.
    Legacy,
    /// Spark's ANSI rules: an error with Spark's class.
    Ansi,
    /// `try_*`: null wherever ANSI would fail.
    Try,
}

const FIX_CAST: &str = "Use `try_cast` to tolerate malformed input and return NULL instead. \
                        If necessary set \"spark.sql.ansi.enabled\" to \"false\" to bypass this \
                        error.";

fn ansi_error(class: &'static str, message: String) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::input(class, message)))
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_signed_int(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

fn int_bits(t: &DataType) -> u32 {
    match t {
        DataType::Int8 => 8,
        DataType::Int16 => 16,
        DataType::Int32 => 32,
        _ => 64,
    }
}

/// Whether `CAST(<from> AS <to>)` differs between Arrow and Spark (else Arrow's cast stays).
pub fn needs_spark_cast(from: &DataType, to: &DataType) -> bool {
    let numeric_from = from.is_numeric();
    match to {
        t if is_signed_int(t) => {
            is_string(from)
                || matches!(from, DataType::Float32 | DataType::Float64)
                || matches!(from, DataType::Decimal128(..))
                || (is_signed_int(from) && int_bits(from) > int_bits(t))
        }
        DataType::Float32 | DataType::Float64 => is_string(from),
        DataType::Decimal128(..) => {
            is_string(from) || (numeric_from && !matches!(from, DataType::Decimal256(..)))
        }
        DataType::Boolean | DataType::Date32 => is_string(from),
        DataType::Timestamp(..) => is_string(from),
        // Spark writes doubles as Java's Double.toString (`Infinity`, `1.0E20`); Arrow `inf`.
        t if is_string(t) => matches!(from, DataType::Float64),
        _ => false,
    }
}

/// Spark's `CAST(x AS <target>)` with the rules of one [`Mode`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SparkCast {
    target: DataType,
    mode: Mode,
    /// The expression as written, for error messages (`CAST(v AS INT)`).
    text: String,
    signature: Signature,
}

impl SparkCast {
    /// A cast to `target` in `mode`; `text` is the expression's SQL text, for errors.
    pub fn new(target: DataType, mode: Mode, text: String) -> Self {
        Self {
            target,
            mode,
            text,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SparkCast {
    fn name(&self) -> &str {
        match self.mode {
            Mode::Try => "try_cast",
            _ => "cast",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.target.clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arg = args
            .args
            .first()
            .ok_or_else(|| DataFusionError::Internal("cast: no argument".into()))?;
        let a = arg.to_array(args.number_rows)?;
        let out = spark_cast(&a, &self.target, self.mode, &self.text)?;
        Ok(match arg {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(out),
        })
    }
}

/// One value's failure: the class and the reason ANSI reports.
struct Bad {
    class: &'static str,
}

const MALFORMED: Bad = Bad {
    class: class::CAST_INVALID_INPUT,
};
const OVERFLOW: Bad = Bad {
    class: class::CAST_OVERFLOW,
};
const OUT_OF_RANGE: Bad = Bad {
    class: class::NUMERIC_VALUE_OUT_OF_RANGE,
};

/// Casts `a` to `to` with Spark's rules (see the module doc).
pub fn spark_cast(a: &ArrayRef, to: &DataType, mode: Mode, text: &str) -> DfResult<ArrayRef> {
    let from = a.data_type().clone();
    if !needs_spark_cast(&from, to) {
        return Ok(arrow::compute::cast(a, to)?);
    }
    if is_string(to) {
        let d = a.as_primitive::<Float64Type>();
        let text: arrow::array::StringArray = d
            .iter()
            .map(|v| v.map(crate::value_text::java_double_to_string))
            .collect();
        return Ok(arrow::compute::cast(&(Arc::new(text) as ArrayRef), to)?);
    }
    let from_name = spark_type_name(&from);
    let to_name = spark_type_name(to);
    // Reports (ANSI) or nulls (try) one value that legacy mode cannot take either.
    let fail = |bad: Bad, shown: String| -> DfResult<()> {
        if mode != Mode::Ansi {
            return Ok(());
        }
        let message = match bad.class {
            class::CAST_INVALID_INPUT => format!(
                "The value {shown} of the type \"{from_name}\" cannot be cast to \"{to_name}\" \
                 because it is malformed, in `{text}`. Correct the value as per the syntax, or \
                 change its target type. {FIX_CAST}"
            ),
            class::CAST_OVERFLOW => format!(
                "The value {shown} of the type \"{from_name}\" cannot be cast to \"{to_name}\" \
                 due to an overflow, in `{text}`. Use `try_cast` to tolerate overflow and \
                 return NULL instead. If necessary set \"spark.sql.ansi.enabled\" to \"false\" \
                 to bypass this error."
            ),
            _ => {
                let to = match to {
                    DataType::Decimal128(p, s) => format!("Decimal({p}, {s})"),
                    other => spark_type_name(other),
                };
                format!(
                    "{shown} cannot be represented as {to}, in `{text}`. If necessary set \
                     \"spark.sql.ansi.enabled\" to \"false\" to bypass this error, and return \
                     NULL instead."
                )
            }
        };
        Err(ansi_error(bad.class, message))
    };
    let legacy = mode == Mode::Legacy;
    if is_string(&from) {
        let s = arrow::compute::cast(a, &DataType::Utf8)?;
        let s = s.as_string::<i32>();
        let shown = |v: &str| format!("'{v}'");
        return match to {
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                let bits = int_bits(to);
                let mut out = Int64Builder::with_capacity(s.len());
                for v in s.iter() {
                    match v {
                        None => out.append_null(),
                        Some(v) => match parse_spark_integer(v, legacy) {
                            Some(n) if fits_bits(n, bits) => out.append_value(n),
                            _ => {
                                fail(MALFORMED, shown(v))?;
                                out.append_null()
                            }
                        },
                    }
                }
                Ok(arrow::compute::cast(
                    &(Arc::new(out.finish()) as ArrayRef),
                    to,
                )?)
            }
            DataType::Float64 | DataType::Float32 => {
                let mut out = Float64Builder::with_capacity(s.len());
                for v in s.iter() {
                    match v {
                        None => out.append_null(),
                        Some(v) => match parse_spark_double(v) {
                            Some(d) => out.append_value(d),
                            None => {
                                fail(MALFORMED, shown(v))?;
                                out.append_null()
                            }
                        },
                    }
                }
                let out = Arc::new(out.finish()) as ArrayRef;
                if to == &DataType::Float32 {
                    let mut f = Float32Builder::with_capacity(out.len());
                    for v in out.as_primitive::<Float64Type>().iter() {
                        f.append_option(v.map(|d| d as f32));
                    }
                    return Ok(Arc::new(f.finish()));
                }
                Ok(out)
            }
            DataType::Decimal128(p, sc) => {
                let mut out = Decimal128Builder::with_capacity(s.len());
                for v in s.iter() {
                    match v {
                        None => out.append_null(),
                        Some(v) => {
                            let t = v.trim_matches(|c: char| c <= ' ');
                            match t.parse::<BigDecimal>() {
                                Err(_) => {
                                    fail(MALFORMED, shown(v))?;
                                    out.append_null()
                                }
                                Ok(d) => match decimal_unscaled(&d, *p, *sc) {
                                    Some(u) => out.append_value(u),
                                    None => {
                                        fail(OUT_OF_RANGE, t.to_string())?;
                                        out.append_null()
                                    }
                                },
                            }
                        }
                    }
                }
                Ok(Arc::new(out.finish().with_precision_and_scale(*p, *sc)?))
            }
            DataType::Boolean => {
                let mut out = BooleanBuilder::with_capacity(s.len());
                for v in s.iter() {
                    match v {
                        None => out.append_null(),
                        Some(v) => match parse_spark_bool(v) {
                            Some(b) => out.append_value(b),
                            None => {
                                fail(MALFORMED, shown(v))?;
                                out.append_null()
                            }
                        },
                    }
                }
                Ok(Arc::new(out.finish()))
            }
            DataType::Date32 => {
                let mut out = Date32Builder::with_capacity(s.len());
                for v in s.iter() {
                    match v {
                        None => out.append_null(),
                        Some(v) => match parse_date_days(v) {
                            Some(d) => out.append_value(d),
                            None => {
                                fail(MALFORMED, shown(v))?;
                                out.append_null()
                            }
                        },
                    }
                }
                Ok(Arc::new(out.finish()))
            }
            DataType::Timestamp(unit, tz) => {
                let mut out = TimestampMicrosecondBuilder::with_capacity(s.len());
                for v in s.iter() {
                    match v {
                        None => out.append_null(),
                        Some(v) => match parse_timestamp_micros(v) {
                            Some(t) => out.append_value(t),
                            None => {
                                fail(MALFORMED, shown(v))?;
                                out.append_null()
                            }
                        },
                    }
                }
                let micros = Arc::new(out.finish().with_timezone_opt(tz.clone())) as ArrayRef;
                if *unit == TimeUnit::Microsecond {
                    return Ok(micros);
                }
                Ok(arrow::compute::cast(&micros, to)?)
            }
            _ => Ok(arrow::compute::cast(a, to)?),
        };
    }
    if is_signed_int(to) {
        let bits = int_bits(to);
        let mut out = Int64Builder::with_capacity(a.len());
        match &from {
            DataType::Float32 | DataType::Float64 => {
                let d = arrow::compute::cast(a, &DataType::Float64)?;
                for v in d.as_primitive::<Float64Type>().iter() {
                    match v {
                        None => out.append_null(),
                        Some(x) => {
                            let t = x.trunc();
                            let fits = x.is_finite()
                                && t >= -(2f64.powi(bits as i32 - 1))
                                && t < 2f64.powi(bits as i32 - 1);
                            if fits {
                                out.append_value(t as i64);
                            } else if legacy {
                                // Java: (int) / (long) saturate, NaN is 0; short and byte go
                                // through int and wrap.
                                let n = if bits == 64 {
                                    x as i64
                                } else {
                                    wrap_bits(x as i32 as i64, bits)
                                };
                                out.append_value(n);
                            } else {
                                fail(OVERFLOW, format!("{}D", java_double_text(x)))?;
                                out.append_null();
                            }
                        }
                    }
                }
            }
            DataType::Decimal128(_, sc) => {
                let pow = 10i128.pow(*sc as u32);
                for v in a.as_primitive::<Decimal128Type>().iter() {
                    match v {
                        None => out.append_null(),
                        Some(u) => {
                            let t = u / pow;
                            if t >= i64::MIN as i128
                                && t <= i64::MAX as i128
                                && fits_bits(t as i64, bits)
                            {
                                out.append_value(t as i64);
                            } else if legacy {
                                out.append_value(wrap_bits(t as i64, bits));
                            } else {
                                fail(
                                    OVERFLOW,
                                    format!("{}BD", BigDecimal::new(u.into(), *sc as i64)),
                                )?;
                                out.append_null();
                            }
                        }
                    }
                }
            }
            _ => {
                let l = arrow::compute::cast(a, &DataType::Int64)?;
                let suffix = match from {
                    DataType::Int64 => "L",
                    DataType::Int16 => "S",
                    DataType::Int8 => "Y",
                    _ => "",
                };
                for v in l.as_primitive::<Int64Type>().iter() {
                    match v {
                        None => out.append_null(),
                        Some(n) if fits_bits(n, bits) => out.append_value(n),
                        Some(n) if legacy => out.append_value(wrap_bits(n, bits)),
                        Some(n) => {
                            fail(OVERFLOW, format!("{n}{suffix}"))?;
                            out.append_null();
                        }
                    }
                }
            }
        }
        return Ok(arrow::compute::cast(
            &(Arc::new(out.finish()) as ArrayRef),
            to,
        )?);
    }
    if let DataType::Decimal128(p, sc) = to {
        let mut out = Decimal128Builder::with_capacity(a.len());
        let mut push = |d: Option<BigDecimal>, shown: &dyn Fn() -> String| -> DfResult<()> {
            match d.map(|d| decimal_unscaled(&d, *p, *sc)) {
                None => out.append_null(),
                Some(Some(u)) => out.append_value(u),
                Some(None) => {
                    fail(OUT_OF_RANGE, shown())?;
                    out.append_null()
                }
            }
            Ok(())
        };
        match &from {
            DataType::Float32 | DataType::Float64 => {
                let d = arrow::compute::cast(a, &DataType::Float64)?;
                for v in d.as_primitive::<Float64Type>().iter() {
                    match v {
                        None => push(None, &String::new)?,
                        Some(x) if !x.is_finite() => {
                            fail(MALFORMED, java_double_text(x))?;
                            push(None, &String::new)?
                        }
                        Some(x) => {
                            let d = format!("{x}").parse::<BigDecimal>().ok();
                            let shown = d.as_ref().map(|d| d.to_string()).unwrap_or_default();
                            push(d, &|| shown.clone())?
                        }
                    }
                }
            }
            DataType::Decimal128(_, fs) => {
                for v in a.as_primitive::<Decimal128Type>().iter() {
                    let d = v.map(|u| BigDecimal::new(u.into(), *fs as i64));
                    let shown = d.as_ref().map(|d| d.to_string()).unwrap_or_default();
                    push(d, &|| shown.clone())?;
                }
            }
            _ => {
                let l = arrow::compute::cast(a, &DataType::Int64)?;
                for v in l.as_primitive::<Int64Type>().iter() {
                    push(v.map(BigDecimal::from), &|| {
                        v.unwrap_or_default().to_string()
                    })?;
                }
            }
        }
        return Ok(Arc::new(out.finish().with_precision_and_scale(*p, *sc)?));
    }
    Ok(arrow::compute::cast(a, to)?)
}

fn fits_bits(n: i64, bits: u32) -> bool {
    bits == 64 || (n >= -(1i64 << (bits - 1)) && n < (1i64 << (bits - 1)))
}

fn wrap_bits(n: i64, bits: u32) -> i64 {
    match bits {
        8 => n as i8 as i64,
        16 => n as i16 as i64,
        32 => n as i32 as i64,
        _ => n,
    }
}

/// Java's `Double.toString` for the values error messages show (`1.0E20`, `NaN`, `Infinity`).
fn java_double_text(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let a = x.abs();
    if a != 0.0 && !(1e-3..1e7).contains(&a) {
        let s = format!("{x:E}");
        return if s.contains('.') {
            s
        } else {
            s.replacen('E', ".0E", 1)
        };
    }
    let s = format!("{x}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

/// `d` as the unscaled value of DECIMAL(p, s), rounded HALF_UP; None when it has more than `p`
/// digits.
fn decimal_unscaled(d: &BigDecimal, p: u8, s: i8) -> Option<i128> {
    let r = d.with_scale_round(s as i64, RoundingMode::HalfUp);
    let (unscaled, _) = r.as_bigint_and_exponent();
    let u: i128 = i128::try_from(unscaled).ok()?;
    let limit = 10i128.checked_pow(p as u32)?;
    (u.abs() < limit).then_some(u)
}

/// Spark's `UTF8String.toLong`: trimmed, an optional sign, digits, and (when `allow_decimal`,
/// the non-ANSI rule) an optional `.` with digits that are dropped.
pub fn parse_spark_integer(s: &str, allow_decimal: bool) -> Option<i64> {
    let t = s.trim_matches(|c: char| c <= ' ' || c == '\u{7f}');
    let (neg, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let (int_part, frac) = match digits.find('.') {
        Some(i) if allow_decimal => (&digits[..i], &digits[i + 1..]),
        Some(_) => return None,
        None => (digits, ""),
    };
    if (int_part.is_empty() && frac.is_empty())
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    if int_part.is_empty() {
        return Some(0);
    }
    let mut n: i64 = 0;
    for b in int_part.bytes() {
        let d = (b - b'0') as i64;
        n = if neg {
            n.checked_mul(10)?.checked_sub(d)?
        } else {
            n.checked_mul(10)?.checked_add(d)?
        };
    }
    Some(n)
}

/// Spark's string-to-double: Java's `Double.parseDouble` on the trimmed text (a trailing
/// `d`/`D`/`f`/`F` allowed), plus `inf`/`infinity`/`nan` in any case.
pub fn parse_spark_double(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c <= ' ');
    let lower = t.to_ascii_lowercase();
    match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => return Some(f64::INFINITY),
        "-inf" | "-infinity" => return Some(f64::NEG_INFINITY),
        "nan" | "+nan" | "-nan" => return Some(f64::NAN),
        _ => {}
    }
    let body = lower.strip_suffix(['d', 'f']).unwrap_or(lower.as_str());
    // Rust also reads `inf`/`nan` words, which Java does not (handled above).
    if body.is_empty() || body.bytes().any(|b| b.is_ascii_alphabetic() && b != b'e') {
        return None;
    }
    body.parse::<f64>().ok()
}

/// Spark's string-to-boolean.
pub fn parse_spark_bool(s: &str) -> Option<bool> {
    let t = s.trim_matches(|c: char| c <= ' ').to_ascii_lowercase();
    match t.as_str() {
        "t" | "true" | "y" | "yes" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "0" => Some(false),
        _ => None,
    }
}

fn ansi(config: &ConfigOptions) -> bool {
    config.execution.enable_ansi_mode
}

/// Spark's division before type coercion: integer `/` is DOUBLE division, and `/`, `%`, `div`
/// by zero are null (non-ANSI) or `DIVIDE_BY_ZERO` (ANSI).
#[derive(Debug, Default)]
pub struct SparkArithmeticRule;

impl AnalyzerRule for SparkArithmeticRule {
    fn name(&self) -> &str {
        "sluice_spark_arithmetic"
    }
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let ansi = ansi(config);
        plan.transform_up_with_subqueries(|node| {
            let inputs = node.inputs();
            if inputs.len() != 1 {
                return Ok(Transformed::no(node));
            }
            let schema: Arc<DFSchema> = inputs[0].schema().clone();
            let names = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&node);
            let t = node.map_expressions(|e| {
                let saved = names.save(&e);
                e.transform_up(|e| rewrite_division(e, &schema, ansi))
                    .map(|t| t.update_data(|e| saved.restore(e)))
            })?;
            if t.transformed {
                t.map_data(|p| p.recompute_schema())
            } else {
                Ok(t)
            }
        })
        .map(|t| t.data)
    }
}

fn is_ansi_divisor(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(ScalarFunction { func, .. }) if func.name() == "ansi_divisor")
}

fn divisor(e: Expr, ansi: bool, text: &str) -> Expr {
    if ansi {
        ScalarUDF::new_from_impl(AnsiDivisor::new(text.to_string())).call(vec![e])
    } else {
        datafusion::functions::expr_fn::nullif(e, lit(0))
    }
}

/// Spark's integer literals are INT when they fit (DataFusion's are BIGINT), so `i + 1` on an
/// INT column is INT arithmetic (it wraps, or overflows under ANSI), as in Spark.
fn int_literal(e: &Expr) -> Option<i32> {
    match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => i32::try_from(*v).ok(),
        _ => None,
    }
}

fn narrow_literals(e: Expr, schema: &DFSchema) -> Transformed<Expr> {
    let narrow_int = |x: &Expr| {
        int_literal(x).is_none()
            && matches!(
                x.get_type(schema),
                Ok(DataType::Int32 | DataType::Int16 | DataType::Int8)
            )
    };
    let lit32 = |v: i32| Box::new(Expr::Literal(ScalarValue::Int32(Some(v)), None));
    if let Expr::ScalarFunction(ScalarFunction { func, args }) = &e {
        if matches!(func.name(), "try_add" | "try_subtract" | "try_multiply") && args.len() == 2 {
            let mut args = args.clone();
            match (int_literal(&args[0]), int_literal(&args[1])) {
                (None, Some(v)) if narrow_int(&args[0]) => args[1] = *lit32(v),
                (Some(v), None) if narrow_int(&args[1]) => args[0] = *lit32(v),
                _ => return Transformed::no(e),
            }
            return Transformed::yes(Expr::ScalarFunction(ScalarFunction {
                func: func.clone(),
                args,
            }));
        }
        return Transformed::no(e);
    }
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Transformed::no(e);
    };
    if !matches!(
        op,
        Operator::Plus | Operator::Minus | Operator::Multiply | Operator::Modulo
    ) {
        return Transformed::no(e);
    }
    match (int_literal(left), int_literal(right)) {
        (None, Some(v)) if narrow_int(left) => Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            left.clone(),
            *op,
            lit32(v),
        ))),
        (Some(v), None) if narrow_int(right) => Transformed::yes(Expr::BinaryExpr(
            BinaryExpr::new(lit32(v), *op, right.clone()),
        )),
        _ => Transformed::no(e),
    }
}

fn rewrite_division(e: Expr, schema: &DFSchema, ansi: bool) -> DfResult<Transformed<Expr>> {
    if let Expr::ScalarFunction(ScalarFunction { func, args }) = &e {
        if let Some(d) = func.inner().downcast_ref::<SparkDiv>() {
            if !d.is_bound() {
                for a in args {
                    match a.get_type(schema) {
                        Ok(t) if t.is_floating() => return Err(div::wrong_type(&t)),
                        _ => {}
                    }
                }
                let mode = if ansi { Mode::Ansi } else { Mode::Legacy };
                let bound = ScalarUDF::new_from_impl(SparkDiv::new(Some(mode)));
                return Ok(Transformed::yes(bound.call(args.clone())));
            }
        }
    }
    let narrowed = narrow_literals(e, schema);
    if narrowed.transformed {
        return Ok(narrowed);
    }
    let e = narrowed.data;
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    if !matches!(
        op,
        Operator::Divide | Operator::Modulo | Operator::IntegerDivide
    ) {
        return Ok(Transformed::no(e));
    }
    if is_ansi_divisor(right)
        || matches!(right.as_ref(), Expr::ScalarFunction(f) if f.func.name() == "nullif")
    {
        return Ok(Transformed::no(e));
    }
    let (Ok(lt), Ok(rt)) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(e));
    };
    if !(lt.is_numeric() || lt.is_null()) || !(rt.is_numeric() || rt.is_null()) {
        return Ok(Transformed::no(e));
    }
    let text = format!("{e}");
    let ints = lt.is_integer() && rt.is_integer();
    let cast = |x: &Expr, t: DataType| Expr::Cast(Cast::new(Box::new(x.clone()), t));
    let out = match op {
        Operator::Divide if ints => Expr::BinaryExpr(BinaryExpr::new(
            Box::new(cast(left, DataType::Float64)),
            Operator::Divide,
            Box::new(divisor(cast(right, DataType::Float64), ansi, &text)),
        )),
        Operator::IntegerDivide => {
            let (l, r) = if ints {
                (cast(left, DataType::Int64), cast(right, DataType::Int64))
            } else {
                (left.as_ref().clone(), right.as_ref().clone())
            };
            cast(
                &Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(l),
                    Operator::Divide,
                    Box::new(divisor(r, ansi, &text)),
                )),
                DataType::Int64,
            )
        }
        _ => Expr::BinaryExpr(BinaryExpr::new(
            left.clone(),
            *op,
            Box::new(divisor(right.as_ref().clone(), ansi, &text)),
        )),
    };
    Ok(Transformed::yes(out))
}

/// After type coercion: Spark's casts (and `try_cast`), and ANSI's checked `+ - *` on integers.
/// Types are unchanged, so parents stay valid.
pub fn rewrite_after_coercion(
    e: Expr,
    schema: &DFSchema,
    config: &ConfigOptions,
) -> DfResult<Transformed<Expr>> {
    let ansi = ansi(config);
    match &e {
        Expr::Cast(Cast { expr, field }) => {
            let to = field.data_type();
            match expr.get_type(schema) {
                Ok(from) if needs_spark_cast(&from, to) => {
                    let mode = if ansi { Mode::Ansi } else { Mode::Legacy };
                    let text = format!("CAST({expr} AS {})", spark_type_name(to));
                    Ok(Transformed::yes(
                        ScalarUDF::new_from_impl(SparkCast::new(to.clone(), mode, text))
                            .call(vec![expr.as_ref().clone()]),
                    ))
                }
                _ => Ok(Transformed::no(e)),
            }
        }
        Expr::TryCast(TryCast { expr, field }) => {
            let to = field.data_type();
            match expr.get_type(schema) {
                Ok(from) if needs_spark_cast(&from, to) => {
                    let text = format!("try_cast({expr} AS {})", spark_type_name(to));
                    Ok(Transformed::yes(
                        ScalarUDF::new_from_impl(SparkCast::new(to.clone(), Mode::Try, text))
                            .call(vec![expr.as_ref().clone()]),
                    ))
                }
                _ => Ok(Transformed::no(e)),
            }
        }
        Expr::ScalarFunction(ScalarFunction { func, args })
            if matches!(func.name(), "to_date" | "to_timestamp") && args.len() == 1 =>
        {
            // Without a pattern, Spark's to_date / to_timestamp are CAST(x AS DATE/TIMESTAMP).
            match (args[0].get_type(schema), e.get_type(schema)) {
                (Ok(from), Ok(to)) if is_string(&from) && needs_spark_cast(&from, &to) => {
                    let mode = if ansi { Mode::Ansi } else { Mode::Legacy };
                    let text = format!("{e}");
                    Ok(Transformed::yes(
                        ScalarUDF::new_from_impl(SparkCast::new(to, mode, text))
                            .call(vec![args[0].clone()]),
                    ))
                }
                _ => Ok(Transformed::no(e)),
            }
        }
        Expr::ScalarFunction(ScalarFunction { func, args })
            if matches!(func.name(), "make_date" | "make_timestamp") =>
        {
            let text = format!("{e}");
            let inner = func.clone();
            Ok(Transformed::yes(
                ScalarUDF::new_from_impl(InvalidDateIsNull::new(inner, ansi, text))
                    .call(args.clone()),
            ))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if ansi && matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply) =>
        {
            match (left.get_type(schema), right.get_type(schema)) {
                (Ok(l), Ok(r)) if is_signed_int(&l) && l == r => {
                    let text = format!("{e}");
                    Ok(Transformed::yes(
                        ScalarUDF::new_from_impl(SparkArith::new(*op, Mode::Ansi, text))
                            .call(vec![left.as_ref().clone(), right.as_ref().clone()]),
                    ))
                }
                _ => Ok(Transformed::no(e)),
            }
        }
        _ => Ok(Transformed::no(e)),
    }
}

mod div;
mod udfs;
use div::SparkDiv;
pub use udfs::try_udfs;
use udfs::{AnsiDivisor, InvalidDateIsNull, SparkArith};

#[cfg(test)]
mod tests;
