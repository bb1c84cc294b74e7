//! The test builder: a temp repo, files written into it, the real binary run
//! inside it with a known environment, and assertions on what came out.
//!
//! In the style of casey/just's `tests/test.rs`: every test says what the repo
//! holds and what it expects, nothing else. Commands run with the repo as the
//! working directory and relative plan paths, so output never holds the temp
//! path (except where gameplan prints the repo root; see [`Output::redacted`]).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::Deserialize;

/// The binary under test, built by cargo for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_gameplan");

/// A command taking longer than this is a hang. Generous, because the debug
/// binary shares two cores with other builds and the longest plans (four
/// browser cells of 60 actions, each read after the page's requests and
/// animations settled, its screen captured) take most of a minute there;
/// hostile-input tests assert tighter bounds themselves.
const HANG_AFTER: Duration = Duration::from_secs(120);

/// A temp repo (a directory holding `.git`, so gameplan takes it as the repo
/// root) and the environment commands run with.
pub struct Test {
    dir: tempfile::TempDir,
    env: BTreeMap<String, String>,
    /// How long a command may run before it is called hung.
    hang_after: Duration,
}

/// A test that fails half-way (a timing bound under load, say) can leave a
/// step, a game or a launcher running in its directory, and once the
/// directory is gone such a process may wait forever for a file that never
/// comes (it did: steps looping `until [ -f release ]` outlived their tests
/// by hours). Whatever still runs in the test's directory dies with it.
impl Drop for Test {
    fn drop(&mut self) {
        let Ok(root) = self.dir.path().canonicalize() else {
            return;
        };
        for _ in 0..5 {
            let left = working_in(&root);
            if left.is_empty() {
                return;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Live processes whose working directory is `root` or under it.
fn working_in(root: &Path) -> Vec<i32> {
    let me = std::process::id().cast_signed();
    processes()
        .into_iter()
        .filter(|p| !p.zombie && p.pid != me)
        .filter(|p| {
            std::fs::read_link(format!("/proc/{}/cwd", p.pid))
                .is_ok_and(|cwd| cwd.starts_with(root))
        })
        .map(|p| p.pid)
        .collect()
}

impl Test {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("gameplan-test")
            .tempdir()
            .expect("create temp dir");
        std::fs::create_dir(dir.path().join(".git")).expect("create .git");
        let mut env = BTreeMap::new();
        // Only what a shell needs to find programs, and plain output.
        env.insert(
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
        );
        env.insert("NO_COLOR".to_owned(), "1".to_owned());
        Test {
            dir,
            env,
            hang_after: HANG_AFTER,
        }
    }

    /// Waits `limit` for each command before calling it hung (instead of
    /// two minutes): for a run whose every turn waits on a real model.
    #[must_use]
    pub fn hang_after(mut self, limit: Duration) -> Self {
        self.hang_after = limit;
        self
    }

    /// Writes a file (text or bytes) at a repo-relative path, creating directories.
    #[must_use]
    pub fn file(self, path: &str, contents: impl AsRef<[u8]>) -> Self {
        let full = self.dir.path().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).expect("create parent dirs");
        }
        std::fs::write(&full, contents).expect("write file");
        self
    }

    /// Sets an environment variable for every command this test runs.
    #[must_use]
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Unsets an environment variable set with [`Self::env`].
    #[must_use]
    pub fn without_env(mut self, name: &str) -> Self {
        self.env.remove(name);
        self
    }

    /// Runs `gameplan ARGS…` in the repo. Fails the test on a hang, a death
    /// by signal, or a panic message, whatever the exit code.
    pub fn run(&self, args: &[&str]) -> Output {
        self.spawn(args).wait()
    }

    /// Starts `gameplan ARGS…` in the background, to be signalled, killed
    /// or waited for.
    pub fn spawn(&self, args: &[&str]) -> Spawned {
        self.start(args, false)
    }

    /// Like [`Self::spawn`], with gameplan leading a process group of its
    /// own, so the test can kill the group as a container kill would.
    pub fn spawn_in_group(&self, args: &[&str]) -> Spawned {
        self.start(args, true)
    }

    fn start(&self, args: &[&str], own_group: bool) -> Spawned {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if own_group {
            command.process_group(0);
        }
        let started = Instant::now();
        let mut child = command.spawn().expect("spawn gameplan");
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                bytes
            })
        };
        let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
        let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
        Spawned {
            command_line: format!("gameplan {}", args.join(" ")),
            child,
            started,
            hang_after: self.hang_after,
            stdout,
            stderr,
            roots: roots(self.dir.path()),
        }
    }

    /// The absolute path of a repo-relative path.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The text of a repo-relative file; empty when it does not exist.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    /// Writes a repo-relative file in the middle of a test.
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let full = self.path(rel);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).expect("create parent dirs");
        }
        std::fs::write(&full, contents).expect("write file");
    }

    /// The ids of the runs under `.gameplan/runs`, oldest first.
    pub fn run_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(self.path(".gameplan/runs"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        ids.sort();
        ids
    }

    /// What `gameplan plan log STEP RUN_ID` prints: the step's log, read
    /// from the run's one `steps.log` by its journaled segments.
    pub fn step_log(&self, step: &str, run_id: &str) -> String {
        let out = self.run(&["plan", "log", step, run_id]);
        out.code(0);
        out.stdout
    }

    /// `plan check --json FILES…` and `plan check FILES…` (text), which must agree.
    pub fn check(&self, files: &[&str]) -> Check {
        let mut args = vec!["plan", "check", "--json"];
        args.extend_from_slice(files);
        let json = self.run(&args);
        let doc: CheckDoc = serde_json::from_str(&json.stdout).unwrap_or_else(|e| {
            panic!("`plan check --json` printed no JSON document ({e})\n{json}")
        });
        let text = self.run(&args[..2].iter().chain(files).copied().collect::<Vec<_>>());
        assert_eq!(
            json.code, text.code,
            "--json and text disagree on the exit code\n{json}\n{text}"
        );
        assert_eq!(
            json.code,
            Some(if doc.valid { 0 } else { 3 }),
            "exit code and `valid` disagree\n{json}"
        );
        Check { doc, json, text }
    }
}

