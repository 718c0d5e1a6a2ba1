//! Relations that keep, drop, patch or turn rows column by column: `df.na.fill`,
//! `df.na.drop`, `df.sample`, `df.to(schema)` and `df.unpivot`.

use arrow::datatypes::DataType;

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::expression::literal::LiteralType;

use super::expr::quote;
use super::{Planned, Planner, Source};

fn input<'r>(r: &'r Option<Box<proto::Relation>>, node: &str) -> Result<&'r proto::Relation> {
    r.as_deref().ok_or_else(|| {
        ConnectError::illegal_argument(format!("the {node} relation was sent without its input"))
    })
}

/// The considered columns: `cols` (ignoring case) or every column.
fn considered(src: &Source, types: &[DataType], cols: &[String]) -> Result<Vec<usize>> {
    if cols.is_empty() {
        return Ok((0..types.len()).collect());
    }
    cols.iter()
        .map(|c| {
            src.cols
                .iter()
                .position(|(_, n)| n.eq_ignore_ascii_case(c))
                .ok_or_else(|| {
                    ConnectError::analysis(
                        sluice::error::class::UNRESOLVED_COLUMN_WITH_SUGGESTION,
                        format!(
                            "A column `{c}` cannot be resolved; the columns are {:?}",
                            src.cols.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>()
                        ),
                    )
                })
        })
        .collect()
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

/// Does a fill value of this kind apply to a column of type `t` (Spark's `na.fill` rules)?
fn fills(value: &LiteralType, t: &DataType) -> bool {
    match value {
        LiteralType::Long(_) | LiteralType::Integer(_) | LiteralType::Double(_) => t.is_numeric(),
        LiteralType::String(_) => {
            matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        }
        LiteralType::Boolean(_) => t == &DataType::Boolean,
        _ => false,
    }
}

/// `df.na.fill(value, subset)` / `df.na.fill({col: value})`: nulls (and NaNs of float columns)
/// of the columns whose type the value fits become the value.
pub(crate) fn fill_na(p: &Planner<'_>, f: &proto::NaFill) -> Result<Planned> {
    let c = p.plan(input(&f.input, "FillNa")?)?;
    let src = p.source(&c)?;
    let types: Vec<DataType> = c
        .frame
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    let targets = considered(&src, &types, &f.cols)?;
    let values: Vec<&proto::expression::Literal> = f.values.iter().collect();
    let value_of = |k: usize| -> Result<&proto::expression::Literal> {
        match values.as_slice() {
            [one] => Ok(one),
            many if many.len() == targets.len() => Ok(many[k]),
            _ => Err(ConnectError::illegal_argument(
                "na.fill takes one value, or one value per column",
            )),
        }
    };
    let mut items = Vec::new();
    for (i, (_, name)) in src.cols.iter().enumerate() {
        let r = src.col_ref(i);
        let item = match targets.iter().position(|t| *t == i) {
            Some(k) => {
                let lit = value_of(k)?;
                match &lit.literal_type {
                    Some(v) if fills(v, &types[i]) || values.len() > 1 => {
                        let v = super::literal::literal(lit)?.text;
                        let t = super::types::sql_type_text(&types[i])?;
                        if is_float(&types[i]) {
                            format!(
                                "CASE WHEN {r} IS NULL OR isnan({r}) THEN CAST({v} AS {t}) ELSE \
                                 {r} END AS {}",
                                quote(name)
                            )
                        } else {
                            format!("coalesce({r}, CAST({v} AS {t})) AS {}", quote(name))
                        }
                    }
                    _ => r,
                }
            }
            None => r,
        };
        items.push(item);
    }
    p.select(&src, &items, c.ids)
}

/// `df.na.drop(how, thresh, subset)`: the rows with at least `min_non_nulls` non-null (and
/// non-NaN) values among the considered columns; all of them by default (`how="any"`).
pub(crate) fn drop_na(p: &Planner<'_>, d: &proto::NaDrop) -> Result<Planned> {
    let c = p.plan(input(&d.input, "DropNa")?)?;
    let src = p.source(&c)?;
    let types: Vec<DataType> = c
        .frame
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    let targets = considered(&src, &types, &d.cols)?;
    let need = d
        .min_non_nulls
        .map(i64::from)
        .unwrap_or(targets.len() as i64);
    let terms: Vec<String> = targets
        .iter()
        .map(|&i| {
            let r = src.col_ref(i);
            if is_float(&types[i]) {
                format!("CASE WHEN {r} IS NULL OR isnan({r}) THEN 0 ELSE 1 END")
            } else {
                format!("CASE WHEN {r} IS NULL THEN 0 ELSE 1 END")
            }
        })
        .collect();
    let cond = if terms.is_empty() {
        format!("0 >= {need}")
    } else {
        format!("({}) >= {need}", terms.join(" + "))
    };
    let mut wheres = src.wheres.clone();
    wheres.push(cond);
    let filtered = Source { wheres, ..src };
    let frame = p.sql(&format!("SELECT * {}", filtered.clause()))?;
    Ok(Planned {
        frame,
        ids: c.ids,
        from: None,
    })
}

/// `df.sample(fraction, seed)` without replacement: each row kept when its random draw falls in
/// `[lower, upper)` (Spark's Bernoulli sampling; the draws are Sluice's own).
pub(crate) fn sample(p: &Planner<'_>, s: &proto::Sample) -> Result<Planned> {
    if s.with_replacement.unwrap_or(false) {
        return Err(ConnectError::not_supported("sample(withReplacement=True)"));
    }
    let c = p.plan(input(&s.input, "Sample")?)?;
    let src = p.source(&c)?;
    let seed = s.seed.map(|x| x.to_string()).unwrap_or_default();
    let draw = "`__sluice_draw`";
    let items: Vec<String> = (0..src.cols.len()).map(|i| src.col_ref(i)).collect();
    let inner = p.select(
        &src,
        &[items.join(", "), format!("rand({seed}) AS {draw}")],
        Vec::new(),
    )?;
    let v = p.view(&inner.frame)?;
    let names: Vec<String> = src.cols.iter().map(|(_, n)| quote(n)).collect();
    let frame = p.sql(&format!(
        "SELECT {} FROM {v} WHERE {draw} >= {} AND {draw} < {}",
        names.join(", "),
        s.lower_bound,
        s.upper_bound
    ))?;
    Ok(Planned {
        frame,
        ids: c.ids,
        from: None,
    })
}

/// `df.to(schema)`: the schema's columns, found by name and cast to its types.
pub(crate) fn to_schema(p: &Planner<'_>, t: &proto::ToSchema) -> Result<Planned> {
    let c = p.plan(input(&t.input, "ToSchema")?)?;
    let src = p.source(&c)?;
    let schema = t
        .schema
        .as_ref()
        .ok_or_else(|| ConnectError::illegal_argument("df.to(schema) without its schema"))?;
    let fields = match super::types::from_proto(schema)? {
        DataType::Struct(fields) => fields,
        other => {
            return Err(ConnectError::illegal_argument(format!(
                "df.to takes a struct schema, got {other}"
            )))
        }
    };
    let mut items = Vec::new();
    for f in fields.iter() {
        let i = src
            .cols
            .iter()
            .position(|(_, n)| n.eq_ignore_ascii_case(f.name()))
            .ok_or_else(|| {
                ConnectError::analysis(
                    sluice::error::class::UNRESOLVED_COLUMN_WITH_SUGGESTION,
                    format!("df.to: the column `{}` is not in the DataFrame", f.name()),
                )
            })?;
        items.push(format!(
            "CAST({} AS {}) AS {}",
            src.col_ref(i),
            super::types::sql_type_text(f.data_type())?,
            quote(f.name())
        ));
    }
    p.select(&src, &items, c.ids)
}

/// `df.unpivot(ids, values, variableColumnName, valueColumnName)` (`melt`): one row per input
/// row and value column, `ids` kept, the value column's name and value in two columns.
pub(crate) fn unpivot(p: &Planner<'_>, u: &proto::Unpivot) -> Result<Planned> {
    let c = p.plan(input(&u.input, "Unpivot")?)?;
    let src = p.source(&c)?;
    let ids = u
        .ids
        .iter()
        .map(|e| p.expr(&src, e))
        .collect::<Result<Vec<_>>>()?;
    let values: Vec<super::expr::Sql> = match &u.values {
        Some(v) => v
            .values
            .iter()
            .map(|e| p.expr(&src, e))
            .collect::<Result<Vec<_>>>()?,
        // Every column that is not an id.
        None => {
            let id_names: Vec<String> = ids.iter().map(|i| i.shown()).collect();
            (0..src.cols.len())
                .filter(|&i| {
                    !id_names
                        .iter()
                        .any(|n| n.eq_ignore_ascii_case(&src.cols[i].1))
                })
                .map(|i| super::expr::Sql {
                    text: src.col_ref(i),
                    name: Some(src.cols[i].1.clone()),
                    item: None,
                    star: None,
                })
                .collect()
        }
    };
    if values.is_empty() {
        return Err(ConnectError::analysis(
            sluice::error::class::UNPIVOT_REQUIRES_VALUE_COLUMNS,
            "unpivot needs at least one value column",
        ));
    }
    let id_items: Vec<String> = ids.iter().map(|i| i.select_item()).collect();
    let selects = values
        .iter()
        .map(|v| {
            let mut items = id_items.clone();
            items.push(format!(
                "{} AS {}",
                super::literal::string_sql(&v.shown()),
                quote(&u.variable_column_name)
            ));
            items.push(format!("{} AS {}", v.text, quote(&u.value_column_name)));
            format!("SELECT {} {}", items.join(", "), src.clause())
        })
        .collect::<Vec<_>>();
    let frame = p.sql(&selects.join(" UNION ALL "))?;
    Ok(Planned {
        frame,
        ids: c.ids,
        from: None,
    })
}
