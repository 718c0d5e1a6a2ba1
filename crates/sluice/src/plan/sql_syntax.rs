//! Spark SQL syntax that sqlparser's Spark dialect or DataFusion's planner do not take as Spark
//! means it: string literal escapes and the operators `DIV`, `!`, `~` and `RLIKE`.
//!
//! - String literals. Spark unescapes backslash sequences in `'...'` and `"..."`
//!   (`spark.sql.parser.escapedStringLiterals=false`, the default,
//!   [`crate::conf::ESCAPED_STRING_LITERALS`]): `'\\d+'` is the regex `\d+`, `'a\tb'` has a tab,
//!   `'\''` is a quote, `'\u0041'` and `'\101'` are `A`, `'\%'` and `'\_'` keep their backslash
//!   (as MySQL does), and an unknown `\x` is `x`. [`SparkDialect`] tokenizes with backslash escapes
//!   (so `'\''` does not end the literal) and keeps the raw text; [`rewrite_syntax`] then applies
//!   Spark's rules ([`unescape_spark_string`]), or keeps the raw text when the conf is true.
//!   Adjacent literals are one string, as in Spark (`'it''s'` is `its`).
//! - `a DIV b` (Spark's integral division, BIGINT): DataFusion's type coercion refuses its
//!   `IntegerDivide` operator, so it becomes the function `div(a, b)` (`plan::ansi`'s
//!   `SparkDiv`). sqlparser also parses the right side of `DIV` as a whole expression
//!   (`10 DIV 3 + 1` as `10 DIV (3 + 1)`); [`SparkDialect`] gives `DIV` the precedence of `*`.
//! - `! x` is `NOT x`; `~ x` is `bitwise_not(x)` (datafusion-spark's); `x RLIKE p` /
//!   `x REGEXP p` is `regexp_like(x, p)` (a match anywhere in `x`, as Java's `find`).
//! - `CAST(x AS BINARY)`: DataFusion's planner names the type `BYTEA`.
//!
//! Every rule was checked on PySpark 3.5.7.

use std::any::TypeId;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, AccessExpr, BinaryOperator, CeilFloorKind, DataType as SqlDataType,
    Expr as SqlExpr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, Ident, ObjectName, ObjectNamePart, Subscript, UnaryOperator, Value,
    VisitMut,
};
use datafusion::sql::sqlparser::dialect::{Dialect, SparkSqlDialect};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError, ParserOptions};

use crate::error::Result;
use crate::session::Session;

/// sqlparser's Spark dialect with Spark's string literals (backslash escapes) and `DIV` at the
/// precedence of `*`. Parsers built with [`parser_options`] keep the literals' raw text, for
/// [`rewrite_syntax`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SparkDialect;

const SPARK: SparkSqlDialect = SparkSqlDialect {};

