//! `gameplan serve [--addr A] [--db FILE] [--demo] [LIMITS]`: the
//! ledger's API over HTTP (the routes are `server`'s), with one log line
//! per request on stderr. It owns reading the limits' flags ([`Limits`])
//! into the ledger's quotas and the server's options.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{Context, LedgerFile};
use crate::backend::ledger::{Ledger, NewLedger, Quotas};
use crate::exit_code::{Done, Failure};
use crate::report::Console;
use crate::server::{LogSink, RequestLine};

/// What `serve`'s flags set beyond the address and the file.
pub struct Settings {
    /// A new ledger file gets the demo account.
    pub demo: bool,
    pub limits: Limits,
    pub hosting: HostingArgs,
}

/// `serve --executor`: play hosted playtests (docs/hosted.md).
#[derive(Debug, Clone, clap::Args)]
pub struct HostingArgs {
    /// Also play hosted playtests, their cells as jobs of this executor:
    /// `local` (this machine) or `ray` (a Ray cluster, with --address).
    #[arg(long, value_name = "KIND", value_parser = ["local", "ray"])]
    pub executor: Option<String>,
    /// With --executor ray: the Ray dashboard's URL (http://HEAD:8265).
    #[arg(long, value_name = "URL", requires = "executor")]
    pub address: Option<String>,
    /// The directory the executor's jobs and this server share (every Ray
    /// node must see it at this path). Default: each playtest's workspace.
    #[arg(long, value_name = "DIR", requires = "executor")]
    pub shared_dir: Option<std::path::PathBuf>,
    /// Where uploaded builds and playtest workspaces are kept (default:
    /// `hosted/` beside the ledger file).
    #[arg(long, value_name = "DIR", requires = "executor")]
    pub builds: Option<std::path::PathBuf>,
    /// The largest build archive accepted.
    #[arg(long, value_name = "BYTES", default_value = "256MiB", value_parser = bytes)]
    pub max_build_bytes: u64,
    /// Hosted playtests played at once.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub playtests_at_once: usize,
}

/// `serve`'s limits: the ledger's quotas and the server's connections.
#[derive(Debug, Clone, clap::Args)]
pub struct Limits {
    /// The most cells one job may hold (a bigger job is refused, naming this cap).
    #[arg(long, value_name = "N", default_value_t = crate::backend::ledger::MAX_CELLS_PER_JOB)]
    pub max_cells: usize,
    /// The most files one run may hold; an upload past it is refused (413
    /// `quota_exceeded`, naming the quota, the files held and the limit). A job's own files
    /// (its aggregate) count as one more run.
    #[arg(long, value_name = "N", default_value_t = crate::backend::ledger::MAX_RUN_FILES)]
    pub max_run_files: u64,
    /// The most bytes one run's files may add up to, in bytes or with a KiB, MiB or GiB
    /// suffix; an upload past it is refused (413 `quota_exceeded`).
    #[arg(long, value_name = "BYTES", default_value = "256MiB", value_parser = bytes)]
    pub max_run_bytes: u64,
    /// The most unsettled jobs one account may hold; a register past it is refused (409
    /// `too_many_active_jobs`).
    #[arg(long, value_name = "N", default_value_t = crate::backend::ledger::MAX_OPEN_JOBS)]
    pub max_open_jobs: u64,
    /// The most connections served at once; a new one past it closes the longest-idle
    /// connection (one with no request in flight), or is answered 503 when none is idle
    /// [default: the open-files limit (`ulimit -n`) less 64 for the ledger and the server,
    /// at least 8].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds a connection may wait for a request's headers (also between requests on
    /// a kept-alive connection), and for its body once the headers came; then it is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub idle_timeout: f64,
    /// Seconds a new connection may take to send its first byte; then it is closed
    /// (at most --idle-timeout).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub first_byte_timeout: f64,
}

