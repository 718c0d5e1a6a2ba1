//! Runs both Spark-recorded corpora through Sluice, plainly and in the crash matrix: the public
//! one (`../shared/conformance/scenarios`) and Sluice's own (`crates/conformance/scenarios`,
//! recorded with `crates/conformance/record/record_spark.py`). Scenarios that need capabilities
//! not built yet are listed, each with its reason, in `expected-failures.txt` (names from both
//! corpora); every other scenario must pass, and a listed scenario that starts passing fails
//! the plain test until it is taken off the list.

use std::collections::BTreeSet;
use std::path::PathBuf;

use sluice_conformance::ScenarioOutcome;
use sluice_conformance::{expected_failures_file, expected_plain_failures as expected_failures};

fn scenarios_dir() -> PathBuf {
    if let Ok(d) = std::env::var("SLUICE_CONFORMANCE_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/scenarios")
}

/// Sluice's own corpus, kept in the repo.
fn own_scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// The `name` of every scenario file of both corpora (that the public one is found is checked
/// by the public test).
fn all_scenario_names() -> BTreeSet<String> {
    let mut dirs = vec![own_scenarios_dir()];
    if scenarios_dir().is_dir() {
        dirs.push(scenarios_dir());
    }
    let files = sluice_conformance::collect_scenarios(&dirs).unwrap();
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", f.display()));
            v["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{} has no name", f.display()))
                .to_string()
        })
        .collect()
}

/// The scenario name of an outcome without its crash-matrix variant (`name [variant]`).
fn base_name(o: &ScenarioOutcome) -> &str {
    o.name.split(" [").next().unwrap_or(&o.name)
}

/// Plain outcomes against the expected failures: unlisted failures and listed passes.
fn check_plain(outcomes: &[ScenarioOutcome]) -> Vec<String> {
    let expected = expected_failures();
    let mut problems = Vec::new();
    for o in outcomes {
        match (o.passed, expected.get(&o.name)) {
            (true, None) => println!("PASS {}", o.name),
            (false, Some(why)) => println!(
                "XFAIL {} ({why}): {}",
                o.name,
                o.message.as_deref().unwrap_or("")
            ),
            (false, None) => problems.push(format!(
                "FAIL {} ({}): {}",
                o.name,
                o.path,
                o.message.as_deref().unwrap_or("")
            )),
            (true, Some(_)) => problems.push(format!(
                "UNEXPECTED PASS {}: take it off crates/conformance/expected-failures.txt",
                o.name
            )),
        }
    }
    println!("{}", sluice_conformance::summary_line(outcomes));
    problems
}

/// Matrix outcomes: every variant of a scenario not listed as an expected failure passes.
fn check_matrix(outcomes: &[ScenarioOutcome]) -> Vec<String> {
    let expected = expected_failures();
    let variants = expected_failures_file();
    println!("{}", sluice_conformance::summary_line(outcomes));
    outcomes
        .iter()
        .filter(|o| {
            !o.passed && !expected.contains_key(base_name(o)) && !variants.contains_key(&o.name)
        })
        .map(|o| format!("{}: {}", o.name, o.message.as_deref().unwrap_or("")))
        .collect()
}

#[test]
fn public_scenarios_pass_except_the_listed_expected_failures() {
    let dir = scenarios_dir();
    assert!(
        dir.is_dir(),
        "conformance scenarios not found at {} — the repo expects shared/ beside the clone, or set SLUICE_CONFORMANCE_DIR",
        dir.display()
    );
    let outcomes = sluice_conformance::run_paths(&[dir], false).unwrap();
    assert!(!outcomes.is_empty(), "no scenarios found");
    let problems = check_plain(&outcomes);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn own_scenarios_pass_except_the_listed_expected_failures() {
    let outcomes = sluice_conformance::run_paths(&[own_scenarios_dir()], false).unwrap();
    assert!(
        outcomes.len() >= 45,
        "expected Sluice's own corpus of at least 45 scenarios, found {}",
        outcomes.len()
    );
    let problems = check_plain(&outcomes);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every name in expected-failures.txt is a scenario of one of the corpora, and names are unique
/// across both.
#[test]
fn expected_failures_name_real_scenarios_and_names_are_unique() {
    let mut dirs = vec![own_scenarios_dir()];
    if scenarios_dir().is_dir() {
        dirs.push(scenarios_dir());
    }
    let files = sluice_conformance::collect_scenarios(&dirs).unwrap();
    let names = all_scenario_names();
    assert_eq!(
        names.len(),
        files.len(),
        "scenario names must be unique across both corpora"
    );
    let unknown: Vec<String> = expected_failures_file()
        .into_keys()
        .filter(|n| !names.contains(n.split(" [").next().unwrap_or(n)))
        .map(|n| format!("expected-failures.txt names {n}, which is not a scenario"))
        .collect();
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
}

/// Every stateless scenario passes: the spine's acceptance criterion.
#[test]
fn every_stateless_scenario_passes() {
    let outcomes =
        sluice_conformance::run_paths(&[scenarios_dir().join("stateless")], false).unwrap();
    assert!(
        outcomes.len() >= 6,
        "expected the six stateless scenarios, found {}",
        outcomes.len()
    );
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed)
        .map(|o| format!("{}: {}", o.name, o.message.as_deref().unwrap_or("")))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The crash matrix (restart after every batch, crash after offsets, after the sink, in the
/// middle of a state commit, one file per trigger, stateful input one row at a time) over every
/// public scenario: every variant gives the plain run's output.
#[test]
fn crash_matrix_over_every_public_scenario() {
    let outcomes = sluice_conformance::run_paths_matrix(&[scenarios_dir()], false).unwrap();
    assert!(outcomes.len() >= 7 * 29, "{} outcomes", outcomes.len());
    let failed = check_matrix(&outcomes);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The crash matrix over Sluice's own corpus.
#[test]
fn crash_matrix_over_every_own_scenario() {
    let outcomes = sluice_conformance::run_paths_matrix(&[own_scenarios_dir()], false).unwrap();
    assert!(outcomes.len() >= 7 * 45, "{} outcomes", outcomes.len());
    let failed = check_matrix(&outcomes);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Both corpora in the crash matrix with the on-disk state store provider selected (Spark's
/// RocksDB provider class, `sluice conformance --matrix --conf
/// spark.sql.streaming.stateStore.providerClass=...RocksDBStateStoreProvider`): the same outputs.
#[test]
fn crash_matrix_with_the_on_disk_state_store_provider() {
    let conf = [(
        "spark.sql.streaming.stateStore.providerClass".to_string(),
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider".to_string(),
    )];
    let outcomes = sluice_conformance::run_paths_with(
        &[scenarios_dir(), own_scenarios_dir()],
        &sluice_conformance::Variant::MATRIX,
        &conf,
        false,
    )
    .unwrap();
    assert!(
        outcomes.len() >= 7 * (29 + 45),
        "{} outcomes",
        outcomes.len()
    );
    let failed = check_matrix(&outcomes);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
