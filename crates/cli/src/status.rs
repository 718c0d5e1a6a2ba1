//! What `sluice run` shows while queries run: a live status line per query (batch, input and
//! processing rates, watermark, state rows, rows dropped as late, and for available-now runs a
//! progress bar of the files or offsets done), warnings in words when a query falls behind or
//! drops late rows, or `--progress json`: each `StreamingQueryProgress` as one JSON line.
//!
//! It is a `StreamingQueryListener` registered on the session; the board redraws its lines in
//! place on a terminal and prints them one after another otherwise (logs, CI).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::progress::{QueryTerminatedEvent, StreamingQueryListener};
use sluice::StreamingQueryProgress;

/// `--progress human|json|none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A status line per query on stderr, and warnings in words
    #[value(alias = "text")]
    Human,
    /// Each StreamingQueryProgress as one JSON line on stdout
    Json,
    /// Nothing
    #[value(alias = "off")]
    None,
}

/// stderr as the status lines, warnings and log lines share it. On a terminal the status lines
/// stay at the bottom, redrawn in place and cut to the terminal's width; anything else printed
/// while they are shown ([`print_line`], the logger) goes above them: the lines are cleared, the
/// text printed, the lines drawn again. Elsewhere (a file, a pipe, CI) everything is printed one
/// line after another.
pub struct Console {
    state: Mutex<ConsoleState>,
}

struct ConsoleState {
    /// Whether the status lines are redrawn in place (None: not decided yet, stderr is a
    /// terminal decides).
    in_place: Option<bool>,
    /// The status lines shown last (in place only).
    lines: Vec<String>,
    /// The width in characters of each line as drawn (to move the cursor back over them: one
    /// row each, or more once a narrowed terminal has rewrapped them).
    drawn: Vec<usize>,
}

static CONSOLE: Console = Console {
    state: Mutex::new(ConsoleState {
        in_place: None,
        lines: Vec::new(),
        drawn: Vec::new(),
    }),
};

/// The process's stderr console.
pub fn console() -> &'static Console {
    &CONSOLE
}

/// Prints one message (it may have several lines) to stderr, above the status lines.
pub fn print_line(text: &str) {
    console().print_above(text);
}

/// Whether stdout and stderr are the same terminal (a console sink's tables would land between
/// the status lines and the cursor).
pub fn stdout_shares_the_terminal() -> bool {
    let (out, err) = (std::io::stdout(), std::io::stderr());
    if !out.is_terminal() || !err.is_terminal() {
        return false;
    }
    // SAFETY: fstat fills the zeroed struct for two valid descriptors of this process.
    unsafe {
        let (mut a, mut b): (libc::stat, libc::stat) = (std::mem::zeroed(), std::mem::zeroed());
        if libc::fstat(1, &mut a) != 0 || libc::fstat(2, &mut b) != 0 {
            return true;
        }
        a.st_rdev == b.st_rdev
    }
}

/// The width of the terminal on stderr, in columns (None if it is not a terminal or does not
/// say; then `$COLUMNS`).
pub fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize struct; a descriptor that is not a terminal is an error.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: `ws` is a valid winsize for the ioctl to fill; descriptor 2 is this process's.
    if unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
        return Some(ws.ws_col as usize);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .filter(|c| *c > 0)
}

/// How many terminal rows lines of these widths take on a terminal `width` columns wide (a
/// terminal that was narrowed after they were drawn rewraps them).
pub fn rows(drawn: &[usize], width: Option<usize>) -> usize {
    drawn
        .iter()
        .map(|n| match width {
            Some(w) if w > 0 => n.div_ceil(w).max(1),
            _ => 1,
        })
        .sum()
}

/// `line` cut to `width` columns (characters; the status lines are ASCII but for names),
/// ending in `…` when something was cut.
pub fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = line.chars().take(width - 1).collect();
    out.push('…');
    out
}

