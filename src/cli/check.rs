//! `gameplan check [PLAN] [--json]`: is this machine ready to run the plan?
//!
//! One row per thing a run needs, each `pass`, `warn` or `fail` with what
//! was found and, when not a pass, the fix: the plan itself, the secrets it
//! reads, the backend and the token's scopes (a plan that pays), the
//! browser and its driver (their versions; a web game needs both), the
//! program a stdio game starts and the runtime behind it (python, java,
//! node, also behind a wrapper script), the executor (a Ray cluster
//! answers), free disk under the state directory, and the concurrency this
//! machine is good for. Exit 0 with no `fail`, 1 otherwise; nothing is
//! charged, played or written (the embedded ledger is read only when it
//! exists). Without a plan, the rows that do not need one.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Context;
use crate::exit_code::{Done, Failure};
use crate::plan::LoadedPlan;
use crate::plan::model::{BackendKind, ExecutorKind, Plan};
use crate::play::webdriver::{BROWSER_PACKAGE, BROWSERS, DRIVER_PACKAGE};

/// How long a `--version` may take (a cold Chromium takes about a second).
const VERSION_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the backend or a Ray head gets to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Free disk below which a run is likely to stop on a full disk (traces,
/// screenshots and the reuse store of one run fit well within it).
const DISK_FAIL: u64 = 1 << 30;
/// Free disk below which a long run or many runs may not fit.
const DISK_WARN: u64 = 5 << 30;
/// Memory one headless Chromium with a game page takes, roughly: what the
/// browser pool's recommendation divides by.
const BROWSER_MEMORY: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Pass,
    Warn,
    Fail,
}

