//! Spark's string and number-formatting functions that DataFusion and `datafusion-spark` lack
//! or define differently: `locate`/`position` (Spark's argument order), `regexp_extract`,
//! `regexp_extract_all`, `split` (a Java regex with a limit), `format_number`, `bround`
//! (HALF_EVEN) and `conv`; and, computed row by row, `levenshtein` (with a threshold), `mask`,
//! `sentences`, and `regexp_replace(str, regexp, rep[, position])`: every match is replaced
//! (DataFusion's replaces the first unless given the `g` flag), from the 1-based `position` on;
//! `rep` is a Java replacement (`$1`, `${name}`, `\$` for a literal `$`).

use std::cell::RefCell;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int32Array, ListBuilder, StringArray, StringBuilder,
};
use arrow::datatypes::{DataType, Float64Type, Int32Type};
use bigdecimal::{BigDecimal, RoundingMode};
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::rowwise::{all, r_i32, r_str, r_str_list, spark_err, text, usage, RowFn};

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
        DataFusionError::Execution(format!(
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

// ---- levenshtein ----

fn c_levenshtein(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        2 => Ok(all(DataType::Utf8, 2)),
        3 => Ok(vec![DataType::Utf8, DataType::Utf8, DataType::Int32]),
        _ => Err(usage(name, "(str1, str2[, threshold])")),
    }
}

fn levenshtein(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let (Some(x), Some(y)) = (text(&a[0]), text(&a[1])) else {
        return Ok(ScalarValue::Int32(None));
    };
    let x: Vec<char> = x.chars().collect();
    let y: Vec<char> = y.chars().collect();
    let mut prev: Vec<usize> = (0..=y.len()).collect();
    let mut cur = vec![0; y.len() + 1];
    for i in 1..=x.len() {
        cur[0] = i;
        for j in 1..=y.len() {
            let cost = usize::from(x[i - 1] != y[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let d = prev[y.len()] as i32;
    Ok(ScalarValue::Int32(Some(match a.get(2) {
        Some(ScalarValue::Int32(Some(t))) if d > *t => -1,
        Some(ScalarValue::Int32(None)) => return Ok(ScalarValue::Int32(None)),
        _ => d,
    })))
}

// ---- mask ----

fn c_mask(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1..=5 => Ok(all(DataType::Utf8, t.len())),
        _ => Err(usage(
            name,
            "(str[, upperChar[, lowerChar[, digitChar[, otherChar]]]])",
        )),
    }
}

fn mask(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let Some(s) = text(&a[0]) else {
        return Ok(ScalarValue::Utf8(None));
    };
    // Absent: Spark's defaults; NULL: keep the character.
    let repl = |i: usize, default: Option<char>| match a.get(i) {
        None => default,
        Some(v) => text(v).and_then(|t| t.chars().next()),
    };
    let (upper, lower, digit, other) = (
        repl(1, Some('X')),
        repl(2, Some('x')),
        repl(3, Some('n')),
        repl(4, None),
    );
    let out: String = s
        .chars()
        .map(|c| {
            let r = if c.is_uppercase() {
                upper
            } else if c.is_lowercase() {
                lower
            } else if c.is_ascii_digit() {
                digit
            } else {
                other
            };
            r.unwrap_or(c)
        })
        .collect();
    Ok(ScalarValue::Utf8(Some(out)))
}

// ---- sentences ----

fn c_sentences(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        1..=3 => Ok(all(DataType::Utf8, t.len())),
        _ => Err(usage(name, "(str[, lang[, country]])")),
    }
}
fn r_sentences(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::List(Arc::new(
        arrow::datatypes::Field::new_list_field(r_str_list(&[])?, true),
    )))
}

/// Spark's `sentences`: sentences end at `.`, `!` or `?` followed by a space or the end; a word
/// is a run of letters and digits (an apostrophe inside a word kept), as Java's
/// `BreakIterator` finds them for English text. The locale arguments are accepted and ignored.
fn sentences(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let Some(s) = text(&a[0]) else {
        return ScalarValue::try_from(ret);
    };
    let chars: Vec<char> = s.chars().collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    for (i, c) in chars.iter().enumerate() {
        let inner_apostrophe =
            *c == '\'' && !word.is_empty() && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        if c.is_alphanumeric() || inner_apostrophe {
            word.push(*c);
            continue;
        }
        if !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        let ends =
            matches!(c, '.' | '!' | '?') && chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        if ends && !words.is_empty() {
            out.push(std::mem::take(&mut words));
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    if !words.is_empty() {
        out.push(words);
    }
    let lists: Vec<ScalarValue> = out
        .into_iter()
        .map(|ws| {
            let vals: Vec<ScalarValue> =
                ws.into_iter().map(|w| ScalarValue::Utf8(Some(w))).collect();
            ScalarValue::List(ScalarValue::new_list_nullable(&vals, &DataType::Utf8))
        })
        .collect();
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(
        &lists,
        &r_str_list(&[])?,
    )))
}

// ---- regexp_replace ----

fn c_regexp_replace(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t.len() {
        3 => Ok(vec![DataType::Utf8; 3]),
        4 => Ok(vec![
            DataType::Utf8,
            DataType::Utf8,
            DataType::Utf8,
            DataType::Int32,
        ]),
        n => Err(spark_err(
            crate::error::class::WRONG_NUM_ARGS_WITHOUT_SUGGESTION,
            format!(
                "The `{name}` requires [3, 4] parameters but the actual number is {n}: \
                 {name}(str, regexp, rep[, position])"
            ),
        )),
    }
}

fn r_utf8(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Utf8)
}

fn utf8(v: &ScalarValue) -> Option<&str> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s),
        _ => None,
    }
}

