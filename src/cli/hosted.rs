//! `gameplan hosted quote | run | status | cancel`: a playtest played by a
//! `gameplan serve --executor` server (docs/hosted.md).
//!
//! The rules of money are the price question's: nothing is charged before
//! the quote was shown and accepted (`--yes`, or yes at a terminal; no
//! terminal is a no). The admission's Idempotency-Key is written durably to
//! `<state dir>/hosted/` before it is sent, so an answer that never came is
//! never followed by a second admission under a new key: `hosted run` of
//! the same quote sends the same key again (the server answers with the
//! playtest it made, charging nothing more), and `hosted status` finds the
//! playtest by its key.
//!
//! `GAMEPLAN_CRASH_AT=hosted_admit:key_journaled|response_received` stops
//! it there for the kill -9 tests (`backend::crash_points`); a server stops
//! at `hosted_admit:request_sent`.
//!
//! The server and token come from `--server` (or `GAMEPLAN_SERVER`) and
//! `GAMEPLAN_TOKEN`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use super::{Context, LoadArgs};
use crate::backend::api::{ApiError, Token};
use crate::backend::crash_points::{Boundary, crash_point};
use crate::backend::hosted::{AdmitRequest, Phase, Playtest, Quote, QuoteRequest};
use crate::backend::http::HttpBackend;
use crate::exit_code::{self, Done, Failure};
use crate::hosted::archive;
use crate::report::ledger::dollars;