/// One row: what was checked, how it went, what was found, the fix.
#[derive(Debug, Serialize)]
struct Row {
    check: &'static str,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

impl Row {
    fn pass(check: &'static str, detail: impl Into<String>) -> Row {
        Row {
            check,
            status: Status::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    /// A warning says what to do as a failure does; it only does not fail.
    fn warn(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Row {
        Row {
            status: Status::Warn,
            ..Row::fail(check, detail, fix)
        }
    }

    fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Row {
        Row {
            check,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

pub fn run(
    cx: &Context,
    plan: Option<&Path>,
    args: &super::LoadArgs,
    state_dir: Option<&Path>,
    as_json: bool,
) -> Done {
    let mut rows = Vec::new();
    let loaded = plan.and_then(
        |path| match crate::plan::load(path, &cx.load_options(args)) {
            Ok(loaded) => {
                rows.push(Row::pass(
                    "plan",
                    format!("{}: plan `{}`", path.display(), loaded.plan.name),
                ));
                Some(loaded)
            }
            Err(failure) => {
                rows.push(Row::fail(
                    "plan",
                    first_problem(&failure),
                    format!(
                        "`gameplan plan check {}` shows each problem where it is written",
                        path.display()
                    ),
                ));
                None
            }
        },
    );
    let root = loaded.as_ref().map_or_else(
        || std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        |l| l.root.clone(),
    );
    let state_dir = crate::engine::state_dir(&root, state_dir);
    let game_path = game_path(cx, loaded.as_ref().map(|l| &l.plan));
    if let Some(loaded) = &loaded {
        rows.extend(secrets(loaded));
        rows.extend(backend(loaded, &state_dir));
    }
    let plan = loaded.as_ref().map(|l| &l.plan);
    rows.push(browser(plan, &game_path));
    if let Some(plan) = plan {
        rows.extend(game(plan, &root, &game_path));
        rows.extend(executor(plan));
    }
    rows.push(disk(&state_dir));
    rows.push(concurrency(plan));
    show(cx, &rows, as_json);
    if rows.iter().any(|r| r.status == Status::Fail) {
        // The table says which row failed and its fix.
        Err(Failure::failed(String::new()))
    } else {
        Ok(())
    }
}

/// A plan that does not load, by its first problem: `plan.toml:12:11: …
/// (and 2 more problems)`.
fn first_problem(failure: &crate::plan::LoadFailure) -> String {
    let problems = crate::report::diagnostics::to_json(failure);
    let Some(first) = problems.first() else {
        return format!("{} does not load", failure.name);
    };
    let at = match (first["line"].as_u64(), first["column"].as_u64()) {
        (Some(line), Some(column)) => format!("{}:{line}:{column}", failure.name),
        _ => failure.name.clone(),
    };
    let more = match problems.len() - 1 {
        0 => String::new(),
        n => format!(" (and {} more)", crate::report::plural(n, "problem")),
    };
    format!(
        "{at}: {}{more}",
        first["message"].as_str().unwrap_or("does not load")
    )
}

fn show(cx: &Context, rows: &[Row], as_json: bool) {
    let failed = rows.iter().filter(|r| r.status == Status::Fail).count();
    let warned = rows.iter().filter(|r| r.status == Status::Warn).count();
    if as_json {
        cx.console
            .json(&serde_json::json!({"ok": failed == 0, "rows": rows}));
        return;
    }
    let mut out = String::new();
    for row in rows {
        let word = match row.status {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        let _ = writeln!(out, "{word}  {:<12} {}", row.check, row.detail);
        if let Some(fix) = &row.fix {
            let _ = writeln!(out, "      {:<12} fix: {fix}", "");
        }
    }
    let _ = match (failed, warned) {
        (0, 0) => writeln!(out, "ready: every check passed"),
        (0, w) => writeln!(out, "ready, with {}", crate::report::plural(w, "warning")),
        (f, _) => writeln!(
            out,
            "not ready: {} failed (each says its fix)",
            crate::report::plural(f, "check")
        ),
    };
    cx.console.out(&out);
}

/// The `PATH` the game and its browser start with: the game's own
/// `[game] env` one, else gameplan's (as a run hands it on).
fn game_path(cx: &Context, plan: Option<&Plan>) -> String {
    plan.and_then(|p| p.game.as_ref())
        .and_then(|g| g.env.get("PATH"))
        .or_else(|| cx.env.get("PATH"))
        .cloned()
        .unwrap_or_default()
}

/// Each secret the plan reads that is not set.
fn secrets(loaded: &LoadedPlan) -> Option<Row> {
    let mut names: Vec<&str> = loaded
        .unset_secrets
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return None;
    }
    let listed = names.join(", ");
    Some(Row::fail(
        "secrets",
        format!("the plan reads {listed}, not set"),
        format!(
            "export {} before `gameplan plan run` (a CI job: from its secret store)",
            names
                .iter()
                .map(|n| format!("{n}=…"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ))
}

/// Whether the plan buys anything: the default pipeline does, and so does
/// any step of a kind that moves money.
fn pays(plan: &Plan) -> bool {
    !plan.explicit_steps || plan.steps.iter().any(|s| s.kind.moves_money())
}

/// The backend a paying plan names, and the scopes of its token.
fn backend(loaded: &LoadedPlan, state_dir: &Path) -> Option<Row> {
    let plan = &loaded.plan;
    if !pays(plan) {
        return None;
    }
    let config = &plan.backend;
    if config.kind == BackendKind::Local {
        let ledger = crate::backend::local::ledger_path(state_dir);
        if !ledger.is_file() {
            return Some(Row::pass(
                "backend",
                format!(
                    "embedded ledger {} (made on the first run, with the demo account)",
                    ledger.display()
                ),
            ));
        }
    }
    if let Some(secret) = loaded.unset_secrets.iter().find(|s| s.in_backend) {
        return Some(Row::fail(
            "backend",
            format!("the token's secret {} is not set", secret.name),
            format!("export {}=… (a token with {})", secret.name, scopes_text()),
        ));
    }
    let where_ = match config.kind {
        BackendKind::Local => "the embedded ledger".to_owned(),
        BackendKind::Http => config.url.clone().unwrap_or_default(),
    };
    let whoami = answer(async {
        let connection = crate::backend::Connection::of_plan(config, state_dir)
            .map_err(|e| (e.status, e.message))?;
        connection
            .backend
            .whoami(&connection.token)
            .await
            .map_err(|e| (e.status, e.message))
    });
    Some(match whoami {
        Ok(me) => {
            let missing: Vec<&str> = crate::backend::api::SCOPES
                .iter()
                .copied()
                .filter(|s| !me.scopes.iter().any(|held| held == s))
                .collect();
            if missing.is_empty() {
                Row::pass(
                    "backend",
                    format!(
                        "{where_}: account `{}`, scopes {}",
                        me.user,
                        me.scopes.join(", ")
                    ),
                )
            } else {
                Row::fail(
                    "backend",
                    format!(
                        "{where_}: the token of account `{}` lacks {}",
                        me.user,
                        missing.join(", ")
                    ),
                    format!(
                        "make a token with every scope: `gameplan ledger token --account {} --scopes {}` on the server's ledger",
                        me.user,
                        crate::backend::api::SCOPES.join(",")
                    ),
                )
            }
        }
        Err((status, message)) => Row::fail(
            "backend",
            format!("{where_}: {message}"),
            match status {
                401 | 403 => format!("make a token with {}", scopes_text()),
                _ => "start the server (`gameplan serve`) or fix `[backend] url`".to_owned(),
            },
        ),
    })
}

fn scopes_text() -> String {
    format!(
        "`gameplan ledger token --scopes {}`",
        crate::backend::api::SCOPES.join(",")
    )
}

/// chromedriver and Chromium, their versions, and whether they match; a
/// failure only when the plan plays a web game with the driver gameplan
/// starts.
fn browser(plan: Option<&Plan>, path: &str) -> Row {
    let game = plan.and_then(|p| p.game.as_ref());
    let web = game.is_some_and(|g| g.target.driver().row().browser);
    if let Some(url) = game
        .and_then(|g| g.target.browser())
        .and_then(|b| b.webdriver_url.as_deref())
    {
        return webdriver_server(url);
    }
    let missing = |what: &str, package: &str| {
        let detail = format!("{what} is not on PATH");
        let fix = format!("apt-get install -y {package} (Debian/Ubuntu)");
        if web {
            Row::fail("browser", detail, fix)
        } else {
            Row::warn("browser", format!("{detail} (only web games need it)"), fix)
        }
    };
    let Some(driver) = found(path, &["chromedriver"]) else {
        return missing("chromedriver", DRIVER_PACKAGE);
    };
    let Some(chromium) = found(path, &BROWSERS) else {
        return missing("chromium", BROWSER_PACKAGE);
    };
    let (Some(driver_version), Some(browser_version)) = (
        version(&driver, &["--version"], path),
        version(&chromium, &["--version"], path),
    ) else {
        return Row::fail(
            "browser",
            format!(
                "{} or {} did not say its version",
                driver.display(),
                chromium.display()
            ),
            format!("reinstall {DRIVER_PACKAGE} and {BROWSER_PACKAGE}"),
        );
    };
    let major = |v: &str| v.split('.').next().map(str::to_owned);
    let detail = format!(
        "chromedriver {driver_version}, {} {browser_version}",
        chromium.display()
    );
    if major(&driver_version) == major(&browser_version) {
        Row::pass("browser", detail)
    } else {
        let fix = format!(
            "install the chromedriver of the browser's major version (Debian's {DRIVER_PACKAGE} matches its {BROWSER_PACKAGE})"
        );
        if web {
            Row::fail("browser", format!("{detail}: versions differ"), fix)
        } else {
            Row::warn("browser", format!("{detail}: versions differ"), fix)
        }
    }
}

/// The plan's own WebDriver server answers its `/status` and says it is
/// ready (W3C WebDriver § Status): a pass only for what was asked.
fn webdriver_server(url: &str) -> Row {
    let status = format!("{}/status", url.trim_end_matches('/'));
    let said = answer(async {
        let reply = reqwest::get(&status)
            .await
            .map_err(|e| (0, e.to_string()))?;
        let code = reply.status().as_u16();
        let body: serde_json::Value = reply.json().await.map_err(|e| (code, e.to_string()))?;
        Ok(body["value"]["ready"].as_bool().unwrap_or(false))
    });
    match said {
        Ok(true) => Row::pass(
            "browser",
            format!("the plan's WebDriver server {url} is ready"),
        ),
        Ok(false) => Row::fail(
            "browser",
            format!("the plan's WebDriver server {url} answers but is not ready"),
            "end the sessions it holds, or restart it",
        ),
        Err((_, e)) => Row::fail(
            "browser",
            format!("the plan's WebDriver server {url} does not answer: {e}"),
            "start it (`chromedriver --port=…`), or fix `[game] webdriver_url`",
        ),
    }
}

/// The first of `names` on `path`.
fn found(path: &str, names: &[&str]) -> Option<PathBuf> {
    names
        .iter()
        .find_map(|n| crate::process::on_path(n, path, Path::new(".")).ok())
}

/// The first version number `program ARGS` prints (on stdout or stderr:
/// `java -version` writes to stderr), within [`VERSION_TIMEOUT`].
fn version(program: &Path, args: &[&str], path: &str) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < VERSION_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut text = String::new();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read>),
    ]
    .into_iter()
    .flatten()
    {
        let _ = stream.take(64 * 1024).read_to_string(&mut text);
    }
    first_version(&text)
}

/// The first word that starts with a digit (after a `v`) and holds a dot:
/// `156.0.8078.129` of `ChromeDriver 156.0.8078.129 (…)`, `17.0.9` of
/// `openjdk version "17.0.9"`, `18.19.0` of `v18.19.0`.
fn first_version(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == '"')
        .map(|w| w.strip_prefix('v').unwrap_or(w))
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))
        .map(|w| w.trim_end_matches([',', ')']).to_owned())
}

/// The runtimes gameplan knows a game's program by, the word that gives
/// their version, and the Debian package that installs them.
const RUNTIMES: [(&str, &[&str], &str); 4] = [
    ("python3", &["--version"], "python3"),
    ("python", &["--version"], "python3"),
    ("java", &["-version"], "default-jre-headless"),
    ("node", &["--version"], "nodejs"),
];

/// A stdio game's program and the runtime it needs: named by its command
/// (`python3 game.py`), by a script's `#!` line, or inside a wrapper script
/// (`exec java -jar …`).
fn game(plan: &Plan, root: &Path, path: &str) -> Option<Row> {
    let game = plan.game.as_ref()?;
    // A game started as a program (a page has none).
    let program = game.target.command().first()?;
    if let Some(name) = program.strip_prefix("builtin:") {
        return Some(Row::pass(
            "game",
            format!("`{program}`: built into gameplan (`gameplan game {name}`)"),
        ));
    }
    let resolved = if program.contains('/') {
        let at = root.join(program);
        crate::process::is_executable(&at).then_some(at)
    } else {
        crate::process::on_path(program, path, root).ok()
    };
    let Some(resolved) = resolved else {
        return Some(Row::fail(
            "game",
            format!(
                "`{program}` (the game's command) is not an executable on the game's PATH or in the repo"
            ),
            runtime_of(program).map_or_else(
                || format!("install `{program}`, or fix `[game] command`"),
                |(_, _, package)| format!("apt-get install -y {package} (Debian/Ubuntu)"),
            ),
        ));
    };
    let needs = runtime_of(program)
        .map(|r| r.0)
        .or_else(|| script_runtime(&resolved));
    let Some(needs) = needs else {
        return Some(Row::pass(
            "game",
            format!("`{program}`: {}", resolved.display()),
        ));
    };
    let (name, args, package) = runtime_of(needs)?;
    let Some(at) = found(path, &[name]) else {
        return Some(Row::fail(
            "game",
            format!("`{program}` needs {name}, which is not on the game's PATH"),
            format!("apt-get install -y {package} (Debian/Ubuntu), or put it on `[game] env` PATH"),
        ));
    };
    let said = version(&at, args, path).unwrap_or_else(|| "of unknown version".to_owned());
    let detail = format!("`{program}`: {name} {said} ({})", at.display());
    if name == "java"
        && let Some(limit) = game.limits.address_space
    {
        return Some(Row::warn(
            "game",
            format!("{detail}; `limits.address_space` is {limit} bytes"),
            "a JVM reserves far more address space than it uses and may not start under it: \
             bound `limits.memory` (what the game uses) instead",
        ));
    }
    Some(Row::pass("game", detail))
}

fn runtime_of(program: &str) -> Option<(&'static str, &'static [&'static str], &'static str)> {
    let base = Path::new(program).file_name()?.to_str()?;
    RUNTIMES.iter().copied().find(|(name, _, _)| base == *name)
}

/// The runtime a script needs: its `#!` interpreter, else the first runtime
/// a wrapper's lines start (`exec java …`, `"$JAVA_HOME/bin/java"`).
fn script_runtime(script: &Path) -> Option<&'static str> {
    let mut head = String::new();
    std::fs::File::open(script)
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut head)
        .ok()?;
    let mut lines = head.lines();
    let shebang = lines.next().filter(|l| l.starts_with("#!"))?;
    let words = |line: &str| -> Option<&'static str> {
        line.split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .filter_map(|w| Path::new(w).file_name()?.to_str())
            .find_map(|w| runtime_of(w).map(|r| r.0))
    };
    words(shebang).or_else(|| {
        lines
            .filter(|l| !l.trim_start().starts_with('#'))
            .find_map(words)
    })
}

/// A Ray executor's head answers, with its version.
fn executor(plan: &Plan) -> Option<Row> {
    let executor = plan.executor.as_ref()?;
    if executor.kind != ExecutorKind::Ray {
        return Some(Row::pass("executor", "local: jobs run on this machine"));
    }
    let address = executor.address.clone().unwrap_or_default();
    let said = answer(async {
        let client = crate::ray::JobsClient::new(&address).map_err(|e| (0, e.to_string()))?;
        client.version().await.map_err(|e| (0, e.to_string()))
    });
    Some(match said {
        Ok(v) => Row::pass(
            "executor",
            format!(
                "Ray {} at {address} (Jobs API {})",
                v.ray_version, v.version
            ),
        ),
        Err((_, e)) => Row::fail(
            "executor",
            format!("the Ray head at {address} does not answer: {e}"),
            "start the cluster (`ray start --head --dashboard-host 0.0.0.0`) or fix `[executor] address`",
        ),
    })
}

/// What `call` answered within [`ANSWER_TIMEOUT`]: its value, or the HTTP
/// status (0: none) and message of why not.
fn answer<T>(
    call: impl std::future::Future<Output = Result<T, (u16, String)>>,
) -> Result<T, (u16, String)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| (0, format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        tokio::time::timeout(ANSWER_TIMEOUT, call)
            .await
            .unwrap_or_else(|_| {
                Err((
                    0,
                    format!("no answer within {} s", ANSWER_TIMEOUT.as_secs()),
                ))
            })
    })
}

