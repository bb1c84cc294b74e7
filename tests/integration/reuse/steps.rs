//! Reuse: what a re-run runs again and what it takes from the store, as
//! `plan run --json` reports it, as the steps' own side effects show it, and
//! as `plan explain` predicts it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::support::{Test, by_step, expect_steps, step};

/// `lower` and `upper` read one input file each; `both` reads their outputs;
/// `solo` is on its own. Every step logs its id to `ran.log` when it runs.
const PLAN: &str = r#"version = 1
name = "reuse"

[[steps]]
id = "lower"
kind = "command"
run = "mkdir -p out && tr A-Z a-z < a.txt > out/lower && echo lower >> ran.log"
inputs = ["a.txt"]
outputs = ["out/lower"]

[[steps]]
id = "upper"
kind = "command"
run = "mkdir -p out && tr a-z A-Z < b.txt > out/upper && echo upper >> ran.log"
inputs = ["b.txt"]
outputs = ["out/upper"]

[[steps]]
id = "both"
kind = "command"
run = "cat out/lower out/upper > out/both && echo both >> ran.log"
inputs = ["out/lower", "out/upper"]
outputs = ["out/both"]
needs = ["lower", "upper"]

[[steps]]
id = "solo"
kind = "command"
run = "mkdir -p out && cp c.txt out/solo && echo solo >> ran.log"
inputs = ["c.txt"]
outputs = ["out/solo"]
"#;

const ALL: [&str; 4] = ["lower", "upper", "both", "solo"];

/// A repo with PLAN and its inputs, run once.
fn ran_once() -> Test {
    let t = Test::new()
        .file("plan.toml", PLAN)
        .file("a.txt", "Hello A\n")
        .file("b.txt", "Hello B\n")
        .file("c.txt", "solo\n");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    let states = by_step(&out.code(0).json(), "state");
    assert!(states.values().all(|s| s == "succeeded"), "{out}");
    assert_eq!(
        sorted(ran(&t)),
        sorted(ALL.map(str::to_owned).to_vec()),
        "{out}"
    );
    t
}

/// The steps that ran since the last call, in the order they ran.
fn ran(t: &Test) -> Vec<String> {
    let log = t.read("ran.log");
    let _ = std::fs::remove_file(t.path("ran.log"));
    log.lines().map(str::to_owned).collect()
}

/// `plan run --json` and the state of each step.
fn rerun(t: &Test, extra: &[&str]) -> BTreeMap<String, String> {
    let mut args = vec!["plan", "run", "plan.toml", "--json"];
    args.extend_from_slice(extra);
    let out = t.run(&args);
    by_step(&out.code(0).json(), "state")
}

