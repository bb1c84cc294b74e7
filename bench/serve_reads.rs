//! The read-isolation benchmark of `gameplan serve` (run by
//! `bench/serve_reads.sh`, whose header says what is measured and why the
//! comparison is fair): one tenant's `whoami` latency alone, then while
//! another tenant GETs its 10,000-run job in a loop; the medians and their
//! ratio.
//!
//! usage: `serve_reads [SAMPLES (200)] [HEAVY CLIENTS (8)]` (cargo bench
//! appends `--bench`, which is ignored). The server is `$GAMEPLAN_BIN`
//! when set (another build to compare), else this build's `gameplan`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark's figures are its output; it is no part of the CLI's report module"
)]

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gameplan::backend::Backend as _;
use gameplan::backend::api::{Cell, EstimateRequest, JobRef, RegisterRequest, RunLength, Token};
use gameplan::backend::http::HttpBackend;

const GAME: &str = "reads";
/// The heavy tenant's job: the most cells a job holds by default.
const CELLS: usize = 10_000;

fn main() -> ExitCode {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .filter_map(|a| a.parse().ok())
        .collect();
    let samples = args.first().copied().unwrap_or(200).max(1);
    let heavy = args.get(1).copied().unwrap_or(8).max(1);
    match run(samples, heavy) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("serve_reads: {e}");
            ExitCode::FAILURE
        }
    }
}

fn binary() -> String {
    std::env::var("GAMEPLAN_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_gameplan").to_owned())
}

/// `gameplan serve` on a free loopback port, its log drained; SIGTERM on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(db: &Path) -> Result<Server, String> {
        let binary = binary();
        let mut child = Command::new(&binary)
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