fn roots(dir: &Path) -> Vec<PathBuf> {
    let mut roots = vec![dir.to_path_buf()];
    if let Ok(canonical) = dir.canonicalize()
        && canonical != dir
    {
        roots.push(canonical);
    }
    roots
}

/// A gameplan running in the background.
pub struct Spawned {
    command_line: String,
    child: std::process::Child,
    started: Instant,
    hang_after: Duration,
    stdout: std::thread::JoinHandle<Vec<u8>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
    roots: Vec<PathBuf>,
}

impl Spawned {
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a pid fits in i32")
    }

    /// Sends `signal` to gameplan alone (not to the processes of its steps).
    pub fn signal(&self, signal: Signal) {
        nix::sys::signal::kill(Pid::from_raw(self.pid()), signal).expect("signal gameplan");
    }

    /// The pid of gameplan's step launcher: its one child, once a command
    /// step started.
    pub fn launcher(&self) -> i32 {
        let children: Vec<i32> = processes()
            .into_iter()
            .filter(|p| p.ppid == self.pid())
            .map(|p| p.pid)
            .collect();
        assert_eq!(children.len(), 1, "gameplan's one child is its launcher");
        children[0]
    }

    /// Whether gameplan has exited (without reaping it).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("poll gameplan").is_none()
    }

    /// `kill -9` of gameplan alone; its steps' processes live on, as they
    /// would after an OOM kill of gameplan. Returns what it printed.
    pub fn kill9(mut self) -> Output {
        let _ = self.child.kill();
        self.collect()
    }

    /// Waits for gameplan to exit by itself. Fails the test on a hang, a
    /// death by signal, or a panic message, whatever the exit code.
    pub fn wait(self) -> Output {
        let output = self.collect();
        assert!(
            output.code.is_some(),
            "`{}` was killed by a signal\n{output}",
            output.command_line
        );
        assert!(
            !output.stderr.contains("panicked") && !output.stdout.contains("panicked"),
            "`{}` panicked\n{output}",
            output.command_line
        );
        output
    }

    fn collect(mut self) -> Output {
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for gameplan") {
                break status;
            }
            if self.started.elapsed() > self.hang_after {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "`{}` hung: killed after {:?}",
                    self.command_line, self.hang_after
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.started.elapsed();
        let text = |h: std::thread::JoinHandle<Vec<u8>>| {
            String::from_utf8_lossy(&h.join().expect("pipe reader")).into_owned()
        };
        Output {
            command_line: self.command_line,
            code: status.code(),
            stdout: text(self.stdout),
            stderr: text(self.stderr),
            elapsed,
            roots: self.roots,
        }
    }
}

