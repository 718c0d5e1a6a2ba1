//! Runs one scenario through Sluice, run by run, and compares with what Spark recorded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sluice::error::Fault;
use sluice::{OutputMode, Session, SluiceError, StreamFrame, StreamingQueryProgress, Trigger};

use crate::scenario::{Expect, ExpectError, Run, Scenario, SourceDef};
use crate::values::{compare_rows, rows_of, Row};

/// The error kinds of FORMAT.md, mapped from Sluice's error classes — in this one place.
pub fn error_kind(e: &SluiceError) -> &'static str {
    let class = e.class();
    if class.starts_with("STREAMING_OUTPUT_MODE") {
        "output_mode"
    } else if class.starts_with("STATE_SCHEMA") || class.starts_with("STREAMING_STATE_SCHEMA") {
        "state_schema"
    } else if e.fault() == Fault::NotSupportedYet {
        "not_supported_yet"
    } else {
        "other"
    }
}

/// The outcome of one scenario.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScenarioOutcome {
    pub name: String,
    pub path: String,
    pub passed: bool,
    /// The first difference, when it failed.
    pub message: Option<String>,
}

/// Runs the scenario in `path` in a fresh temporary directory.
pub fn run_scenario_file(path: &Path) -> ScenarioOutcome {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return fail(path, "?", format!("cannot read {}: {e}", path.display())),
    };
    let scenario: Scenario = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                path,
                "?",
                format!("{} is not a valid scenario: {e}", path.display()),
            )
        }
    };
    let name = scenario.name.clone();
    match run_scenario(&scenario) {
        Ok(()) => ScenarioOutcome {
            name,
            path: path.display().to_string(),
            passed: true,
            message: None,
        },
        Err(msg) => fail(path, &name, msg),
    }
}

fn fail(path: &Path, name: &str, msg: String) -> ScenarioOutcome {
    ScenarioOutcome {
        name: name.to_string(),
        path: path.display().to_string(),
        passed: false,
        message: Some(msg),
    }
}

struct Workspace {
    _dir: tempfile::TempDir,
    root: PathBuf,
    next_mtime: SystemTime,
}

impl Workspace {
    fn new() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let root = dir.path().to_path_buf();
        Ok(Self {
            _dir: dir,
            root,
            // Well in the past, one second apart per file, so that maxFileAge (relative to the
            // newest file) never hides a file and modification times order the files.
            next_mtime: SystemTime::now() - Duration::from_secs(3600),
        })
    }
    fn source_dir(&self, name: &str) -> PathBuf {
        self.root.join("input").join(name)
    }
    fn checkpoint(&self) -> PathBuf {
        self.root.join("checkpoint")
    }
    /// Writes a file to staging, stamps it later than every earlier file, renames it in.
    fn add_file(&mut self, source: &str, name: &str, lines: &[String]) -> Result<(), String> {
        let staging = self.root.join("staging");
        let dir = self.source_dir(source);
        for d in [&staging, &dir] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let mut content = lines.join("\n");
        if !lines.is_empty() {
            content.push('\n');
        }
        let tmp = staging.join(name);
        std::fs::write(&tmp, content).map_err(|e| format!("{}: {e}", tmp.display()))?;
        self.next_mtime += Duration::from_secs(1);
        let f = std::fs::File::options()
            .write(true)
            .open(&tmp)
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        f.set_modified(self.next_mtime)
            .map_err(|e| format!("set mtime of {}: {e}", tmp.display()))?;
        drop(f);
        std::fs::rename(&tmp, dir.join(name)).map_err(|e| format!("rename {name}: {e}"))?;
        Ok(())
    }
}

/// One committed batch as the foreach-batch sink saw it.
#[derive(Debug, Clone)]
struct SeenBatch {
    batch_id: u64,
    rows: Vec<Row>,
}

/// Runs all runs of a scenario; `Err` is the first difference.
pub fn run_scenario(s: &Scenario) -> Result<(), String> {
    let mut ws = Workspace::new()?;
    let mode: OutputMode = s
        .output_mode
        .parse()
        .map_err(|e: SluiceError| e.to_string())?;
    for (i, run) in s.runs.iter().enumerate() {
        run_one(s, run, mode, &mut ws).map_err(|e| format!("run {}: {e}", i + 1))?;
    }
    Ok(())
}

