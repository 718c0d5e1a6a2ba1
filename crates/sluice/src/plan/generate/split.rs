//! Spark's `split(str, regex[, limit])`, the usual input of `explode` (words from lines). Neither
//! DataFusion nor `datafusion-spark` has it. It splits as Java's `String.split` does (Spark calls
//! it), with a limit of 0 taken as -1: trailing empty strings are kept, a zero-width match at the
//! start gives no leading empty string, an input without a match is itself the one element, and
//! a positive limit caps the number of elements (the last holds the rest); an empty pattern
//! splits into characters, the first `limit` of them (Spark's own rule). The session registers
//! it only when no `split` is registered (the function library may bring its own).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, ListBuilder, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use regex::Regex;

use crate::error::{class, SluiceError};

/// The pieces of `s` split around matches of `re`, at most `limit` of them when `limit > 0`
/// (Java's `Pattern.split(s, limit)` for a limit that is not 0).
pub(crate) fn java_split<'a>(s: &'a str, re: &Regex, limit: i64) -> Vec<&'a str> {
    if re.as_str().is_empty() && !s.is_empty() {
        // Spark's own case: an empty pattern splits a non-empty string into its characters,
        // the first `limit` of them when `limit > 0` (no rest, no trailing empty string).
        let chars = s.char_indices().map(|(i, c)| &s[i..i + c.len_utf8()]);
        return match usize::try_from(limit) {
            Ok(n) if n > 0 => chars.take(n).collect(),
            _ => chars.collect(),
        };
    }
    let limited = limit > 0;
    let mut out: Vec<&str> = Vec::new();
    let mut index = 0usize;
    for m in re.find_iter(s) {
        if !limited || (out.len() as i64) < limit - 1 {
            if index == 0 && m.start() == 0 && m.end() == 0 {
                continue;
            }
            out.push(&s[index..m.start()]);
            index = m.end();
        } else if out.len() as i64 == limit - 1 {
            out.push(&s[index..]);
            index = m.end();
        }
    }
    if index == 0 {
        return vec![s];
    }
    if !limited || (out.len() as i64) < limit {
        out.push(&s[index..]);
    }
    out
}

fn bad_pattern(p: &str, e: regex::Error) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::query(
        class::INVALID_PARAMETER_VALUE_PATTERN,
        format!("The value of parameter `regex` in `split` is invalid: '{p}' is not a regular expression ({e})."),
    )))
}

/// The `split` scalar function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct SparkSplit {
    signature: Signature,
}

impl ScalarUDFImpl for SparkSplit {
    fn name(&self) -> &str {
        "split"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types.len() {
            2 => Ok(vec![DataType::Utf8, DataType::Utf8]),
            3 => Ok(vec![DataType::Utf8, DataType::Utf8, DataType::Int64]),
            n => Err(DataFusionError::External(Box::new(SluiceError::query(
                class::WRONG_NUM_ARGS,
                format!("The `split` requires [2, 3] parameters but the actual number is {n}."),
            )))),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::List(Arc::new(Field::new(
            "item",
            DataType::Utf8,
            true,
        ))))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let n = args.number_rows;
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<DfResult<_>>()?;
        let strs = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let strs = strs.as_string::<i32>();
        let pats = arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
        let pats = pats.as_string::<i32>();
        let limits = match arrays.get(2) {
            Some(l) => Some(arrow::compute::cast(l, &DataType::Int64)?),
            None => None,
        };
        let limits = limits
            .as_ref()
            .map(|l| l.as_any().downcast_ref::<Int64Array>());
        let mut out = ListBuilder::new(StringBuilder::new());
        let mut cached: Option<(String, Regex)> = None;
        for i in 0..n {
            let limit = match limits {
                Some(Some(l)) if l.is_null(i) => None,
                Some(Some(l)) => Some(l.value(i)),
                _ => Some(-1),
            };
            if strs.is_null(i) || pats.is_null(i) || limit.is_none() {
                out.append(false);
                continue;
            }
            let p = pats.value(i);
            if cached.as_ref().is_none_or(|(c, _)| c != p) {
                let re = Regex::new(p).map_err(|e| bad_pattern(p, e))?;
                cached = Some((p.to_string(), re));
            }
            let Some((_, re)) = &cached else {
                continue;
            };
            for piece in java_split(strs.value(i), re, limit.unwrap_or(-1)) {
                out.values().append_value(piece);
            }
            out.append(true);
        }
        let array: ArrayRef = Arc::new(out.finish());
        if all_scalar {
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&array, 0)?,
            ));
        }
        Ok(ColumnarValue::Array(array))
    }
}

/// `split`, for the session.
pub(crate) fn split_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(SparkSplit {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str, p: &str, limit: i64) -> Vec<String> {
        java_split(s, &Regex::new(p).unwrap(), limit)
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// Each expectation is Spark 3.5.7's `split(s, p[, limit])`.
    #[test]
    fn splits_as_spark_does() {
        assert_eq!(split("a b  c", " ", -1), ["a", "b", "", "c"]);
        assert_eq!(split("", " ", -1), [""]);
        assert_eq!(split(" x", " ", -1), ["", "x"]);
        assert_eq!(split("a b ", " ", -1), ["a", "b", ""]);
        assert_eq!(split("a1b22c", "[0-9]+", -1), ["a", "b", "c"]);
        assert_eq!(split("a,b,c", ",", 2), ["a", "b,c"]);
        assert_eq!(split("a,b,c", ",", 1), ["a,b,c"]);
        assert_eq!(split("  a", "\\s+", -1), ["", "a"]);
        assert_eq!(split("a  ", "\\s+", -1), ["a", ""]);
        assert_eq!(split("abc", "", -1), ["a", "b", "c"]);
        assert_eq!(split("abc", "", 2), ["a", "b"]);
        assert_eq!(split("abcd", "", 10), ["a", "b", "c", "d"]);
        assert_eq!(split("", "", -1), [""]);
        assert_eq!(split("a.b", ".", -1), ["", "", "", ""]);
        assert_eq!(split("aXbxc", "x", -1), ["aXb", "c"]);
    }
}