/// The addresses (`FILE#game-N`) of the failed games' traces that
/// `gameplan __simulate` printed, in game order.
pub fn failed_traces(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("trace of a failed game: "))
        .filter_map(|l| l.split(' ').next())
        .collect()
}

/// Polls `ready` every few milliseconds until it holds; fails the test
/// after `within`, saying what was awaited.
#[track_caller]
pub fn wait_until(what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < within,
            "gave up waiting after {within:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One line of `/proc/<pid>/stat`, the fields the tests need.
#[derive(Debug, Clone, Copy)]
pub struct ProcStat {
    pub pid: i32,
    pub ppid: i32,
    pub pgrp: i32,
    /// A zombie has exited and holds nothing; only its parent has not reaped it.
    pub zombie: bool,
}

/// `/proc/<pid>/stat`, or `None` when no such process exists.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        ppid: parent,
        pgrp,
        zombie: state == "Z",
    })
}

/// Every process on the machine, as `/proc` lists them.
pub fn processes() -> Vec<ProcStat> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter_map(proc_stat)
        .collect()
}

/// Live (not zombie) processes of process group `pgid`.
pub fn live_in_group(pgid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid && !p.zombie)
        .map(|p| p.pid)
        .collect()
}

/// The process groups of `pid` and of all its descendants.
pub fn groups_of_tree(pid: i32) -> Vec<i32> {
    let all = processes();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|p| p.ppid == parent).map(|p| p.pid));
        i += 1;
    }
    let mut groups: Vec<i32> = all
        .iter()
        .filter(|p| tree.contains(&p.pid))
        .map(|p| p.pgrp)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// What one command did.
pub struct Output {
    pub command_line: String,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    roots: Vec<PathBuf>,
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--- `{}` exited {:?} after {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.command_line, self.code, self.elapsed, self.stdout, self.stderr
        )
    }
}

impl Output {
    #[track_caller]
    pub fn code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(expected),
            "unexpected exit code from `{}`\n{self}",
            self.command_line
        );
        self
    }

    #[track_caller]
    pub fn stdout_has(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}\n{self}"
        );
        self
    }

    #[track_caller]
    pub fn stderr_has(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}\n{self}"
        );
        self
    }

    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e})\n{self}"))
    }

    /// stderr with the repo root replaced by `[ROOT]` (for snapshots).
    pub fn redacted_stderr(&self) -> String {
        self.roots.iter().fold(self.stderr.clone(), |text, root| {
            text.replace(&root.display().to_string(), "[ROOT]")
        })
    }
}

#[derive(Debug, Deserialize)]
pub struct CheckDoc {
    pub valid: bool,
    pub files: Vec<CheckedFile>,
}

#[derive(Debug, Deserialize)]
pub struct CheckedFile {
    pub file: String,
    pub valid: bool,
    pub problems: Vec<Problem>,
}

/// One problem as `plan check --json` reports it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub code: String,
    pub message: String,
    pub label: Option<String>,
    pub help: Option<String>,
}

/// The result of `plan check` on some files, as JSON and as text.
pub struct Check {
    pub doc: CheckDoc,
    pub json: Output,
    pub text: Output,
}

impl Check {
    /// Every problem of every file, in report order.
    pub fn problems(&self) -> Vec<&Problem> {
        self.doc.files.iter().flat_map(|f| &f.problems).collect()
    }

