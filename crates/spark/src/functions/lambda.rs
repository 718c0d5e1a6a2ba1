//! Spark's higher-order functions: `transform`, `filter`, `exists`, `forall`, `aggregate` /
//! `reduce`, `array_sort` with a comparator, `zip_with`, `map_filter`, `transform_keys`,
//! `transform_values` and `map_zip_with`, whose arguments include lambda functions
//! (`x -> x + 1`, `(acc, x) -> acc + x`).
//!
//! DataFusion's SQL planner has no lambdas. Before it plans, [`rewrite_lambdas`] turns each
//! higher-order call into a call of a Sluice function `__lambda_<name>` (`udf`) whose
//! arguments are the call's data arguments (arrays, maps, the zero of `aggregate`), the number
//! of lambdas, each lambda as a string literal (its parameter count, the lambda as written, and
//! its body with the parameters renamed `__lp0`, `__lp1`, .. and every other column it
//! references renamed `__lo0`, `__lo1`, ..), then those outer columns themselves, so a lambda
//! may close over the row's columns (`transform(prices, p -> p * rate)`). Nested lambdas are
//! rewritten innermost first: an inner lambda's reference to an outer lambda's parameter is one
//! of its outer columns.
//!
//! The function plans each body once per argument types with the session's own planner and
//! functions (a snapshot taken when the session is built, `register`): a schema of the
//! parameters and the outer columns, Spark's types for the parameters (elements, keys, values,
//! an `int` index, the accumulator). It then evaluates the body over all elements of a batch at
//! once (`eval`): the elements are the parameter column, the outer columns are repeated per
//! element. `aggregate` folds position by position (all arrays' first elements, then their
//! second, ..); `array_sort` calls the comparator per comparison.
//!
//! Spark's rules (HigherOrderFunctions.scala, checked on PySpark 3.5.7): a null array or map
//! gives null; null elements reach the lambda; `filter` / `map_filter` keep an element when the
//! body is true (null drops it); `exists` and `forall` are three-valued
//! (`spark.sql.legacy.followThreeValuedLogicInArrayExists` is true by default); the merge of
//! `aggregate` must return the zero's type; the `array_sort` comparator returns an integer and
//! a null from it is an error; `zip_with` pads the shorter array with nulls; `map_zip_with`
//! takes the keys of the first map, then the new keys of the second, a missing value is null;
//! `transform_keys` fails on a null or duplicate key. In a struct built in a body,
//! `(y, x)` / `struct(y, x)` name the fields after the columns (`col<i>` otherwise), as Spark.

mod eval;
#[cfg(test)]
mod tests;
mod udf;

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::execution::SessionState;
use datafusion::sql::sqlparser::ast::UnaryOperator;
use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr as SqlExpr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart,
    OneOrManyWithParens, Value, VisitMut,
};
use datafusion::sql::sqlparser::dialect::{Dialect, Precedence, SparkSqlDialect};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::error::{class, Result, SluiceError};

/// The prefix of the functions the rewrite calls.
const PREFIX: &str = "__lambda_";
/// The prefix of a lambda parameter in a rewritten body.
const PARAM: &str = "__lp";
/// The prefix of an outer column in a rewritten body.
const OUTER: &str = "__lo";

/// A higher-order function: how many data arguments it takes, and the parameter counts its
/// lambdas may have (the last lambdas may be optional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    Transform,
    Filter,
    Exists,
    Forall,
    Aggregate,
    Reduce,
    ArraySort,
    ZipWith,
    MapFilter,
    TransformKeys,
    TransformValues,
    MapZipWith,
}