/// Free space where the state directory is (or would be made).
fn disk(state_dir: &Path) -> Row {
    let at = state_dir
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    let Ok(stat) = nix::sys::statvfs::statvfs(at) else {
        return Row::warn(
            "disk",
            format!("cannot read the free space of {}", at.display()),
            "check the state directory's file system by hand (`df`)",
        );
    };
    let free = stat.blocks_available().saturating_mul(stat.fragment_size());
    let detail = format!("{} free under {}", gib(free), state_dir.display());
    let fix = "free space there, or point `--state-dir` at a larger disk";
    if free < DISK_FAIL {
        Row::fail("disk", detail, fix)
    } else if free < DISK_WARN {
        Row::warn("disk", detail, fix)
    } else {
        Row::pass("disk", detail)
    }
}

fn gib(bytes: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a size for people")]
    let gib = bytes as f64 / f64::from(1u32 << 30);
    format!("{gib:.1} GiB")
}

/// The steps at once this machine is good for: its cores; for a web game,
/// no more browsers than memory holds.
fn concurrency(plan: Option<&Plan>) -> Row {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let available = available_memory();
    let memory = available.map_or_else(
        || "memory unknown".to_owned(),
        |m| format!("{} available", gib(m)),
    );
    let web = plan
        .and_then(|p| p.game.as_ref())
        .is_some_and(|g| g.target.driver().row().browser);
    if !web {
        return Row::pass(
            "concurrency",
            format!("{cores} cores, {memory}: --concurrency {cores} (the default)"),
        );
    }
    let browsers = available.map_or(cores, |m| {
        usize::try_from(m / BROWSER_MEMORY)
            .unwrap_or(usize::MAX)
            .min(cores)
    });
    if browsers == 0 {
        return Row::warn(
            "concurrency",
            format!("{cores} cores, {memory}: less than one browser's ~1 GiB"),
            "free memory, or run web games on a larger machine",
        );
    }
    Row::pass(
        "concurrency",
        format!(
            "{cores} cores, {memory}: --concurrency {cores}, `[pools] browser = {browsers}` (about 1 GiB per browser)"
        ),
    )
}

