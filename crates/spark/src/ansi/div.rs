//! Spark's integral division `a div b` (and the function `div(a, b)`): BIGINT, truncated
//! toward zero. The operands are integers (widened to BIGINT), decimals (`7.5 div 2` is 3) or
//! two intervals of one kind (`INTERVAL '1-1' YEAR TO MONTH div INTERVAL '-1' MONTH` is -13);
//! DOUBLE operands are refused, as in Spark. A zero divisor gives null (non-ANSI) or
//! `DIVIDE_BY_ZERO` (ANSI); `-9223372036854775808 div -1` wraps (non-ANSI) or is
//! `ARITHMETIC_OVERFLOW` (ANSI). The SQL front end turns the operator into the function
//! (`plan::sql_syntax`); [`super::SparkArithmeticRule`] fixes the mode when the query is analysed.

use super::*;
use arrow::datatypes::IntervalUnit;

/// `div(a, b)`; `mode` is `None` until the analyzer binds the session's ANSI mode.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct SparkDiv {
    mode: Option<Mode>,
    signature: Signature,
}

impl SparkDiv {
    pub(super) fn new(mode: Option<Mode>) -> Self {
        Self {
            mode,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
    pub(super) fn is_bound(&self) -> bool {
        self.mode.is_some()
    }
}

/// Spark's error for an operand `div` does not take.
pub(super) fn wrong_type(bad: &DataType) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::query(
        class::DATATYPE_MISMATCH_BINARY_OP_WRONG_TYPE,
        format!(
            "the operator `div` requires BIGINT or DECIMAL operands, not {}: cast the operand \
             (CAST(x AS BIGINT)), or use `/` for DOUBLE division",
            spark_type_name(bad)
        ),
    )))
}

/// Two intervals as numbers of one unit: months (year-month intervals) or nanoseconds
/// (day-time intervals, a day being 24 hours as in Spark's DAY TO SECOND).
fn interval_operands(l: &ArrayRef, r: &ArrayRef) -> DfResult<Vec<(Option<i128>, Option<i128>)>> {
    use arrow::datatypes::IntervalMonthDayNanoType as Mdn;
    let (l, r) = (l.as_primitive::<Mdn>(), r.as_primitive::<Mdn>());
    l.iter()
        .zip(r.iter())
        .map(|(a, b)| match (a, b) {
            (Some(a), Some(b)) => {
                let months =
                    |v: &arrow::datatypes::IntervalMonthDayNano| v.days == 0 && v.nanoseconds == 0;
                let nanos = |v: &arrow::datatypes::IntervalMonthDayNano| {
                    i128::from(v.days) * 86_400_000_000_000 + i128::from(v.nanoseconds)
                };
                if months(&a) && months(&b) {
                    Ok((Some(a.months.into()), Some(b.months.into())))
                } else if a.months == 0 && b.months == 0 {
                    Ok((Some(nanos(&a)), Some(nanos(&b))))
                } else {
                    Err(DataFusionError::External(Box::new(SluiceError::query(
                        class::DATATYPE_MISMATCH_BINARY_OP_WRONG_TYPE,
                        "`div` takes two year-month intervals or two day-time intervals, not a \
                         mix of both",
                    ))))
                }
            }
            _ => Ok((None, None)),
        })
        .collect()
}

fn div_operand(t: &DataType) -> bool {
    t.is_integer() || t.is_null() || matches!(t, DataType::Decimal128(..))
}

impl ScalarUDFImpl for SparkDiv {
    fn name(&self) -> &str {
        "div"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if arg_types.len() != 2 {
            return Err(DataFusionError::External(Box::new(SluiceError::query(
                class::WRONG_NUM_ARGS,
                format!("div(a, b) takes 2 arguments, got {}", arg_types.len()),
            ))));
        }
        let interval = |t: &DataType| matches!(t, DataType::Interval(_));
        if arg_types.iter().all(|t| interval(t) || t.is_null()) && arg_types.iter().any(interval) {
            let t = DataType::Interval(IntervalUnit::MonthDayNano);
            return Ok(vec![t.clone(), t]);
        }
        if let Some(bad) = arg_types
            .iter()
            .find(|t| !div_operand(t) && !t.is_floating())
        {
            return Err(wrong_type(bad));
        }
        if arg_types.iter().any(|t| t.is_floating()) {
            // Refused when the analyzer binds the mode (an error here would lose its class).
            return Ok(vec![DataType::Float64, DataType::Float64]);
        }
        let scale = arg_types
            .iter()
            .filter_map(|t| match t {
                DataType::Decimal128(_, s) => Some(*s),
                _ => None,
            })
            .max();
        let t = match scale {
            Some(s) => DataType::Decimal128(38, s.max(0)),
            None => DataType::Int64,
        };
        Ok(vec![t.clone(), t])
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Int64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        // Unbound (a plan node the analyzer rule does not visit): the session's mode now.
        let ansi = match self.mode {
            Some(m) => m == Mode::Ansi,
            None => args.config_options.execution.enable_ansi_mode,
        };
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let l = args.args[0].to_array(args.number_rows)?;
        let r = args.args[1].to_array(args.number_rows)?;
        let quotients: Vec<(Option<i128>, Option<i128>)> = match l.data_type() {
            t if t.is_floating() => return Err(wrong_type(t)),
            DataType::Interval(_) => interval_operands(&l, &r)?,
            DataType::Decimal128(..) => l
                .as_primitive::<Decimal128Type>()
                .iter()
                .zip(r.as_primitive::<Decimal128Type>().iter())
                .collect(),
            _ => l
                .as_primitive::<Int64Type>()
                .iter()
                .zip(r.as_primitive::<Int64Type>().iter())
                .map(|(a, b)| (a.map(i128::from), b.map(i128::from)))
                .collect(),
        };
        let mut out = Int64Builder::with_capacity(quotients.len());
        for (a, b) in quotients {
            match (a, b) {
                (Some(_), Some(0)) if ansi => {
                    return Err(ansi_error(
                        class::DIVIDE_BY_ZERO,
                        "Division by zero. Use `try_divide` to tolerate divisor being 0 and \
                         return NULL instead. If necessary set \"spark.sql.ansi.enabled\" to \
                         \"false\" to bypass this error."
                            .to_string(),
                    ))
                }
                (Some(a), Some(b)) if b != 0 => {
                    let q = a / b;
                    match i64::try_from(q) {
                        Ok(v) => out.append_value(v),
                        Err(_) if ansi => {
                            return Err(ansi_error(
                                class::ARITHMETIC_OVERFLOW,
                                format!(
                                    "Overflow in integral divide: {a} div {b} does not fit in \
                                     BIGINT. If necessary set \"spark.sql.ansi.enabled\" to \
                                     \"false\" to bypass this error."
                                ),
                            ))
                        }
                        Err(_) => out.append_value(q as i64),
                    }
                }
                _ => out.append_null(),
            }
        }
        let out = Arc::new(out.finish()) as ArrayRef;
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}