    fn listing(&self) -> String {
        let mut out = String::new();
        for p in self.problems() {
            let _ = writeln!(
                out,
                "  {}:{}:{} {} {}",
                p.file,
                p.line.unwrap_or(0),
                p.column.unwrap_or(0),
                p.code,
                p.message
            );
        }
        out
    }

    /// Asserts the check failed with exactly one problem, of `code`, and returns it.
    #[track_caller]
    pub fn only(&self, code: &str) -> &Problem {
        self.json.code(3);
        let problems = self.problems();
        assert!(
            problems.len() == 1 && problems[0].code == code,
            "expected exactly one `{code}` problem, got:\n{}\n{}",
            self.listing(),
            self.text
        );
        problems[0]
    }

    /// The one problem with `message`, among several.
    #[track_caller]
    pub fn with_message(&self, message: &str) -> &Problem {
        let found: Vec<&Problem> = self
            .problems()
            .into_iter()
            .filter(|p| p.message == message)
            .collect();
        assert!(
            found.len() == 1,
            "expected one problem {message:?}, got:\n{}",
            self.listing()
        );
        found[0]
    }

    /// Asserts the problems' codes, in report order.
    #[track_caller]
    pub fn codes(&self, expected: &[&str]) -> &Self {
        let codes: Vec<&str> = self.problems().iter().map(|p| p.code.as_str()).collect();
        assert_eq!(codes, expected, "problems:\n{}", self.listing());
        self
    }

    /// Asserts the text rendering shows `problem` as a person reads it: the
    /// code on top, then `× FILE:LINE:COL: message`, its label, its help.
    #[track_caller]
    pub fn rendered(&self, problem: &Problem) -> &Self {
        let flat = squash(&self.text.stderr);
        let mut header = format!("{}\n× {}", problem.code, problem.file);
        if let (Some(line), Some(column)) = (problem.line, problem.column) {
            header = format!("{header}:{line}:{column}");
        }
        header = format!("{header}: {}", problem.message);
        let mut expected = vec![header];
        expected.extend(problem.label.clone());
        expected.extend(problem.help.as_deref().map(|h| format!("help: {h}")));
        for needle in expected {
            assert!(
                flat.contains(&squash(&needle)),
                "the text output lacks {needle:?}\n{}",
                self.text
            );
        }
        self
    }

    /// The text output's last line for one file: `FILE: N problems found; …`.
    #[track_caller]
    pub fn summary(&self, file: &str, problems: usize) -> &Self {
        let s = if problems == 1 { "" } else { "s" };
        self.text.stderr_has(&format!(
            "{file}: {problems} problem{s} found; nothing was run or charged\n"
        ));
        self
    }
}

impl Problem {
    /// Asserts where the problem points.
    #[track_caller]
    pub fn at(&self, line: usize, column: usize) -> &Self {
        assert_eq!(
            (self.line, self.column),
            (Some(line), Some(column)),
            "{} reported at the wrong place: {self:?}",
            self.code
        );
        self
    }

    #[track_caller]
    pub fn message(&self, message: &str) -> &Self {
        assert_eq!(self.message, message, "{self:?}");
        self
    }

    #[track_caller]
    pub fn help(&self, help: &str) -> &Self {
        assert_eq!(self.help.as_deref(), Some(help), "{self:?}");
        self
    }

    #[track_caller]
    pub fn help_has(&self, needle: &str) -> &Self {
        assert!(
            self.help.as_deref().is_some_and(|h| h.contains(needle)),
            "help lacks {needle:?}: {self:?}"
        );
        self
    }

    #[track_caller]
    pub fn label(&self, label: &str) -> &Self {
        assert_eq!(self.label.as_deref(), Some(label), "{self:?}");
        self
    }
}

