//! `gameplan replay`, `gameplan shrink`, and the hidden `__game-exec` and
//! `__simulate` commands of the play subsystem.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use super::{Command, Context};
use crate::exit_code;
use crate::play::replay::{ReplayOptions, ReplayOutcome};
use crate::play::shrink::{ShrinkOptions, ShrinkOutcome};
use crate::play::simulate::SimulateSpec;
use crate::play::stdio::{GameSpec, ResourceLimits};
use crate::play::{PlayerSpec, Trace};
use crate::report::play_results;

fn runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()
}

/// The repo root: the nearest ancestor of the working directory holding `.git`.
fn repo_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    crate::plan::find_root(&cwd.join("trace.jsonl"))
}

/// A trace file, or one game of a simulation's batch file (`FILE#game-N`).
fn read_trace(cx: &Context, path: &Path) -> Result<Trace, u8> {
    crate::play::trace_batch::read(path).map_err(|e| {
        cx.console.err(&format!("gameplan: {e}\n"));
        exit_code::PLAN_ERROR
    })
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
    }
}

/// `gameplan replay TRACE`: 0 when it replays the same, 1 naming the first difference.
pub fn replay(cx: &Context, trace_path: &Path, action_timeout: Option<f64>) -> u8 {
    let trace = match read_trace(cx, trace_path) {
        Ok(trace) => trace,
        Err(code) => return code,
    };
    let Some(runtime) = runtime() else {
        return exit_code::PLAN_ERROR;
    };
    let options = options(cx, trace_path, action_timeout);
    let timeout = options.action_timeout(&trace);
    match runtime.block_on(crate::play::replay(&trace, &options)) {
        Ok(outcome) => {
            cx.console
                .out(&play_results::replay(trace_path, &outcome, timeout));
            match outcome {
                ReplayOutcome::Confirmed { .. } => exit_code::SUCCESS,
                ReplayOutcome::Diverged { .. } => exit_code::FAILED,
            }
        }
        Err(e) => {
            cx.console.err(&format!(
                "gameplan: cannot replay {}: {e}\n",
                trace_path.display()
            ));
            exit_code::PLAN_ERROR
        }
    }
}

/// `gameplan shrink TRACE --out FILE [--time-limit SECS]`.
pub fn shrink(
    cx: &Context,
    trace_path: &Path,
    out: &Path,
    time_limit: u64,
    action_timeout: Option<f64>,
) -> u8 {
    let trace = match read_trace(cx, trace_path) {
        Ok(trace) => trace,
        Err(code) => return code,
    };
    let Some(runtime) = runtime() else {
        return exit_code::PLAN_ERROR;
    };
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
                cx.console
                    .err(&format!("gameplan: cannot write {}: {e}\n", out.display()));
                return exit_code::PLAN_ERROR;
            }
            cx.console.out(&play_results::shrink_done(
                out,
                original,
                shrunk.steps.len(),
                runs,
                timed_out,
            ));
            exit_code::SUCCESS
        }
        Ok(ShrinkOutcome::NotAFailure(end)) => {
            cx.console.err(&format!(
                "gameplan: {} ends `{}`, not in a crash or a hang: there is nothing to shrink\n",
                trace_path.display(),
                end.map_or("none", crate::play::QuitReason::name)
            ));
            exit_code::PLAN_ERROR
        }
        Ok(ShrinkOutcome::NotReproduced { got }) => {
            cx.console.err(&format!(
                "gameplan: {} does not reproduce: playing its actions again gave {got}; \
                 check it with `gameplan replay`\n",
                trace_path.display()
            ));
            exit_code::FAILED
        }
        Err(e) => {
            cx.console.err(&format!(
                "gameplan: cannot shrink {}: {e}\n",
                trace_path.display()
            ));
            exit_code::PLAN_ERROR
        }
    }
}

