//! The built-in maze over real pipes: `gameplan game maze` speaks bridge
//! protocol v1 (docs/bridge.md) to a driver in another process.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::BIN;

/// A game process and a line-by-line conversation with it.
struct Game {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Game {
    fn start(name: &str) -> Game {
        let mut child = Command::new(BIN)
            .args(["game", name])
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gameplan game");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Game {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, request: &Value) {
        writeln!(self.stdin, "{request}").expect("write request");
        self.stdin.flush().expect("flush request");
    }

    /// The next reply line, or `None` when the game closed its stdout.
    fn reply(&mut self) -> Option<Value> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read reply");
        (n > 0).then(|| {
            assert!(line.ends_with('\n'), "a reply is a whole line: {line:?}");
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
    }

    fn ask(&mut self, request: &Value) -> Value {
        self.send(request);
        let reply = self.reply().expect("a reply");
        assert_eq!(reply["id"], request["id"], "the reply echoes the id");
        reply
    }

    /// Waits for the process to exit; its code and stderr.
    fn finish(mut self) -> (Option<i32>, String) {
        drop(self.stdin);
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("poll game") {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the game did not exit"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().expect("stderr"), &mut stderr)
            .expect("read stderr");
        (status.code(), stderr)
    }
}

#[test]
fn maze_plays_a_full_session_over_pipes() {
    let mut game = Game::start("maze");
    assert_eq!(
        game.ask(&json!({"id":1,"op":"hello","protocol":1})),
        json!({"id":1,"ok":true,"name":"maze","version":"1.0.0","protocol":1})
    );
    let reset = game.ask(&json!({"id":2,"op":"reset","seed":7}));
    assert_eq!(reset["ok"], true);
    let hall = reset["observation"].clone();
    assert_eq!(hall["state"]["room"], "hall");
    assert_eq!(hall["score"], 0);
    let actions: Vec<&str> = hall["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| a.as_str().expect("an action is a string"))
        .collect();
    assert!(actions.contains(&"read sign") && actions.contains(&"down"));

    // The error event, the refusal, a move and its way back.
    let read = game.ask(&json!({"id":3,"op":"act","action":"read sign"}));
    assert_eq!(read["ok"], true);
    assert_eq!(read["observation"], hall);
    assert_eq!(read["events"][0]["kind"], "error");
    assert_eq!(
        game.ask(&json!({"id":4,"op":"act","action":"down"})),
        json!({"id":4,"ok":false,"error":"the trapdoor is jammed"})
    );
    let moved = game.ask(&json!({"id":5,"op":"act","action":"east"}));
    assert_eq!(moved["ok"], true);
    assert_eq!(moved["done"], false);
    assert_ne!(moved["observation"], hall);
    let back = game.ask(&json!({"id":6,"op":"act","action":"west"}));
    assert_eq!(
        back["observation"], hall,
        "the same room, the same observation"
    );

    // Bad requests are answered and the game goes on.
    let unknown = game.ask(&json!({"id":7,"op":"dance"}));
    assert_eq!(unknown["ok"], false);
    game.stdin.write_all(b"{not json\n").expect("write");
    let garbled = game.reply().expect("a reply to garbage");
    assert_eq!(garbled["ok"], false);
    assert_eq!(garbled["id"], Value::Null);

    // The same seed again gives the same game.
    assert_eq!(
        game.ask(&json!({"id":8,"op":"reset","seed":7}))["observation"],
        hall
    );
    assert_eq!(
        game.ask(&json!({"id":9,"op":"close"})),
        json!({"id":9,"ok":true})
    );
    assert!(game.reply().is_none(), "nothing after close");
    let (code, stderr) = game.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn maze_planted_crash_kills_the_process_without_a_reply() {
    let mut game = Game::start("maze");
    game.ask(&json!({"id":1,"op":"reset","seed":7}));
    let crash = gameplan::games::maze::SEED_7_SHORTEST_CRASH;
    for (i, action) in crash[..crash.len() - 1].iter().enumerate() {
        let reply = game.ask(&json!({"id": i + 2, "op":"act","action": action}));
        assert_eq!(reply["ok"], true, "{reply}");
    }
    game.send(&json!({"id":99,"op":"act","action": crash[crash.len() - 1]}));
    assert!(game.reply().is_none(), "no reply to the crashing action");
    let (code, stderr) = game.finish();
    assert_eq!(code, Some(101));
    assert!(stderr.contains("panicked"), "{stderr}");
}

#[test]
fn maze_unknown_game_is_an_environment_error() {
    let game = Game::start("chess");
    let (code, stderr) = game.finish();
    assert_eq!(code, Some(3));
    assert!(stderr.contains("built-in games are: maze"), "{stderr}");
}

/// Issue 19: the wrapper gameplan spawns to set a game's rlimits serves a
/// built-in game in its own process (no second start of gameplan), with
/// each limit where it was asked: a limit read into the wrong slot would
/// show here.
#[test]
fn game_exec_serves_a_builtin_in_process_under_its_limits() {
    let exe = std::fs::canonicalize(BIN).expect("canonical gameplan path");
    let mut child = Command::new(BIN)
        .args(["__game-exec", "--cpu", "77", "--nofile", "64", "--as"])
        .arg((3u64 << 30).to_string())
        .arg("--")
        .arg(&exe)
        .args(["game", "maze"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gameplan __game-exec");
    let mut game = Game {
        stdin: child.stdin.take().expect("stdin"),
        stdout: BufReader::new(child.stdout.take().expect("stdout")),
        child,
    };
    let hello = game.ask(&json!({"id":1,"op":"hello","protocol":1}));
    assert_eq!(hello["name"], "maze", "{hello}");
    let pid = game.child.id();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let limit = |name: &str| {
        limits
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    // The hard CPU limit a second later: SIGXCPU names the limit, SIGKILL would not.
    assert_eq!(limit("Max cpu time")[3..5], ["77", "78"], "{limits}");
    assert_eq!(limit("Max open files")[3..5], ["64", "64"], "{limits}");
    assert_eq!(
        limit("Max address space")[3..5],
        ["3221225472", "3221225472"],
        "{limits}"
    );
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .expect("children of the game");
    assert_eq!(
        children.trim(),
        "",
        "the game is served in the wrapper's process"
    );
    let reset = game.ask(&json!({"id":2,"op":"reset","seed":3}));
    assert_eq!(reset["ok"], true, "{reset}");
    game.ask(&json!({"id":3,"op":"close"}));
    let (code, stderr) = game.finish();
    assert_eq!(code, Some(0), "{stderr}");
}
