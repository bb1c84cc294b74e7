//! Which driver plays a game and what it starts: the one place that names
//! the drivers (the `drivers!` table below, giving [`Driver`]), and the
//! [`GameTarget`] a plan's `[game]`, a trace's header and `gameplan play`'s
//! flags all come to.
//!
//! A target is written flat, as plans and traces write it (`driver`,
//! `command`, `url`, `serve`, …): [`WrittenTarget`] is that shape, and
//! [`GameTarget`]'s serde form, so a trace's header reads into a target and
//! the plan's checked keys become one through the same conversion. Parsing
//! (`plan::raw`), the plan schema, the validator, the trace, the pools and
//! `gameplan check` read the table; `play::driver` starts what a target
//! says. docs/contributing.md › Adding a driver lists what a new one touches.
//!
//! On the ground floor, importing no room: `plan` holds a target in its
//! model and `play` starts one, so neither may own it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a driver's game is started from: the `[game]` key it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Starts {
    /// A program: `command`, an argv.
    Program,
    /// A page: `url`.
    Page,
}

impl Starts {
    /// The `[game]` key (and trace field) that names it.
    pub fn key(self) -> &'static str {
        match self {
            Starts::Program => "command",
            Starts::Page => "url",
        }
    }

    /// The key in words, for an error that says it is missing.
    pub fn what(self) -> &'static str {
        match self {
            Starts::Program => "the game's `command`",
            Starts::Page => "the page's `url`",
        }
    }

    /// How to write the key, for a diagnostic's help.
    pub fn example(self) -> &'static str {
        match self {
            Starts::Program => {
                "add `command = [\"./build/game\", \"--bridge\"]`, or [\"builtin:maze\"] for the built-in game"
            }
            Starts::Page => "add `url = \"http://127.0.0.1:8080/\"`",
        }
    }
}

/// What gameplan knows of a driver besides how it plays (that is
/// `play::driver`'s).
#[derive(Debug)]
pub struct DriverRow {
    /// Its name, as plans (`driver = "…"`) and traces write it.
    pub name: &'static str,
    /// What it plays, in a few words.
    pub plays: &'static str,
    /// The key that names what it starts.
    pub starts: Starts,
    /// The `[game]` keys only it (and drivers listing them too) takes,
    /// besides its `starts` key: a plan giving one to another driver is
    /// refused.
    pub keys: &'static [&'static str],
    /// The resource pool one of its games takes a slot of (`[pools]`).
    pub pool: &'static str,
    /// Whether it needs chromedriver and Chromium (`gameplan check`).
    pub browser: bool,
}

/// The drivers, each once: its name, its variant and its row. Generates
/// [`Driver`], [`Driver::ALL`] (name and variant, what parsing matches)
/// and [`Driver::row`].
macro_rules! drivers {
    ($($name:literal => $variant:ident { $($field:ident: $value:expr),* $(,)? }),* $(,)?) => {
        /// A driver: how gameplan talks to a game. The first is the default.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Driver {
            $($variant),*
        }

        /// The rows, in the enum's order.
        const ROWS: &[DriverRow] = &[$(DriverRow { name: $name, $($field: $value),* }),*];

        impl Driver {
            /// Every driver with its name, in the table's order.
            pub const ALL: &[(&'static str, Driver)] = &[$(($name, Driver::$variant)),*];
        }
    };
}

drivers! {
    "stdio" => Stdio {
        plays: "a process speaking the JSON-lines bridge",
        starts: Starts::Program,
        keys: &["limits"],
        pool: "play",
        browser: false,
    },
    "webdriver" => Webdriver {
        plays: "a page in headless Chromium",
        starts: Starts::Page,
        keys: &["webdriver_url", "serve", "allow", "keys", "viewport", "probe", "load_timeout"],
        pool: "browser",
        browser: true,
    },
}

impl Driver {
    /// What the table says of it.
    pub fn row(self) -> &'static DriverRow {
        // The rows are generated in the enum's order.
        &ROWS[self as usize]
    }

    /// Its name, as plans and traces write it.
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// The driver named `name`.
    pub fn from_name(name: &str) -> Option<Driver> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
    }

    /// Whether `key` (a `[game]` key) is this driver's: its `starts` key,
    /// one of its own, or one every driver takes.
    pub fn takes(self, key: &str) -> bool {
        let row = self.row();
        row.starts.key() == key
            || row.keys.contains(&key)
            || ROWS.iter().all(|r| !r.keys.contains(&key))
    }

    /// The drivers that take `key`, by name (`webdriver`, `a and b`).
    pub fn takers(key: &str) -> String {
        let names: Vec<&str> = Self::ALL
            .iter()
            .filter(|(_, d)| d.row().keys.contains(&key) || d.row().starts.key() == key)
            .map(|(n, _)| *n)
            .collect();
        names.join(" and ")
    }

    /// Every name, for a message (`stdio and webdriver`).
    pub fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
        names.join(" and ")
    }
}

