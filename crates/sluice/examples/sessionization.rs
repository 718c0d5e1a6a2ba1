//! Sessionization with the `GroupState` API (Spark's `flatMapGroupsWithState`).
//!
//! Events per user; a user's session closes when no event arrives for 10 minutes of event time
//! (an event-time timeout), and is emitted then, once. The state of open sessions lives in the
//! checkpoint, so the query can be stopped and restarted mid-session.
//!
//! Run: `cargo run -p sluice --example sessionization`

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arrow::array::{Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use serde::{Deserialize, Serialize};
use sluice::{GroupState, GroupStateTimeout, OutputMode, Session, Trigger};

/// An open session, as kept in state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenSession {
    pub start_us: i64,
    pub end_us: i64,
    pub events: i64,
}

/// A closed session, as emitted: (user, start, end, events), times in µs.
pub type ClosedSession = (String, i64, i64, i64);

pub const GAP: Duration = Duration::from_secs(600);

/// Writes `name` into `dir` atomically, with a modification time `seq` seconds after a base.
pub fn add_file(dir: &Path, name: &str, body: &str, seq: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.with_extension(format!("staging-{name}"));
    std::fs::write(&tmp, body)?;
    let t = SystemTime::now() - Duration::from_secs(3600) + Duration::from_secs(seq);
    std::fs::File::options()
        .write(true)
        .open(&tmp)?
        .set_modified(t)?;
    std::fs::rename(&tmp, dir.join(name))
}

/// Runs the sessionization query once over what `input` holds (available-now), on the
/// checkpoint `checkpoint`, and returns the sessions it closed.
pub fn run_once(input: &Path, checkpoint: &Path) -> sluice::Result<Vec<ClosedSession>> {
    let session = Session::builder().shuffle_partitions(2).build()?;
    let events = session
        .read_stream()
        .format("json")
        .schema("ts TIMESTAMP, user STRING")?
        .load(input.display().to_string())?
        .with_watermark("ts", "1 minute")?;
    let out_schema = Arc::new(Schema::new(vec![
        Field::new("user", DataType::Utf8, true),
        Field::new(
            "session_start",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new(
            "session_end",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new("events", DataType::Int64, true),
    ]));
    let schema = out_schema.clone();
    let sessions = events.group_by_key(["user"]).flat_map_groups_with_state(
        out_schema.clone(),
        OutputMode::Append,
        GroupStateTimeout::EventTimeTimeout,
        move |key, rows, state: &mut GroupState<OpenSession>| {
            let user = key[0].to_string();
            if state.has_timed_out() {
                // No event for GAP: the session is over. Emit it and forget it.
                let s = state.get().cloned();
                state.remove();
                return Ok(match s {
                    Some(s) => vec![RecordBatch::try_new(
                        schema.clone(),
                        vec![
                            Arc::new(StringArray::from(vec![user])),
                            Arc::new(TimestampMicrosecondArray::from(vec![s.start_us])),
                            Arc::new(TimestampMicrosecondArray::from(vec![s.end_us])),
                            Arc::new(Int64Array::from(vec![s.events])),
                        ],
                    )?],
                    None => vec![],
                });
            }
            let ts = rows
                .column(0)
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .ok_or_else(|| sluice::SluiceError::internal("ts column"))?;
            let mut s = state.get().cloned().unwrap_or(OpenSession {
                start_us: i64::MAX,
                end_us: i64::MIN,
                events: 0,
            });
            for i in 0..ts.len() {
                if ts.is_valid(i) {
                    s.start_us = s.start_us.min(ts.value(i));
                    s.end_us = s.end_us.max(ts.value(i));
                    s.events += 1;
                }
            }
            // Close the session GAP after its last event, in event time.
            state.set_timeout_timestamp((s.end_us + GAP.as_micros() as i64) / 1000)?;
            state.update(s);
            Ok(vec![])
        },
    )?;
    let closed: Arc<Mutex<Vec<ClosedSession>>> = Arc::default();
    let sink = closed.clone();
    let q = sessions
        .write_stream()
        .output_mode(OutputMode::Append)
        .option("checkpointLocation", checkpoint.display())
        .trigger(Trigger::AvailableNow)
        .foreach_batch(move |data, _| {
            for b in data.batches() {
                let u = b.column(0).as_any().downcast_ref::<StringArray>();
                let s = b
                    .column(1)
                    .as_any()
                    .downcast_ref::<TimestampMicrosecondArray>();
                let e = b
                    .column(2)
                    .as_any()
                    .downcast_ref::<TimestampMicrosecondArray>();
                let n = b.column(3).as_any().downcast_ref::<Int64Array>();
                if let (Some(u), Some(s), Some(e), Some(n)) = (u, s, e, n) {
                    for i in 0..b.num_rows() {
                        sink.lock().unwrap_or_else(|p| p.into_inner()).push((
                            u.value(i).to_string(),
                            s.value(i),
                            e.value(i),
                            n.value(i),
                        ));
                    }
                }
            }
            Ok(())
        })
        .start()?;
    q.await_termination()?;
    let out = closed.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(out)
}

/// The example's input: three files of events, minutes past 10:00 on 2026-05-01.
pub fn example_files() -> Vec<String> {
    let ev =
        |m: u32, u: &str| format!("{{\"ts\": \"2026-05-01T10:{m:02}:00Z\", \"user\": \"{u}\"}}\n");
    vec![
        ev(0, "alice") + &ev(1, "bob") + &ev(3, "alice"),
        ev(8, "alice") + &ev(9, "carol"),
        ev(45, "dave"),
    ]
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("sluice-sessionization-{}", std::process::id()));
    let (input, checkpoint) = (dir.join("events"), dir.join("checkpoint"));
    for (i, body) in example_files().iter().enumerate() {
        add_file(&input, &format!("{i}.json"), body, i as u64)?;
        // A new query (a restart) for every file: open sessions carry over in the checkpoint.
        for (user, start, end, events) in run_once(&input, &checkpoint)? {
            println!("session closed: user={user} start_us={start} end_us={end} events={events}");
        }
    }
    println!("checkpoint: {}", checkpoint.display());
    Ok(())
}