/// Drops all whitespace (and the `│` miette puts before the continuation of
/// a wrapped header), so assertions do not depend on where a long line
/// wraps; miette may even break inside a word.
fn squash(text: &str) -> String {
    text.replace("\n  │ ", " ")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// 1-based line and column (in characters) where `needle` starts in `text`;
/// it must occur exactly once, so a test cannot point at the wrong copy.
#[track_caller]
pub fn pos(text: &str, needle: &str) -> (usize, usize) {
    let mut found = text.match_indices(needle);
    let (at, _) = found
        .next()
        .unwrap_or_else(|| panic!("{needle:?} is not in the plan"));
    assert!(found.next().is_none(), "{needle:?} occurs more than once");
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Shorthand: [`Problem::at`] the position of `needle` in `text`.
#[track_caller]
pub fn at<'p>(problem: &'p Problem, text: &str, needle: &str) -> &'p Problem {
    let (line, column) = pos(text, needle);
    problem.at(line, column)
}

/// The steps of a `plan explain --json` document: `(id, needs)` in order.
pub fn explained(doc: &serde_json::Value) -> Vec<(String, Vec<String>)> {
    doc["steps"]
        .as_array()
        .expect("`steps` is an array")
        .iter()
        .map(|s| {
            let needs = s["needs"]
                .as_array()
                .expect("`needs` is an array")
                .iter()
                .map(|n| n.as_str().expect("a need is a string").to_owned())
                .collect();
            (
                s["id"].as_str().expect("`id` is a string").to_owned(),
                needs,
            )
        })
        .collect()
}

/// The ids of a `plan explain --json` document, in order.
pub fn ids(doc: &serde_json::Value) -> Vec<String> {
    explained(doc).into_iter().map(|(id, _)| id).collect()
}

/// The step `id` of a run report (`plan run --json`) or an explain document.
#[track_caller]
pub fn step<'d>(doc: &'d serde_json::Value, id: &str) -> &'d serde_json::Value {
    doc["steps"]
        .as_array()
        .expect("`steps` is an array")
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no step `{id}` in {doc:#}"))
}