/// `gameplan __game-exec`: set rlimits, become the game. A built-in game
/// (this same executable) runs in this process instead: a second exec of
/// gameplan would only cost time.
pub fn game_exec(cx: &Context, limits: ResourceLimits, argv: &[String]) -> u8 {
    if let Err(why) = crate::play::stdio::set_limits(limits) {
        cx.console.err(&format!("gameplan: {why}\n"));
        return 127;
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
    cx.console.err(&format!("gameplan: {why}\n"));
    127
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

pub fn simulate(cx: &Context, args: SimulateArgs) -> u8 {
    let mut strategies = Vec::new();
    for name in &args.strategies {
        match PlayerSpec::strategy(name) {
            Ok(strategy) => strategies.push(strategy),
            Err(e) => {
                cx.console.err(&format!("gameplan: {e}\n"));
                return exit_code::PLAN_ERROR;
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
    let Some(runtime) = runtime() else {
        return exit_code::PLAN_ERROR;
    };
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
                exit_code::FAILED
            } else {
                exit_code::SUCCESS
            }
        }
        Err(e) => {
            cx.console.err(&format!("gameplan: simulate failed: {e}\n"));
            exit_code::PLAN_ERROR
        }
    }
}

/// The settings of `gameplan play`.
pub struct CellArgs {
    pub persona: String,
    pub player: String,
    pub actions: Vec<String>,
    pub controller: String,
    pub seed: i64,
    pub patience: u64,
    pub max_actions: Option<u64>,
    pub max_wall: Option<u64>,
    pub action_timeout: f64,
    pub stuck_after: u64,
    pub out: PathBuf,
    pub command: Vec<String>,
}

/// `gameplan play`: one cell, its files in `--out`, a one-line summary
/// on stdout. Exit 0 when it played (whatever it found), 1 when the game
/// never got through `hello` and `reset`, 10 when interrupted, 3 when the
/// game could not be started.
pub fn play_cell(cx: &Context, args: &CellArgs) -> u8 {
    let Some(player) = PlayerSpec::named(&args.player, &args.actions) else {
        cx.console.err(&format!(
            "gameplan: unknown player `{}` ({})\n",
            args.player,
            PlayerSpec::NAMES
        ));
        return exit_code::PLAN_ERROR;
    };
    let Some(controller) = crate::plan::model::Controller::from_name(&args.controller) else {
        cx.console.err(&format!(
            "gameplan: unknown controller `{}` (standard, jev, rune)\n",
            args.controller
        ));
        return exit_code::PLAN_ERROR;
    };
    let mut game = GameSpec::new(args.command.clone(), repo_root(), &cx.env);
    game.action_timeout = Duration::from_secs_f64(args.action_timeout.max(0.01));
    game.stuck_after = args.stuck_after;
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
    };
    let Some(runtime) = runtime() else {
        return exit_code::PLAN_ERROR;
    };
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
        result
    });
    match outcome {
        Ok(result) => {
            cx.console
                .out(&play_results::cell(&result.report, &args.out));
            for warning in &result.report.warnings {
                cx.console.err(&format!("gameplan: warning: {warning}\n"));
            }
            if let Some(why) = &result.report.not_played {
                cx.console.err(&format!(
                    "gameplan: {}\n",
                    crate::report::play_cell::not_played(why)
                ));
                exit_code::FAILED
            } else if result.report.state == crate::play::CellState::Interrupted {
                exit_code::CANCELED
            } else {
                exit_code::SUCCESS
            }
        }
        Err(e) => {
            cx.console.err(&format!("gameplan: {e}\n"));
            exit_code::PLAN_ERROR
        }
    }
}

/// The play subsystem's commands.
pub fn dispatch(cx: &Context, command: Command) -> u8 {
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
            argv,
        } => game_exec(
            cx,
            ResourceLimits {
                address_space,
                cpu_seconds: cpu,
                open_files: nofile,
            },
            &argv,
        ),
        Command::PlayCell {
            persona,
            player,
            actions,
            controller,
            seed,
            patience,
            max_actions,
            max_wall,
            action_timeout,
            stuck_after,
            out,
            command,
        } => play_cell(
            cx,
            &CellArgs {
                persona,
                player,
                actions,
                controller,
                seed,
                patience,
                max_actions,
                max_wall,
                action_timeout,
                stuck_after,
                out,
                command,
            },
        ),
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
        _ => exit_code::PLAN_ERROR,
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
