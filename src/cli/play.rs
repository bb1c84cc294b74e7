//! `gameplan replay`, `gameplan shrink`, `gameplan play` (one cell, no
//! plan), and the hidden `__game-exec` and `__simulate` commands of the
//! play subsystem.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use super::{Command, Context};
use crate::exit_code::{Done, Failure};
use crate::play::replay::{ReplayOptions, ReplayOutcome};
use crate::play::shrink::{ShrinkOptions, ShrinkOutcome};
use crate::play::simulate::SimulateSpec;
use crate::play::stdio::{GameSpec, ResourceLimits};
use crate::play::{BrowserGame, GameTarget, PlayerSpec, Trace};
use crate::report::play_results;

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::plan(format!("gameplan: cannot start a runtime: {e}\n")))
}

/// The repo root: the nearest ancestor of the working directory holding `.git`.
fn repo_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    crate::plan::find_root(&cwd.join("trace.jsonl"))
}

/// A trace file, or one game of a simulation's batch file (`FILE#game-N`).
fn read_trace(path: &Path) -> Result<Trace, Failure> {
    crate::play::trace_batch::read(path).map_err(|e| Failure::plan(format!("gameplan: {e}\n")))
}

/// How `trace_path` plays again: the trace's own action timeout unless
/// `--action-timeout` says otherwise.
fn options(cx: &Context, trace_path: &Path, action_timeout: Option<f64>) -> ReplayOptions {
    ReplayOptions {
        root: repo_root(),
        parent_env: cx.env.clone(),
        action_timeout: action_timeout.map(|secs| Duration::from_secs_f64(secs.max(0.01))),
        limits: ResourceLimits::default(),
        transcript: Some(
            trace_path
                .parent()
                .unwrap_or(Path::new("."))
                .join("transcript.jsonl"),
        )
        .filter(|p| p.is_file()),
        game: None,
    }
}

/// `gameplan replay TRACE`: 0 when it replays the same, 1 naming the first difference.
pub fn replay(cx: &Context, trace_path: &Path, action_timeout: Option<f64>) -> Done {
    let trace = read_trace(trace_path)?;
    let runtime = runtime()?;
    let options = options(cx, trace_path, action_timeout);
    let timeout = options.action_timeout(&trace);
    match runtime.block_on(crate::play::replay(&trace, &options)) {
        Ok(outcome) => {
            cx.console
                .out(&play_results::replay(trace_path, &outcome, timeout));
            match outcome {
                ReplayOutcome::Confirmed { .. } => Ok(()),
                // The report above names the first difference.
                ReplayOutcome::Diverged { .. } => Err(Failure::failed(String::new())),
            }
        }
        Err(e) => Err(Failure::plan(format!(
            "gameplan: cannot replay {}: {e}\n",
            trace_path.display()
        ))),
    }
}

/// `gameplan shrink TRACE --out FILE [--time-limit SECS]`.
pub fn shrink(
    cx: &Context,
    trace_path: &Path,
    out: &Path,
    time_limit: u64,
    action_timeout: Option<f64>,
) -> Done {
    let trace = read_trace(trace_path)?;
    let runtime = runtime()?;
    let limit = Duration::from_secs(time_limit);
    let end = trace.end.map_or("none", crate::play::QuitReason::name);
    let replay = options(cx, trace_path, action_timeout);
    cx.console.err(&play_results::shrink_start(
        trace_path,
        trace.steps.len(),
        end,
        limit,
        replay.action_timeout(&trace),
    ));
    let options = ShrinkOptions {
        replay,
        time_limit: limit,
    };
    match runtime.block_on(crate::play::shrink(&trace, &options)) {
        Ok(ShrinkOutcome::Shrunk {
            trace: shrunk,
            original,
            runs,
            timed_out,
        }) => {
            if let Err(e) = std::fs::write(out, shrunk.to_jsonl()) {
                return Err(Failure::plan(format!(
                    "gameplan: cannot write {}: {e}\n",
                    out.display()
                )));
            }
            cx.console.out(&play_results::shrink_done(
                out,
                original,
                shrunk.steps.len(),
                runs,
                timed_out,
            ));
            Ok(())
        }
        Ok(ShrinkOutcome::NotAFailure(end)) => Err(Failure::plan(format!(
            "gameplan: {} ends `{}`, not in a crash or a hang, and broke none of the invariants its header records: there is nothing to shrink\n",
            trace_path.display(),
            end.map_or("none", crate::play::QuitReason::name)
        ))),
        Ok(ShrinkOutcome::NotReproduced { got }) => Err(Failure::failed(format!(
            "gameplan: {} does not reproduce: playing its actions again gave {got}; \
                 check it with `gameplan replay`\n",
            trace_path.display()
        ))),
        Err(e) => Err(Failure::plan(format!(
            "gameplan: cannot shrink {}: {e}\n",
            trace_path.display()
        ))),
    }
}