impl Kind {
    pub(super) const ALL: [Kind; 12] = [
        Kind::Transform,
        Kind::Filter,
        Kind::Exists,
        Kind::Forall,
        Kind::Aggregate,
        Kind::Reduce,
        Kind::ArraySort,
        Kind::ZipWith,
        Kind::MapFilter,
        Kind::TransformKeys,
        Kind::TransformValues,
        Kind::MapZipWith,
    ];
    /// Spark's name.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Transform => "transform",
            Kind::Filter => "filter",
            Kind::Exists => "exists",
            Kind::Forall => "forall",
            Kind::Aggregate => "aggregate",
            Kind::Reduce => "reduce",
            Kind::ArraySort => "array_sort",
            Kind::ZipWith => "zip_with",
            Kind::MapFilter => "map_filter",
            Kind::TransformKeys => "transform_keys",
            Kind::TransformValues => "transform_values",
            Kind::MapZipWith => "map_zip_with",
        }
    }
    fn of(name: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
    }
    /// The number of data arguments before the lambdas.
    pub(super) fn data_args(self) -> usize {
        match self {
            Kind::ZipWith | Kind::MapZipWith | Kind::Aggregate | Kind::Reduce => 2,
            _ => 1,
        }
    }
    /// The parameter counts each lambda may have; lambdas after the first are optional.
    fn lambdas(self) -> &'static [&'static [usize]] {
        match self {
            Kind::Transform | Kind::Filter => &[&[1, 2]],
            Kind::Exists | Kind::Forall => &[&[1]],
            Kind::Aggregate | Kind::Reduce => &[&[2], &[1]],
            Kind::ArraySort | Kind::ZipWith => &[&[2]],
            Kind::MapFilter | Kind::TransformKeys | Kind::TransformValues => &[&[2]],
            Kind::MapZipWith => &[&[3]],
        }
    }
    /// The call's signature as Spark documents it, for error messages.
    fn usage(self) -> &'static str {
        match self {
            Kind::Transform => "transform(array, x -> ..) or transform(array, (x, i) -> ..)",
            Kind::Filter => "filter(array, x -> ..) or filter(array, (x, i) -> ..)",
            Kind::Exists => "exists(array, x -> ..)",
            Kind::Forall => "forall(array, x -> ..)",
            Kind::Aggregate => "aggregate(array, zero, (acc, x) -> .. [, acc -> ..])",
            Kind::Reduce => "reduce(array, zero, (acc, x) -> .. [, acc -> ..])",
            Kind::ArraySort => "array_sort(array, (left, right) -> ..)",
            Kind::ZipWith => "zip_with(left, right, (x, y) -> ..)",
            Kind::MapFilter => "map_filter(map, (k, v) -> ..)",
            Kind::TransformKeys => "transform_keys(map, (k, v) -> ..)",
            Kind::TransformValues => "transform_values(map, (k, v) -> ..)",
            Kind::MapZipWith => "map_zip_with(map1, map2, (k, v1, v2) -> ..)",
        }
    }
}

/// Registers the `__lambda_*` functions into `state`, planning their bodies with a snapshot of
/// `state` as it is now (call it after the other functions are registered).
pub(super) fn register(state: &mut SessionState) -> Result<()> {
    use datafusion::execution::FunctionRegistry;
    let planner = Arc::new(udf::BodyPlanner::default());
    for kind in Kind::ALL {
        state.register_udf(Arc::new(udf::HigherOrder::udf(
            kind,
            udf::Handle::Strong(planner.clone()),
        )))?;
    }
    // The snapshot's own lambda functions (nested lambdas) refer to it weakly: no cycle.
    let mut snapshot = state.clone();
    for kind in Kind::ALL {
        snapshot.register_udf(Arc::new(udf::HigherOrder::udf(
            kind,
            udf::Handle::Weak(Arc::downgrade(&planner)),
        )))?;
    }
    planner.set(snapshot);
    Ok(())
}

