//! The load benchmark of `gameplan serve` (run by `bench/serve_load.sh`,
//! whose header says what is measured and why): REQUESTS requests from
//! CONCURRENCY clients at once against a `gameplan serve` child on
//! 127.0.0.1, each client its own account and token buying and settling
//! jobs (estimate, register, get, finish); p50/p99/max latency per request
//! and the throughput; then the ledger read back: every account must add
//! up, every job be settled once, and every cent charged be refunded (no
//! run plays, so each finish refunds its whole job).
//!
//! usage: `serve_load [REQUESTS (2000)] [CONCURRENCY (32)]` (cargo bench
//! appends `--bench`, which is ignored). Exits 1 when the ledger does not
//! add up or a request failed.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark's figures are its output; it is no part of the CLI's report module"
)]

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gameplan::backend::Backend as _;
use gameplan::backend::api::{Cell, EstimateRequest, JobRef, RegisterRequest, RunLength, Token};
use gameplan::backend::http::HttpBackend;
use gameplan::backend::ledger::Ledger;

const GAME: &str = "load";
/// Every request a job costs: estimate, register, get, finish.
const PER_JOB: usize = 4;
/// The whole run stops here, whatever is left: a loop bounded in time.
const AT_MOST: Duration = Duration::from_secs(300);

fn main() -> ExitCode {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .filter_map(|a| a.parse().ok())
        .collect();
    let requests = args.first().copied().unwrap_or(2000);
    let concurrency = args.get(1).copied().unwrap_or(32).max(1);
    match run(requests, concurrency) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("serve_load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `gameplan serve` on a free loopback port, its log drained; SIGTERM on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(db: &Path) -> Result<Server, String> {
        let binary = env!("CARGO_BIN_EXE_gameplan");
        let mut child = Command::new(binary)
            .args(["serve", "--addr", "127.0.0.1:0", "--db"])
            .arg(db)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {binary} serve: {e}"))?;
        let mut lines = BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
        let first = lines
            .next()
            .and_then(Result::ok)
            .ok_or("gameplan serve exited before printing its address")?;
        let url = first
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .ok_or_else(|| format!("gameplan serve's first line is not its address: {first}"))?
            .to_owned();
        // Drained all along: a full pipe would stall the server's log writes.
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        Ok(Server { child, url })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.child.wait();
    }
}

fn cells() -> EstimateRequest {
    EstimateRequest {
        cells: ["kid", "veteran"]
            .iter()
            .map(|p| Cell {
                persona: (*p).to_owned(),
                controller: "standard".to_owned(),
            })
            .collect(),
        modules: Vec::new(),
        run_length: RunLength::Standard,
    }
}

