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

/// A deduplication over one batch many times its chunk (a sixteenth of the budget): its input
/// is taken a chunk at a time, a key kept in an earlier chunk is a duplicate in a later one, and
/// its output, past a chunk's share, is spilled to a file and read back as the sink pulls it.
/// Every key comes out once, with one of its rows.
#[test]
fn a_deduplication_larger_than_its_chunk_keeps_each_key_once() {
    use std::sync::{Arc, Mutex};
    let d = crate::support::dirs();
    // 4 files of 20,000 rows: 50,000 ids, the last 30,000 rows repeat ids of the first files
    // (with another payload), ~10 MB of rows against 1 MiB chunks.
    let pad = "p".repeat(100);
    for f in 0..4u64 {
        let body: String = (0..20_000u64)
            .map(|i| {
                let n = f * 20_000 + i;
                format!("{{\"id\": {}, \"payload\": \"{pad}-{n}\"}}\n", n % 50_000)
            })
            .collect();
        crate::support::add_file(&d.input, &format!("{f}.json"), &body, f);
    }
    let s = session("16m");
    let seen: Arc<Mutex<Vec<(i64, String)>>> = Arc::default();
    let sink = seen.clone();
    let q = s
        .read_stream()
        .format("json")
        .schema("id BIGINT, payload STRING")
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .drop_duplicates(["id"])
        .unwrap()
        .write_stream()
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(sluice::Trigger::AvailableNow)
        .foreach_batch(move |data, _| {
            for b in data.batches() {
                let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                let payloads = b
                    .column(1)
                    .as_any()
                    .downcast_ref::<arrow::array::StringArray>()
                    .unwrap();
                let mut seen = sink.lock().unwrap();
                for r in 0..b.num_rows() {
                    seen.push((ids.value(r), payloads.value(r).to_string()));
                }
            }
            Ok(())
        })
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen.len(), 50_000);
    for (i, (id, payload)) in seen.iter().enumerate() {
        assert_eq!(*id, i as i64);
        let n: usize = payload.rsplit('-').next().unwrap().parse().unwrap();
        assert_eq!(n % 50_000, i, "a row of id {i}");
    }
    let p = q.last_progress().unwrap();
    let dedup = &p.state_operators[0];
    assert_eq!(dedup.num_rows_updated, 50_000);
    assert_eq!(dedup.custom_metrics["numDroppedDuplicateRows"], 30_000);
}
