//! Stream-stream join state: bounded by the watermark for each join type, a left semi join
//! emits once, equal windows as join keys, a changed join type refused on restart, an inner join
//! without watermarks keeps every row.

use std::sync::{Arc, Mutex};

use sluice::{OutputMode, Trigger};

use crate::support::{add_file, dirs, impressions_and_clicks, session};

/// numRowsTotal after every batch of a stream-stream join of two file streams, fed pairs of
/// files one trigger at a time.
fn join_state(kind: &str, with_range: bool) -> Vec<i64> {
    let d = dirs();
    let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
    let s = session();
    for (name, dir, schema, col) in [
        ("i", &imp, "ad STRING, it TIMESTAMP", "it"),
        ("c", &clk, "ad STRING, ct TIMESTAMP", "ct"),
    ] {
        std::fs::create_dir_all(dir).unwrap();
        let mut f = s
            .read_stream()
            .format("json")
            .schema(schema)
            .unwrap()
            .load(dir.display().to_string())
            .unwrap();
        if with_range {
            f = f.with_watermark(col, "5 minutes").unwrap();
        }
        f.create_or_replace_temp_view(name).unwrap();
    }
    let cond = if with_range {
        " AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES"
    } else {
        ""
    };
    let q = s
        .sql(&format!(
            "SELECT i.ad, i.it, c.ct FROM i {kind} JOIN c ON i.ad = c.ad{cond}"
        ))
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", d.checkpoint.display())
        .start()
        .unwrap();
    for k in 0..6i64 {
        let t = |m: i64| format!("2026-11-03T{:02}:{:02}:00Z", 12 + m / 60, m % 60);
        add_file(
            &imp,
            &format!("{k}.json"),
            &format!(
                "{{\"ad\": \"a{k}\", \"it\": \"{}\"}}\n{{\"ad\": \"b{k}\", \"it\": \"{}\"}}\n",
                t(k * 20),
                t(k * 20 + 1)
            ),
            2 * k as u64,
        );
        add_file(
            &clk,
            &format!("{k}.json"),
            &format!("{{\"ad\": \"a{k}\", \"ct\": \"{}\"}}\n", t(k * 20 + 3)),
            2 * k as u64 + 1,
        );
        q.process_all_available().unwrap();
    }
    q.stop();
    q.recent_progress()
        .iter()
        .map(|p| p.state_operators[0].num_rows_total)
        .collect()
}

#[test]
fn join_state_rises_and_falls_with_the_watermark_for_each_join_type() {
    for kind in ["INNER", "LEFT OUTER", "RIGHT OUTER", "FULL OUTER"] {
        let totals = join_state(kind, true);
        assert!(totals.iter().max() >= Some(&3), "{kind}: {totals:?}");
        assert!(
            totals.windows(2).any(|w| w[1] < w[0]),
            "{kind}: state falls as the watermark passes: {totals:?}"
        );
        assert!(*totals.last().unwrap() <= 6, "{kind}: bounded: {totals:?}");
    }
}

#[test]
fn a_left_semi_join_emits_each_left_row_once_on_its_first_match() {
    let d = dirs();
    let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
    let s = session();
    impressions_and_clicks(&s, &imp, &clk, &[]);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = seen.clone();
    let q = s
        .sql("SELECT i.ad FROM i LEFT SEMI JOIN c ON i.ad = c.ad AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES")
        .unwrap()
        .write_stream()
        .option("checkpointLocation", d.checkpoint.display())
        .foreach_batch(move |data, _| {
            for b in data.batches() {
                for i in 0..b.num_rows() {
                    sink.lock().unwrap().push(sluice::sink::console::format_cell(b.column(0), i)?);
                }
            }
            Ok(())
        })
        .start()
        .unwrap();
    add_file(&imp, "1.json", "{\"ad\": \"a\", \"it\": \"2026-11-03T12:00:00Z\"}\n{\"ad\": \"b\", \"it\": \"2026-11-03T12:01:00Z\"}\n", 1);
    add_file(&clk, "1.json", "{\"ad\": \"a\", \"ct\": \"2026-11-03T12:03:00Z\"}\n{\"ad\": \"b\", \"ct\": \"2026-11-03T12:30:00Z\"}\n", 2);
    q.process_all_available().unwrap();
    add_file(
        &clk,
        "2.json",
        "{\"ad\": \"a\", \"ct\": \"2026-11-03T12:05:00Z\"}\n",
        3,
    );
    q.process_all_available().unwrap();
    q.stop();
    assert_eq!(
        *seen.lock().unwrap(),
        vec!["a"],
        "a matched twice but is emitted once; b's click is out of range"
    );
}