/// One client's loop: jobs until the shared budget of requests is spent.
/// Returns each request's latency in ms, and the failures.
async fn client(
    url: String,
    token: Token,
    worker: usize,
    budget: Arc<AtomicUsize>,
    started: Instant,
) -> (Vec<f64>, Vec<String>) {
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    let Ok(backend) = HttpBackend::new(&url) else {
        return (latencies, vec!["cannot build the http backend".to_owned()]);
    };
    let mut job_no = 0;
    while budget
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            left.checked_sub(PER_JOB)
        })
        .is_ok()
        && started.elapsed() < AT_MOST
    {
        job_no += 1;
        let mut timed = Instant::now();
        let mut lap = |latencies: &mut Vec<f64>| {
            latencies.push(timed.elapsed().as_secs_f64() * 1000.0);
            timed = Instant::now();
        };
        let estimate = match backend.estimate(&token, GAME, &cells()).await {
            Ok(estimate) => estimate,
            Err(e) => {
                failures.push(format!("estimate: {e}"));
                continue;
            }
        };
        lap(&mut latencies);
        let body = RegisterRequest {
            quote_id: estimate.quote_id,
            confirm_price_cents: estimate.estimate_cents,
            cells: cells().cells,
            modules: Vec::new(),
            run_length: RunLength::Standard,
        };
        let key = format!("load-{worker}-{job_no}");
        let job = match backend.register(&token, GAME, &key, &body).await {
            Ok(registered) => JobRef {
                game: GAME.to_owned(),
                job: registered.job.id,
            },
            Err(e) => {
                failures.push(format!("register: {e}"));
                continue;
            }
        };
        lap(&mut latencies);
        if let Err(e) = backend.get_job(&token, &job).await {
            failures.push(format!("get job: {e}"));
        }
        lap(&mut latencies);
        if let Err(e) = backend.finish(&token, &job).await {
            failures.push(format!("finish: {e}"));
        }
        lap(&mut latencies);
    }
    (latencies, failures)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a few thousand samples"
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn run(requests: usize, concurrency: usize) -> Result<bool, String> {
    let dir = tempfile::Builder::new()
        .prefix("gameplan-serve-load.")
        .tempdir()
        .map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let db = dir.path().join("served.sqlite");
    // One account and token per client, as many studios would call one
    // server (an account holds at most 20 unsettled jobs at once).
    let tokens: Vec<Token> = {
        let ledger = Ledger::open_with(&db, gameplan::backend::ledger::NewLedger::Empty)
            .map_err(|e| e.to_string())?;
        (0..concurrency)
            .map(|i| {
                let account = format!("studio-{i}");
                let made = ledger
                    .create_token(&account, &gameplan::backend::api::SCOPES.map(str::to_owned))
                    .map_err(|e| e.to_string())?;
                ledger
                    .topup(&account, 1_000_000)
                    .map_err(|e| e.to_string())?;
                Ok(made.token)
            })
            .collect::<Result<_, String>>()?
    };
    let server = Server::start(&db)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let budget = Arc::new(AtomicUsize::new(requests));
    let started = Instant::now();
    let results = runtime.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for (worker, token) in tokens.into_iter().enumerate() {
            set.spawn(client(
                server.url.clone(),
                token,
                worker,
                Arc::clone(&budget),
                started,
            ));
        }
        set.join_all().await
    });
    let wall = started.elapsed();
    drop(server);

    let mut latencies: Vec<f64> = results.iter().flat_map(|(l, _)| l.clone()).collect();
    let failures: Vec<&String> = results.iter().flat_map(|(_, f)| f).collect();
    latencies.sort_by(f64::total_cmp);
    #[expect(clippy::cast_precision_loss, reason = "a few thousand requests")]
    let per_second = latencies.len() as f64 / wall.as_secs_f64();
    println!(
        "gameplan serve under load: {} requests from {concurrency} clients at once in {:.2} s ({per_second:.0}/s)",
        latencies.len(),
        wall.as_secs_f64()
    );
    println!(
        "  latency per request: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(f64::NAN)
    );

    // The ledger afterwards, as `gameplan ledger show` reads it.
    let view = Ledger::open(&db)
        .and_then(|l| l.show())
        .map_err(|e| e.to_string())?;
    let adds_up = view.accounts.iter().all(|a| a.adds_up);
    let settled_once = view
        .jobs
        .iter()
        .all(|j| j.state == "settled" && j.settlements.len() == 1);
    let refunded_all = view
        .jobs
        .iter()
        .all(|j| j.charged_cents == j.refunded_cents);
    let back_to_start = view
        .accounts
        .iter()
        .all(|a| a.balance_cents == a.topups_cents);
    println!(
        "  ledger: {} accounts, {} jobs; every account adds up: {adds_up}; every job settled once: {settled_once}; \
         every charge refunded (no run played): {refunded_all}; balances back to their topups: {back_to_start}",
        view.accounts.len(),
        view.jobs.len()
    );
    for failure in failures.iter().take(5) {
        println!("  failed: {failure}");
    }
    let ok = failures.is_empty()
        && adds_up
        && settled_once
        && refunded_all
        && back_to_start
        && view.jobs.len() * PER_JOB == latencies.len();
    println!("  {}", if ok { "OK" } else { "FAILED: see above" });
    Ok(ok)
}
