//! Spark Connect expressions to Spark SQL text, with the output name Spark gives each
//! (`(a + 1)`, `sum(x)`, `count(1)`, `window`), so `pyspark.sql.functions` calls are planned
//! by Sluice's Spark SQL and its function library.
//!
//! PySpark sends operators as functions (`==`, `and`, `isNull`, `when`, ..): they become SQL
//! operators; every other function is the Spark SQL function of the same name. An attribute
//! taken from a DataFrame (`df1["id"]`) carries that DataFrame's `plan_id`; the [`Scope`] maps
//! plan ids to the FROM alias their columns are under.

use std::collections::HashMap;

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::expression::{self as pe, ExprType};

/// The FROM aliases the plan ids of a query's inputs resolve to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    pub(crate) aliases: HashMap<i64, String>,
    /// The input's columns as (qualifier, name), for stars inside function calls.
    pub(crate) cols: Vec<(Option<String>, String)>,
    /// The struct columns (their index in `cols`) with their field names, for `data.*`.
    pub(crate) structs: Vec<(usize, Vec<String>)>,
}

/// One expression as SQL.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    /// The SQL text, parenthesised where it is composite, to nest in other SQL.
    pub(crate) text: String,
    /// Spark's output name of the expression; `None` where SQL names it (stars, generators,
    /// expression strings).
    pub(crate) name: Option<String>,
    /// The text as a whole select item, alias included (`F.expr("a AS b")`, multi-aliases).
    pub(crate) item: Option<String>,
    /// A star (`*`, `t.*`): its qualifier, if any.
    pub(crate) star: Option<Option<String>>,
}

impl Sql {
    fn new(text: String, name: String) -> Self {
        Self {
            text,
            name: Some(name),
            item: None,
            star: None,
        }
    }
    /// The name to show inside an enclosing expression's name.
    pub(crate) fn shown(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.text.clone())
    }
    /// The expression as a select item, aliased with its Spark name.
    pub(crate) fn select_item(&self) -> String {
        if let Some(item) = &self.item {
            return item.clone();
        }
        match &self.name {
            Some(n) => format!("{} AS {}", self.text, quote(n)),
            None => self.text.clone(),
        }
    }
}

/// A backquoted SQL identifier.
pub(crate) fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// The parts of a Spark attribute name (`a.b`, `` `a.b`.c ``), as Spark's `parseAttributeName`.
pub(crate) fn name_parts(name: &str) -> Result<Vec<String>> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = name.chars().peekable();
    let mut in_quote = false;
    let mut quoted_part = false;
    while let Some(c) = chars.next() {
        if in_quote {
            if c == '`' {
                if chars.peek() == Some(&'`') {
                    chars.next();
                    cur.push('`');
                } else {
                    in_quote = false;
                }
            } else {
                cur.push(c);
            }
        } else if c == '`' {
            in_quote = true;
            quoted_part = true;
        } else if c == '.' {
            parts.push(std::mem::take(&mut cur));
            quoted_part = false;
        } else {
            cur.push(c);
        }
    }
    if in_quote {
        return Err(ConnectError::analysis(
            sluice::error::class::PARSE_SYNTAX_ERROR,
            format!("the column name {name:?} has an unclosed backquote"),
        ));
    }
    let _ = quoted_part;
    parts.push(cur);
    Ok(parts)
}

fn bad(what: &str) -> ConnectError {
    ConnectError::illegal_argument(format!("the expression sent has no {what}"))
}

