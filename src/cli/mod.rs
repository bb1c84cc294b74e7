//! The command line: the clap types and the dispatch to one file per
//! subcommand, which does its work and prints it. The run modes (`plan
//! run`, `resume`, shards, merge, executors) and the [`Context`] every
//! subcommand runs with are `crate::modes`'.
// clap turns these doc comments into `--help` text, where markdown backticks
// around RUN_ID or JUnit would show literally.
#![expect(clippy::doc_markdown, reason = "doc comments are --help text")]

mod check;
mod game;
mod gc;
mod hosted;
mod ledger;
mod plan_check;
mod plan_explain;
mod plan_graph;
mod plan_runs;
mod play;
mod report;
mod schema;
mod serve;
mod shell;

pub use crate::modes::context::{Context, LoadArgs, OutputMode, RunArgs, expand_failure};
pub use game::start_game_before_cli;

use crate::exit_code::Done;
use crate::modes::{run as plan_run, shard as plan_shard, start};

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// gameplan: run AI playtests and AI review gates from a plan file in your repo.
#[derive(Debug, Parser)]
#[command(name = "gameplan", version, about, long_about = None, propagate_version = true)]
#[command(
    after_help = "Exit codes: 0 ok, 1 failed / FIX FIRST / a --fail-on match, 2 incomplete, 3 plan or environment error \
(nothing charged), 4 auth, 5 model unreachable, 10 canceled."
)]
pub struct Cli {
    /// Never colour output (also: NO_COLOR=1, or --color never).
    #[arg(long, global = true)]
    pub no_color: bool,
    /// When to colour output: auto (on a terminal, unless NO_COLOR is set;
    /// CLICOLOR_FORCE=1 colours into a pipe), always, or never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check, inspect and run plans.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Write a run's report.html again (the newest run without RUN_ID) and print its path.
    ///
    /// The page every run writes in its directory: the verdict, findings with their
    /// screenshots and replay commands, cells, progress and coverage, how it felt, the
    /// controller comparison. Rendered from the run's summary.json, so a run must have ended.
    Report {
        #[arg(value_name = "RUN_ID")]
        run_id: Option<String>,
        /// Write it here instead of the run's directory.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Open it in the desktop's browser (`xdg-open`).
        #[arg(long)]
        open: bool,
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Is this machine ready to run PLAN? One row per thing a run needs, each with its fix.
    ///
    /// pass / warn / fail for: the plan and the secrets it reads, the backend and the token's
    /// scopes (a plan that pays), chromedriver and Chromium with their versions (a web game),
    /// the program a stdio game starts and the runtime behind it (python, java, node), the Ray
    /// head (an `[executor]` of kind ray), free disk under the state directory, and the
    /// concurrency this machine is good for. Exits 0 with no fail, 1 otherwise. Nothing is
    /// charged, played or written.
    Check {
        /// The plan file (.toml, .yaml or .yml); without one, the machine's rows only.
        #[arg(value_name = "PLAN")]
        plan: Option<PathBuf>,
        #[command(flatten)]
        load: LoadArgs,
        /// The state directory whose disk and ledger are checked [default: .gameplan
        /// beside the plan].
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Print one JSON document: `{"ok": bool, "rows": [{"check", "status", "detail",
        /// "fix"}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Internal: the per-run step launcher (started by `plan run`).
    #[command(name = "__launch", hide = true)]
    Launch {
        /// Steps that may run at once.
        slots: usize,
    },
    /// Play a trace.jsonl again from the repo root; exit 0 when every observation matches.
    ///
    /// Exits 1 naming the first step where the game did otherwise (expected vs got, and the
    /// fields that differ when the cell's transcript.jsonl is beside the trace). Resets where
    /// the trace did, with the action timeout its header recorded.
    Replay {
        /// The trace.jsonl of a play cell or a shrunk one, or one simulated game's trace in
        /// a simulation's batch file: `traces/batch-0.jsonl#game-17` (as its summary names it).
        #[arg(value_name = "TRACE")]
        trace: PathBuf,
        /// Seconds without an answer before the game counts as hung [default: the
        /// trace's own, as the game was played; 10 for a trace that does not say].
        #[arg(long, value_name = "SECS")]
        action_timeout: Option<f64>,
    },
    /// Reduce a trace that ends in a crash or a hang to a shortest one that still does.
    ///
    /// Delta debugging: each candidate plays in a fresh game process. Writes a trace that
    /// `gameplan replay` confirms.
    Shrink {
        /// The trace.jsonl to shrink, or a simulated game's `FILE#game-N`; it must end in
        /// `crash` or `hang`.
        #[arg(value_name = "TRACE")]
        trace: PathBuf,
        /// Where to write the shrunk trace.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Stop searching after this many seconds and keep the shortest found.
        #[arg(long, value_name = "SECS", default_value_t = 120)]
        time_limit: u64,
        /// Seconds without an answer before the game counts as hung [default: the
        /// trace's own, as the game was played; 10 for a trace that does not say].
        #[arg(long, value_name = "SECS")]
        action_timeout: Option<f64>,
    },
    /// Internal: set rlimits on this process, then exec the game (started by the stdio driver).
    #[command(name = "__game-exec", hide = true)]
    GameExec {
        /// Address space limit in bytes.
        #[arg(long = "as")]
        address_space: Option<u64>,
        /// CPU seconds.
        #[arg(long)]
        cpu: Option<u64>,
        /// Open files.
        #[arg(long)]
        nofile: Option<u64>,
        /// Processes of the user.
        #[arg(long)]
        nproc: Option<u64>,
        /// A memory cgroup to join first.
        #[arg(long)]
        cgroup: Option<std::path::PathBuf>,
        /// The game's argv.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Play one cell of a game (no plan needed): COMMAND is the game, e.g. `-- python3 game.py`,
    /// or --url a web page.
    ///
    /// What one cell of a `play` step does: a fresh game process (or headless Chromium), one
    /// persona's player and one controller, until the game is done, patience or a bound runs
    /// out, or the game fails. Writes report.md, report.json, transcript.jsonl and trace.jsonl
    /// into --out. The bridge protocol the game must speak is docs/bridge.md.
    ///
    /// `--player llm` asks an OpenAI-compatible chat model (a hosted API, or a local
    /// llama.cpp, Ollama or vLLM server) to play the persona's --card. Its API key is read
    /// from the environment variable --api-key-env names (GAMEPLAN_LLM_KEY unless told),
    /// never from a flag, and never written anywhere. Exit 2 when the model never named a
    /// listed action or --max-model-usd stopped it, 5 when the endpoint never answered.
    #[command(name = "play", alias = "__play")]
    PlayCell(Box<play::CellArgs>),
    /// Internal: simulate many seeded games of COMMAND (the benchmark's entry).
    #[command(name = "__simulate", hide = true)]
    Simulate {
        #[arg(long, default_value_t = 1000)]
        games: u64,
        #[arg(long, default_value_t = 2)]
        workers: usize,
        #[arg(long, default_value_t = 50)]
        max_steps: u64,
        #[arg(long, default_value_t = 1)]
        seed: i64,
        /// Player kinds, in turn: random, explorer.
        #[arg(long, value_delimiter = ',', default_value = "random")]
        strategies: Vec<String>,
        /// Where the traces of crashed and hung games go.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 10.0)]
        action_timeout: f64,
        /// Start the game without rlimits (one exec less per process).
        #[arg(long)]
        no_limits: bool,
        /// The game command.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Remove old runs and trim the result store (least recently used first).
    ///
    /// Keeps the --keep-runs newest runs, every live run, and every unfinished run that
    /// `plan resume` can still continue; `store/last/` (what `plan explain` compares
    /// against) is never removed. Prints what it freed.
    Gc {
        /// How many of the newest runs to keep, whatever their state.
        #[arg(long, value_name = "N", default_value_t = 10)]
        keep_runs: usize,
        /// Trim the store to this size: bytes, or 500M, 2G, ... (powers of 1024).
        /// Without it, no stored result is removed.
        #[arg(long, value_name = "SIZE", value_parser = gc::parse_size)]
        max_store: Option<u64>,
        /// Also remove old unfinished runs that could still be resumed (never a live one).
        #[arg(long)]
        include_unfinished: bool,
        /// Print what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// The state directory (default: .gameplan/ at the repo root).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Play a built-in game over bridge protocol v1 on stdin/stdout (maze, ...).
    ///
    /// One JSON request per line in, one reply per line out: the protocol is docs/bridge.md.
    /// Plans reach it as `game.command = "builtin:NAME"`.
    Game {
        /// The game: maze.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Inspect and administer a ledger (the embedded one: .gameplan/ledger.sqlite).
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Serve a ledger over HTTP (the API an `http` backend talks to) until Ctrl-C.
    ///
    /// Prints `listening on http://ADDR` first, then one line per request: method, path,
    /// status, milliseconds (never a header, so never a token). Plain HTTP: keep it on
    /// loopback or put a TLS proxy in front.
    ///
    /// The embedded ledger's public demo token is refused (401). A ledger file created here
    /// starts empty: make accounts and tokens with `gameplan ledger token --db FILE`.
    Serve {
        /// Where to listen; port 0 picks a free port (the first line says which).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787")]
        addr: String,
        /// Give a ledger file created now the demo account ($100 of demo money). Its public
        /// token is still refused: make a token for it with `gameplan ledger token`.
        #[arg(long)]
        demo: bool,
        #[command(flatten)]
        limits: serve::Limits,
        #[command(flatten)]
        hosting: serve::HostingArgs,
        #[command(flatten)]
        file: LedgerFile,
    },
    /// Playtests played by a server (`serve --executor`): upload the build,
    /// price it, run it, follow it, cancel it.
    Hosted {
        #[command(subcommand)]
        command: hosted::HostedCommand,
    },
    /// Print a JSON Schema (for editors and API clients).
    Schema {
        /// Which schema.
        #[arg(value_enum, default_value_t = SchemaName::Plan)]
        name: SchemaName,
    },
    /// Print shell completions, e.g. `gameplan completions bash > ~/.local/share/bash-completion/completions/gameplan`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `gameplan man > ~/.local/share/man/man1/gameplan.1`.
    Man {
        /// Write a page for every command (gameplan.1, gameplan-plan-run.1, ...) into DIR instead.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Validate plan files, reporting every problem of each at once.
    ///
    /// Exits 0 only when every file is valid, 3 otherwise. Nothing runs and nothing is charged.
    Check {
        /// Plan files (.toml, .yaml, .yml).
        #[arg(required = true, value_name = "PLAN")]
        plans: Vec<PathBuf>,
        #[command(flatten)]
        load: LoadArgs,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the expanded step graph.
    Graph {
        /// The plan file (.toml, .yaml or .yml).
        #[arg(value_name = "PLAN")]
        plan: PathBuf,
        #[command(flatten)]
        load: LoadArgs,
        /// Output format: text, Graphviz dot, or Mermaid.
        #[arg(long, value_enum, default_value_t = GraphFormat::Text)]
        format: GraphFormat,
    },
    /// Run a plan: reuse what is unchanged, checkpoint every step, resume when interrupted.
    Run {
        /// The plan file (.toml, .yaml or .yml).
        #[arg(value_name = "PLAN")]
        plan: PathBuf,
        /// Run only these steps (a step id, or one cell: `play[kid,jev]`) and what they need.
        #[arg(value_name = "STEP")]
        steps: Vec<String>,
        /// Play only the K-th of N slices of the plan's cells (chosen by a
        /// hash of each cell's id, or by time with --durations) and the
        /// free steps they need, into a
        /// bundle for `plan merge`. A paid plan's job is bought once first,
        /// by `--shard prepare`.
        #[arg(long, value_name = "K/N", value_parser = parse_shard, conflicts_with = "steps")]
        shard: Option<crate::shard::ShardSpec>,
        /// Where --shard writes its bundle (default: <state dir>/shards/K-N,
        /// or shards/prepare for `--shard prepare`). With STEP... instead of
        /// --shard: the named cells' bundle (how a cluster node plays a
        /// batch of cells).
        #[arg(long, value_name = "DIR")]
        bundle: Option<PathBuf>,
        /// A paid plan's shard: the directory `--shard prepare` wrote its
        /// job into (default: <state dir>/shards/prepare). The shard buys
        /// nothing; `plan merge` delivers its cells to that job.
        #[arg(long, value_name = "DIR")]
        prepared: Option<PathBuf>,
        /// With --shard K/N: cut the slices by time, from how long each
        /// cell took when it last played (the durations.json `plan merge`
        /// writes into <state dir>/shards/), so the shards end together.
        /// Every shard must be given the same file.
        #[arg(long, value_name = "FILE", requires = "shard")]
        durations: Option<PathBuf>,
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        run: RunArgs,
        /// Continue the unfinished run of this plan.
        #[arg(long, conflicts_with = "new")]
        resume: bool,
        /// Start a new run even if one of this plan is unfinished.
        #[arg(long)]
        new: bool,
        /// With --new: start it even beside an unfinished run holding a request whose answer never came (it may have been charged; `plan resume` finishes it).
        #[arg(long, requires = "new")]
        abandon_unsettled: bool,
    },
    /// Merge the bundles of a sharded run: check them (same plan, same
    /// gameplan, every cell exactly once), then run the rest of the plan
    /// (a paid plan's deliveries and settlement, aggregate, gates) once
    /// over every cell, playing none again.
    Merge {
        /// The plan file the shards ran.
        #[arg(value_name = "PLAN")]
        plan: PathBuf,
        /// The bundle directories the shards wrote (and a paid plan's
        /// prepare bundle; default: <state dir>/shards/prepare).
        #[arg(value_name = "BUNDLE", required = true)]
        bundles: Vec<PathBuf>,
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Resume an interrupted run (the newest unfinished one without RUN_ID).
    Resume {
        #[arg(value_name = "RUN_ID")]
        run_id: Option<String>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Show a run's state and its steps (the newest run without RUN_ID).
    Status {
        #[arg(value_name = "RUN_ID")]
        run_id: Option<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Print one step's log: what its last attempt printed (the newest run without RUN_ID).
    ///
    /// A run keeps every step's output in one file (`runs/<run-id>/steps.log`);
    /// this prints the part of it that is STEP's.
    Log {
        #[arg(value_name = "STEP")]
        step: String,
        #[arg(value_name = "RUN_ID")]
        run_id: Option<String>,
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// List the runs in this repo's state directory: start, duration, steps done, state.
    ///
    /// An unfinished run says whether `plan resume` can continue it.
    Runs {
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Ask a live run to stop: it stops its steps, exits 10 and can be resumed.
    Stop {
        #[arg(value_name = "RUN_ID")]
        run_id: String,
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Show every expanded step: id, kind, what it needs, and whether it will run.
    ///
    /// Sends nothing and charges nothing.
    Explain {
        /// The plan file (.toml, .yaml or .yml).
        #[arg(value_name = "PLAN")]
        plan: PathBuf,
        /// Explain only these steps (a step id, or one cell) and what they need.
        #[arg(value_name = "STEP")]
        steps: Vec<String>,
        #[command(flatten)]
        load: LoadArgs,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// Where the store of earlier results is (default: .gameplan/ at the repo root).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Print accounts and balances (with the sum that proves each), jobs, runs and settlements.
    Show {
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        file: LedgerFile,
    },
    /// Add CENTS to ACCOUNT's balance.
    Topup {
        /// The account id (`gameplan ledger show` lists them).
        #[arg(value_name = "ACCOUNT")]
        account: String,
        /// A positive number of cents: 500 is $5.00.
        #[arg(value_name = "CENTS", allow_negative_numbers = true)]
        cents: i64,
        #[command(flatten)]
        file: LedgerFile,
    },
    /// Create a bearer token and print it on stdout (shown once: only its sha256 is kept),
    /// or revoke one with `--revoke`.
    Token {
        /// What the token may do: playtest:write, playtest:model, playtest:upload.
        #[arg(
            long,
            required_unless_present = "revoke",
            value_delimiter = ',',
            value_name = "SCOPE,..."
        )]
        scopes: Vec<String>,
        /// Revoke this token (`-` reads it from stdin, out of the shell's history): every
        /// call with it is refused (401) from now on.
        #[arg(long, value_name = "TOKEN", conflicts_with = "scopes")]
        revoke: Option<String>,
        /// The account the token acts for; a new one is created with a zero balance.
        #[arg(long, value_name = "ID", default_value = "demo")]
        account: String,
        #[command(flatten)]
        file: LedgerFile,
    },
}

/// Which ledger file a `ledger` command works on.
#[derive(Debug, Args, Clone, Default)]
pub struct LedgerFile {
    /// The ledger file (default: ledger.sqlite in the state directory; created on first use).
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// The state directory (default: .gameplan/ at the repo root).
    #[arg(long, value_name = "DIR", conflicts_with = "db")]
    pub state_dir: Option<PathBuf>,
}

fn parse_shard(text: &str) -> Result<crate::shard::ShardSpec, String> {
    crate::shard::ShardSpec::parse(text)
}

/// `--color`: when output is coloured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless NO_COLOR is set; CLICOLOR_FORCE=1 forces it.
    #[default]
    Auto,
    /// Always, also into a pipe or file (NO_COLOR notwithstanding).
    Always,
    /// Never.
    Never,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GraphFormat {
    Text,
    Dot,
    Mermaid,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SchemaName {
    Plan,
    /// dispositions.toml beside a plan: accepted findings with an expiry.
    Dispositions,
    /// The report that plan run --json prints.
    Run,
    /// Bridge protocol v1: the messages between gameplan and a game.
    Bridge,
    /// report.json of a play cell.
    Report,
    /// aggregate.json of an aggregate step.
    Aggregate,
    /// The backend API's requests, responses and error body (under $defs).
    Api,
    /// review.json of a gate step.
    Review,
}

/// Runs the command `cli` parsed; its failure says why and carries its exit code.
pub fn dispatch(cli: Cli, cx: &Context) -> Done {
    match cli.command {
        Command::Plan(command) => plan(command, cx),
        Command::Report {
            run_id,
            out,
            open,
            state_dir,
        } => report::run(
            cx,
            run_id.as_deref(),
            out.as_deref(),
            open,
            state_dir.as_deref(),
        ),
        Command::Check {
            plan,
            load,
            state_dir,
            json,
        } => check::run(cx, plan.as_deref(), &load, state_dir.as_deref(), json),
        Command::Gc {
            keep_runs,
            max_store,
            include_unfinished,
            dry_run,
            json,
            state_dir,
        } => gc::run(
            cx,
            &gc::GcArgs {
                keep_runs,
                max_store,
                include_unfinished,
                dry_run,
                json,
                state_dir: state_dir.as_deref(),
            },
        ),
        Command::Launch { slots } => crate::steps::launcher::serve(slots),
        Command::Game { name } => game::run(&name),
        Command::Ledger(command) => ledger::run(cx, &command),
        Command::Serve {
            addr,
            demo,
            limits,
            hosting,
            file,
        } => serve::run(
            cx,
            &addr,
            &serve::Settings {
                demo,
                limits,
                hosting,
            },
            &file,
        ),
        Command::Hosted { command } => hosted::run(cx, command),
        // Neither can fail: they print what this binary holds.
        Command::Schema { name } => {
            schema::run(cx, name);
            Ok(())
        }
        Command::Completions { shell } => {
            shell::completions(cx, shell);
            Ok(())
        }
        Command::Man { out } => shell::man(cx, out.as_deref()),
        command @ (Command::Replay { .. }
        | Command::Shrink { .. }
        | Command::GameExec { .. }
        | Command::PlayCell(_)
        | Command::Simulate { .. }) => play::dispatch(cx, command),
    }
}

/// `gameplan plan …`.
fn plan(command: PlanCommand, cx: &Context) -> Done {
    match command {
        PlanCommand::Check { plans, load, json } => plan_check::run(cx, &plans, &load, json),
        PlanCommand::Graph { plan, load, format } => plan_graph::run(cx, &plan, &load, format),
        PlanCommand::Explain {
            plan,
            steps,
            load,
            json,
            state_dir,
        } => plan_explain::run(cx, &plan, &steps, &load, json, state_dir.as_deref()),
        PlanCommand::Run {
            plan,
            steps,
            shard,
            bundle,
            prepared,
            durations,
            load,
            run,
            resume,
            new,
            abandon_unsettled,
        } => match (shard, bundle) {
            (Some(spec), bundle) => {
                let choice = plan_run::Choice::from_flags(resume, new, abandon_unsettled);
                let pick = plan_shard::Pick::Shard(spec);
                let dirs = plan_shard::Dirs {
                    bundle: bundle.as_deref(),
                    prepared: prepared.as_deref(),
                    durations: durations.as_deref(),
                };
                plan_shard::run(cx, &plan, &load, &run, choice, pick, dirs)
            }
            (None, Some(bundle)) => {
                let choice = plan_run::Choice::from_flags(resume, new, abandon_unsettled);
                let pick = plan_shard::Pick::Cells(steps);
                let dirs = plan_shard::Dirs {
                    bundle: Some(&bundle),
                    prepared: prepared.as_deref(),
                    durations: None,
                };
                plan_shard::run(cx, &plan, &load, &run, choice, pick, dirs)
            }
            (None, None) => start::run(
                cx,
                &plan,
                &steps,
                &load,
                &run,
                plan_run::Choice::from_flags(resume, new, abandon_unsettled),
            ),
        },
        PlanCommand::Merge {
            plan,
            bundles,
            load,
            run,
        } => plan_shard::merge(cx, &plan, &bundles, &load, &run),
        PlanCommand::Resume { run_id, run } => start::resume(cx, run_id.as_deref(), &run),
        PlanCommand::Status {
            run_id,
            json,
            state_dir,
        } => plan_runs::status(cx, run_id.as_deref(), json, state_dir.as_deref()),
        PlanCommand::Log {
            step,
            run_id,
            state_dir,
        } => plan_runs::log(cx, &step, run_id.as_deref(), state_dir.as_deref()),
        PlanCommand::Runs { json, state_dir } => {
            // Listing cannot fail: an unreadable run is a row saying so.
            plan_runs::list(cx, json, state_dir.as_deref());
            Ok(())
        }
        PlanCommand::Stop { run_id, state_dir } => {
            plan_runs::stop(cx, &run_id, state_dir.as_deref())
        }
    }
}

/// `gameplan play`'s settings of an `llm` player (a plan's `player = { kind
/// = "llm", … }` and `budget.max_model_usd`, as flags).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LlmPlayerArgs {
    /// llm: the persona card the model plays (its text).
    #[arg(long, value_name = "TEXT", conflicts_with = "card_file")]
    pub card: Option<String>,
    /// llm: the persona card, from a file.
    #[arg(long, value_name = "FILE")]
    pub card_file: Option<PathBuf>,
    /// llm: the model, e.g. gpt-4o-mini, or what a local server serves.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// llm: the OpenAI-compatible endpoint [default: https://api.openai.com/v1].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// llm: the environment variable holding the API key [default: GAMEPLAN_LLM_KEY; unset:
    /// no key is sent, as a local server wants].
    #[arg(long, value_name = "NAME")]
    pub api_key_env: Option<String>,
    /// llm: USD per million input tokens (with --price-output; overrides the built-in table).
    #[arg(long, value_name = "USD", requires = "price_output")]
    pub price_input: Option<f64>,
    /// llm: USD per million output tokens.
    #[arg(long, value_name = "USD", requires = "price_input")]
    pub price_output: Option<f64>,
    /// llm: stop the cell when its model calls have cost this much (a plan's
    /// budget.max_model_usd); needs a known price.
    #[arg(long, value_name = "USD")]
    pub max_model_usd: Option<f64>,
    /// llm: a minijinja prompt template instead of the built-in one (a plan's prompt_file).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    /// llm: who moves after the model answered badly twice: explorer, random, or stop (the
    /// cell ends bad_answer) [default: explorer].
    #[arg(long, value_name = "WHO", value_parser = ["explorer", "random", "stop"])]
    pub fallback: Option<String>,
    /// llm: never ask for structured output (a JSON Schema of the listed actions), even where
    /// the server takes it.
    #[arg(long)]
    pub no_structured: bool,
}
