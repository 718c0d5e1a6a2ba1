//! Tests of `live`.

use super::*;
use arrow::array::{Float64Array, Int64Array};
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::functions_aggregate::{
    approx_distinct::approx_distinct_udaf, average::avg_udaf, count::count_udaf, min_max::max_udaf,
    min_max::min_udaf, sum::sum_udaf,
};
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::col;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("d", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("m", DataType::Decimal128(10, 2), true),
        Field::new(
            "t",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
            true,
        ),
    ]))
}

fn agg(f: Arc<AggregateUDF>, column: &str) -> AggFn {
    let schema = schema();
    let expr = AggregateExprBuilder::new(f, vec![col(column, &schema).unwrap()])
        .schema(schema)
        .alias("a")
        .build()
        .unwrap();
    AggFn {
        n_state: expr.state_fields().unwrap().len(),
        expr: Arc::new(expr),
        filter: None,
    }
}

fn held(aggs: Vec<AggFn>) -> bool {
    let rows = RecordBatch::new_empty(schema());
    LiveAggregation::for_aggregates(&aggs, &rows)
        .unwrap()
        .is_some()
}

#[test]
fn sums_counts_averages_and_integer_extremes_are_held_other_states_are_not() {
    assert!(held(vec![
        agg(count_udaf(), "s"),
        agg(sum_udaf(), "i"),
        agg(sum_udaf(), "d"),
        agg(avg_udaf(), "d"),
        agg(min_udaf(), "i"),
        agg(max_udaf(), "t"),
    ]));
    // A float's extremes (NaN's order), a string's, a decimal's sum, a sketch: in the store.
    for other in [
        agg(max_udaf(), "d"),
        agg(min_udaf(), "s"),
        agg(sum_udaf(), "m"),
        agg(approx_distinct_udaf(), "i"),
    ] {
        let name = other.expr.name().to_string();
        assert!(!held(vec![agg(count_udaf(), "i"), other]), "{name}");
    }
}

#[test]
fn held_fields_merge_partial_states_as_the_accumulators_do() {
    let rows = RecordBatch::new_empty(schema());
    let specs = |a: AggFn| {
        LiveAggregation::for_aggregates(&[a], &rows)
            .unwrap()
            .unwrap()
            .fields
    };
    // sum: null until a value comes, nulls skipped, integers wrap as DataFusion's do.
    let sum = specs(agg(sum_udaf(), "i"));
    let mut c = new_column(&sum[0]).unwrap();
    for _ in 0..3 {
        c.push_empty();
    }
    let part: ArrayRef = Arc::new(Int64Array::from(vec![Some(5), None, Some(i64::MAX)]));
    c.merge(&[0, 1, 2], part.as_ref()).unwrap();
    let part: ArrayRef = Arc::new(Int64Array::from(vec![Some(-2), None, Some(1)]));
    c.merge(&[0, 1, 2], part.as_ref()).unwrap();
    let got = c.gather(&[2, 1, 0]).unwrap();
    assert_eq!(
        got.as_ref(),
        &Int64Array::from(vec![Some(i64::MIN), None, Some(3)]) as &dyn Array
    );
    // count: zero when empty, never null.
    let count = specs(agg(count_udaf(), "i"));
    let mut c = new_column(&count[0]).unwrap();
    c.push_empty();
    c.push_empty();
    c.merge(&[1], &Int64Array::from(vec![4])).unwrap();
    assert_eq!(
        c.gather(&[0, 1]).unwrap().as_ref(),
        &Int64Array::from(vec![0, 4]) as &dyn Array
    );
    // min over a timestamp keeps the type; a reused slot starts empty again.
    let min = specs(agg(min_udaf(), "t"));
    let mut c = new_column(&min[0]).unwrap();
    c.push_empty();
    let ts = |v: Vec<Option<i64>>| -> ArrayRef {
        Arc::new(arrow::array::TimestampMicrosecondArray::from(v))
    };
    c.merge(&[0], ts(vec![Some(7)]).as_ref()).unwrap();
    c.merge(&[0], ts(vec![Some(3)]).as_ref()).unwrap();
    c.merge(&[0], ts(vec![Some(9)]).as_ref()).unwrap();
    assert_eq!(c.gather(&[0]).unwrap().as_ref(), ts(vec![Some(3)]).as_ref());
    c.reset(0);
    assert_eq!(c.gather(&[0]).unwrap().as_ref(), ts(vec![None]).as_ref());
    // avg: a count and a float sum, both added.
    let avg = specs(agg(avg_udaf(), "d"));
    assert_eq!(avg.len(), 2);
    assert!(avg.iter().all(|f| f.merge == Merge::Add));
    let mut c = new_column(&avg[1]).unwrap();
    c.push_empty();
    c.merge(&[0], &Float64Array::from(vec![0.25])).unwrap();
    c.merge(&[0], &Float64Array::from(vec![0.5])).unwrap();
    assert_eq!(
        c.gather(&[0]).unwrap().as_ref(),
        &Float64Array::from(vec![0.75]) as &dyn Array
    );
    // A partial state of another type is an error, not a reinterpretation.
    assert!(c.merge(&[0], &Int64Array::from(vec![1])).is_err());
}

#[test]
fn slots_are_found_freed_and_reused_through_colliding_chains() {
    let mut ix = SlotIndex {
        mask: 0b11,
        ..Default::default()
    };
    let keys: Vec<Vec<u8>> = (0..40u32).map(|i| i.to_le_bytes().to_vec()).collect();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(ix.find_or_insert(k), (i as u32, true));
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(ix.find_or_insert(k), (i as u32, false));
    }
    // Free every third slot: heads, middles and tails of the four chains.
    for s in (0..40u32).step_by(3) {
        assert_eq!(&*ix.remove(s), keys[s as usize].as_slice());
    }
    for (i, k) in keys.iter().enumerate() {
        let (slot, new) = ix.find_or_insert(k);
        if i % 3 == 0 {
            assert!(new, "key {i} was freed");
            assert!(slot % 3 == 0, "a freed slot is used again");
        } else {
            assert_eq!((slot, new), (i as u32, false), "key {i}");
        }
        assert_eq!(ix.key(slot), k.as_slice());
    }
    assert_eq!(
        ix.keys.len(),
        40,
        "no slot was added while freed ones were left"
    );
}