/// `gameplan ARGS...`, its stdout; an error with its stderr otherwise.
fn gameplan(args: &[&str]) -> Result<String, String> {
    let out = Command::new(binary())
        .args(args)
        .output()
        .map_err(|e| format!("cannot run gameplan {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "gameplan {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("no runtime: {e}"))
}

/// `samples` whoamis one after another on one keep-alive client: each
/// latency in ms.
fn whoamis(url: &str, token: &Token, samples: usize) -> Result<Vec<f64>, String> {
    let backend = HttpBackend::new(url).map_err(|e| e.to_string())?;
    runtime()?.block_on(async {
        let mut latencies = Vec::with_capacity(samples);
        for _ in 0..samples {
            let started = Instant::now();
            backend.whoami(token).await.map_err(|e| e.to_string())?;
            latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(latencies)
    })
}

fn median(values: Vec<f64>) -> f64 {
    quantile(values, 0.5)
}

/// The value at `q` (0 to 1) of `values`, sorted: the nearest rank.
fn quantile(mut values: Vec<f64>, q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a few hundred samples"
    )]
    let at = ((values.len() as f64 - 1.0) * q).round() as usize;
    values.get(at).copied().unwrap_or(f64::NAN)
}

/// Median, p90 and max of `values`, and their sum (the phase's length).
fn summary(values: &[f64]) -> String {
    format!(
        "median {:8.2} ms, p90 {:8.2} ms, max {:8.2} ms, all {:8.0} ms",
        median(values.to_vec()),
        quantile(values.to_vec(), 0.9),
        quantile(values.to_vec(), 1.0),
        values.iter().sum::<f64>()
    )
}

/// The heavy tenant's 10,000-cell job, bought.
fn buy(url: &str, token: &Token) -> Result<JobRef, String> {
    let backend = HttpBackend::new(url).map_err(|e| e.to_string())?;
    let request = EstimateRequest {
        cells: (0..CELLS)
            .map(|i| Cell {
                persona: format!("persona-{i}"),
                controller: "standard".to_owned(),
            })
            .collect(),
        modules: Vec::new(),
        run_length: RunLength::Short,
    };
    runtime()?.block_on(async {
        let estimate = backend
            .estimate(token, GAME, &request)
            .await
            .map_err(|e| e.to_string())?;
        let body = RegisterRequest {
            quote_id: estimate.quote_id,
            confirm_price_cents: estimate.estimate_cents,
            cells: request.cells,
            modules: Vec::new(),
            run_length: RunLength::Short,
        };
        let registered = backend
            .register(token, GAME, "reads-heavy", &body)
            .await
            .map_err(|e| e.to_string())?;
        Ok(JobRef {
            game: GAME.to_owned(),
            job: registered.job.id,
        })
    })
}

fn run(samples: usize, heavy: usize) -> Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("gameplan-serve-reads.")
        .tempdir()
        .map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let db = dir.path().join("ledger.sqlite");
    let db_arg = db.to_str().ok_or("a temp path that is not UTF-8")?;
    let all = "playtest:write,playtest:model,playtest:upload";
    let heavy_token = Token(gameplan(&[
        "ledger",
        "token",
        "--db",
        db_arg,
        "--account",
        "heavy",
        "--scopes",
        all,
    ])?);
    gameplan(&["ledger", "topup", "heavy", "1000000", "--db", db_arg])?;
    let light_token = Token(gameplan(&[
        "ledger",
        "token",
        "--db",
        db_arg,
        "--account",
        "light",
        "--scopes",
        all,
    ])?);
    let server = Server::start(&db)?;
    let job = buy(&server.url, &heavy_token)?;
    // Warm-up: connections, caches, the file's pages.
    whoamis(&server.url, &light_token, 20)?;
    let alone_samples = whoamis(&server.url, &light_token, samples)?;
    let alone = median(alone_samples.clone());

    let stop = Arc::new(AtomicBool::new(false));
    let gets = Arc::new(AtomicUsize::new(0));
    let loaders: Vec<_> = (0..heavy)
        .map(|_| {
            let (url, token, job) = (server.url.clone(), heavy_token.clone(), job.clone());
            let (stop, gets) = (Arc::clone(&stop), Arc::clone(&gets));
            std::thread::spawn(move || -> Result<Vec<f64>, String> {
                let backend = HttpBackend::new(&url).map_err(|e| e.to_string())?;
                runtime()?.block_on(async {
                    let mut latencies = Vec::new();
                    while !stop.load(Ordering::SeqCst) {
                        let started = Instant::now();
                        let view = backend
                            .get_job(&token, &job)
                            .await
                            .map_err(|e| e.to_string())?;
                        if view.runs.len() != CELLS {
                            return Err(format!("the job came back with {} runs", view.runs.len()));
                        }
                        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
                        gets.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(latencies)
                })
            })
        })
        .collect();
    // The heavy GETs under way before the first sample.
    while gets.load(Ordering::SeqCst) < heavy {
        std::thread::sleep(Duration::from_millis(10));
    }
    let loaded_samples = whoamis(&server.url, &light_token, samples)?;
    let loaded = median(loaded_samples.clone());
    stop.store(true, Ordering::SeqCst);
    let mut heavy_latencies = Vec::new();
    for loader in loaders {
        heavy_latencies.extend(loader.join().map_err(|_| "a heavy client panicked")??);
    }
    println!("server: {}", binary());
    println!("whoami median, alone:                          {alone:8.2} ms ({samples} samples)");
    println!(
        "whoami median, while {heavy} clients GET a {CELLS}-run job: {loaded:8.2} ms ({samples} samples)"
    );
    println!(
        "ratio (loaded / alone):                        {:8.1}x",
        loaded / alone
    );
    println!("whoami alone:  {}", summary(&alone_samples));
    println!("whoami loaded: {}", summary(&loaded_samples));
    println!(
        "the heavy GET's median:                        {:8.2} ms ({} GETs)",
        median(heavy_latencies.clone()),
        heavy_latencies.len()
    );
    drop(server);
    Ok(())
}
