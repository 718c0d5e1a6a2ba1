//! Runs every public conformance scenario (`../shared/conformance/scenarios`, recorded on
//! Apache Spark) through Sluice. Scenarios that need capabilities not built yet are listed, each
//! with its reason, in `expected-failures.txt`; every other scenario must pass, and a listed
//! scenario that starts passing fails this test until it is taken off the list.

use std::collections::BTreeMap;
use std::path::PathBuf;

fn scenarios_dir() -> PathBuf {
    if let Ok(d) = std::env::var("SLUICE_CONFORMANCE_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/scenarios")
}

fn expected_failures() -> BTreeMap<String, String> {
    let text = include_str!("../expected-failures.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(char::is_whitespace) {
            Some((name, why)) => (name.to_string(), why.trim().to_string()),
            None => (l.to_string(), String::new()),
        })
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
    let expected = expected_failures();
    let outcomes = sluice_conformance::run_paths(&[dir], false).unwrap();
    assert!(!outcomes.is_empty(), "no scenarios found");
    let mut problems = Vec::new();
    for o in &outcomes {
        match (o.passed, expected.get(&o.name)) {
            (true, None) => println!("PASS {}", o.name),
            (false, Some(why)) => println!(
                "XFAIL {} ({why}): {}",
                o.name,
                o.message.as_deref().unwrap_or("")
            ),
            (false, None) => problems.push(format!(
                "FAIL {}: {}",
                o.name,
                o.message.as_deref().unwrap_or("")
            )),
            (true, Some(_)) => problems.push(format!(
                "UNEXPECTED PASS {}: take it off crates/conformance/expected-failures.txt",
                o.name
            )),
        }
    }
    for name in expected.keys() {
        if !outcomes.iter().any(|o| &o.name == name) {
            problems.push(format!(
                "expected-failures.txt names {name}, which is not a scenario"
            ));
        }
    }
    println!("{}", sluice_conformance::summary_line(&outcomes));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
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
/// middle of a state commit, one file per trigger) over every public scenario: every variant
/// gives the plain run's output.
#[test]
fn crash_matrix_over_every_public_scenario() {
    let outcomes = sluice_conformance::run_paths_matrix(&[scenarios_dir()], false).unwrap();
    assert!(outcomes.len() >= 6 * 29, "{} outcomes", outcomes.len());
    let expected = expected_failures();
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed && !expected.keys().any(|x| o.name.starts_with(x.as_str())))
        .map(|o| format!("{}: {}", o.name, o.message.as_deref().unwrap_or("")))
        .collect();
    println!("{}", sluice_conformance::summary_line(&outcomes));
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
