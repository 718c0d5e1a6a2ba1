//! `sluice run PIPELINE.sql [--set name=value]...`: parses the pipeline file
//! (`sluice::pipeline`), starts its queries and waits: until every query has finished
//! (available-now and once triggers), or until SIGINT (Ctrl-C) or SIGTERM, which stop every
//! query after its current batch. A second signal exits at once (the checkpoint makes that
//! safe too: the batch is re-run on restart).
//!
//! Exit codes: 0 finished or stopped, 1 a query failed while running, 2 the pipeline is wrong
//! (with `file:line:column`).

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice::{Pipeline, SluiceError};

/// SIGINT/SIGTERM received so far.
static STOP_SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Only async-signal-safe work here: an atomic add, and `_exit` on the second signal.
    if STOP_SIGNALS.fetch_add(1, Ordering::SeqCst) >= 1 {
        // SAFETY: `_exit` is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// A tiny handler rather than the `ctrlc` crate or tokio's `signal` feature: both would change
/// the features of crates the whole workspace shares (libc's `extra_traits` through nix,
/// tokio's `signal`) and rebuild DataFusion for one flag.
fn install_stop_handler() {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only touches an atomic and calls `_exit`.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

fn report(e: &SluiceError) {
    crate::status::print_line(&format!("error: {e}"));
}

pub fn run(file: &str, args: crate::RunArgs) -> Result<ExitCode, String> {
    let crate::RunArgs {
        set: vars,
        progress,
        ui: ui_addr,
        ui_token,
        ..
    } = args;
    let mut pipeline = match Pipeline::from_file(file) {
        Ok(p) => p,
        Err(e) => {
            report(&e);
            return Ok(ExitCode::from(2));
        }
    };
    for (k, v) in vars {
        pipeline.set_variable(k, v);
    }
    let session = match pipeline.session_builder().and_then(|b| b.build()) {
        Ok(s) => s,
        Err(e) => {
            report(&e);
            return Ok(ExitCode::from(2));
        }
    };
    // Listeners see only queries started after them: the status board and the dashboard first.
    // Status lines are redrawn in place on a terminal, unless a console sink prints its batches
    // to the same terminal (they would be drawn over): then they are printed one per batch.
    if crate::status::stdout_shares_the_terminal() && writes_to_stdout(&pipeline) {
        crate::status::console().redraw_in_place(false);
    }
    let board = crate::status::StatusBoard::new(progress);
    session.add_listener(board.clone());
    let dashboard = match &ui_addr {
        Some(addr) => {
            // The flag, else the environment (which keeps it out of `ps` listings).
            let token = ui_token.or_else(|| std::env::var("SLUICE_UI_TOKEN").ok());
            let dash = crate::ui::start(addr, token.as_deref())?;
            session.add_listener(dash.clone());
            Some(dash)
        }
        None => None,
    };
    // Before the queries start, so a Ctrl-C during a first long batch is a clean stop too.
    install_stop_handler();
    let queries = match pipeline.start(&session) {
        Ok(q) => q,
        Err(e) => {
            report(&e);
            return Ok(ExitCode::from(2));
        }
    };
    for q in &queries {
        if let sluice::Trigger::ProcessingTime(d) = q.trigger() {
            if !d.is_zero() {
                board.set_trigger_interval(q.id(), d);
            }
        }
        crate::status::print_line(&format!(
            "sluice: started {} (query id {}, run id {})",
            q.name().unwrap_or("query"),
            q.id(),
            q.run_id()
        ));
    }
    let result = pipeline.await_termination(&queries, || {
        let stop = STOP_SIGNALS.load(Ordering::SeqCst) > 0;
        if stop {
            crate::status::print_line(
                "sluice: stopping after the current batch (again to exit at once)",
            );
        }
        stop
    });
    for q in &queries {
        let last = match q.last_progress() {
            Some(p) => format!("last batch {}", p.batch_id),
            None => "no batch in this run".into(),
        };
        crate::status::print_line(&format!(
            "sluice: {} ended ({last})",
            q.name().unwrap_or("query")
        ));
    }
    if let Some(d) = &dashboard {
        crate::status::print_line(&format!(
            "sluice: the dashboard at {} stops with the queries",
            d.url()
        ));
    }
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            report(&e);
            Ok(ExitCode::from(1))
        }
    }
}

/// Whether a sink of the pipeline is the console (it prints each batch to stdout).
fn writes_to_stdout(pipeline: &Pipeline) -> bool {
    use sluice::pipeline::{Connector, StatementKind};
    pipeline.statements().iter().any(|s| {
        let options = match &s.kind {
            StatementKind::CreateSink(d) => &d.options,
            StatementKind::CreateTable(d) => &d.options,
            _ => return false,
        };
        options.iter().any(|o| {
            o.key.eq_ignore_ascii_case("connector")
                && Connector::parse(&o.value) == Some(Connector::Console)
        })
    })
}