/// The dialect hook for `exists(array, x -> ..)`: `EXISTS (` followed by something other than
/// a query is Spark's `exists` function, not the subquery predicate (also after `NOT`).
pub fn parse_exists_call(parser: &mut Parser) -> Option<std::result::Result<SqlExpr, ParserError>> {
    let is = |t: &Token, k: Keyword| matches!(t, Token::Word(w) if w.keyword == k);
    let not = is(&parser.peek_token_ref().token, Keyword::NOT);
    let at = usize::from(not);
    let word = match &parser.peek_nth_token_ref(at).token {
        Token::Word(w) if w.keyword == Keyword::EXISTS => w.value.clone(),
        _ => return None,
    };
    if parser.peek_nth_token_ref(at + 1).token != Token::LParen {
        return None;
    }
    match &parser.peek_nth_token_ref(at + 2).token {
        Token::Word(w)
            if matches!(w.keyword, Keyword::SELECT | Keyword::WITH | Keyword::VALUES) =>
        {
            return None
        }
        Token::LParen => return None,
        _ => {}
    }
    if not {
        parser.next_token();
        let precedence = SparkSqlDialect {}.prec_value(Precedence::UnaryNot);
        return Some(parser.parse_subexpr(precedence).map(|e| SqlExpr::UnaryOp {
            op: UnaryOperator::Not,
            expr: Box::new(e),
        }));
    }
    parser.next_token();
    Some(parser.parse_function(ObjectName::from(vec![Ident::new(word)])))
}

/// Rewrites every higher-order call in `node` into its `__lambda_*` function (see the module
/// doc). Returns whether anything changed. A lambda anywhere else is an error.
pub fn rewrite_lambdas<V: VisitMut>(node: &mut V) -> Result<bool> {
    let mut changed = false;
    let mut error = None;
    let _ = visit_expressions_mut(node, |e: &mut SqlExpr| {
        let SqlExpr::Function(f) = &*e else {
            return ControlFlow::Continue(());
        };
        let FunctionArguments::List(list) = &f.args else {
            return ControlFlow::Continue(());
        };
        if !list.args.iter().any(|a| lambda_of(a).is_some()) {
            if plain_array_sort(f) {
                // Spark's `array_sort(array)` sorts ascending with nulls last.
                if let SqlExpr::Function(f) = e {
                    if let FunctionArguments::List(l) = &mut f.args {
                        l.args.push(unnamed(literal("ASC".into())));
                        l.args.push(unnamed(literal("NULLS LAST".into())));
                        changed = true;
                    }
                }
            }
            return ControlFlow::Continue(());
        }
        let name = match f.name.0.last() {
            Some(ObjectNamePart::Identifier(id)) => id.value.clone(),
            _ => f.name.to_string(),
        };
        let result = match Kind::of(&name) {
            Some(kind) if f.name.0.len() == 1 => rewrite_call(kind, f),
            _ => Err(SluiceError::query(
                class::INVALID_LAMBDA_FUNCTION_CALL_NON_HIGHER_ORDER_FUNCTION,
                format!(
                    "A lambda function should only be used in a higher order function. However, \
                     its class is `{name}`, which is not a higher order function (in `{f}`). \
                     The higher-order functions are transform, filter, exists, forall, \
                     aggregate, reduce, array_sort, zip_with, map_filter, transform_keys, \
                     transform_values and map_zip_with."
                ),
            )),
        };
        match result {
            Ok(new) => {
                *e = SqlExpr::Function(new);
                changed = true;
                ControlFlow::Continue(())
            }
            Err(err) => {
                error = Some(err);
                ControlFlow::Break(())
            }
        }
    });
    match error {
        Some(e) => Err(e),
        None => Ok(changed),
    }
}

/// `array_sort(x)`: one plain argument.
fn plain_array_sort(f: &Function) -> bool {
    f.name.0.len() == 1
        && f.name.to_string().eq_ignore_ascii_case("array_sort")
        && matches!(&f.args, FunctionArguments::List(l) if l.args.len() == 1
            && matches!(l.args[0], FunctionArg::Unnamed(FunctionArgExpr::Expr(_))))
}

fn lambda_of(a: &FunctionArg) -> Option<&datafusion::sql::sqlparser::ast::LambdaFunction> {
    match a {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::Lambda(l))) => Some(l),
        _ => None,
    }
}

fn unnamed(e: SqlExpr) -> FunctionArg {
    FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
}

fn literal(text: String) -> SqlExpr {
    SqlExpr::Value(Value::SingleQuotedString(text).into())
}