#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// The server's URL (default: $GAMEPLAN_SERVER); its token is read from $GAMEPLAN_TOKEN.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// Where the admissions' keys and fetched reports are kept (default: .gameplan/ here).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum HostedCommand {
    /// Price a plan played by the server: packs the plan's repo into a build, uploads it
    /// (once: builds are named by their sha256), and prints the quote and what is
    /// accepted with it. Nothing is charged.
    Quote {
        /// The plan file (.toml, .yaml or .yml).
        #[arg(value_name = "PLAN")]
        plan: PathBuf,
        /// Quote a build already uploaded, by its sha256, instead of packing one.
        #[arg(long, value_name = "SHA256")]
        build: Option<String>,
        /// Also write the quote to FILE, for `hosted run FILE`.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Print the quote as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Admit a playtest (a quote file, or a plan quoted now), asking before charging;
    /// --wait follows it to its end. Exit 1 when it failed, 10 when canceled or declined.
    Run {
        /// A quote file from `hosted quote --output`, or a plan file.
        #[arg(value_name = "QUOTE_FILE|PLAN")]
        target: PathBuf,
        /// Answer yes to the price question (needed without a terminal).
        #[arg(long)]
        yes: bool,
        /// Wait for the report (or the failure), fetching its files.
        #[arg(long)]
        wait: bool,
        /// Print the playtest as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show a playtest (default: the last one admitted from here); --wait follows it to
    /// its end. Exit 1 when it failed, 10 when canceled.
    Status {
        /// `hosted-N`, or `key:KEY` (the admission key `hosted run` printed).
        #[arg(value_name = "ID")]
        id: Option<String>,
        /// Its game (default: the one recorded when it was admitted from here).
        #[arg(long, value_name = "GAME")]
        game: Option<String>,
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Cancel a playtest, asking first: cells not yet started are refunded when it settles.
    Cancel {
        #[arg(value_name = "ID")]
        id: String,
        #[arg(long, value_name = "GAME")]
        game: Option<String>,
        /// Answer yes (needed without a terminal).
        #[arg(long)]
        yes: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// What `hosted run` writes before it sends an admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Admitted {
    key: String,
    server: String,
    game: String,
    admit: AdmitRequest,
    /// Known once the server answered.
    playtest: Option<String>,
}

/// The server and token, and where the records are.
struct Client {
    backend: HttpBackend,
    url: String,
    token: Token,
    state: PathBuf,
    runtime: tokio::runtime::Runtime,
}

pub fn run(cx: &Context, command: HostedCommand) -> Done {
    let server = match &command {
        HostedCommand::Quote { server, .. }
        | HostedCommand::Run { server, .. }
        | HostedCommand::Status { server, .. }
        | HostedCommand::Cancel { server, .. } => server.clone(),
    };
    let client = client(cx, &server)?;
    match command {
        HostedCommand::Quote {
            plan,
            build,
            output,
            json,
            load,
            ..
        } => {
            let quote = quote(cx, &client, &plan, build.as_deref(), &load)?;
            if let Some(file) = &output
                && let Err(e) = std::fs::write(file, pretty(&quote))
            {
                return Err(Failure::plan(format!(
                    "error: cannot write {}: {e}\n",
                    file.display()
                )));
            }
            show_quote(cx, &quote, json);
            if let Some(file) = output {
                cx.console.err(&format!(
                    "quote written to {}: `gameplan hosted run {}` admits it\n",
                    file.display(),
                    file.display()
                ));
            }
            Ok(())
        }
        HostedCommand::Run {
            target,
            yes,
            wait,
            json,
            load,
            ..
        } => admit(cx, &client, &target, &load, yes, wait, json),
        HostedCommand::Status {
            id,
            game,
            wait,
            json,
            ..
        } => {
            let (id, game) = which(&client, id, game)?;
            follow(cx, &client, &game, &id, wait, json)
        }
        HostedCommand::Cancel {
            id,
            game,
            yes,
            json,
            ..
        } => {
            let (id, game) = which(&client, Some(id), game)?;
            if !(yes
                || (std::io::IsTerminal::is_terminal(&std::io::stdin())
                    && crate::modes::run::ask(
                        &format!("Cancel {id}? Cells not yet started are refunded. [y/N] "),
                        false,
                    )))
            {
                return Err(Failure::canceled(
                    "not canceled (answer yes at a terminal, or pass --yes)\n",
                ));
            }
            match client.block(client.backend.cancel_playtest(&client.token, &game, &id)) {
                Ok(playtest) => {
                    show(cx, &playtest, json);
                    Ok(())
                }
                Err(e) => Err(refused(&e, "nothing was canceled")),
            }
        }
    }
}

fn client(cx: &Context, args: &ServerArgs) -> Result<Client, Failure> {
    let Some(url) = args
        .server
        .clone()
        .or_else(|| cx.env.get("GAMEPLAN_SERVER").cloned())
    else {
        return Err(Failure::plan(
            "error: no server: pass --server URL or set GAMEPLAN_SERVER (a `gameplan serve --executor local` server); nothing was sent\n",
        ));
    };
    let Some(token) = cx.env.get("GAMEPLAN_TOKEN").filter(|t| !t.is_empty()) else {
        return Err(Failure::auth(
            "error: GAMEPLAN_TOKEN is not set: make one with `gameplan ledger token --account ID --scopes playtest:write,playtest:model,playtest:upload` on the server; nothing was sent\n",
        ));
    };
    let backend =
        HttpBackend::new(&url).map_err(|e| Failure::plan(format!("error: {}\n", e.message)))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::plan(format!("error: no runtime: {e}\n")))?;
    Ok(Client {
        backend,
        url,
        token: Token(token.clone()),
        state: args
            .state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(".gameplan"))
            .join("hosted"),
        runtime,
    })
}

impl Client {
    fn block<T>(&self, future: impl std::future::Future<Output = T>) -> T {
        self.runtime.block_on(future)
    }
}

fn pretty<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// A refusal, said with what was not done: a token refused is auth, a
/// server that failed or never answered a failure, any other refusal bad
/// input (a plan or a request the server will not take).
fn refused(e: &ApiError, nothing: &str) -> Failure {
    let message = format!("error: {} ({nothing})\n", e.message);
    match e.status {
        401 | 403 => Failure::auth(message),
        0 | 500.. => Failure::failed(message),
        _ => Failure::plan(message),
    }
}

/// Packs and uploads the plan's build (unless `build` names one) and asks
/// for its quote.
fn quote(
    cx: &Context,
    client: &Client,
    plan: &Path,
    build: Option<&str>,
    load: &LoadArgs,
) -> Result<Quote, Failure> {
    let loaded = cx.load(plan, load)?;
    let Some(game) = loaded.plan.game.as_ref().map(|g| g.id.clone()) else {
        return Err(Failure::plan(
            "error: the plan has no [game]: there is nothing to play hosted\n",
        ));
    };
    let absolute = std::path::absolute(plan).unwrap_or_else(|_| plan.to_path_buf());
    let relative = absolute
        .strip_prefix(&loaded.root)
        .unwrap_or(&absolute)
        .display()
        .to_string();
    let sha = match build {
        Some(sha) => sha.to_owned(),
        None => upload(cx, client, &loaded.root, &game, &relative)?,
    };
    let request = QuoteRequest {
        build: sha,
        plan: relative,
        vars: load.vars.iter().cloned().collect(),
    };
    let mut quote = client
        .block(client.backend.hosted_quote(&client.token, &game, &request))
        .map_err(|e| refused(&e, "nothing was charged"))?;
    quote.server.clone_from(&client.url);
    Ok(quote)
}

/// Packs the build at `root` (with its plan `relative`) and uploads it
/// unless the server has it: its sha256.
fn upload(
    cx: &Context,
    client: &Client,
    root: &Path,
    game: &str,
    relative: &str,
) -> Result<String, Failure> {
    let packed = archive::pack(root, game, &[relative.to_owned()], &[]).map_err(|e| {
        Failure::plan(format!(
            "error: cannot pack {}: {e}; nothing was sent\n",
            root.display()
        ))
    })?;
    let kept = client
        .block(
            client
                .backend
                .put_build(&client.token, game, &packed.sha256, &packed.bytes),
        )
        .map_err(|e| refused(&e, "nothing was stored or charged"))?;
    cx.console.err(&format!(
        "build {} ({} files, {} bytes packed){}\n",
        &packed.sha256[..12],
        kept.files,
        packed.bytes.len(),
        if kept.new {
            " uploaded"
        } else {
            ": already on the server"
        }
    ));
    Ok(packed.sha256)
}

fn show_quote(cx: &Context, quote: &Quote, json: bool) {
    if json {
        cx.console.out(&pretty(quote));
    } else {
        cx.console.out(&quote_text(quote));
    }
}

/// The quote as a table, with what is accepted with it.
fn quote_text(quote: &Quote) -> String {
    let mut text = format!(
        "quote for {} cells of `{}` (game {}, build {}, {} runs):\n",
        quote.cells.len(),
        quote.plan,
        quote.game,
        &quote.build[..quote.build.len().min(12)],
        quote.run_length.as_str()
    );
    for line in crate::report::quote::price_table(&quote.estimate, &quote.account) {
        let _ = writeln!(text, "{line}");
    }
    let _ = writeln!(
        text,
        "  {}valid until {}\naccepted with it:",
        if quote.estimate.ok {
            ""
        } else {
            "the balance does not cover it; "
        },
        quote.estimate.expires_at
    );
    for statement in &quote.statements {
        let _ = writeln!(text, "  - {statement}");
    }
    text
}

fn records(state: &Path) -> Vec<Admitted> {
    let mut found: Vec<(std::time::SystemTime, Admitted)> = std::fs::read_dir(state)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let at = e.metadata().and_then(|m| m.modified()).ok()?;
            let record = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            Some((at, record))
        })
        .collect();
    found.sort_by_key(|(at, _)| *at);
    found.into_iter().map(|(_, r)| r).collect()
}