fn run_one(s: &Scenario, run: &Run, mode: OutputMode, ws: &mut Workspace) -> Result<(), String> {
    for (source, files) in &run.add_files {
        for f in files {
            ws.add_file(source, &f.name, &f.lines)?;
        }
    }
    let (expect, expect_error): (Option<&Expect>, Option<&ExpectError>) = match &run.sluice_intended
    {
        Some(intended) => (intended.expect.as_ref(), intended.expect_error.as_ref()),
        None => (run.expect.as_ref(), run.expect_error.as_ref()),
    };
    let result = execute(s, run, mode, ws);
    match (result, expect_error) {
        (Err(e), Some(want)) => {
            let kind = error_kind(&e);
            if kind == want.kind {
                Ok(())
            } else {
                Err(format!("expected a {} error, got {kind}: {e}", want.kind))
            }
        }
        (Err(e), None) => Err(format!("query failed: {e}")),
        (Ok(_), Some(want)) => Err(format!(
            "expected a {} error ({}), but the run succeeded",
            want.kind,
            want.contains.as_deref().unwrap_or("")
        )),
        (Ok((seen, progress)), None) => {
            let expect = expect.ok_or("the run has neither expect nor expect_error")?;
            compare_batches(s, expect, &seen, &progress)
        }
    }
}

type RunResult = Result<(Vec<SeenBatch>, Vec<StreamingQueryProgress>), SluiceError>;

fn execute(s: &Scenario, run: &Run, mode: OutputMode, ws: &Workspace) -> RunResult {
    let session = Session::builder()
        .shuffle_partitions(s.shuffle_partitions)
        .build()?;
    for (name, def) in &s.sources {
        let frame = source_frame(&session, name, def, ws)?;
        frame.create_or_replace_temp_view(name)?;
    }
    let query_text = run.query.as_deref().unwrap_or(&s.query);
    let frame = session.sql(query_text)?;
    let seen: Arc<Mutex<Vec<SeenBatch>>> = Arc::default();
    let sink = seen.clone();
    let query = frame
        .write_stream()
        .output_mode(mode)
        .option("checkpointLocation", ws.checkpoint().display())
        .trigger(Trigger::AvailableNow)
        .foreach_batch(move |data, batch_id| {
            let rows = rows_of(data.batches());
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(SeenBatch { batch_id, rows });
            Ok(())
        })
        .start()?;
    query.await_termination()?;
    let progress = query.recent_progress();
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok((seen, progress))
}

fn source_frame(
    session: &Session,
    name: &str,
    def: &SourceDef,
    ws: &Workspace,
) -> Result<StreamFrame, SluiceError> {
    if def.format == "static" {
        let schema = sluice::schema::parse_ddl_schema(&def.schema)?;
        let dir = ws.root.join("static");
        std::fs::create_dir_all(&dir)
            .map_err(|e| SluiceError::io(Fault::Internal, dir.display(), e))?;
        let file = dir.join(format!("{name}.json"));
        let lines: Vec<String> = def.rows.iter().map(|r| r.to_string()).collect();
        std::fs::write(&file, lines.join("\n"))
            .map_err(|e| SluiceError::io(Fault::Internal, file.display(), e))?;
        let batch = sluice::source::file::read_files("json", &[file], &schema, &HashMap::new())?;
        let schema = sluice::source::file::nullable_schema(&schema);
        session.register_batches(name, schema, batch.batches)?;
        return session.table(name);
    }
    let dir = ws.source_dir(name);
    std::fs::create_dir_all(&dir)
        .map_err(|e| SluiceError::io(Fault::Internal, dir.display(), e))?;
    let mut reader = session
        .read_stream()
        .format(def.format.as_str())
        .schema(&def.schema)?;
    if def.format == "csv" {
        reader = reader.option("header", "true");
    }
    let frame = reader
        .options(def.options.clone())
        .load(dir.display().to_string())?;
    let frame = match &def.watermark {
        Some(w) => apply_watermark(frame, &w.column, &w.delay)?,
        None => frame,
    };
    match &def.dedup {
        Some(d) => apply_dedup(frame, &d.columns, d.within_watermark),
        None => Ok(frame),
    }
}