/// `gameplan __game-exec`: join the memory cgroup, set rlimits, become the game. A built-in game
/// (this same executable) runs in this process instead: a second exec of
/// gameplan would only cost time.
pub fn game_exec(
    cx: &Context,
    limits: ResourceLimits,
    cgroup: Option<&Path>,
    argv: &[String],
) -> Done {
    // Not joining is no reason not to play: the driver polls instead.
    if let Some(dir) = cgroup
        && let Err(why) = crate::play::stdio::join_cgroup(dir)
    {
        cx.console.err(&format!("gameplan: {why}\n"));
    }
    if let Err(why) = crate::play::stdio::set_limits(limits) {
        return Err(Failure::with_code(
            super::game::EXEC_FAILED,
            format!("gameplan: {why}\n"),
        ));
    }
    let this = std::env::current_exe().ok();
    if argv.len() > 1
        && argv[1] == "game"
        && this.is_some_and(|exe| Path::new(&argv[0]) == exe)
        && let Ok(cli) = super::Cli::try_parse_from(argv)
    {
        return super::dispatch(cli, cx);
    }
    let why = crate::play::stdio::exec(argv);
    Err(Failure::with_code(
        super::game::EXEC_FAILED,
        format!("gameplan: {why}\n"),
    ))
}

/// The settings of `gameplan __simulate` (the benchmark's entry).
pub struct SimulateArgs {
    pub games: u64,
    pub workers: usize,
    pub max_steps: u64,
    pub seed: i64,
    pub strategies: Vec<String>,
    pub out: Option<PathBuf>,
    pub action_timeout: f64,
    pub no_limits: bool,
    pub command: Vec<String>,
}

pub fn simulate(cx: &Context, args: SimulateArgs) -> Done {
    let mut strategies = Vec::new();
    for name in &args.strategies {
        match PlayerSpec::strategy(name) {
            Ok(strategy) => strategies.push(strategy),
            Err(e) => {
                return Err(Failure::plan(format!("gameplan: {e}\n")));
            }
        }
    }
    let mut game = GameSpec::new(args.command, repo_root(), &cx.env);
    game.action_timeout = Duration::from_secs_f64(args.action_timeout.max(0.01));
    if args.no_limits {
        game.limits = ResourceLimits::NONE;
    }
    let spec = SimulateSpec {
        game,
        games: args.games,
        strategies,
        workers: args.workers,
        max_steps: args.max_steps,
        seed: args.seed,
        out_dir: args.out,
        trace_findings: false,
    };
    let runtime = runtime()?;
    let (_stop, cancel) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    // Progress every 100 games, on a terminal only (a log gets the summary).
    let on_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let progress = Arc::new(move |done: u64, total: u64| {
        if on_terminal {
            crate::report::Console::plain().err(&play_results::simulate_progress(done, total));
        }
    });
    match runtime.block_on(crate::play::simulate(&spec, progress, cancel)) {
        Ok(summary) => {
            cx.console.out(&play_results::simulate(
                &summary,
                started.elapsed(),
                runner_cpu(),
            ));
            if summary.crashed + summary.hung > 0 {
                // The summary above counts them.
                Err(Failure::failed(String::new()))
            } else {
                Ok(())
            }
        }
        Err(e) => Err(Failure::plan(format!("gameplan: simulate failed: {e}\n"))),
    }
}