fn record(state: &Path, admitted: &Admitted) -> std::io::Result<()> {
    archive::write_durably(
        &state.join(format!("{}.json", admitted.key)),
        pretty(admitted).as_bytes(),
    )
}

/// `hosted run`.
fn admit(
    cx: &Context,
    client: &Client,
    target: &Path,
    load: &LoadArgs,
    yes: bool,
    wait: bool,
    json: bool,
) -> Done {
    let given: Option<Quote> = std::fs::read(target)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let quote = match given {
        Some(quote) => quote,
        None => quote(cx, client, target, None, load)?,
    };
    let body = AdmitRequest {
        build: quote.build.clone(),
        plan: quote.plan.clone(),
        vars: quote.vars.clone(),
        quote_id: quote.estimate.quote_id.clone(),
        confirm_price_cents: quote.estimate.estimate_cents,
    };
    let journaled = records(&client.state)
        .into_iter()
        .rev()
        // By the body alone: the quote id is the ledger's own, and a server
        // restarted on another address is the same ledger.
        .find(|r| r.admit == body);
    let admitted = if let Some(admitted) = journaled {
        cx.console.err(&format!(
            "this quote was sent before under key {}: sent again under the same key (never charged twice)\n",
            admitted.key
        ));
        admitted
    } else {
        asked(cx, client, &quote, body, yes)?
    };
    let answer = client.block(client.backend.hosted_admit(
        &client.token,
        &admitted.game,
        &admitted.key,
        &admitted.admit,
    ));
    let playtest = match answer {
        Ok(playtest) => playtest,
        Err(e) if e.uncertain => {
            return Err(Failure::failed(format!(
                "error: {}\nThe admission's answer never came: it may have been admitted and charged. \
                 `gameplan hosted status key:{}` finds it; `gameplan hosted run` of the same quote sends it again under the same key (never charged twice)\n",
                e.message, admitted.key
            )));
        }
        Err(e) => return Err(refused(&e, "nothing was charged")),
    };
    crash_point("hosted_admit", Boundary::ResponseReceived);
    let _ = record(
        &client.state,
        &Admitted {
            playtest: Some(playtest.id.clone()),
            ..admitted.clone()
        },
    );
    cx.console.err(&format!(
        "{} {}: charged {} (key {}); `gameplan hosted status {}` follows it\n",
        playtest.id,
        if playtest.replayed {
            "was admitted before"
        } else {
            "admitted"
        },
        dollars(playtest.charged_cents),
        admitted.key,
        playtest.id
    ));
    if wait {
        return follow(cx, client, &admitted.game, &playtest.id, true, json);
    }
    show(cx, &playtest, json);
    Ok(())
}