impl Console {
    /// Whether the status lines are redrawn in place (by default: when stderr is a terminal).
    pub fn redraw_in_place(&self, yes: bool) {
        if let Ok(mut st) = self.state.lock() {
            st.in_place = Some(yes && std::io::stderr().is_terminal());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ConsoleState> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.in_place.is_none() {
            st.in_place = Some(std::io::stderr().is_terminal());
        }
        st
    }

    /// Whether status lines are redrawn in place.
    pub fn in_place(&self) -> bool {
        self.lock().in_place == Some(true)
    }

    /// Prints `text` above the status lines (or just prints it).
    pub fn print_above(&self, text: &str) {
        let mut st = self.lock();
        let lines = st.lines.clone();
        self.draw(&mut st, &[text.to_string()], lines);
    }

    /// Shows `lines` as the status lines (in place), with `above` printed above them; elsewhere
    /// prints `above` only.
    fn show(&self, above: &[String], lines: Vec<String>) {
        let mut st = self.lock();
        self.draw(&mut st, above, lines);
    }

    fn draw(&self, st: &mut ConsoleState, above: &[String], lines: Vec<String>) {
        let mut err = std::io::stderr().lock();
        if st.in_place != Some(true) {
            for a in above {
                let _ = writeln!(err, "{a}");
            }
            let _ = err.flush();
            return;
        }
        // Back to the first status line, clear to the end of the screen, print the text, draw
        // the status lines again (each cut to the width: one row each, so `drawn` stays true).
        let width = terminal_width();
        let mut buf = String::new();
        let up = rows(&st.drawn, width);
        if up > 0 {
            buf.push_str(&format!("\r\x1b[{up}A\x1b[J"));
        }
        for a in above {
            buf.push_str(a);
            buf.push('\n');
        }
        st.drawn.clear();
        for l in &lines {
            let l = match width {
                Some(w) => fit(l, w),
                None => l.clone(),
            };
            st.drawn.push(l.chars().count());
            buf.push_str(&l);
            buf.push('\n');
        }
        let _ = err.write_all(buf.as_bytes());
        let _ = err.flush();
        st.lines = lines;
    }
}

/// Per query: what the status line shows and what the warnings remember.
#[derive(Default)]
struct QueryLine {
    name: String,
    line: String,
    files_done: u64,
    /// Kafka-style sources: the sum of all partition offsets when this run started.
    first_offsets: Option<i64>,
    behind_batches: u32,
    warned_behind: bool,
}

/// The listener: one status line per query (in order of first progress).
pub struct StatusBoard {
    mode: ProgressMode,
    /// Trigger interval per query id (warnings when a batch takes longer).
    trigger_intervals: Mutex<BTreeMap<String, Duration>>,
    state: Mutex<BoardState>,
}

#[derive(Default)]
struct BoardState {
    queries: BTreeMap<String, QueryLine>,
    order: Vec<String>,
}

impl StatusBoard {
    pub fn new(mode: ProgressMode) -> Arc<Self> {
        Arc::new(Self {
            mode,
            trigger_intervals: Mutex::new(BTreeMap::new()),
            state: Mutex::new(BoardState::default()),
        })
    }

    /// The trigger interval of query `id` (a processing-time trigger), for the warning when a
    /// batch takes longer.
    pub fn set_trigger_interval(&self, id: &str, interval: Duration) {
        if let Ok(mut m) = self.trigger_intervals.lock() {
            m.insert(id.to_string(), interval);
        }
    }

