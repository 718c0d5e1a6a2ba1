//! Memory, foreach, foreach_batch, SQL over stream views.

use std::sync::{Arc, Mutex};

use sluice::sink::foreach::{ForeachWriter, Row};
use sluice::{SluiceError, Trigger};

use crate::support::{add_file, dirs, session, BATCH1, SCHEMA};

#[test]
fn sql_over_a_stream_view_is_a_stream_and_the_memory_sink_is_queryable() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    let s = session();
    s.read_stream()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .create_or_replace_temp_view("events")
        .unwrap();
    let big = s
        .sql("SELECT user, amount * 2 AS doubled FROM events WHERE amount > 10")
        .unwrap();
    assert!(big.is_streaming());
    assert!(big.collect().is_err(), "a stream cannot be collected");
    let q = big
        .write_stream()
        .format("memory")
        .query_name("big")
        .trigger(Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let total = s.sql("SELECT sum(doubled) AS t FROM big").unwrap();
    assert!(!total.is_streaming());
    let b = total.collect().unwrap();
    let t = b[0]
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::Float64Array>()
        .unwrap();
    assert_eq!(t.value(0), 740.0);
}

struct Recorder(Arc<Mutex<Vec<String>>>);
impl ForeachWriter for Recorder {
    fn open(&mut self, partition_id: usize, epoch_id: u64) -> sluice::Result<bool> {
        self.0
            .lock()
            .unwrap()
            .push(format!("open {partition_id} {epoch_id}"));
        Ok(true)
    }
    fn process(&mut self, row: Row<'_>) -> sluice::Result<()> {
        self.0
            .lock()
            .unwrap()
            .push(format!("row {}", row.get("user")?));
        Ok(())
    }
    fn close(&mut self, error: Option<&SluiceError>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("close {}", error.is_some()));
    }
}

#[test]
fn foreach_opens_processes_and_closes_per_partition() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = log.clone();
    let q = session()
        .read_stream()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .option("checkpointLocation", d.checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .foreach(move || Box::new(Recorder(l.clone())))
        .start()
        .unwrap();
    q.await_termination().unwrap();
    let log = log.lock().unwrap();
    let rows = log.iter().filter(|l| l.starts_with("row ")).count();
    assert_eq!(rows, 3);
    let opens = log.iter().filter(|l| l.starts_with("open ")).count();
    let closes = log.iter().filter(|l| *l == "close false").count();
    assert!(opens >= 1);
    assert_eq!(opens, closes);
    assert!(log.iter().any(|l| l == "row alice"));
}

/// A stream of `BATCH1` to a table: `to_table` creates it in the warehouse with the query's
/// partitioning, `session.table` and SQL read the committed rows back (partition column last),
/// a restart with a new session finds the table again, and a write that does not fit is refused.
#[test]
fn to_table_creates_a_partitioned_warehouse_table_readable_by_name_and_sql() {
    let d = dirs();
    add_file(&d.input, "batch1.json", BATCH1, 1);
    let warehouse = d.output.join("warehouse");
    let open = || {
        sluice::Session::builder()
            .shuffle_partitions(2)
            .config("spark.sql.warehouse.dir", warehouse.display())
            .build()
            .unwrap()
    };
    let start = |s: &sluice::Session, name: &str| {
        s.read_stream()
            .format("json")
            .schema(SCHEMA)
            .unwrap()
            .load(d.input.display().to_string())
            .unwrap()
            .write_stream()
            .partition_by(["user"])
            .option("checkpointLocation", d.checkpoint.join("q").display())
            .trigger(Trigger::AvailableNow)
            .to_table(name)
    };
    let s = open();
    start(&s, "Purchases").unwrap().await_termination().unwrap();
    assert!(warehouse.join("purchases/_sluice_table.json").is_file());
    assert!(warehouse.join("purchases/user=alice").is_dir());
    let names: Vec<String> = s
        .table("purchases")
        .unwrap()
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["event_time", "action", "amount", "user"]);
    let count = |s: &sluice::Session, sql: &str| -> i64 {
        let b = s.sql(sql).unwrap().collect().unwrap();
        b[0].column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap()
            .value(0)
    };
    let rows = count(&s, "SELECT count(*) FROM purchases");
    assert!(rows > 0);
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM default.purchases WHERE user = 'alice'"
        ),
        count(&s, "SELECT count(*) FROM purchases WHERE user = 'alice'")
    );
    // A second session (a restart) finds the table; a new file goes to it on the next run.
    let s2 = open();
    add_file(&d.input, "batch2.json", BATCH1, 2);
    start(&s2, "purchases")
        .unwrap()
        .await_termination()
        .unwrap();
    assert_eq!(count(&s2, "SELECT count(*) FROM purchases"), 2 * rows);
    // A write in another format is refused, naming the table's.
    let err = s2
        .read_stream()
        .format("json")
        .schema(SCHEMA)
        .unwrap()
        .load(d.input.display().to_string())
        .unwrap()
        .write_stream()
        .format("json")
        .option("checkpointLocation", d.checkpoint.join("j").display())
        .to_table("purchases")
        .unwrap_err();
    assert!(
        err.is(sluice::error::class::TABLE_PROVIDER_MISMATCH),
        "{err}"
    );
}
