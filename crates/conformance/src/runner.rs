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

/// How a scenario is run: plainly, or in one of the crash-matrix variants. Every variant must
/// give the sink output the plain run gives (the sink is exactly-once by batch id: a batch seen
/// twice counts once) and the same figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Plain,
    /// (a) a new query after every batch.
    RestartEveryBatch,
    /// (b) crash after `offsets/N` is written, before the sink, at every batch.
    CrashAfterOffsets,
    /// (c) crash after the sink wrote batch N, before `commits/N`, at every batch.
    CrashAfterSink,
    /// (d) crash in the middle of a state store commit (after one partition), at every batch.
    CrashInStateCommit,
    /// (e) one file per trigger (`maxFilesPerTrigger=1` on every file source).
    OneFilePerTrigger,
    /// (f) every stateful operator takes its input one row at a time, as a batch larger than
    /// the memory budget's chunk is taken chunk by chunk.
    OneRowChunks,
}

impl Variant {
    /// The crash matrix, plain run first.
    pub const MATRIX: [Variant; 7] = [
        Variant::Plain,
        Variant::RestartEveryBatch,
        Variant::CrashAfterOffsets,
        Variant::CrashAfterSink,
        Variant::CrashInStateCommit,
        Variant::OneFilePerTrigger,
        Variant::OneRowChunks,
    ];
    pub fn name(&self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::RestartEveryBatch => "restart-every-batch",
            Variant::CrashAfterOffsets => "crash-after-offsets",
            Variant::CrashAfterSink => "crash-after-sink",
            Variant::CrashInStateCommit => "crash-in-state-commit",
            Variant::OneFilePerTrigger => "one-file-per-trigger",
            Variant::OneRowChunks => "one-row-chunks",
        }
    }
    fn crash_point(&self) -> Option<&'static str> {
        match self {
            Variant::CrashAfterOffsets => Some("afterOffsets"),
            Variant::CrashAfterSink => Some("afterSink"),
            Variant::CrashInStateCommit => Some("inStateCommit"),
            _ => None,
        }
    }
}

/// Runs the scenario in `path` in a fresh temporary directory.
pub fn run_scenario_file(path: &Path) -> ScenarioOutcome {
    run_scenario_file_with(path, Variant::Plain)
}

/// Runs the scenario in `path` in one variant; the outcome's name carries the variant.
pub fn run_scenario_file_with(path: &Path, variant: Variant) -> ScenarioOutcome {
    run_scenario_file_with_conf(path, variant, &[])
}

/// [`run_scenario_file_with`], with the session confs `extra` set first: a corpus run with a
/// setting applied (`sluice conformance --conf KEY=VALUE`). A key the scenario sets itself
/// keeps the scenario's value (what Spark was recorded with).
pub fn run_scenario_file_with_conf(
    path: &Path,
    variant: Variant,
    extra: &[(String, String)],
) -> ScenarioOutcome {
    let mut o = run_scenario_file_plain(path, variant, extra);
    if variant != Variant::Plain {
        o.name = format!("{} [{}]", o.name, variant.name());
    }
    o
}