    /// The status lines (in place on a terminal) with the warnings above them.
    fn redraw(&self, st: &BoardState, warnings: &[String]) {
        let above: Vec<String> = warnings.iter().map(|w| format!("warning: {w}")).collect();
        let lines = st.order.iter().map(|id| st.queries[id].line.clone());
        console().show(&above, lines.collect());
    }
}

/// Thousands separators for rates and counts.
fn grouped(n: f64) -> String {
    let s = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The sum of the partition offsets of a Kafka offset (`{"topic":{"0":12,"1":7}}`); None for
/// other sources' offsets.
fn offset_sum(o: Option<&serde_json::Value>) -> Option<i64> {
    let topics = o?.as_object()?;
    let mut sum = 0i64;
    let mut any = false;
    for parts in topics.values() {
        for v in parts.as_object()?.values() {
            sum += v.as_i64()?;
            any = true;
        }
    }
    any.then_some(sum)
}

fn bar(done: u64, total: u64, unit: &str) -> String {
    const WIDTH: u64 = 20;
    let filled = (done * WIDTH)
        .checked_div(total)
        .unwrap_or(WIDTH)
        .min(WIDTH);
    format!(
        "[{}{}] {done}/{total} {unit} ({}%)",
        "#".repeat(filled as usize),
        ".".repeat((WIDTH - filled) as usize),
        (done * 100).checked_div(total).unwrap_or(100)
    )
}

/// The status line of one progress, and the warnings it raises.
fn describe(
    q: &mut QueryLine,
    p: &StreamingQueryProgress,
    trigger_interval: Option<Duration>,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut parts = vec![
        format!("[{}] batch {}", q.name, p.batch_id),
        format!("in {} rows/s", grouped(p.input_rows_per_second)),
        format!("processed {} rows/s", grouped(p.processed_rows_per_second)),
    ];
    if let Some(w) = p.event_time.get("watermark") {
        parts.push(format!("watermark {w}"));
    }
    let state_rows: i64 = p.state_operators.iter().map(|s| s.num_rows_total).sum();
    let late: i64 = p
        .state_operators
        .iter()
        .map(|s| s.num_rows_dropped_by_watermark)
        .sum();
    if !p.state_operators.is_empty() {
        let mem: i64 = p.state_operators.iter().map(|s| s.memory_used_bytes).sum();
        parts.push(format!(
            "state {} rows ({:.1} MB)",
            grouped(state_rows as f64),
            mem as f64 / 1e6
        ));
        parts.push(format!("late {late}"));
    }
    // Progress of the run: files done of the files known (file sources), offsets behind
    // (Kafka).
    let mut outstanding: Option<u64> = None;
    let (mut offsets_end, mut offsets_latest, mut offsets_start) = (None, None, None);
    for s in &p.sources {
        if let (Some(start), Some(end), Some(latest)) = (
            offset_sum(s.start_offset.as_ref()).or(offset_sum(s.end_offset.as_ref())),
            offset_sum(s.end_offset.as_ref()),
            offset_sum(s.latest_offset.as_ref()),
        ) {
            *offsets_start.get_or_insert(0) += start;
            *offsets_end.get_or_insert(0) += end;
            *offsets_latest.get_or_insert(0) += latest;
        }
        if let Some(n) = s
            .metrics
            .get("numFilesRead")
            .and_then(|v| v.parse::<u64>().ok())
        {
            q.files_done += n;
        }
        if let Some(n) = s
            .metrics
            .get("numFilesOutstanding")
            .and_then(|v| v.parse::<u64>().ok())
        {
            *outstanding.get_or_insert(0) += n;
        }
        if let Some(n) = s.metrics.get("maxOffsetsBehindLatest") {
            parts.push(format!("up to {n} offsets behind"));
        }
    }
    if let Some(left) = outstanding {
        parts.push(bar(q.files_done, q.files_done + left, "files"));
    }
    if let (Some(start), Some(end), Some(latest)) = (offsets_start, offsets_end, offsets_latest) {
        let first = *q.first_offsets.get_or_insert(start);
        parts.push(bar(
            (end - first).max(0) as u64,
            (latest.max(end) - first).max(0) as u64,
            "offsets",
        ));
    }
    q.line = parts.join(" | ");

    // Warnings, in words.
    if p.num_input_rows > 0 && p.processed_rows_per_second < p.input_rows_per_second {
        q.behind_batches += 1;
    } else if p.num_input_rows > 0 {
        q.behind_batches = 0;
        q.warned_behind = false;
    }
    if q.behind_batches >= 3 && !q.warned_behind {
        q.warned_behind = true;
        warnings.push(format!(
            "query {} is falling behind: for {} batches it processed fewer rows per second ({}) \
             than arrived ({}); its backlog grows. Give it more cores, a larger \
             maxFilesPerTrigger / maxOffsetsPerTrigger, or less work per row",
            q.name,
            q.behind_batches,
            grouped(p.processed_rows_per_second),
            grouped(p.input_rows_per_second)
        ));
    }
    if let (Some(interval), Some(ms)) = (
        trigger_interval,
        p.duration_ms.get("triggerExecution").copied(),
    ) {
        if interval.as_millis() > 0 && ms as u128 > interval.as_millis() {
            warnings.push(format!(
                "query {}: batch {} took {} ms, longer than the trigger interval of {} ms; the \
                 next batch starts late",
                q.name,
                p.batch_id,
                ms,
                interval.as_millis()
            ));
        }
    }
    if late > 0 {
        warnings.push(format!(
            "query {}: batch {} dropped {late} row(s) that arrived behind the watermark{}; they \
             are counted in numRowsDroppedByWatermark{}",
            q.name,
            p.batch_id,
            p.event_time
                .get("watermark")
                .map(|w| format!(" ({w})"))
                .unwrap_or_default(),
            if p.sink.metrics.contains_key("numLateRowsWritten") {
                " and written to the late-row sink"
            } else {
                ". Set the lateRows.format / lateRows.path sink options to keep them"
            }
        ));
    }
    warnings
}

impl StreamingQueryListener for StatusBoard {
    fn on_query_progress(&self, p: &StreamingQueryProgress) {
        match self.mode {
            ProgressMode::None => {}
            ProgressMode::Json => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", p.compact_json());
                let _ = out.flush();
            }
            ProgressMode::Human => {
                let Ok(mut st) = self.state.lock() else {
                    return;
                };
                if !st.queries.contains_key(&p.id) {
                    st.order.push(p.id.clone());
                    st.queries.insert(
                        p.id.clone(),
                        QueryLine {
                            name: p.name.clone().unwrap_or_else(|| p.id[..8].to_string()),
                            ..Default::default()
                        },
                    );
                }
                let interval = self
                    .trigger_intervals
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&p.id).copied());
                let warnings = match st.queries.get_mut(&p.id) {
                    Some(q) => describe(q, p, interval),
                    None => Vec::new(),
                };
                if !console().in_place() {
                    // One line per batch, then its warnings.
                    print_line(&st.queries[&p.id].line);
                }
                self.redraw(&st, &warnings);
            }
        }
    }

    fn on_query_terminated(&self, e: &QueryTerminatedEvent) {
        if self.mode == ProgressMode::Human {
            if let Some(ex) = &e.exception {
                // The engine logs it as an error; said here only when that log line is off.
                if !log::log_enabled!(target: "sluice::query", log::Level::Error) {
                    print_line(&format!("query {} failed: {ex}", e.id));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(batch: i64, rows: i64, input: f64, processed: f64) -> StreamingQueryProgress {
        let mut p: StreamingQueryProgress = serde_json::from_value(serde_json::json!({
            "id": "0123456789abcdef", "runId": "r", "name": "q1", "timestamp": "t",
            "batchId": batch, "batchDuration": 10, "numInputRows": rows,
            "inputRowsPerSecond": input, "processedRowsPerSecond": processed,
            "durationMs": {"triggerExecution": 1500},
            "eventTime": {"watermark": "2026-09-15T12:10:00.000Z"},
            "stateOperators": [], "sources": [],
            "sink": {"description": "noop", "numOutputRows": 0, "metrics": {}}
        }))
        .expect("a progress document");
        p.batch_id = batch;
        p
    }

    #[test]
    fn the_line_shows_rates_watermark_and_the_files_done() {
        let mut q = QueryLine {
            name: "q1".into(),
            ..Default::default()
        };
        let mut p = progress(3, 1000, 12_345.0, 20_000.0);
        let mut metrics = BTreeMap::new();
        metrics.insert("numFilesRead".to_string(), "2".to_string());
        metrics.insert("numFilesOutstanding".to_string(), "6".to_string());
        p.sources = vec![serde_json::from_value(serde_json::json!({
            "description": "FileStreamSource[file:/in]", "startOffset": null,
            "endOffset": null, "latestOffset": null, "numInputRows": 1000,
            "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0, "metrics": metrics
        }))
        .expect("a source progress")];
        let w = describe(&mut q, &p, None);
        assert!(w.is_empty(), "{w:?}");
        assert!(q.line.contains("[q1] batch 3"), "{}", q.line);
        assert!(q.line.contains("in 12,345 rows/s"), "{}", q.line);
        assert!(q.line.contains("watermark 2026-09-15T12:10:00.000Z"));
        assert!(q.line.contains("2/8 files (25%)"), "{}", q.line);
    }

    #[test]
    fn falling_behind_slow_batches_and_late_rows_are_warned_in_words() {
        let mut q = QueryLine {
            name: "q1".into(),
            ..Default::default()
        };
        let mut warnings = Vec::new();
        for b in 0..3 {
            warnings = describe(&mut q, &progress(b, 100, 1000.0, 500.0), None);
        }
        assert!(
            warnings.iter().any(|w| w.contains("falling behind")),
            "{warnings:?}"
        );
        // Said once, not every batch.
        let again = describe(&mut q, &progress(3, 100, 1000.0, 500.0), None);
        assert!(!again.iter().any(|w| w.contains("falling behind")));
        let slow = describe(
            &mut q,
            &progress(4, 100, 10.0, 500.0),
            Some(Duration::from_secs(1)),
        );
        assert!(
            slow.iter()
                .any(|w| w.contains("took 1500 ms, longer than the trigger interval of 1000 ms")),
            "{slow:?}"
        );
        let mut p = progress(5, 100, 10.0, 500.0);
        p.state_operators = vec![serde_json::from_value(serde_json::json!({
            "operatorName": "stateStoreSave", "numRowsTotal": 10, "numRowsUpdated": 1,
            "numRowsRemoved": 0, "allUpdatesTimeMs": 0, "allRemovalsTimeMs": 0,
            "commitTimeMs": 0, "numRowsDroppedByWatermark": 2, "memoryUsedBytes": 100,
            "numShufflePartitions": 2, "numStateStoreInstances": 2, "customMetrics": {}
        }))
        .expect("a state operator progress")];
        let late = describe(&mut q, &p, None);
        assert!(
            late.iter()
                .any(|w| w.contains("dropped 2 row(s)") && w.contains("lateRows.format")),
            "{late:?}"
        );
        assert!(q.line.contains("late 2"));
    }

    #[test]
    fn kafka_sources_show_the_offsets_done_of_what_was_there() {
        let mut q = QueryLine {
            name: "q1".into(),
            ..Default::default()
        };
        let source = |start: i64, end: i64, latest: i64| {
            serde_json::from_value(serde_json::json!({
                "description": "KafkaV2[Subscribe[t]]",
                "startOffset": {"t": {"0": start, "1": start}},
                "endOffset": {"t": {"0": end, "1": end}},
                "latestOffset": {"t": {"0": latest, "1": latest}},
                "numInputRows": 10, "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0,
                "metrics": {"maxOffsetsBehindLatest": (latest - end).to_string()}
            }))
            .expect("a source progress")
        };
        let mut p = progress(0, 10, 1.0, 1.0);
        p.sources = vec![source(100, 125, 200)];
        describe(&mut q, &p, None);
        assert!(
            q.line
                .contains("[#####...............] 50/200 offsets (25%)"),
            "{}",
            q.line
        );
        assert!(q.line.contains("up to 75 offsets behind"), "{}", q.line);
        p.sources = vec![source(125, 200, 200)];
        describe(&mut q, &p, None);
        assert!(q.line.contains("200/200 offsets (100%)"), "{}", q.line);
    }

    #[test]
    fn progress_modes_parse() {
        use clap::ValueEnum;
        assert_eq!(ProgressMode::from_str("json", true), Ok(ProgressMode::Json));
        assert_eq!(
            ProgressMode::from_str("human", true),
            Ok(ProgressMode::Human)
        );
        assert_eq!(ProgressMode::from_str("off", true), Ok(ProgressMode::None));
        assert!(ProgressMode::from_str("xml", true).is_err());
    }

    #[test]
    fn status_lines_are_cut_to_the_width() {
        let line = "[q1] batch 3 | in 12,345 rows/s | processed 20,000 rows/s";
        assert_eq!(fit(line, 200), line);
        assert_eq!(fit(line, line.len()), line);
        let cut = fit(line, 20);
        assert_eq!(cut, "[q1] batch 3 | in 1…");
        assert_eq!(cut.chars().count(), 20);
        assert_eq!(fit(line, 1), "…");
        assert_eq!(fit(line, 0), "");
        // Characters, not bytes: a name with accents is cut on a character boundary.
        assert_eq!(fit("[réseau] batch 1", 9), "[réseau]…");
    }

    #[test]
    fn lines_drawn_wider_than_the_terminal_now_is_take_more_rows() {
        assert_eq!(rows(&[], Some(80)), 0);
        assert_eq!(rows(&[70, 80], Some(80)), 2);
        assert_eq!(rows(&[70, 80], Some(40)), 4);
        assert_eq!(rows(&[0, 81], Some(80)), 3);
        assert_eq!(rows(&[200], None), 1);
    }
}