/// Each step's `field` (`state` in a run report or `plan status --json`,
/// `action` in `plan explain --json`), by step id.
pub fn by_step(doc: &serde_json::Value, field: &str) -> BTreeMap<String, String> {
    doc["steps"]
        .as_array()
        .expect("`steps` is an array")
        .iter()
        .map(|s| {
            (
                s["id"].as_str().expect("`id` is a string").to_owned(),
                s[field].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `[(id, value)…]` as a map, to compare with [`by_step`].
pub fn expect_steps(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(id, value)| ((*id).to_owned(), (*value).to_owned()))
        .collect()
}

/// Every scope a token can hold, as `ledger token --scopes` takes them.
pub const ALL_SCOPES: &str = "playtest:write,playtest:model,playtest:upload";

/// `gameplan serve --addr 127.0.0.1:0 --db DB`, started in a directory and
/// running until dropped (then stopped with SIGTERM, as an operator would):
/// its URL read from its `listening on URL` line, its log (stderr) collected
/// as it comes, so the server never blocks on a full pipe.
pub struct Served {
    child: std::process::Child,
    pub url: String,
    /// A token of the `demo` account with every scope, made for the test
    /// (`serve` refuses the public demo token).
    pub token: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub db: PathBuf,
}

impl Served {
    /// A server of `served.sqlite` in the test's repo.
    pub fn start(t: &Test) -> Served {
        Served::of(&t.path(""), &t.path("served.sqlite"))
    }

    /// A server of the ledger file `db`, started in `cwd`, with a token
    /// made for the test.
    pub fn of(cwd: &Path, db: &Path) -> Served {
        let mut served = Served::bare(cwd, db);
        served.token = token_of(cwd, db);
        served
    }

    /// A server of the ledger file `db`, started in `cwd`, and nothing
    /// written to the ledger (`token` is empty). `--demo`: a ledger created
    /// here gets the demo account and its money, as the tests' plans
    /// expect; its public token is refused, so tests make their own.
    pub fn bare(cwd: &Path, db: &Path) -> Served {
        Served::with_flags(cwd, db, &["--demo"])
    }

    /// `gameplan serve --addr 127.0.0.1:0 --db DB FLAGS...` in `cwd`
    /// (`token` is empty).
    pub fn with_flags(cwd: &Path, db: &Path, flags: &[&str]) -> Served {
        Served::spawned(Command::new(BIN), cwd, db, flags)
    }

    /// [`Served::with_flags`] with its open-files limit (`ulimit -n`) at
    /// `files`, set by a shell that then becomes the server.
    pub fn with_file_limit(cwd: &Path, db: &Path, flags: &[&str], files: u32) -> Served {
        let mut shell = Command::new("sh");
        shell
            .arg("-c")
            .arg(format!("ulimit -n {files} && exec \"$@\""))
            .arg("sh")
            .arg(BIN);
        Served::spawned(shell, cwd, db, flags)
    }

    /// [`Served::with_flags`] of a ledger with the demo account
    /// (`--demo`), and a token of it with every scope.
    pub fn with_flags_and_token(cwd: &Path, db: &Path, flags: &[&str]) -> Served {
        let mut all = vec!["--demo"];
        all.extend_from_slice(flags);
        let mut served = Served::with_flags(cwd, db, &all);
        served.token = token_of(cwd, db);
        served
    }

    /// [`Served::with_flags`] killing itself with SIGKILL at the crash
    /// point `at` (`GAMEPLAN_CRASH_AT`), set by a shell that then becomes
    /// the server.
    pub fn crashing_at(cwd: &Path, db: &Path, flags: &[&str], at: &str) -> Served {
        let mut shell = Command::new("sh");
        shell
            .arg("-c")
            .arg(format!("GAMEPLAN_CRASH_AT={at} exec \"$@\""))
            .arg("sh")
            .arg(BIN);
        Served::spawned(shell, cwd, db, flags)
    }

    /// `kill -9` of the server, waited for.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `command` (the server, or what execs it) given `serve`'s arguments.
    fn spawned(mut command: Command, cwd: &Path, db: &Path, flags: &[&str]) -> Served {
        use std::io::BufRead as _;
        let mut child = command
            .args(["serve", "--addr", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(flags)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gameplan serve");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let sink = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                sink.lock().expect("log").push(line);
            }
        });
        let started = Instant::now();
        let url = loop {
            let found = log.lock().expect("log").iter().find_map(|l: &String| {
                l.strip_prefix("listening on ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(str::to_owned)
            });
            if let Some(url) = found {
                break url;
            }
            assert!(
                started.elapsed() < HANG_AFTER,
                "no `listening on` line: {:?}",
                log.lock().expect("log")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Served {
            child,
            url,
            token: String::new(),
            log,
            db: db.to_path_buf(),
        }
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its log so far, one line each.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }

    /// Its log once `done` holds of it, or after 10 s: the log is read
    /// from the server's stderr by a thread of its own, which may lag the
    /// answers on a loaded machine.
    pub fn log_once(&self, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let started = Instant::now();
        while !done(&self.log()) && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.log()
    }

    /// `gameplan ledger show --json` of its ledger file.
    pub fn ledger(&self, t: &Test) -> serde_json::Value {
        let db = self.db.to_str().expect("a UTF-8 ledger path");
        t.run(&["ledger", "show", "--json", "--db", db])
            .code(0)
            .json()
    }

    /// Stops it with SIGTERM and waits for it.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(0));
        let _ = nix::sys::signal::kill(pid, Signal::SIGTERM);
        self.child.wait().expect("wait for the server")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// What the test model server answers to one request.
pub enum ModelReply {
    /// A chat completion with this text and usage (prompt, completion tokens).
    Text(String, u64, u64),
    /// Accepts, reads the request, and never answers.
    Silent,
    /// An HTTP error status with this body.
    Status(u16, String),
}

/// A chat completion request as the test model server saw it.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The `Authorization` header.
    pub authorization: String,
    /// `(role, content)` of every message, in order.
    pub messages: Vec<(String, String)>,
    /// The whole request body.
    pub body: serde_json::Value,
}

impl ModelRequest {
    /// The content of the first message of `role`.
    pub fn message(&self, role: &str) -> &str {
        self.messages
            .iter()
            .find(|(r, _)| r == role)
            .map_or("", |(_, c)| c.as_str())
    }
}

/// Answers the `n`th request (from 0).
pub type ModelScript = Box<dyn Fn(usize, &ModelRequest) -> ModelReply + Send>;

/// A small OpenAI-compatible chat server on loopback (`std::net`), standing
/// in for a paid model API only: it answers `POST /v1/chat/completions`
/// from a script and records every request it read.
pub struct ModelServer {
    /// The `base_url` to give gameplan (`http://127.0.0.1:PORT/v1`).
    pub url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<ModelRequest>>>,
}

impl ModelServer {
    pub fn start(script: ModelScript) -> ModelServer {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let Some(request) = read_model_request(&mut stream) else {
                    continue;
                };
                log.lock().unwrap().push(request.clone());
                match script(n, &request) {
                    ModelReply::Silent => {
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_secs(120));
                            drop(stream);
                        });
                    }
                    ModelReply::Status(status, body) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    ModelReply::Text(text, input, output) => {
                        write_completion(&mut stream, n, &text, input, output);
                    }
                }
                n += 1;
            }
        });
        ModelServer { url, seen }
    }

    /// Every request read so far, in order.
    pub fn seen(&self) -> Vec<ModelRequest> {
        self.seen.lock().unwrap().clone()
    }
}

