//! Spark's number formats: `to_char` / `to_varchar` of numbers and `to_number` /
//! `try_to_number` (the `0`/`9`, `.`/`D`, `,`/`G`, `$`, `S`/`MI`, `PR` format letters), and
//! `format_number(x, pattern)` with a Java `DecimalFormat` pattern such as `'#,##0.###'`.
//! `to_char` of a date or timestamp is `date_format` (Spark's pattern letters).

use std::str::FromStr;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use bigdecimal::{BigDecimal, RoundingMode};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::rowwise::{spark_err, Dispatch, RowFn};

fn text(v: &ScalarValue) -> Option<&str> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s),
        _ => None,
    }
}

fn bad_format(f: &str, why: &str) -> datafusion::error::DataFusionError {
    spark_err(
        crate::error::class::INVALID_FORMAT,
        format!("The format {f:?} is invalid: {why}. Use digits 0 or 9, '.' or 'D', ',' or 'G', '$', 'S' or 'MI', 'PR'."),
    )
}

/// A parsed number format.
struct NumFormat {
    /// The characters before the decimal point: '0', '9', ','.
    int: Vec<char>,
    /// Digits after the decimal point (None: no decimal point).
    frac: Option<usize>,
    dollar: bool,
    /// 'S' at the start (true) or end (false), or 'MI' at the end.
    sign: Option<(bool, bool)>,
    pr: bool,
}

impl NumFormat {
    fn parse(f: &str) -> DfResult<NumFormat> {
        let up = f.to_ascii_uppercase();
        let mut body = up.as_str();
        let mut sign = None;
        let mut pr = false;
        if let Some(b) = body.strip_prefix('S') {
            sign = Some((true, true));
            body = b;
        }
        if let Some(b) = body.strip_suffix("PR") {
            pr = true;
            body = b;
        } else if let Some(b) = body.strip_suffix("MI") {
            sign = Some((false, false));
            body = b;
        } else if let Some(b) = body.strip_suffix('S') {
            sign = Some((false, true));
            body = b;
        }
        let mut dollar = false;
        if let Some(b) = body.strip_prefix('$') {
            dollar = true;
            body = b;
        }
        let mut int = Vec::new();
        let mut frac = None;
        for c in body.chars() {
            match (c, frac.as_mut()) {
                ('0' | '9', None) => int.push(c),
                (',' | 'G', None) => int.push(','),
                ('.' | 'D', None) => frac = Some(0),
                ('0' | '9', Some(n)) => *n += 1,
                _ => return Err(bad_format(f, &format!("unexpected {c:?}"))),
            }
        }
        if !int
            .iter()
            .chain(std::iter::once(&'x'))
            .any(|c| *c == '0' || *c == '9')
            && frac.is_none_or(|n| n == 0)
        {
            return Err(bad_format(f, "it has no digits"));
        }
        Ok(NumFormat {
            int,
            frac,
            dollar,
            sign,
            pr,
        })
    }
    fn int_digits(&self) -> usize {
        self.int.iter().filter(|c| **c != ',').count()
    }
    fn scale(&self) -> usize {
        self.frac.unwrap_or(0)
    }

    fn format(&self, v: &BigDecimal) -> String {
        let scale = self.scale() as i64;
        let r = v.with_scale_round(scale, RoundingMode::HalfUp);
        let neg = r.to_string().starts_with('-');
        let abs = r.abs().to_string();
        let (ip, fp) = match abs.split_once('.') {
            Some((i, f)) => (i.to_string(), f.to_string()),
            None => (abs.clone(), String::new()),
        };
        let ip = if ip == "0" && self.int_digits() > 0 && !self.int.contains(&'0') && !fp.is_empty()
        {
            String::new()
        } else {
            ip
        };
        let mut out = String::new();
        if ip.len() > self.int_digits() {
            // Too many digits: Spark prints '#' for every position.
            let mut s: String = self
                .int
                .iter()
                .map(|c| if *c == ',' { ',' } else { '#' })
                .collect();
            if let Some(n) = self.frac {
                s.push('.');
                s.push_str(&"#".repeat(n));
            }
            out = s;
        } else {
            let zero_pad = self.int.iter().find(|c| **c != ',') == Some(&'0');
            let digits: Vec<char> = ip.chars().collect();
            let mut di = digits.len();
            let mut built: Vec<char> = Vec::new();
            for c in self.int.iter().rev() {
                if *c == ',' {
                    built.push(if di > 0 || zero_pad { ',' } else { ' ' });
                    continue;
                }
                if di > 0 {
                    di -= 1;
                    built.push(digits[di]);
                } else {
                    built.push(if zero_pad { '0' } else { ' ' });
                }
            }
            built.reverse();
            out.extend(built);
            if let Some(n) = self.frac {
                out.push('.');
                out.push_str(&format!("{fp:0<n$}"));
            }
        }
        let out = out.trim_start().to_string();
        let out = if self.dollar { format!("${out}") } else { out };
        match (self.sign, self.pr) {
            (_, true) if neg => format!("<{out}>"),
            (_, true) => out,
            (Some((true, _)), _) => format!("{}{out}", if neg { '-' } else { '+' }),
            (Some((false, true)), _) => format!("{out}{}", if neg { '-' } else { '+' }),
            (Some((false, false)), _) => format!("{out}{}", if neg { '-' } else { ' ' }),
            (None, _) if neg => format!("-{out}"),
            (None, _) => out,
        }
    }

