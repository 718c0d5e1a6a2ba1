//! `sluice connect`'s access and limit flags as a command: an address other than loopback is
//! refused without a token (exit 2, the message naming `--token` and `SLUICE_CONNECT_TOKEN`),
//! served with one (from the flag or the environment), and `--help` lists the flags. The
//! server's behaviour behind them is tested in crates/connect/tests/server.rs and
//! python/tests/test_security.py.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn connect(args: &[&str], token_env: Option<&str>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("connect").args(args).env_remove("RUST_LOG");
    match token_env {
        Some(t) => cmd.env("SLUICE_CONNECT_TOKEN", t),
        None => cmd.env_remove("SLUICE_CONNECT_TOKEN"),
    };
    cmd
}

#[test]
fn an_address_other_than_loopback_is_refused_without_a_token() {
    for args in [
        &["--listen", "0.0.0.0:0"][..],
        &["--listen", "0.0.0.0:0", "--token", " "],
    ] {
        let out = connect(args, None).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        for part in ["--token", "SLUICE_CONNECT_TOKEN", "127.0.0.1:PORT"] {
            assert!(err.contains(part), "{args:?}: {err}");
        }
        assert!(out.stdout.is_empty(), "it listened: {out:?}");
    }
}

/// With a token (the flag, or the environment) the same address is served.
#[test]
fn with_a_token_an_address_other_than_loopback_is_served() {
    for (args, env) in [
        (&["--listen", "0.0.0.0:0", "--token", "t0k"][..], None),
        (&["--listen", "0.0.0.0:0"][..], Some("t0k")),
    ] {
        let mut child = connect(args, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            line.starts_with("Spark Connect server listening on sc://0.0.0.0:"),
            "{args:?} {env:?}: {line:?}"
        );
    }
}

#[test]
fn help_lists_the_access_and_limit_flags() {
    let out = connect(&["--help"], None).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--token <TOKEN>",
        "SLUICE_CONNECT_TOKEN",
        "--tls-cert <PEM>",
        "--tls-key <PEM>",
        "--max-message-size <BYTES>",
        "--max-plan-depth <N>",
        "--max-sessions <N>",
        "--max-queries <N>",
    ] {
        assert!(help.contains(flag), "no {flag} in\n{help}");
    }
}

#[test]
fn a_limit_of_zero_is_refused_by_name() {
    let out = connect(&["--listen", "127.0.0.1:0", "--max-sessions", "0"], None)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-sessions 0"), "{err}");
}