/// The SQL of `e` in `scope`.
pub(crate) fn sql(scope: &Scope, e: &proto::Expression) -> Result<Sql> {
    let kind = e.expr_type.as_ref().ok_or_else(|| bad("expression type"))?;
    match kind {
        ExprType::Literal(l) => super::literal::literal(l),
        ExprType::UnresolvedAttribute(a) => attribute(scope, &a.unparsed_identifier, a.plan_id),
        ExprType::UnresolvedFunction(f) => {
            function(scope, &f.function_name, &f.arguments, f.is_distinct)
        }
        ExprType::CallFunction(f) => function(scope, &f.function_name, &f.arguments, false),
        ExprType::ExpressionString(s) => {
            // Spark's name when it has none of its own; else it names itself (`a AS b`).
            let name = super::names::expression_string_name(&s.expression);
            Ok(Sql {
                text: format!("({})", s.expression),
                item: if name.is_none() {
                    Some(s.expression.clone())
                } else {
                    None
                },
                name,
                star: None,
            })
        }
        ExprType::UnresolvedStar(s) => star(scope, s.unparsed_target.as_deref(), s.plan_id),
        ExprType::Alias(a) => {
            let inner = sql(
                scope,
                a.expr.as_deref().ok_or_else(|| bad("aliased expression"))?,
            )?;
            match a.name.as_slice() {
                [one] => Ok(Sql {
                    text: inner.text,
                    name: Some(one.clone()),
                    item: None,
                    star: None,
                }),
                [] => Err(ConnectError::illegal_argument("an alias without a name")),
                many => Ok(Sql {
                    item: Some(format!(
                        "{} AS ({})",
                        inner.text,
                        many.iter().map(|n| quote(n)).collect::<Vec<_>>().join(", ")
                    )),
                    text: inner.text,
                    name: None,
                    star: None,
                }),
            }
        }
        ExprType::Cast(c) => {
            let inner = sql(scope, c.expr.as_deref().ok_or_else(|| bad("cast input"))?)?;
            let t = match c.cast_to_type.as_ref().ok_or_else(|| bad("cast type"))? {
                pe::cast::CastToType::Type(t) => super::types::from_proto(t)?,
                pe::cast::CastToType::TypeStr(s) => super::types::parse_type_text(s)?,
            };
            let (text_t, shown_t) = (
                super::types::sql_type_text(&t)?,
                super::types::sql_type_name(&t)?,
            );
            let f = if c.eval_mode == pe::cast::EvalMode::Try as i32 {
                "TRY_CAST"
            } else {
                "CAST"
            };
            Ok(Sql::new(
                format!("{f}({} AS {text_t})", inner.text),
                format!("{f}({} AS {shown_t})", inner.shown()),
            ))
        }
        ExprType::SortOrder(s) => sort_order(scope, s),
        ExprType::UnresolvedExtractValue(x) => {
            let child = sql(
                scope,
                x.child.as_deref().ok_or_else(|| bad("extract input"))?,
            )?;
            let key = x.extraction.as_deref().ok_or_else(|| bad("extraction"))?;
            let k = sql(scope, key)?;
            let is_field = matches!(
                &key.expr_type,
                Some(ExprType::Literal(pe::Literal {
                    literal_type: Some(pe::literal::LiteralType::String(_)),
                    ..
                }))
            );
            let name = if is_field {
                format!("{}.{}", child.shown(), k.shown())
            } else {
                format!("{}[{}]", child.shown(), k.shown())
            };
            Ok(Sql::new(format!("{}[{}]", child.text, k.text), name))
        }
        ExprType::LambdaFunction(l) => {
            let body = sql(
                scope,
                l.function.as_deref().ok_or_else(|| bad("lambda body"))?,
            )?;
            let vars: Vec<String> = l
                .arguments
                .iter()
                .map(|v| variable(&v.name_parts))
                .collect();
            let head = if vars.len() == 1 {
                vars[0].clone()
            } else {
                format!("({})", vars.join(", "))
            };
            Ok(Sql::new(
                format!("{head} -> {}", body.text),
                format!("lambdafunction({}, {})", body.shown(), vars.join(", ")),
            ))
        }
        ExprType::UnresolvedNamedLambdaVariable(v) => {
            let t = variable(&v.name_parts);
            Ok(Sql::new(t.clone(), t))
        }
        ExprType::Window(w) => window(scope, w),
        ExprType::UnresolvedRegex(r) => Err(ConnectError::not_supported(format!(
            "colRegex ({:?})",
            r.col_name
        ))),
        ExprType::UpdateFields(_) => Err(ConnectError::not_supported(
            "withField/dropFields (the UpdateFields expression)",
        )),
        ExprType::CommonInlineUserDefinedFunction(f) => Err(ConnectError::not_supported(format!(
            "user-defined functions (the UDF {})",
            f.function_name
        ))),
        ExprType::NamedArgumentExpression(_) => {
            Err(ConnectError::not_supported("named function arguments"))
        }
        ExprType::SubqueryExpression(_) => Err(ConnectError::not_supported(
            "subquery expressions of the DataFrame API",
        )),
        ExprType::MergeAction(_) => Err(ConnectError::not_supported("MERGE actions")),
        ExprType::TypedAggregateExpression(_) => {
            Err(ConnectError::not_supported("typed aggregate expressions"))
        }
        ExprType::DirectShufflePartitionId(_) => Err(ConnectError::not_supported(
            "the DirectShufflePartitionId expression",
        )),
        ExprType::Extension(_) => Err(ConnectError::not_supported("expression extensions")),
    }
}

