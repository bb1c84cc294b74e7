//! The `command` lens: one call runs the lens's program with
//! `{"lens": NAME, "units": [UNIT…]}` (plus `"reviewer"` for a reviewer's
//! instance) on stdin and reads `{"verdicts": [{"unit", "verdict",
//! "findings"}]}` from its stdout (docs/review.md › Lens kinds: `rule` and
//! `command`).
//!
//! What a call cannot vouch for is missing, never clear: a unit it did not
//! answer for, every unit of a call that timed out, wrote more than the
//! stdout cap, or answered something that is not the protocol (torn JSON,
//! a wrong shape). An entry that is wrong on its own (an unknown verdict, a
//! `clear` with findings, the same unit twice) leaves that unit missing.
//! The exit code alone decides nothing: linters exit 1 when they find
//! something, so a complete answer from a program that exited 1 counts.
//!
//! Limits: [`MAX_UNITS_PER_CALL`] units per call (a bigger lens makes more
//! calls), [`MAX_STDOUT_BYTES`] of answer, the lens's `timeout` per call
//! (default [`DEFAULT_TIMEOUT_SECS`]); the last [`STDERR_TAIL_BYTES`] of its
//! stderr are kept for the dump. The program runs in the repo root, in a
//! process group of its own, which is killed whole on a timeout or a stop.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::judge::{Answer, RawFinding};
use super::verdict::Verdict;
use crate::plan::model::Program;
use crate::process::{SpawnInGroup as _, Tail};

/// Units sent in one call.
pub const MAX_UNITS_PER_CALL: usize = 256;
/// The most a call may write on stdout.
pub const MAX_STDOUT_BYTES: usize = 16 * 1024 * 1024;
/// Seconds a call may take when the lens sets no `timeout`.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
/// How much of a call's stderr is kept.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// What one call came to.
#[derive(Debug, Default)]
pub struct Called {
    /// An answer for each unit sent, by id.
    pub answers: BTreeMap<String, Answer>,
    /// The end of its stderr.
    pub stderr_tail: String,
}

/// One lens program and how long a call of it may take.
pub struct Call<'a> {
    pub root: &'a Path,
    /// The environment it runs with (nothing else is inherited).
    pub env: &'a BTreeMap<String, String>,
    pub program: &'a Program,
    /// The name sent as `lens`: the lens as the plan names it (a
    /// reviewer's pass says which reviewer in `reviewer`).
    pub lens: &'a str,
    pub reviewer: Option<&'a Value>,
    pub timeout: Duration,
}

/// How a call's stdout ended.
enum End {
    /// It closed: the bytes, and whether they passed the cap.
    Read((Vec<u8>, bool)),
    TimedOut,
    Stopped,
}

impl Call<'_> {
    fn command(&self) -> tokio::process::Command {
        let mut command = match self.program {
            Program::Shell(line) => {
                let mut c = tokio::process::Command::new("sh");
                c.arg("-c").arg(line);
                c
            }
            Program::Argv(argv) => {
                let mut c = tokio::process::Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        command
            .current_dir(self.root)
            .env_clear()
            .envs(self.env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs the program once for `units` (`(id, fields)`): an answer for
    /// every unit sent.
    pub async fn run(
        &self,
        units: &[(String, Map<String, Value>)],
        mut cancel: watch::Receiver<bool>,
    ) -> Called {
        let all_missing = |why: &str| -> BTreeMap<String, Answer> {
            units
                .iter()
                .map(|(id, _)| (id.clone(), Answer::Missing(why.to_owned())))
                .collect()
        };
        let (mut child, group) = match self.command().spawn_in_group() {
            Ok(spawned) => spawned,
            Err(e) => {
                return Called {
                    answers: all_missing(&format!("the lens program could not start: {e}")),
                    stderr_tail: String::new(),
                };
            }
        };
        let mut doc = json!({
            "lens": self.lens,
            "units": units.iter().map(|(_, f)| Value::Object(f.clone())).collect::<Vec<_>>(),
        });
        if let Some(reviewer) = self.reviewer {
            doc["reviewer"] = reviewer.clone();
        }
        let writer = write_stdin(
            child.stdin.take(),
            serde_json::to_vec(&doc).unwrap_or_default(),
        );
        let mut reader = tokio::spawn(read_capped(child.stdout.take()));
        let stderr = Tail::new(STDERR_TAIL_BYTES);
        let err_reader = child.stderr.take().map(|pipe| stderr.keep(pipe));
        let end = tokio::select! {
            read = &mut reader => End::Read(read.unwrap_or_default()),
            () = tokio::time::sleep(self.timeout) => End::TimedOut,
            _ = cancel.wait_for(|c| *c) => End::Stopped,
        };
        let answers = match end {
            End::Read((_, true)) => all_missing(&format!(
                "the lens wrote more than {MAX_STDOUT_BYTES} bytes on stdout (the cap); it was stopped"
            )),
            End::TimedOut => all_missing(&format!(
                "the lens did not answer within {}s (its `timeout`); it was stopped",
                self.timeout.as_secs()
            )),
            End::Stopped => all_missing("the run was stopped before the lens answered"),
            End::Read((out, false)) => {
                // Its stdout closed: what it wrote is its whole answer.
                let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
                    .await
                    .ok()
                    .and_then(Result::ok);
                parse(&out, units, status)
            }
        };
        reader.abort();
        // Whatever it left behind (a child holding the pipe) goes with it.
        group.kill();
        let _ = child.wait().await;
        writer.abort();
        // The tail is told only once its pipe closed: one a process that
        // left the group still holds open within 2 s gives none.
        let read = match err_reader {
            Some(reader) => tokio::time::timeout(Duration::from_secs(2), reader)
                .await
                .is_ok_and(|ended| ended.is_ok()),
            None => true,
        };
        Called {
            answers,
            stderr_tail: if read { stderr.text() } else { String::new() },
        }
    }
}

/// Writes the units beside the reads: a lens that answers before it has
/// read everything must not deadlock on a full pipe.
fn write_stdin(
    stdin: Option<tokio::process::ChildStdin>,
    input: Vec<u8>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        }
    })
}

