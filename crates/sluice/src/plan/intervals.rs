//! Spark's interval literals in SQL, as DataFusion's planner can take them.
//!
//! DataFusion plans `INTERVAL '10' MINUTE`, `INTERVAL 10 MINUTES` and
//! `INTERVAL '1 hour 30 minutes'`, but not Spark's ANSI range forms
//! (`INTERVAL '1:30' MINUTE TO SECOND`, `INTERVAL '1 2:03:04' DAY TO SECOND`,
//! `INTERVAL '2-3' YEAR TO MONTH`) nor the multi-unit form `INTERVAL 1 HOUR 30 MINUTES`, which
//! sqlparser cannot parse. This module:
//! - merges multi-unit intervals into one string literal, on the tokens, before parsing
//!   ([`merge_multi_unit_intervals`]);
//! - rewrites the range forms into the equivalent `INTERVAL '1 minutes 30 seconds'` on the AST
//!   ([`rewrite_intervals`]), with Spark's rules for each range's text;
//!
//! Spark refuses interval literals as `window(..)` durations (it takes strings such as
//! `'1 minute 30 seconds'`), and so does Sluice. The range parser itself is
//! `time_text::range_interval_text`, shared with watermark delays (`withWatermark("ts",
//! "INTERVAL '1:30' MINUTE TO SECOND")`, pipeline `WATERMARK FOR ts AS ts - INTERVAL '1:30'
//! MINUTE TO SECOND`).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, DateTimeField, Expr as SqlExpr, Interval, Statement, UnaryOperator,
    Value,
};
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::Result;

/// The units of Spark's multi-unit interval literals, as Spark spells them (any case, plural or
/// singular).
fn is_unit(word: &str) -> bool {
    let w = word.to_ascii_lowercase();
    let w = w.strip_suffix('s').unwrap_or(&w);
    matches!(
        w,
        "year"
            | "month"
            | "week"
            | "day"
            | "hour"
            | "minute"
            | "second"
            | "millisecond"
            | "microsecond"
    )
}

/// `INTERVAL 1 HOUR 30 MINUTES` → `(INTERVAL '1' HOUR + INTERVAL '30' MINUTES)` (two or more
/// number-unit pairs); everything else is returned as written.
pub(crate) fn merge_multi_unit_intervals(sql: &str) -> String {
    // Spark's string literals (backslash escapes), kept as written so they print back unchanged.
    let dialect = super::sql_syntax::SparkDialect;
    let Ok(tokens) = Tokenizer::new(&dialect, sql)
        .with_unescape(false)
        .tokenize()
    else {
        return sql.to_string();
    };
    let mut out: Vec<String> = Vec::with_capacity(tokens.len());
    let mut changed = false;
    let mut i = 0;
    let skip_ws = |mut j: usize| {
        while matches!(tokens.get(j), Some(Token::Whitespace(_))) {
            j += 1;
        }
        j
    };
    while i < tokens.len() {
        let is_interval = matches!(&tokens[i], Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("interval"));
        if !is_interval {
            out.push(tokens[i].to_string());
            i += 1;
            continue;
        }
        // Collect `[-]n unit` pairs.
        let mut pairs: Vec<String> = Vec::new();
        let mut j = i + 1;
        let mut end = i + 1;
        loop {
            let mut k = skip_ws(j);
            let mut sign = "";
            if tokens.get(k) == Some(&Token::Minus) {
                sign = "-";
                k = skip_ws(k + 1);
            }
            let num = match tokens.get(k) {
                Some(Token::Number(n, _)) => n.clone(),
                Some(Token::SingleQuotedString(s)) if s.trim().parse::<f64>().is_ok() => {
                    s.trim().to_string()
                }
                _ => break,
            };
            let u = skip_ws(k + 1);
            match tokens.get(u) {
                Some(Token::Word(w)) if w.quote_style.is_none() && is_unit(&w.value) => {
                    pairs.push(format!("INTERVAL '{sign}{num}' {}", w.value));
                    j = u + 1;
                    end = j;
                }
                _ => break,
            }
        }
        if pairs.len() >= 2 {
            out.push(format!("({})", pairs.join(" + ")));
            changed = true;
            i = end;
        } else {
            out.push(tokens[i].to_string());
            i += 1;
        }
    }
    if !changed {
        return sql.to_string();
    }
    out.concat()
}

fn field_name(f: &DateTimeField) -> Option<&'static str> {
    Some(match f {
        DateTimeField::Year | DateTimeField::Years => "YEAR",
        DateTimeField::Month | DateTimeField::Months => "MONTH",
        DateTimeField::Day | DateTimeField::Days => "DAY",
        DateTimeField::Hour | DateTimeField::Hours => "HOUR",
        DateTimeField::Minute | DateTimeField::Minutes => "MINUTE",
        DateTimeField::Second | DateTimeField::Seconds => "SECOND",
        _ => return None,
    })
}

