//! `sluice bench --workload windowed|stateless|overhead --input DIR [--workdir DIR] [--batches N]`:
//! the Sluice side of `shared/bench/bench_spark.py`, the same three queries over the same files.
//! The last line printed is one JSON object with `rows_per_second`, `median_batch_ms`,
//! `wall_seconds` and `peak_rss_bytes` (the keys the Spark script prints).

use std::path::PathBuf;
use std::time::Instant;

use sluice::{col, lit, OutputMode, Session, Trigger};

const SCHEMA: &str = "ts TIMESTAMP, user STRING, action STRING, amount DOUBLE";

use crate::bench_args::BenchArgs;
use crate::nexmark::{peak_rss_bytes, rss_bytes, rss_samples_mb};

pub fn bench(args: BenchArgs) -> Result<(), String> {
    if args.workload == "latency" {
        return crate::latency::run(&args);
    }
    if args.workload.starts_with("kafka") {
        let workdir = args.workdir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()))
        });
        let _ = std::fs::remove_dir_all(&workdir);
        let r = if args.workload == "kafka" {
            crate::kafka_bench::run(&args, &workdir)
        } else {
            crate::kafka_bench::fill(&args, &workdir)
        };
        let _ = std::fs::remove_dir_all(&workdir);
        return r;
    }
    let BenchArgs {
        workload,
        input,
        workdir,
        batches,
        query,
        events,
        events_per_batch,
        export,
        bids_from,
        conf,
        ..
    } = args;
    let workdir = workdir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()))
    });
    if workload == "nexmark" {
        let _ = std::fs::remove_dir_all(&workdir);
        let mut run = crate::nexmark::NexmarkRun {
            query: query.unwrap_or_default(),
            events,
            events_per_batch,
            events_per_second: 10_000,
            shuffle_partitions: 2,
            bids_from,
        };
        if let Some(out) = export {
            let _ = std::fs::remove_dir_all(&out);
            run.bids_from = None;
            let n = crate::nexmark::export_bids(&run, &out).map_err(|e| e.to_string())?;
            eprintln!(
                "wrote {n} bids of {events} events to {}",
                out.join("bid").display()
            );
            return Ok(());
        }
        if run.query.is_empty() {
            return Err(
                "--workload nexmark needs --query q0|q1|q2|q5|q7|q8 (or --export DIR)".into(),
            );
        }
        eprintln!(
            "sluice bench nexmark {}: {} events, {} per batch",
            run.query, run.events, run.events_per_batch
        );
        let out = crate::nexmark::run(&run, &workdir).map_err(|e| e.to_string())?;
        println!("{out}");
        let _ = std::fs::remove_dir_all(&workdir);
        return Ok(());
    }
    let input = input.ok_or("bench needs --input DIR (files from shared/bench/gen_events.py)")?;
    let _ = std::fs::remove_dir_all(&workdir);
    std::fs::create_dir_all(&workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;

    let mut files: Vec<PathBuf> = std::fs::read_dir(&input)
        .map_err(|e| format!("{}: {e}", input.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(['.', '_']))
        })
        .collect();
    files.sort();
    let mut source_rows = 0usize;
    for f in &files {
        source_rows += std::fs::read(f)
            .map_err(|e| format!("{}: {e}", f.display()))?
            .iter()
            .filter(|b| **b == b'\n')
            .count();
    }
    let max_files = if workload == "overhead" {
        1
    } else {
        files.len().div_ceil(batches.max(1)).max(1)
    };

    if workload == "decode" {
        // The ceiling: the same files decoded to Arrow by the file source's reader, in the same
        // groups as the windowed workload's batches, and nothing else.
        let schema = sluice::schema::parse_ddl_schema(SCHEMA).map_err(|e| e.to_string())?;
        let start = Instant::now();
        let mut rows = 0usize;
        let mut batch_ms = Vec::new();
        for group in files.chunks(max_files) {
            let t = Instant::now();
            let out = sluice::source::file::read_files("json", group, &schema, &Default::default())
                .map_err(|e| e.to_string())?;
            rows += out.num_rows();
            batch_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let wall = start.elapsed().as_secs_f64();
        batch_ms.sort_by(|a, b| a.total_cmp(b));
        eprintln!(
            "sluice bench decode: {} files, {rows} rows, wall {wall:.3}s",
            files.len()
        );
        println!(
            "{}",
            serde_json::json!({
                "engine": "sluice",
                "workload": "decode",
                "rows_per_second": ((rows as f64 / wall) * 10.0).round() / 10.0,
                "median_batch_ms": (batch_ms[batch_ms.len() / 2] * 10.0).round() / 10.0,
                "wall_seconds": (wall * 1000.0).round() / 1000.0,
                "peak_rss_bytes": peak_rss_bytes(),
                "batches": batch_ms.len(),
            })
        );
        return Ok(());
    }

    let rss = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let run = || -> sluice::Result<(f64, Vec<sluice::StreamingQueryProgress>)> {
        let rss_in = rss.clone();
        let mut builder = Session::builder().shuffle_partitions(2);
        for kv in &conf {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(sluice::SluiceError::query(
                    sluice::error::class::INVALID_CONF_VALUE,
                    format!("--conf takes KEY=VALUE, got {kv:?}"),
                ));
            };
            builder = builder.config(k.trim(), v.trim());
        }
        let session = builder.build()?;
        let events = session
            .read_stream()
            .format("json")
            .schema(SCHEMA)?
            .option("maxFilesPerTrigger", max_files)
            .load(input.display().to_string())?;
        let ckpt = workdir.join("checkpoint");
        // windowed: DataFusion's `sum` and `count`; windowed-spark: Spark's, as SQL and PySpark
        // resolve them (the session's functions, which a query's workers have too).
        let aggregate = |name: &str, arg: sluice::Expr| -> sluice::Result<sluice::Expr> {
            use datafusion::execution::FunctionRegistry as _;
            if workload == "windowed" {
                return Ok(match name {
                    "sum" => datafusion::functions_aggregate::expr_fn::sum(arg),
                    _ => datafusion::functions_aggregate::expr_fn::count(arg),
                });
            }
            Ok(session.context().udaf(name)?.call(vec![arg]))
        };
        let writer = match workload.as_str() {
            "windowed" | "windowed-spark" => events
                .with_watermark("ts", "10 minutes")?
                .group_by([sluice::window(col("ts"), "1 minute"), col("user")])
                .agg([
                    aggregate("sum", col("amount"))?.alias("total"),
                    aggregate("count", lit(1))?.alias("n"),
                ])?
                .write_stream()
                .output_mode(OutputMode::Update)
                .foreach_batch(move |data, _| {
                    std::hint::black_box(data.num_rows());
                    if let Ok(mut v) = rss_in.lock() {
                        v.push(rss_bytes());
                    }
                    Ok(())
                }),
            "stateless" => events
                .filter_sql("action IN ('buy', 'cart') OR amount > 90")?
                .select_sql([
                    "ts",
                    "user",
                    "action",
                    "round(amount * 1.2, 2) AS amount_eur",
                    "to_date(ts) AS day",
                ])?
                .write_stream()
                .format("parquet")
                .option("path", workdir.join("out-parquet").display()),
            "overhead" => events
                .select_sql(["ts", "user", "amount * 1.2 AS amount_eur"])?
                .write_stream()
                .format("noop"),
            other => {
                return Err(sluice::SluiceError::query(
                    sluice::error::class::UNKNOWN_WORKLOAD,
                    format!("unknown workload {other:?}: use windowed, stateless or overhead"),
                ))
            }
        };
        let start = Instant::now();
        let q = writer
            .option("checkpointLocation", ckpt.display())
            .trigger(Trigger::AvailableNow)
            .start()?;
        q.await_termination()?;
        Ok((start.elapsed().as_secs_f64(), q.recent_progress()))
    };
    let (wall, progress) = run().map_err(|e| e.to_string())?;
    if std::env::var_os("SLUICE_BENCH_PROGRESS").is_some() {
        for p in &progress {
            eprintln!("{}", p.json());
        }
    }
    let mut data_ms: Vec<i64> = progress
        .iter()
        .filter(|p| p.num_input_rows > 0)
        .map(|p| p.duration_ms.get("triggerExecution").copied().unwrap_or(0))
        .collect();
    data_ms.sort();
    let median = match data_ms.len() {
        0 => 0.0,
        n if n % 2 == 1 => data_ms[n / 2] as f64,
        n => (data_ms[n / 2 - 1] + data_ms[n / 2]) as f64 / 2.0,
    };
    eprintln!(
        "sluice bench {workload}: {} files, {source_rows} rows, {} batches ({} with data), wall {wall:.3}s",
        files.len(),
        progress.len(),
        data_ms.len()
    );
    println!(
        "{}",
        serde_json::json!({
            "engine": "sluice",
            "workload": workload,
            "rows_per_second": ((source_rows as f64 / wall) * 10.0).round() / 10.0,
            "median_batch_ms": median,
            "wall_seconds": (wall * 1000.0).round() / 1000.0,
            "peak_rss_bytes": peak_rss_bytes(),
            "batches": progress.len(),
            "rss_mb_by_batch": rss_samples_mb(&rss.lock().map(|v| v.clone()).unwrap_or_default()),
        })
    );
    let _ = std::fs::remove_dir_all(&workdir);
    Ok(())
}