    /// The value of `s` read with this format, if it matches.
    fn read(&self, s: &str) -> Option<BigDecimal> {
        let mut t = s.trim();
        let mut neg = false;
        if self.pr {
            if let Some(x) = t.strip_prefix('<').and_then(|x| x.strip_suffix('>')) {
                neg = true;
                t = x;
            }
        }
        match self.sign {
            Some((true, _)) => {
                if let Some(x) = t.strip_prefix('-') {
                    neg = true;
                    t = x;
                } else if let Some(x) = t.strip_prefix('+') {
                    t = x;
                }
            }
            Some((false, _)) => {
                if let Some(x) = t.strip_suffix('-') {
                    neg = true;
                    t = x;
                } else if let Some(x) = t.strip_suffix('+').or_else(|| t.strip_suffix(' ')) {
                    t = x;
                }
            }
            None => {
                if let Some(x) = t.strip_prefix('-') {
                    neg = true;
                    t = x;
                }
            }
        }
        if self.dollar {
            t = t.strip_prefix('$')?;
        }
        let (ip, fp) = match t.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (t, None),
        };
        if fp.is_some() && self.frac.is_none() {
            return None;
        }
        let digits: String = ip.chars().filter(|c| *c != ',').collect();
        if !digits.chars().all(|c| c.is_ascii_digit()) || digits.len() > self.int_digits() {
            return None;
        }
        let fp = fp.unwrap_or("");
        if !fp.chars().all(|c| c.is_ascii_digit()) || fp.len() > self.scale() {
            return None;
        }
        if digits.is_empty() && fp.is_empty() {
            return None;
        }
        let text = format!(
            "{}{}.{}",
            if neg { "-" } else { "" },
            if digits.is_empty() { "0" } else { &digits },
            if fp.is_empty() { "0" } else { fp }
        );
        BigDecimal::from_str(&text)
            .ok()
            .map(|v| v.with_scale(self.scale() as i64))
    }
}

fn decimal_of(v: &ScalarValue) -> Option<BigDecimal> {
    match v {
        ScalarValue::Float64(Some(f)) => BigDecimal::from_str(&format!("{f}")).ok(),
        ScalarValue::Float32(Some(f)) => BigDecimal::from_str(&format!("{f}")).ok(),
        ScalarValue::Decimal128(Some(x), _, s) => Some(BigDecimal::new((*x).into(), *s as i64)),
        v if v.data_type().is_integer() => v.cast_to(&DataType::Int64).ok().and_then(|x| match x {
            ScalarValue::Int64(Some(i)) => Some(BigDecimal::from(i)),
            _ => None,
        }),
        _ => None,
    }
}

fn is_numeric_first(t: &[DataType]) -> bool {
    t.first().is_some_and(|t| t.is_numeric())
}

fn c_to_char(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t {
        [a, _] => Ok(vec![a.clone(), DataType::Utf8]),
        _ => Err(spark_err(
            crate::error::class::WRONG_NUM_ARGS_WITHOUT_SUGGESTION,
            format!("{name} takes (expr, format)"),
        )),
    }
}
fn r_str(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Utf8)
}

fn to_char(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let (Some(v), Some(f)) = (decimal_of(&a[0]), text(&a[1])) else {
        return Ok(ScalarValue::Utf8(None));
    };
    Ok(ScalarValue::Utf8(Some(NumFormat::parse(f)?.format(&v))))
}

/// `format_number(x, pattern)`: a Java `DecimalFormat` pattern (`#`, `0`, `,`, `.`), HALF_EVEN.
fn format_pattern(x: &BigDecimal, p: &str) -> Option<String> {
    let (ip, fp) = match p.split_once('.') {
        Some((i, f)) => (i, f),
        None => (p, ""),
    };
    let min_frac = fp.chars().filter(|c| *c == '0').count();
    let max_frac = fp.chars().filter(|c| *c == '0' || *c == '#').count();
    let min_int = ip.chars().filter(|c| *c == '0').count();
    let group = ip.rfind(',').map(|i| ip.len() - i - 1).filter(|g| *g > 0);
    let r = x.with_scale_round(max_frac as i64, RoundingMode::HalfEven);
    let neg = r.to_string().starts_with('-');
    let abs = r.abs().to_string();
    let (i, f) = match abs.split_once('.') {
        Some((i, f)) => (i.to_string(), f.to_string()),
        None => (abs, String::new()),
    };
    let mut f = f.trim_end_matches('0').to_string();
    while f.len() < min_frac {
        f.push('0');
    }
    let mut i = i.trim_start_matches('0').to_string();
    while i.len() < min_int {
        i.insert(0, '0');
    }
    if let Some(g) = group {
        let chars: Vec<char> = i.chars().collect();
        let mut out = String::new();
        for (k, c) in chars.iter().enumerate() {
            if k > 0 && (chars.len() - k).is_multiple_of(g) {
                out.push(',');
            }
            out.push(*c);
        }
        i = out;
    }
    let body = if f.is_empty() {
        if i.is_empty() {
            "0".to_string()
        } else {
            i
        }
    } else {
        format!("{i}.{f}")
    };
    Some(if neg { format!("-{body}") } else { body })
}