/// Stdout until it closes, or until it passes the cap (`true`).
async fn read_capped(stdout: Option<tokio::process::ChildStdout>) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let Some(mut stdout) = stdout else {
        return (out, false);
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => return (out, false),
            Ok(n) if out.len() + n > MAX_STDOUT_BYTES => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// The answers in a call's stdout, one per unit sent.
fn parse(
    out: &[u8],
    units: &[(String, Map<String, Value>)],
    status: Option<std::process::ExitStatus>,
) -> BTreeMap<String, Answer> {
    let ended = match status {
        Some(s) if s.success() => String::new(),
        Some(s) => match s.code() {
            Some(code) => format!(" (it exited with code {code})"),
            None => " (it was killed by a signal)".to_owned(),
        },
        None => " (it did not exit)".to_owned(),
    };
    let invalid = |why: String| -> BTreeMap<String, Answer> {
        units
            .iter()
            .map(|(id, _)| {
                (
                    id.clone(),
                    Answer::Missing(format!(
                        "the lens's answer is not the protocol: {why}{ended}"
                    )),
                )
            })
            .collect()
    };
    let doc: Value = match serde_json::from_slice(out) {
        Ok(doc) => doc,
        Err(_) if out.iter().all(u8::is_ascii_whitespace) => {
            return invalid("it wrote nothing on stdout".into());
        }
        Err(e) => return invalid(format!("its stdout is not one JSON document ({e})")),
    };
    let Some(verdicts) = doc.get("verdicts").and_then(Value::as_array) else {
        return invalid("no `verdicts` list".into());
    };
    let mut answers: BTreeMap<String, Answer> = BTreeMap::new();
    let mut twice: Vec<String> = Vec::new();
    for entry in verdicts {
        let Some(id) = entry.get("unit").and_then(Value::as_str) else {
            continue;
        };
        if !units.iter().any(|(u, _)| u == id) {
            continue;
        }
        if answers.contains_key(id) {
            twice.push(id.to_owned());
            continue;
        }
        answers.insert(id.to_owned(), entry_answer(entry));
    }
    for id in twice {
        answers.insert(
            id,
            Answer::Missing("the lens answered for this unit twice".into()),
        );
    }
    for (id, _) in units {
        answers.entry(id.clone()).or_insert_with(|| {
            Answer::Missing(format!("the lens gave no verdict for this unit{ended}"))
        });
    }
    answers
}

/// One verdict entry's answer.
fn entry_answer(entry: &Value) -> Answer {
    let verdict = match entry.get("verdict").and_then(Value::as_str) {
        Some("clear") => Verdict::Clear,
        Some("finding") => Verdict::Finding,
        Some("n/a") => Verdict::NotApplicable,
        other => {
            return Answer::Missing(format!(
                "the lens's verdict {} is not one of clear, finding, n/a",
                other.map_or_else(|| "(none)".to_owned(), |v| format!("`{v}`"))
            ));
        }
    };
    let listed = match entry.get("findings") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Answer::Missing("the lens's `findings` is not a list".into()),
    };
    let mut findings = Vec::new();
    for item in &listed {
        let Some(title) = item.get("title").and_then(Value::as_str) else {
            return Answer::Missing("a finding of the lens has no `title`".into());
        };
        findings.push(RawFinding {
            title: title.to_owned(),
            severity: item
                .get("severity")
                .and_then(Value::as_str)
                .unwrap_or("medium")
                .to_owned(),
            detail: item
                .get("detail")
                .and_then(Value::as_str)
                .map(str::to_owned),
            line: item.get("line").and_then(Value::as_u64),
        });
    }
    match verdict {
        Verdict::Finding if findings.is_empty() => findings.push(RawFinding {
            title: "the lens reported a finding".into(),
            severity: "medium".into(),
            detail: None,
            line: None,
        }),
        Verdict::Clear | Verdict::NotApplicable if !findings.is_empty() => {
            return Answer::Missing(format!(
                "the lens said `{}` and listed findings",
                verdict.word()
            ));
        }
        _ => {}
    }
    Answer::Judged { verdict, findings }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(ids: &[&str]) -> Vec<(String, Map<String, Value>)> {
        ids.iter()
            .map(|id| ((*id).to_owned(), Map::new()))
            .collect()
    }

    fn missing(a: &Answer) -> &str {
        match a {
            Answer::Missing(why) => why,
            Answer::Judged { .. } => panic!("judged: {a:?}"),
        }
    }

    #[test]
    fn a_unit_the_answer_skips_or_garbles_is_missing() {
        let out = br#"{"verdicts":[
            {"unit":"a","verdict":"clear"},
            {"unit":"b","verdict":"maybe"},
            {"unit":"c","verdict":"clear","findings":[{"title":"x"}]},
            {"unit":"d","verdict":"finding","findings":[{"title":"bad","severity":"high","line":3}]},
            {"unit":"e","verdict":"n/a"},{"unit":"e","verdict":"clear"},
            {"unit":"zz","verdict":"clear"}
        ]}"#;
        let answers = parse(out, &units(&["a", "b", "c", "d", "e", "f"]), None);
        assert_eq!(answers.len(), 6, "one per unit sent, none for `zz`");
        assert!(matches!(
            answers["a"],
            Answer::Judged {
                verdict: Verdict::Clear,
                ..
            }
        ));
        assert!(missing(&answers["b"]).contains("`maybe`"));
        assert!(missing(&answers["c"]).contains("listed findings"));
        let Answer::Judged { verdict, findings } = &answers["d"] else {
            panic!("d");
        };
        assert_eq!(*verdict, Verdict::Finding);
        assert_eq!(findings[0].line, Some(3));
        assert!(missing(&answers["e"]).contains("twice"));
        assert!(missing(&answers["f"]).contains("no verdict"));
    }

    #[tokio::test]
    async fn only_the_tail_of_a_lens_stderr_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]);
        let program = Program::Shell(
            "cat >/dev/null; i=0; while [ $i -lt 400 ]; do echo \"noise line $i of the lens\" >&2; i=$((i+1)); done; \
             echo LAST >&2; echo '{\"verdicts\":[{\"unit\":\"a\",\"verdict\":\"clear\"}]}'"
                .into(),
        );
        let call = Call {
            root: dir.path(),
            env: &env,
            program: &program,
            lens: "l",
            reviewer: None,
            timeout: Duration::from_secs(30),
        };
        let (_tx, rx) = watch::channel(false);
        let called = call.run(&units(&["a"]), rx).await;
        assert!(called.stderr_tail.len() <= STDERR_TAIL_BYTES);
        assert!(called.stderr_tail.len() > STDERR_TAIL_BYTES / 2);
        assert!(
            called.stderr_tail.ends_with("LAST\n"),
            "{}",
            called.stderr_tail
        );
        assert!(
            !called.stderr_tail.contains("line 0 of"),
            "the head is dropped"
        );
        assert!(matches!(
            called.answers["a"],
            Answer::Judged {
                verdict: Verdict::Clear,
                ..
            }
        ));
    }

    #[test]
    fn a_torn_answer_leaves_every_unit_missing() {
        let answers = parse(
            br#"{"verdicts":[{"unit":"a","verdict":"clear"}"#,
            &units(&["a", "b"]),
            None,
        );
        assert!(missing(&answers["a"]).contains("not one JSON document"));
        assert!(missing(&answers["b"]).contains("(it did not exit)"));
        let answers = parse(b"", &units(&["a"]), None);
        assert!(missing(&answers["a"]).contains("wrote nothing"));
        let answers = parse(b"[1]", &units(&["a"]), None);
        assert!(missing(&answers["a"]).contains("no `verdicts` list"));
    }
}
