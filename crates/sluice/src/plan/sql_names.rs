//! Spark's name resolution over the SQL AST, before DataFusion plans it.
//!
//! DataFusion lower-cases unquoted identifiers and then matches names exactly; Spark matches
//! them by `spark.sql.caseSensitive` ([`super::names::NameRules`]). This pass walks each query
//! with its scopes (FROM relations from the catalog, CTEs, derived tables and their aliases,
//! LATERAL VIEW aliases, SELECT aliases for GROUP BY / HAVING / ORDER BY, outer scopes for
//! correlated subqueries) and rewrites every identifier it resolves to the *quoted* spelling of
//! what it names: columns, struct fields, relation qualifiers and table names. Aliases the user
//! wrote are quoted as written, so they keep their case. An unaliased reference in a projection
//! that resolved to a differently spelled column (or to a struct field) gets the user's spelling
//! as alias, as Spark names that output column (`SELECT leftkey` → column `leftkey`, reading
//! `leftKey`; `SELECT s.inner` → `inner`).
//!
//! Identifiers it cannot resolve (names of things it does not model, e.g. table functions) are
//! left as written, so DataFusion treats them as before.

use std::collections::HashSet;
use std::ops::ControlFlow;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, GroupByExpr, Ident, JoinConstraint, JoinOperator, ObjectNamePart, OrderBy,
    OrderByKind, Query, Select, SelectItem, SelectItemQualifiedWildcardKind, SetExpr, Statement,
    TableAlias, TableFactor, VisitMut, VisitorMut,
};

use super::names::{ambiguous, NameRules};
use crate::error::{Result, SluiceError};

/// Tables by name, as the session's catalog has them.
pub(crate) trait Tables {
    /// The registered spelling and schema of the table `written` names (one-part names).
    fn table(&self, written: &str, rules: NameRules) -> Result<Option<(String, SchemaRef)>>;
}

/// A column in scope: its spelling and, when known, its type (for struct fields).
#[derive(Debug, Clone)]
struct Col {
    name: String,
    ty: Option<DataType>,
}

/// A relation in scope: its qualifier's spelling and its columns (`None`: not known).
#[derive(Debug, Clone)]
struct Rel {
    name: Option<String>,
    cols: Option<Vec<Col>>,
}

type Ctes = Vec<(String, Vec<Col>)>;

struct Scope<'p> {
    rels: Vec<Rel>,
    aliases: Vec<Col>,
    parent: Option<&'p Scope<'p>>,
}

/// Which names an expression may reference besides the FROM columns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aliases {
    /// WHERE, ON, the projection: columns only.
    No,
    /// GROUP BY, HAVING: columns first, then SELECT aliases.
    After,
    /// ORDER BY: SELECT aliases first.
    First,
}

/// Resolves the names of `statement` in place.
pub(crate) fn resolve_statement(
    statement: &mut Statement,
    rules: NameRules,
    tables: &dyn Tables,
) -> Result<()> {
    let r = Resolver { rules, tables };
    match statement {
        Statement::Query(q) => r.query(q, &Vec::new(), None).map(|_| ()),
        Statement::CreateView(v) => r.query(&mut v.query, &Vec::new(), None).map(|_| ()),
        Statement::Insert(i) => match &mut i.source {
            Some(q) => r.query(q, &Vec::new(), None).map(|_| ()),
            None => Ok(()),
        },
        Statement::Explain { statement, .. } => resolve_statement(statement, rules, tables),
        _ => Ok(()),
    }
}

/// Resolves one expression (with an optional alias) against one relation's columns, for the
/// DataFrame API's SQL expressions (`select_sql`, `filter_sql`).
pub(crate) fn resolve_standalone_expr(
    expr: &mut SqlExpr,
    columns: &[(Option<String>, String, DataType)],
    rules: NameRules,
    tables: &dyn Tables,
) -> Result<Option<Ident>> {
    let r = Resolver { rules, tables };
    let mut rels: Vec<Rel> = Vec::new();
    for (q, name, ty) in columns {
        let col = Col {
            name: name.clone(),
            ty: Some(ty.clone()),
        };
        match rels.iter_mut().find(|r| &r.name == q) {
            Some(rel) => rel.cols.get_or_insert_with(Vec::new).push(col),
            None => rels.push(Rel {
                name: q.clone(),
                cols: Some(vec![col]),
            }),
        }
    }
    let scope = Scope {
        rels,
        aliases: Vec::new(),
        parent: None,
    };
    r.projection_item(expr, &scope, &Vec::new())
}

