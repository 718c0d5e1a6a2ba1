//! The functions behind ANSI's checked arithmetic and the `try_*` family: [`SparkArith`]
//! (checked `+ - *`, `try_add`, `try_subtract`, `try_multiply`), [`AnsiDivisor`] (ANSI's
//! `DIVIDE_BY_ZERO`), [`TryDivide`] and [`InvalidDateIsNull`] (`make_date` of a date that does
//! not exist). The rules that call them are in `ansi.rs`.

use super::*;
/// ANSI's checked `+ - *` on integers, and `try_add` / `try_subtract` / `try_multiply` (null
/// on overflow) on any numbers.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct SparkArith {
    op: Operator,
    mode: Mode,
    text: String,
    signature: Signature,
}

impl SparkArith {
    pub(super) fn new(op: Operator, mode: Mode, text: String) -> Self {
        Self {
            op,
            mode,
            text,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
    fn try_name(&self) -> &'static str {
        match self.op {
            Operator::Plus => "try_add",
            Operator::Minus => "try_subtract",
            _ => "try_multiply",
        }
    }
}

fn wider_numeric(a: &DataType, b: &DataType) -> DfResult<DataType> {
    datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer::new(a, &Operator::Plus, b)
        .get_input_types()
        .map(|(l, _)| l)
}

impl ScalarUDFImpl for SparkArith {
    fn name(&self) -> &str {
        match self.mode {
            Mode::Try => self.try_name(),
            _ => match self.op {
                Operator::Plus => "add",
                Operator::Minus => "subtract",
                _ => "multiply",
            },
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if arg_types.len() != 2 {
            return Err(DataFusionError::Plan(format!(
                "{} takes 2 arguments, got {}",
                self.name(),
                arg_types.len()
            )));
        }
        let t = wider_numeric(&arg_types[0], &arg_types[1])?;
        Ok(vec![t.clone(), t])
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let l = args.args[0].to_array(args.number_rows)?;
        let r = args.args[1].to_array(args.number_rows)?;
        let out = match l.data_type() {
            DataType::Int8 => {
                self.checked::<Int8Type>(&l, &r, i8::checked_add, i8::checked_sub, i8::checked_mul)?
            }
            DataType::Int16 => self.checked::<Int16Type>(
                &l,
                &r,
                i16::checked_add,
                i16::checked_sub,
                i16::checked_mul,
            )?,
            DataType::Int32 => self.checked::<Int32Type>(
                &l,
                &r,
                i32::checked_add,
                i32::checked_sub,
                i32::checked_mul,
            )?,
            DataType::Int64 => self.checked::<Int64Type>(
                &l,
                &r,
                i64::checked_add,
                i64::checked_sub,
                i64::checked_mul,
            )?,
            _ => {
                use arrow::compute::kernels::numeric;
                let out = match self.op {
                    Operator::Plus => numeric::add(&l, &r),
                    Operator::Minus => numeric::sub(&l, &r),
                    _ => numeric::mul(&l, &r),
                };
                match out {
                    Ok(o) => o,
                    // A decimal overflow: null in try_* (Spark), the error in ANSI.
                    Err(arrow::error::ArrowError::ArithmeticOverflow(_))
                        if self.mode == Mode::Try =>
                    {
                        arrow::array::new_null_array(l.data_type(), l.len())
                    }
                    Err(e) => return Err(self.overflow(&e.to_string())),
                }
            }
        };
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

impl SparkArith {
    fn overflow(&self, what: &str) -> DataFusionError {
        ansi_error(
            class::ARITHMETIC_OVERFLOW,
            format!(
                "{what} overflow in `{}`. Use '{}' to tolerate overflow and return NULL instead. \
                 If necessary set \"spark.sql.ansi.enabled\" to \"false\" to bypass this error.",
                self.text,
                self.try_name()
            ),
        )
    }

    fn checked<T: ArrowPrimitiveType>(
        &self,
        l: &ArrayRef,
        r: &ArrayRef,
        add: fn(T::Native, T::Native) -> Option<T::Native>,
        sub: fn(T::Native, T::Native) -> Option<T::Native>,
        mul: fn(T::Native, T::Native) -> Option<T::Native>,
    ) -> DfResult<ArrayRef> {
        let f = match self.op {
            Operator::Plus => add,
            Operator::Minus => sub,
            _ => mul,
        };
        let l = l.as_primitive::<T>();
        let r = r.as_primitive::<T>();
        let mut out: Vec<Option<T::Native>> = Vec::with_capacity(l.len());
        for (a, b) in l.iter().zip(r.iter()) {
            match (a, b) {
                (Some(a), Some(b)) => match f(a, b) {
                    Some(v) => out.push(Some(v)),
                    None if self.mode == Mode::Try => out.push(None),
                    None => {
                        let what = match l.data_type() {
                            DataType::Int64 => "long",
                            DataType::Int16 => "short",
                            DataType::Int8 => "byte",
                            _ => "integer",
                        };
                        return Err(self.overflow(what));
                    }
                },
                _ => out.push(None),
            }
        }
        Ok(Arc::new(out.into_iter().collect::<PrimitiveArray<T>>()))
    }
}

/// ANSI's divisor check: the divisor itself, or `DIVIDE_BY_ZERO` when a value is 0.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct AnsiDivisor {
    text: String,
    signature: Signature,
}

impl AnsiDivisor {
    pub(super) fn new(text: String) -> Self {
        Self {
            text,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for AnsiDivisor {
    fn name(&self) -> &str {
        "ansi_divisor"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arg = &args.args[0];
        let a = arg.to_array(args.number_rows)?;
        let zero = ScalarValue::new_zero(a.data_type())?.to_array_of_size(a.len())?;
        let is_zero = arrow::compute::kernels::cmp::eq(&a, &zero)?;
        if is_zero.true_count() > 0 {
            return Err(ansi_error(
                class::DIVIDE_BY_ZERO,
                format!(
                    "Division by zero in `{}`. Use `try_divide` to tolerate divisor being 0 and \
                     return NULL instead. If necessary set \"spark.sql.ansi.enabled\" to \
                     \"false\" to bypass this error.",
                    self.text
                ),
            ));
        }
        Ok(arg.clone())
    }
}

/// `try_divide(a, b)`: `a / b` as DOUBLE, null when `b` is 0.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct TryDivide {
    signature: Signature,
}

impl Default for TryDivide {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for TryDivide {
    fn name(&self) -> &str {
        "try_divide"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if arg_types.len() != 2 || !arg_types.iter().all(|t| t.is_numeric() || t.is_null()) {
            return Err(DataFusionError::Plan(format!(
                "try_divide takes two numbers, got {arg_types:?}"
            )));
        }
        Ok(vec![DataType::Float64, DataType::Float64])
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let l = args.args[0].to_array(args.number_rows)?;
        let r = args.args[1].to_array(args.number_rows)?;
        let out: PrimitiveArray<Float64Type> = l
            .as_primitive::<Float64Type>()
            .iter()
            .zip(r.as_primitive::<Float64Type>().iter())
            .map(|(a, b)| match (a, b) {
                (Some(a), Some(b)) if b != 0.0 => Some(a / b),
                _ => None,
            })
            .collect();
        let out = Arc::new(out) as ArrayRef;
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// `make_date(2023, 2, 30)`: null (non-ANSI) where DataFusion fails, or
/// `DATETIME_FIELD_OUT_OF_BOUNDS` (ANSI). Rows are retried one by one only when the batch fails.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct InvalidDateIsNull {
    inner: Arc<ScalarUDF>,
    ansi: bool,
    text: String,
    signature: Signature,
}

impl InvalidDateIsNull {
    pub(super) fn new(inner: Arc<ScalarUDF>, ansi: bool, text: String) -> Self {
        Self {
            inner,
            ansi,
            text,
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for InvalidDateIsNull {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let first = ScalarFunctionArgs {
            args: args.args.clone(),
            arg_fields: args.arg_fields.clone(),
            number_rows: args.number_rows,
            return_field: args.return_field.clone(),
            config_options: args.config_options.clone(),
        };
        let err = match self.inner.invoke_with_args(first) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if self.ansi {
            return Err(ansi_error(
                class::DATETIME_FIELD_OUT_OF_BOUNDS,
                format!(
                    "{err} in `{}`. Use `try_` functions or check the fields; if necessary set \
                     \"spark.sql.ansi.enabled\" to \"false\" to bypass this error.",
                    self.text
                ),
            ));
        }
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(args.number_rows))
            .collect::<DfResult<Vec<_>>>()?;
        let mut rows = Vec::with_capacity(args.number_rows);
        for i in 0..args.number_rows {
            let one = ScalarFunctionArgs {
                args: arrays
                    .iter()
                    .map(|a| ScalarValue::try_from_array(a, i).map(ColumnarValue::Scalar))
                    .collect::<DfResult<_>>()?,
                arg_fields: args.arg_fields.clone(),
                number_rows: 1,
                return_field: args.return_field.clone(),
                config_options: args.config_options.clone(),
            };
            rows.push(match self.inner.invoke_with_args(one) {
                Ok(v) => v.to_array(1)?,
                Err(_) => arrow::array::new_null_array(args.return_field.data_type(), 1),
            });
        }
        let refs: Vec<&dyn Array> = rows.iter().map(|a| a.as_ref()).collect();
        let out = arrow::compute::concat(&refs)?;
        Ok(
            if args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            } else {
                ColumnarValue::Array(out)
            },
        )
    }
}

/// The `try_*` functions and `div`, registered by the session.
pub fn try_udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(SparkArith::new(Operator::Plus, Mode::Try, "try_add".into())),
        ScalarUDF::new_from_impl(SparkArith::new(
            Operator::Minus,
            Mode::Try,
            "try_subtract".into(),
        )),
        ScalarUDF::new_from_impl(SparkArith::new(
            Operator::Multiply,
            Mode::Try,
            "try_multiply".into(),
        )),
        ScalarUDF::new_from_impl(TryDivide::default()),
        ScalarUDF::new_from_impl(SparkDiv::new(None)),
    ]
}