fn run_scenario_file_plain(
    path: &Path,
    variant: Variant,
    extra: &[(String, String)],
) -> ScenarioOutcome {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return fail(path, "?", format!("cannot read {}: {e}", path.display())),
    };
    let mut scenario: Scenario = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                path,
                "?",
                format!("{} is not a valid scenario: {e}", path.display()),
            )
        }
    };
    for (k, v) in extra {
        scenario.conf.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let name = scenario.name.clone();
    match run_scenario_with(&scenario, variant) {
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
    run_scenario_with(s, Variant::Plain)
}

/// Runs all runs of a scenario in a variant of the crash matrix.
pub fn run_scenario_with(s: &Scenario, variant: Variant) -> Result<(), String> {
    let mut ws = Workspace::new()?;
    let mode: OutputMode = s
        .output_mode
        .parse()
        .map_err(|e: SluiceError| e.to_string())?;
    for (i, run) in s.runs.iter().enumerate() {
        run_one(s, run, mode, &mut ws, variant).map_err(|e| format!("run {}: {e}", i + 1))?;
    }
    Ok(())
}

fn run_one(
    s: &Scenario,
    run: &Run,
    mode: OutputMode,
    ws: &mut Workspace,
    variant: Variant,
) -> Result<(), String> {
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
    let result = execute_variant(s, run, mode, ws, variant);
    match (result, expect_error) {
        (Err(e), Some(want)) => check_error(&e, want),
        (Err(e), None) => Err(format!("query failed: {e}")),
        (Ok(_), Some(want)) => Err(format!(
            "expected a {} error ({}), but the run succeeded",
            want.kind,
            want.contains.as_deref().unwrap_or("")
        )),
        (Ok((seen, progress)), None) => {
            let expect = expect.ok_or("the run has neither expect nor expect_error")?;
            // Once a run takes several files, one file per trigger changes the batch ids of
            // every later run too.
            let several_files = s
                .runs
                .iter()
                .any(|r| r.add_files.values().any(|f| f.len() > 1));
            if variant == Variant::OneFilePerTrigger && several_files {
                // Other batches, same result: every row once (append) and every input row read.
                let want: Vec<Row> = expect.batches.iter().flat_map(|b| b.rows.clone()).collect();
                let got: Vec<Row> = seen.iter().flat_map(|b| b.rows.clone()).collect();
                compare_rows(&want, &got, false)
                    .map_err(|e| format!("all batches together: {e}"))?;
                let read: i64 = progress.iter().map(|p| p.num_input_rows).sum();
                let want_read: i64 = expect
                    .batches
                    .iter()
                    .map(|b| {
                        b.num_input_rows_without_pushdown
                            .or(b.num_input_rows)
                            .unwrap_or(0)
                    })
                    .sum();
                if read != want_read && mode != OutputMode::Append {
                    return Err(format!("read {read} input rows, expected {want_read}"));
                }
                return Ok(());
            }
            compare_batches(s, expect, &seen, &progress)
        }
    }
}

/// Does a failed run fail the way `want` says? For kind `error_class`, Sluice's class must equal
/// Spark's recorded class; the other kinds go through [`error_kind`].
fn check_error(e: &SluiceError, want: &ExpectError) -> Result<(), String> {
    if want.kind == "error_class" {
        let class = want
            .class
            .as_deref()
            .ok_or("expect_error has kind error_class but no recorded class")?;
        return if e.class() == class {
            Ok(())
        } else {
            Err(format!(
                "expected an error of class {class}, got {}: {e}",
                e.class()
            ))
        };
    }
    let kind = error_kind(e);
    if kind == want.kind {
        Ok(())
    } else {
        Err(format!("expected a {} error, got {kind}: {e}", want.kind))
    }
}

type RunResult = Result<(Vec<SeenBatch>, Vec<StreamingQueryProgress>), SluiceError>;

/// The id of the next batch to commit: one past the newest `commits/N`.
fn next_batch_id(ws: &Workspace) -> u64 {
    std::fs::read_dir(ws.checkpoint().join("commits"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
                .max()
                .map_or(0, |m| m + 1)
        })
        .unwrap_or(0)
}

/// Runs one run in a variant: as many attempts (restarts) as the variant needs, merging what
/// the sink saw by batch id (a replayed batch replaces the crashed attempt's copy).
fn execute_variant(
    s: &Scenario,
    run: &Run,
    mode: OutputMode,
    ws: &Workspace,
    variant: Variant,
) -> RunResult {
    let conf_none: Vec<(String, String)> = Vec::new();
    match variant {
        Variant::Plain => execute(s, run, mode, ws, &conf_none, false),
        Variant::OneFilePerTrigger => execute(s, run, mode, ws, &conf_none, true),
        Variant::OneRowChunks => {
            let conf = [(
                sluice::testing::STATEFUL_INPUT_CHUNK_ROWS.to_string(),
                "1".to_string(),
            )];
            execute(s, run, mode, ws, &conf, false)
        }
        _ => {
            let mut seen: std::collections::BTreeMap<u64, SeenBatch> = Default::default();
            let mut progress: std::collections::BTreeMap<i64, StreamingQueryProgress> =
                Default::default();
            let mut crashed: std::collections::BTreeSet<u64> = Default::default();
            for _attempt in 0..200 {
                let mut conf = Vec::new();
                if variant == Variant::RestartEveryBatch {
                    conf.push((
                        sluice::testing::MAX_BATCHES_PER_RUN.to_string(),
                        "1".to_string(),
                    ));
                }
                if let Some(point) = variant.crash_point() {
                    // Crash once at every batch: at the first id not crashed at yet.
                    let mut n = next_batch_id(ws);
                    while crashed.contains(&n) {
                        n += 1;
                    }
                    crashed.insert(n);
                    conf.push((
                        sluice::testing::CRASH_POINT.to_string(),
                        format!("{point}:{n}"),
                    ));
                }
                match execute_keeping_partial(s, run, mode, ws, &conf, false) {
                    Ok((got, prog)) => {
                        let ran = !got.is_empty();
                        for b in got {
                            seen.insert(b.batch_id, b);
                        }
                        for p in prog {
                            progress.insert(p.batch_id, p);
                        }
                        let done = match variant {
                            Variant::RestartEveryBatch => !ran,
                            // No crash happened: everything available ran.
                            _ => true,
                        };
                        if done {
                            return Ok((
                                seen.into_values().collect(),
                                progress.into_values().collect(),
                            ));
                        }
                    }
                    Err((e, (got, prog))) if e.is(sluice::error::class::SLUICE_INJECTED_CRASH) => {
                        // What the sink got before the crash stays (an exactly-once consumer
                        // dedupes by batch id); the replay replaces it.
                        for b in got {
                            seen.insert(b.batch_id, b);
                        }
                        // Progress of the batches this attempt committed before it crashed.
                        for p in prog {
                            progress.insert(p.batch_id, p);
                        }
                    }
                    Err((e, _)) => return Err(e),
                }
            }
            Err(SluiceError::internal(
                "the crash matrix did not finish in 200 attempts",
            ))
        }
    }
}

/// What one attempt of a run saw: the batches the sink got and the progress reported.
type Attempt = (Vec<SeenBatch>, Vec<StreamingQueryProgress>);

fn execute(
    s: &Scenario,
    run: &Run,
    mode: OutputMode,
    ws: &Workspace,
    conf: &[(String, String)],
    one_file_per_trigger: bool,
) -> RunResult {
    execute_keeping_partial(s, run, mode, ws, conf, one_file_per_trigger).map_err(|(e, _)| e)
}

/// [`execute`], keeping what a failed attempt saw before it failed (the crash matrix merges it
/// with the replay's).
fn execute_keeping_partial(
    s: &Scenario,
    run: &Run,
    mode: OutputMode,
    ws: &Workspace,
    conf: &[(String, String)],
    one_file_per_trigger: bool,
) -> Result<Attempt, (SluiceError, Attempt)> {
    let nothing = |e: SluiceError| (e, Attempt::default());
    let mut builder = Session::builder().shuffle_partitions(s.shuffle_partitions);
    // The scenario's Spark confs (spark.sql.caseSensitive, spark.sql.ansi.enabled, ...), as
    // Spark's `spark.conf.set` before the query: on the session every source and query uses.
    for (k, v) in &s.conf {
        builder = builder.config(k, v);
    }
    let session = builder.build().map_err(nothing)?;
    for (k, v) in conf {
        session.set_conf(k, v);
    }
    for (name, def) in &s.sources {
        let mut def = def.clone();
        if one_file_per_trigger && def.format != "static" {
            def.options
                .entry("maxFilesPerTrigger".to_string())
                .or_insert_with(|| "1".to_string());
        }
        let frame = source_frame(&session, name, &def, ws).map_err(nothing)?;
        frame.create_or_replace_temp_view(name).map_err(nothing)?;
    }
    let query_text = run.query.as_deref().unwrap_or(&s.query);
    let frame = session.sql(query_text).map_err(nothing)?;
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
        .start()
        .map_err(nothing)?;
    let result = query.await_termination();
    let progress = query.recent_progress();
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match result {
        Err(e) => Err((e, (seen, progress))),
        Ok(()) => Ok((seen, progress)),
    }
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
