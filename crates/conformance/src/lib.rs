//! The conformance runner: runs the scenarios of `shared/conformance` (recorded on Apache Spark)
//! through Sluice and reports the first difference of each. Entry point of `sluice conformance`.

pub mod deviations;
pub mod runner;
pub mod scenario;
pub mod values;

use std::path::PathBuf;

pub use runner::{
    collect_scenarios, error_kind, run_scenario_file, run_scenario_file_with,
    run_scenario_file_with_conf, ScenarioOutcome, Variant,
};

/// Runs every scenario under `paths`, printing `PASS name` / `FAIL name: difference` as it
/// goes (when `print`), and returns the outcomes.
pub fn run_paths(paths: &[PathBuf], print: bool) -> Result<Vec<ScenarioOutcome>, String> {
    run_paths_with(paths, &[Variant::Plain], &[], print)
}

/// Runs every scenario under `paths` in every variant of the crash matrix
/// (`Variant::MATRIX`), printing as `run_paths` does.
pub fn run_paths_matrix(paths: &[PathBuf], print: bool) -> Result<Vec<ScenarioOutcome>, String> {
    run_paths_with(paths, &Variant::MATRIX, &[], print)
}

/// Runs every scenario under `paths` in each of `variants`, with the session confs `conf` set
/// first (a scenario's own confs win), printing as `run_paths` does.
pub fn run_paths_with(
    paths: &[PathBuf],
    variants: &[Variant],
    conf: &[(String, String)],
    print: bool,
) -> Result<Vec<ScenarioOutcome>, String> {
    let files = collect_scenarios(paths)?;
    let mut out = Vec::new();
    for f in files {
        for v in variants {
            let o = run_scenario_file_with_conf(&f, *v, conf);
            if print {
                match &o.message {
                    None => println!("PASS {}", o.name),
                    Some(m) => println!("FAIL {}: {m}", o.name),
                }
            }
            out.push(o);
        }
    }
    Ok(out)
}

/// The closing line: `N passed, M failed`.
pub fn summary_line(outcomes: &[ScenarioOutcome]) -> String {
    let passed = outcomes.iter().filter(|o| o.passed).count();
    format!("{passed} passed, {} failed", outcomes.len() - passed)
}

/// `crates/conformance/expected-failures.txt` as `name -> reason`: `name  reason` lines are
/// scenarios that fail plainly (and so in every variant); `name [variant]  reason` lines are
/// scenarios that pass plainly but fail in that crash-matrix variant (key `name [variant]`).
pub fn expected_failures_file() -> std::collections::BTreeMap<String, String> {
    let text = include_str!("../expected-failures.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            let rest = rest.trim();
            match rest.strip_prefix('[').and_then(|r| r.split_once(']')) {
                Some((variant, why)) => (format!("{name} [{variant}]"), why.trim().to_string()),
                None => (name.to_string(), rest.to_string()),
            }
        })
        .collect()
}

/// The scenarios of `expected-failures.txt` that fail plainly.
pub fn expected_plain_failures() -> std::collections::BTreeMap<String, String> {
    expected_failures_file()
        .into_iter()
        .filter(|(k, _)| !k.contains(" ["))
        .collect()
}