fn states(reused: &[&str]) -> BTreeMap<String, String> {
    ALL.iter()
        .map(|id| {
            let state = if reused.contains(id) {
                "reused"
            } else {
                "succeeded"
            };
            ((*id).to_owned(), state.to_owned())
        })
        .collect()
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

#[test]
fn an_unchanged_rerun_runs_nothing_and_leaves_the_outputs_as_they_were() {
    let t = ran_once();
    let before = t.read("out/both");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    let report = out.code(0).json();
    assert_eq!(by_step(&report, "state"), states(&ALL), "{out}");
    assert_eq!(report["counts"], serde_json::json!({"reused": 4}));
    for id in ALL {
        assert_eq!(step(&report, id)["attempts"], 0, "{out}");
    }
    assert!(ran(&t).is_empty());
    assert_eq!(t.read("out/both"), before);
    assert_eq!(before, "hello a\nHELLO B\n");
}

#[test]
fn editing_one_input_reruns_that_step_and_its_dependants_only() {
    let t = ran_once();
    t.write("a.txt", "Goodbye A\n");
    assert_eq!(rerun(&t, &[]), states(&["upper", "solo"]));
    assert_eq!(ran(&t), ["lower", "both"]);
    assert_eq!(t.read("out/both"), "goodbye a\nHELLO B\n");
}

#[test]
fn an_edit_right_after_a_run_that_keeps_the_size_is_still_seen() {
    // Same size, same second: only the content (or a nanosecond mtime) tells.
    let t = ran_once();
    t.write("b.txt", "Hallo B\n");
    assert_eq!(rerun(&t, &[]), states(&["lower", "solo"]));
    assert_eq!(ran(&t), ["upper", "both"]);
    assert_eq!(t.read("out/both"), "hello a\nHALLO B\n");
    // And back again, at once: the first results are still in the store.
    t.write("b.txt", "Hello B\n");
    assert_eq!(rerun(&t, &[]), states(&ALL));
    assert!(ran(&t).is_empty());
    assert_eq!(t.read("out/upper"), "HELLO B\n");
    assert_eq!(t.read("out/both"), "hello a\nHELLO B\n");
}

#[test]
fn touching_inputs_or_rewriting_the_same_bytes_reruns_nothing() {
    let t = ran_once();
    let touched = std::process::Command::new("touch")
        .arg(t.path("a.txt"))
        .status()
        .expect("run touch");
    assert!(touched.success());
    let old = std::process::Command::new("touch")
        .args(["-d", "2001-02-03 04:05:06"])
        .arg(t.path("c.txt"))
        .status()
        .expect("run touch");
    assert!(old.success());
    t.write("b.txt", "Hello B\n");
    assert_eq!(rerun(&t, &[]), states(&ALL));
    assert!(ran(&t).is_empty());
    // A second time, with the hashes now cached.
    assert_eq!(rerun(&t, &[]), states(&ALL));
    assert!(ran(&t).is_empty());
}

#[test]
fn changing_a_steps_command_reruns_it_and_its_dependants_only() {
    let t = ran_once();
    t.write(
        "plan.toml",
        PLAN.replace("tr a-z A-Z < b.txt", "tr a-z A-Z < b.txt | rev"),
    );
    assert_eq!(rerun(&t, &[]), states(&["lower", "solo"]));
    assert_eq!(ran(&t), ["upper", "both"]);
    assert_eq!(t.read("out/both"), "hello a\nB OLLEH\n");
}

#[test]
fn a_comment_in_the_plan_changes_nothing() {
    let t = ran_once();
    t.write("plan.toml", format!("# built nightly\n{PLAN}\n# end\n"));
    assert_eq!(rerun(&t, &[]), states(&ALL));
    assert!(ran(&t).is_empty());
}

#[test]
fn outputs_deleted_or_edited_in_the_tree_are_restored_from_the_store() {
    let t = ran_once();
    std::fs::remove_dir_all(t.path("out")).expect("delete the outputs");
    assert_eq!(rerun(&t, &[]), states(&ALL));
    assert!(ran(&t).is_empty(), "restoring ran a step");
    assert_eq!(t.read("out/lower"), "hello a\n");
    assert_eq!(t.read("out/upper"), "HELLO B\n");
    assert_eq!(t.read("out/both"), "hello a\nHELLO B\n");
    assert_eq!(t.read("out/solo"), "solo\n");

    t.write("out/solo", "scribbled\n");
    assert_eq!(rerun(&t, &[]), states(&ALL));
    assert_eq!(t.read("out/solo"), "solo\n");
}

#[test]
fn no_reuse_runs_everything_and_the_next_run_reuses_again() {
    let t = ran_once();
    assert_eq!(rerun(&t, &["--no-reuse"]), states(&[]));
    assert_eq!(sorted(ran(&t)), sorted(ALL.map(str::to_owned).to_vec()));
    assert_eq!(rerun(&t, &[]), states(&ALL));
    assert!(ran(&t).is_empty());
}

#[test]
fn explain_predicts_the_next_run_and_names_the_changed_input() {
    let t = Test::new()
        .file("plan.toml", PLAN)
        .file("a.txt", "Hello A\n")
        .file("b.txt", "Hello B\n")
        .file("c.txt", "solo\n");
    let explain = |t: &Test| {
        t.run(&["plan", "explain", "--json", "plan.toml"])
            .code(0)
            .json()
    };
    let fresh = explain(&t);
    assert_eq!(
        by_step(&fresh, "action"),
        expect_steps(&[
            ("lower", "run"),
            ("upper", "run"),
            ("both", "run"),
            ("solo", "run")
        ])
    );
    assert_eq!(step(&fresh, "lower")["why"][0], "it never succeeded before");
    assert!(ran(&t).is_empty(), "explain ran a step");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    ran(&t);

    let unchanged = explain(&t);
    assert_eq!(
        by_step(&unchanged, "action"),
        expect_steps(&[
            ("lower", "reused"),
            ("upper", "reused"),
            ("both", "reused"),
            ("solo", "reused")
        ])
    );

    t.write("b.txt", "Bonjour B\n");
    let changed = explain(&t);
    assert_eq!(
        by_step(&changed, "action"),
        expect_steps(&[
            ("lower", "reused"),
            ("upper", "run"),
            ("both", "run"),
            ("solo", "reused")
        ])
    );
    let why = |id: &str| step(&changed, id)["why"].to_string();
    assert!(
        why("upper").contains("input `b.txt` changed"),
        "{changed:#}"
    );
    assert!(why("both").contains("`upper`"), "{changed:#}");
    assert!(ran(&t).is_empty(), "explain ran a step");
    // The run does what explain said.
    let actual = rerun(&t, &[]);
    let predicted: BTreeMap<String, String> = by_step(&changed, "action")
        .into_iter()
        .map(|(id, action)| {
            let state = if action == "reused" {
                "reused"
            } else {
                "succeeded"
            };
            (id, state.to_owned())
        })
        .collect();
    assert_eq!(actual, predicted);
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_secret_never_enters_a_reuse_key_or_the_store() {
    const SECRET_PLAN: &str = r#"version = 1
name = "secret"

[[steps]]
id = "deploy"
kind = "command"
run = "echo deploying with {{ secret('DEPLOY_TOKEN') }} > /dev/null && echo done > out.txt"
env = { TOKEN = "{{ secret('DEPLOY_TOKEN') }}" }
inputs = ["plan.toml"]
outputs = ["out.txt"]
"#;
    let t = Test::new()
        .file("plan.toml", SECRET_PLAN)
        .env("DEPLOY_TOKEN", "tok-4f9a-very-secret");
    t.run(&["plan", "run", "plan.toml", "--json"]).code(0);
    let state = t.path(".gameplan");
    let files = files_under(&state);
    assert!(
        files.iter().any(|f| f.ends_with("store/index.log")),
        "no store index in {files:?}"
    );
    for file in files {
        let bytes = std::fs::read(&file).expect("read state file");
        assert!(
            !String::from_utf8_lossy(&bytes).contains("tok-4f9a-very-secret"),
            "the secret is in {}",
            file.display()
        );
    }
    // The key does not depend on the secret's value: a rotated token reuses.
    let t = t.env("DEPLOY_TOKEN", "tok-rotated-other-value");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    assert_eq!(
        by_step(&out.code(0).json(), "state")["deploy"],
        "reused",
        "{out}"
    );
}

/// Issue 8, item 1: `proc` needs `fetch` (`reuse = false`) and reads its
/// output without listing it: it re-runs exactly when `fetch` produced other
/// bytes, and is reused when `fetch` ran again but produced the same.
#[test]
fn a_step_below_a_never_reused_step_follows_its_output() {
    let t = Test::new()
        .file(
            "plan.toml",
            r#"version = 1
name = "cutoff"

[[steps]]
id = "fetch"
kind = "command"
run = "cp remote.txt data.txt"
reuse = false
outputs = ["data.txt"]

[[steps]]
id = "proc"
kind = "command"
run = "cp data.txt processed.txt && echo proc >> ran.log"
needs = ["fetch"]
outputs = ["processed.txt"]
"#,
        )
        .file("remote.txt", "v1\n");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    assert_eq!(t.read("processed.txt"), "v1\n");

    t.write("remote.txt", "v2\n");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    out.code(0);
    assert_eq!(by_step(&out.json(), "state")["proc"], "succeeded", "{out}");
    assert_eq!(t.read("processed.txt"), "v2\n", "stale output reused");

    // `fetch` runs again and brings the same bytes: nothing below it runs.
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    let states = by_step(&out.json(), "state");
    assert_eq!(states["fetch"], "succeeded");
    assert_eq!(states["proc"], "reused", "{out}");
    assert_eq!(t.read("ran.log"), "proc\nproc\n");
}

/// Issue 8, item 2: a step that declares no inputs and needs nothing is
/// never reused (its file broke, it must say so), and explain says why.
#[test]
fn a_step_with_no_inputs_and_no_needs_always_runs() {
    let t = Test::new()
        .file(
            "plan.toml",
            r#"version = 1
name = "noinputs"

[[steps]]
id = "test"
kind = "command"
run = "grep -q fine status.txt"
"#,
        )
        .file("status.txt", "fine\n");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    t.write("status.txt", "broken\n");
    t.run(&["plan", "run", "plan.toml"]).code(1);
    t.run(&["plan", "explain", "plan.toml"])
        .code(0)
        .stdout_has("declares no `inputs`");
}

/// Issue 8, item 3: an input written `"$CC"` keys the step on that
/// variable's value; a pattern matching no file is a warning in explain.
#[test]
fn an_environment_input_keys_the_step_on_its_value() {
    let t = Test::new().file(
        "plan.toml",
        r#"version = 1
name = "envkey"

[[steps]]
id = "build"
kind = "command"
run = "echo $CC > out.txt"
inputs = ["$CC", "Makefile"]
outputs = ["out.txt"]
"#,
    );
    let t = t.env("CC", "gcc");
    t.run(&["plan", "run", "plan.toml"]).code(0);
    assert_eq!(t.read("out.txt"), "gcc\n");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    assert_eq!(by_step(&out.json(), "state")["build"], "reused");

    let t = t.env("CC", "clang");
    let out = t.run(&["plan", "run", "plan.toml", "--json"]);
    assert_eq!(by_step(&out.json(), "state")["build"], "succeeded", "{out}");
    assert_eq!(t.read("out.txt"), "clang\n");
    t.run(&["plan", "explain", "plan.toml"])
        .code(0)
        .stdout_has("reused")
        .stdout_has("warning: input `Makefile` matches no file");
}

/// Issue 19: two runs in two checkouts storing the same results into one
/// shared store at the same time (two processes appending to one index,
/// writing the same blobs) both succeed, and a third checkout reuses every
/// step from that store, byte for byte, with no damaged record.
#[test]
fn two_runs_sharing_one_store_at_once_leave_it_whole() {
    let plan = |name: &str| {
        let mut text = format!("version = 1\nname = \"{name}\"\n");
        for i in 0..30 {
            // Over the inline limit every third step: a blob by content.
            let size = if i % 3 == 0 { 6000 } else { 40 };
            let _ = write!(
                text,
                "\n[[steps]]\nid = \"s{i}\"\nkind = \"command\"\nrun = \"mkdir -p out && head -c {size} /dev/zero | tr '\\\\0' x > out/{i}.bin\"\ninputs = [\"seed.txt\"]\noutputs = [\"out/{i}.bin\"]\n"
            );
        }
        text
    };
    let shared = tempfile::tempdir().expect("shared state");
    let state = shared.path().to_str().expect("utf-8").to_owned();
    // Different plan names: two plans, two locks, one store.
    let one = Test::new()
        .file("plan.toml", plan("one"))
        .file("seed.txt", "s");
    let two = Test::new()
        .file("plan.toml", plan("two"))
        .file("seed.txt", "s");
    let args = ["plan", "run", "plan.toml", "--state-dir", &state, "--json"];
    let (a, b) = (one.spawn(&args), two.spawn(&args));
    let (a, b) = (a.wait(), b.wait());
    a.code(0);
    b.code(0);
    for out in [&a, &b] {
        assert!(!out.stderr.contains("damaged record"), "{out}");
    }

    let third = Test::new()
        .file("plan.toml", plan("one"))
        .file("seed.txt", "s");
    let out = third.run(&args);
    let states = by_step(&out.code(0).json(), "state");
    assert!(states.values().all(|s| s == "reused"), "{states:?}");
    assert!(!out.stderr.contains("damaged record"), "{out}");
    assert_eq!(third.read("out/0.bin"), "x".repeat(6000));
    assert_eq!(third.read("out/1.bin"), "x".repeat(40));
}

/// Issue 19: with no step running, a set of inputs is expanded and hashed
/// once per run, not once per step. A restore that rewrites one of those
/// files must still be seen by the steps keyed after it: `late` reads what
/// `gen`'s restore wrote, not what `early` hashed before it, or `late`
/// would be "reused" with the result of the old file.
#[test]
fn a_restore_that_rewrites_an_input_is_seen_by_the_steps_keyed_after_it() {
    const PLAN: &str = r#"version = 1
name = "still"

[[steps]]
id = "early"
kind = "command"
run = "cp gen.txt early.txt"
inputs = ["gen.txt"]
outputs = ["early.txt"]

[[steps]]
id = "gen"
kind = "command"
run = "cp src.txt gen.txt"
inputs = ["src.txt"]
outputs = ["gen.txt"]

[[steps]]
id = "late"
kind = "command"
run = "cp gen.txt late.txt"
inputs = ["gen.txt"]
outputs = ["late.txt"]
needs = ["gen"]
"#;
    let t = Test::new()
        .file("plan.toml", PLAN)
        .file("src.txt", "two\n")
        .file("gen.txt", "two\n");
    let run = |t: &Test| {
        let out = t.run(&["plan", "run", "plan.toml", "--json", "--concurrency", "1"]);
        by_step(&out.code(0).json(), "state")
    };
    let all = |state: &str| -> BTreeMap<String, String> {
        ["early", "gen", "late"]
            .map(|s| (s.to_owned(), state.to_owned()))
            .into()
    };
    assert_eq!(run(&t), all("succeeded"));
    // The same steps over "one": every result stored twice over.
    t.write("src.txt", "one\n");
    t.write("gen.txt", "one\n");
    assert_eq!(run(&t), all("succeeded"));
    assert_eq!(t.read("late.txt"), "one\n");
    // Back to "two" for `gen` only: `early` is reused over "one", then
    // `gen`'s restore puts "two" back in gen.txt, which `late` must see.
    t.write("src.txt", "two\n");
    assert_eq!(run(&t), all("reused"));
    assert_eq!(t.read("gen.txt"), "two\n");
    assert_eq!(t.read("early.txt"), "one\n");
    assert_eq!(
        t.read("late.txt"),
        "two\n",
        "late was keyed on the old gen.txt"
    );
}
