//! The relations that combine or reshape columns: aggregates (`groupBy(..).agg(..)`, with
//! `window`/`session_window` keys), joins (plan-id-qualified conditions, `using_columns`),
//! set operations (`union`, `unionByName`, `intersect`, `subtract`), `withColumns`,
//! `withColumnsRenamed`, `drop`, `toDF`, and the collected ones (`tail`, `show`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::aggregate::GroupType;
use crate::proto::join::JoinType;
use crate::proto::set_operation::SetOpType;

use super::expr::{self, quote, Scope};
use super::{From, Planned, Planner};

fn input<'r>(r: &'r Option<Box<proto::Relation>>, node: &str) -> Result<&'r proto::Relation> {
    r.as_deref().ok_or_else(|| {
        ConnectError::illegal_argument(format!("the {node} relation was sent without its input"))
    })
}

fn same(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// `groupBy(keys).agg(aggregates)`: the keys, then the aggregates, as Spark has them.
pub(crate) fn aggregate(p: &Planner<'_>, a: &proto::Aggregate) -> Result<Planned> {
    let c = p.plan(input(&a.input, "Aggregate")?)?;
    let src = p.source(&c)?;
    let keys = a
        .grouping_expressions
        .iter()
        .map(|e| p.expr(&src, e))
        .collect::<Result<Vec<_>>>()?;
    let aggs = a
        .aggregate_expressions
        .iter()
        .map(|e| p.expr(&src, e))
        .collect::<Result<Vec<_>>>()?;
    let key_texts: Vec<String> = keys.iter().map(|k| k.text.clone()).collect();
    let group_by = match GroupType::try_from(a.group_type).unwrap_or(GroupType::Groupby) {
        GroupType::Groupby | GroupType::Unspecified => key_texts.join(", "),
        GroupType::Rollup => format!("ROLLUP({})", key_texts.join(", ")),
        GroupType::Cube => format!("CUBE({})", key_texts.join(", ")),
        GroupType::GroupingSets => {
            let sets = a
                .grouping_sets
                .iter()
                .map(|s| {
                    let items = s
                        .grouping_set
                        .iter()
                        .map(|e| Ok(p.expr(&src, e)?.text))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(format!("({})", items.join(", ")))
                })
                .collect::<Result<Vec<_>>>()?;
            format!("GROUPING SETS ({})", sets.join(", "))
        }
        GroupType::Pivot => return pivot(p, a, c, &src, &keys, &aggs),
    };
    let mut items: Vec<String> = keys.iter().map(|k| k.select_item()).collect();
    items.extend(aggs.iter().map(|a| a.select_item()));
    let mut text = format!("SELECT {} {}", items.join(", "), src.clause());
    if !group_by.is_empty() {
        text.push_str(" GROUP BY ");
        text.push_str(&group_by);
    }
    Ok(Planned {
        frame: p.sql(&text)?,
        ids: c.ids,
        from: None,
    })
}

/// `groupBy(keys).pivot(col, values).agg(aggs)`: the aggregates per key and pivot value, then
/// one column per value (`v`, or `v_agg` for several aggregates), null where a key has no row
/// of that value, as Spark's two-phase pivot has it. Without values, the distinct values of a
/// batch input, sorted.
fn pivot(
    p: &Planner<'_>,
    a: &proto::Aggregate,
    c: Planned,
    src: &super::Source,
    keys: &[expr::Sql],
    aggs: &[expr::Sql],
) -> Result<Planned> {
    let spec = a.pivot.as_ref().ok_or_else(|| {
        ConnectError::illegal_argument("a pivot aggregate without its pivot column")
    })?;
    let col = p.expr(
        src,
        spec.col
            .as_ref()
            .ok_or_else(|| ConnectError::illegal_argument("a pivot without its column"))?,
    )?;
    let mut values: Vec<expr::Sql> = spec
        .values
        .iter()
        .map(super::literal::literal)
        .collect::<Result<_>>()?;
    if values.is_empty() {
        if c.frame.is_streaming() {
            return Err(ConnectError::analysis(
                sluice::error::class::UNSUPPORTED_STREAMING_OPERATION,
                "pivot without values needs the distinct values of its input; give the values \
                 (pivot(col, [..])) or pivot a batch DataFrame",
            ));
        }
        let distinct = p.sql(&format!(
            "SELECT DISTINCT {} AS v {} ORDER BY v LIMIT 10001",
            col.text,
            src.clause()
        ))?;
        let opts = arrow::util::display::FormatOptions::default();
        for b in distinct.collect()? {
            let t = b.schema().field(0).data_type().clone();
            let f = arrow::util::display::ArrayFormatter::try_new(b.column(0).as_ref(), &opts)?;
            for i in 0..b.num_rows() {
                if b.column(0).is_null(i) {
                    continue;
                }
                let shown = f.value(i).to_string();
                let text = format!(
                    "CAST({} AS {})",
                    super::literal::string_sql(&shown),
                    super::types::sql_type_text(&t)?
                );
                values.push(expr::Sql {
                    text,
                    name: Some(shown),
                    item: None,
                    star: None,
                });
            }
        }
        if values.len() > 10_000 {
            return Err(ConnectError::analysis(
                sluice::error::class::PIVOT_VALUE_LIMIT_EXCEEDED,
                "the pivot column has more than 10000 distinct values; give the values",
            ));
        }
    }
    let pv = "`__sluice_pivot`";
    let mut inner: Vec<String> = keys.iter().map(|k| k.select_item()).collect();
    inner.push(format!("{} AS {pv}", col.text));
    for (i, ag) in aggs.iter().enumerate() {
        inner.push(format!("{} AS `__sluice_agg_{i}`", ag.text));
    }
    let mut group: Vec<String> = keys.iter().map(|k| k.text.clone()).collect();
    group.push(col.text.clone());
    let first = p.sql(&format!(
        "SELECT {} {} GROUP BY {}",
        inner.join(", "),
        src.clause(),
        group.join(", ")
    ))?;
    let v = p.view(&first)?;
    let key_names: Vec<String> = keys.iter().map(|k| k.shown()).collect();
    let mut outer: Vec<String> = key_names.iter().map(|n| quote(n)).collect();
    for val in &values {
        for (i, ag) in aggs.iter().enumerate() {
            let name = if aggs.len() == 1 {
                val.shown()
            } else {
                format!("{}_{}", val.shown(), ag.shown())
            };
            outer.push(format!(
                "max(CASE WHEN {pv} = {} THEN `__sluice_agg_{i}` END) AS {}",
                val.text,
                quote(&name)
            ));
        }
    }
    let mut text = format!("SELECT {} FROM {v}", outer.join(", "));
    if !key_names.is_empty() {
        text.push_str(" GROUP BY ");
        text.push_str(
            &key_names
                .iter()
                .map(|n| quote(n))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    Ok(Planned {
        frame: p.sql(&text)?,
        ids: c.ids,
        from: None,
    })
}

/// A join side as a FROM item: a pending FROM clause without filters as it is, else a view.
fn side(p: &Planner<'_>, s: &Planned) -> Result<(String, HashMap<i64, String>, Vec<String>)> {
    if let Some(f) = &s.from {
        if f.wheres.is_empty() {
            return Ok((f.text.clone(), f.aliases.clone(), f.qualifiers.clone()));
        }
    }
    let frame = if s.from.is_some() {
        let src = p.source(s)?;
        p.select(&src, &["*".into()], Vec::new())?.frame
    } else {
        s.frame.clone()
    };
    let v = p.view(&frame)?;
    // A filtered `df.alias("t")` keeps its name `t`.
    if let Some(f) = &s.from {
        if let [q] = f.qualifiers.as_slice() {
            if !f.text.contains(" JOIN ") {
                let aliases = s.ids.iter().map(|id| (*id, q.clone())).collect();
                return Ok((format!("{v} AS {}", quote(q)), aliases, vec![q.clone()]));
            }
        }
    }
    let aliases = s.ids.iter().map(|id| (*id, v.clone())).collect();
    Ok((v.clone(), aliases, vec![v]))
}

/// `left.join(right, on, how)`.
pub(crate) fn join(p: &Planner<'_>, j: &proto::Join) -> Result<Planned> {
    let l = p.plan(input(&j.left, "Join")?)?;
    let r = p.plan(input(&j.right, "Join")?)?;
    let (ltext, lal, lq) = side(p, &l)?;
    let (rtext, ral, rq) = side(p, &r)?;
    let jt = JoinType::try_from(j.join_type).unwrap_or(JoinType::Inner);
    let mut aliases = ral.clone();
    aliases.extend(lal.clone()); // a self-join's ids resolve to the left side, as in Spark
    let scope = Scope {
        aliases: aliases.clone(),
        ..Scope::default()
    };
    let kw = match jt {
        JoinType::Inner | JoinType::Unspecified => "JOIN",
        JoinType::FullOuter => "FULL OUTER JOIN",
        JoinType::LeftOuter => "LEFT OUTER JOIN",
        JoinType::RightOuter => "RIGHT OUTER JOIN",
        JoinType::LeftAnti => "LEFT ANTI JOIN",
        JoinType::LeftSemi => "LEFT SEMI JOIN",
        JoinType::Cross => "CROSS JOIN",
    };
    let rtext_nested = if rtext.contains(" JOIN ") {
        format!("({rtext})")
    } else {
        rtext.clone()
    };
    let mut ids = l.ids.clone();
    ids.extend(r.ids.iter().copied());
    let mut qualifiers = lq.clone();
    qualifiers.extend(rq.iter().cloned());
    if !j.using_columns.is_empty() {
        return using_join(
            p,
            j,
            jt,
            (&l, &ltext, &lq),
            (&r, &rtext_nested, &rq),
            ids,
            kw,
        );
    }
    let text = match &j.join_condition {
        Some(cond) => {
            let cond = expr::sql(&scope, cond)?.text;
            // `join(other, cond, "cross")` is an inner join on the condition, as in Spark.
            let kw = if kw == "CROSS JOIN" { "JOIN" } else { kw };
            format!("{ltext} {kw} {rtext_nested} ON {cond}")
        }
        None if matches!(
            jt,
            JoinType::Inner | JoinType::Cross | JoinType::Unspecified
        ) =>
        {
            format!("{ltext} CROSS JOIN {rtext_nested}")
        }
        None => format!("{ltext} {kw} {rtext_nested} ON true"),
    };
    let frame = p.sql(&format!("SELECT * FROM {text}"))?;
    Ok(Planned {
        frame,
        ids,
        from: Some(From {
            text,
            wheres: Vec::new(),
            aliases,
            qualifiers,
        }),
    })
}

type Side<'s> = (&'s Planned, &'s String, &'s Vec<String>);

/// A join on `using_columns`: each key once (first, coalesced for a full outer join), then the
/// left side's other columns, then the right side's, as Spark orders them.
fn using_join(
    p: &Planner<'_>,
    j: &proto::Join,
    jt: JoinType,
    (l, ltext, lq): Side<'_>,
    (r, rtext, rq): Side<'_>,
    ids: Vec<i64>,
    kw: &str,
) -> Result<Planned> {
    let lcols = cols_of(l, lq);
    let rcols = cols_of(r, rq);
    let find = |cols: &[(Option<String>, String)], n: &str, side: &str| -> Result<String> {
        cols.iter()
            .find(|(_, c)| same(c, n))
            .map(|(q, c)| qualified(q, c))
            .ok_or_else(|| {
                ConnectError::analysis(
                    sluice::error::class::UNRESOLVED_USING_COLUMN_FOR_JOIN,
                    format!("USING column `{n}` cannot be resolved on the {side} side of the join"),
                )
            })
    };
    let mut conds = Vec::new();
    let mut items = Vec::new();
    for u in &j.using_columns {
        let (lc, rc) = (find(&lcols, u, "left")?, find(&rcols, u, "right")?);
        conds.push(format!("{lc} = {rc}"));
        items.push(match jt {
            JoinType::RightOuter => format!("{rc} AS {}", quote(u)),
            JoinType::FullOuter => format!("coalesce({lc}, {rc}) AS {}", quote(u)),
            _ => format!("{lc} AS {}", quote(u)),
        });
    }
    let is_using = |n: &str| j.using_columns.iter().any(|u| same(u, n));
    for (q, c) in &lcols {
        if !is_using(c) {
            items.push(qualified(q, c));
        }
    }
    if !matches!(jt, JoinType::LeftSemi | JoinType::LeftAnti) {
        for (q, c) in &rcols {
            if !is_using(c) {
                items.push(qualified(q, c));
            }
        }
    }
    let kw = if kw == "CROSS JOIN" { "JOIN" } else { kw };
    let text = format!(
        "SELECT {} FROM {ltext} {kw} {rtext} ON {}",
        items.join(", "),
        conds.join(" AND ")
    );
    Ok(Planned {
        frame: p.sql(&text)?,
        ids,
        from: None,
    })
}

fn qualified(q: &Option<String>, c: &str) -> String {
    match q {
        Some(q) => format!("{}.{}", quote(q), quote(c)),
        None => quote(c),
    }
}

/// The columns of a join side under the qualifiers it has in the join.
fn cols_of(s: &Planned, qualifiers: &[String]) -> Vec<(Option<String>, String)> {
    s.frame
        .logical_plan()
        .schema()
        .iter()
        .map(|(q, f)| {
            let q = match (&s.from, q) {
                (Some(_), Some(q)) if qualifiers.iter().any(|x| x == q.table()) => {
                    Some(q.table().to_string())
                }
                (None, _) if qualifiers.len() == 1 => Some(qualifiers[0].clone()),
                _ => None,
            };
            (q, f.name().clone())
        })
        .collect()
}

/// `union`/`unionAll`/`unionByName`, `intersect(All)`, `subtract`/`exceptAll`.
pub(crate) fn set_op(p: &Planner<'_>, s: &proto::SetOperation) -> Result<Planned> {
    let l = p.plan(input(&s.left_input, "SetOperation")?)?;
    let r = p.plan(input(&s.right_input, "SetOperation")?)?;
    let mut ids = l.ids.clone();
    ids.extend(r.ids.iter().copied());
    let op = SetOpType::try_from(s.set_op_type).unwrap_or(SetOpType::Unspecified);
    let all = s.is_all.unwrap_or(false);
    let (lf, rf) = if s.by_name.unwrap_or(false) {
        by_name(p, &l, &r, s.allow_missing_columns.unwrap_or(false))?
    } else {
        (l.frame.clone(), r.frame.clone())
    };
    let frame = match op {
        SetOpType::Union => {
            let u = lf.union(&rf)?;
            if all {
                u
            } else {
                let v = p.view(&u)?;
                p.sql(&format!("SELECT DISTINCT * FROM {v}"))?
            }
        }
        SetOpType::Intersect | SetOpType::Except => {
            let (lv, rv) = (p.view(&lf)?, p.view(&rf)?);
            let word = if op == SetOpType::Intersect {
                "INTERSECT"
            } else {
                "EXCEPT"
            };
            let all = if all { " ALL" } else { "" };
            p.sql(&format!(
                "SELECT * FROM {lv} {word}{all} SELECT * FROM {rv}"
            ))?
        }
        SetOpType::Unspecified => {
            return Err(ConnectError::illegal_argument(
                "a set operation without its type (union, intersect, except)",
            ))
        }
    };
    Ok(Planned {
        frame,
        ids,
        from: None,
    })
}

/// Both sides with the left side's columns in its order (`unionByName`); with
/// `allowMissingColumns`, a side's missing columns are nulls and the right side's extra
/// columns come last.
fn by_name(
    p: &Planner<'_>,
    l: &Planned,
    r: &Planned,
    allow_missing: bool,
) -> Result<(sluice::StreamFrame, sluice::StreamFrame)> {
    let (ls, rs) = (l.frame.schema(), r.frame.schema());
    let mut names: Vec<(String, DataType)> = ls
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    if allow_missing {
        for f in rs.fields() {
            if !names.iter().any(|(n, _)| same(n, f.name())) {
                names.push((f.name().clone(), f.data_type().clone()));
            }
        }
    }
    let side = |s: &Planned, schema: &Schema| -> Result<sluice::StreamFrame> {
        let src = p.source(s)?;
        let mut items = Vec::new();
        for (n, t) in &names {
            match schema.fields().iter().position(|f| same(f.name(), n)) {
                Some(i) => items.push(format!("{} AS {}", src.col_ref(i), quote(n))),
                None if allow_missing => items.push(format!(
                    "CAST(NULL AS {}) AS {}",
                    super::types::sql_type_text(t)?,
                    quote(n)
                )),
                None => {
                    return Err(ConnectError::analysis(
                        sluice::error::class::NUM_COLUMNS_MISMATCH,
                        format!(
                            "unionByName: the column `{n}` is missing on one side; pass \
                             allowMissingColumns=True to fill it with nulls"
                        ),
                    ))
                }
            }
        }
        Ok(p.select(&src, &items, Vec::new())?.frame)
    };
    if !allow_missing && ls.fields().len() != rs.fields().len() {
        return Err(ConnectError::analysis(
            sluice::error::class::NUM_COLUMNS_MISMATCH,
            format!(
                "unionByName needs the same number of columns on both sides, got {} and {}",
                ls.fields().len(),
                rs.fields().len()
            ),
        ));
    }
    Ok((side(l, &ls)?, side(r, &rs)?))
}

/// `withColumn(s)`: a column of the same name (ignoring case) is replaced in its place, the
/// others are added at the end.
pub(crate) fn with_columns(p: &Planner<'_>, w: &proto::WithColumns) -> Result<Planned> {
    let c = p.plan(input(&w.input, "WithColumns")?)?;
    let src = p.source(&c)?;
    let mut new: Vec<(String, String)> = Vec::new();
    for a in &w.aliases {
        let e = a
            .expr
            .as_deref()
            .ok_or_else(|| ConnectError::illegal_argument("withColumns without an expression"))?;
        let name = match a.name.as_slice() {
            [n] => n.clone(),
            _ => {
                return Err(ConnectError::illegal_argument(
                    "withColumns takes one name per column",
                ))
            }
        };
        let text = p.expr(&src, e)?.text;
        match new.iter_mut().find(|(n, _)| same(n, &name)) {
            Some(slot) => *slot = (name, text),
            None => new.push((name, text)),
        }
    }
    let mut used = vec![false; new.len()];
    let mut items = Vec::new();
    for (i, (_, name)) in src.cols.iter().enumerate() {
        match new.iter().position(|(n, _)| same(n, name)) {
            Some(k) => {
                used[k] = true;
                items.push(format!("{} AS {}", new[k].1, quote(&new[k].0)));
            }
            None => items.push(src.col_ref(i)),
        }
    }
    for (k, (n, t)) in new.iter().enumerate() {
        if !used[k] {
            items.push(format!("{t} AS {}", quote(n)));
        }
    }
    p.select(&src, &items, c.ids)
}

/// `withColumnRenamed`/`withColumnsRenamed`: the map form and the ordered renames list.
pub(crate) fn with_columns_renamed(
    p: &Planner<'_>,
    w: &proto::WithColumnsRenamed,
) -> Result<Planned> {
    let c = p.plan(input(&w.input, "WithColumnsRenamed")?)?;
    let src = p.source(&c)?;
    let mut names: Vec<String> = src.cols.iter().map(|(_, n)| n.clone()).collect();
    let mut renames: Vec<(String, String)> = w
        .rename_columns_map
        .iter()
        .map(|(a, b)| (a.clone(), b.clone()))
        .collect();
    renames.sort();
    renames.extend(
        w.renames
            .iter()
            .map(|r| (r.col_name.clone(), r.new_col_name.clone())),
    );
    for (old, new) in &renames {
        for n in names.iter_mut() {
            if same(n, old) {
                *n = new.clone();
            }
        }
    }
    let items: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{} AS {}", src.col_ref(i), quote(n)))
        .collect();
    p.select(&src, &items, c.ids)
}

/// `drop(cols)`: by name, or a plan-id-qualified column of one join side.
pub(crate) fn drop(p: &Planner<'_>, d: &proto::Drop) -> Result<Planned> {
    let c = p.plan(input(&d.input, "Drop")?)?;
    let src = p.source(&c)?;
    let mut gone: Vec<(Option<String>, String)> =
        d.column_names.iter().map(|n| (None, n.clone())).collect();
    for e in &d.columns {
        match &e.expr_type {
            Some(proto::expression::ExprType::UnresolvedAttribute(a)) => {
                let parts = expr::name_parts(&a.unparsed_identifier)?;
                let q = a.plan_id.and_then(|id| src.scope.aliases.get(&id).cloned());
                let (q, n) = match (q, parts.as_slice()) {
                    (Some(q), [.., n]) => (Some(q), n.clone()),
                    (None, [n]) => (None, n.clone()),
                    (None, [t, n]) => (Some(t.clone()), n.clone()),
                    _ => (None, a.unparsed_identifier.clone()),
                };
                gone.push((q, n));
            }
            _ => {
                return Err(ConnectError::not_supported(
                    "drop of an expression that is not a column",
                ))
            }
        }
    }
    let with_qualifier = src.from.contains(" JOIN ");
    let items: Vec<String> = src
        .cols
        .iter()
        .enumerate()
        .filter(|(_, (q, n))| {
            !gone.iter().any(|(gq, gn)| {
                same(gn, n) && (gq.is_none() || !with_qualifier || gq.as_ref() == q.as_ref())
            })
        })
        .map(|(i, _)| src.col_ref(i))
        .collect();
    p.select(&src, &items, c.ids)
}

/// `toDF(names)`: the columns renamed by position.
pub(crate) fn to_df(p: &Planner<'_>, t: &proto::ToDf) -> Result<Planned> {
    let c = p.plan(input(&t.input, "ToDf")?)?;
    let src = p.source(&c)?;
    if t.column_names.len() != src.cols.len() {
        return Err(ConnectError::illegal_argument(format!(
            "toDF got {} names for {} columns",
            t.column_names.len(),
            src.cols.len()
        )));
    }
    let items: Vec<String> = t
        .column_names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{} AS {}", src.col_ref(i), quote(n)))
        .collect();
    p.select(&src, &items, c.ids)
}

fn collect(p: &Planned, what: &str) -> Result<Vec<RecordBatch>> {
    if p.frame.is_streaming() {
        return Err(ConnectError::analysis(
            sluice::error::class::STREAMING_QUERY_WITHOUT_WRITE_STREAM,
            format!(
                "Queries with streaming sources must be executed with writeStream.start(); \
                 {what} runs on batch DataFrames only."
            ),
        ));
    }
    Ok(p.frame.collect()?)
}

/// `df.tail(n)`: the last `n` rows.
pub(crate) fn tail(p: &Planner<'_>, t: &proto::Tail) -> Result<Planned> {
    let c = p.plan(input(&t.input, "Tail")?)?;
    let schema = c.frame.schema();
    let batches = collect(&c, "tail")?;
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    let mut skip = total.saturating_sub(t.limit.max(0) as usize);
    let mut out = Vec::new();
    for b in batches {
        if skip >= b.num_rows() {
            skip -= b.num_rows();
            continue;
        }
        out.push(b.slice(skip, b.num_rows() - skip));
        skip = 0;
    }
    Ok(Planned {
        frame: p.batches(schema, out)?,
        ids: c.ids,
        from: None,
    })
}

/// `df.show(n, truncate)`: one row, one `show_string` column holding Spark's table text.
pub(crate) fn show_string(p: &Planner<'_>, s: &proto::ShowString) -> Result<Planned> {
    let c = p.plan(input(&s.input, "ShowString")?)?;
    if s.vertical {
        return Err(ConnectError::not_supported("show(vertical=True)"));
    }
    let schema = c.frame.schema();
    let batches = collect(&c, "show")?;
    let data = sluice::BatchData {
        schema: schema.clone(),
        partitions: vec![batches],
    };
    let text =
        sluice::sink::console::show_string(&data, s.num_rows.max(0) as usize, s.truncate > 0)?;
    let out_schema = Arc::new(Schema::new(vec![Field::new(
        "show_string",
        DataType::Utf8,
        false,
    )]));
    let batch = RecordBatch::try_new(
        out_schema.clone(),
        vec![Arc::new(StringArray::from(vec![text]))],
    )?;
    Ok(Planned::of(p.batches(out_schema, vec![batch])?))
}
