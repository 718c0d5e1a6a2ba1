//! The leaves of a plan: `spark.read`/`spark.readStream` (a named table or a data source with
//! format, schema, options and paths), `spark.sql` (with its parameters), local data
//! (`createDataFrame`), and `spark.range`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use sluice::StreamFrame;

use crate::error::{ConnectError, Result};
use crate::proto;
use crate::proto::read::ReadType;

use super::expr::{self, Scope};
use super::{Planned, Planner};

/// `spark.read..load(..)`, `spark.readStream..load(..)`, `spark.table(..)`.
pub(crate) fn read(p: &Planner<'_>, r: &proto::Read) -> Result<StreamFrame> {
    match r.read_type.as_ref() {
        Some(ReadType::NamedTable(t)) => {
            let frame = p.session.sluice.table(&t.unparsed_identifier)?;
            if r.is_streaming && !frame.is_streaming() {
                return Err(ConnectError::not_supported(format!(
                    "readStream.table({:?}) on a file table (read its folder as a stream with \
                     readStream.format(..).schema(..).load(path), or use spark.table for a \
                     batch read)",
                    t.unparsed_identifier
                )));
            }
            Ok(frame)
        }
        Some(ReadType::DataSource(ds)) => data_source(p, ds, r.is_streaming),
        None => Err(ConnectError::illegal_argument(
            "a Read relation without what to read",
        )),
    }
}

fn data_source(
    p: &Planner<'_>,
    ds: &proto::read::DataSource,
    streaming: bool,
) -> Result<StreamFrame> {
    let format = ds
        .format
        .clone()
        .filter(|f| !f.is_empty())
        .or_else(|| p.session.sluice.conf("spark.sql.sources.default"))
        .unwrap_or_else(|| "parquet".to_string());
    let schema = match ds.schema.as_deref().map(str::trim) {
        Some(s) if !s.is_empty() => Some(super::types::parse_schema(s)?),
        _ => None,
    };
    // The options are case-insensitive in Spark; `path` is one of them.
    let mut paths = ds.paths.clone();
    let mut options: Vec<(String, String)> = Vec::new();
    for (k, v) in &ds.options {
        if k.eq_ignore_ascii_case("path") {
            paths.push(v.clone());
        } else {
            options.push((k.clone(), v.clone()));
        }
    }
    options.sort();
    if streaming {
        let mut reader = p.session.sluice.read_stream().format(format.clone());
        if let Some(s) = schema {
            reader = reader.schema_ref(s);
        }
        reader = reader.options(options);
        return match paths.as_slice() {
            [] => Ok(reader.load_source()?),
            [one] => Ok(reader.load(one)?),
            _ => Err(ConnectError::illegal_argument(format!(
                "a streaming {format} source reads one directory, got {} paths",
                paths.len()
            ))),
        };
    }
    if paths.is_empty() {
        // A source without paths (kafka); others say they need one.
        let mut reader = p.session.sluice.read().format(format.clone());
        for (k, v) in &options {
            reader = reader.option(k.clone(), v);
        }
        return Ok(reader.load_source()?);
    }
    let mut frames = Vec::new();
    for path in &paths {
        let mut reader = p.session.sluice.read().format(format.clone());
        if let Some(s) = &schema {
            reader = reader.schema(&sluice::schema::schema_to_ddl(s))?;
        }
        for (k, v) in &options {
            reader = reader.option(k.clone(), v);
        }
        frames.push(reader.load(path)?);
    }
    let mut it = frames.into_iter();
    let mut out = it.next().expect("one path at least");
    for f in it {
        out = out.union(&f)?;
    }
    Ok(out)
}

/// `spark.sql(query, args)`: the parameters, literals or expressions, as SQL in their places
/// (`?` by position, `:name` by name).
#[allow(deprecated)] // `args`/`pos_args`: literals, as older clients send them
pub(crate) fn sql(p: &Planner<'_>, s: &proto::Sql) -> Result<StreamFrame> {
    let scope = Scope::default();
    let mut positional: Vec<String> = Vec::new();
    for l in &s.pos_args {
        positional.push(super::literal::literal(l)?.text);
    }
    for e in &s.pos_arguments {
        positional.push(expr::sql(&scope, e)?.text);
    }
    let mut named: Vec<(String, String)> = Vec::new();
    for (k, l) in &s.args {
        named.push((k.clone(), super::literal::literal(l)?.text));
    }
    for (k, e) in &s.named_arguments {
        named.push((k.clone(), expr::sql(&scope, e)?.text));
    }
    let query = if positional.is_empty() && named.is_empty() {
        s.query.clone()
    } else {
        substitute(&s.query, &positional, &named)?
    };
    p.sql(&query)
}

