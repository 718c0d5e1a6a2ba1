//! The socket source (Spark's `TextSocketMicroBatchStream`): lines of UTF-8 text read from a
//! TCP server (`host`, `port`; e.g. `nc -lk 9999`), one `value STRING` row per line (the line
//! without its `\n` or `\r\n`), plus `timestamp TIMESTAMP`, the time the line arrived, when
//! `includeTimestamp` is true. For the classic network word count, not for production.
//!
//! **Not fault-tolerant, as in Spark.** The lines live in this process's memory only, from the
//! moment they arrive until the batch that read them is committed; offsets are line numbers
//! (Spark's `LongOffset`). After a restart the query reads the lines that arrive on the new
//! connection, numbered after the last committed batch. Where Spark then silently runs a
//! logged-but-uncommitted batch with other rows (or none), Sluice refuses it
//! (`SOCKET_DATA_LOST`) and says how to go on. A server that closes the connection leaves the
//! query running with no new rows, as in Spark, and the log says so.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::{Offset, ReadLimit, Source, SourceBatch, SourceContext, SourceProvider};
use crate::conf::option as opt;
use crate::error::{class, Result, SluiceError};
use crate::sync::MutexExt;

/// How long the source waits for the server to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `format("socket")`: `host` and `port` (both required), `includeTimestamp` (false).
#[derive(Debug, Clone)]
pub struct SocketSourceProvider {
    host: String,
    port: u16,
    include_timestamp: bool,
}

impl SocketSourceProvider {
    /// The source from the reader's options; Spark's checks and messages. A socket stream has a
    /// fixed schema: a user-given one is refused, as in Spark.
    pub fn try_new(schema: Option<SchemaRef>, options: &HashMap<String, String>) -> Result<Self> {
        let bad = |m: String| SluiceError::query(class::INVALID_OPTION, m);
        if schema.is_some() {
            return Err(SluiceError::query(
                class::UNSUPPORTED_DATA_SOURCE,
                "The socket source does not support a user-specified schema: its rows are \
                 `value STRING` (and `timestamp TIMESTAMP` with includeTimestamp=true); drop \
                 .schema(..) and cast or parse `value` in the query",
            ));
        }
        let host = opt(options, "host")
            .ok_or_else(|| bad("Set a host to read from with option(\"host\", ...).".into()))?
            .trim()
            .to_string();
        let port = opt(options, "port")
            .ok_or_else(|| bad("Set a port to read from with option(\"port\", ...).".into()))?;
        let port = port.trim().parse::<u16>().map_err(|_| {
            bad(format!(
                "The socket source's port must be an integer from 0 to 65535, got {port:?}"
            ))
        })?;
        let include_timestamp = match opt(options, "includeTimestamp").map(str::trim) {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(v) => {
                return Err(bad(format!(
                    "includeTimestamp must be set to either \"true\" or \"false\", got {v:?}"
                )))
            }
        };
        Ok(Self {
            host,
            port,
            include_timestamp,
        })
    }

    fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn connect(&self) -> Result<TcpStream> {
        let address = self.address();
        let refused = |e: std::io::Error| {
            SluiceError::connector(
                class::SOCKET_CONNECTION_FAILED,
                format!(
                    "the socket source could not connect to {address}: {e}. Start the server \
                     first (e.g. `nc -lk {}`) or fix the host and port options",
                    self.port
                ),
            )
            .with_source(e)
        };
        let addrs: Vec<_> = address.to_socket_addrs().map_err(refused)?.collect();
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
        for a in addrs {
            match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(refused(last))
    }
}

fn schema(include_timestamp: bool) -> SchemaRef {
    let mut fields = vec![Field::new("value", DataType::Utf8, true)];
    if include_timestamp {
        fields.push(Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ));
    }
    Arc::new(Schema::new(fields))
}