impl Dialect for SparkDialect {
    fn dialect(&self) -> TypeId {
        // `dialect_of!(parser is SparkSqlDialect)` checks inside sqlparser stay true.
        TypeId::of::<SparkSqlDialect>()
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        SPARK.is_delimited_identifier_start(ch)
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        SPARK.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        SPARK.is_identifier_part(ch)
    }
    fn supports_string_literal_backslash_escape(&self) -> bool {
        true
    }
    fn supports_string_literal_concatenation(&self) -> bool {
        // `'a' 'b'` is `'ab'` in Spark.
        true
    }
    fn supports_filter_during_aggregation(&self) -> bool {
        SPARK.supports_filter_during_aggregation()
    }
    fn supports_group_by_expr(&self) -> bool {
        SPARK.supports_group_by_expr()
    }
    fn supports_group_by_with_modifier(&self) -> bool {
        SPARK.supports_group_by_with_modifier()
    }
    fn supports_lambda_functions(&self) -> bool {
        SPARK.supports_lambda_functions()
    }
    fn supports_select_wildcard_except(&self) -> bool {
        SPARK.supports_select_wildcard_except()
    }
    fn supports_struct_literal(&self) -> bool {
        SPARK.supports_struct_literal()
    }
    fn supports_nested_comments(&self) -> bool {
        SPARK.supports_nested_comments()
    }
    fn supports_create_table_using(&self) -> bool {
        SPARK.supports_create_table_using()
    }
    fn supports_long_type_as_bigint(&self) -> bool {
        SPARK.supports_long_type_as_bigint()
    }
    fn supports_values_as_table_factor(&self) -> bool {
        SPARK.supports_values_as_table_factor()
    }
    fn require_interval_qualifier(&self) -> bool {
        SPARK.require_interval_qualifier()
    }
    fn supports_bang_not_operator(&self) -> bool {
        SPARK.supports_bang_not_operator()
    }
    fn supports_select_item_multi_column_alias(&self) -> bool {
        SPARK.supports_select_item_multi_column_alias()
    }
    fn supports_cte_without_as(&self) -> bool {
        SPARK.supports_cte_without_as()
    }
    fn supports_map_literal_with_angle_brackets(&self) -> bool {
        SPARK.supports_map_literal_with_angle_brackets()
    }
    fn parse_prefix(
        &self,
        parser: &mut Parser,
    ) -> Option<std::result::Result<SqlExpr, ParserError>> {
        // `exists(array, x -> ..)` is Spark's higher-order function, not EXISTS (subquery).
        crate::plan::functions::lambda::parse_exists_call(parser).or_else(|| spark_prefix(parser))
    }
    fn parse_infix(
        &self,
        parser: &mut Parser,
        expr: &SqlExpr,
        precedence: u8,
    ) -> Option<std::result::Result<SqlExpr, ParserError>> {
        if !parser.parse_keyword(Keyword::DIV) {
            return None;
        }
        // `precedence` is `DIV`'s own (that of `*`): the right side binds only tighter operators.
        Some(
            parser
                .parse_subexpr(precedence)
                .map(|right| SqlExpr::BinaryOp {
                    left: Box::new(expr.clone()),
                    op: BinaryOperator::MyIntegerDivide,
                    right: Box::new(right),
                }),
        )
    }
}

/// Spark's prefix forms sqlparser reads differently: typed number literals (`1L`, `1.5D`, ...,
/// and numbers DataFusion types differently from Spark; [`super::literals`]), the hex literal
/// `X '..'` written with a space, and `TRIM(BOTH | LEADING | TRAILING FROM s)` without trim
/// characters. `None` leaves the parser where it was.
fn spark_prefix(parser: &mut Parser) -> Option<std::result::Result<SqlExpr, ParserError>> {
    use datafusion::sql::sqlparser::ast::TrimWhereField;
    use datafusion::sql::sqlparser::tokenizer::Token;
    // The first token that is not whitespace.
    let mut at = 0;
    while matches!(
        parser.peek_nth_token_no_skip(at).token,
        Token::Whitespace(_)
    ) {
        at += 1;
    }
    match parser.peek_nth_token_no_skip(at).token {
        Token::Number(text, long) => {
            let typed = if long {
                super::literals::suffixed_number(&text, "L").map(|e| (e, 0))
            } else {
                match parser.peek_nth_token_no_skip(at + 1).token {
                    Token::Word(w) if w.quote_style.is_none() => {
                        super::literals::suffixed_number(&text, &w.value).map(|e| (e, 1))
                    }
                    _ => None,
                }
                .or_else(|| super::literals::unsuffixed_number(&text).map(|e| (e, 0)))
            }?;
            let (expr, suffix_tokens) = typed;
            parser.next_token();
            for _ in 0..suffix_tokens {
                parser.next_token_no_skip();
            }
            Some(Ok(expr))
        }
        Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("x") => {
            let Token::SingleQuotedString(hex) = parser.peek_nth_token(1).token else {
                return None;
            };
            parser.next_token();
            parser.next_token();
            Some(Ok(SqlExpr::value(Value::HexStringLiteral(hex))))
        }
        Token::Word(w) if w.keyword == Keyword::TRIM => {
            if parser.peek_nth_token(1).token != Token::LParen {
                return None;
            }
            let trim_where = match parser.peek_nth_token(2).token {
                Token::Word(w) if w.keyword == Keyword::BOTH => TrimWhereField::Both,
                Token::Word(w) if w.keyword == Keyword::LEADING => TrimWhereField::Leading,
                Token::Word(w) if w.keyword == Keyword::TRAILING => TrimWhereField::Trailing,
                // Spark refuses `TRIM(FROM s)` (a typed literal of type FROM).
                _ => return None,
            };
            match parser.peek_nth_token(3).token {
                Token::Word(w) if w.keyword == Keyword::FROM => {}
                _ => return None,
            }
            for _ in 0..4 {
                parser.next_token();
            }
            Some(parser.parse_expr().and_then(|expr| {
                parser.expect_token(&Token::RParen)?;
                Ok(SqlExpr::Trim {
                    expr: Box::new(expr),
                    trim_where: Some(trim_where),
                    trim_what: None,
                    trim_characters: None,
                })
            }))
        }
        _ => None,
    }
}

