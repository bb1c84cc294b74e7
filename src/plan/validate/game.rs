//! The `[game]` table: its driver, command or page, served directory,
//! keys, window, limits and environment, and the program it names.

use std::path::Path;
use std::time::Duration;

use super::Validator;
use crate::game_target::{GameTarget, Starts, WrittenTarget};
use crate::plan::decode::Spanned;
use crate::plan::diagnostic::Diagnostic;
use crate::plan::model::{Driver, Game};
use crate::plan::raw::RawPlan;
use crate::plan::source::Span;

impl Validator<'_> {
    pub(super) fn game(&mut self, raw: &RawPlan, plays: Option<Span>) -> Option<Game> {
        let Some(g) = &raw.game else {
            if let (Some(span), false) = (plays, raw.unreadable.contains(&"game")) {
                // A plan without `steps` gets the default paid pipeline,
                // which plays: a review-only plan written from its lenses
                // and gates alone meets this first, so say how to opt out.
                let help = if raw.steps.is_none() && !raw.gates.is_empty() {
                    "without `steps` a plan runs the default pipeline, which plays the game: add a [game] table with `id` and `command`, or, for a review-only plan, list its gate steps (`[[steps]]` with `id`, `kind = \"gate\"`, `gate = \"NAME\"`)"
                } else {
                    "add a [game] table with `id` and `command` (or `driver = \"webdriver\"` and `url`)"
                };
                self.push(
                    Diagnostic::new(
                        "plan::missing_game",
                        "this plan plays a game but has no [game] table",
                    )
                    .at(span)
                    .label("plays the game")
                    .help(help),
                );
            }
            return None;
        };
        let g = &g.value;
        let driver = g.driver.as_ref().map_or_else(Driver::default, |d| d.value);
        let starts = driver.row().starts;
        let start_given = match starts {
            Starts::Program => g.command.is_some(),
            Starts::Page => g.url.is_some(),
        };
        if !start_given {
            self.push(
                Diagnostic::new(
                    "plan::missing_key",
                    format!(
                        "[game] with the {} driver needs a `{}`",
                        driver.name(),
                        starts.key()
                    ),
                )
                .at(g.id.span)
                .help(starts.example()),
            );
        }
        match &g.command {
            Some(c) if starts == Starts::Program && c.value.is_empty() => {
                self.push(
                    Diagnostic::new("plan::empty_list", "`command` is empty")
                        .at(c.span)
                        .label("no program"),
                );
            }
            Some(c) if starts == Starts::Program => self.game_program(c, g.env.get("PATH")),
            _ => {}
        }
        self.others_keys(g, driver);
        self.webdriver_url(g, driver);
        let viewport = self.browser_keys(g, driver);
        for input in &g.inputs {
            if self.repo_path(input, "input") && self.warn_unmatched_inputs {
                self.unmatched_input(input);
            }
        }
        let limits = self.game_limits(g, driver);
        let goal = self.game_goal(g);
        // The keys as a plan writes them, the one way every target is
        // made; a missing `command` or `url` was reported above.
        let written = WrittenTarget {
            driver: driver.name().to_owned(),
            command: g
                .command
                .as_ref()
                .map(|c| c.value.clone())
                .unwrap_or_default(),
            url: g.url.as_ref().map(|u| u.value.clone()),
            webdriver_url: g.webdriver_url.as_ref().map(|u| u.value.clone()),
            serve: g.serve.as_ref().map(|d| d.value.clone()),
            allow: g.allow.iter().map(|a| a.value.clone()).collect(),
            keys: g.keys.iter().map(|k| k.value.clone()).collect(),
            viewport: Some(viewport),
            probe: g.probe.as_ref().map(|p| p.value.clone()),
            load_timeout: Some(
                Duration::from_secs(
                    g.load_timeout
                        .as_ref()
                        .map_or(crate::plan::model::DEFAULT_LOAD_TIMEOUT, |t| t.value),
                )
                .as_secs_f64(),
            ),
        };
        Some(Game {
            id: g.id.value.clone(),
            target: GameTarget::try_from(written).ok()?,
            inputs: g.inputs.iter().map(|i| i.value.clone()).collect(),
            action_timeout_secs: g.action_timeout.as_ref().map_or(10, |t| t.value),
            stuck_after: g.stuck_after.as_ref().map_or(8, |t| t.value),
            env: g.env.clone(),
            limits,
            goal,
            invariants: Vec::new(),
        })
    }

    /// The keys of `[game]` that belong to other drivers than `driver`
    /// (the table in `game_target` says whose), refused.
    fn others_keys(&mut self, g: &crate::plan::raw::RawGame, driver: Driver) {
        let given = [
            ("command", g.command.as_ref().map(|s| s.span)),
            ("url", g.url.as_ref().map(|s| s.span)),
            ("webdriver_url", g.webdriver_url.as_ref().map(|s| s.span)),
            ("limits", g.limits.as_ref().map(|s| s.span)),
            ("probe", g.probe.as_ref().map(|s| s.span)),
            ("load_timeout", g.load_timeout.as_ref().map(|s| s.span)),
            ("serve", g.serve.as_ref().map(|s| s.span)),
            ("allow", g.allow.first().map(|a| a.span)),
            ("keys", g.keys.first().map(|k| k.span)),
            ("viewport", g.viewport.as_ref().map(|v| v.span)),
        ];
        for (key, span) in given {
            let Some(span) = span.filter(|_| !driver.takes(key)) else {
                continue;
            };
            let takers = Driver::takers(key);
            let help = match Driver::from_name(&takers) {
                Some(owner) => format!(
                    "remove it, or set `driver = \"{takers}\"` and `{}`",
                    owner.row().starts.key()
                ),
                None => "remove it".to_owned(),
            };
            self.push(
                Diagnostic::new(
                    "plan::unused_key",
                    format!("`{key}` is only for the {takers} driver"),
                )
                .at(span)
                .label(format!("the {} driver does not read it", driver.name()))
                .help(help),
            );
        }
    }

    /// `webdriver_url`, when the driver takes it: an http:// URL.
    fn webdriver_url(&mut self, g: &crate::plan::raw::RawGame, driver: Driver) {
        if let Some(w) = &g.webdriver_url
            && driver.takes("webdriver_url")
            && !w.value.starts_with("http://")
        {
            self.push(
                Diagnostic::new(
                    "plan::invalid_value",
                    "`webdriver_url` must be an http:// URL of a WebDriver server",
                )
                .at(w.span)
                .label("not http://")
                .help("e.g. `webdriver_url = \"http://127.0.0.1:4444\"`, or remove it to let gameplan start chromedriver"),
            );
        }
    }

    /// `game.goal`: an expression over `obs` and `prev`, checked here so a
    /// typo is a plan error, not a cell that never reaches its goal.
    fn game_goal(&mut self, g: &crate::plan::raw::RawGame) -> Option<String> {
        let goal = g.goal.as_ref()?;
        self.observation_expression(goal, "goal")
            .then(|| goal.value.clone())
    }

    /// `[game] limits`, checked (a stdio game's only; sane minimums) and
    /// with the defaults filled in.
    pub(super) fn game_limits(
        &mut self,
        g: &crate::plan::raw::RawGame,
        driver: Driver,
    ) -> crate::plan::model::GameLimits {
        use crate::plan::raw::Limit;
        let mut limits = crate::plan::model::GameLimits::default();
        // Another driver's `limits` is refused by `others_keys`.
        let Some(raw) = g.limits.as_ref().filter(|_| driver.takes("limits")) else {
            return limits;
        };
        let fields = [
            (
                &raw.value.memory,
                &mut limits.memory,
                16 << 20,
                "memory",
                "16 MiB",
            ),
            (
                &raw.value.address_space,
                &mut limits.address_space,
                16 << 20,
                "address_space",
                "16 MiB",
            ),
            (
                &raw.value.cpu_seconds,
                &mut limits.cpu_seconds,
                1,
                "cpu_seconds",
                "1",
            ),
            (
                &raw.value.processes,
                &mut limits.processes,
                8,
                "processes",
                "8",
            ),
            (
                &raw.value.open_files,
                &mut limits.open_files,
                16,
                "open_files",
                "16",
            ),
        ];
        for (given, slot, least, key, least_text) in fields {
            let Some(given) = given else { continue };
            match given.value {
                Limit::Unlimited => *slot = None,
                Limit::At(n) if n >= least => *slot = Some(n),
                Limit::At(_) => self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("`limits.{key}` is below {least_text}"),
                    )
                    .at(given.span)
                    .label("too small for any game to start")
                    .help(format!(
                        "give at least {least_text}, or \"none\" to lift the limit"
                    )),
                ),
            }
        }
        limits
    }

    /// A stdio game's program resolves as the game's start will resolve
    /// it: `builtin:NAME` is a game shipped in gameplan; a path with a `/`
    /// is an executable file under the repo root (or absolute); a bare name
    /// is an executable on `PATH`. Found here, before anything runs or is
    /// charged, rather than as a failed cell.
    pub(super) fn game_program(
        &mut self,
        command: &Spanned<Vec<String>>,
        game_path: Option<&String>,
    ) {
        use std::os::unix::fs::PermissionsExt;
        let Some(program) = command.value.first() else {
            return;
        };
        let executable = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        let problem = if let Some(name) = program.strip_prefix("builtin:") {
            crate::games::find(name).is_none().then(|| {
                (
                    format!("there is no built-in game `{name}`"),
                    format!(
                        "the built-in games: {}",
                        crate::games::BUILTINS
                            .iter()
                            .map(|b| b.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
        } else if program.contains('/') {
            let path = self.root.join(program);
            (!executable(&path)).then(|| {
                let why = if path.exists() {
                    "is not executable"
                } else {
                    "does not exist"
                };
                (
                    format!("the game's program `{program}` {why}"),
                    format!(
                        "a path in `command` is relative to the repo root {} (build the game first, or `chmod +x` it)",
                        self.root.display()
                    ),
                )
            })
        } else {
            // The game's PATH: `game.env`'s, else the one gameplan runs with
            // (a loader given no environment cannot tell: it does not judge).
            let Some(path) = game_path.or_else(|| self.templates.env().get("PATH")) else {
                return;
            };
            let found = std::env::split_paths(path).any(|dir| executable(&dir.join(program)));
            (!found).then(|| {
                (
                    format!("the game's program `{program}` is not on PATH"),
                    "install it, or give its path (`./build/game`, relative to the repo root)"
                        .to_owned(),
                )
            })
        };
        if let Some((message, help)) = problem {
            self.push(
                Diagnostic::new("plan::missing_program", message)
                    .at(command.span)
                    .label("cannot be started")
                    .help(help),
            );
        }
    }

    /// `serve` names a directory of the repo, and `url` a file in it; a
    /// repo-file `url` without `serve` exists.
    pub(super) fn served_page(&mut self, g: &crate::plan::raw::RawGame) {
        if let Some(dir) = &g.serve
            && self.repo_path(dir, "serve")
        {
            let path = self.root.join(dir.value.as_str());
            if !path.is_dir() {
                self.push(
                    Diagnostic::new(
                        "plan::missing_file",
                        format!("the directory to serve, `{}`, does not exist", dir.value),
                    )
                    .at(dir.span)
                    .label("no such directory")
                    .help(format!(
                        "`serve` names a directory of the repo ({}) holding the built game, e.g. `serve = \"web/dist\"`; build it first",
                        self.root.display()
                    )),
                );
            } else if let Some(url) = &g.url
                && !url.value.contains("://")
                && !path.join(url.value.as_str()).is_file()
            {
                self.push(
                    Diagnostic::new(
                        "plan::missing_file",
                        format!("`{}` is not a file of the served directory `{}`", url.value, dir.value),
                    )
                    .at(url.span)
                    .label("no such file")
                    .help("with `serve`, `url` is a path inside the served directory (e.g. `index.html`)"),
                );
            }
        } else if g.serve.is_none()
            && let Some(url) = &g.url
            && !url.value.contains("://")
            && !url.value.starts_with("about:")
            && !url.value.starts_with("data:")
        {
            self.repo_file(url, "the page");
        }
    }

    /// A page's keys (`serve`, `allow`, `keys`, `viewport`), each checked;
    /// the window to use.
    pub(super) fn browser_keys(
        &mut self,
        g: &crate::plan::raw::RawGame,
        driver: Driver,
    ) -> (u32, u32) {
        // Another driver's page keys are refused by `others_keys`.
        if driver.row().starts != Starts::Page {
            return crate::plan::model::DEFAULT_VIEWPORT;
        }
        self.served_page(g);
        for pattern in &g.allow {
            let ok = ["http://", "https://", "file://"]
                .iter()
                .any(|scheme| pattern.value.starts_with(scheme));
            if !ok {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("`allow` pattern `{}` is not a URL pattern", pattern.value),
                    )
                    .at(pattern.span)
                    .label("no http://, https:// or file://")
                    .help("e.g. `allow = [\"https://cdn.example/**\"]` (`*` within a path part, `**` across parts)"),
                );
            }
        }
        for key in &g.keys {
            let mut chars = key.value.chars();
            let one_char = chars.next().is_some() && chars.next().is_none();
            if !one_char && !crate::plan::model::KEY_NAMES.contains(&key.value.as_str()) {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("`{}` is not a key gameplan presses", key.value),
                    )
                    .at(key.span)
                    .label("unknown key")
                    .help(format!(
                        "a key is one character or one of {}",
                        crate::plan::model::KEY_NAMES.join(", ")
                    )),
                );
            }
        }
        let Some(viewport) = &g.viewport else {
            return crate::plan::model::DEFAULT_VIEWPORT;
        };
        let range = crate::plan::model::VIEWPORT_RANGE;
        match viewport.value[..] {
            [w, h] if range.contains(&w) && range.contains(&h) => (
                u32::try_from(w).unwrap_or(u32::MAX),
                u32::try_from(h).unwrap_or(u32::MAX),
            ),
            _ => {
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        "`viewport` is [WIDTH, HEIGHT] in pixels",
                    )
                    .at(viewport.span)
                    .label(format!(
                        "each side from {} to {}",
                        range.start(),
                        range.end()
                    ))
                    .help("e.g. `viewport = [1280, 800]` (the default)"),
                );
                crate::plan::model::DEFAULT_VIEWPORT
            }
        }
    }
}
