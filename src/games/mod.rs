//! Built-in bridge games, run as `gameplan game NAME` (the protocol of docs/bridge.md).
//!
//! Owns the game side of bridge protocol v1 (one JSON object per line each
//! way on stdin/stdout, every reply echoing its request's `id`) and the
//! registry of built-in games by name. It does not own the driver side
//! (spawning, deadlines, findings): that is `crate::play`'s, which starts a
//! built-in game (`builtin:NAME`) as `gameplan game NAME` so that it crosses
//! the same process boundary as a game written by anyone else.
//!
//! # Design
//!
//! - [`serve`] is the whole protocol loop, generic over a [`Game`], its input
//!   and its output, so it is tested in-process; the CLI hands it locked
//!   stdin and stdout.
//! - A request line is read with a 1 MiB cap (a longer line is answered
//!   with an error and skipped, never buffered whole). Each reply is built in
//!   one reused buffer and written and flushed once: a simulation plays
//!   hundreds of thousands of actions, so no per-action allocation beyond
//!   what `serde_json` needs to parse the request.
//! - A bad request (not JSON, unknown `op`, missing field, an action that is
//!   not offered) is answered `{"id":n,"ok":false,"error":"…"}` (`id` null
//!   when it could not be read) and the game goes on.
//! - A game may crash on purpose ([`Act::Crash`]): [`serve`] then returns
//!   without replying, and the CLI exits 101 with a panic-like message on
//!   stderr, as a crashing game would.

pub mod maze;

use std::borrow::Cow;
use std::io::{self, BufRead, Read, Write};

use serde::{Deserialize, Serialize};

/// The bridge protocol version these games speak.
pub const PROTOCOL: u64 = 1;

/// The longest request line a game reads (without its newline).
pub const MAX_LINE: usize = 1 << 20;

/// A built-in game, by name.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    pub name: &'static str,
    pub version: &'static str,
    /// One line for `gameplan game --help` and error messages.
    pub about: &'static str,
}

/// Every built-in game.
pub const BUILTINS: &[Builtin] = &[Builtin {
    name: "maze",
    version: maze::VERSION,
    about: "a small seeded maze with rooms, a key, a vault and four planted bugs",
}];

/// The built-in game called `name`.
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// Plays the built-in game `name` over `input`/`output` until `close`, the
/// end of input, or a planted crash.
///
/// `None` when there is no such game.
pub fn play(name: &str, input: impl BufRead, output: impl Write) -> Option<io::Result<Ending>> {
    let builtin = find(name)?;
    Some(match builtin.name {
        "maze" => serve(&mut maze::Maze::new(), builtin, input, output),
        _ => return None,
    })
}

/// One event of an `act` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Event {
    /// `crash`, `error`, `warning`, `goal` or `log`.
    pub kind: &'static str,
    pub message: &'static str,
}

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// Played: the new observation is the game's, its events are [`Game::events`].
    Played { reward: i64, done: bool },
    /// Not played: answered `ok:false` with this error; nothing changed.
    Refused(Cow<'static, str>),
    /// The game dies on the spot with this message on stderr, no reply.
    Crash(&'static str),
}

/// A game the protocol loop can serve.
pub trait Game {
    /// Starts a new game; the same seed always gives the same game.
    fn reset(&mut self, seed: u64);
    /// Whether a game was started and is not over.
    fn playing(&self) -> bool;
    /// Plays one action (only called while [`Game::playing`]).
    fn act(&mut self, action: &str) -> Act;
    /// The current observation (`{"text","actions","state","score"}`).
    fn observation(&self) -> impl Serialize + '_;
    /// The events of the last action played.
    fn events(&self) -> &[Event];
}

/// Why [`serve`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// A `close` request was answered.
    Closed,
    /// The input ended.
    EndOfInput,
    /// A planted crash: the caller dies with this message, without a reply.
    Crash(&'static str),
}

/// A request. Fields the op does not use are ignored, so a newer driver's
/// extra fields do not break an old game.
#[derive(Debug, Deserialize)]
struct Request<'a> {
    id: u64,
    #[serde(borrow)]
    op: Cow<'a, str>,
    protocol: Option<u64>,
    seed: Option<u64>,
    #[serde(borrow)]
    action: Option<Cow<'a, str>>,
}

/// Just the id of a request that did not parse, to echo it.
#[derive(Debug, Deserialize)]
struct IdOnly {
    id: Option<u64>,
}

#[derive(Serialize)]
struct Refusal<'a> {
    id: Option<u64>,
    ok: bool,
    error: &'a str,
}

#[derive(Serialize)]
struct Hello {
    id: u64,
    ok: bool,
    name: &'static str,
    version: &'static str,
    protocol: u64,
}

#[derive(Serialize)]
struct Observed<O> {
    id: u64,
    ok: bool,
    observation: O,
}