/// Parser options for [`SparkDialect`]: string literals keep their raw text (unescaped later by
/// [`rewrite_syntax`]).
pub(crate) fn parser_options() -> ParserOptions {
    ParserOptions::new().with_unescape(false)
}

/// `spark.sql.parser.escapedStringLiterals` of the session (false when unset).
pub(crate) fn escaped_string_literals(session: &Session) -> Result<bool> {
    let key = crate::conf::ESCAPED_STRING_LITERALS;
    crate::conf::parse_bool(&|k: &str| session.conf(k), key).map(|v| v.unwrap_or(false))
}

/// Spark's value of a string literal from its raw text between the quotes (`quote` is `'` or
/// `"`): Spark's `ParserUtils.unescapeSQLString`. A doubled quote inside is where two adjacent
/// literals meet (`'it''s'` is `'it' 's'` = `its`), as in Spark.
pub(crate) fn unescape_spark_string(raw: &str, quote: char) -> String {
    let chars: Vec<char> = raw.chars().collect();
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    let hex = |from: usize, n: usize| -> Option<u32> {
        let digits: String = chars.get(from..from + n)?.iter().collect();
        if digits.chars().all(|c| c.is_ascii_hexdigit()) {
            u32::from_str_radix(&digits, 16).ok()
        } else {
            None
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if c == quote && chars.get(i + 1) == Some(&quote) {
            i += 2;
            continue;
        }
        if c != '\\' || i + 1 >= chars.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let n = chars[i + 1];
        if n == 'u' {
            if let Some(ch) = hex(i + 2, 4).and_then(char::from_u32) {
                out.push(ch);
                i += 6;
                continue;
            }
        }
        if n == 'U' {
            if let Some(ch) = hex(i + 2, 8).and_then(char::from_u32) {
                out.push(ch);
                i += 10;
                continue;
            }
        }
        let octal = |k: usize, max: char| chars.get(k).is_some_and(|d| ('0'..=max).contains(d));
        if octal(i + 1, '1') && octal(i + 2, '7') && octal(i + 3, '7') {
            let v = chars[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, d| acc * 8 + (*d as u32 - '0' as u32));
            out.push(char::from_u32(v).unwrap_or('\u{FFFD}'));
            i += 4;
            continue;
        }
        match n {
            '0' => out.push('\0'),
            'b' => out.push('\u{8}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'Z' => out.push('\u{1A}'),
            '%' => out.push_str("\\%"),
            '_' => out.push_str("\\_"),
            other => out.push(other),
        }
        i += 2;
    }
    out
}

/// The raw text of a literal as Spark keeps it with `escapedStringLiterals=true`: as written,
/// adjacent literals joined.
fn raw_spark_string(raw: &str, quote: char) -> String {
    let doubled: String = [quote, quote].iter().collect();
    raw.replace(&doubled, "")
}

fn call(name: &str, args: Vec<SqlExpr>) -> SqlExpr {
    SqlExpr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// Applies Spark's string literal rules and rewrites `DIV`, `!` and `~` (see the module doc) in
/// a statement or expression parsed by [`SparkDialect`] with [`parser_options`].
pub(crate) fn rewrite_syntax<V: VisitMut>(node: &mut V, escaped_literals: bool) -> Result<()> {
    let fix = |raw: &mut String, quote: char| {
        *raw = if escaped_literals {
            raw_spark_string(raw, quote)
        } else {
            unescape_spark_string(raw, quote)
        };
    };
    let _ = visit_expressions_mut(node, |e: &mut SqlExpr| {
        match e {
            SqlExpr::Value(v) => match &mut v.value {
                Value::SingleQuotedString(s) => fix(s, '\''),
                Value::DoubleQuotedString(s) => fix(s, '"'),
                _ => {}
            },
            SqlExpr::TypedString(ts) => match &mut ts.value.value {
                Value::SingleQuotedString(s) => fix(s, '\''),
                Value::DoubleQuotedString(s) => fix(s, '"'),
                _ => {}
            },
            // Spark's `BINARY` type, which DataFusion's planner knows as `BYTEA`.
            SqlExpr::Cast { data_type, .. }
                if matches!(
                    data_type,
                    SqlDataType::Binary(None) | SqlDataType::Varbinary(None)
                ) =>
            {
                *data_type = SqlDataType::Bytea
            }
            SqlExpr::UnaryOp {
                op: op @ UnaryOperator::BangNot,
                ..
            } => *op = UnaryOperator::Not,
            SqlExpr::UnaryOp {
                op: UnaryOperator::BitwiseNot,
                expr,
            } => {
                let x = std::mem::replace(expr.as_mut(), SqlExpr::value(Value::Null));
                *e = call("bitwise_not", vec![SqlExpr::Nested(Box::new(x))]);
            }
            SqlExpr::BinaryOp {
                left,
                op: BinaryOperator::MyIntegerDivide,
                right,
            } => {
                let l = std::mem::replace(left.as_mut(), SqlExpr::value(Value::Null));
                let r = std::mem::replace(right.as_mut(), SqlExpr::value(Value::Null));
                *e = call("div", vec![l, r]);
            }
            // `ceil(x, d)` / `floor(x, d)`: Spark's functions of two arguments (DataFusion's
            // planner refuses the scale).
            SqlExpr::Ceil {
                expr,
                field: CeilFloorKind::Scale(d),
            } => {
                let x = std::mem::replace(expr.as_mut(), SqlExpr::value(Value::Null));
                let d = SqlExpr::Value(d.clone());
                *e = call("ceil", vec![x, d]);
            }
            SqlExpr::Floor {
                expr,
                field: CeilFloorKind::Scale(d),
            } => {
                let x = std::mem::replace(expr.as_mut(), SqlExpr::value(Value::Null));
                let d = SqlExpr::Value(d.clone());
                *e = call("floor", vec![x, d]);
            }
            SqlExpr::RLike {
                negated,
                expr,
                pattern,
                ..
            } => {
                let x = std::mem::replace(expr.as_mut(), SqlExpr::value(Value::Null));
                let p = std::mem::replace(pattern.as_mut(), SqlExpr::value(Value::Null));
                let like = call("regexp_like", vec![x, p]);
                *e = if *negated {
                    SqlExpr::UnaryOp {
                        op: UnaryOperator::Not,
                        expr: Box::new(like),
                    }
                } else {
                    like
                };
            }
            // `a[0].b`, `f(x).b`: a field of a subscript's or a call's result. DataFusion's
            // planner takes only the leading `.name`s of a column as names, later ones only as
            // strings; Spark reads both as field names. They become `a[0]['b']`, which stays
            // the same when printed and parsed again.
            SqlExpr::CompoundFieldAccess { root, access_chain } => {
                let mut leading = matches!(root.as_ref(), SqlExpr::Identifier(_));
                for a in access_chain.iter_mut() {
                    match a {
                        AccessExpr::Dot(SqlExpr::Identifier(id)) if !leading => {
                            *a = AccessExpr::Subscript(Subscript::Index {
                                index: SqlExpr::value(Value::SingleQuotedString(id.value.clone())),
                            })
                        }
                        AccessExpr::Dot(SqlExpr::Identifier(_)) => {}
                        _ => leading = false,
                    }
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    Ok(())
}

/// Parses one SQL expression as a Spark user writes it (for tests and internal callers).
#[cfg(test)]
fn parse_spark_expr(sql: &str, escaped_literals: bool) -> Result<SqlExpr> {
    let mut e = Parser::new(&SparkDialect)
        .with_options(parser_options())
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| {
            crate::error::SluiceError::query(
                crate::error::class::PARSE_SYNTAX_ERROR,
                format!("{e} in {sql:?}"),
            )
        })?;
    rewrite_syntax(&mut e, escaped_literals)?;
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(sql: &str) -> String {
        match parse_spark_expr(sql, false).unwrap() {
            SqlExpr::Value(v) => match v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn string_literals_are_unescaped_as_spark_does() {
        // Spark 3.5.7: '\\d+' is \d+, '\'' is ', '\u0041' and '\101' are A, '\x' is x,
        // '\%' and '\_' keep the backslash, '\0' '\Z' '\b' are control characters.
        assert_eq!(lit(r"'\\d+'"), r"\d+");
        assert_eq!(lit(r"'a\tb'"), "a\tb");
        assert_eq!(lit(r"'a\nb'"), "a\nb");
        assert_eq!(lit(r"'\''"), "'");
        assert_eq!(lit(r#""a\"b""#), "a\"b");
        assert_eq!(lit(r"'\u0041'"), "A");
        assert_eq!(lit(r"'\101'"), "A");
        assert_eq!(lit(r"'\x'"), "x");
        assert_eq!(lit(r"'\%'"), r"\%");
        assert_eq!(lit(r"'\_'"), r"\_");
        assert_eq!(lit(r"'\0\Z\b\r'"), "\0\u{1A}\u{8}\r");
        assert_eq!(lit("'it''s'"), "its");
    }

    #[test]
    fn escaped_string_literals_keep_the_text_as_written() {
        let e = parse_spark_expr(r"'\\d+\t\u0041'", true).unwrap();
        assert_eq!(e.to_string(), r"'\\d+\t\u0041'");
    }

    #[test]
    fn div_binds_like_multiplication_and_becomes_a_function() {
        let e = parse_spark_expr("10 DIV 3 + 1", false).unwrap();
        assert_eq!(e.to_string(), "div(10, 3) + 1");
        let e = parse_spark_expr("2 * 7 div 2", false).unwrap();
        assert_eq!(e.to_string(), "div(2 * 7, 2)");
        let e = parse_spark_expr("8 DIV 3 DIV 2", false).unwrap();
        assert_eq!(e.to_string(), "div(div(8, 3), 2)");
        // Spark's `7.5` is DECIMAL(2,1) (the session parses fractions as decimals), which
        // `div` takes.
        let e = parse_spark_expr("7.5 div 2", false).unwrap();
        assert_eq!(e.to_string(), "div(7.5, 2)");
    }

    #[test]
    fn bang_is_not_and_tilde_is_bitwise_not() {
        assert_eq!(
            parse_spark_expr("! true", false).unwrap().to_string(),
            "NOT true"
        );
        assert_eq!(
            parse_spark_expr("~ 5", false).unwrap().to_string(),
            "bitwise_not((5))"
        );
        assert_eq!(
            parse_spark_expr("s NOT RLIKE '\\\\d'", false)
                .unwrap()
                .to_string(),
            "NOT regexp_like(s, '\\d')"
        );
    }
}