fn quoted(name: &str) -> Ident {
    Ident::with_quote('`', name)
}

struct Resolver<'a> {
    rules: NameRules,
    tables: &'a dyn Tables,
}

/// What a reference resolved to.
struct Resolved {
    parts: Vec<Ident>,
    ty: Option<DataType>,
    /// The reference reads a struct field (Spark names the output after the field).
    field: bool,
}

impl Resolver<'_> {
    fn query(&self, q: &mut Query, ctes: &Ctes, parent: Option<&Scope>) -> Result<Vec<Col>> {
        let mut ctes = ctes.clone();
        if let Some(with) = &mut q.with {
            for cte in &mut with.cte_tables {
                let cols = self.query(&mut cte.query, &ctes, None)?;
                let cols = alias_columns(&mut cte.alias, cols);
                cte.alias.name = quoted(&cte.alias.name.value);
                ctes.retain(|(n, _)| !self.rules.matches(&cte.alias.name.value, n));
                ctes.push((cte.alias.name.value.clone(), cols));
            }
        }
        match &mut *q.body {
            SetExpr::Select(s) => self.select(s, &ctes, parent, q.order_by.as_mut()),
            body => {
                let cols = self.set_expr(body, &ctes, parent)?;
                if let Some(order_by) = &mut q.order_by {
                    let scope = Scope {
                        rels: vec![Rel {
                            name: None,
                            cols: Some(cols.clone()),
                        }],
                        aliases: Vec::new(),
                        parent,
                    };
                    self.order_by(order_by, &scope, &ctes)?;
                }
                Ok(cols)
            }
        }
    }

    fn set_expr(
        &self,
        body: &mut SetExpr,
        ctes: &Ctes,
        parent: Option<&Scope>,
    ) -> Result<Vec<Col>> {
        match body {
            SetExpr::Select(s) => self.select(s, ctes, parent, None),
            SetExpr::Query(q) => self.query(q, ctes, parent),
            SetExpr::SetOperation { left, right, .. } => {
                let cols = self.set_expr(left, ctes, parent)?;
                self.set_expr(right, ctes, parent)?;
                Ok(cols)
            }
            _ => Ok(Vec::new()),
        }
    }

    fn order_by(&self, order_by: &mut OrderBy, scope: &Scope, ctes: &Ctes) -> Result<()> {
        if let OrderByKind::Expressions(exprs) = &mut order_by.kind {
            for e in exprs {
                self.expr(&mut e.expr, scope, ctes, Aliases::First)?;
            }
        }
        Ok(())
    }

    fn select(
        &self,
        s: &mut Select,
        ctes: &Ctes,
        parent: Option<&Scope>,
        order_by: Option<&mut OrderBy>,
    ) -> Result<Vec<Col>> {
        let mut scope = Scope {
            rels: Vec::new(),
            aliases: Vec::new(),
            parent,
        };
        for twj in &mut s.from {
            self.factor(&mut twj.relation, ctes, &mut scope)?;
            for join in &mut twj.joins {
                self.factor(&mut join.relation, ctes, &mut scope)?;
                match constraint(&mut join.join_operator) {
                    Some(JoinConstraint::On(e)) => self.expr(e, &scope, ctes, Aliases::No)?,
                    Some(JoinConstraint::Using(names)) => {
                        for n in names {
                            if let [ObjectNamePart::Identifier(id)] = n.0.as_mut_slice() {
                                if let Some(r) =
                                    self.lookup(std::slice::from_ref(id), &scope, Aliases::No)?
                                {
                                    if let [p] = r.parts.as_slice() {
                                        *id = p.clone();
                                    }
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        for lv in &mut s.lateral_views {
            self.expr(&mut lv.lateral_view, &scope, ctes, Aliases::No)?;
            for a in &mut lv.lateral_col_alias {
                *a = quoted(&a.value);
            }
            scope.rels.push(Rel {
                name: lv
                    .lateral_view_name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .map(|i| i.value.clone()),
                cols: Some(
                    lv.lateral_col_alias
                        .iter()
                        .map(|a| Col {
                            name: a.value.clone(),
                            ty: None,
                        })
                        .collect(),
                ),
            });
        }
        if let Some(w) = &mut s.selection {
            self.expr(w, &scope, ctes, Aliases::No)?;
        }
        let mut out = Vec::new();
        for item in &mut s.projection {
            match item {
                SelectItem::UnnamedExpr(e) => {
                    let alias = self.projection_item(e, &scope, ctes)?;
                    let name = alias
                        .as_ref()
                        .map(|a| a.value.clone())
                        .or_else(|| output_name(e));
                    let ty = self.type_of(e, &scope);
                    if let Some(alias) = alias {
                        let expr = std::mem::replace(
                            e,
                            SqlExpr::value(datafusion::sql::sqlparser::ast::Value::Null),
                        );
                        *item = SelectItem::ExprWithAlias { expr, alias };
                    }
                    if let Some(name) = name {
                        out.push(Col { name, ty });
                    }
                }
                SelectItem::ExprWithAlias { expr, alias } => {
                    self.expr(expr, &scope, ctes, Aliases::No)?;
                    *alias = quoted(&alias.value);
                    let col = Col {
                        name: alias.value.clone(),
                        ty: self.type_of(expr, &scope),
                    };
                    scope.aliases.push(col.clone());
                    out.push(col);
                }
                SelectItem::ExprWithAliases { expr, aliases } => {
                    self.expr(expr, &scope, ctes, Aliases::No)?;
                    for a in aliases {
                        *a = quoted(&a.value);
                        out.push(Col {
                            name: a.value.clone(),
                            ty: None,
                        });
                    }
                }
                SelectItem::Wildcard(_) => {
                    for r in &scope.rels {
                        out.extend(r.cols.iter().flatten().cloned());
                    }
                }
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(n),
                    _,
                ) => {
                    if let [ObjectNamePart::Identifier(id)] = n.0.as_mut_slice() {
                        if let Some(rel) = scope.rels.iter().find(|r| {
                            r.name
                                .as_deref()
                                .is_some_and(|q| self.rules.matches(&id.value, q))
                        }) {
                            *id = quoted(rel.name.as_deref().unwrap_or_default());
                            out.extend(rel.cols.iter().flatten().cloned());
                        }
                    }
                }
                SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::Expr(e), _) => {
                    self.expr(e, &scope, ctes, Aliases::No)?;
                }
            }
        }
        if let GroupByExpr::Expressions(exprs, _) = &mut s.group_by {
            for e in exprs {
                self.expr(e, &scope, ctes, Aliases::After)?;
            }
        }
        if let Some(h) = &mut s.having {
            self.expr(h, &scope, ctes, Aliases::After)?;
        }
        if let Some(q) = &mut s.qualify {
            self.expr(q, &scope, ctes, Aliases::After)?;
        }
        for e in s.cluster_by.iter_mut().chain(s.distribute_by.iter_mut()) {
            self.expr(e, &scope, ctes, Aliases::After)?;
        }
        for e in &mut s.sort_by {
            self.expr(&mut e.expr, &scope, ctes, Aliases::First)?;
        }
        if let Some(order_by) = order_by {
            // ORDER BY also sees the projection's outputs by their names.
            scope.aliases = out.clone();
            self.order_by(order_by, &scope, ctes)?;
        }
        Ok(out)
    }

    /// Resolves an unaliased projection item; returns the alias Spark's naming needs.
    fn projection_item(
        &self,
        e: &mut SqlExpr,
        scope: &Scope,
        ctes: &Ctes,
    ) -> Result<Option<Ident>> {
        let written: Option<Vec<Ident>> = match e {
            SqlExpr::Identifier(id) => Some(vec![id.clone()]),
            SqlExpr::CompoundIdentifier(parts) => Some(parts.clone()),
            _ => None,
        };
        let Some(written) = written else {
            self.expr(e, scope, ctes, Aliases::No)?;
            return Ok(None);
        };
        let Some(r) = self.lookup(&written, scope, Aliases::No)? else {
            return Ok(None);
        };
        let (w, n) = (written.last(), r.parts.last());
        let alias = match (w, n) {
            (Some(w), Some(n)) if r.field || w.value != n.value => Some(quoted(&w.value)),
            _ => None,
        };
        *e = to_expr(r.parts);
        Ok(alias)
    }

    fn factor(&self, tf: &mut TableFactor, ctes: &Ctes, scope: &mut Scope) -> Result<()> {
        match tf {
            TableFactor::Table {
                name, alias, args, ..
            } if args.is_none() => {
                let mut rel = Rel {
                    name: name
                        .0
                        .last()
                        .and_then(|p| p.as_ident())
                        .map(|i| i.value.clone()),
                    cols: None,
                };
                if let [ObjectNamePart::Identifier(id)] = name.0.as_mut_slice() {
                    if let Some((n, cols)) = ctes
                        .iter()
                        .rev()
                        .find(|(n, _)| self.rules.matches(&id.value, n))
                    {
                        *id = quoted(n);
                        rel.name = Some(n.clone());
                        rel.cols = Some(cols.clone());
                    } else if let Some((n, schema)) = self.tables.table(&id.value, self.rules)? {
                        *id = quoted(&n);
                        rel.name = Some(n);
                        rel.cols = Some(
                            schema
                                .fields()
                                .iter()
                                .map(|f| Col {
                                    name: f.name().clone(),
                                    ty: Some(f.data_type().clone()),
                                })
                                .collect(),
                        );
                    }
                }
                if let Some(a) = alias {
                    rel.cols = rel.cols.map(|c| alias_columns(a, c));
                    a.name = quoted(&a.name.value);
                    rel.name = Some(a.name.value.clone());
                }
                scope.rels.push(rel);
            }
            TableFactor::Derived {
                lateral,
                subquery,
                alias,
                ..
            } => {
                let cols = if *lateral {
                    self.query(subquery, ctes, Some(&*scope))?
                } else {
                    self.query(subquery, ctes, scope.parent)?
                };
                let mut rel = Rel {
                    name: None,
                    cols: Some(cols),
                };
                if let Some(a) = alias {
                    rel.cols = rel.cols.map(|c| alias_columns(a, c));
                    a.name = quoted(&a.name.value);
                    rel.name = Some(a.name.value.clone());
                }
                scope.rels.push(rel);
            }
            TableFactor::NestedJoin {
                table_with_joins,
                alias,
            } => {
                let mut inner = Scope {
                    rels: Vec::new(),
                    aliases: Vec::new(),
                    parent: scope.parent,
                };
                self.factor(&mut table_with_joins.relation, ctes, &mut inner)?;
                for join in &mut table_with_joins.joins {
                    self.factor(&mut join.relation, ctes, &mut inner)?;
                    if let Some(JoinConstraint::On(e)) = constraint(&mut join.join_operator) {
                        self.expr(e, &inner, ctes, Aliases::No)?;
                    }
                }
                match alias {
                    Some(a) => {
                        let cols: Option<Vec<Col>> = inner
                            .rels
                            .iter()
                            .map(|r| r.cols.clone())
                            .collect::<Option<Vec<_>>>()
                            .map(|v| v.concat());
                        a.name = quoted(&a.name.value);
                        scope.rels.push(Rel {
                            name: Some(a.name.value.clone()),
                            cols,
                        });
                    }
                    None => scope.rels.extend(inner.rels),
                }
            }
            other => {
                let name = match other {
                    TableFactor::Table { alias, .. }
                    | TableFactor::TableFunction { alias, .. }
                    | TableFactor::Function { alias, .. }
                    | TableFactor::UNNEST { alias, .. } => {
                        alias.as_ref().map(|a| a.name.value.clone())
                    }
                    _ => None,
                };
                scope.rels.push(Rel { name, cols: None });
            }
        }
        Ok(())
    }

    /// Resolves the references of `e` (not inside nested queries, which get their own scope).
    fn expr(&self, e: &mut SqlExpr, scope: &Scope, ctes: &Ctes, aliases: Aliases) -> Result<()> {
        let mut v = ExprVisitor {
            r: self,
            scope,
            ctes,
            aliases,
            depth: 0,
            skip: HashSet::new(),
        };
        match e.visit(&mut v) {
            ControlFlow::Break(err) => Err(err),
            ControlFlow::Continue(()) => Ok(()),
        }
    }

    /// What `parts` (an identifier or a compound identifier) names in `scope`.
    fn lookup(&self, parts: &[Ident], scope: &Scope, aliases: Aliases) -> Result<Option<Resolved>> {
        let Some(first) = parts.first() else {
            return Ok(None);
        };
        if aliases == Aliases::First && parts.len() == 1 {
            if let Some(a) = self.rules.pick(
                &first.value,
                scope.aliases.iter().map(|c| c.name.as_str()),
                "column",
            )? {
                return Ok(Some(Resolved {
                    parts: vec![quoted(a)],
                    ty: None,
                    field: false,
                }));
            }
        }
        // A qualified column: `rel.col[.field...]`.
        if parts.len() >= 2 {
            let rels: Vec<&Rel> = scope
                .rels
                .iter()
                .filter(|r| {
                    r.name
                        .as_deref()
                        .is_some_and(|n| self.rules.matches(&first.value, n))
                })
                .collect();
            if let [rel] = rels.as_slice() {
                if let Some(cols) = &rel.cols {
                    if let Some(c) = self.rules.pick(
                        &parts[1].value,
                        cols.iter().map(|c| c.name.as_str()),
                        "column",
                    )? {
                        let col = cols.iter().find(|x| x.name == c);
                        let ty = col.and_then(|c| c.ty.clone());
                        let (fields, ty) = self.fields(&parts[2..], ty)?;
                        let mut out =
                            vec![quoted(rel.name.as_deref().unwrap_or_default()), quoted(c)];
                        let field = !fields.is_empty();
                        out.extend(fields);
                        return Ok(Some(Resolved {
                            parts: out,
                            ty,
                            field,
                        }));
                    }
                }
            }
        }
        // An unqualified column `col[.field...]`.
        let mut found: Vec<&Col> = Vec::new();
        let mut open = false;
        for rel in &scope.rels {
            match &rel.cols {
                Some(cols) => found.extend(
                    cols.iter()
                        .filter(|c| self.rules.matches(&first.value, &c.name)),
                ),
                None => open = true,
            }
        }
        let mut spellings: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        spellings.sort_unstable();
        spellings.dedup();
        match spellings.len() {
            0 => {}
            1 => {
                let ty = found.iter().find_map(|c| c.ty.clone());
                let (fields, ty) = self.fields(&parts[1..], ty)?;
                let mut out = vec![quoted(spellings[0])];
                let field = !fields.is_empty();
                out.extend(fields);
                return Ok(Some(Resolved {
                    parts: out,
                    ty,
                    field,
                }));
            }
            _ => return Err(ambiguous(&first.value, &spellings)),
        }
        if self.rules.case_sensitive && !open {
            // A near miss of a column in scope is Spark's UNRESOLVED_COLUMN.
            let all: Vec<&str> = scope
                .rels
                .iter()
                .flat_map(|r| r.cols.iter().flatten().map(|c| c.name.as_str()))
                .collect();
            self.rules.pick(
                &first.value,
                all.iter().copied(),
                "column or function parameter",
            )?;
        }
        if aliases == Aliases::After && parts.len() == 1 {
            if let Some(a) = self.rules.pick(
                &first.value,
                scope.aliases.iter().map(|c| c.name.as_str()),
                "column",
            )? {
                return Ok(Some(Resolved {
                    parts: vec![quoted(a)],
                    ty: None,
                    field: false,
                }));
            }
        }
        match scope.parent {
            Some(p) if !open => self.lookup(parts, p, Aliases::No),
            _ => Ok(None),
        }
    }

    /// Struct fields `written` of a value of type `ty`, in the struct's spelling.
    fn fields(
        &self,
        written: &[Ident],
        mut ty: Option<DataType>,
    ) -> Result<(Vec<Ident>, Option<DataType>)> {
        let mut out = Vec::new();
        for w in written {
            match &ty {
                Some(DataType::Struct(fs)) => {
                    match self.rules.pick(
                        &w.value,
                        fs.iter().map(|f| f.name().as_str()),
                        "field",
                    )? {
                        Some(n) => {
                            let f = fs
                                .iter()
                                .find(|f| f.name() == n)
                                .map(|f| f.data_type().clone());
                            out.push(quoted(n));
                            ty = f;
                        }
                        None => {
                            out.push(w.clone());
                            ty = None;
                        }
                    }
                }
                _ => {
                    out.push(w.clone());
                    ty = None;
                }
            }
        }
        Ok((out, ty))
    }

    fn type_of(&self, e: &SqlExpr, scope: &Scope) -> Option<DataType> {
        let parts: Vec<Ident> = match e {
            SqlExpr::Identifier(id) => vec![id.clone()],
            SqlExpr::CompoundIdentifier(p) => p.clone(),
            _ => return None,
        };
        self.lookup(&parts, scope, Aliases::No)
            .ok()
            .flatten()
            .and_then(|r| r.ty)
    }
}

/// The output name DataFusion gives an unaliased identifier.
fn output_name(e: &SqlExpr) -> Option<String> {
    match e {
        SqlExpr::Identifier(id) => Some(id.value.clone()),
        SqlExpr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()),
        _ => None,
    }
}

fn to_expr(mut parts: Vec<Ident>) -> SqlExpr {
    if parts.len() == 1 {
        SqlExpr::Identifier(parts.remove(0))
    } else {
        SqlExpr::CompoundIdentifier(parts)
    }
}

/// Columns renamed by an alias's column list (`AS t(a, b)`), quoted as written.
fn alias_columns(alias: &mut TableAlias, mut cols: Vec<Col>) -> Vec<Col> {
    for (i, c) in alias.columns.iter_mut().enumerate() {
        c.name = quoted(&c.name.value);
        match cols.get_mut(i) {
            Some(col) => col.name = c.name.value.clone(),
            None => cols.push(Col {
                name: c.name.value.clone(),
                ty: None,
            }),
        }
    }
    cols
}

fn constraint(op: &mut JoinOperator) -> Option<&mut JoinConstraint> {
    use JoinOperator as J;
    match op {
        J::Join(c)
        | J::Inner(c)
        | J::Left(c)
        | J::LeftOuter(c)
        | J::Right(c)
        | J::RightOuter(c)
        | J::FullOuter(c)
        | J::CrossJoin(c)
        | J::Semi(c)
        | J::LeftSemi(c)
        | J::RightSemi(c)
        | J::Anti(c)
        | J::LeftAnti(c)
        | J::RightAnti(c)
        | J::StraightJoin(c) => Some(c),
        J::AsOf { constraint, .. } => Some(constraint),
        _ => None,
    }
}

/// The names of a chain of `.name` accesses, if it is only that.
fn dot_fields(chain: &[datafusion::sql::sqlparser::ast::AccessExpr]) -> Option<Vec<String>> {
    chain
        .iter()
        .map(|a| match a {
            datafusion::sql::sqlparser::ast::AccessExpr::Dot(SqlExpr::Identifier(id)) => {
                Some(id.value.clone())
            }
            _ => None,
        })
        .collect()
}

/// `get_field(e, 'name')`.
fn get_field(e: SqlExpr, name: &str) -> SqlExpr {
    use datafusion::sql::sqlparser::ast::{
        Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments,
        ObjectName, Value,
    };
    SqlExpr::Function(Function {
        name: ObjectName::from(vec![Ident::new("get_field")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)),
                FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::value(
                    Value::SingleQuotedString(name.to_string()),
                ))),
            ],
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

struct ExprVisitor<'a, 'r> {
    r: &'a Resolver<'r>,
    scope: &'a Scope<'a>,
    ctes: &'a Ctes,
    aliases: Aliases,
    depth: usize,
    /// Nodes already resolved as part of their parent (the fields of `a.b['k'].c`).
    skip: HashSet<*const SqlExpr>,
}

impl VisitorMut for ExprVisitor<'_, '_> {
    type Break = SluiceError;

    fn pre_visit_query(&mut self, _q: &mut Query) -> ControlFlow<SluiceError> {
        self.depth += 1;
        ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _q: &mut Query) -> ControlFlow<SluiceError> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<SluiceError> {
        if self.depth > 0 || self.skip.contains(&(e as *const SqlExpr)) {
            return ControlFlow::Continue(());
        }
        let result = (|| -> Result<()> {
            match e {
                SqlExpr::Subquery(q)
                | SqlExpr::Exists { subquery: q, .. }
                | SqlExpr::InSubquery { subquery: q, .. } => {
                    self.r.query(q, self.ctes, Some(self.scope))?;
                }
                SqlExpr::Identifier(id) => {
                    if let Some(r) =
                        self.r
                            .lookup(std::slice::from_ref(id), self.scope, self.aliases)?
                    {
                        *e = to_expr(r.parts);
                    }
                }
                SqlExpr::CompoundIdentifier(parts) => {
                    if let Some(r) = self.r.lookup(parts, self.scope, self.aliases)? {
                        *e = to_expr(r.parts);
                    }
                }
                SqlExpr::CompoundFieldAccess { root, access_chain } => {
                    // `a.b['k']` / `s.f[0].g`: the root is a reference; `.name`s are fields.
                    let written: Vec<Ident> = match &**root {
                        SqlExpr::Identifier(id) => vec![id.clone()],
                        SqlExpr::CompoundIdentifier(p) => p.clone(),
                        _ => Vec::new(),
                    };
                    if written.is_empty() {
                        // `window(ts, '10 seconds').end`: fields of a computed struct, which
                        // DataFusion plans only as `get_field`.
                        if let Some(fields) = dot_fields(access_chain) {
                            let mut cur = (**root).clone();
                            for f in fields {
                                cur = get_field(cur, &f);
                            }
                            *e = cur;
                            return Ok(());
                        }
                    }
                    if !written.is_empty() {
                        if let Some(r) = self.r.lookup(&written, self.scope, self.aliases)? {
                            **root = to_expr(r.parts);
                        }
                        self.skip.insert(&**root as *const SqlExpr);
                    }
                    for a in access_chain.iter() {
                        if let datafusion::sql::sqlparser::ast::AccessExpr::Dot(d) = a {
                            self.skip.insert(d as *const SqlExpr);
                        }
                    }
                }
                _ => {}
            }
            Ok(())
        })();
        match result {
            Ok(()) => ControlFlow::Continue(()),
            Err(err) => ControlFlow::Break(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};
    use datafusion::sql::sqlparser::dialect::SparkSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    use std::sync::Arc;

    /// Tables `events(eventId, userId)` and `users(userId, Name)`.
    struct Fake;
    impl Tables for Fake {
        fn table(&self, written: &str, rules: NameRules) -> Result<Option<(String, SchemaRef)>> {
            let f = |n: &str| Field::new(n, DataType::Utf8, true);
            for (name, cols) in [
                ("events", ["eventId", "userId"]),
                ("users", ["userId", "Name"]),
            ] {
                if rules.matches(written, name) {
                    let s = Schema::new(cols.iter().map(|c| f(c)).collect::<Vec<_>>());
                    return Ok(Some((name.to_string(), Arc::new(s))));
                }
            }
            Ok(None)
        }
    }

    fn resolve(sql: &str) -> Result<String> {
        let mut st = Parser::parse_sql(&SparkSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        let rules = NameRules {
            case_sensitive: false,
        };
        resolve_statement(&mut st, rules, &Fake)?;
        Ok(st.to_string())
    }

    #[test]
    fn references_take_the_schema_spelling_and_projections_the_written_one() {
        assert_eq!(
            resolve("SELECT userid, E.EVENTID AS id FROM Events e WHERE USERID = 'a'").unwrap(),
            "SELECT `userId` AS `userid`, `e`.`eventId` AS `id` FROM `events` `e` WHERE `userId` = 'a'"
        );
    }

    #[test]
    fn ctes_subqueries_joins_and_correlated_references_have_their_scopes() {
        let out = resolve(
            "WITH u AS (SELECT userid AS Uid, name FROM users) \
             SELECT x.UID, ev.eventid FROM (SELECT * FROM U) x JOIN events ev ON x.uid = ev.USERID \
             WHERE EXISTS (SELECT 1 FROM users WHERE users.NAME = x.NAME)",
        )
        .unwrap();
        assert!(out.contains("`x`.`Uid` AS `UID`"), "{out}");
        assert!(out.contains("ON `x`.`Uid` = `ev`.`userId`"), "{out}");
        assert!(out.contains("`users`.`Name` = `x`.`name`"), "{out}");
    }

    #[test]
    fn unknown_names_are_left_for_datafusion() {
        let q = "SELECT nothing FROM elsewhere";
        assert_eq!(resolve(q).unwrap(), q);
        let e = resolve("SELECT userid FROM events JOIN users ON true").unwrap();
        // the same spelling on both sides: DataFusion decides (e.g. USING)
        assert!(e.starts_with("SELECT `userId` AS `userid`"), "{e}");
    }
}
