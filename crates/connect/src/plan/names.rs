//! Spark's output name of a SQL expression string (`F.expr("a + 1")`, `selectExpr("count(*)")`):
//! Spark names an unaliased expression by its pretty SQL (`(a + 1)`, `count(1)`, `upper(name)`),
//! where Sluice's SQL would name it as DataFusion does (`t.a + Int64(1)`). The common forms are
//! printed as Spark prints them; anything else keeps its written text.

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DuplicateTreatment, Expr, FunctionArg, FunctionArgExpr,
    FunctionArguments, SelectItem, UnaryOperator, Value,
};
use datafusion::sql::sqlparser::dialect::SparkSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Spark's name of the SQL expression `text`; `None` when it has its own alias or does not
/// parse (Sluice's SQL then names it, or says what is wrong).
pub(crate) fn expression_string_name(text: &str) -> Option<String> {
    let dialect = SparkSqlDialect {};
    let mut p = Parser::new(&dialect).try_with_sql(text).ok()?;
    let item = p.parse_select_item().ok()?;
    if p.peek_token().token != datafusion::sql::sqlparser::tokenizer::Token::EOF {
        return None;
    }
    match item {
        SelectItem::UnnamedExpr(e) => Some(pretty(&e)).filter(|n| !n.is_empty()),
        _ => None,
    }
}

fn pretty(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.clone(),
        Expr::CompoundIdentifier(parts) => {
            parts.last().map(|i| i.value.clone()).unwrap_or_default()
        }
        Expr::Nested(inner) => pretty(inner),
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Boolean(b) => b.to_string(),
            Value::Null => "NULL".into(),
            other => other.to_string(),
        },
        Expr::BinaryOp { left, op, right } => {
            let op = match op {
                BinaryOperator::Eq => "=".to_string(),
                BinaryOperator::And => "AND".to_string(),
                BinaryOperator::Or => "OR".to_string(),
                other => other.to_string(),
            };
            format!("({} {op} {})", pretty(left), pretty(right))
        }
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr,
        } => format!("(NOT {})", pretty(expr)),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => format!("(- {})", pretty(expr)),
        Expr::IsNull(x) => format!("({} IS NULL)", pretty(x)),
        Expr::IsNotNull(x) => format!("({} IS NOT NULL)", pretty(x)),
        Expr::Cast {
            kind,
            expr,
            data_type,
            ..
        } => {
            let f = match kind {
                CastKind::TryCast | CastKind::SafeCast => "TRY_CAST",
                _ => "CAST",
            };
            format!(
                "{f}({} AS {})",
                pretty(expr),
                data_type.to_string().to_ascii_uppercase()
            )
        }
        Expr::Function(f) if f.over.is_none() && f.filter.is_none() => {
            let name = f.name.to_string().to_ascii_lowercase();
            if name == "window" || name == "session_window" {
                return name;
            }
            if super::expr::GENERATORS.contains(&name.as_str()) {
                // SQL names a generator's columns (`col`, `pos`, `key`, ..) as Spark does.
                return String::new();
            }
            match &f.args {
                FunctionArguments::List(l) if l.clauses.is_empty() => {
                    let distinct =
                        matches!(l.duplicate_treatment, Some(DuplicateTreatment::Distinct));
                    let args: Vec<String> = l
                        .args
                        .iter()
                        .map(|a| match a {
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => pretty(e),
                            FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => "*".into(),
                            other => other.to_string(),
                        })
                        .collect();
                    if name == "count" && args == ["*"] {
                        return "count(1)".into();
                    }
                    let d = if distinct { "DISTINCT " } else { "" };
                    format!("{name}({d}{})", args.join(", "))
                }
                FunctionArguments::None => format!("{name}()"),
                _ => e.to_string(),
            }
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::expression_string_name as name;

    #[test]
    fn spark_names_of_sql_text() {
        assert_eq!(name("a+1").as_deref(), Some("(a + 1)"));
        assert_eq!(name("COUNT(*)").as_deref(), Some("count(1)"));
        assert_eq!(name("upper(t.name)").as_deref(), Some("upper(name)"));
        assert_eq!(
            name("count(DISTINCT user)").as_deref(),
            Some("count(DISTINCT user)")
        );
        assert_eq!(name("NOT a = 'x'").as_deref(), Some("(NOT (a = x))"));
        assert_eq!(name("cast(a as int)").as_deref(), Some("CAST(a AS INT)"));
        assert_eq!(name("window(ts, '5 minutes')").as_deref(), Some("window"));
        assert_eq!(name("a AS b"), None);
        assert_eq!(name("explode(xs)"), None);
        assert_eq!(name("a b c"), None);
    }
}
