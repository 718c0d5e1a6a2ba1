//! Stream-stream joins write only each batch's changes to state and evict through a time
//! index; equal windows as join keys (Nexmark q8) bound the state.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sluice::{Session, Trigger};

use crate::support::{dirs, session};

type Output = Arc<Mutex<BTreeMap<u64, Vec<String>>>>;

fn cells(b: &arrow::array::RecordBatch, i: usize) -> String {
    (0..b.num_columns())
        .map(|c| sluice::sink::console::format_cell(b.column(c), i).unwrap())
        .collect::<Vec<_>>()
        .join("|")
}

/// Runs `query` available-now on `checkpoint`; each batch's rows (sorted) go to `out` by
/// batch id, so a replayed batch replaces its earlier attempt.
fn run(
    s: &Session,
    query: &str,
    checkpoint: &Path,
    out: &Output,
) -> (sluice::Result<()>, Vec<sluice::StreamingQueryProgress>) {
    let sink = out.clone();
    let q = s
        .sql(query)
        .unwrap()
        .write_stream()
        .option("checkpointLocation", checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .foreach_batch(move |data, id| {
            let mut rows: Vec<String> = data
                .batches()
                .flat_map(|b| (0..b.num_rows()).map(move |i| cells(b, i)))
                .collect();
            rows.sort();
            sink.lock().unwrap().insert(id, rows);
            Ok(())
        })
        .start()
        .unwrap();
    let r = q.await_termination();
    (r, q.recent_progress())
}

/// A session with person and auction views over the nexmark source (1,000 events per
/// second of event time, so a 10 s window holds 200 persons and 600 auctions).
fn nexmark_session(num_events: u64, per_trigger: u64, conf: &[(&str, String)]) -> Session {
    let mut b = Session::builder().shuffle_partitions(2);
    for (k, v) in conf {
        b = b.config(*k, v);
    }
    let s = b.build().unwrap();
    for table in ["person", "auction"] {
        s.read_stream()
            .format("nexmark")
            .option("table", table)
            .option("numEvents", num_events)
            .option("maxEventsPerTrigger", per_trigger)
            .option("eventsPerSecond", 1_000)
            .load_source()
            .unwrap()
            .with_watermark("date_time", "1 second")
            .unwrap()
            .create_or_replace_temp_view(table)
            .unwrap();
    }
    s
}

/// `query` as a batch query over all `num_events` of the nexmark input, rows sorted.
fn batch_rows(query: &str, num_events: u64) -> Vec<String> {
    let s = session();
    for table in ["person", "auction"] {
        let opts: std::collections::HashMap<String, String> = [
            ("table", table.to_string()),
            ("numEvents", num_events.to_string()),
            ("eventsPerSecond", "1000".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let p = sluice::source::nexmark::NexmarkSourceProvider::try_new(&opts).unwrap();
        let batches = p.generate(0, num_events).unwrap();
        s.register_batches(table, batches[0].schema(), batches)
            .unwrap();
    }
    let mut out: Vec<String> = s
        .sql(query)
        .unwrap()
        .collect()
        .unwrap()
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(move |i| cells(b, i)))
        .collect();
    out.sort();
    out
}

fn all_rows(out: &Output) -> Vec<String> {
    let mut v: Vec<String> = out.lock().unwrap().values().flatten().cloned().collect();
    v.sort();
    v
}

const Q8: &str = "SELECT p.id, p.name, p.w.start AS starttime FROM \
    (SELECT id, name, window(date_time, '10 seconds') AS w FROM person) p JOIN \
    (SELECT seller, window(date_time, '10 seconds') AS w FROM auction) a \
    ON p.id = a.seller AND p.w = a.w";

/// Checks the join's state over a run: bounded far below the rows seen, falling as windows
/// close, and every row eventually accounted for.
fn assert_bounded(progress: &[sluice::StreamingQueryProgress], seen: i64) {
    let join = |p: &sluice::StreamingQueryProgress| p.state_operators[0].clone();
    let totals: Vec<i64> = progress.iter().map(|p| join(p).num_rows_total).collect();
    let updated: i64 = progress.iter().map(|p| join(p).num_rows_updated).sum();
    let removed: i64 = progress.iter().map(|p| join(p).num_rows_removed).sum();
    assert_eq!(updated, seen, "every input row is stored once: {totals:?}");
    assert_eq!(
        removed + totals.last().unwrap(),
        seen,
        "what is not in state was evicted"
    );
    // 7 s batches over 10 s windows: at most the open windows (two) and a batch stay.
    let max = *totals.iter().max().unwrap();
    assert!(max <= 2 * 800 + 560, "bounded: {totals:?}");
    assert!(max * 5 < seen, "far below the {seen} rows seen: {totals:?}");
    assert!(
        totals.windows(2).filter(|w| w[1] < w[0]).count() >= 5,
        "state falls as windows close: {totals:?}"
    );
}

#[test]
fn nexmark_q8_equal_window_join_keeps_only_open_windows_and_matches_a_batch_join() {
    let d = dirs();
    // 200,000 events = 200 s of event time: 4,000 persons and 12,000 auctions, 7 s per
    // batch so windows straddle batches.
    let s = nexmark_session(200_000, 7_000, &[]);
    let out: Output = Arc::default();
    let (r, progress) = run(&s, Q8, &d.checkpoint, &out);
    r.unwrap();
    assert_bounded(&progress, 16_000);
    let streamed = all_rows(&out);
    let reference = batch_rows(Q8, 200_000);
    assert!(reference.len() > 1000, "{}", reference.len());
    assert_eq!(streamed.len(), reference.len());
    assert!(
        streamed == reference,
        "the streamed join equals the batch join"
    );
}

#[test]
fn a_window_computed_in_the_join_condition_bounds_the_state_too() {
    // The person side's window is an expression of its event time, compared with the
    // auction side's window column (Nexmark q7's shape).
    let query = "SELECT p.id, p.name, a.w.start AS starttime FROM person p JOIN \
        (SELECT seller, window(date_time, '10 seconds') AS w FROM auction) a \
        ON p.id = a.seller AND window(p.date_time, '10 seconds') = a.w";
    let d = dirs();
    let s = nexmark_session(200_000, 7_000, &[]);
    let out: Output = Arc::default();
    let (r, progress) = run(&s, query, &d.checkpoint, &out);
    r.unwrap();
    assert_bounded(&progress, 16_000);
    assert!(all_rows(&out) == batch_rows(Q8, 200_000));
}

/// A full outer q8: unmatched persons and auctions are emitted as their windows close.
const FULL_Q8: &str = "SELECT p.id, p.w.start AS pw, a.seller, a.w.start AS aw FROM \
    (SELECT id, window(date_time, '10 seconds') AS w FROM person) p FULL OUTER JOIN \
    (SELECT seller, window(date_time, '10 seconds') AS w FROM auction) a \
    ON p.id = a.seller AND p.w = a.w";

#[test]
fn an_outer_join_restarted_every_two_batches_or_crashing_in_state_commits_gives_the_uninterrupted_output(
) {
    let (events, per_trigger) = (60_000, 7_000);
    let uninterrupted: Output = Arc::default();
    let d = dirs();
    let (r, progress) = run(
        &nexmark_session(events, per_trigger, &[]),
        FULL_Q8,
        &d.checkpoint,
        &uninterrupted,
    );
    r.unwrap();
    let reference = uninterrupted.lock().unwrap().clone();
    assert!(progress.len() >= 10, "{}", progress.len());
    let rows: Vec<String> = reference.values().flatten().cloned().collect();
    assert!(
        rows.iter().any(|r| r.starts_with("null|")),
        "unmatched auctions"
    );
    assert!(
        rows.iter().any(|r| r.contains("|null|null")),
        "unmatched persons"
    );
    // Matched pairs equal the inner batch join's; every input row shows up.
    let matched: Vec<String> = rows
        .iter()
        .filter(|r| !r.contains("null"))
        .cloned()
        .collect();
    let inner = batch_rows(&FULL_Q8.replace("FULL OUTER JOIN", "JOIN"), events);
    let mut m = matched.clone();
    m.sort();
    assert!(m == inner, "the matches are the inner join's");

    // Restart after every two batches.
    let restarted: Output = Arc::default();
    let d = dirs();
    for attempt in 0.. {
        assert!(attempt < 100, "did not finish");
        let before = restarted.lock().unwrap().len();
        let s = nexmark_session(
            events,
            per_trigger,
            &[(sluice::testing::MAX_BATCHES_PER_RUN, "2".to_string())],
        );
        run(&s, FULL_Q8, &d.checkpoint, &restarted).0.unwrap();
        if restarted.lock().unwrap().len() == before {
            break;
        }
    }
    assert!(
        *restarted.lock().unwrap() == reference,
        "restarts change nothing"
    );

    // A crash in the middle of a state commit (one partition committed) of batches 2, 5
    // and 8; each restart replays the batch from the state before it.
    let crashed: Output = Arc::default();
    let d = dirs();
    for n in [2, 5, 8] {
        let s = nexmark_session(
            events,
            per_trigger,
            &[(sluice::testing::CRASH_POINT, format!("inStateCommit:{n}"))],
        );
        let err = run(&s, FULL_Q8, &d.checkpoint, &crashed).0.unwrap_err();
        assert_eq!(
            err.class(),
            sluice::error::class::SLUICE_INJECTED_CRASH,
            "{err}"
        );
    }
    run(
        &nexmark_session(events, per_trigger, &[]),
        FULL_Q8,
        &d.checkpoint,
        &crashed,
    )
    .0
    .unwrap();
    assert!(
        *crashed.lock().unwrap() == reference,
        "crashes change nothing"
    );
}
