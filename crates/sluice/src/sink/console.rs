//! The console sink: prints each batch as Spark does (`Batch: N` and a `show()` table).

use crate::error::class;
use crate::sync::MutexExt;
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::{BatchData, Sink, SinkContext, SinkProvider};
use crate::error::{Result, SluiceError};

/// Where console output goes (stdout unless a test captures it).
pub type ConsoleOut = Arc<Mutex<dyn Write + Send>>;

/// Options: `numRows` (20), `truncate` (true).
pub struct ConsoleSinkProvider {
    num_rows: usize,
    truncate: bool,
    out: ConsoleOut,
}

impl std::fmt::Debug for ConsoleSinkProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConsoleSink(numRows={}, truncate={})",
            self.num_rows, self.truncate
        )
    }
}

impl ConsoleSinkProvider {
    /// A console sink printing to stdout, from the options `numRows` and `truncate` (any case).
    pub fn from_options(options: &HashMap<String, String>) -> Result<Self> {
        let get = |k: &str| {
            options
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.clone())
        };
        let num_rows = match get("numRows") {
            Some(v) => v.parse().map_err(|_| {
                SluiceError::query(
                    class::INVALID_OPTION,
                    format!("numRows must be a number, got {v:?}"),
                )
            })?,
            None => 20,
        };
        let truncate = match get("truncate") {
            Some(v) => v.parse().map_err(|_| {
                SluiceError::query(
                    class::INVALID_OPTION,
                    format!("truncate must be true or false, got {v:?}"),
                )
            })?,
            None => true,
        };
        Ok(Self {
            num_rows,
            truncate,
            out: Arc::new(Mutex::new(std::io::stdout())),
        })
    }
    /// Sends the output somewhere else than stdout.
    pub fn with_output(mut self, out: ConsoleOut) -> Self {
        self.out = out;
        self
    }
}

impl SinkProvider for ConsoleSinkProvider {
    fn description(&self) -> String {
        "org.apache.spark.sql.execution.streaming.ConsoleTable$".into()
    }
    fn create_sink(&self, _ctx: &SinkContext) -> Result<Box<dyn Sink>> {
        Ok(Box::new(ConsoleSink {
            num_rows: self.num_rows,
            truncate: self.truncate,
            out: self.out.clone(),
            pending: None,
        }))
    }
    fn supports_continuous(&self) -> bool {
        true
    }
}

struct ConsoleSink {
    num_rows: usize,
    truncate: bool,
    out: ConsoleOut,
    /// Continuous processing: the current epoch's first rows (up to `numRows + 1`, enough for
    /// the table and its "only showing" line), printed when the epoch commits, as Spark does.
    pending: Option<BatchData>,
}

impl Sink for ConsoleSink {
    fn add_batch(&mut self, batch_id: u64, data: &BatchData) -> Result<()> {
        let text = format!(
            "-------------------------------------------\nBatch: {batch_id}\n-------------------------------------------\n{}\n",
            show_string(data, self.num_rows, self.truncate)?
        );
        let mut out = self.out.lock_unpoisoned();
        out.write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| SluiceError::io(crate::Fault::Connector, "console sink", e))
    }

    fn write_continuous(&mut self, _epoch: u64, data: &BatchData) -> Result<()> {
        let keep = self.num_rows + 1;
        let pending = self.pending.get_or_insert_with(|| BatchData {
            schema: data.schema.clone(),
            partitions: vec![vec![]],
        });
        let mut have = pending.num_rows();
        for b in data.batches() {
            if have >= keep {
                break;
            }
            let take = b.num_rows().min(keep - have);
            pending.partitions[0].push(b.slice(0, take));
            have += take;
        }
        Ok(())
    }

    fn commit_epoch(&mut self, epoch: u64) -> Result<()> {
        match self.pending.take() {
            Some(rows) if rows.num_rows() > 0 => self.add_batch(epoch, &rows),
            _ => Ok(()),
        }
    }
}

