//! Spark's string and number-formatting functions that DataFusion and `datafusion-spark` lack
//! or define differently: `locate`/`position` (Spark's argument order), `regexp_extract`,
//! `regexp_extract_all`, `split` (a Java regex with a limit), `format_number`, `bround`
//! (HALF_EVEN) and `conv`.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int32Array, ListBuilder, StringArray, StringBuilder,
};
use arrow::datatypes::{DataType, Float64Type, Int32Type};
use bigdecimal::{BigDecimal, RoundingMode};
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Which function a [`StringFn`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `locate(substr, str[, pos])`, `position(substr, str[, pos])`.
    Locate,
    /// `regexp_extract(str, regexp[, idx])`.
    RegexpExtract,
    /// `regexp_extract_all(str, regexp[, idx])`.
    RegexpExtractAll,
    /// `split(str, regex[, limit])`.
    Split,
    /// `format_number(x, d)`.
    FormatNumber,
    /// `bround(x[, d])`.
    Bround,
    /// `conv(num, fromBase, toBase)`.
    Conv,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct StringFn {
    name: &'static str,
    kind: Kind,
    signature: Signature,
}

const STR: DataType = DataType::Utf8;
const INT: DataType = DataType::Int32;

impl StringFn {
    /// Spark's implicit casts of the arguments, or an error naming the function's arguments.
    fn argument_types(&self, n: usize, first: &DataType) -> Option<Vec<DataType>> {
        match (self.kind, n) {
            (Kind::Locate, 2) => Some(vec![STR, STR]),
            (Kind::Locate, 3) => Some(vec![STR, STR, INT]),
            (Kind::RegexpExtract | Kind::RegexpExtractAll, 2) => Some(vec![STR, STR]),
            (Kind::RegexpExtract | Kind::RegexpExtractAll, 3) => Some(vec![STR, STR, INT]),
            (Kind::Split, 2) => Some(vec![STR, STR]),
            (Kind::Split, 3) => Some(vec![STR, STR, INT]),
            (Kind::FormatNumber, 2) => Some(vec![DataType::Float64, INT]),
            (Kind::Bround, 1 | 2) => {
                let x = match first {
                    t if t.is_integer() => DataType::Int64,
                    _ => DataType::Float64,
                };
                Some(if n == 1 { vec![x] } else { vec![x, INT] })
            }
            (Kind::Conv, 3) => Some(vec![STR, INT, INT]),
            _ => None,
        }
    }
    fn usage(&self) -> &'static str {
        match self.kind {
            Kind::Locate => "(substr, str[, pos])",
            Kind::RegexpExtract | Kind::RegexpExtractAll => "(str, regexp[, idx])",
            Kind::Split => "(str, regex[, limit])",
            Kind::FormatNumber => "(x, d)",
            Kind::Bround => "(x[, d])",
            Kind::Conv => "(num, fromBase, toBase)",
        }
    }
}

/// A Java regex as the `regex` crate reads it (the common syntax is shared).
fn compile(pattern: &str) -> DfResult<regex::Regex> {
    regex::Regex::new(pattern).map_err(|e| {
        datafusion::error::DataFusionError::Execution(format!(
            "[INVALID_PARAMETER_VALUE.PATTERN] the regular expression {pattern:?} is invalid: {e}"
        ))
    })
}

/// Spark's `split`: Java's `String.split(regex, limit)` (limit <= 0: no limit, and unlike Java
/// trailing empty strings are kept).
fn split(s: &str, re: &regex::Regex, limit: i32) -> Vec<String> {
    if s.is_empty() {
        return vec![String::new()];
    }
    let mut out = Vec::new();
    let mut last = 0;
    for m in re.find_iter(s) {
        if limit > 0 && out.len() as i32 == limit - 1 {
            break;
        }
        if m.end() == 0 {
            continue; // a zero-width match at the start splits nothing
        }
        if m.start() == m.end() && m.start() >= s.len() {
            break;
        }
        out.push(s[last..m.start()].to_string());
        last = m.end();
    }
    out.push(s[last..].to_string());
    out
}

