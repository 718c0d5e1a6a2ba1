//! The aggregates' tests: the accumulators on their own, and Spark's values (PySpark 3.5.7) for
//! `max_by`/`min_by`.

use super::*;
use crate::functions::testing::{one, session};
use arrow::array::BooleanArray;

#[test]
fn central_moments_merge_like_one_pass() {
    let xs = [1.0, 2.0, 4.0, 8.0, 9.5];
    let mut all = Moments::default();
    xs.iter().for_each(|x| all.add(*x));
    let (mut a, mut b) = (Moments::default(), Moments::default());
    xs[..2].iter().for_each(|x| a.add(*x));
    xs[2..].iter().for_each(|x| b.add(*x));
    a.merge(&b);
    for (x, y) in [
        (all.m2, a.m2),
        (all.m3, a.m3),
        (all.m4, a.m4),
        (all.avg, a.avg),
    ] {
        assert!((x - y).abs() < 1e-9 * x.abs().max(1.0), "{x} vs {y}");
    }
}

#[test]
fn count_if_counts_true_only() {
    let mut acc = CountIfAccumulator::default();
    let b: ArrayRef = Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)]));
    acc.update_batch(&[b]).unwrap();
    assert_eq!(acc.evaluate().unwrap(), ScalarValue::Int64(Some(1)));
}

#[test]
fn max_by_and_min_by_keep_the_last_of_equal_orderings() {
    let s = session();
    let rows =
        "VALUES (1, CAST(1.5 AS DOUBLE)), (NULL, NULL), (3, 2.5), (3, -1.0), (7, 4.0) t(i, d)";
    let v = one(&s, &format!("SELECT max_by(d, 0.5) FROM {rows}"));
    assert_eq!(v, ScalarValue::Float64(Some(4.0)));
    let v = one(&s, &format!("SELECT min_by(d, i) FROM {rows}"));
    assert_eq!(v, ScalarValue::Float64(Some(1.5)));
    let v = one(&s, &format!("SELECT max_by(i, d) FROM {rows}"));
    assert_eq!(v, ScalarValue::Int32(Some(7)));
    let v = one(&s, &format!("SELECT min_by(i, d) FROM {rows}"));
    assert_eq!(v, ScalarValue::Int32(Some(3)));
    // Only null orderings: null.
    let v = one(
        &s,
        "SELECT max_by(x, y) FROM VALUES ('a', CAST(NULL AS INT)) t(x, y)",
    );
    assert_eq!(v, ScalarValue::Utf8(None));
    let e = s
        .sql("SELECT max_by(x) FROM VALUES (1) t(x)")
        .and_then(|f| f.collect());
    assert!(e.unwrap_err().to_string().contains("max_by"));
}