/// `MemAvailable` of `/proc/meminfo` (Linux), in bytes.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_what_each_program_prints() {
        assert_eq!(
            first_version("ChromeDriver 156.0.8078.129 (1a2e4e6f-refs/branch-heads/8078@{#2497})"),
            Some("156.0.8078.129".to_owned())
        );
        assert_eq!(
            first_version("openjdk version \"17.0.9\" 2023-10-17\nOpenJDK Runtime"),
            Some("17.0.9".to_owned())
        );
        assert_eq!(first_version("Python 3.11.2"), Some("3.11.2".to_owned()));
        assert_eq!(first_version("v18.19.0"), Some("18.19.0".to_owned()));
        assert_eq!(first_version("no version here"), None);
    }

    #[test]
    fn a_wrapper_script_s_runtime_is_found_behind_it() {
        let dir = tempfile::tempdir().expect("dir");
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write");
            p
        };
        let gradle = write(
            "run.sh",
            "#!/bin/sh\n# starts the game\nexec \"$JAVA_HOME/bin/java\" -Xmx64m -jar game.jar \"$@\"\n",
        );
        assert_eq!(script_runtime(&gradle), Some("java"));
        let py = write("game", "#!/usr/bin/env python3\nprint('hi')\n");
        assert_eq!(script_runtime(&py), Some("python3"));
        let plain = write("plain.sh", "#!/bin/sh\necho hi\n");
        assert_eq!(script_runtime(&plain), None);
    }
}