/// The query with its parameter markers replaced, outside strings, quoted names and comments.
pub(crate) fn substitute(
    q: &str,
    positional: &[String],
    named: &[(String, String)],
) -> Result<String> {
    let chars: Vec<char> = q.chars().collect();
    let mut out = String::with_capacity(q.len());
    let mut i = 0;
    let mut next_pos = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' | '"' | '`' => {
                out.push(c);
                i += 1;
                while i < chars.len() {
                    out.push(chars[i]);
                    if chars[i] == '\\' && c != '`' && i + 1 < chars.len() {
                        out.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    i += 1;
                    if chars[i - 1] == c {
                        break;
                    }
                }
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    out.push(chars[i]);
                    i += 1;
                }
            }
            '?' if !positional.is_empty() => {
                let v = positional.get(next_pos).ok_or_else(|| {
                    ConnectError::analysis(
                        sluice::error::class::UNBOUND_SQL_PARAMETER,
                        format!(
                            "the query has more `?` markers than the {} arguments given",
                            positional.len()
                        ),
                    )
                })?;
                out.push_str(v);
                next_pos += 1;
                i += 1;
            }
            ':' if chars.get(i + 1) == Some(&':') => {
                out.push_str("::");
                i += 2;
            }
            ':' if chars
                .get(i + 1)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == '_') =>
            {
                let start = i + 1;
                let mut end = start;
                while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_')
                {
                    end += 1;
                }
                let name: String = chars[start..end].iter().collect();
                match named.iter().find(|(k, _)| *k == name) {
                    Some((_, v)) => out.push_str(v),
                    None => {
                        return Err(ConnectError::analysis(
                            sluice::error::class::UNBOUND_SQL_PARAMETER,
                            format!("Found the unbound parameter: {name}. Pass it in args."),
                        ))
                    }
                }
                i = end;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// `spark.sql("... {df} ...", df=df)`: the referenced DataFrames as views under their aliases
/// while the query is planned.
pub(crate) fn with_relations(p: &Planner<'_>, w: &proto::WithRelations) -> Result<Planned> {
    for r in &w.references {
        match &r.rel_type {
            Some(proto::relation::RelType::SubqueryAlias(a)) => {
                let inner = a.input.as_deref().ok_or_else(|| {
                    ConnectError::illegal_argument("a referenced DataFrame without its plan")
                })?;
                let f = p.plan(inner)?.frame;
                f.create_or_replace_temp_view(&a.alias)?;
                p.own_view(&a.alias);
            }
            _ => {
                return Err(ConnectError::not_supported(
                    "a WithRelations reference that is not a SubqueryAlias",
                ))
            }
        }
    }
    let root = w
        .root
        .as_deref()
        .ok_or_else(|| ConnectError::illegal_argument("WithRelations without its root"))?;
    p.plan(root)
}

/// The Sluice type of a column the client sent: one timestamp type (UTC micros, no zone).
fn sluice_type(t: &DataType) -> DataType {
    match t {
        DataType::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Microsecond, None),
        other => other.clone(),
    }
}

fn conform(a: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    if a.data_type() == to {
        return Ok(a.clone());
    }
    if let (DataType::Timestamp(u1, _), DataType::Timestamp(u2, None)) = (a.data_type(), to) {
        if u1 == u2 {
            // The same UTC instants, without the zone.
            let data = a.to_data().into_builder().data_type(to.clone()).build()?;
            return Ok(arrow::array::make_array(data));
        }
    }
    Ok(arrow::compute::cast(a, to)?)
}

/// `createDataFrame(..)`: the Arrow IPC rows, renamed and cast to the schema the client gave.
pub(crate) fn local_relation(p: &Planner<'_>, l: &proto::LocalRelation) -> Result<StreamFrame> {
    let given = match l.schema.as_deref().map(str::trim) {
        Some(s) if !s.is_empty() => Some(super::types::parse_schema(s)?),
        _ => None,
    };
    let (data_schema, batches) = match &l.data {
        Some(d) if !d.is_empty() => {
            let (s, b) = crate::ipc::read_stream(d)?;
            (Some(s), b)
        }
        _ => (None, Vec::new()),
    };
    let schema: SchemaRef = match (&given, &data_schema) {
        (Some(g), _) => g.clone(),
        (None, Some(d)) => Arc::new(Schema::new(
            d.fields()
                .iter()
                .map(|f| Field::new(f.name(), sluice_type(f.data_type()), f.is_nullable()))
                .collect::<Vec<_>>(),
        )),
        (None, None) => {
            return Err(ConnectError::illegal_argument(
                "a LocalRelation without data or schema",
            ))
        }
    };
    let mut out = Vec::new();
    for b in batches {
        if b.num_columns() != schema.fields().len() {
            return Err(ConnectError::illegal_argument(format!(
                "the local data has {} columns, its schema {}",
                b.num_columns(),
                schema.fields().len()
            )));
        }
        let cols = b
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(a, f)| conform(a, f.data_type()))
            .collect::<Result<Vec<_>>>()?;
        out.push(RecordBatch::try_new(schema.clone(), cols)?);
    }
    p.batches(schema, out)
}

/// The most rows `spark.range` materialises.
const MAX_RANGE_ROWS: i128 = 50_000_000;

/// `spark.range(start, end, step)`: one non-null `id` column.
pub(crate) fn range(p: &Planner<'_>, r: &proto::Range) -> Result<StreamFrame> {
    let start = r.start.unwrap_or(0);
    let (end, step) = (r.end, r.step);
    if step == 0 {
        return Err(ConnectError::illegal_argument(
            "spark.range: the step must not be 0",
        ));
    }
    let n = (i128::from(end) - i128::from(start) + i128::from(step) - i128::from(step.signum()))
        / i128::from(step);
    let n = n.max(0);
    if n > MAX_RANGE_ROWS {
        return Err(ConnectError::not_supported(format!(
            "spark.range of {n} rows (Sluice materialises at most {MAX_RANGE_ROWS})"
        )));
    }
    // In i128: `i * step` may pass i64 on the way to a value inside [start, end).
    let ids: Int64Array = (0..n)
        .map(|i| (i128::from(start) + i * i128::from(step)) as i64)
        .collect();
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids)])?;
    p.batches(schema, vec![batch])
}