/// The `__lambda_*` call for one higher-order call `f` of `kind`.
fn rewrite_call(kind: Kind, f: &Function) -> Result<Function> {
    let name = kind.name();
    let FunctionArguments::List(list) = &f.args else {
        return Err(SluiceError::internal(
            "rewrite_call without an argument list",
        ));
    };
    if f.filter.is_some()
        || f.over.is_some()
        || !f.within_group.is_empty()
        || list.duplicate_treatment.is_some()
        || !list.clauses.is_empty()
    {
        return Err(SluiceError::query(
            class::PARSE_SYNTAX_ERROR,
            format!("`{name}` is a scalar function: it takes no DISTINCT, FILTER, OVER or WITHIN GROUP (in `{f}`)"),
        ));
    }
    let n_data = kind.data_args();
    let shapes = kind.lambdas();
    let given = list.args.len();
    if given < n_data + 1 || given > n_data + shapes.len() {
        let wanted = if shapes.len() == 1 {
            format!("{}", n_data + 1)
        } else {
            format!("{} or {}", n_data + 1, n_data + shapes.len())
        };
        return Err(SluiceError::query(
            class::WRONG_NUM_ARGS,
            format!(
                "[WRONG_NUM_ARGS.WITHOUT_SUGGESTION] The `{name}` requires {wanted} parameters \
                 but the actual number is {given} (in `{f}`). Call it as {}.",
                kind.usage()
            ),
        ));
    }
    let mut data = Vec::new();
    let mut lambdas = Vec::new();
    for (i, a) in list.args.iter().enumerate() {
        match (i < n_data, lambda_of(a)) {
            (true, None) => match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => data.push(x.clone()),
                other => {
                    return Err(SluiceError::query(
                        class::PARSE_SYNTAX_ERROR,
                        format!(
                            "argument {} of `{name}` must be an expression, got `{other}`",
                            i + 1
                        ),
                    ))
                }
            },
            (false, Some(l)) => lambdas.push(l),
            (true, Some(l)) => {
                return Err(SluiceError::query(
                    class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!(
                        "argument {} of `{name}` must be a value, not the lambda function `{l}`. \
                         Call it as {}.",
                        i + 1,
                        kind.usage()
                    ),
                ))
            }
            (false, None) => {
                return Err(SluiceError::not_supported_yet(format!(
                    "argument {} of `{name}` is `{a}`; Sluice takes only a lambda function there \
                     (e.g. `x -> ..`). Call it as {}.",
                    i + 1,
                    kind.usage()
                )))
            }
        }
    }
    let mut outers: Vec<SqlExpr> = Vec::new();
    let mut encoded = Vec::new();
    for (l, arities) in lambdas.iter().zip(shapes) {
        let params: Vec<&Ident> = match &l.params {
            OneOrManyWithParens::One(p) => vec![&p.name],
            OneOrManyWithParens::Many(ps) => ps.iter().map(|p| &p.name).collect(),
        };
        if !arities.contains(&params.len()) {
            let want = arities
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" or ");
            return Err(SluiceError::query(
                class::INVALID_LAMBDA_FUNCTION_CALL_NUM_ARGS_MISMATCH,
                format!(
                    "Invalid lambda function call. The higher order function `{name}` expects a \
                     lambda function of {want} arguments, but `{l}` takes {}. Call it as {}.",
                    params.len(),
                    kind.usage()
                ),
            ));
        }
        for (i, p) in params.iter().enumerate() {
            if params[..i]
                .iter()
                .any(|q| q.value.eq_ignore_ascii_case(&p.value))
            {
                return Err(SluiceError::query(
                    class::INVALID_LAMBDA_FUNCTION_CALL_DUPLICATE_ARG_NAMES,
                    format!(
                        "Invalid lambda function call. The lambda function `{l}` of `{name}` has \
                         duplicate arguments `{}`. Please, consider to rename the argument \
                         names.",
                        p.value
                    ),
                ));
            }
        }
        let names: Vec<String> = params.iter().map(|p| p.value.clone()).collect();
        let mut body = (*l.body).clone();
        name_struct_fields(&mut body);
        rename_references(&mut body, &names, &mut outers);
        let written = l.to_string();
        encoded.push(literal(format!(
            "{}:{}:{written}{body}",
            names.len(),
            written.len()
        )));
    }
    let mut args: Vec<FunctionArg> = data.into_iter().map(unnamed).collect();
    args.push(unnamed(SqlExpr::Value(
        Value::Number(lambdas.len().to_string(), false).into(),
    )));
    args.extend(encoded.into_iter().map(unnamed));
    args.extend(outers.into_iter().map(unnamed));
    let mut out = f.clone();
    out.name = ObjectName::from(vec![Ident::new(format!("{PREFIX}{name}"))]);
    out.args = FunctionArguments::List(FunctionArgumentList {
        duplicate_treatment: None,
        args,
        clauses: Vec::new(),
    });
    Ok(out)
}