impl SourceProvider for SocketSourceProvider {
    fn schema(&self) -> SchemaRef {
        schema(self.include_timestamp)
    }
    fn description(&self) -> String {
        format!("TextSocketV2[host: {}, port: {}]", self.host, self.port)
    }
    fn kind(&self) -> &'static str {
        "socket"
    }
    fn create_source(&self, _ctx: &SourceContext) -> Result<Box<dyn Source>> {
        log::warn!(
            "The socket source should not be used for production applications! It does not \
             support recovery: lines read from {} live in memory only until their batch commits",
            self.address()
        );
        let stream = self.connect()?;
        let lines = Arc::new(Mutex::new(Lines::default()));
        let reader = stream
            .try_clone()
            .map_err(|e| SluiceError::io(crate::error::Fault::Connector, "socket source", e))?;
        let (shared, address) = (lines.clone(), self.address());
        std::thread::Builder::new()
            .name("sluice-socket-source".into())
            .spawn(move || read_lines(reader, &shared, &address))
            .map_err(|e| SluiceError::io(crate::error::Fault::Internal, "socket reader", e))?;
        Ok(Box::new(SocketSource {
            provider: self.clone(),
            stream,
            lines,
            base: None,
            available_now: None,
        }))
    }
}

/// The lines received and not yet committed. `lines[0]` is the `dropped`-th line of the
/// connection (0-based); the ones before it are committed and gone.
#[derive(Default)]
struct Lines {
    lines: VecDeque<(String, i64)>,
    dropped: i64,
}

impl Lines {
    fn received(&self) -> i64 {
        self.dropped + self.lines.len() as i64
    }
}

fn read_lines(stream: TcpStream, lines: &Mutex<Lines>, address: &str) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => {
                let n = lines.lock_unpoisoned().received();
                log::warn!(
                    "the socket server at {address} closed the connection after {n} lines; the \
                     query keeps running without new rows (as Spark's) until it is stopped"
                );
                return;
            }
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                    if buf.last() == Some(&b'\r') {
                        buf.pop();
                    }
                }
                let at = chrono::Utc::now().timestamp_micros();
                let line = String::from_utf8_lossy(&buf).into_owned();
                lines.lock_unpoisoned().lines.push_back((line, at));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // The source shuts the socket down when the query stops: not worth a warning.
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::NotConnected | std::io::ErrorKind::ConnectionAborted
                ) {
                    log::warn!(
                        "reading from the socket server at {address} failed: {e}; the query \
                         keeps running without new rows until it is stopped"
                    );
                }
                return;
            }
        }
    }
}

struct SocketSource {
    provider: SocketSourceProvider,
    stream: TcpStream,
    lines: Arc<Mutex<Lines>>,
    /// The offset of this connection's first line: one past the last offset committed before
    /// this run (0 for a new query). Fixed by the first call that names a start.
    base: Option<i64>,
    /// Trigger::AvailableNow: the lines received when the trigger began.
    available_now: Option<i64>,
}

impl Drop for SocketSource {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

fn line_number(o: Option<&Offset>) -> Result<i64> {
    match o {
        None => Ok(-1),
        Some(v) => v.as_i64().ok_or_else(|| {
            SluiceError::checkpoint(
                class::CHECKPOINT_INVALID_SOURCE_OFFSET,
                format!("a socket source offset is a line number, got {v}"),
            )
        }),
    }
}

impl SocketSource {
    fn base(&mut self, start: Option<&Offset>) -> Result<i64> {
        let start = line_number(start)?;
        Ok(*self.base.get_or_insert(start + 1))
    }

    fn lost(&self, from: i64, to: i64, why: &str) -> SluiceError {
        SluiceError::connector(
            class::SOCKET_DATA_LOST,
            format!(
                "the batch reading lines {from}..={to} of {} cannot be run: {why}. The socket \
                 source keeps lines in memory only and cannot replay them (as in Spark, it is not \
                 fault-tolerant). Start the query with a new checkpointLocation, or read from a \
                 replayable source (kafka, files) to get exactly-once",
                self.provider.description()
            ),
        )
    }
}

impl Source for SocketSource {
    fn latest_offset(
        &mut self,
        start: Option<&Offset>,
        _limit: ReadLimit,
    ) -> Result<Option<Offset>> {
        let base = self.base(start)?;
        let received = self.lines.lock_unpoisoned().received();
        let received = self.available_now.map_or(received, |n| n.min(received));
        if received == 0 {
            return Ok(start.cloned());
        }
        Ok(Some(serde_json::json!(base + received - 1)))
    }