/// `256MiB`, `64KiB`, `1GiB` or a number of bytes.
fn bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, ""), |at| text.split_at(at));
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "`{other}` is not a unit: give bytes, or a number with KiB, MiB or GiB"
            ));
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}` is not a positive number of bytes"))
}

/// Seconds as a duration of at least 0.1 s, or the message naming `flag`.
fn seconds(flag: &str, value: f64) -> Result<std::time::Duration, String> {
    match std::time::Duration::try_from_secs_f64(value) {
        Ok(d) if d >= std::time::Duration::from_millis(100) => Ok(d),
        _ => Err(format!(
            "error: {flag} {value} is not a number of seconds of at least 0.1\n"
        )),
    }
}

/// The server's options from the flags: the timeouts checked, the
/// connection cap from the flag or the open-files limit.
fn options(limits: &Limits) -> Result<crate::server::Options, String> {
    let idle = seconds("--idle-timeout", limits.idle_timeout)?;
    let first_byte = seconds("--first-byte-timeout", limits.first_byte_timeout)?.min(idle);
    let max_connections = match limits.max_connections {
        Some(0) => return Err("error: --max-connections must be at least 1\n".to_owned()),
        Some(n) => n,
        None => crate::server::default_max_connections(),
    };
    Ok(crate::server::Options {
        idle,
        first_byte,
        max_connections,
    })
}

pub fn run(cx: &Context, addr: &str, settings: &Settings, file: &LedgerFile) -> Done {
    let limits = &settings.limits;
    let options = options(limits).map_err(Failure::plan)?;
    let path = super::ledger::ledger_path(file)
        .map_err(|message| Failure::plan(format!("error: {message}\n")))?;
    // The demo account's token is public: a served ledger holds it only
    // when asked, and the routes refuse the token anyway.
    let new = if settings.demo {
        NewLedger::Demo
    } else {
        NewLedger::Empty
    };
    let ledger = match Ledger::open_with(&path, new) {
        Ok(ledger) => Arc::new(ledger.with_max_cells(limits.max_cells).with_quotas(Quotas {
            run_files: limits.max_run_files,
            run_bytes: limits.max_run_bytes,
            open_jobs: limits.max_open_jobs,
        })),
        Err(e) => {
            return Err(Failure::plan(format!(
                "error: {} (ledger {})\n",
                e.message,
                path.display()
            )));
        }
    };
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        return Err(Failure::plan(
            "error: cannot start the server's runtime (out of threads or memory?)\n",
        ));
    };
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Failure::plan(format!(
                "error: cannot listen on {addr}: {e}; pass another --addr (port 0 picks a free one)\n"
            ))
        })?;
        let bound = listener.local_addr().ok();
        cx.console.err(&listening(bound, addr, &path));
        let console = Console {
            color: cx.console.color,
            color_out: cx.console.color_out,
        };
        let log: LogSink = Arc::new(move |line: &RequestLine| console.err(&log_line(line)));
        let hosting = hosting(cx, &settings.hosting, &ledger, &path)?;
        let (stop_worker, worker_stops) = tokio::sync::watch::channel(false);
        let served_hosting = hosting.as_ref().map(|(host, worker)| {
            tokio::spawn(Arc::clone(worker).run(worker_stops));
            Arc::clone(host) as Arc<dyn crate::server::Hosting>
        });
        let served = crate::server::serve_hosting(
            listener,
            ledger,
            served_hosting,
            log,
            options,
            stop_signal(),
        )
        .await;
        let _ = stop_worker.send(true);
        served.map_err(|e| Failure::plan(format!("error: the server stopped: {e}\n")))?;
        cx.console.err("stopped\n");
        Ok(())
    })
}

/// The first line: where the server is (tests read the port from it).
/// The host and its worker, when `--executor` asks for them.
#[expect(clippy::type_complexity, reason = "a pair built once, here")]
fn hosting(
    cx: &Context,
    args: &HostingArgs,
    ledger: &Arc<Ledger>,
    ledger_path: &std::path::Path,
) -> Result<
    Option<(
        Arc<crate::hosted::host::Host>,
        Arc<crate::hosted::worker::Worker>,
    )>,
    Failure,
> {
    let Some(executor) = args.executor.clone() else {
        return Ok(None);
    };
    if executor == "ray" && args.address.is_none() {
        return Err(Failure::plan(
            "error: --executor ray needs --address URL (the Ray dashboard, e.g. http://127.0.0.1:8265)\n",
        ));
    }
    let dir = args.builds.clone().unwrap_or_else(|| {
        ledger_path
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("hosted")
    });
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    if let Err(e) = std::fs::create_dir_all(dir.join("builds"))
        .and_then(|()| std::fs::create_dir_all(dir.join("work")))
    {
        return Err(Failure::plan(format!(
            "error: cannot make {}: {e}\n",
            dir.display()
        )));
    }
    let host = Arc::new(crate::hosted::host::Host {
        builds: dir.join("builds"),
        work: dir.join("work"),
        limits: crate::hosted::archive::Limits {
            archive_bytes: args.max_build_bytes,
            ..crate::hosted::archive::Limits::default()
        },
        env: cx.env.clone(),
        wake: Arc::default(),
    });
    let console = Console {
        color: cx.console.color,
        color_out: cx.console.color_out,
    };
    let worker = Arc::new(crate::hosted::worker::Worker {
        ledger: Arc::clone(ledger),
        host: Arc::clone(&host),
        playing: crate::hosted::worker::Playing {
            executor: executor.clone(),
            address: args.address.clone(),
            shared_dir: args.shared_dir.clone(),
            at_once: args.playtests_at_once.max(1),
            exe: std::env::current_exe().unwrap_or_else(|_| "gameplan".into()),
        },
        say: Arc::new(move |line: &str| console.err(&format!("{line}\n"))),
    });
    cx.console.err(&format!(
        "playing hosted playtests on the {executor} executor (builds and workspaces in {})\n",
        dir.display()
    ));
    Ok(Some((host, worker)))
}

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
