//! `sluice checkpoint describe DIR [--json]` and
//! `sluice state read DIR [--operator N] [--batch N] [--json]`: arguments and printing only; the
//! work is `sluice::inspect::describe_checkpoint` and `sluice::inspect::read_state`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

/// `sluice checkpoint <COMMAND>`.
#[derive(Subcommand, Debug)]
pub enum CheckpointCommand {
    /// What a query checkpoint holds: id, batches, offsets, watermark, pinned conf, state
    /// operators (schema, versions)
    Describe {
        /// The checkpoint directory (a query's checkpointLocation)
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Print it as JSON
        #[arg(long)]
        json: bool,
    },
}

/// `sluice state <COMMAND>`.
#[derive(Subcommand, Debug)]
pub enum StateCommand {
    /// The state of one operator as of a committed batch: a table, or JSON lines
    Read {
        /// The checkpoint directory (a query's checkpointLocation)
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// The stateful operator's id (`sluice checkpoint describe` lists them)
        #[arg(long, value_name = "N", default_value_t = 0)]
        operator: u32,
        /// The committed batch to read the state as of (default: the last one)
        #[arg(long, value_name = "N")]
        batch: Option<u64>,
        /// Print JSON lines, one per key
        #[arg(long)]
        json: bool,
    },
}

/// `sluice checkpoint <subcommand> ..`.
pub fn checkpoint(command: CheckpointCommand) -> Result<ExitCode, String> {
    let CheckpointCommand::Describe { dir, json } = command;
    let desc = sluice::inspect::describe_checkpoint(&dir).map_err(|e| e.to_string())?;
    if json {
        let text = serde_json::to_string_pretty(&desc.to_json()).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", desc.to_text());
    }
    Ok(ExitCode::SUCCESS)
}

/// `sluice state <subcommand> ..`.
pub fn state(command: StateCommand) -> Result<ExitCode, String> {
    let StateCommand::Read {
        dir,
        operator,
        batch,
        json,
    } = command;
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