fn apply_watermark(
    frame: StreamFrame,
    column: &str,
    delay: &str,
) -> Result<StreamFrame, SluiceError> {
    frame.with_watermark(column, delay)
}

fn apply_dedup(
    frame: StreamFrame,
    columns: &[String],
    within: bool,
) -> Result<StreamFrame, SluiceError> {
    if within {
        frame.drop_duplicates_within_watermark(columns)
    } else {
        frame.drop_duplicates(columns)
    }
}

fn compare_batches(
    s: &Scenario,
    expect: &Expect,
    seen: &[SeenBatch],
    progress: &[StreamingQueryProgress],
) -> Result<(), String> {
    let ids: Vec<u64> = seen.iter().map(|b| b.batch_id).collect();
    let want_ids: Vec<u64> = expect.batches.iter().map(|b| b.batch_id).collect();
    if ids != want_ids {
        return Err(format!("expected batches {want_ids:?}, got {ids:?}"));
    }
    for (want, got) in expect.batches.iter().zip(seen) {
        let id = want.batch_id;
        let p = progress.iter().find(|p| p.batch_id == id as i64);
        compare_rows(&want.rows, &got.rows, s.ordered).map_err(|e| format!("batch {id}: {e}"))?;
        if let Some(n) = want.num_input_rows {
            let got_n = p
                .map(|p| p.num_input_rows)
                .ok_or(format!("batch {id}: no progress"))?;
            if got_n != n && Some(got_n) != want.num_input_rows_without_pushdown {
                return Err(format!(
                    "batch {id}: numInputRows {got_n}, expected {n}{}",
                    want.num_input_rows_without_pushdown
                        .map(|w| format!(" (or {w} without pushdown)"))
                        .unwrap_or_default()
                ));
            }
        }
        if let Some(wm) = &want.watermark {
            let got_wm = p
                .and_then(|p| p.event_time.get("watermark").cloned())
                .map(|w| canonical_watermark(&w))
                .unwrap_or_else(|| "1970-01-01T00:00:00".to_string());
            if &got_wm != wm {
                return Err(format!("batch {id}: watermark {got_wm}, expected {wm}"));
            }
        }
        let sum = |f: fn(&sluice::progress::StateOperatorProgress) -> i64| -> i64 {
            p.map(|p| p.state_operators.iter().map(f).sum())
                .unwrap_or(0)
        };
        if let Some(n) = want.num_rows_dropped_by_watermark {
            let got_n = sum(|o| o.num_rows_dropped_by_watermark);
            if got_n != n {
                return Err(format!(
                    "batch {id}: numRowsDroppedByWatermark {got_n}, expected {n}"
                ));
            }
        }
        if let Some(n) = want
            .num_rows_total
            .filter(|_| !crate::deviations::skips_num_rows_total(&s.name))
        {
            let got_n = sum(|o| o.num_rows_total);
            if got_n != n {
                return Err(format!("batch {id}: numRowsTotal {got_n}, expected {n}"));
            }
        }
    }
    Ok(())
}

/// `2026-09-15T12:00:00.000Z` -> `2026-09-15T12:00:00` (FORMAT.md's canonical form).
fn canonical_watermark(w: &str) -> String {
    let w = w.trim_end_matches('Z');
    let (base, frac) = w.split_once('.').unwrap_or((w, ""));
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        base.to_string()
    } else {
        format!("{base}.{frac}")
    }
}

/// Every `*.json` file under the given files and directories, sorted.
pub fn collect_scenarios(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        walk(p, &mut out)?;
    }
    out.sort();
    Ok(out)
}

fn walk(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|e| format!("{}: {e}", p.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            walk(&e, out)?;
        }
    } else if p.extension().is_some_and(|e| e == "json") {
        out.push(p.to_path_buf());
    }
    Ok(())
}
