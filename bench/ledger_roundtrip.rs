//! The ledger round trip benchmark (run by bench/ledger.sh, whose header
//! says what is measured and why the comparison is fair): N register +
//! finish round trips through the `http` backend against a `gameplan serve`
//! child on 127.0.0.1, and the same N calling the [`Ledger`] methods
//! in-process, interleaved, with median/p90/p99 of both and their ratio.
//!
//! usage: `ledger_roundtrip [N] [WARMUP]` (cargo bench appends `--bench`,
//! which is ignored). Exits 1 when the HTTP median is over the target.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark's figures are its output; it is no part of the CLI's report module"
)]

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gameplan::backend::Backend as _;
use gameplan::backend::api::{
    ApiError, Cell, EstimateRequest, JobRef, RegisterRequest, RunLength, Token,
};
use gameplan::backend::http::HttpBackend;
use gameplan::backend::ledger::{DEMO_ACCOUNT, DEMO_TOKEN, Ledger, QUOTE_SECONDS};

/// The target for the HTTP median, in ms.
const TARGET_MS: f64 = 5.0;
const GAME: &str = "bench";
/// Enough for every charge several times over (each round trip's finish
/// refunds it all, since no run plays), so no register meets a 402.
const TOPUP_CENTS: i64 = 1_000_000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let count = |i: usize, default: usize| -> Result<usize, String> {
        args.get(i).map_or(Ok(default), |a| {
            a.parse()
                .map_err(|_| format!("`{a}` is not a count; usage: ledger_roundtrip [N] [WARMUP]"))
        })
    };
    let run = || -> Result<bool, String> { bench(count(0, 500)?.max(1), count(1, 50)?) };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(3)
        }
    }
}

fn api(what: &str) -> impl Fn(ApiError) -> String + '_ {
    move |e| format!("{what}: {} ({})", e.message, e.code)
}

/// The job every round trip buys: 2 personas × 2 controllers, short runs.
fn cells() -> EstimateRequest {
    let cell = |persona: &str, controller: &str| Cell {
        persona: persona.to_owned(),
        controller: controller.to_owned(),
    };
    EstimateRequest {
        cells: vec![
            cell("newcomer", "random"),
            cell("newcomer", "greedy"),
            cell("speedrunner", "random"),
            cell("speedrunner", "greedy"),
        ],
        modules: Vec::new(),
        run_length: RunLength::Short,
    }
}

fn register_request(quote_id: &str, price: i64) -> RegisterRequest {
    let estimate = cells();
    RegisterRequest {
        quote_id: quote_id.to_owned(),
        confirm_price_cents: price,
        cells: estimate.cells,
        modules: estimate.modules,
        run_length: estimate.run_length,
    }
}

/// Opens a fresh ledger at `path` and tops the demo account up.
fn fresh_ledger(path: &Path) -> Result<Ledger, String> {
    let ledger = Ledger::open(path).map_err(api("open the ledger"))?;
    ledger
        .topup(DEMO_ACCOUNT, TOPUP_CENTS)
        .map_err(api("top up"))?;
    Ok(ledger)
}