/// `(a, b)` and `struct(a, b)` in a body as `named_struct('a', a, 'b', b)`: Spark names the
/// fields after the columns, `col<i>` (1-based) for other expressions.
fn name_struct_fields(body: &mut SqlExpr) {
    let _ = visit_expressions_mut(body, |e: &mut SqlExpr| {
        let items: Vec<SqlExpr> = match &*e {
            SqlExpr::Tuple(items) => items.clone(),
            SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case("struct") => {
                match &f.args {
                    FunctionArguments::List(l)
                        if l.args.iter().all(|a| {
                            matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Expr(_)))
                        }) =>
                    {
                        l.args
                            .iter()
                            .filter_map(|a| match a {
                                FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => Some(x.clone()),
                                _ => None,
                            })
                            .collect()
                    }
                    _ => return ControlFlow::Continue(()),
                }
            }
            _ => return ControlFlow::Continue(()),
        };
        let mut args = Vec::new();
        for (i, x) in items.into_iter().enumerate() {
            let field = match &x {
                SqlExpr::Identifier(id) => id.value.clone(),
                SqlExpr::CompoundIdentifier(parts) => {
                    parts.last().map(|p| p.value.clone()).unwrap_or_default()
                }
                _ => format!("col{}", i + 1),
            };
            args.push(unnamed(literal(field)));
            args.push(unnamed(x));
        }
        *e = SqlExpr::Function(Function {
            name: ObjectName::from(vec![Ident::new("named_struct")]),
            uses_odbc_syntax: false,
            parameters: FunctionArguments::None,
            args: FunctionArguments::List(FunctionArgumentList {
                duplicate_treatment: None,
                args,
                clauses: Vec::new(),
            }),
            filter: None,
            null_treatment: None,
            over: None,
            within_group: Vec::new(),
        });
        ControlFlow::<()>::Continue(())
    });
}

/// Renames the parameters `names` in `body` to `__lp<i>` and every other column reference to
/// `__lo<j>`, `j` its index in `outers` (shared by the lambdas of one call).
fn rename_references(body: &mut SqlExpr, names: &[String], outers: &mut Vec<SqlExpr>) {
    let param = |id: &Ident| {
        names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(&id.value))
            .map(|i| Ident::new(format!("{PARAM}{i}")))
    };
    let _ = visit_expressions_mut(body, |e: &mut SqlExpr| {
        match &*e {
            SqlExpr::Identifier(id) => {
                *e = match param(id) {
                    Some(p) => SqlExpr::Identifier(p),
                    None => SqlExpr::Identifier(outer(e.clone(), outers)),
                };
            }
            SqlExpr::CompoundIdentifier(parts) => {
                if let Some(p) = parts.first().and_then(param) {
                    let mut parts = parts.clone();
                    parts[0] = p;
                    *e = SqlExpr::CompoundIdentifier(parts);
                } else {
                    *e = SqlExpr::Identifier(outer(e.clone(), outers));
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

fn outer(reference: SqlExpr, outers: &mut Vec<SqlExpr>) -> Ident {
    let text = reference.to_string();
    let i = match outers.iter().position(|o| o.to_string() == text) {
        Some(i) => i,
        None => {
            outers.push(reference);
            outers.len() - 1
        }
    };
    Ident::new(format!("{OUTER}{i}"))
}