/// The text of an interval literal as `N unit ...` (for DataFusion's interval parser and Sluice's
/// duration strings), or `None` if it is not a literal Sluice knows.
pub(crate) fn interval_text(iv: &Interval) -> Result<Option<String>> {
    let (value, negative) = match &*iv.value {
        SqlExpr::Value(v) => (&v.value, false),
        SqlExpr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match &**expr {
            SqlExpr::Value(v) => (&v.value, true),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let text = match value {
        Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
        Value::Number(n, _) => n.to_string(),
        _ => return Ok(None),
    };
    let body = match (&iv.leading_field, &iv.last_field) {
        (Some(from), Some(to)) => {
            let (Some(f), Some(t)) = (field_name(from), field_name(to)) else {
                return Ok(None);
            };
            crate::time_text::range_interval_text(&text, f, t)?
        }
        (Some(unit), None) => format!("{text} {unit}"),
        (None, _) => text,
    };
    if negative {
        // `-'1:30'` negates every part.
        let parts: Vec<String> = body
            .split_whitespace()
            .collect::<Vec<_>>()
            .chunks(2)
            .map(|c| match c {
                [n, u] => match n.strip_prefix('-') {
                    Some(p) => format!("{p} {u}"),
                    None => format!("-{n} {u}"),
                },
                other => other.join(" "),
            })
            .collect();
        return Ok(Some(parts.join(" ")));
    }
    Ok(Some(body))
}

/// `n1 unit1 n2 unit2 ...` as `(INTERVAL 'n1' UNIT1 + INTERVAL 'n2' UNIT2 ...)`, which both
/// DataFusion's planner and its expression parser (Spark dialect: a unit is required) take.
fn sum_of_intervals(text: &str) -> SqlExpr {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut terms = words.chunks(2).filter_map(|c| match c {
        [n, u] => {
            let field = match u.trim_end_matches('s').to_ascii_lowercase().as_str() {
                "year" => DateTimeField::Year,
                "month" => DateTimeField::Month,
                "day" => DateTimeField::Day,
                "hour" => DateTimeField::Hour,
                "minute" => DateTimeField::Minute,
                _ => DateTimeField::Second,
            };
            Some(SqlExpr::Interval(Interval {
                value: Box::new(SqlExpr::value(Value::SingleQuotedString(n.to_string()))),
                leading_field: Some(field),
                leading_precision: None,
                last_field: None,
                fractional_seconds_precision: None,
            }))
        }
        _ => None,
    });
    let first = terms.next().unwrap_or_else(|| SqlExpr::value(Value::Null));
    let sum = terms.fold(first, |acc, t| SqlExpr::BinaryOp {
        left: Box::new(acc),
        op: datafusion::sql::sqlparser::ast::BinaryOperator::Plus,
        right: Box::new(t),
    });
    SqlExpr::Nested(Box::new(sum))
}

/// Rewrites Spark's range interval literals into forms DataFusion plans.
pub(crate) fn rewrite_intervals(st: &mut Statement) -> Result<bool> {
    let mut changed = false;
    let mut error = None;
    let _ = visit_expressions_mut(st, |e: &mut SqlExpr| {
        match rewrite_one(e) {
            Ok(c) => changed |= c,
            Err(err) => {
                error = Some(err);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    match error {
        Some(e) => Err(e),
        None => Ok(changed),
    }
}

/// [`rewrite_intervals`] of one expression (for the DataFrame API's SQL expressions).
pub(crate) fn rewrite_intervals_in_expr(e: &mut SqlExpr) -> Result<()> {
    let mut error = None;
    let _ = visit_expressions_mut(e, |e: &mut SqlExpr| {
        if let Err(err) = rewrite_one(e) {
            error = Some(err);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    error.map_or(Ok(()), Err)
}

fn rewrite_one(e: &mut SqlExpr) -> Result<bool> {
    match e {
        SqlExpr::Interval(iv) if iv.last_field.is_some() => {
            let Some(text) = interval_text(iv)? else {
                return Ok(false);
            };
            *e = sum_of_intervals(&text);
            Ok(true)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_unit_intervals_become_one_literal() {
        assert_eq!(
            merge_multi_unit_intervals("SELECT ts + INTERVAL 1 HOUR 30 MINUTES AS t FROM s"),
            "SELECT ts + (INTERVAL '1' HOUR + INTERVAL '30' MINUTES) AS t FROM s"
        );
        let q = "SELECT ts + INTERVAL 10 MINUTES FROM s";
        assert_eq!(merge_multi_unit_intervals(q), q);
    }
}