/// `gameplan serve` on a free loopback port; stopped (SIGTERM) on drop.
struct Server {
    child: Child,
    url: String,
    /// Reads its log: the milliseconds of each register and finish.
    log: Option<JoinHandle<Vec<f64>>>,
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
        let mut lines = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
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
        let log = std::thread::spawn(move || {
            let mut handled = Vec::new();
            for line in lines.map_while(Result::ok) {
                // `POST /v1/games/bench/jobs 200 0.8ms`
                let fields: Vec<&str> = line.split_whitespace().collect();
                if let [_, path, _, millis] = fields[..]
                    && (path.ends_with("/jobs") || path.ends_with("/finish"))
                    && let Some(ms) = millis.strip_suffix("ms").and_then(|m| m.parse().ok())
                {
                    handled.push(ms);
                }
            }
            handled
        });
        Ok(Server {
            child,
            url,
            log: Some(log),
        })
    }

    /// Stops the server and returns what its log said, once it has all of it.
    fn stop(mut self) -> Vec<f64> {
        self.terminate();
        self.log
            .take()
            .map(|log| log.join().unwrap_or_default())
            .unwrap_or_default()
    }

    fn terminate(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Nearest-rank percentile of sorted `values`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a few thousand samples"
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Figures {
    median: f64,
    p90: f64,
    p99: f64,
}

fn figures(mut samples: Vec<f64>) -> Figures {
    samples.sort_by(f64::total_cmp);
    Figures {
        median: percentile(&samples, 50.0),
        p90: percentile(&samples, 90.0),
        p99: percentile(&samples, 99.0),
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one benchmark, set up, measured and printed in order"
)]
fn bench(n: usize, warmup: usize) -> Result<bool, String> {
    let dir = tempfile::Builder::new()
        .prefix("gameplan-ledger-bench.")
        .tempdir()
        .map_err(|e| {
            format!(
                "cannot make a directory under {}: {e}",
                std::env::temp_dir().display()
            )
        })?;
    let direct_db = dir.path().join("direct.sqlite");
    let served_db = dir.path().join("served.sqlite");
    let direct = fresh_ledger(&direct_db)?;
    // `serve` refuses the public demo token: the HTTP side calls with a
    // token of the same account, made as an operator makes one.
    let served_token = fresh_ledger(&served_db)?
        .create_token(
            DEMO_ACCOUNT,
            &gameplan::backend::api::SCOPES.map(str::to_owned),
        )
        .map_err(api("make a token"))?
        .token;
    let server = Server::start(&served_db)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let http = HttpBackend::new(&server.url).map_err(api("http backend"))?;
    let token = Token(DEMO_TOKEN.to_owned());

    // One quote per side, before the timed loop: the round trip measured is
    // register + finish, and a runner estimates once per job anyway. A
    // register never consumes its quote, so all N reuse it; it holds for
    // QUOTE_SECONDS, far longer than the loop (checked below).
    let quoted = Instant::now();
    let direct_quote = direct
        .estimate(&token, GAME, &cells())
        .map_err(api("direct estimate"))?;
    let http_quote = runtime
        .block_on(http.estimate(&served_token, GAME, &cells()))
        .map_err(api("http estimate"))?;
    let direct_body = register_request(&direct_quote.quote_id, direct_quote.estimate_cents);
    let http_body = register_request(&http_quote.quote_id, http_quote.estimate_cents);

    let direct_trip = |key: &str| -> Result<Duration, String> {
        let started = Instant::now();
        let registered = direct
            .register(&token, GAME, key, &direct_body)
            .map_err(api("direct register"))?;
        let job = JobRef {
            game: GAME.to_owned(),
            job: registered.job.id,
        };
        let finished = direct.finish(&token, &job).map_err(api("direct finish"))?;
        let took = started.elapsed();
        if registered.replayed || finished.replayed {
            return Err(format!("direct: key {key} was replayed, not bought"));
        }
        Ok(took)
    };
    let http_trip = |key: &str| -> Result<Duration, String> {
        runtime.block_on(async {
            let started = Instant::now();
            let registered = http
                .register(&served_token, GAME, key, &http_body)
                .await
                .map_err(api("http register"))?;
            let job = JobRef {
                game: GAME.to_owned(),
                job: registered.job.id,
            };
            let finished = http
                .finish(&served_token, &job)
                .await
                .map_err(api("http finish"))?;
            let took = started.elapsed();
            if registered.replayed || finished.replayed {
                return Err(format!("http: key {key} was replayed, not bought"));
            }
            Ok(took)
        })
    };

    // Interleaved, each side first every other round, so both meet the
    // same disk and machine load; warm-up rounds are dropped on both sides.
    let mut direct_ms = Vec::with_capacity(n);
    let mut http_ms = Vec::with_capacity(n);
    for round in 0..warmup + n {
        let key = format!("bench-{round}");
        let (d, h) = if round % 2 == 0 {
            let d = direct_trip(&key)?;
            (d, http_trip(&key)?)
        } else {
            let h = http_trip(&key)?;
            (direct_trip(&key)?, h)
        };
        if round >= warmup {
            direct_ms.push(ms(d));
            http_ms.push(ms(h));
        }
    }
    if quoted.elapsed() >= Duration::from_secs(u64::try_from(QUOTE_SECONDS).unwrap_or(0)) {
        return Err("the loop outlived its quote; run fewer round trips".to_owned());
    }
    let sum: f64 = http_ms.iter().sum();
    drop(runtime);
    // The server's own time per round trip (its log: register + finish), the
    // last N pairs, i.e. those of the measured rounds.
    let logged = server.stop();
    let server_ms: Vec<f64> = logged[logged.len().saturating_sub(2 * n)..]
        .chunks(2)
        .map(|pair| pair.iter().sum())
        .collect();

    let direct = figures(direct_ms);
    let http = figures(http_ms);
    let in_server = figures(server_ms);
    let pass = http.median <= TARGET_MS;
    println!(
        "ledger round trip (register + finish of a 4-cell job), {n} rounds after {warmup} warm-up, ledgers side by side in {} (removed after)",
        dir.path().display()
    );
    println!("                        median      p90      p99  (ms)");
    for (name, f) in [
        ("direct Ledger calls", &direct),
        ("http -> gameplan serve", &http),
        ("  of which in server", &in_server),
    ] {
        println!(
            "  {name:<22} {:>7.3}  {:>7.3}  {:>7.3}",
            f.median, f.p90, f.p99
        );
    }
    println!(
        "  ratio http/direct      {:>7.2}x {:>7.2}x {:>7.2}x   ({:.0} http round trips/s)",
        http.median / direct.median,
        http.p90 / direct.p90,
        http.p99 / direct.p99,
        f64::from(u32::try_from(n).unwrap_or(u32::MAX)) / (sum / 1000.0)
    );
    println!(
        "  target: http median <= {TARGET_MS} ms: {} ({:.3} ms)",
        if pass { "PASS" } else { "FAIL" },
        http.median
    );
    Ok(pass)
}
