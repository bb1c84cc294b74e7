//! The floor of `bench/simulate.sh`: the least any runner of bridge protocol
//! v1 can do for the same games, so the bench can say how much of each
//! runner's time is the game's own.
//!
//! Same rules as `bench/simulate_driver.py` and `gameplan __simulate`:
//! WORKERS threads, each keeping one game process and playing its share of
//! GAMES seeded games (worker w plays games w+1, w+1+WORKERS, ...: reset,
//! then a uniformly random listed action until done or `MAX_STEPS`), a fresh
//! game process after a crash (the dead one killed and reaped) and play on
//! after a refused action. What it leaves out is everything a real runner
//! needs and the game does not: no JSON parser (it takes the quoted names
//! after the first `"actions"` key and looks for `"ok": true` and `"done":
//! true` anywhere in an answer, which is enough for the built-in maze and
//! the example games, not for any game), no observation hash, no
//! findings, no trace, no hang deadline. Per action it makes the two system
//! calls the protocol needs (one write, one read of a buffered pipe) and
//! nothing else: the game side (process starts, the game's own work, its
//! half of every round trip) is all that is left.
//!
//! usage: `cargo bench --bench simulate_floor -- GAMES WORKERS MAX_STEPS -- COMMAND...`

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::cast_precision_loss,
    reason = "a benchmark's figures are its output, printed as floats"
)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

struct Game {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: u64,
    request: Vec<u8>,
}

impl Game {
    fn start(command: &[String]) -> std::io::Result<Game> {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("no pipes"));
        };
        let mut game = Game {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            id: 0,
            request: Vec::with_capacity(128),
        };
        let mut line = Vec::new();
        game.ask(r#""op":"hello","protocol":1"#, &mut line)?;
        Ok(game)
    }

    /// Sends `{fields,"id":N}` and reads the answer's line; an error when
    /// the game died.
    fn ask(&mut self, fields: &str, line: &mut Vec<u8>) -> std::io::Result<()> {
        self.id += 1;
        self.request.clear();
        writeln!(self.request, "{{{fields},\"id\":{}}}", self.id)?;
        self.stdin.write_all(&self.request)?;
        line.clear();
        if self.stdout.read_until(b'\n', line)? == 0 {
            return Err(std::io::Error::other("the game died"));
        }
        Ok(())
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The listed actions of the observation in `line`, as byte ranges: the
/// quoted names after `"actions"`, `:` and `[` (whitespace allowed, as a
/// Python game's `json.dumps` writes it).
fn actions(line: &[u8], into: &mut Vec<(usize, usize)>) {
    into.clear();
    let key = b"\"actions\"";
    let Some(start) = line.windows(key.len()).position(|w| w == key) else {
        return;
    };
    let mut at = start + key.len();
    for expected in [b':', b'['] {
        while line.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        if line.get(at) != Some(&expected) {
            return;
        }
        at += 1;
    }
    while at < line.len() && line[at] != b']' {
        if line[at] == b'"' {
            let end = at + 1 + line[at + 1..].iter().position(|&b| b == b'"').unwrap_or(0);
            into.push((at + 1, end));
            at = end;
        }
        at += 1;
    }
}

/// Whether `line` holds `"key":true` (whitespace allowed after the colon).
fn is_true(line: &[u8], key: &[u8]) -> bool {
    let mut from = 0;
    while let Some(found) = line[from..].windows(key.len()).position(|w| w == key) {
        let mut at = from + found + key.len();
        while line.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        if line.get(at) == Some(&b':') {
            at += 1;
            while line.get(at).is_some_and(u8::is_ascii_whitespace) {
                at += 1;
            }
            if line[at..].starts_with(b"true") {
                return true;
            }
        }
        from += found + 1;
    }
    false
}

/// xorshift64*: a uniform pick costs a multiply.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        usize::try_from((u128::from(x) * n as u128) >> 64).unwrap_or(0)
    }
}

#[derive(Default)]
struct Tally {
    steps: u64,
    completed: u64,
    crashed: u64,
    truncated: u64,
    processes: u64,
}

fn worker(command: &[String], games: impl Iterator<Item = u64>, max_steps: u64) -> Tally {
    let mut t = Tally::default();
    let mut game: Option<Game> = None;
    // `obs` holds the last observation's line (a refused action leaves it
    // standing), `line` the answer just read.
    let (mut obs, mut line, mut listed, mut fields) =
        (Vec::new(), Vec::new(), Vec::new(), String::new());
    for seed in games {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let played = (|| -> std::io::Result<()> {
            if game.is_none() {
                game = Some(Game::start(command)?);
                t.processes += 1;
            }
            let g = game.as_mut().expect("started above");
            g.ask(&format!(r#""op":"reset","seed":{seed}"#), &mut obs)?;
            actions(&obs, &mut listed);
            for n in 0..=max_steps {
                if n == max_steps {
                    t.truncated += 1;
                    break;
                }
                if listed.is_empty() {
                    break;
                }
                let (from, to) = listed[rng.below(listed.len())];
                fields.clear();
                fields.push_str(r#""op":"act","action":""#);
                fields.push_str(std::str::from_utf8(&obs[from..to]).unwrap_or(""));
                fields.push('"');
                g.ask(&fields, &mut line)?;
                t.steps += 1;
                if is_true(&line, br#""ok""#) {
                    std::mem::swap(&mut obs, &mut line);
                    actions(&obs, &mut listed);
                    if is_true(&obs, br#""done""#) {
                        t.completed += 1;
                        break;
                    }
                }
            }
            Ok(())
        })();
        if played.is_err() {
            t.crashed += 1;
            if let Some(g) = game.take() {
                g.kill();
            }
        }
    }
    if let Some(mut g) = game.take() {
        let _ = g.ask(r#""op":"close""#, &mut line);
        g.kill();
    }
    t
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(sep) = args.iter().position(|a| a == "--") else {
        eprintln!("usage: simulate_floor GAMES WORKERS MAX_STEPS -- COMMAND...");
        std::process::exit(2);
    };
    let numbers: Vec<u64> = args[..sep].iter().filter_map(|a| a.parse().ok()).collect();
    let [games, workers, max_steps] = numbers[..] else {
        eprintln!("usage: simulate_floor GAMES WORKERS MAX_STEPS -- COMMAND...");
        std::process::exit(2);
    };
    let command = args[sep + 1..].to_vec();
    let started = Instant::now();
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let command = &command;
                s.spawn(move || {
                    worker(
                        command,
                        (1 + w..=games).step_by(usize::try_from(workers).unwrap_or(1)),
                        max_steps,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let sum = |f: fn(&Tally) -> u64| tallies.iter().map(f).sum::<u64>();
    let steps = sum(|t| t.steps);
    println!(
        "games {games}  completed {}  crashed {}  truncated {}  steps {steps}",
        sum(|t| t.completed),
        sum(|t| t.crashed),
        sum(|t| t.truncated)
    );
    println!(
        "{elapsed:.3} s, {:.1} games/s, {:.0} actions/s, {} game processes",
        games as f64 / elapsed,
        steps as f64 / elapsed,
        sum(|t| t.processes)
    );
    // The runner's own CPU (game processes excluded), as the other two print it.
    if let Ok(usage) = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        let cpu = seconds(usage.user_time()) + seconds(usage.system_time());
        println!(
            "runner cpu {cpu:.3} s ({:.1} us per action, game processes excluded)",
            cpu * 1e6 / steps.max(1) as f64
        );
    }
}