/// Asks the price question and, on a yes, journals a new admission key:
/// what to send.
fn asked(
    cx: &Context,
    client: &Client,
    quote: &Quote,
    body: AdmitRequest,
    yes: bool,
) -> Result<Admitted, Failure> {
    // On stderr, beside the question: stdout is the playtest's.
    cx.console.err(&quote_text(quote));
    let question = format!(
        "Play {} cells hosted for {} (balance {})?",
        quote.cells.len(),
        dollars(quote.estimate.estimate_cents),
        dollars(quote.estimate.balance_cents)
    );
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdin());
    if !(yes || (terminal && crate::modes::run::ask(&format!("{question} [y/N] "), false))) {
        return Err(Failure::canceled(format!(
            "declined at the price question ({}); nothing was charged. Answer yes at a terminal, or pass --yes (without a terminal the answer is no)\n",
            dollars(quote.estimate.estimate_cents)
        )));
    }
    let admitted = Admitted {
        key: format!("hosted-{}", crate::engine::new_run_id()),
        server: client.url.clone(),
        game: quote.game.clone(),
        admit: body,
        playtest: None,
    };
    if let Err(e) = record(&client.state, &admitted) {
        return Err(Failure::plan(format!(
            "error: cannot write the admission's key under {}: {e}; nothing was sent or charged\n",
            client.state.display()
        )));
    }
    crash_point("hosted_admit", Boundary::KeyJournaled);
    Ok(admitted)
}

/// The playtest and game `status` and `cancel` mean.
fn which(
    client: &Client,
    id: Option<String>,
    game: Option<String>,
) -> Result<(String, String), Failure> {
    let records = records(&client.state);
    let record = match &id {
        Some(id) => records
            .iter()
            .rev()
            .find(|r| r.playtest.as_deref() == Some(id) || format!("key:{}", r.key) == *id),
        None => records.last(),
    };
    let id = id.or_else(|| {
        record.map(|r| {
            r.playtest
                .clone()
                .unwrap_or_else(|| format!("key:{}", r.key))
        })
    });
    let game = game.or_else(|| record.map(|r| r.game.clone()));
    match (id, game) {
        (Some(id), Some(game)) => Ok((id, game)),
        (None, _) => Err(Failure::plan(format!(
            "error: no playtest was admitted from here ({}); name one: `gameplan hosted status hosted-N --game GAME`\n",
            client.state.display()
        ))),
        (Some(id), None) => Err(Failure::plan(format!(
            "error: {id} was not admitted from here: pass --game GAME\n"
        ))),
    }
}