/// One chat-completions request read off `stream` (head and body), or
/// `None` when the client went away first.
pub fn read_model_request(stream: &mut std::net::TcpStream) -> Option<ModelRequest> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&buf[..n]);
        if let Some(i) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    while bytes.len() < head_end + length {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    let body: serde_json::Value = serde_json::from_slice(&bytes[head_end..]).ok()?;
    let messages = body["messages"]
        .as_array()?
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_owned(),
                m["content"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    Some(ModelRequest {
        authorization: header("authorization"),
        messages,
        body,
    })
}

/// Every file under `dir` whose bytes hold `needle`.
pub fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// A small tmpfs mounted inside a test's repo: a disk that fills up,
/// without touching the machine's. Mounting needs root, as CI has (`bash
/// .ci/run` runs as root): where it cannot mount, the test fails saying
/// so; it never passes without having tested.
pub struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    pub fn mount(dir: PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&dir).expect("mount point");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test needs a small tmpfs to fill (run it as root, as CI does): mount said {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        SmallDisk { dir }
    }

    /// Fills the disk but for `spare` bytes' worth of pages, which a file
    /// named `spare` holds until it is removed.
    pub fn fill(&self, spare: usize) {
        if spare > 0 {
            std::fs::write(self.dir.join("spare"), vec![b's'; spare]).expect("spare");
        }
        let mut file = std::fs::File::create(self.dir.join("fill")).expect("fill file");
        let chunk = vec![0u8; 64 * 1024];
        while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
        while std::io::Write::write_all(&mut file, &[0]).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

/// Answers a chat-completions request as an OpenAI-compatible server does:
/// `text` as the assistant's message, with its usage (`input` prompt and
/// `output` completion tokens), reply number `n` in its id.
pub fn write_completion(
    stream: &mut impl std::io::Write,
    n: usize,
    text: &str,
    input: u64,
    output: u64,
) {
    let body = serde_json::json!({
        "id": format!("chatcmpl-{n}"),
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": input, "completion_tokens": output,
                  "total_tokens": input + output},
    })
    .to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// examples/games/coins.py taking `delay` seconds an action: cells that
/// are still playing when a test acts on them.
pub fn slow_coins(delay: f64) -> String {
    let game = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/games/coins.py"),
    )
    .expect("coins.py");
    game.replace(
        "        elif op == \"act\":\n",
        &format!("        elif op == \"act\":\n            import time; time.sleep({delay})\n"),
    )
}

/// A new token with every scope for the demo account of the ledger `db`.
pub fn token_of(cwd: &Path, db: &Path) -> String {
    let made = Command::new(BIN)
        .args(["ledger", "token", "--account", "demo", "--scopes"])
        .arg(ALL_SCOPES)
        .arg("--db")
        .arg(db)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .expect("gameplan ledger token");
    assert!(made.status.success(), "ledger token: {made:?}");
    String::from_utf8_lossy(&made.stdout).trim().to_owned()
}