/// Formats one cell as Spark's `show()` does (timestamps `2026-09-15 12:01:00`, `null`;
/// structs `{1, a}`, arrays `[1, 2]`, maps `{a -> 1}` with `NULL` inside them).
pub fn format_cell(array: &ArrayRef, i: usize) -> Result<String> {
    if array.is_null(i) {
        return Ok("null".into());
    }
    match array.data_type() {
        DataType::Struct(_)
        | DataType::List(_)
        | DataType::LargeList(_)
        | DataType::Map(_, _)
        | DataType::Binary => {
            let mut s = String::new();
            crate::value_text::write_show(&mut s, array.as_ref(), i)?;
            Ok(s)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let a = array
                .as_any()
                .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
                .ok_or_else(|| SluiceError::internal("timestamp array"))?;
            Ok(crate::time_text::spark_timestamp_text(a.value(i))
                .unwrap_or_else(|| a.value(i).to_string()))
        }
        DataType::Float64 => {
            let a = array
                .as_any()
                .downcast_ref::<arrow::array::Float64Array>()
                .ok_or_else(|| SluiceError::internal("float array"))?;
            Ok(format!("{:?}", a.value(i)))
        }
        _ => {
            let opts = FormatOptions::default().with_null("null");
            let f = ArrayFormatter::try_new(array.as_ref(), &opts)?;
            Ok(f.value(i).to_string())
        }
    }
}

/// Spark's `Dataset.showString(numRows, truncate = 20 or 0)`.
pub fn show_string(data: &BatchData, num_rows: usize, truncate: bool) -> Result<String> {
    let header: Vec<String> = data
        .schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut total = 0usize;
    for b in data.batches() {
        for i in 0..b.num_rows() {
            total += 1;
            if rows.len() < num_rows {
                let mut row = Vec::with_capacity(b.num_columns());
                for c in b.columns() {
                    row.push(format_cell(c, i)?);
                }
                rows.push(row);
            }
        }
    }
    let cut = |s: String| -> String {
        if truncate && s.chars().count() > 20 {
            let mut t: String = s.chars().take(17).collect();
            t.push_str("...");
            t
        } else {
            s
        }
    };
    let header: Vec<String> = header.into_iter().map(cut).collect();
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| r.into_iter().map(cut).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count().max(3)).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let sep: String = widths.iter().fold("+".to_string(), |mut s, w| {
        s.push_str(&"-".repeat(*w));
        s.push('+');
        s
    }) + "\n";
    let line = |cells: &[String]| -> String {
        let mut s = "|".to_string();
        for (c, w) in cells.iter().zip(&widths) {
            let pad = " ".repeat(w - c.chars().count());
            if truncate {
                s.push_str(&pad);
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&pad);
            }
            s.push('|');
        }
        s.push('\n');
        s
    };
    let mut out = String::new();
    out.push_str(&sep);
    out.push_str(&line(&header));
    out.push_str(&sep);
    for r in &rows {
        out.push_str(&line(r));
    }
    out.push_str(&sep);
    if total > num_rows {
        out.push_str(&format!(
            "only showing top {num_rows} row{}\n",
            if num_rows == 1 { "" } else { "s" }
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{Field, Schema};

    fn data() -> BatchData {
        let schema = Arc::new(Schema::new(vec![
            Field::new("user", DataType::Utf8, true),
            Field::new("amount", DataType::Float64, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]));
        let b = arrow::array::RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![Some("alice"), None])),
                Arc::new(Float64Array::from(vec![Some(12.0), Some(3.5)])),
                Arc::new(TimestampMicrosecondArray::from(vec![
                    Some(1_789_473_660_000_000),
                    Some(1_789_473_660_250_000),
                ])),
            ],
        )
        .unwrap();
        BatchData {
            schema,
            partitions: vec![vec![b]],
        }
    }

    #[test]
    fn show_string_matches_sparks_layout() {
        let s = show_string(&data(), 20, true).unwrap();
        let expected = "\
+-----+------+--------------------+
| user|amount|                  ts|
+-----+------+--------------------+
|alice|  12.0| 2026-09-15 12:01:00|
| null|   3.5|2026-09-15 12:01:...|
+-----+------+--------------------+
";
        assert_eq!(s, expected);
    }

    #[test]
    fn show_string_without_truncation_pads_right_and_says_when_cut() {
        let s = show_string(&data(), 1, false).unwrap();
        assert!(s.contains("|alice|12.0  |2026-09-15 12:01:00|"), "{s}");
        assert!(s.ends_with("only showing top 1 row\n"), "{s}");
    }
}
