//! Plans built as PySpark 4.2 builds them (`pyspark/sql/connect/plan.py`, `column.py`,
//! `functions/builtin.py`), planned into frames: schemas, `is_streaming`, and rows. The
//! builders of the messages are here; [`batch`], [`combine`], [`reshape`], [`stream`] and
//! [`schema`] hold the tests.

use std::sync::Arc;

use arrow::array::{Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::*;

mod batch;
mod combine;
mod reshape;
mod schema;
mod stream;
use crate::proto::expression::{self as pe, literal::LiteralType, ExprType};
use crate::session::{ConnectSession, SessionSettings};

fn session() -> Arc<ConnectSession> {
    ConnectSession::new("s", "u", SessionSettings::default()).unwrap()
}

fn rel(id: i64, rt: RelType) -> proto::Relation {
    proto::Relation {
        common: Some(proto::RelationCommon {
            plan_id: Some(id),
            ..Default::default()
        }),
        rel_type: Some(rt),
    }
}

fn e(t: ExprType) -> proto::Expression {
    proto::Expression {
        common: None,
        expr_type: Some(t),
    }
}

fn col(name: &str) -> proto::Expression {
    e(ExprType::UnresolvedAttribute(pe::UnresolvedAttribute {
        unparsed_identifier: name.into(),
        plan_id: None,
        is_metadata_column: None,
    }))
}

fn col_of(name: &str, plan_id: i64) -> proto::Expression {
    e(ExprType::UnresolvedAttribute(pe::UnresolvedAttribute {
        unparsed_identifier: name.into(),
        plan_id: Some(plan_id),
        is_metadata_column: None,
    }))
}

fn lit(v: LiteralType) -> proto::Expression {
    e(ExprType::Literal(pe::Literal {
        data_type: None,
        literal_type: Some(v),
    }))
}

fn int(v: i32) -> proto::Expression {
    lit(LiteralType::Integer(v))
}

fn string(v: &str) -> proto::Expression {
    lit(LiteralType::String(v.into()))
}

fn call(name: &str, args: Vec<proto::Expression>) -> proto::Expression {
    e(ExprType::UnresolvedFunction(pe::UnresolvedFunction {
        function_name: name.into(),
        arguments: args,
        is_distinct: false,
        is_user_defined_function: false,
        is_internal: None,
    }))
}

fn alias(x: proto::Expression, name: &str) -> proto::Expression {
    e(ExprType::Alias(Box::new(pe::Alias {
        expr: Some(Box::new(x)),
        name: vec![name.into()],
        metadata: None,
    })))
}

fn local(id: i64, batch: &RecordBatch) -> proto::Relation {
    rel(
        id,
        RelType::LocalRelation(proto::LocalRelation {
            data: Some(crate::ipc::write_batch(batch).unwrap().into()),
            schema: None,
        }),
    )
}

/// `createDataFrame([(1, "a"), (2, "b"), (3, "c")], ["id", "name"])` (ids `id`, names given).
fn people(id: i64) -> proto::Relation {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
        ],
    )
    .unwrap();
    local(id, &batch)
}

fn project(id: i64, input: proto::Relation, exprs: Vec<proto::Expression>) -> proto::Relation {
    rel(
        id,
        RelType::Project(Box::new(proto::Project {
            input: Some(Box::new(input)),
            expressions: exprs,
        })),
    )
}

fn filter(id: i64, input: proto::Relation, cond: proto::Expression) -> proto::Relation {
    rel(
        id,
        RelType::Filter(Box::new(proto::Filter {
            input: Some(Box::new(input)),
            condition: Some(cond),
        })),
    )
}

fn names(f: &StreamFrame) -> Vec<String> {
    f.schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

/// The rows as `a|b` strings, sorted.
fn rows(f: &StreamFrame) -> Vec<String> {
    let opts = FormatOptions::default().with_null("null");
    let mut out = Vec::new();
    for b in f.collect().unwrap() {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for i in 0..b.num_rows() {
            out.push(
                fmts.iter()
                    .map(|f| f.value(i).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    out.sort();
    out
}

fn agg(
    id: i64,
    input: proto::Relation,
    keys: Vec<proto::Expression>,
    aggs: Vec<proto::Expression>,
) -> proto::Relation {
    rel(
        id,
        RelType::Aggregate(Box::new(proto::Aggregate {
            input: Some(Box::new(input)),
            group_type: proto::aggregate::GroupType::Groupby as i32,
            grouping_expressions: keys,
            aggregate_expressions: aggs,
            pivot: None,
            grouping_sets: vec![],
        })),
    )
}

fn micros(text: &str) -> i64 {
    let (d, t) = text.split_once(' ').unwrap();
    let days = {
        let mut it = d.split('-').map(|x| x.parse::<i64>().unwrap());
        let (y, m, dd) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        // days from civil (Howard Hinnant)
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + dd - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146097 + doe - 719468
    };
    let mut it = t.split(':').map(|x| x.parse::<i64>().unwrap());
    let (h, mi, se) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    ((days * 24 + h) * 60 + mi) * 60_000_000 + se * 1_000_000
}