impl Default for Driver {
    fn default() -> Self {
        Self::ALL[0].1
    }
}

impl Serialize for Driver {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl schemars::JsonSchema for Driver {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Driver".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
        let told: Vec<String> = Self::ALL
            .iter()
            .map(|(name, driver)| {
                let default = if *driver == Driver::default() {
                    " (default)"
                } else {
                    ""
                };
                format!("`{name}`{default}: {}", driver.row().plays)
            })
            .collect();
        let description = format!("{}.", told.join("; "));
        schemars::json_schema!({"description": description, "type": "string", "enum": names})
    }
}

/// The window a browser game gets unless `game.viewport` says otherwise.
pub const DEFAULT_VIEWPORT: (u32, u32) = (1280, 800);

/// Seconds a browser game's first page may take to load, by default.
pub const DEFAULT_LOAD_TIMEOUT: u64 = 30;

/// Which driver plays a game and what it starts: said once, here. A new
/// driver is a variant, and the compiler points at every place that must
/// tell the drivers apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "WrittenTarget", into = "WrittenTarget")]
pub enum GameTarget {
    /// A process on the JSON-lines stdio bridge. The argv: a program on
    /// `PATH`, a repo-relative path, an absolute path, or `builtin:NAME`
    /// (this gameplan as `gameplan game NAME`).
    Stdio { command: Vec<String> },
    /// A page in a browser over WebDriver (`driver = "webdriver"`).
    Browser(BrowserGame),
}

impl GameTarget {
    /// The driver that plays it.
    pub fn driver(&self) -> Driver {
        match self {
            GameTarget::Stdio { .. } => Driver::Stdio,
            GameTarget::Browser(_) => Driver::Webdriver,
        }
    }

    /// The argv of a game started as a program; a page has none.
    pub fn command(&self) -> &[String] {
        match self {
            GameTarget::Stdio { command } => command,
            GameTarget::Browser(_) => &[],
        }
    }

    /// The page a browser game opens.
    pub fn browser(&self) -> Option<&BrowserGame> {
        match self {
            GameTarget::Stdio { .. } => None,
            GameTarget::Browser(page) => Some(page),
        }
    }

    /// What it starts, in one line: the command as written (`builtin:NAME`
    /// stays as is), or the page.
    pub fn text(&self) -> String {
        match self {
            GameTarget::Stdio { command } => command.join(" "),
            GameTarget::Browser(browser) => browser.url.clone(),
        }
    }
}

/// What the `webdriver` driver opens (see `play::webdriver`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserGame {
    /// The page: an `http(s)://` or `file://` URL, or a repo-relative path
    /// (opened as a `file://` URL under the repo root), or with `serve` a
    /// path inside the served directory.
    pub url: String,
    /// A WebDriver server to use instead of starting chromedriver.
    pub webdriver_url: Option<String>,
    /// A repo directory served on a free loopback port for the session.
    pub serve: Option<String>,
    /// URL patterns in scope besides the page's origin (`*` within a path
    /// part, `**` across parts).
    pub allow: Vec<String>,
    /// Keys offered on every page.
    pub keys: Vec<String>,
    /// The page's inner width and height (and the screenshots').
    pub viewport: (u32, u32),
    /// A JavaScript expression evaluated with every observation: its
    /// value (as JSON) is the observation's `state`.
    pub probe: Option<String>,
    /// How long the first page load may take (not a hang: a slow start).
    pub load_timeout: Duration,
}

impl BrowserGame {
    /// The page at `url` with every other setting at its default.
    pub fn at(url: String) -> BrowserGame {
        BrowserGame {
            url,
            webdriver_url: None,
            serve: None,
            allow: Vec::new(),
            keys: Vec::new(),
            viewport: DEFAULT_VIEWPORT,
            probe: None,
            load_timeout: Duration::from_secs(DEFAULT_LOAD_TIMEOUT),
        }
    }
}