/// Shows a playtest, following it to its end with `wait`; fetches its
/// files once the report is ready.
fn follow(cx: &Context, client: &Client, game: &str, id: &str, wait: bool, json: bool) -> Done {
    let mut seen = None;
    loop {
        let playtest = match client.block(client.backend.playtest(&client.token, game, id)) {
            Ok(playtest) => playtest,
            Err(e) => return Err(refused(&e, "nothing was changed")),
        };
        if wait && seen != Some(playtest.phase) && !json {
            cx.console
                .err(&format!("{}: {}\n", playtest.id, playtest.phase));
        }
        seen = Some(playtest.phase);
        if !wait || playtest.phase.is_over() {
            if playtest.phase == Phase::ReportReady {
                fetch(cx, client, game, &playtest);
            }
            show(cx, &playtest, json);
            return end_of(&playtest);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// How a shown playtest ends the command: its run's own exit code once
/// its report is ready (the server's run decided it, by the same table).
fn end_of(playtest: &Playtest) -> Done {
    match playtest.phase {
        Phase::Failed => Err(Failure::failed(String::new())),
        Phase::Canceled => Err(Failure::canceled(String::new())),
        Phase::ReportReady => playtest
            .outcome
            .as_ref()
            .and_then(|o| u8::try_from(o.exit_code).ok())
            .map_or(Ok(()), exit_code::outcome),
        _ => Ok(()),
    }
}

/// Fetches the playtest's files into `<state>/hosted/<id>/`.
fn fetch(cx: &Context, client: &Client, game: &str, playtest: &Playtest) {
    let dir = client.state.join(&playtest.id);
    let files = playtest.outcome.iter().flat_map(|o| &o.files);
    for name in files {
        // Written under `dir` only: a name that is absolute or climbs is a
        // server's mistake (or worse), never followed.
        let inside = Path::new(name)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside {
            cx.console.err(&format!(
                "warning: {name} of {} not fetched: not a path inside {}\n",
                playtest.id,
                dir.display()
            ));
            continue;
        }
        let got = client.block(client.backend.playtest_file(
            &client.token,
            game,
            &playtest.id,
            name,
        ));
        let written = got.map_err(|e| e.message).and_then(|file| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(file.body_base64)
                .map_err(|e| e.to_string())?;
            archive::write_durably(&dir.join(name), &bytes).map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            cx.console.err(&format!(
                "warning: {name} of {} not fetched: {e}\n",
                playtest.id
            ));
        }
    }
    if dir.join("report.html").is_file() {
        cx.console
            .err(&format!("page: {}\n", dir.join("report.html").display()));
    }
}

fn show(cx: &Context, playtest: &Playtest, json: bool) {
    if json {
        cx.console.out(&pretty(playtest));
        return;
    }
    let played = playtest.cells.iter().filter(|c| c.played).count();
    let mut text = format!(
        "{} ({}): {}{}\n  cells: {} played of {}; charged {}, refunded {}{}\n",
        playtest.id,
        playtest.game,
        playtest.phase,
        playtest
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default(),
        played,
        playtest.cells.len(),
        dollars(playtest.charged_cents),
        dollars(playtest.refunded_cents),
        if playtest.settlement.is_some() {
            " (settled)"
        } else {
            ""
        }
    );
    if let Some(outcome) = &playtest.outcome {
        let findings: Vec<String> = outcome
            .findings
            .iter()
            .map(|(category, n)| format!("{n} {category}"))
            .collect();
        let _ = writeln!(
            text,
            "  findings: {}; exit {}",
            if findings.is_empty() {
                "none".to_owned()
            } else {
                findings.join(", ")
            },
            outcome.exit_code
        );
    }
    cx.console.out(&text);
}
