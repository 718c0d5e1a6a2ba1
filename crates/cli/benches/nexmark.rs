//! `cargo bench -p sluice-cli --bench nexmark`: the Nexmark queries q0, q1, q2, q5, q7 and q8
//! over generated events (10,000,000 unless `NEXMARK_EVENTS` says otherwise; `NEXMARK_QUERIES`
//! picks queries, e.g. `q5,q7`), one JSON line per query, then a table. The same code as
//! `sluice bench --workload nexmark` (see `src/nexmark.rs` for the queries).

#[path = "../src/nexmark.rs"]
#[allow(dead_code, unused_imports)]
mod nexmark;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // As the sluice binary does (see its main.rs): freed memory stays committed for reuse.
    // SAFETY: sets a process-wide allocator option (mi_option_purge_delay = 15).
    unsafe { libmimalloc_sys::mi_option_set(15, -1) };
    // `cargo bench` passes `--bench`; nothing else is expected.
    let events: u64 = std::env::var("NEXMARK_EVENTS")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(10_000_000);
    let queries = std::env::var("NEXMARK_QUERIES").unwrap_or_else(|_| "q0,q1,q2,q5,q7,q8".into());
    let mut rows = Vec::new();
    for q in queries.split(',').map(str::trim).filter(|q| !q.is_empty()) {
        let dir = std::env::temp_dir().join(format!("sluice-nexmark-{}-{q}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let run = nexmark::NexmarkRun {
            query: q.to_string(),
            events,
            events_per_batch: 250_000.min(events.max(1)),
            events_per_second: 10_000,
            shuffle_partitions: 2,
            bids_from: None,
        };
        eprintln!("nexmark {q}: {events} events ...");
        match nexmark::run(&run, &dir) {
            Ok(v) => {
                println!("{v}");
                rows.push(v);
            }
            Err(e) => {
                eprintln!("nexmark {q} failed: {e}");
                std::process::exit(1);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!(
        "\n{:<6} {:>12} {:>12} {:>14} {:>14} {:>10} {:>10}",
        "query", "events", "wall s", "events/s", "per core", "cpu s", "RSS MB"
    );
    for v in rows {
        println!(
            "{:<6} {:>12} {:>12} {:>14} {:>14} {:>10} {:>10.0}",
            v["workload"]
                .as_str()
                .unwrap_or("?")
                .trim_start_matches("nexmark-"),
            v["events"],
            v["wall_seconds"],
            v["events_per_second"],
            v["events_per_second_per_core"],
            v["cpu_seconds"],
            v["peak_rss_bytes"].as_f64().unwrap_or(0.0) / 1048576.0
        );
    }
}