thread_local! {
    /// The last pattern compiled on this thread (patterns are almost always one literal).
    static LAST_REGEX: RefCell<Option<(String, regex::Regex)>> = const { RefCell::new(None) };
}

fn with_regex<T>(pattern: &str, f: impl FnOnce(&regex::Regex) -> DfResult<T>) -> DfResult<T> {
    LAST_REGEX.with(|cell| {
        let mut cache = cell.borrow_mut();
        if cache.as_ref().is_none_or(|(p, _)| p != pattern) {
            let re = regex::Regex::new(pattern).map_err(|e| {
                spark_err(
                    crate::error::class::INVALID_PARAMETER_VALUE_PATTERN,
                    format!(
                        "The value of parameter(s) `regexp` in `regexp_replace` is invalid: \
                         '{pattern}' ({e}). Fix the regular expression."
                    ),
                )
            })?;
            *cache = Some((pattern.to_string(), re));
        }
        match cache.as_ref() {
            Some((_, re)) => f(re),
            None => Err(DataFusionError::Internal("regex cache is empty".into())),
        }
    })
}

/// Appends Java's `Matcher.appendReplacement` expansion of `rep` for one match.
fn append_replacement(
    re: &regex::Regex,
    caps: &regex::Captures,
    rep: &str,
    out: &mut String,
) -> DfResult<()> {
    let bad = |what: String| {
        DataFusionError::Execution(format!(
            "regexp_replace: the replacement {rep:?} {what}. Write `\\$` for a literal `$` and \
             `\\\\` for a literal backslash."
        ))
    };
    let groups = caps.len() - 1;
    let mut chars = rep.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) => out.push(e),
                None => return Err(bad("ends with a lone `\\`".into())),
            },
            '$' => {
                if chars.peek() == Some(&'{') {
                    chars.next();
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(ch) if ch.is_ascii_alphanumeric() => name.push(ch),
                            _ => return Err(bad("has an unclosed or invalid `${name}`".into())),
                        }
                    }
                    if !re.capture_names().any(|n| n == Some(name.as_str())) {
                        return Err(bad(format!("names no group `{name}` of the regexp")));
                    }
                    // A group that did not take part in the match adds nothing (Java's too).
                    if let Some(m) = caps.name(&name) {
                        out.push_str(m.as_str());
                    }
                    continue;
                }
                let Some(first) = chars.peek().and_then(|c| c.to_digit(10)) else {
                    return Err(bad(
                        "has a `$` not followed by a group number or `{name}`".into()
                    ));
                };
                chars.next();
                let mut group = first as usize;
                // Java takes more digits while the group number stays a group.
                while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                    let next = group * 10 + d as usize;
                    if next > groups {
                        break;
                    }
                    group = next;
                    chars.next();
                }
                if group > groups {
                    return Err(bad(format!(
                        "refers to group {group}, but the regexp has {groups} group(s)"
                    )));
                }
                if let Some(m) = caps.get(group) {
                    out.push_str(m.as_str());
                }
            }
            other => out.push(other),
        }
    }
    Ok(())
}

