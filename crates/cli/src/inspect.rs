//! `sluice checkpoint describe DIR [--json]` and
//! `sluice state read DIR [--operator N] [--batch N] [--json]`: argument parsing and printing
//! only; the work is `sluice::inspect::describe_checkpoint` and `sluice::inspect::read_state`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::USAGE;

/// `sluice checkpoint <subcommand> ..`.
pub fn checkpoint(args: &[String]) -> Result<ExitCode, String> {
    match args.first().map(String::as_str) {
        Some("describe") => {
            let mut dir = None;
            let mut json = false;
            for a in &args[1..] {
                match a.as_str() {
                    "--json" => json = true,
                    flag if flag.starts_with("--") => {
                        return Err(format!("unknown argument {flag:?}\n{USAGE}"))
                    }
                    d if dir.is_none() => dir = Some(PathBuf::from(d)),
                    extra => return Err(format!("unexpected argument {extra:?}\n{USAGE}")),
                }
            }
            let dir = dir.ok_or(format!("checkpoint describe needs DIR\n{USAGE}"))?;
            let desc = sluice::inspect::describe_checkpoint(&dir).map_err(|e| e.to_string())?;
            if json {
                let text =
                    serde_json::to_string_pretty(&desc.to_json()).map_err(|e| e.to_string())?;
                println!("{text}");
            } else {
                print!("{}", desc.to_text());
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => Err(format!(
            "usage: sluice checkpoint describe DIR [--json]\n{USAGE}"
        )),
    }
}

fn number<T: std::str::FromStr>(flag: &str, v: Option<&String>) -> Result<T, String> {
    let v = v.ok_or(format!("{flag} needs a number"))?;
    v.parse()
        .map_err(|_| format!("{flag} needs a non-negative number, not {v:?}"))
}

/// `sluice state <subcommand> ..`.
pub fn state(args: &[String]) -> Result<ExitCode, String> {
    if args.first().map(String::as_str) != Some("read") {
        return Err(format!(
            "usage: sluice state read DIR [--operator N] [--batch N] [--json]\n{USAGE}"
        ));
    }
    let (mut dir, mut operator, mut batch, mut json) = (None, 0u32, None, false);
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--operator" => operator = number("--operator", it.next())?,
            "--batch" => batch = Some(number("--batch", it.next())?),
            flag if flag.starts_with("--") => {
                return Err(format!("unknown argument {flag:?}\n{USAGE}"))
            }
            d if dir.is_none() => dir = Some(PathBuf::from(d)),
            extra => return Err(format!("unexpected argument {extra:?}\n{USAGE}")),
        }
    }
    let dir = dir.ok_or(format!("state read needs DIR\n{USAGE}"))?;
    let snapshot = sluice::inspect::read_state(&dir, operator, batch).map_err(|e| e.to_string())?;
    let bytes = if json {
        snapshot.to_json_lines()
    } else {
        snapshot.to_table().map(String::into_bytes)
    }
    .map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