/// The settings of `gameplan play`.
#[derive(Debug, clap::Args)]
pub struct CellArgs {
    /// The persona's name in the report.
    #[arg(long, default_value = "tester")]
    pub persona: String,
    /// The player: scripted, random, explorer or llm.
    #[arg(long, default_value = "explorer")]
    pub player: String,
    #[command(flatten)]
    pub llm: Box<super::LlmPlayerArgs>,
    /// A web game: the page to open in headless Chromium through chromedriver (an
    /// http(s):// or file:// URL, or a path), instead of a COMMAND.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub url: Option<String>,
    #[command(flatten)]
    pub web: WebArgs,
    /// The scripted player's actions, in order (repeatable).
    #[arg(long = "action", value_name = "ACTION")]
    pub actions: Vec<String>,
    /// The controller: standard, jev or rune.
    #[arg(long, default_value = "standard")]
    pub controller: String,
    /// Seeds the game's `reset`, the player and the controller.
    #[arg(long, default_value_t = 1)]
    pub seed: i64,
    /// Actions before the persona gives up.
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub patience: u64,
    /// Stop after this many actions (a plan's `budget.max_actions`).
    #[arg(long, value_name = "N")]
    pub max_actions: Option<u64>,
    /// Stop after this many seconds (a plan's `budget.max_wall_seconds`).
    #[arg(long, value_name = "SECS")]
    pub max_wall: Option<u64>,
    /// Seconds without an answer before the game counts as hung.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub action_timeout: f64,
    /// Actions with no change in the observation before a `stuck` finding.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub stuck_after: u64,
    /// Where the cell's files go (created if needed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The game command, after `--`.
    #[arg(last = true, required_unless_present = "url", value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The web game settings of `gameplan play --url`: a plan's `game.serve`,
/// `game.keys`, `game.viewport` and `game.probe`.
#[derive(Debug, Default, clap::Args)]
pub struct WebArgs {
    /// With --url: serve this directory on a free loopback port while the cell plays; --url
    /// is then a page inside it (e.g. `--serve dist --url index.html`).
    #[arg(long, value_name = "DIR", requires = "url")]
    pub serve: Option<PathBuf>,
    /// With --url: keys offered on every page besides Enter and Escape, comma-separated
    /// (Tab, Space, Backspace, ArrowUp, ArrowDown, ArrowLeft, ArrowRight, or one character).
    #[arg(long, value_name = "K,K", requires = "url", value_delimiter = ',')]
    pub keys: Vec<String>,
    /// With --url: the page's inner size and the screenshots', WIDTHxHEIGHT [default:
    /// 1280x800].
    #[arg(long, value_name = "WxH", requires = "url")]
    pub viewport: Option<String>,
    /// With --url: a JavaScript expression evaluated in the page with every observation;
    /// its value (as JSON) is the observation's `state`.
    #[arg(long, value_name = "JS", requires = "url")]
    pub probe: Option<String>,
}

/// The page `--url` and the web flags describe; what is wrong with them
/// otherwise.
fn browser_game(url: &str, web: &WebArgs) -> Result<BrowserGame, String> {
    let mut game = match &web.serve {
        Some(dir) => {
            let absolute =
                std::env::current_dir().map_or_else(|_| dir.clone(), |cwd| cwd.join(dir));
            if !absolute.is_dir() {
                return Err(format!(
                    "--serve {} is not a directory; it names the directory holding the built \
                     game (e.g. `--serve dist --url index.html`)",
                    dir.display()
                ));
            }
            if url.contains("://") {
                return Err(format!(
                    "with --serve, --url is a page inside the served directory (e.g. \
                     `index.html`), not `{url}`"
                ));
            }
            let mut game = BrowserGame::at(url.to_owned());
            game.serve = Some(absolute.display().to_string());
            game
        }
        None => BrowserGame::at(page_from_cwd(url)),
    };
    for key in &web.keys {
        let single = key.chars().count() == 1;
        if !single && !crate::plan::model::KEY_NAMES.contains(&key.as_str()) {
            return Err(format!(
                "--keys: `{key}` is not a key gameplan presses ({}, or one character)",
                crate::plan::model::KEY_NAMES.join(", ")
            ));
        }
    }
    game.keys.clone_from(&web.keys);
    if let Some(size) = &web.viewport {
        game.viewport = viewport(size)?;
    }
    if let Some(probe) = web.probe.as_ref().filter(|p| !p.trim().is_empty()) {
        game.probe = Some(probe.clone());
    }
    Ok(game)
}

/// The game the flags describe: the command, or the page of `--url`
/// (filmed as a plan's cell is by default).
fn game_of(cx: &Context, args: &CellArgs) -> Result<GameSpec, String> {
    let target = match &args.url {
        Some(url) => GameTarget::Browser(browser_game(url, &args.web)?),
        None => GameTarget::Stdio {
            command: args.command.clone(),
        },
    };
    let mut game = GameSpec::of(target, repo_root(), &cx.env);
    if game.target.browser().is_some() {
        game.video = Some(crate::plan::model::DEFAULT_MAX_VIDEO_FRAMES);
    }
    game.action_timeout = Duration::from_secs_f64(args.action_timeout.max(0.01));
    game.stuck_after = args.stuck_after;
    Ok(game)
}

/// `WIDTHxHEIGHT`, each side within the range a plan's `game.viewport` takes.
fn viewport(size: &str) -> Result<(u32, u32), String> {
    let range = crate::plan::model::VIEWPORT_RANGE;
    let pixels = |text: &str| {
        text.trim()
            .parse::<u32>()
            .ok()
            .filter(|n| range.contains(&u64::from(*n)))
    };
    if let Some((w, h)) = size.split_once(['x', 'X'])
        && let (Some(w), Some(h)) = (pixels(w), pixels(h))
    {
        return Ok((w, h));
    }
    Err(format!(
        "--viewport {size} is not WIDTHxHEIGHT with each side from {} to {} pixels (e.g. \
         `--viewport 800x600`)",
        range.start(),
        range.end()
    ))
}

/// The variable `gameplan play --player llm` reads its API key from when
/// `--api-key-env` names none. gameplan's own, not `OPENAI_API_KEY`: a key
/// set for one provider must not go to whatever `--base-url` points at.
pub const DEFAULT_KEY_ENV: &str = "GAMEPLAN_LLM_KEY";

/// The card an `llm` player plays when `--card` gives none.
const DEFAULT_CARD: &str = "A player trying this game for the first time.";

/// `gameplan play`: one cell, its files in `--out`, a one-line summary
/// on stdout. Exit 0 when it played (whatever it found), 1 when the game
/// never got through `hello` and `reset` (or the model endpoint refused
/// the request), 2 when an `llm` player stopped on a bad answer or its
/// model budget, 5 when its endpoint never answered, 10 when interrupted,
/// 3 when the game could not be started or the flags do not make a cell.
pub fn play_cell(cx: &Context, args: &CellArgs) -> Done {
    let player = player_of(cx, args)
        .map_err(|why| Failure::plan(format!("gameplan: {why}; nothing was played or sent\n")))?;
    let Some(controller) = crate::plan::model::Controller::from_name(&args.controller) else {
        return Err(Failure::plan(format!(
            "gameplan: unknown controller `{}` (standard, jev, rune)\n",
            args.controller
        )));
    };
    let game = game_of(cx, args)
        .map_err(|why| Failure::plan(format!("gameplan: {why}; nothing was played\n")))?;
    let spec = crate::play::CellSpec {
        game,
        persona: args.persona.clone(),
        player,
        controller: controller.into(),
        seed: args.seed,
        player_seed: args.seed,
        patience: args.patience,
        max_actions: args.max_actions,
        max_wall: args.max_wall.map(Duration::from_secs),
        repeat: None,
    };
    let runtime = runtime()?;
    let (stop, cancel) = tokio::sync::watch::channel(false);
    let outcome = runtime.block_on(async {
        // Ctrl-C / SIGTERM: the turn in flight finishes, the cell ends `interrupted`.
        let signals = tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            let _ = stop.send(true);
        });
        let result = crate::play::play_cell(&spec, &args.out, cancel).await;
        signals.abort();
        let mut result = result?;
        crate::report::play_cell::write_markdown(&args.out, &mut result)?;
        Ok::<_, crate::play::PlayError>(result)
    });
    match outcome {
        Ok(result) => {
            cx.console
                .out(&play_results::cell(&result.report, &args.out));
            for warning in &result.report.warnings {
                cx.console.err(&format!("gameplan: warning: {warning}\n"));
            }
            if let Some(why) = &result.report.not_played {
                Err(Failure::failed(format!(
                    "gameplan: {}\n",
                    crate::report::play_cell::not_played(why)
                )))
            } else if result.report.state == crate::play::CellState::Interrupted {
                Err(Failure::canceled(String::new()))
            } else {
                player_end(&result.report).map_err(|failure| match &result.report.quit_detail {
                    Some(detail) => failure.and_say(&format!(
                        "gameplan: the player stopped: {detail}; the cell's files hold what \
                         it played\n"
                    )),
                    None => failure,
                })
            }
        }
        Err(e) => Err(Failure::plan(format!("gameplan: {e}\n"))),
    }
}

