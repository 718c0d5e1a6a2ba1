//! `sluice.memory.limit` bounds DataFusion's operators too (issue 18 part 8): an operator that
//! buffers and can spill (a sort) spills to disk and finishes; one that cannot (a hash join's
//! build side) stops with `MEMORY_LIMIT_EXCEEDED` and the fix, instead of growing without a
//! bound. Half the budget is DataFusion's memory pool.

use arrow::array::{Array, Int64Array};

fn session(limit: &str) -> sluice::Session {
    sluice::Session::builder()
        .config("sluice.memory.limit", limit)
        .build()
        .unwrap()
}

#[test]
fn a_sort_larger_than_its_share_of_the_budget_spills_and_finishes() {
    // 3,000,000 BIGINTs (24 MB of values) sorted under an 8 MiB pool.
    let s = session("16m");
    let out = s
        .sql("SELECT value FROM range(3000000) ORDER BY value DESC")
        .unwrap()
        .collect()
        .unwrap();
    let n: usize = out.iter().map(|b| b.num_rows()).sum();
    assert_eq!(n, 3_000_000);
    let first = out.iter().find(|b| b.num_rows() > 0).unwrap();
    let col = first
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(col.value(0), 2_999_999);
}

#[test]
fn an_operator_that_cannot_spill_stops_with_the_budget_named() {
    let s = session("16m");
    let e = s
        .sql(
            "SELECT count(*) FROM range(3000000) a JOIN range(3000000) b \
             ON a.value = b.value",
        )
        .unwrap()
        .collect()
        .unwrap_err();
    assert!(e.is("MEMORY_LIMIT_EXCEEDED"), "{e}");
    assert!(e.message().contains("sluice.memory.limit"), "{e}");
    // With room, the same query runs.
    let out = session("1g")
        .sql(
            "SELECT count(*) AS n FROM range(3000000) a JOIN range(3000000) b \
             ON a.value = b.value",
        )
        .unwrap()
        .collect()
        .unwrap();
    let n = out[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(n.value(0), 3_000_000);
    assert!(!n.is_null(0));
}

#[test]
fn a_budget_that_is_not_a_size_is_refused_by_name() {
    let e = sluice::Session::builder()
        .config("sluice.memory.limit", "a lot")
        .build()
        .unwrap_err();
    assert!(e.is("INVALID_CONF_VALUE"), "{e}");
    assert!(e.message().contains("sluice.memory.limit"), "{e}");
}