/// Spark's `RegExpReplace`: every match of `re` in `s` from the character `position` (1-based)
/// on replaced by `rep`; the text before `position` is kept. Matching sees only the text from
/// `position` (Java's region with anchoring bounds: `^` matches there).
fn regexp_replace_str(s: &str, re: &regex::Regex, rep: &str, position: i32) -> DfResult<String> {
    let start = match s.char_indices().nth((position - 1) as usize) {
        Some((b, _)) => b,
        None => return Ok(s.to_string()),
    };
    let region = &s[start..];
    let mut out = String::with_capacity(s.len());
    out.push_str(&s[..start]);
    let mut last = 0;
    let mut at = 0;
    while at <= region.len() {
        let Some(caps) = re.captures_at(region, at) else {
            break;
        };
        let Some(m) = caps.get(0) else { break };
        out.push_str(&region[last..m.start()]);
        append_replacement(re, &caps, rep, &mut out)?;
        last = m.end();
        at = if m.end() > m.start() {
            m.end()
        } else {
            match region[m.end()..].chars().next() {
                Some(c) => m.end() + c.len_utf8(),
                None => break,
            }
        };
    }
    out.push_str(&region[last..]);
    Ok(out)
}

fn regexp_replace(a: &[ScalarValue], _: &DataType) -> DfResult<ScalarValue> {
    let position = match a.get(3) {
        None => 1,
        Some(ScalarValue::Int32(Some(p))) => *p,
        Some(_) => return Ok(ScalarValue::Utf8(None)),
    };
    if position <= 0 {
        return Err(spark_err(
            crate::error::class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE,
            format!(
                "Cannot resolve \"regexp_replace\" due to data type mismatch: The position must \
                 be between (0, 2147483647] (current value = {position}). Positions count from 1."
            ),
        ));
    }
    let (Some(s), Some(p), Some(rep)) = (utf8(&a[0]), utf8(&a[1]), utf8(&a[2])) else {
        return Ok(ScalarValue::Utf8(None));
    };
    with_regex(p, |re| {
        regexp_replace_str(s, re, rep, position).map(|s| ScalarValue::Utf8(Some(s)))
    })
}

/// `levenshtein(str1, str2[, threshold])`.
pub(super) fn levenshtein_udf() -> ScalarUDF {
    RowFn::new("levenshtein", c_levenshtein, r_i32, levenshtein).udf()
}

/// `mask(str[, upperChar[, lowerChar[, digitChar[, otherChar]]]])`.
pub(super) fn mask_udf() -> ScalarUDF {
    RowFn::new("mask", c_mask, r_str, mask).udf()
}

/// `sentences(str[, lang[, country]])`.
pub(super) fn sentences_udf() -> ScalarUDF {
    RowFn::new("sentences", c_sentences, r_sentences, sentences).udf()
}

/// `regexp_replace(str, regexp, rep[, position])`.
pub(super) fn regexp_replace_udf() -> ScalarUDF {
    RowFn::new("regexp_replace", c_regexp_replace, r_utf8, regexp_replace).udf()
}

#[cfg(test)]
#[path = "strings_tests.rs"]
mod tests;