    fn prepare_for_trigger_available_now(&mut self) -> Result<()> {
        self.available_now = Some(self.lines.lock_unpoisoned().received());
        Ok(())
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<SourceBatch> {
        let (from, to) = (line_number(start)? + 1, line_number(Some(end))?);
        let Some(base) = self.base else {
            return Err(self.lost(
                from,
                to,
                "it was planned by an earlier run of the query, whose lines went with it",
            ));
        };
        let lines = self.lines.lock_unpoisoned();
        let (first, last) = (base + lines.dropped, base + lines.received() - 1);
        if from < first || to > last {
            return Err(self.lost(
                from,
                to,
                &format!("this run holds lines {first}..={last} only"),
            ));
        }
        let range = (from - first) as usize..=(to - first) as usize;
        let rows: Vec<&(String, i64)> = lines.lines.range(range).collect();
        let value: StringArray = rows.iter().map(|(l, _)| Some(l.as_str())).collect();
        let mut columns: Vec<arrow::array::ArrayRef> = vec![Arc::new(value)];
        if self.provider.include_timestamp {
            let at: TimestampMicrosecondArray = rows.iter().map(|(_, t)| Some(*t)).collect();
            columns.push(Arc::new(at));
        }
        let batch = RecordBatch::try_new(schema(self.provider.include_timestamp), columns)?;
        Ok(SourceBatch {
            batches: vec![batch],
            ..Default::default()
        })
    }

    fn commit(&mut self, end: &Offset) -> Result<()> {
        let Some(base) = self.base else {
            return Ok(());
        };
        let end = line_number(Some(end))?;
        let mut lines = self.lines.lock_unpoisoned();
        while base + lines.dropped <= end && lines.lines.pop_front().is_some() {
            lines.dropped += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_are_checked_with_sparks_messages() {
        let e = SocketSourceProvider::try_new(None, &options(&[("port", "9")])).unwrap_err();
        assert!(e.message().contains("Set a host to read from"), "{e}");
        let e = SocketSourceProvider::try_new(None, &options(&[("host", "h")])).unwrap_err();
        assert!(e.message().contains("Set a port to read from"), "{e}");
        let e = SocketSourceProvider::try_new(None, &options(&[("host", "h"), ("port", "x")]))
            .unwrap_err();
        assert!(e.message().contains("must be an integer"), "{e}");
        let e = SocketSourceProvider::try_new(
            None,
            &options(&[("host", "h"), ("port", "9"), ("includeTimestamp", "yes")]),
        )
        .unwrap_err();
        assert!(e.message().contains("either \"true\" or \"false\""), "{e}");
        let p = SocketSourceProvider::try_new(
            None,
            &options(&[("HOST", "h"), ("Port", " 9 "), ("includetimestamp", "TRUE")]),
        )
        .unwrap();
        assert_eq!(p.schema().fields().len(), 2);
        assert_eq!(p.description(), "TextSocketV2[host: h, port: 9]");
        let e = SocketSourceProvider::try_new(
            Some(schema(false)),
            &options(&[("host", "h"), ("port", "9")]),
        )
        .unwrap_err();
        assert!(e.is(class::UNSUPPORTED_DATA_SOURCE), "{e}");
    }

    #[test]
    fn a_server_that_is_not_there_fails_at_start_naming_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = SocketSourceProvider::try_new(
            None,
            &options(&[("host", "127.0.0.1"), ("port", &port.to_string())]),
        )
        .unwrap();
        let ctx = SourceContext {
            index: 0,
            metadata_dir: std::env::temp_dir(),
            log_cleanup: Default::default(),
            memory: Default::default(),
        };
        let e = p.create_source(&ctx).err().unwrap();
        assert!(e.is(class::SOCKET_CONNECTION_FAILED), "{e}");
        assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");
    }
}
