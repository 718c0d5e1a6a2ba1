//! `sluice bench`'s flags ([`BenchArgs`]), read by every workload: `bench.rs` (the file
//! workloads, and which workload runs), `latency.rs` and `kafka_bench.rs`.

use std::path::PathBuf;

/// `sluice bench`: every workload's flags (each says which workloads read it).
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  sluice bench --workload windowed --input events-10000000 --batches 50
  sluice bench --workload nexmark --query q5 --events 30000000
  sluice bench --workload nexmark --export DIR
  sluice bench --workload latency --mode continuous --source kafka --seconds 10
  sluice bench --workload kafka-fill --input events-2000000 --topic bench-events
  sluice bench --workload kafka --sink parquet --topic bench-events --max-offsets-per-trigger 200000")]
pub struct BenchArgs {
    /// windowed|stateless|overhead: the queries of shared/bench/bench_spark.py over --input
    /// (windowed-spark: windowed with the session's Spark `sum`/`count`, as SQL and PySpark
    /// resolve them, where windowed uses DataFusion's);
    /// decode: the same files to Arrow, nothing else; nexmark: a Nexmark query over generated
    /// events; latency: end-to-end latency p50/p99/max (ms); kafka-fill: --input's lines to
    /// --topic; kafka: --topic to --sink parquet|kafka (benches/kafka_compare.sh)
    #[arg(long, value_name = "WORKLOAD", value_parser = [
        "windowed", "windowed-spark", "stateless", "overhead", "decode", "nexmark", "latency",
        "kafka-fill", "kafka"
    ])]
    pub workload: String,
    /// windowed|stateless|overhead|decode: the input files (from shared/bench/gen_events.py)
    #[arg(long, value_name = "DIR")]
    pub input: Option<PathBuf>,
    /// Scratch directory, emptied first and removed after (default: a temp directory)
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// windowed|stateless|decode: how many batches the input is split into
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub batches: usize,
    /// nexmark: the query
    #[arg(long, value_name = "QUERY", value_parser = ["q0", "q1", "q2", "q5", "q7", "q8"])]
    pub query: Option<String>,
    /// nexmark: the number of generated events
    #[arg(long, value_name = "N", default_value_t = 10_000_000)]
    pub events: u64,
    /// nexmark: events per batch
    #[arg(long, value_name = "N", default_value_t = 250_000)]
    pub events_per_batch: u64,
    /// nexmark: write the bids to DIR/bid as parquet instead of running a query
    #[arg(long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// nexmark: read the bids from DIR/bid (an --export), 2 files per batch
    #[arg(long, value_name = "DIR/bid")]
    pub bids_from: Option<PathBuf>,
    /// latency: continuous processing or the default micro-batch trigger
    #[arg(long, value_name = "MODE", value_parser = ["continuous", "microbatch"])]
    pub mode: Option<String>,
    /// latency: the rate source (in process) or Kafka (a broker at --bootstrap)
    #[arg(long, value_name = "SOURCE", value_parser = ["rate", "kafka"], default_value = "rate")]
    pub source: String,
    /// latency with --source rate: the memory sink or a foreach writer; kafka: parquet files or
    /// a Kafka topic (--out-topic, exactly once)
    #[arg(long, value_name = "SINK", value_parser = ["memory", "foreach", "parquet", "kafka"], default_value = "memory")]
    pub sink: String,
    /// latency: how long to measure
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub seconds: u64,
    /// windowed|stateless|overhead: a session conf for the query (repeatable), e.g.
    /// `--conf sluice.memory.limit=512m`
    #[arg(long = "conf", value_name = "KEY=VALUE")]
    pub conf: Vec<String>,
    /// latency: rows (records) per second
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub rows_per_second: i64,
    /// latency with --source kafka, kafka-fill, kafka: the broker
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// kafka-fill: the topic written; kafka: the topic read
    #[arg(long, value_name = "TOPIC", default_value = "bench-events")]
    pub topic: String,
    /// kafka with --sink kafka: the topic written
    #[arg(long, value_name = "TOPIC", default_value = "bench-out")]
    pub out_topic: String,
    /// kafka: records per batch (Spark's maxOffsetsPerTrigger)
    #[arg(long, value_name = "N")]
    pub max_offsets_per_trigger: Option<u64>,
}
