//! Spark's `ceil`/`ceiling`/`floor` with a scale, and `rint` of any number.
//!
//! `ceil(x)` / `floor(x)` are `datafusion-spark`'s (BIGINT for integers and doubles, DECIMAL(p -
//! s + 1, 0) for a DECIMAL(p, s)). With a second argument, `ceil(x, d)` / `floor(x, d)` are
//! Spark's `RoundCeil` / `RoundFloor`: `x` is taken as a DECIMAL (an INT as DECIMAL(10,0), a
//! BIGINT as DECIMAL(20,0), a DOUBLE as DECIMAL(30,15)), `d` must be a constant INT, and the
//! result is rounded up / down to `d` places; its type is Spark's `RoundBase` type: with
//! `i = p - s + 1` integral digits, DECIMAL(i + min(s, d), min(s, d)) for `d >= 0` and
//! DECIMAL(max(i, 1 - d), 0) for `d < 0` (`ceil(3.1411, 3)` is 3.142 DECIMAL(5,3),
//! `ceil(3.1411, -3)` 1000 DECIMAL(4,0)). A value that
//! does not fit the result is null (Spark's non-ANSI decimal overflow).
//!
//! `rint(x)` takes a DOUBLE: Spark casts any number to one first (`rint(12.3456)` on the
//! DECIMAL literal is 12.0).

use std::sync::Arc;