/// `format_number(x, d)`: HALF_EVEN to `d` decimals, thousands grouped with commas.
fn format_number(x: f64, d: i32) -> Option<String> {
    if d < 0 || !x.is_finite() {
        return None;
    }
    let v: BigDecimal = format!("{x}").parse().ok()?;
    let v = v.with_scale_round(d as i64, RoundingMode::HalfEven);
    let text = v.to_string();
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", text.as_str()),
    };
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    Some(match frac {
        Some(f) if d > 0 => format!("{sign}{grouped}.{f}"),
        _ => format!("{sign}{grouped}"),
    })
}

/// `bround(x, d)`: HALF_EVEN on the decimal form.
fn bround(x: f64, d: i64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    match format!("{x}").parse::<BigDecimal>() {
        Ok(v) => v
            .with_scale_round(d, RoundingMode::HalfEven)
            .to_string()
            .parse()
            .unwrap_or(x),
        Err(_) => x,
    }
}

/// Spark's `conv`: the leading digits valid in `from` (an unsigned 64-bit value; overflow is
/// all ones), a leading `-` negates; a negative `to` prints the value as signed.
fn conv(s: &str, from: i32, to: i32) -> Option<String> {
    let (fb, tb) = (from.unsigned_abs(), to.unsigned_abs());
    if !(2..=36).contains(&fb) || !(2..=36).contains(&tb) {
        return None;
    }
    let s = s.trim();
    let (neg, digits) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let mut v: u64 = 0;
    let mut any = false;
    for c in digits.chars() {
        let Some(d) = c.to_digit(fb) else { break };
        any = true;
        v = v
            .checked_mul(fb as u64)
            .and_then(|v| v.checked_add(d as u64))
            .unwrap_or(u64::MAX);
    }
    if !any {
        return None;
    }
    if neg {
        v = v.wrapping_neg();
    }
    let (minus, mut v) = if to < 0 && (v as i64) < 0 {
        ("-", (v as i64).unsigned_abs())
    } else {
        ("", v)
    };
    let mut out = Vec::new();
    loop {
        out.push(std::char::from_digit((v % tb as u64) as u32, tb)?.to_ascii_uppercase());
        v /= tb as u64;
        if v == 0 {
            break;
        }
    }
    out.reverse();
    Some(format!("{minus}{}", out.into_iter().collect::<String>()))
}

fn strings(a: &ArrayRef) -> DfResult<StringArray> {
    Ok(arrow::compute::cast(a, &STR)?.as_string::<i32>().clone())
}

fn ints(a: &ArrayRef) -> DfResult<Int32Array> {
    Ok(arrow::compute::cast(a, &INT)?
        .as_primitive::<Int32Type>()
        .clone())
}