/// How the cell's player ended (what a `play` step's outcome would be): a
/// model endpoint that never answered, one that refused the request, a
/// model that never named a listed action or spent its budget (partial
/// results); every other end played. The cell's report said which.
fn player_end(report: &crate::play::CellReport) -> Done {
    use crate::play::QuitReason;
    match report.quit_reason {
        QuitReason::ModelUnreachable => Err(Failure::unreachable(String::new())),
        QuitReason::ModelRefused => Err(Failure::failed(String::new())),
        QuitReason::BadAnswer => Err(Failure::incomplete(String::new())),
        QuitReason::Budget if report.model.as_ref().is_some_and(|m| m.stopped_by_budget) => {
            Err(Failure::incomplete(String::new()))
        }
        _ => Ok(()),
    }
}

/// A page path as the user typed it, relative to where they stand; a URL
/// as is.
fn page_from_cwd(url: &str) -> String {
    if url.contains("://") || url.starts_with("about:") || url.starts_with("data:") {
        return url.to_owned();
    }
    std::env::current_dir().map_or_else(
        |_| url.to_owned(),
        |cwd| cwd.join(url).display().to_string(),
    )
}

/// The player the flags describe; what is wrong with them otherwise.
fn player_of(cx: &Context, args: &CellArgs) -> Result<PlayerSpec, String> {
    if args.player == "llm" {
        llm_player_of(cx, &args.llm)
    } else {
        plain_player_of(args)
    }
}

