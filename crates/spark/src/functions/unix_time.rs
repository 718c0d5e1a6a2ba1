//! `unix_timestamp`, `to_unix_timestamp` and `from_unixtime`: rewritten into the session's
//! Spark-pattern `to_timestamp` and `date_format` and `unix_seconds`, so they read and write
//! Spark's pattern letters exactly as those do (default pattern `yyyy-MM-dd HH:mm:ss`).

use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::exec_err;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    lit, ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

const TS_US: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);
const DEFAULT_PATTERN: &str = "yyyy-MM-dd HH:mm:ss";

#[derive(Debug, PartialEq, Eq, Hash)]
struct UnixTime {
    name: &'static str,
    /// `from_unixtime` (seconds to text) rather than text/timestamp to seconds.
    from: bool,
    to_timestamp: Arc<ScalarUDF>,
    date_format: Arc<ScalarUDF>,
    unix_seconds: Arc<ScalarUDF>,
    now: Arc<ScalarUDF>,
    signature: Signature,
}

fn call(f: &Arc<ScalarUDF>, args: Vec<Expr>) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(f), args))
}

fn cast(e: Expr, t: DataType) -> Expr {
    Expr::Cast(Cast::new(Box::new(e), t))
}

impl ScalarUDFImpl for UnixTime {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let max = 2;
        let min = usize::from(self.from || self.name == "to_unix_timestamp");
        if arg_types.len() < min || arg_types.len() > max {
            return exec_err!(
                "{} takes {}",
                self.name,
                if self.from {
                    "(unix_time[, fmt])"
                } else {
                    "(timeExp[, fmt])"
                }
            );
        }
        Ok(arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| match (i, t) {
                (1, _) => DataType::Utf8,
                (0, t) if self.from && !t.is_integer() => DataType::Int64,
                (_, DataType::Null) => DataType::Utf8,
                (_, t) => t.clone(),
            })
            .collect())
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(if self.from {
            DataType::Utf8
        } else {
            DataType::Int64
        })
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        exec_err!("{} is rewritten before it runs", self.name)
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        let mut it = args.into_iter();
        let first = it.next();
        let pattern = it.next().unwrap_or_else(|| lit(DEFAULT_PATTERN));
        if self.from {
            let Some(secs) = first else {
                return exec_err!("from_unixtime takes (unix_time[, fmt])");
            };
            let micros = cast(secs, DataType::Int64) * lit(1_000_000i64);
            let ts = cast(micros, TS_US);
            return Ok(ExprSimplifyResult::Simplified(call(
                &self.date_format,
                vec![ts, pattern],
            )));
        }
        let ts = match first {
            None => cast(call(&self.now, vec![]), TS_US),
            Some(e) => match info.get_data_type(&e)? {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
                    call(&self.to_timestamp, vec![e, pattern])
                }
                DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => cast(e, TS_US),
                other => {
                    return exec_err!(
                        "{} takes a STRING, DATE or TIMESTAMP, not {other}",
                        self.name
                    )
                }
            },
        };
        Ok(ExprSimplifyResult::Simplified(call(
            &self.unix_seconds,
            vec![ts],
        )))
    }
}

/// The three functions, when the session has what they rewrite into (look-ups go to the
/// session's functions after Sluice's are registered).
pub(super) fn udfs(existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let (Some(to_timestamp), Some(date_format), Some(unix_seconds), Some(now)) = (
        existing("to_timestamp"),
        existing("date_format"),
        existing("unix_seconds"),
        existing("now"),
    ) else {
        return Vec::new();
    };
    [
        ("unix_timestamp", false, Volatility::Stable),
        ("to_unix_timestamp", false, Volatility::Immutable),
        ("from_unixtime", true, Volatility::Immutable),
    ]
    .into_iter()
    .map(|(name, from, v)| {
        ScalarUDF::new_from_impl(UnixTime {
            name,
            from,
            to_timestamp: Arc::clone(&to_timestamp),
            date_format: Arc::clone(&date_format),
            unix_seconds: Arc::clone(&unix_seconds),
            now: Arc::clone(&now),
            signature: Signature::user_defined(v),
        })
    })
    .collect()
}