#[test]
fn equal_windows_as_join_keys_bound_the_state_and_a_count_can_follow_the_join() {
    let d = dirs();
    let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
    let s = session();
    impressions_and_clicks(&s, &imp, &clk, &[]);
    // A left outer join needs a bound: equal 10-minute windows give one.
    let q = s
        .sql("SELECT i.ad, i.it FROM i LEFT JOIN c ON i.ad = c.ad AND window(i.it, '10 minutes') = window(c.ct, '10 minutes')")
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", d.checkpoint.display())
        .start()
        .unwrap();
    for k in 0..5i64 {
        let t = |m: i64| format!("2026-11-03T{:02}:{:02}:00Z", 12 + m / 60, m % 60);
        add_file(
            &imp,
            &format!("{k}.json"),
            &format!("{{\"ad\": \"a{k}\", \"it\": \"{}\"}}\n", t(k * 20 + 1)),
            2 * k as u64,
        );
        add_file(
            &clk,
            &format!("{k}.json"),
            &format!("{{\"ad\": \"a{k}\", \"ct\": \"{}\"}}\n", t(k * 20 + 3)),
            2 * k as u64 + 1,
        );
        q.process_all_available().unwrap();
    }
    q.stop();
    let totals: Vec<i64> = q
        .recent_progress()
        .iter()
        .map(|p| p.state_operators[0].num_rows_total)
        .collect();
    assert!(
        totals.windows(2).any(|w| w[1] < w[0]) && *totals.last().unwrap() <= 4,
        "{totals:?}"
    );

    // An aggregation after a join, in append mode: chained stateful operators.
    let d2 = dirs();
    let q = s
        .sql("SELECT window.start AS ws, count(*) AS n FROM (SELECT i.it AS it FROM i JOIN c ON i.ad = c.ad AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES) GROUP BY window(it, '1 hour')")
        .unwrap()
        .write_stream()
        .format("noop")
        .option("checkpointLocation", d2.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let last = q.last_progress().unwrap();
    let names: Vec<&str> = last
        .state_operators
        .iter()
        .map(|o| o.operator_name.as_str())
        .collect();
    assert_eq!(names, vec!["symmetricHashJoin", "stateStoreSave"]);
}

#[test]
fn changing_the_join_type_on_restart_is_refused() {
    let d = dirs();
    let (imp, clk) = (d.input.join("imp"), d.input.join("clk"));
    let run = |kind: &str| {
        let s = session();
        impressions_and_clicks(&s, &imp, &clk, &[]);
        let q = s
            .sql(&format!("SELECT i.ad, i.it, c.ct FROM i {kind} JOIN c ON i.ad = c.ad AND c.ct >= i.it AND c.ct <= i.it + INTERVAL 10 MINUTES"))
            .unwrap()
            .write_stream()
            .format("noop")
            .option("checkpointLocation", d.checkpoint.display())
            .trigger(Trigger::AvailableNow)
            .start()
            .unwrap();
        q.await_termination()
    };
    add_file(
        &imp,
        "1.json",
        "{\"ad\": \"a\", \"it\": \"2026-11-03T12:00:00Z\"}\n",
        1,
    );
    add_file(
        &clk,
        "1.json",
        "{\"ad\": \"a\", \"ct\": \"2026-11-03T12:03:00Z\"}\n",
        2,
    );
    run("INNER").unwrap();
    add_file(
        &imp,
        "2.json",
        "{\"ad\": \"b\", \"it\": \"2026-11-03T12:10:00Z\"}\n",
        3,
    );
    let err = run("LEFT OUTER").unwrap_err();
    assert_eq!(err.class(), "STATE_SCHEMA_INCOMPATIBLE", "{err}");
    assert!(err.message().contains("symmetricHashJoin"), "{err}");
}

#[test]
fn an_inner_join_without_watermarks_keeps_every_row_and_outer_joins_are_refused() {
    let totals = join_state("INNER", false);
    assert_eq!(
        totals.last(),
        Some(&18),
        "unbounded: every row of both sides stays: {totals:?}"
    );
    let d = dirs();
    let s = session();
    for (name, schema) in [
        ("i", "ad STRING, it TIMESTAMP"),
        ("c", "ad STRING, ct TIMESTAMP"),
    ] {
        let dir = d.input.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        s.read_stream()
            .format("json")
            .schema(schema)
            .unwrap()
            .load(dir.display().to_string())
            .unwrap()
            .create_or_replace_temp_view(name)
            .unwrap();
    }
    let err = s
        .sql("SELECT * FROM i LEFT JOIN c ON i.ad = c.ad")
        .unwrap()
        .write_stream()
        .format("noop")
        .start()
        .unwrap_err();
    assert!(err.message().contains("Stream-stream LeftOuter join between two streaming DataFrame/Datasets is not supported without a watermark"), "{err}");
    let err = s
        .sql("SELECT * FROM i JOIN c ON i.ad = c.ad")
        .unwrap()
        .write_stream()
        .format("noop")
        .output_mode(OutputMode::Update)
        .start()
        .unwrap_err();
    assert!(
        err.message().contains("only in Append output mode"),
        "{err}"
    );
}
