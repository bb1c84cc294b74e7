//! The shipped clippy command lens (`examples/lenses/clippy_lens.py`)
//! as a real process over a real temp crate: a planted clippy warning is a
//! finding on its file with its line, a clean Rust file is clear, a file
//! clippy does not read is n/a; a crate that does not build, or a request
//! that is not JSON, gets no verdict at all (so the gate is INCOMPLETE).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn lens_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/lenses/clippy_lens.py")
}

const CLEAN: &str = "//! A clean module.\n\npub mod bad;\n\n/// Adds.\npub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n";

/// `clippy::needless_return` on line 5.
const BAD: &str = "//! A module with a lint.\n\n/// Doubles.\npub fn double(x: u32) -> u32 {\n    return x * 2;\n}\n";

/// A temp crate holding `files` (repo-relative path → text).
fn crate_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![(
        "Cargo.toml",
        "[package]\nname = \"planted\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )];
    all.extend_from_slice(files);
    for (path, text) in all {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }
    dir
}

/// A `files` unit as gameplan sends it.
fn unit(dir: &Path, path: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(path)).unwrap();
    json!({"id": path, "path": path, "text": text, "size": text.len(), "sha256": "0".repeat(64)})
}

struct Answer {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Answer {
    /// The verdicts by unit id, in the order answered.
    fn verdicts(&self) -> Vec<(String, Value)> {
        let doc: Value = serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\n{}",
                self.stdout, self.stderr
            )
        });
        doc["verdicts"]
            .as_array()
            .expect("a verdicts list")
            .iter()
            .map(|v| (v["unit"].as_str().unwrap().to_owned(), v.clone()))
            .collect()
    }
}

/// Runs the lens in `dir` (its working directory is the repo root, as
/// gameplan runs it) with `request` on stdin.
fn run_lens(dir: &Path, args: &[&str], request: &[u8]) -> Answer {
    let mut child = Command::new("python3")
        .arg(lens_script())
        .args(args)
        .current_dir(dir)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().unwrap().write_all(request).unwrap();
    let out = child.wait_with_output().unwrap();
    Answer {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn request(dir: &Path, paths: &[&str]) -> Vec<u8> {
    let units: Vec<Value> = paths.iter().map(|p| unit(dir, p)).collect();
    serde_json::to_vec(&json!({"lens": "clippy-clean", "units": units})).unwrap()
}

#[test]
fn clippy_lens_turns_a_planted_lint_into_a_finding_on_its_file() {
    let dir = crate_with(&[
        ("src/lib.rs", CLEAN),
        ("src/bad.rs", BAD),
        ("README.md", "# planted\n"),
    ]);
    let answer = run_lens(
        dir.path(),
        &[],
        &request(dir.path(), &["src/lib.rs", "src/bad.rs", "README.md"]),
    );
    assert_eq!(answer.code, Some(0), "{}", answer.stderr);
    let verdicts = answer.verdicts();
    let ids: Vec<&str> = verdicts.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["src/lib.rs", "src/bad.rs", "README.md"],
        "one verdict per unit, in order"
    );

    let (_, bad) = &verdicts[1];
    assert_eq!(bad["verdict"], "finding", "{bad}");
    let findings = bad["findings"].as_array().unwrap();
    assert_eq!(
        findings.len(),
        1,
        "the lib and test builds' copies are one finding: {bad}"
    );
    let finding = &findings[0];
    assert!(
        finding["title"]
            .as_str()
            .unwrap()
            .starts_with("clippy::needless_return: "),
        "{finding}"
    );
    assert_eq!(finding["line"], 5);
    assert_eq!(
        finding["severity"], "high",
        "-D warnings makes the lint an error"
    );
    assert!(
        finding["detail"].as_str().unwrap().contains("src/bad.rs:5"),
        "{finding}"
    );

    assert_eq!(verdicts[0].1["verdict"], "clear");
    assert_eq!(
        verdicts[2].1["verdict"], "n/a",
        "clippy does not read markdown"
    );

    // Only the units it was sent are answered (unit reuse sends the changed
    // ones); a lint elsewhere is mentioned, not answered for.
    let answer = run_lens(dir.path(), &[], &request(dir.path(), &["src/lib.rs"]));
    let verdicts = answer.verdicts();
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts[0].1["verdict"], "clear");
    assert!(
        answer
            .stderr
            .contains("were not sent as units (e.g. src/bad.rs)"),
        "{}",
        answer.stderr
    );
}

#[test]
fn clippy_lens_arguments_replace_the_cargo_arguments() {
    let dir = crate_with(&[("src/lib.rs", CLEAN), ("src/bad.rs", BAD)]);
    // Without `-D warnings` the lint stays a warning; the JSON format is
    // added since the lens cannot read anything else.
    let answer = run_lens(
        dir.path(),
        &["clippy", "--all-targets"],
        &request(dir.path(), &["src/bad.rs"]),
    );
    assert_eq!(answer.code, Some(0), "{}", answer.stderr);
    let verdicts = answer.verdicts();
    assert_eq!(
        verdicts[0].1["findings"][0]["severity"], "medium",
        "{:?}",
        verdicts[0].1
    );
    // Lints allowed by the arguments are not findings.
    let answer = run_lens(
        dir.path(),
        &["clippy", "--", "-A", "clippy::needless_return"],
        &request(dir.path(), &["src/bad.rs"]),
    );
    assert_eq!(
        answer.verdicts()[0].1["verdict"],
        "clear",
        "{}",
        answer.stdout
    );
}

#[test]
fn clippy_lens_answers_for_no_unit_when_the_crate_does_not_build() {
    let broken = "//! Broken.\n\npub fn f() -> u32 {\n    \"not a number\"\n}\n";
    let dir = crate_with(&[("src/lib.rs", broken)]);
    let answer = run_lens(dir.path(), &[], &request(dir.path(), &["src/lib.rs"]));
    assert_eq!(answer.code, Some(1));
    assert_eq!(
        answer.stdout, "",
        "no verdict at all, so every unit is missing"
    );
    assert!(
        answer
            .stderr
            .contains("the crate does not build, so its lints are unknown")
            && answer.stderr.contains("mismatched types"),
        "{}",
        answer.stderr
    );

    // A manifest cargo cannot read: no JSON at all from cargo.
    std::fs::write(dir.path().join("Cargo.toml"), "[package\n").unwrap();
    let answer = run_lens(dir.path(), &[], &request(dir.path(), &["src/lib.rs"]));
    assert_eq!((answer.code, answer.stdout.as_str()), (Some(1), ""));
    assert!(
        answer.stderr.contains("failed (exit 101) without a lint"),
        "{}",
        answer.stderr
    );

    // A cargo that is not there.
    let mut child = Command::new("python3")
        .arg(lens_script())
        .current_dir(dir.path())
        .env("CARGO", "/nonexistent/cargo")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&request(dir.path(), &["src/lib.rs"]))
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!((out.status.code(), out.stdout.len()), (Some(1), 0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run `/nonexistent/cargo`"));
}

#[test]
fn clippy_lens_refuses_a_request_that_is_not_the_protocol() {
    let dir = crate_with(&[("src/lib.rs", CLEAN)]);
    for bad in [&b"not json"[..], b"{\"lens\": \"x\"}", b"{\"units\": [3]}"] {
        let answer = run_lens(dir.path(), &[], bad);
        assert_eq!(
            (answer.code, answer.stdout.as_str()),
            (Some(1), ""),
            "{bad:?}"
        );
        assert!(
            answer.stderr.starts_with("clippy_lens: "),
            "{}",
            answer.stderr
        );
    }
}