/// A scripted, random or explorer player; `llm` flags given to one are a
/// mistake worth saying.
fn plain_player_of(args: &CellArgs) -> Result<PlayerSpec, String> {
    let llm = &args.llm;
    let only_llm: Vec<&str> = [
        ("--card", llm.card.is_some()),
        ("--card-file", llm.card_file.is_some()),
        ("--model", llm.model.is_some()),
        ("--base-url", llm.base_url.is_some()),
        ("--api-key-env", llm.api_key_env.is_some()),
        ("--price-input", llm.price_input.is_some()),
        ("--price-output", llm.price_output.is_some()),
        ("--max-model-usd", llm.max_model_usd.is_some()),
        ("--prompt-file", llm.prompt_file.is_some()),
        ("--fallback", llm.fallback.is_some()),
        ("--no-structured", llm.no_structured),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect();
    if !only_llm.is_empty() {
        return Err(format!(
            "{} only apply to `--player llm` (the player is `{}`)",
            only_llm.join(", "),
            args.player
        ));
    }
    PlayerSpec::named(&args.player, &args.actions).ok_or_else(|| {
        format!(
            "unknown player `{}` ({}, llm)",
            args.player,
            PlayerSpec::NAMES
        )
    })
}

/// An `llm` player: its card, prompt, endpoint, key, price and budget.
fn llm_player_of(cx: &Context, llm: &super::LlmPlayerArgs) -> Result<PlayerSpec, String> {
    let model = llm
        .model
        .clone()
        .ok_or("`--player llm` needs --model NAME (the model its endpoint serves)")?;
    let card = match (&llm.card, &llm.card_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => read_prompt_file(path, "--card-file")?,
        (None, None) => DEFAULT_CARD.to_owned(),
    };
    let prompt = llm
        .prompt_file
        .as_deref()
        .map(|path| read_prompt_file(path, "--prompt-file"))
        .transpose()?;
    if let Some(template) = &prompt {
        crate::template::check_prompt(template)
            .map_err(|e| format!("--prompt-file is no usable prompt: {}", e.message))?;
    }
    let mut client = crate::llm::ClientConfig::new(model);
    if let Some(url) = &llm.base_url {
        client.base_url.clone_from(url);
    }
    let key_env = llm.api_key_env.as_deref().unwrap_or(DEFAULT_KEY_ENV);
    match cx.env.get(key_env).filter(|key| !key.is_empty()) {
        Some(key) => client.api_key = Some(key.clone()),
        None if llm.api_key_env.is_some() => {
            return Err(format!(
                "--api-key-env names `{key_env}`, which is not set: export the API key in it"
            ));
        }
        None => {}
    }
    let usd = |flag: &str, value: f64| {
        if value.is_finite() && value >= 0.0 {
            Ok(value)
        } else {
            Err(format!("{flag} is {value}: a price in USD is 0 or more"))
        }
    };
    if let (Some(input), Some(output)) = (llm.price_input, llm.price_output) {
        client.price = Some(crate::token_price::Price {
            input_per_mtok: usd("--price-input", input)?,
            output_per_mtok: usd("--price-output", output)?,
        });
    }
    if let Some(max) = llm.max_model_usd {
        if !(max.is_finite() && max > 0.0) {
            return Err(format!(
                "--max-model-usd is {max}: a budget in USD is more than 0"
            ));
        }
        if client.effective_price().is_none() {
            return Err(format!(
                "the model `{}` has no known price, so --max-model-usd cannot be kept: give \
                 --price-input and --price-output (USD per million tokens; built-in prices: {})",
                client.model,
                crate::token_price::Price::builtin_names().join(", ")
            ));
        }
        client.max_usd = Some(max);
    }
    let redactor = crate::template::Redactor::default();
    if let Some(key) = &client.api_key {
        redactor.register(key);
    }
    let mut spec = crate::play::llm_player::LlmSpec::new(client, card, redactor);
    spec.prompt = prompt;
    spec.structured = !llm.no_structured;
    if let Some(who) = &llm.fallback {
        spec.fallback = crate::plan::model::Fallback::ALL
            .iter()
            .find(|(name, _)| name == who)
            .map(|(_, fallback)| *fallback)
            .ok_or_else(|| format!("--fallback `{who}` is not explorer, random or stop"))?;
    }
    Ok(PlayerSpec::Llm(Box::new(spec)))
}

/// A card or prompt file, up to [`crate::template::MAX_PROMPT_FILE_BYTES`].
fn read_prompt_file(path: &Path, flag: &str) -> Result<String, String> {
    crate::template::read_prompt_file(path, &format!("{flag} `{}`", path.display()))
}

/// The play subsystem's commands.
pub fn dispatch(cx: &Context, command: Command) -> Done {
    match command {
        Command::Replay {
            trace,
            action_timeout,
        } => replay(cx, &trace, action_timeout),
        Command::Shrink {
            trace,
            out,
            time_limit,
            action_timeout,
        } => shrink(cx, &trace, &out, time_limit, action_timeout),
        Command::GameExec {
            address_space,
            cpu,
            nofile,
            nproc,
            cgroup,
            argv,
        } => game_exec(
            cx,
            ResourceLimits {
                // Resident memory is watched by the driver, not an rlimit.
                memory: None,
                address_space,
                cpu_seconds: cpu,
                open_files: nofile,
                processes: nproc,
            },
            cgroup.as_deref(),
            &argv,
        ),
        Command::PlayCell(args) => play_cell(cx, &args),
        Command::Simulate {
            games,
            workers,
            max_steps,
            seed,
            strategies,
            out,
            action_timeout,
            no_limits,
            command,
        } => simulate(
            cx,
            SimulateArgs {
                games,
                workers,
                max_steps,
                seed,
                strategies,
                out,
                action_timeout,
                no_limits,
                command,
            },
        ),
        // dispatch hands this file its own commands only.
        _ => Err(Failure::plan(String::new())),
    }
}

/// CPU time of this process alone (not of the game processes it reaped):
/// the runner's own cost, for the benchmark's overhead per action.
fn runner_cpu() -> Option<Duration> {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let micros = |t: nix::sys::time::TimeVal| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec()).unwrap_or(0)
    };
    Some(Duration::from_micros(
        micros(usage.user_time()) + micros(usage.system_time()),
    ))
}