fn variable(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| {
            if !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                p.clone()
            } else {
                quote(p)
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// A column reference: `a`, `t.a`, `s.field`; with a plan id, qualified by its FROM alias.
pub(crate) fn attribute(scope: &Scope, name: &str, plan_id: Option<i64>) -> Result<Sql> {
    let parts = name_parts(name)?;
    let mut text: Vec<String> = Vec::new();
    if let Some(alias) = plan_id.and_then(|id| scope.aliases.get(&id)) {
        text.push(quote(alias));
    }
    text.extend(parts.iter().map(|p| quote(p)));
    let shown = parts.last().cloned().unwrap_or_default();
    Ok(Sql::new(text.join("."), shown))
}

fn star(scope: &Scope, target: Option<&str>, plan_id: Option<i64>) -> Result<Sql> {
    let qualifier = match (target, plan_id.and_then(|id| scope.aliases.get(&id))) {
        (_, Some(alias)) => Some(alias.clone()),
        (Some(t), None) => {
            let t = t.strip_suffix(".*").unwrap_or(t);
            match name_parts(t)?.as_slice() {
                [] => None,
                [one] if one.is_empty() => None,
                [one] => Some(one.clone()),
                _ => {
                    return Err(ConnectError::not_supported(format!(
                        "the star {t}.* of a nested qualifier"
                    )))
                }
            }
        }
        (None, None) => None,
    };
    // `data.*` of a struct column `data` (not a FROM alias): its fields.
    if let (Some(q), None) = (&qualifier, plan_id.and_then(|id| scope.aliases.get(&id))) {
        let is_alias = scope
            .cols
            .iter()
            .any(|(cq, _)| cq.as_deref() == Some(q.as_str()));
        let field_of = scope
            .structs
            .iter()
            .find(|(i, _)| scope.cols[*i].1.eq_ignore_ascii_case(q));
        if let (false, Some((i, fields))) = (is_alias, field_of) {
            let (cq, name) = &scope.cols[*i];
            let base = match cq {
                Some(cq) => format!("{}.{}", quote(cq), quote(name)),
                None => quote(name),
            };
            let items: Vec<String> = fields
                .iter()
                .map(|f| format!("{base}.{} AS {}", quote(f), quote(f)))
                .collect();
            let texts: Vec<String> = fields
                .iter()
                .map(|f| format!("{base}.{}", quote(f)))
                .collect();
            return Ok(Sql {
                text: texts.join(", "),
                name: None,
                item: Some(items.join(", ")),
                star: None,
            });
        }
    }
    let text = match &qualifier {
        Some(q) => format!("{}.*", quote(q)),
        None => "*".to_string(),
    };
    Ok(Sql {
        text: text.clone(),
        name: None,
        item: Some(text),
        star: Some(qualifier),
    })
}

/// A star argument of a function call as the columns it stands for.
fn expand_stars(scope: &Scope, args: Vec<Sql>) -> Vec<Sql> {
    let mut out = Vec::new();
    for a in args {
        match &a.star {
            Some(q) if !scope.cols.is_empty() => {
                for (cq, n) in &scope.cols {
                    if q.is_none() || q.as_deref() == cq.as_deref() {
                        let text = match cq {
                            Some(cq) => format!("{}.{}", quote(cq), quote(n)),
                            None => quote(n),
                        };
                        out.push(Sql::new(text, n.clone()));
                    }
                }
            }
            _ => out.push(a),
        }
    }
    out
}

fn sort_order(scope: &Scope, s: &pe::SortOrder) -> Result<Sql> {
    use pe::sort_order::{NullOrdering, SortDirection};
    let child = sql(scope, s.child.as_deref().ok_or_else(|| bad("sort key"))?)?;
    let desc = s.direction == SortDirection::Descending as i32;
    let nulls_first = match s.null_ordering {
        n if n == NullOrdering::SortNullsFirst as i32 => true,
        n if n == NullOrdering::SortNullsLast as i32 => false,
        _ => !desc,
    };
    let dir = if desc { "DESC" } else { "ASC" };
    let nulls = if nulls_first {
        "NULLS FIRST"
    } else {
        "NULLS LAST"
    };
    Ok(Sql::new(
        format!("{} {dir} {nulls}", child.text),
        format!("{} {dir} {nulls}", child.shown()),
    ))
}

fn window(scope: &Scope, w: &pe::Window) -> Result<Sql> {
    use pe::window::window_frame::{frame_boundary::Boundary, FrameType};
    let f = sql(
        scope,
        w.window_function
            .as_deref()
            .ok_or_else(|| bad("window function"))?,
    )?;
    let parts = w
        .partition_spec
        .iter()
        .map(|p| sql(scope, p))
        .collect::<Result<Vec<_>>>()?;
    let orders = w
        .order_spec
        .iter()
        .map(|o| sort_order(scope, o))
        .collect::<Result<Vec<_>>>()?;
    let boundary =
        |b: Option<&pe::window::window_frame::FrameBoundary>, lower: bool| -> Result<String> {
            match b.and_then(|b| b.boundary.as_ref()) {
                None | Some(Boundary::Unbounded(_)) => Ok(if lower {
                    "UNBOUNDED PRECEDING".into()
                } else {
                    "UNBOUNDED FOLLOWING".into()
                }),
                Some(Boundary::CurrentRow(_)) => Ok("CURRENT ROW".into()),
                Some(Boundary::Value(v)) => {
                    let n = match &v.expr_type {
                        Some(ExprType::Literal(pe::Literal {
                            literal_type: Some(pe::literal::LiteralType::Integer(n)),
                            ..
                        })) => i64::from(*n),
                        Some(ExprType::Literal(pe::Literal {
                            literal_type: Some(pe::literal::LiteralType::Long(n)),
                            ..
                        })) => *n,
                        _ => {
                            return Err(ConnectError::not_supported(
                                "a window frame boundary that is not an integer offset",
                            ))
                        }
                    };
                    Ok(match n {
                        0 => "CURRENT ROW".into(),
                        n if n < 0 => format!("{} PRECEDING", n.unsigned_abs()),
                        n => format!("{n} FOLLOWING"),
                    })
                }
            }
        };
    let frame = match w.frame_spec.as_deref() {
        Some(fs) if fs.frame_type != FrameType::Undefined as i32 => {
            let kind = if fs.frame_type == FrameType::Row as i32 {
                "ROWS"
            } else {
                "RANGE"
            };
            Some(format!(
                "{kind} BETWEEN {} AND {}",
                boundary(fs.lower.as_deref(), true)?,
                boundary(fs.upper.as_deref(), false)?
            ))
        }
        _ => None,
    };
    let spec = |texts: bool| {
        let mut s: Vec<String> = Vec::new();
        if !parts.is_empty() {
            let p: Vec<String> = parts
                .iter()
                .map(|p| if texts { p.text.clone() } else { p.shown() })
                .collect();
            s.push(format!("PARTITION BY {}", p.join(", ")));
        }
        if !orders.is_empty() {
            let o: Vec<String> = orders
                .iter()
                .map(|o| if texts { o.text.clone() } else { o.shown() })
                .collect();
            s.push(format!("ORDER BY {}", o.join(", ")));
        }
        match (&frame, texts, orders.is_empty()) {
            (Some(fr), _, _) => s.push(fr.clone()),
            (None, true, _) => {}
            (None, false, true) => {
                s.push("ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING".into())
            }
            (None, false, false) => {
                s.push("RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".into())
            }
        }
        s.join(" ")
    };
    Ok(Sql::new(
        format!("{} OVER ({})", f.text, spec(true)),
        format!("{} OVER ({})", f.shown(), spec(false)),
    ))
}

/// Generators: as whole select items, SQL names their columns (`col`, `pos`, `key`, ..).
pub(crate) const GENERATORS: &[&str] = &[
    "explode",
    "explode_outer",
    "posexplode",
    "posexplode_outer",
    "inline",
    "inline_outer",
    "stack",
    "json_tuple",
];

fn function(scope: &Scope, name: &str, args: &[proto::Expression], distinct: bool) -> Result<Sql> {
    let a = args
        .iter()
        .map(|e| sql(scope, e))
        .collect::<Result<Vec<_>>>()?;
    let mut a = a;
    // `from_json(col, StructType)`: PySpark sends the schema as its JSON; Sluice's SQL reads DDL.
    if matches!(name, "from_json" | "from_csv") && a.len() >= 2 {
        if let Some(ExprType::Literal(pe::Literal {
            literal_type: Some(pe::literal::LiteralType::String(schema)),
            ..
        })) = &args[1].expr_type
        {
            if schema.trim_start().starts_with('{') {
                let t = super::types::parse_type_text(schema)?;
                let ddl = sluice::schema::spark_type_name(&t);
                a[1] = Sql::new(super::literal::string_sql(&ddl), ddl);
            }
        }
    }
    let is_count_star = name == "count" && a.len() == 1 && a[0].star == Some(None);
    let a = if is_count_star {
        a
    } else {
        expand_stars(scope, a)
    };
    let arity = |n: usize| -> Result<()> {
        if a.len() == n {
            Ok(())
        } else {
            Err(ConnectError::analysis(
                sluice::error::class::WRONG_NUM_ARGS,
                format!("{name} takes {n} arguments, got {}", a.len()),
            ))
        }
    };
    let infix = |op: &str| -> Result<Sql> {
        arity(2)?;
        Ok(Sql::new(
            format!("({} {op} {})", a[0].text, a[1].text),
            format!("({} {op} {})", a[0].shown(), a[1].shown()),
        ))
    };
    let postfix = |op: &str| -> Result<Sql> {
        arity(1)?;
        Ok(Sql::new(
            format!("({} {op})", a[0].text),
            format!("({} {op})", a[0].shown()),
        ))
    };
    match name {
        "==" => return infix("="),
        "!=" => return infix("!="),
        "<" | "<=" | ">" | ">=" | "<=>" | "+" | "-" | "*" | "/" | "%" | "&" | "|" | "^" => {
            return infix(name)
        }
        "and" => return infix("AND"),
        "or" => return infix("OR"),
        "not" => {
            arity(1)?;
            return Ok(Sql::new(
                format!("(NOT {})", a[0].text),
                format!("(NOT {})", a[0].shown()),
            ));
        }
        "negative" => {
            arity(1)?;
            return Ok(Sql::new(
                format!("(- {})", a[0].text),
                format!("(- {})", a[0].shown()),
            ));
        }
        "isNull" | "isnull" if a.len() == 1 => return postfix("IS NULL"),
        "isNotNull" | "isnotnull" if a.len() == 1 => return postfix("IS NOT NULL"),
        "isNaN" => return call("isnan", &a, false),
        "in" => {
            if a.is_empty() {
                return Err(ConnectError::illegal_argument("isin without a column"));
            }
            let vals: Vec<String> = a[1..].iter().map(|v| v.text.clone()).collect();
            let shown: Vec<String> = a[1..].iter().map(|v| v.shown()).collect();
            if vals.is_empty() {
                return Ok(Sql::new(
                    "false".into(),
                    format!("({} IN ())", a[0].shown()),
                ));
            }
            return Ok(Sql::new(
                format!("({} IN ({}))", a[0].text, vals.join(", ")),
                format!("({} IN ({}))", a[0].shown(), shown.join(", ")),
            ));
        }
        "like" | "rlike" | "ilike" if a.len() == 2 => {
            let op = name.to_ascii_uppercase();
            let shown = match name {
                "like" => format!("{} LIKE {}", a[0].shown(), a[1].shown()),
                "rlike" => format!("RLIKE({}, {})", a[0].shown(), a[1].shown()),
                _ => format!("ilike({}, {})", a[0].shown(), a[1].shown()),
            };
            return Ok(Sql::new(
                format!("({} {op} {})", a[0].text, a[1].text),
                shown,
            ));
        }
        "when" => {
            if a.len() < 2 {
                return Err(ConnectError::illegal_argument(
                    "when needs a condition and a value",
                ));
            }
            let (mut text, mut shown) = ("CASE".to_string(), "CASE".to_string());
            for pair in a.chunks(2) {
                if let [c, v] = pair {
                    text.push_str(&format!(" WHEN {} THEN {}", c.text, v.text));
                    shown.push_str(&format!(" WHEN {} THEN {}", c.shown(), v.shown()));
                } else {
                    text.push_str(&format!(" ELSE {}", pair[0].text));
                    shown.push_str(&format!(" ELSE {}", pair[0].shown()));
                }
            }
            return Ok(Sql::new(format!("{text} END"), format!("{shown} END")));
        }
        "startsWith" => return call("startswith", &a, false),
        "endsWith" => return call("endswith", &a, false),
        "getField" | "getItem" => {
            arity(2)?;
            let shown = if name == "getField" {
                format!("{}.{}", a[0].shown(), a[1].shown())
            } else {
                format!("{}[{}]", a[0].shown(), a[1].shown())
            };
            return Ok(Sql::new(format!("{}[{}]", a[0].text, a[1].text), shown));
        }
        "count" if is_count_star => {
            return Ok(Sql::new("count(*)".into(), "count(1)".into()));
        }
        "window" | "session_window" | "window_time" => {
            let mut s = call(name, &a, false)?;
            s.name = Some(name.to_string());
            return Ok(s);
        }
        "struct" => {
            // Spark names a struct's fields by their expressions' names (`col1`.. otherwise).
            let mut inner = Vec::new();
            for (i, arg) in a.iter().enumerate() {
                let field = arg.name.clone().unwrap_or_else(|| format!("col{}", i + 1));
                inner.push(format!(
                    "{}, {}",
                    super::literal::string_sql(&field),
                    arg.text
                ));
            }
            let shown: Vec<String> = a.iter().map(Sql::shown).collect();
            return Ok(Sql::new(
                format!("named_struct({})", inner.join(", ")),
                format!("struct({})", shown.join(", ")),
            ));
        }
        _ => {}
    }
    let mut s = call(name, &a, distinct)?;
    if GENERATORS.contains(&name.to_ascii_lowercase().as_str()) {
        s.name = None;
    }
    Ok(s)
}

fn call(name: &str, a: &[Sql], distinct: bool) -> Result<Sql> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(ConnectError::not_supported(format!(
            "the function {name:?}"
        )));
    }
    let d = if distinct { "DISTINCT " } else { "" };
    let texts: Vec<String> = a.iter().map(|x| x.text.clone()).collect();
    let shown: Vec<String> = a.iter().map(Sql::shown).collect();
    Ok(Sql::new(
        format!("{name}({d}{})", texts.join(", ")),
        format!("{name}({d}{})", shown.join(", ")),
    ))
}
