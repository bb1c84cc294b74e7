//! `game.env` travels with a trace: its values are in the trace's header
//! (a secret's by name only, never its value), and `gameplan replay` starts
//! the game with them, reading a secret again from its own environment. A
//! real Python game whose observation shows its environment.

use crate::support::Test;

const GAME: &str = r#"import json, os, sys
def out(o):
    sys.stdout.write(json.dumps(o) + "\n"); sys.stdout.flush()
def obs(n):
    text = "%s room, key of %d chars, step %d" % (os.environ.get("COLOR", "no"), len(os.environ.get("SECRET_TOKEN", "")), n)
    return {"text": text, "actions": ["go"], "state": {"n": n}, "score": n}
for line in sys.stdin:
    r = json.loads(line)
    if r["op"] == "hello":
        out({"id": r["id"], "ok": True, "name": "env", "version": "1", "protocol": 1})
    elif r["op"] == "reset":
        out({"id": r["id"], "ok": True, "observation": obs(0)})
    elif r["op"] == "act":
        out({"id": r["id"], "ok": True, "observation": obs(1), "reward": 0, "done": True, "events": []})
    else:
        out({"id": r["id"], "ok": True}); break
"#;

const PLAN: &str = r#"version = 1
name = "env"

[game]
id = "env"
command = ["python3", "game.py"]
env = { COLOR = "red", SECRET_TOKEN = "{{ secret('TOK') }}" }

[[personas]]
slug = "walker"
card = "Walks."
player = { kind = "scripted", actions = ["go"] }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*" }
"#;

#[test]
fn a_trace_records_game_env_with_secrets_by_name_and_replay_plays_with_it() {
    let secret = "s3cr3t-value-4f9a";
    let t = Test::new()
        .file("game.py", GAME)
        .file("plan.toml", PLAN)
        .env("TOK", secret);
    t.run(&["plan", "run", "plan.toml"]).code(0);
    let run = t.run_ids().pop().expect("a run");
    let rel = format!(".gameplan/runs/{run}/steps/play[walker]/trace.jsonl");
    let trace = t.read(&rel);
    let header: serde_json::Value =
        serde_json::from_str(trace.lines().next().expect("a header")).expect("json");
    assert_eq!(
        header["game"]["env"],
        serde_json::json!({"COLOR": "red", "SECRET_TOKEN": null}),
        "{header}"
    );
    assert!(!trace.contains(secret), "the secret is in the trace");
    let transcript = t.read(&format!(
        ".gameplan/runs/{run}/steps/play[walker]/transcript.jsonl"
    ));
    assert!(
        transcript.contains("red room, key of 17 chars"),
        "{transcript}"
    );

    // Replayed with the secret in the environment under its game.env name.
    let trace_path = t.path(&rel);
    let trace_arg = trace_path.to_str().expect("utf-8");
    let t = t.env("SECRET_TOKEN", secret);
    t.run(&["replay", trace_arg])
        .code(0)
        .stdout_has("every observation hash matches");
    // Without it, the game sees another environment: a divergence.
    let t = t.without_env("SECRET_TOKEN");
    t.run(&["replay", trace_arg]).code(1);
}
