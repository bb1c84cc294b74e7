//! `gameplan serve [--addr A] [--db FILE] [--demo] [--max-cells N]
//! [--idle-timeout SECONDS]`: the ledger's API over HTTP (the routes are
//! `server`'s), with one log line per request on stderr.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{Context, LedgerFile};
use crate::backend::ledger::{Ledger, NewLedger};
use crate::exit_code;
use crate::report::Console;
use crate::server::{LogSink, RequestLine};

/// What `serve`'s flags set beyond the address and the file.
pub struct Settings {
    /// A new ledger file gets the demo account.
    pub demo: bool,
    pub max_cells: usize,
    /// Seconds (`--idle-timeout`).
    pub idle_timeout: f64,
}

pub fn run(cx: &Context, addr: &str, settings: &Settings, file: &LedgerFile) -> u8 {
    let idle = match std::time::Duration::try_from_secs_f64(settings.idle_timeout) {
        Ok(idle) if idle >= std::time::Duration::from_millis(100) => idle,
        _ => {
            cx.console.err(&format!(
                "error: --idle-timeout {} is not a number of seconds of at least 0.1\n",
                settings.idle_timeout
            ));
            return exit_code::PLAN_ERROR;
        }
    };
    let path = match super::ledger::ledger_path(file) {
        Ok(path) => path,
        Err(message) => {
            cx.console.err(&format!("error: {message}\n"));
            return exit_code::PLAN_ERROR;
        }
    };
    // The demo account's token is public: a served ledger holds it only
    // when asked, and the routes refuse the token anyway.
    let new = if settings.demo {
        NewLedger::Demo
    } else {
        NewLedger::Empty
    };
    let ledger = match Ledger::open_with(&path, new) {
        Ok(ledger) => Arc::new(ledger.with_max_cells(settings.max_cells)),
        Err(e) => {
            cx.console.err(&format!(
                "error: {} (ledger {})\n",
                e.message,
                path.display()
            ));
            return exit_code::PLAN_ERROR;
        }
    };
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        cx.console
            .err("error: cannot start the server's runtime (out of threads or memory?)\n");
        return exit_code::PLAN_ERROR;
    };
    runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => listener,
            Err(e) => {
                cx.console.err(&format!(
                    "error: cannot listen on {addr}: {e}; pass another --addr (port 0 picks a free one)\n"
                ));
                return exit_code::PLAN_ERROR;
            }
        };
        let bound = listener.local_addr().ok();
        cx.console.err(&listening(bound, addr, &path));
        let console = Console {
            color: cx.console.color,
            color_out: cx.console.color_out,
        };
        let log: LogSink = Arc::new(move |line: &RequestLine| console.err(&log_line(line)));
        match crate::server::serve_within(listener, ledger, log, idle, stop_signal()).await {
            Ok(()) => {
                cx.console.err("stopped\n");
                exit_code::SUCCESS
            }
            Err(e) => {
                cx.console.err(&format!("error: the server stopped: {e}\n"));
                exit_code::PLAN_ERROR
            }
        }
    })
}

/// The first line: where the server is (tests read the port from it).
fn listening(bound: Option<SocketAddr>, asked: &str, ledger: &std::path::Path) -> String {
    let at = bound.map_or_else(|| asked.to_owned(), |a| a.to_string());
    let mut text = format!(
        "listening on http://{at} (ledger {}); Ctrl-C stops\n",
        ledger.display()
    );
    if bound.is_some_and(|a| !a.ip().is_loopback()) {
        text.push_str(
            "warning: this is plain HTTP on a non-loopback address: tokens cross the network unencrypted; put a TLS proxy in front\n",
        );
    }
    text
}

/// One request: method, path, status, milliseconds, and why where the
/// status alone would not say; never a header. The path is the client's:
/// escaped, so it cannot write to the operator's terminal.
fn log_line(line: &RequestLine) -> String {
    let note = line
        .note
        .as_deref()
        .map_or_else(String::new, |note| format!(" ({note})"));
    format!(
        "{} {} {} {:.1}ms{note}\n",
        line.method,
        line.path.escape_debug(),
        line.status,
        line.millis
    )
}

/// Completes at the first Ctrl-C or SIGTERM.
async fn stop_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