fn is_pattern_call(t: &[DataType]) -> bool {
    matches!(
        t.get(1),
        Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
    )
}
fn c_format_number(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t {
        [_, _] => Ok(vec![DataType::Float64, DataType::Utf8]),
        _ => Err(spark_err(
            crate::error::class::WRONG_NUM_ARGS_WITHOUT_SUGGESTION,
            format!("{name} takes (x, d) or (x, pattern)"),
        )),
    }
}
fn format_number(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let (Some(v), Some(p)) = (decimal_of(&a[0]), text(&a[1])) else {
        return Ok(ScalarValue::Utf8(None));
    };
    Ok(ScalarValue::Utf8(format_pattern(&v, p)))
}

/// `to_number(str, fmt)` / `try_to_number`: DECIMAL(digits, decimals) of the format.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToNumber {
    name: &'static str,
    try_: bool,
    signature: Signature,
}

fn format_type(f: Option<&ScalarValue>) -> DfResult<DataType> {
    let Some(f) = f.and_then(text) else {
        return Err(spark_err(
            crate::error::class::NON_FOLDABLE_ARGUMENT,
            "to_number: the format must be a constant STRING".into(),
        ));
    };
    let nf = NumFormat::parse(f)?;
    let p = (nf.int_digits() + nf.scale()).clamp(1, 38) as u8;
    Ok(DataType::Decimal128(p, nf.scale() as i8))
}

impl ScalarUDFImpl for ToNumber {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types.len() {
            2 => Ok(vec![DataType::Utf8, DataType::Utf8]),
            _ => Err(spark_err(
                crate::error::class::WRONG_NUM_ARGS_WITHOUT_SUGGESTION,
                format!("{} takes (expr, format)", self.name),
            )),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Decimal128(38, 18))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let t = format_type(args.scalar_arguments.get(1).copied().flatten())?;
        Ok(Arc::new(Field::new(self.name, t, true)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let ret = args.return_field.data_type().clone();
        let DataType::Decimal128(p, s) = ret else {
            return Err(spark_err(
                crate::error::class::INTERNAL_ERROR,
                "to_number: result type".into(),
            ));
        };
        let fmt = match args.args.get(1) {
            Some(ColumnarValue::Scalar(v)) => text(v).map(str::to_string),
            _ => None,
        };
        let Some(fmt) = fmt else {
            return Err(spark_err(
                crate::error::class::NON_FOLDABLE_ARGUMENT,
                "to_number: the format must be a constant STRING".into(),
            ));
        };
        let nf = NumFormat::parse(&fmt)?;
        let x = args.args[0].to_array(args.number_rows)?;
        let mut out = arrow::array::Decimal128Builder::with_capacity(x.len());
        for i in 0..x.len() {
            let v = ScalarValue::try_from_array(&x, i)?;
            let Some(t) = text(&v) else {
                out.append_null();
                continue;
            };
            match nf.read(t) {
                Some(d) => {
                    let (digits, _) = d.with_scale(s as i64).into_bigint_and_exponent();
                    out.append_option(i128::try_from(digits).ok());
                }
                None if self.try_ => out.append_null(),
                None => {
                    return Err(spark_err(
                        crate::error::class::INVALID_FORMAT_MISMATCH_INPUT,
                        format!("The input {t:?} does not match the format {fmt:?}; use try_to_number to get NULL instead"),
                    ))
                }
            }
        }
        let array = out.finish().with_precision_and_scale(p, s)?;
        Ok(match &args.args[0] {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(array)),
        })
    }
}

/// The functions; `existing` looks up `date_format` (for `to_char` of datetimes) and
/// `format_number` (its `(x, d)` form).
pub(super) fn udfs(existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = Vec::new();
    for (name, try_) in [("to_number", false), ("try_to_number", true)] {
        out.push(ScalarUDF::new_from_impl(ToNumber {
            name,
            try_,
            signature: Signature::user_defined(Volatility::Immutable),
        }));
    }
    if let Some(date_format) = existing("date_format") {
        for name in ["to_char", "to_varchar"] {
            out.push(Dispatch::udf_when(
                Arc::clone(&date_format),
                RowFn::new(name, c_to_char, r_str, to_char),
                is_numeric_first,
            ));
        }
    }
    if let Some(inner) = existing("format_number") {
        out.push(Dispatch::udf_when(
            inner,
            RowFn::new("format_number", c_format_number, r_str, format_number),
            is_pattern_call,
        ));
    }
    out
}