/// A target as plans and traces write it: the driver's name and every
/// driver's keys, flat. The field order is a trace header's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WrittenTarget {
    pub driver: String,
    /// A program's argv (absent for a page).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// A browser game's page, as the plan wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The WebDriver server the plan named, if it did not leave starting
    /// chromedriver to gameplan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webdriver_url: Option<String>,
    /// A browser game's served directory (`game.serve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<String>,
    /// A browser game's extra scope (`game.allow`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// A browser game's keys offered on every page (`game.keys`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// A browser game's window, `[width, height]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewport: Option<(u32, u32)>,
    /// A browser game's probe (`game.probe`): its value is the state
    /// every observation hash covers, so a replay reads the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    /// Seconds a browser game's first page load may take (`game.load_timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_timeout: Option<f64>,
}

/// Why written keys make no target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("driver `{0}` is not known (this gameplan plays {names})", names = Driver::names())]
    UnknownDriver(String),
    #[error("a `{}` game needs {}", .0.name(), .0.row().starts.what())]
    Missing(Driver),
}

impl TryFrom<WrittenTarget> for GameTarget {
    type Error = TargetError;

    fn try_from(written: WrittenTarget) -> Result<GameTarget, TargetError> {
        let driver = Driver::from_name(&written.driver)
            .ok_or_else(|| TargetError::UnknownDriver(written.driver.clone()))?;
        Ok(match driver {
            Driver::Stdio => GameTarget::Stdio {
                command: written.command,
            },
            Driver::Webdriver => GameTarget::Browser(BrowserGame {
                url: written.url.ok_or(TargetError::Missing(driver))?,
                webdriver_url: written.webdriver_url,
                serve: written.serve,
                allow: written.allow,
                keys: written.keys,
                // A trace written before `viewport` played in 800x600 (a
                // plan always gives one).
                viewport: written.viewport.unwrap_or((800, 600)),
                probe: written.probe,
                load_timeout: written
                    .load_timeout
                    .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
                    .unwrap_or(Duration::from_secs(DEFAULT_LOAD_TIMEOUT)),
            }),
        })
    }
}

impl From<GameTarget> for WrittenTarget {
    fn from(target: GameTarget) -> WrittenTarget {
        let driver = target.driver().name().to_owned();
        match target {
            GameTarget::Stdio { command } => WrittenTarget {
                driver,
                command,
                ..WrittenTarget::default()
            },
            GameTarget::Browser(page) => WrittenTarget {
                driver,
                command: Vec::new(),
                url: Some(page.url),
                webdriver_url: page.webdriver_url,
                serve: page.serve,
                allow: page.allow,
                keys: page.keys,
                viewport: Some(page.viewport),
                probe: page.probe,
                load_timeout: Some(page.load_timeout.as_secs_f64()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_driver_is_named_once_in_the_enums_order() {
        for (i, (name, driver)) in Driver::ALL.iter().enumerate() {
            assert_eq!(*driver as usize, i);
            assert_eq!(driver.name(), *name);
            assert_eq!(Driver::from_name(name), Some(*driver));
        }
        assert_eq!(ROWS.len(), Driver::ALL.len());
        assert_eq!(Driver::default(), Driver::Stdio);
    }

    #[test]
    fn a_key_of_one_driver_is_refused_by_another_and_a_shared_key_by_none() {
        assert!(Driver::Webdriver.takes("serve"));
        assert!(!Driver::Stdio.takes("serve"));
        assert!(Driver::Stdio.takes("limits"));
        assert!(!Driver::Webdriver.takes("limits"));
        assert!(Driver::Stdio.takes("env"));
        assert!(Driver::Webdriver.takes("env"));
        assert_eq!(Driver::takers("keys"), "webdriver");
    }

    #[test]
    fn a_target_reads_back_as_it_was_written() {
        let stdio = GameTarget::Stdio {
            command: vec!["builtin:maze".into()],
        };
        let mut page = BrowserGame::at("index.html".into());
        page.serve = Some("web".into());
        page.viewport = (640, 480);
        for target in [stdio, GameTarget::Browser(page)] {
            let json = serde_json::to_string(&target).expect("writes");
            let back: GameTarget = serde_json::from_str(&json).expect("reads");
            assert_eq!(back, target, "{json}");
        }
    }

    #[test]
    fn an_unknown_driver_or_a_page_without_its_url_is_no_target() {
        let err = serde_json::from_str::<GameTarget>(r#"{"driver":"tcp"}"#).expect_err("unknown");
        assert!(
            err.to_string().contains("driver `tcp` is not known"),
            "{err}"
        );
        let err =
            serde_json::from_str::<GameTarget>(r#"{"driver":"webdriver"}"#).expect_err("no url");
        assert!(err.to_string().contains("needs the page's `url`"), "{err}");
    }
}