impl ScalarUDFImpl for StringFn {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let first = arg_types.first().cloned().unwrap_or(DataType::Null);
        match self.argument_types(arg_types.len(), &first) {
            Some(t) => Ok(t),
            None => exec_err!(
                "[WRONG_NUM_ARGS] {} takes {}, not {} arguments",
                self.name,
                self.usage(),
                arg_types.len()
            ),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(match self.kind {
            Kind::Locate => INT,
            Kind::RegexpExtract | Kind::FormatNumber | Kind::Conv => STR,
            Kind::RegexpExtractAll | Kind::Split => {
                DataType::List(Arc::new(arrow::datatypes::Field::new("item", STR, true)))
            }
            Kind::Bround => arg_types.first().cloned().unwrap_or(DataType::Float64),
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = args.number_rows;
        let cols: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<DfResult<_>>()?;
        let out = self.eval(&cols)?;
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

impl StringFn {
    fn eval(&self, cols: &[ArrayRef]) -> DfResult<ArrayRef> {
        let len = cols[0].len();
        Ok(match self.kind {
            Kind::Locate => {
                let (sub, s) = (strings(&cols[0])?, strings(&cols[1])?);
                let pos = cols.get(2).map(ints).transpose()?;
                let out: Int32Array = (0..len)
                    .map(|i| {
                        // Spark: a null start is 0 (Hive), then null substr/str is null.
                        let p = match &pos {
                            Some(p) if p.is_null(i) => return Some(0),
                            Some(p) => p.value(i),
                            None => 1,
                        };
                        if sub.is_null(i) || s.is_null(i) {
                            return None;
                        }
                        if p < 1 {
                            return Some(0);
                        }
                        let hay: Vec<char> = s.value(i).chars().collect();
                        let needle: Vec<char> = sub.value(i).chars().collect();
                        let start = (p - 1) as usize;
                        if start > hay.len() {
                            return Some(0);
                        }
                        let found = (start..=hay.len().saturating_sub(needle.len()))
                            .find(|&k| hay[k..].starts_with(&needle));
                        Some(found.map(|k| k as i32 + 1).unwrap_or(0))
                    })
                    .collect();
                Arc::new(out)
            }
            Kind::RegexpExtract | Kind::RegexpExtractAll => {
                let (s, p) = (strings(&cols[0])?, strings(&cols[1])?);
                let idx = cols.get(2).map(ints).transpose()?;
                let all = self.kind == Kind::RegexpExtractAll;
                let mut one = StringBuilder::new();
                let mut many = ListBuilder::new(StringBuilder::new());
                let mut cache: Option<(String, regex::Regex)> = None;
                for i in 0..len {
                    let g = idx.as_ref().map(|x| (!x.is_null(i)).then(|| x.value(i)));
                    let g = match g {
                        None => Some(1),
                        Some(g) => g,
                    };
                    let (Some(g), false, false) = (g, s.is_null(i), p.is_null(i)) else {
                        if all {
                            many.append_null();
                        } else {
                            one.append_null();
                        }
                        continue;
                    };
                    if cache.as_ref().is_none_or(|(c, _)| c != p.value(i)) {
                        cache = Some((p.value(i).to_string(), compile(p.value(i))?));
                    }
                    let Some((_, re)) = cache.as_ref() else {
                        continue;
                    };
                    if g < 0 || g as usize >= re.captures_len() {
                        return exec_err!(
                            "[INVALID_PARAMETER_VALUE.REGEX_GROUP_INDEX] {}: the group index \
                             {g} must be between 0 and the number of groups in {:?} ({})",
                            self.name,
                            p.value(i),
                            re.captures_len() - 1
                        );
                    }
                    let g = g as usize;
                    if all {
                        for c in re.captures_iter(s.value(i)) {
                            many.values()
                                .append_value(c.get(g).map(|m| m.as_str()).unwrap_or(""));
                        }
                        many.append(true);
                    } else {
                        let v = re
                            .captures(s.value(i))
                            .and_then(|c| c.get(g).map(|m| m.as_str().to_string()))
                            .unwrap_or_default();
                        one.append_value(v);
                    }
                }
                if all {
                    Arc::new(many.finish())
                } else {
                    Arc::new(one.finish())
                }
            }
            Kind::Split => {
                let (s, p) = (strings(&cols[0])?, strings(&cols[1])?);
                let limit = cols.get(2).map(ints).transpose()?;
                let mut out = ListBuilder::new(StringBuilder::new());
                let mut cache: Option<(String, regex::Regex)> = None;
                for i in 0..len {
                    let lim = match &limit {
                        Some(l) if l.is_null(i) => None,
                        Some(l) => Some(l.value(i)),
                        None => Some(-1),
                    };
                    let (Some(lim), false, false) = (lim, s.is_null(i), p.is_null(i)) else {
                        out.append_null();
                        continue;
                    };
                    if cache.as_ref().is_none_or(|(c, _)| c != p.value(i)) {
                        cache = Some((p.value(i).to_string(), compile(p.value(i))?));
                    }
                    if let Some((_, re)) = cache.as_ref() {
                        for part in split(s.value(i), re, lim) {
                            out.values().append_value(part);
                        }
                    }
                    out.append(true);
                }
                Arc::new(out.finish())
            }
            Kind::FormatNumber => {
                let x = cols[0].as_primitive::<Float64Type>();
                let d = ints(&cols[1])?;
                let out: StringArray = (0..len)
                    .map(|i| {
                        (x.is_valid(i) && d.is_valid(i))
                            .then(|| format_number(x.value(i), d.value(i)))
                            .flatten()
                    })
                    .collect();
                Arc::new(out)
            }
            Kind::Bround => {
                let d = cols.get(1).map(ints).transpose()?;
                let scale = |i: usize| match &d {
                    Some(d) if d.is_null(i) => None,
                    Some(d) => Some(d.value(i) as i64),
                    None => Some(0),
                };
                match cols[0].data_type() {
                    DataType::Int64 => {
                        let x = cols[0].as_primitive::<arrow::datatypes::Int64Type>();
                        let out: arrow::array::Int64Array = (0..len)
                            .map(|i| {
                                let s = scale(i)?;
                                x.is_valid(i).then(|| {
                                    if s >= 0 {
                                        x.value(i)
                                    } else {
                                        bround(x.value(i) as f64, s) as i64
                                    }
                                })
                            })
                            .collect();
                        Arc::new(out)
                    }
                    _ => {
                        let x = cols[0].as_primitive::<Float64Type>();
                        let out: Float64Array = (0..len)
                            .map(|i| {
                                let s = scale(i)?;
                                x.is_valid(i).then(|| bround(x.value(i), s))
                            })
                            .collect();
                        Arc::new(out)
                    }
                }
            }
            Kind::Conv => {
                let s = strings(&cols[0])?;
                let (f, t) = (ints(&cols[1])?, ints(&cols[2])?);
                let out: StringArray = (0..len)
                    .map(|i| {
                        if s.is_null(i) || f.is_null(i) || t.is_null(i) {
                            return None;
                        }
                        conv(s.value(i), f.value(i), t.value(i))
                    })
                    .collect();
                Arc::new(out)
            }
        })
    }
}

/// The functions of this file.
pub(super) fn udfs() -> Vec<ScalarUDF> {
    [
        ("locate", Kind::Locate),
        ("position", Kind::Locate),
        ("regexp_extract", Kind::RegexpExtract),
        ("regexp_extract_all", Kind::RegexpExtractAll),
        ("split", Kind::Split),
        ("format_number", Kind::FormatNumber),
        ("bround", Kind::Bround),
        ("conv", Kind::Conv),
    ]
    .into_iter()
    .map(|(name, kind)| {
        ScalarUDF::new_from_impl(StringFn {
            name,
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_format_number_and_split_follow_spark() {
        assert_eq!(conv("100", 2, 10).as_deref(), Some("4"));
        assert_eq!(conv("-10", 16, -10).as_deref(), Some("-16"));
        assert_eq!(
            format_number(12332.123456, 4).as_deref(),
            Some("12,332.1235")
        );
        assert_eq!(format_number(-1234567.5, 0).as_deref(), Some("-1,234,568"));
        let re = regex::Regex::new("[ABC]").unwrap();
        assert_eq!(
            split("oneAtwoBthreeC", &re, -1),
            ["one", "two", "three", ""]
        );
        assert_eq!(split("oneAtwoBthreeC", &re, 2), ["one", "twoBthreeC"]);
        assert_eq!(bround(2.5, 0), 2.0);
        assert_eq!(bround(3.5, 0), 4.0);
    }
}