use arrow::array::{Array, AsArray, Decimal128Array};
use arrow::datatypes::{DataType, Decimal128Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use arrow::datatypes::{Field, FieldRef};

/// `ceil`/`floor` with Spark's two-argument form; the one-argument form is `inner`'s.
#[derive(Debug, PartialEq, Eq, Hash)]
struct RoundTo {
    inner: Arc<ScalarUDF>,
    name: &'static str,
    aliases: Vec<String>,
    up: bool,
    signature: Signature,
}

/// The DECIMAL Spark casts a `RoundCeil`/`RoundFloor` argument to.
fn as_decimal(t: &DataType) -> Option<(u8, i8)> {
    Some(match t {
        DataType::Decimal128(p, s) => (*p, *s),
        DataType::Int8 => (3, 0),
        DataType::Int16 => (5, 0),
        DataType::Int32 => (10, 0),
        DataType::Int64 => (20, 0),
        DataType::Float32 => (14, 7),
        DataType::Float64 | DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => (30, 15),
        DataType::Null => (10, 0),
        _ => return None,
    })
}

/// Spark's `RoundBase` result type of rounding a DECIMAL(p, s) to `d` places.
fn rounded_type(p: u8, s: i8, d: i32) -> (u8, i8) {
    let integral = (p as i32 - s as i32 + 1).max(1);
    if d < 0 {
        (integral.max(1 - d).min(38) as u8, 0)
    } else {
        let scale = (s as i32).min(d);
        ((integral + scale).min(38) as u8, scale as i8)
    }
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// `v` at scale `s` rounded up (or down) to `d` places, at the result scale `max(min(s, d), 0)`.
fn round_unscaled(v: i128, s: i8, d: i32, up: bool) -> Option<i128> {
    let s = s as i32;
    if d >= s {
        return Some(v);
    }
    let drop = (s - d) as u32;
    let q = match pow10(drop) {
        Some(f) => {
            let (q, r) = (v.div_euclid(f), v.rem_euclid(f));
            if up && r != 0 {
                q + 1
            } else {
                q
            }
        }
        // Every digit is dropped: 0, or one unit up / down.
        None => match (up, v.signum()) {
            (true, 1) => 1,
            (false, -1) => -1,
            _ => 0,
        },
    };
    if d < 0 {
        q.checked_mul(pow10((-d) as u32)?)
    } else {
        Some(q)
    }
}

fn scale_arg(name: &str, v: Option<&ScalarValue>) -> DfResult<i32> {
    let bad = || {
        DataFusionError::Plan(format!(
            "[DATATYPE_MISMATCH.NON_FOLDABLE_INPUT] {name}: the scale (second argument) must be \
             a constant INT, e.g. {name}(x, 2)"
        ))
    };
    match v.ok_or_else(bad)?.cast_to(&DataType::Int32) {
        Ok(ScalarValue::Int32(Some(d))) => Ok(d),
        _ => Err(bad()),
    }
}

impl ScalarUDFImpl for RoundTo {
    fn name(&self) -> &str {
        self.name
    }
    fn aliases(&self) -> &[String] {
        &self.aliases
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [_] => super::coerced_by(&self.inner, arg_types.iter().cloned()),
            [x, d] if d.is_integer() || d == &DataType::Null => {
                let (p, s) = as_decimal(x).ok_or_else(|| {
                    DataFusionError::Plan(format!(
                        "{}: the first argument must be a number, got {x}",
                        self.name
                    ))
                })?;
                Ok(vec![DataType::Decimal128(p, s), DataType::Int32])
            }
            _ => Err(DataFusionError::Plan(format!(
                "{} takes 1 or 2 arguments (a number and a constant INT scale), got {}",
                self.name,
                arg_types.len()
            ))),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Err(DataFusionError::Internal(
            "RoundTo's type comes from return_field_from_args".into(),
        ))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        if args.arg_fields.len() == 1 {
            return self.inner.return_field_from_args(args);
        }
        let DataType::Decimal128(p, s) = args.arg_fields[0].data_type() else {
            return Err(DataFusionError::Internal(format!(
                "{}: the argument was not coerced to a decimal",
                self.name
            )));
        };
        let d = scale_arg(self.name, args.scalar_arguments[1])?;
        let (p, s) = rounded_type(*p, *s, d);
        Ok(Arc::new(Field::new(
            self.name,
            DataType::Decimal128(p, s),
            true,
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if args.args.len() == 1 {
            return self.inner.invoke_with_args(args);
        }
        let d = match &args.args[1] {
            ColumnarValue::Scalar(v) => scale_arg(self.name, Some(v))?,
            ColumnarValue::Array(_) => scale_arg(self.name, None)?,
        };
        let DataType::Decimal128(p_out, s_out) = args.return_field.data_type().clone() else {
            return Err(DataFusionError::Internal(format!(
                "{}: the result is not a decimal",
                self.name
            )));
        };
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let x = args.args[0].to_array(if scalar { 1 } else { args.number_rows })?;
        let DataType::Decimal128(_, s) = x.data_type().clone() else {
            return Err(DataFusionError::Internal(format!(
                "{}: the argument is not a decimal",
                self.name
            )));
        };
        let limit = pow10(p_out as u32).unwrap_or(i128::MAX);
        let out: Decimal128Array = x
            .as_primitive::<Decimal128Type>()
            .iter()
            .map(|v| {
                v.and_then(|v| round_unscaled(v, s, d, self.up))
                    .filter(|r| r.abs() < limit)
            })
            .collect();
        let out = out.with_precision_and_scale(p_out, s_out)?;
        super::columnar(Arc::new(out), scalar)
    }
}

/// `rint` with Spark's implicit cast of its argument to DOUBLE.
#[derive(Debug, PartialEq, Eq, Hash)]
struct RintOfDouble {
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

impl ScalarUDFImpl for RintOfDouble {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if arg_types.len() != 1 {
            return Err(DataFusionError::Plan(format!(
                "rint takes 1 argument (a number), got {}",
                arg_types.len()
            )));
        }
        Ok(arg_types
            .iter()
            .map(|t| {
                if t.is_numeric() || t == &DataType::Null {
                    DataType::Float64
                } else {
                    t.clone()
                }
            })
            .collect())
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
}

pub(super) fn udfs(registered: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = Vec::new();
    for (name, up, aliases) in [
        ("ceil", true, vec!["ceiling".to_string()]),
        ("floor", false, vec![]),
    ] {
        if let Some(inner) = registered(name) {
            out.push(ScalarUDF::new_from_impl(RoundTo {
                inner,
                name,
                aliases,
                up,
                signature: Signature::user_defined(Volatility::Immutable),
            }));
        }
    }
    if let Some(inner) = registered("rint") {
        out.push(ScalarUDF::new_from_impl(RintOfDouble {
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_to_a_scale_is_sparks() {
        // ceil(3.1411, 3) = 3.142, floor(3.1411, 3) = 3.141 (DECIMAL(5,4) in, DECIMAL(5,3) out).
        assert_eq!(round_unscaled(31411, 4, 3, true), Some(3142));
        assert_eq!(round_unscaled(31411, 4, 3, false), Some(3141));
        assert_eq!(rounded_type(5, 4, 3), (5, 3));
        // ceil(3.1411, -3) = 1000, floor(3.1411, -3) = 0 (DECIMAL(4,0)).
        assert_eq!(round_unscaled(31411, 4, -3, true), Some(1000));
        assert_eq!(round_unscaled(31411, 4, -3, false), Some(0));
        assert_eq!(rounded_type(5, 4, -3), (4, 0));
        // Negative values round toward +inf (ceil) and -inf (floor).
        assert_eq!(round_unscaled(-31411, 4, 3, true), Some(-3141));
        assert_eq!(round_unscaled(-31411, 4, 3, false), Some(-3142));
        // A scale at or above the value's keeps it.
        assert_eq!(round_unscaled(15, 1, 3, true), Some(15));
        assert_eq!(rounded_type(2, 1, 3), (3, 1));
    }

    #[test]
    fn ceil_and_floor_with_a_scale_in_sql() {
        let s = sluice::Session::builder().build().unwrap();
        let b = s
            .sql("SELECT ceil(3.1411, 3), floor(-3.1411, 1), ceiling(x, -1) FROM (VALUES (14), (NULL)) AS t(x)")
            .unwrap()
            .collect()
            .unwrap();
        let b = &b[0];
        assert_eq!(b.schema().field(0).data_type(), &DataType::Decimal128(5, 3));
        assert_eq!(b.schema().field(1).data_type(), &DataType::Decimal128(3, 1));
        assert_eq!(
            b.schema().field(2).data_type(),
            &DataType::Decimal128(11, 0)
        );
        let c0 = b.column(0).as_primitive::<Decimal128Type>();
        assert_eq!(c0.value(0), 3142);
        let c1 = b.column(1).as_primitive::<Decimal128Type>();
        assert_eq!(c1.value(0), -32);
        let c2 = b.column(2).as_primitive::<Decimal128Type>();
        assert_eq!(c2.value(0), 20);
        assert!(c2.is_null(1));
        let e = s
            .sql("SELECT ceil(x, x) FROM (VALUES (1)) AS t(x)")
            .and_then(|d| d.collect());
        assert!(e.is_err());
        assert!(e.unwrap_err().message().contains("constant INT"));
        // rint of a DECIMAL (Spark casts it to DOUBLE): rint(12.3456) = 12.0.
        let b = s
            .sql("SELECT rint(12.3456), rint(2.5)")
            .unwrap()
            .collect()
            .unwrap();
        assert_eq!(b[0].schema().field(0).data_type(), &DataType::Float64);
        let r = b[0]
            .column(1)
            .as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!(r.value(0), 2.0);
    }
}