#[derive(Serialize)]
struct Acted<'a, O> {
    id: u64,
    ok: bool,
    observation: O,
    reward: i64,
    done: bool,
    events: &'a [Event],
}

#[derive(Serialize)]
struct Closed {
    id: u64,
    ok: bool,
}

/// Serves `game` over bridge protocol v1 until `close`, the end of `input`,
/// or a planted crash. An I/O error (the driver went away) ends it too.
pub fn serve<G: Game>(
    game: &mut G,
    builtin: &Builtin,
    mut input: impl BufRead,
    mut output: impl Write,
) -> io::Result<Ending> {
    let mut line = Vec::with_capacity(256);
    let mut reply = Vec::with_capacity(1024);
    loop {
        line.clear();
        let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
        let read = input.by_ref().take(limit).read_until(b'\n', &mut line)?;
        if read == 0 {
            return Ok(Ending::EndOfInput);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if line.len() > MAX_LINE {
            skip_line(&mut input)?;
            reply.clear();
            write_json(
                &mut reply,
                &Refusal {
                    id: None,
                    ok: false,
                    error: "request line longer than 1 MiB",
                },
            );
            send(&mut output, &reply)?;
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        reply.clear();
        let ending = answer(game, builtin, &line, &mut reply);
        if let Some(Ending::Crash(message)) = ending {
            return Ok(Ending::Crash(message));
        }
        send(&mut output, &reply)?;
        if let Some(ending) = ending {
            return Ok(ending);
        }
    }
}

/// Discards input up to and including the next newline.
fn skip_line(input: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buffer = input.fill_buf()?;
        if buffer.is_empty() {
            return Ok(());
        }
        if let Some(at) = buffer.iter().position(|&b| b == b'\n') {
            input.consume(at + 1);
            return Ok(());
        }
        let len = buffer.len();
        input.consume(len);
    }
}

fn send(output: &mut impl Write, reply: &[u8]) -> io::Result<()> {
    output.write_all(reply)?;
    output.flush()
}

/// Serializes `value` and a newline into `out`.
fn write_json(out: &mut Vec<u8>, value: &impl Serialize) {
    // Writing plain structs of strings and numbers into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
    out.push(b'\n');
}

/// Writes the reply to one request line into `reply`; says whether the
/// session ends with it.
fn answer<G: Game>(
    game: &mut G,
    builtin: &Builtin,
    line: &[u8],
    reply: &mut Vec<u8>,
) -> Option<Ending> {
    let request: Request = match serde_json::from_slice(line) {
        Ok(request) => request,
        Err(e) => {
            let id = serde_json::from_slice::<IdOnly>(line)
                .ok()
                .and_then(|r| r.id);
            let error = format!("bad request: {e}");
            write_json(
                reply,
                &Refusal {
                    id,
                    ok: false,
                    error: &error,
                },
            );
            return None;
        }
    };
    let id = request.id;
    let refuse = |reply: &mut Vec<u8>, error: &str| {
        write_json(
            reply,
            &Refusal {
                id: Some(id),
                ok: false,
                error,
            },
        );
    };
    match request.op.as_ref() {
        "hello" => match request.protocol {
            Some(p) if p != PROTOCOL => refuse(
                reply,
                &format!("protocol {p} is not spoken here; this game speaks protocol {PROTOCOL}"),
            ),
            _ => write_json(
                reply,
                &Hello {
                    id,
                    ok: true,
                    name: builtin.name,
                    version: builtin.version,
                    protocol: PROTOCOL,
                },
            ),
        },
        "reset" => match request.seed {
            Some(seed) => {
                game.reset(seed);
                write_json(
                    reply,
                    &Observed {
                        id,
                        ok: true,
                        observation: game.observation(),
                    },
                );
            }
            None => refuse(reply, "bad request: reset needs a `seed` (an integer ≥ 0)"),
        },
        "act" => {
            let Some(action) = request.action else {
                refuse(reply, "bad request: act needs an `action` (a string)");
                return None;
            };
            if !game.playing() {
                refuse(reply, "no game is being played: send reset first");
                return None;
            }
            match game.act(&action) {
                Act::Played { reward, done } => write_json(
                    reply,
                    &Acted {
                        id,
                        ok: true,
                        observation: game.observation(),
                        reward,
                        done,
                        events: game.events(),
                    },
                ),
                Act::Refused(error) => refuse(reply, &error),
                Act::Crash(message) => return Some(Ending::Crash(message)),
            }
        }
        "close" => {
            write_json(reply, &Closed { id, ok: true });
            return Some(Ending::Closed);
        }
        other => refuse(
            reply,
            &format!("unknown op `{other}` (this game knows hello, reset, act, close)"),
        ),
    }
    None
}
