//! Tests of `nexmark`.

use super::*;
use arrow::array::{Array, AsArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{Int64Type, TimestampMicrosecondType};

fn provider(table: &str, extra: &[(&str, &str)]) -> NexmarkSourceProvider {
    let mut o: HashMap<String, String> = HashMap::new();
    o.insert("table".into(), table.into());
    for (k, v) in extra {
        o.insert((*k).into(), (*v).into());
    }
    NexmarkSourceProvider::try_new(&o).unwrap()
}

fn one(p: &NexmarkSourceProvider, start: u64, end: u64) -> RecordBatch {
    let batches = p.generate(start, end).unwrap();
    assert!(batches.iter().all(|b| b.num_rows() <= BATCH_ROWS));
    concat_batches(&p.schema(), &batches).unwrap()
}

fn ints(b: &RecordBatch, col: &str) -> Vec<i64> {
    let c = b.column_by_name(col).unwrap();
    match c.data_type() {
        DataType::Int64 => c.as_primitive::<Int64Type>().values().to_vec(),
        _ => c
            .as_primitive::<TimestampMicrosecondType>()
            .values()
            .to_vec(),
    }
}

#[test]
fn proportions_over_50000_events() {
    for (t, want) in [("person", 1000), ("auction", 3000), ("bid", 46000)] {
        let p = provider(t, &[]);
        let rows: usize = p
            .generate(0, 50_000)
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(rows, want, "{t}");
        assert_eq!(
            p.table().count_before(50_000) as usize,
            want,
            "{t} count_before"
        );
    }
}

#[test]
fn same_range_same_rows_and_splits_equal_one_batch() {
    for t in ["person", "auction", "bid"] {
        let p = provider(t, &[("seed", "7")]);
        let a = one(&p, 1234, 140_017);
        assert_eq!(a, one(&p, 1234, 140_017), "{t}: same range twice");
        let q = provider(t, &[("seed", "7")]);
        assert_eq!(a, one(&q, 1234, 140_017), "{t}: a new provider");
        for cut in [1235, 1250, 1251, 1254, 70_000, 140_016] {
            let mut parts = p.generate(1234, cut).unwrap();
            parts.extend(p.generate(cut, 140_017).unwrap());
            let joined = concat_batches(&p.schema(), &parts).unwrap();
            assert_eq!(a, joined, "{t}: split at {cut}");
        }
        let other = provider(t, &[("seed", "8")]);
        assert_ne!(a, one(&other, 1234, 140_017), "{t}: another seed");
    }
}

#[test]
fn ids_refer_to_earlier_events_and_time_increases() {
    let end = 200_000;
    let persons = one(&provider("person", &[]), 0, end);
    let auctions = one(&provider("auction", &[]), 0, end);
    let bids = one(&provider("bid", &[]), 0, end);
    let base = DEFAULT_BASE_TIME_US;
    // Event number of a row from its date_time (100 us apart by default).
    let event = |t: i64| ((t - base) / 100) as u64;

    let person_ids = ints(&persons, "id");
    let person_times = ints(&persons, "date_time");
    assert_eq!(person_ids, (1000..1000 + 4000).collect::<Vec<i64>>());
    for (i, t) in person_times.iter().enumerate() {
        assert_eq!(event(*t), i as u64 * 50);
    }
    let person_event = |id: i64| (id - 1000) as u64 * 50;

    let auction_ids = ints(&auctions, "id");
    let auction_times = ints(&auctions, "date_time");
    assert_eq!(auction_ids, (1000..1000 + 12_000).collect::<Vec<i64>>());
    let mut auction_event = HashMap::new();
    for (i, (&id, &t)) in auction_ids.iter().zip(&auction_times).enumerate() {
        let n = event(t);
        assert_eq!(n % 50, 1 + i as u64 % 3);
        auction_event.insert(id, n);
    }
    for (&seller, &t) in ints(&auctions, "seller").iter().zip(&auction_times) {
        assert!(
            person_event(seller) < event(t),
            "seller {seller} at {}",
            event(t)
        );
    }
    for (&e, &t) in ints(&auctions, "expires").iter().zip(&auction_times) {
        assert!(e > t);
    }
    for (&r, &i) in ints(&auctions, "reserve")
        .iter()
        .zip(&ints(&auctions, "initial_bid"))
    {
        assert!(r > i && i >= 100);
    }
    let cats = ints(&auctions, "category");
    assert!(cats.iter().all(|c| (10..15).contains(c)));

    let bid_times = ints(&bids, "date_time");
    assert_eq!(bid_times.len(), 184_000);
    assert!(bid_times.windows(2).all(|w| w[0] < w[1]));
    let mut hot = 0;
    for ((&a, &b), &t) in ints(&bids, "auction")
        .iter()
        .zip(&ints(&bids, "bidder"))
        .zip(&bid_times)
    {
        let n = event(t);
        assert!(n % 50 >= 4);
        let an = auction_event.get(&a).copied();
        assert!(an.is_some_and(|an| an < n), "bid {n} for auction {a}");
        assert!(person_event(b) < n, "bid {n} by person {b}");
        if (a - 1000) % 100 == 0 {
            hot += 1;
        }
    }
    // About half of the bids go to the hot auctions.
    assert!((80_000..110_000).contains(&hot), "{hot} hot bids");
    let prices = ints(&bids, "price");
    assert!(prices.iter().all(|p| (100..=100_000_000).contains(p)));

    let mut all_times: Vec<i64> = person_times
        .iter()
        .chain(&auction_times)
        .chain(&bid_times)
        .copied()
        .collect();
    all_times.sort_unstable();
    assert_eq!(all_times.len(), end as usize);
    assert!(all_times.windows(2).all(|w| w[1] - w[0] == 100));
    assert_eq!(all_times[0], base);

    for col in ["channel", "url", "extra"] {
        assert_eq!(bids.column_by_name(col).unwrap().null_count(), 0);
    }
    let urls = bids.column_by_name("url").unwrap().as_string::<i32>();
    assert!(urls.value(0).starts_with("https://www.nexmark.com/"));
    let extra = bids.column_by_name("extra").unwrap().as_string::<i32>();
    assert_eq!(extra.value(5), "");
    let cc = persons
        .column_by_name("credit_card")
        .unwrap()
        .as_string::<i32>();
    assert_eq!(cc.value(0).len(), 19);
    let states = persons.column_by_name("state").unwrap().as_string::<i32>();
    assert!(US_STATES.contains(&states.value(3)));
}

#[test]
fn odd_rates_and_base_time() {
    let p = provider(
        "person",
        &[
            ("eventsPerSecond", "3"),
            ("baseTime", "2026-02-14 10:00:00"),
        ],
    );
    let b = one(&p, 0, 151);
    let base = 1_771_063_200_000_000;
    assert_eq!(
        ints(&b, "date_time"),
        vec![
            base,
            base + 16_666_666,
            base + 33_333_333,
            base + 50_000_000
        ]
    );
    let ms = provider("bid", &[("baseTime", "1000")]);
    assert_eq!(ints(&one(&ms, 4, 5), "date_time"), vec![1_000_000 + 400]);
}

#[test]
fn prices_follow_beams_formula() {
    let table = price_table();
    let mut r = EventRng::new(1, 2);
    for _ in 0..100_000 {
        let bits = r.next();
        let u = (bits >> 11) as f64 / (1u64 << 53) as f64;
        let exact = (10f64.powf(u * 6.0) * 100.0).round() as i64;
        assert!((price(table, bits) - exact).abs() <= 1, "{u}");
    }
    assert_eq!(price(table, 0), 100);
    assert_eq!(price(table, u64::MAX), 100_000_000);
}

#[test]
fn invalid_options_are_refused() {
    let bad = |opts: &[(&str, &str)]| {
        let o: HashMap<String, String> = opts
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let e = NexmarkSourceProvider::try_new(&o).unwrap_err().to_string();
        assert!(e.contains("INVALID_OPTION"), "{e}");
        e
    };
    assert!(bad(&[]).contains("table"));
    assert!(bad(&[("table", "bids2")]).contains("person, auction or bid"));
    assert!(bad(&[("table", "bid"), ("numEvents", "ten")]).contains("numEvents"));
    assert!(bad(&[("table", "bid"), ("maxEventsPerTrigger", "0")]).contains("positive"));
    assert!(bad(&[("table", "bid"), ("eventsPerSecond", "-1")]).contains("eventsPerSecond"));
    assert!(bad(&[("table", "bid"), ("baseTime", "yesterday")]).contains("baseTime"));
    let p = provider("Bid", &[("NUMEVENTS", "10_000_000")]);
    assert_eq!(
        p.description(),
        "NexmarkSource[table=bid, numEvents=10000000, maxEventsPerTrigger=1000000, \
         eventsPerSecond=10000, seed=0]"
    );
    assert_eq!(p.kind(), "nexmark");
}

fn source(p: &NexmarkSourceProvider) -> Box<dyn Source> {
    p.create_source(&SourceContext {
        index: 0,
        metadata_dir: std::env::temp_dir().join("unused"),
        log_cleanup: Default::default(),
        memory: Default::default(),
    })
    .unwrap()
}

#[test]
fn offsets_advance_by_the_limit_and_stop_at_num_events() {
    let p = provider(
        "auction",
        &[("numEvents", "2500"), ("maxEventsPerTrigger", "1000")],
    );
    let mut s = source(&p);
    let limit = s.default_read_limit();
    assert_eq!(limit, ReadLimit::MaxRows(1000));
    let mut at: Option<Offset> = None;
    let mut ends = Vec::new();
    loop {
        let end = s.latest_offset(at.as_ref(), limit).unwrap();
        if end == at {
            break;
        }
        let end = end.unwrap();
        let rows = s.get_batch(at.as_ref(), &end).unwrap().num_rows();
        ends.push((parse_events_offset(Some(&end)).unwrap(), rows));
        at = Some(end);
    }
    assert_eq!(ends, vec![(1000, 60), (2000, 60), (2500, 30)]);
    assert_eq!(at, Some(serde_json::json!({"events": 2500})));
    // A passed limit is honoured; AllAvailable goes to numEvents.
    let o = s.latest_offset(None, ReadLimit::MaxRows(10)).unwrap();
    assert_eq!(o, Some(serde_json::json!({"events": 10})));
    let o = s
        .latest_offset(o.as_ref(), ReadLimit::AllAvailable)
        .unwrap();
    assert_eq!(o, Some(serde_json::json!({"events": 2500})));
    // Nothing at all: None stays None.
    let empty = provider("bid", &[("numEvents", "0")]);
    assert_eq!(source(&empty).latest_offset(None, limit).unwrap(), None);
    // A corrupt offset is a checkpoint error.
    let bad = serde_json::json!({"offset": 3});
    assert!(s.latest_offset(Some(&bad), limit).is_err());
}

#[test]
fn unbounded_streams_advance_forever_but_available_now_ends() {
    let p = provider("bid", &[("maxEventsPerTrigger", "500")]);
    let mut s = source(&p);
    let limit = s.default_read_limit();
    let mut at = None;
    for i in 1..=5u64 {
        at = s.latest_offset(at.as_ref(), limit).unwrap();
        assert_eq!(at, Some(serde_json::json!({"events": i * 500})));
    }
    // Trigger::Once (AllAvailable) reads one step.
    let once = s
        .latest_offset(at.as_ref(), ReadLimit::AllAvailable)
        .unwrap();
    assert_eq!(once, Some(serde_json::json!({"events": 3000})));
    s.prepare_for_trigger_available_now().unwrap();
    let end = s.latest_offset(at.as_ref(), limit).unwrap();
    assert_eq!(end, Some(serde_json::json!({"events": 3000})));
    assert_eq!(s.latest_offset(end.as_ref(), limit).unwrap(), end);
}

#[test]
fn a_query_reads_the_bids() {
    let session = crate::Session::builder()
        .shuffle_partitions(1)
        .build()
        .unwrap();
    let q = session
        .read_stream()
        .format("nexmark")
        .option("table", "bid")
        .option("numEvents", 5000)
        .option("maxEventsPerTrigger", 2000)
        .load_source()
        .unwrap()
        .write_stream()
        .format("memory")
        .query_name("nexmark_bids")
        .trigger(crate::Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let out = session
        .sql("SELECT count(*) AS n, count(DISTINCT date_time) AS t FROM nexmark_bids")
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(ints(&out[0], "n"), vec![4600]);
    assert_eq!(ints(&out[0], "t"), vec![4600]);
}

/// Generator speed (a measurement, not a check): `bash benches/nexmark_generator.sh`.
#[test]
#[ignore = "measures generator speed in a release build; run by benches/nexmark_generator.sh"]
fn throughput() {
    for t in ["bid", "auction", "person"] {
        let p = provider(t, &[]);
        let _ = p.generate(0, 1_000_000).unwrap();
        // Batches of a million events, as with the default maxEventsPerTrigger.
        let events = 20_000_000;
        let start = std::time::Instant::now();
        let mut rows = 0;
        for k in 0..events / 1_000_000 {
            let batches = p.generate(k * 1_000_000, (k + 1) * 1_000_000).unwrap();
            rows += batches.iter().map(|b| b.num_rows()).sum::<usize>();
        }
        let s = start.elapsed().as_secs_f64();
        println!(
            "{t}: {rows} rows in {s:.3}s: {:.1} M rows/s, {:.1} M events/s",
            rows as f64 / s / 1e6,
            events as f64 / s / 1e6
        );
    }
}
