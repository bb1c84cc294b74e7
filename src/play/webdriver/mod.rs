//! The `webdriver` driver: a web game played in headless Chromium through
//! chromedriver (W3C WebDriver, via fantoccini), behind the same
//! [`Driver`](super::driver::Driver) seam as the stdio bridge.
//!
//! Owns starting the browser (chromedriver on a free loopback port, or the
//! plan's `webdriver_url`; headless Chromium with offline flags and a fresh
//! profile per session), what a page's observation is, the action syntax,
//! the page's errors, screenshots, and stopping everything it started. It
//! does not decide what an error means for a finding (`episode` makes
//! `console` findings of [`Seen::console`]) or what to play.
//!
//! # The page as a game
//!
//! - `hello` answers from the session just opened (the browser answered
//!   it); `reset` (re)loads `game.url` from a clean origin and, through
//!   chromedriver, with the page's `Math.random` and
//!   `crypto.getRandomValues` seeded with the cell's seed (`listener.js`)
//!   and its clock virtual (`clock.js`), so a page that draws at random or
//!   shows the time replays; on another WebDriver server the page is not
//!   seeded and keeps real time (`hermetic.rs` owns all this).
//! - The observation: `text` = the page's visible text (cut at [`MAX_TEXT`]
//!   characters; its first line names the place where a player got stuck, so
//!   a page's heading makes a good first line); `actions` = `click:LABEL` per
//!   visible enabled clickable element (a repeated label gets ` #2`, …),
//!   per form field what a person does with it (`select:FIELD=OPTION` per
//!   option, `type:FIELD=VALUE` with a value the field's type accepts,
//!   `set:FIELD=VALUE` for a range, date or color input), `key:Enter`,
//!   `key:Escape` (then `game.keys` and the page's own
//!   `window.gameplan.keys`), and `wait`; `state` = the title, the page's
//!   file name, query and fragment, and each element's label, role and
//!   states (checked, selected, a field's value), never its box (an
//!   animation moves boxes, not the game), or with `game.probe` the probe's
//!   value (the page's facts then under `page`); `screen` = the visual
//!   signature of the observation's screenshot ([`screen`]), so a canvas
//!   game is seen moving; `score` = `window.gameplan.score`. A page may end
//!   the game by setting `window.gameplan.done = true`.
//! - Actions accepted: those offered, `key:NAME` (Enter, Escape, Tab,
//!   Space, Backspace, ArrowUp/Down/Left/Right, or one character),
//!   `type:TEXT` (a script's: into the focused text field, else the first
//!   visible one), `wait` ([`WAIT`] of real time, `hermetic::WAIT_ADVANCE`
//!   more of the page's). An action naming nothing on the page is refused.
//! - The browser's refusals are gameplan's errors: WebDriver refusing an
//!   offered action (not interactable, click intercepted, stale, invalid
//!   argument) is a note, and the action is taken out of that observation
//!   (keyed by its hash before the removal, so a replay reads the same);
//!   never a `refused` or `crash` finding.
//! - The hash covers the observation only: screenshots (but for their
//!   coarse signature) and console errors (what changes by itself, or is
//!   not the game's state) stay out of it, so a trace replays.
//! - Errors: `listener.js` runs in every document before the page's own
//!   scripts (Chrome DevTools' `Page.addScriptToEvaluateOnNewDocument`
//!   through chromedriver; late, after load, on another WebDriver server)
//!   and keeps uncaught errors, rejections, failed requests and
//!   `console.error` calls; each observation takes them ([`MAX_ERRORS`] at
//!   most) into [`Seen::console`], sorted by `page_errors.rs` (a failed
//!   request of the game as a [`FAILED_REQUEST`] line, an error an
//!   unloaded script caused as a note).
//! - Screenshots: one per observation (`step-NNNN.png`, `reset-N.png`;
//!   not the session's first load, which a cell only compares with its
//!   second), taken through DevTools on chromedriver right after the page
//!   is read: the same picture makes the observation's `screen` and is
//!   written (while gameplan goes on; the next command waits for the
//!   write).
//! - Video: each saved screenshot, at half size, is also the next frame
//!   of the cell's video (`video.rs`), ended by [`BrowserSession::finish_video`].
//! - Failures: no answer within `action_timeout` is a `hang`; a crashed
//!   tab, a browser or driver that went away is a `crash`.
//!
//! # Round trips
//!
//! A browser cell's cost over chromedriver's own (session start, one
//! click) is mostly round trips, so each command does one: an observation
//! is one script (title, text, clickable elements and their references);
//! a click goes to the element the observation listed (asked for again
//! only when stale); navigation is WebDriver's own command, not
//! fantoccini's `goto` (which asks for the current URL first); the
//! browser is killed, not asked to quit (its profile is thrown away).
//! `bench/browser.sh` measures the rest.

mod capabilities;
mod chromedriver;
mod hermetic;
mod page_errors;
mod page_view;
mod probe;
mod scope;
mod screen;
mod static_files;
mod video;
pub use video::Ending as VideoEnding;

pub use video::{APNG, WEBM};

#[allow(
    clippy::wildcard_imports,
    reason = "the session's parts, in files of their own"
)]
use capabilities::*;
#[allow(
    clippy::wildcard_imports,
    reason = "the session's parts, in files of their own"
)]
use page_view::*;
use probe::{check_probe, observation_script};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fantoccini::Client;
use fantoccini::elements::Element;
use fantoccini::error::{CmdError, ErrorStatus};
use serde_json::{Value, json};

pub use chromedriver::{
    BROWSER_PACKAGE, BROWSERS, DRIVER_PACKAGE, find_programs, kill_browsers_of_this_process,
};
pub use page_errors::{FAILED_REQUEST, bare_message};

use super::driver::{
    Acted, Answer, BrowserGame, Failure, GameSpec, Hello, Leaked, Refusal, Seen, SpawnError,
};
use super::protocol::{Observation, Op, observation_hash};

/// The page's visible text kept in an observation, in characters.
pub const MAX_TEXT: usize = 4000;
/// Clickable elements listed in an observation.
pub const MAX_ELEMENTS: usize = 60;
/// Page errors taken into one observation (the rest are counted).
pub const MAX_ERRORS: usize = 20;
/// How long `wait` waits in real time (for what the page's clock does not
/// hold: a worker, a request, a CSS animation), besides moving the page's
/// virtual clock on.
pub const WAIT: Duration = Duration::from_millis(500);
/// How long a polite close gets before the processes are killed.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

const LISTENER: &str = include_str!("listener.js");
const PAGE: &str = include_str!("page.js");

/// One browser page being played, and everything started for it.
pub struct BrowserSession {
    client: Client,
    /// `None` when the plan named its own WebDriver server.
    driver: Option<chromedriver::ChromeDriver>,
    url: String,
    timeout: Duration,
    /// What is the game: its origin or directory, and `game.allow`.
    scope: scope::Scope,
    /// `game.keys`: offered on every page.
    keys: Vec<String>,
    /// The served directory's server (`game.serve`), while the session lasts.
    _served: Option<static_files::StaticServer>,
    /// The last page of the game the player was on: where a navigation out
    /// of scope, or a page that failed to load, is taken back to.
    last_good: String,
    /// The game's own window: new tabs and windows are closed.
    window: Option<fantoccini::wd::WindowHandle>,
    /// Windows closed already (a closed tab may still be listed for a
    /// moment after it was closed: it is not a new one).
    closed: Vec<fantoccini::wd::WindowHandle>,
    /// What the session did that is no finding (a tab closed, a way out of
    /// the game undone, an outside resource that could not load): the
    /// cell's report lists them.
    notes: Vec<String>,
    /// The DevTools id of the script installed before each page's own (the
    /// listener with the seed), replaced at each reset.
    installed: Option<String>,
    screenshots: Option<PathBuf>,
    browser_version: String,
    /// The elements the last observation's offers act on, by action
    /// (`click:Go`, `select:Level=Hard`): an action goes to the element
    /// the player saw, without asking the page again.
    clickable: Vec<(String, String)>,
    /// The actions the last observation offered, and that observation's
    /// key (its hash before anything was taken out of it).
    offered: Vec<String>,
    offered_at: String,
    /// Offered actions the browser refused to do (gameplan's own error,
    /// never the game's), by the key of the observation that offered them:
    /// not offered there again. Keyed by the observation, so a replay
    /// that meets the same refusal makes the same observations.
    dropped: HashMap<String, Vec<String>>,
    /// The observation script: the listener, `game.probe` as a function,
    /// and `page.js`.
    script: String,
    /// `game.probe`, when the plan gave one.
    probe: Option<String>,
    /// The last observation's screenshot, still being written: the next
    /// command waits for it, so the write overlaps whatever gameplan does
    /// between two commands (a model choosing, the transcript written).
    pending_shot: Option<tokio::task::JoinHandle<Result<(), Failure>>>,
    /// The cell's video being written (`budget.video`), and `ffmpeg` on
    /// the game's `PATH`, which makes it webm at the end.
    video: Option<std::sync::Arc<std::sync::Mutex<video::Recorder>>>,
    ffmpeg: Option<PathBuf>,
    /// The last frame, being added to the video while play goes on.
    pending_frame: Option<tokio::task::JoinHandle<()>>,
    acts: u64,
    resets: u64,
    /// How long a reset's page load may take (`game.load_timeout`).
    load_timeout: Duration,
    /// The page runs on the virtual clock (`clock.js`, installed through
    /// DevTools before the page's scripts).
    clock: bool,
    /// Virtual time the next read moves on besides
    /// [`hermetic::ACT_ADVANCE`] (what `wait` asked for).
    advance_extra: Duration,
    /// Scripts that could not load since the page was loaded (outside
    /// ones, and the game's own, a finding already): an error they cause
    /// is a note naming them.
    missing_scripts: Vec<String>,
}

impl BrowserSession {
    /// Starts chromedriver and Chromium (or connects to the plan's
    /// WebDriver server) and opens a session; the page is loaded by `reset`.
    pub async fn start(
        spec: &GameSpec,
        game: &BrowserGame,
        artifacts: Option<&Path>,
    ) -> Result<BrowserSession, SpawnError> {
        let served = serve(spec, game).await?;
        let url = match &served {
            Some(static_server) => {
                format!("{}{}", static_server.base, game.url.trim_start_matches('/'))
            }
            None => page_url(&game.url, &spec.root)?,
        };
        let scope = scope::Scope::of(&url, &game.allow);
        let screenshots = screenshots_dir(artifacts)?;
        let timeout = spec.action_timeout;
        let (driver, endpoint, capabilities) = if let Some(external) = &game.webdriver_url {
            (
                None,
                external.clone(),
                external_capabilities(timeout.max(game.load_timeout), game.viewport),
            )
        } else {
            let (program, browser) = find_programs(&spec.env)?;
            let marker = super::stdio::new_marker();
            let tmp = spec.env.get("TMPDIR").map_or("/tmp", String::as_str);
            let profile = Path::new(tmp).join(format!("gameplan-chromium-{marker}"));
            std::fs::create_dir_all(&profile).map_err(|e| {
                SpawnError::Browser(format!("cannot create {}: {e}", profile.display()))
            })?;
            let caps = chromium_capabilities(
                &browser,
                &profile,
                timeout.max(game.load_timeout),
                game.viewport,
            );
            // From here the driver owns the profile: it is removed however
            // the session ends (stopped, failed to start, or dropped).
            let driver =
                chromedriver::ChromeDriver::start(&program, &spec.env, &marker, profile).await?;
            let endpoint = driver.url();
            (Some(driver), endpoint, caps)
        };
        let (client, driver) = chromedriver::connect(capabilities, &endpoint, driver).await?;
        let browser_version = client
            .capabilities()
            .and_then(|c| c.get("browserVersion"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let window = client.window().await.ok();
        if let Some(probe) = &game.probe
            && let Err(why) = check_probe(&client, probe, timeout).await
        {
            if let Some(driver) = driver {
                driver.stop().await;
            }
            return Err(SpawnError::Browser(why));
        }
        let clock = driver.is_some();
        let mut session = BrowserSession {
            client,
            driver,
            last_good: url.clone(),
            url,
            timeout,
            scope,
            keys: game.keys.clone(),
            _served: served,
            window,
            closed: Vec::new(),
            notes: Vec::new(),
            installed: None,
            screenshots,
            browser_version,
            clickable: Vec::new(),
            offered: Vec::new(),
            offered_at: String::new(),
            dropped: HashMap::new(),
            script: observation_script(game.probe.as_deref()),
            probe: game.probe.clone(),
            pending_shot: None,
            video: video::Recorder::of(spec.video, artifacts),
            ffmpeg: chromedriver::on_path("ffmpeg", spec.env.get("PATH").map(String::as_str)),
            pending_frame: None,
            acts: 0,
            resets: 0,
            load_timeout: game.load_timeout.max(timeout),
            clock,
            advance_extra: Duration::ZERO,
            missing_scripts: Vec::new(),
        };
        session.fit_viewport(game.viewport).await;
        // The listener is installed before each page's scripts at each
        // reset (with the seed); where the server is no chromedriver, the
        // observation script installs it late (after load) instead.
        Ok(session)
    }

    /// The browser answered when the session opened (no round trip more):
    /// its name and version stand for the game's.
    #[expect(
        clippy::unused_async,
        reason = "the Driver seam's hello is async; a stdio game's answers over its pipe"
    )]
    pub async fn hello(&mut self) -> Answer<Hello> {
        Ok(Ok(Hello {
            name: "chromium".to_owned(),
            version: self.browser_version.clone(),
        }))
    }

    /// Loads the page afresh (storage cleared), its randomness seeded with
    /// `seed`, and observes it. A page that does not load (HTTP >= 400, a
    /// network error, the browser's error page) is a failure: the game did
    /// not start.
    pub async fn reset(&mut self, seed: i64) -> Answer<Seen> {
        self.finish_screenshot(Op::Reset).await?;
        self.resets += 1;
        if self.resets > 1 {
            // What the page kept (a saved game, a cookie, a worker) would
            // make it start elsewhere. (The first load has a fresh profile.)
            self.clear_origin().await?;
        }
        self.install_listener(seed).await?;
        self.missing_scripts.clear();
        self.advance_extra = Duration::ZERO;
        let client = self.client.clone();
        let url = self.url.clone();
        // A page load may take `game.load_timeout`: slow is not hung.
        let load = within(Op::Reset, self.load_timeout, async move {
            navigate(&client, &url).await
        })
        .await;
        if let Err(Failure::Hang { .. }) = load {
            return Err(Failure::Hang {
                during: Op::Reset,
                waited: self.load_timeout,
            });
        }
        load?;
        // A cell loads the page twice before it plays (the determinism
        // check) and plays from the second load: the first is compared,
        // never played, so it is not photographed.
        let name = (self.resets > 1 || self.acts > 0).then(|| format!("reset-{}.png", self.resets));
        let (observed, _, mut load) = self.observe(Op::Reset, name.as_deref()).await?;
        if load.href.starts_with("chrome-error://") {
            // The error page hides the address: it is the game's page.
            load.href.clone_from(&self.url);
            load.unreachable = true;
        }
        if let Some(why) = load.failed() {
            return Err(Failure::Violation {
                during: Op::Reset,
                reason: format!("the page did not load: {why}"),
                evidence: String::new(),
                stderr_tail: String::new(),
            });
        }
        self.last_good = load.href;
        Ok(Ok(observed))
    }

    /// What the session noted that is no finding, for the cell's report.
    pub fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) && self.notes.len() < 50 {
            self.notes.push(note);
        }
    }

    /// Closes every window but the game's and goes back to it: a link or a
    /// script that opened a tab does not take the play away.
    async fn close_other_windows(&mut self, action: &str) -> Result<(), Failure> {
        let Some(game) = self.window.clone() else {
            return Ok(());
        };
        let client = self.client.clone();
        let windows = self.within(Op::Act, client.windows()).await?;
        if windows.len() <= 1 {
            return Ok(());
        }
        let mut opened = false;
        for other in windows.into_iter().filter(|w| *w != game) {
            opened |= !self.closed.contains(&other);
            let _ = self
                .within(Op::Act, client.switch_to_window(other.clone()))
                .await;
            let _ = self.within(Op::Act, client.close_window()).await;
            self.closed.push(other);
        }
        self.within(Op::Act, client.switch_to_window(game)).await?;
        if opened {
            self.note(format!(
                "`{action}` opened a new tab or window; it was closed and play went on in the game's tab"
            ));
        }
        Ok(())
    }

    /// Does `action` (see the module doc for the syntax) and observes.
    pub async fn act(&mut self, action: &str) -> Answer<Acted> {
        self.finish_screenshot(Op::Act).await?;
        self.acts += 1;
        let parsed = match Action::parse(action) {
            Ok(parsed) => parsed,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if let Err(refusal) = self.perform(action, &parsed).await? {
            if !self.offered.iter().any(|a| a == action) {
                return Ok(Err(refusal));
            }
            // The browser would not do what gameplan offered (WebDriver
            // refused the command): gameplan's error, not the game's. It is
            // noted, and not offered again at that observation.
            self.note(format!(
                "the browser would not do the offered `{action}` ({}); gameplan no longer offers \
                 it on that screen",
                refusal.error
            ));
            self.dropped
                .entry(self.offered_at.clone())
                .or_default()
                .push(action.to_owned());
        }
        if matches!(parsed, Action::Click(_) | Action::Select(_)) {
            self.close_other_windows(action).await?;
        }
        let name = format!("step-{:04}.png", self.acts);
        let (mut seen, mut done, mut load) = self.observe(Op::Act, Some(&name)).await?;
        if load.href.starts_with("chrome-error://") {
            // The browser's error page hides where the action led: the
            // session's URL is the address that could not be reached.
            let client = self.client.clone();
            if let Ok(target) = self.within(Op::Act, client.current_url()).await {
                let target = target.to_string();
                load.in_scope = self.scope.contains(&target);
                load.href = target;
                load.unreachable = true;
            }
        }
        let mut events = Vec::new();
        let back = if !load.in_scope {
            let offline = if load.unreachable {
                " (which could not be reached: offline?)"
            } else {
                ""
            };
            self.note(format!(
                "`{action}` left the game for {}{offline}; gameplan went back to {}",
                load.href, self.last_good
            ));
            true
        } else if let Some(why) = load.failed() {
            events.push(super::protocol::Event {
                kind: super::protocol::EventKind::Error,
                message: format!("a page of the game did not load after `{action}`: {why}"),
            });
            true
        } else {
            self.last_good.clone_from(&load.href);
            false
        };
        if back {
            let client = self.client.clone();
            let to = self.last_good.clone();
            self.finish_screenshot(Op::Act).await?;
            self.within(Op::Act, async move { navigate(&client, &to).await })
                .await?;
            let again = self.observe(Op::Act, Some(&name)).await?;
            (seen, done) = (again.0, again.1);
        }
        Ok(Ok(Acted {
            seen,
            reward: 0.0,
            done,
            events,
        }))
    }

    /// Nothing: a page has no stderr (its errors are `console` findings,
    /// and chromedriver's output goes into a start error, where it helps).
    pub fn stderr_tail(&self) -> String {
        String::new()
    }

    /// Stops the browser: a browser gameplan started is killed with
    /// chromedriver (its profile is thrown away, so a graceful quit would
    /// only cost a quarter second per cell), and the profile removed (see
    /// [`chromedriver::ChromeDriver::stop`]). A session on the plan's own
    /// WebDriver server is closed. Nothing started here outlives gameplan.
    pub async fn shutdown(mut self, _polite: bool) -> Vec<Leaked> {
        // The last observation's screenshot is evidence: it is written
        // before the browser goes (within the action timeout).
        let _ = self.finish_screenshot(Op::Close).await;
        match self.driver {
            Some(driver) => driver.stop().await,
            None => {
                let _ = tokio::time::timeout(CLOSE_WITHIN, self.client.clone().close()).await;
            }
        }
        Vec::new()
    }

    /// Does `action` (as written: `spelled`). `Ok(Err(_))`: the page has
    /// nothing it names, or WebDriver refused the command (an element
    /// hidden, covered, gone, or one it cannot act on); a browser that
    /// crashed, went away or hung is the `Err`.
    async fn perform(
        &mut self,
        spelled: &str,
        action: &Action,
    ) -> Result<Result<(), Refusal>, Failure> {
        let client = self.client.clone();
        match action {
            Action::Click(_) | Action::Select(_) | Action::Set(_) | Action::Type(_) => {
                // The element the last observation offered this for;
                // asked for again only when the page replaced it since.
                let seen = self
                    .clickable
                    .iter()
                    .find(|(a, _)| a == spelled)
                    .map(|(_, id)| Element::from_element_id(client.clone(), id.clone().into()));
                if let Some(element) = seen {
                    match self.act_on(&element, spelled, action).await? {
                        Err((ErrorStatus::StaleElementReference, _)) => {}
                        done => return Ok(done.map_err(|(_, error)| Refusal { error })),
                    }
                }
                let found = self
                    .within(Op::Act, find(&client, "find", spelled, &self.scope))
                    .await?;
                let done = match (found, action) {
                    (Some(element), _) => self.act_on(&element, spelled, action).await?,
                    // A bare `type:TEXT` (a script's): into the focused
                    // text field, else the first one.
                    (None, Action::Type(text)) => {
                        let field = self
                            .within(Op::Act, find(&client, "input", "", &self.scope))
                            .await?;
                        let Some(field) = field else {
                            return Ok(Err(Refusal {
                                error: "no text field on the page to type into".to_owned(),
                            }));
                        };
                        self.type_into(&field, text).await?
                    }
                    (None, _) => {
                        return Ok(Err(Refusal {
                            error: format!("nothing on the page answers to `{spelled}`"),
                        }));
                    }
                };
                Ok(done.map_err(|(_, error)| Refusal { error }))
            }
            Action::Key(key) => {
                self.press(*key).await?;
                Ok(Ok(()))
            }
            Action::Wait => {
                // The page's time moves on (its sound and video with it),
                // and real time for what the clock does not hold.
                if self.clock {
                    self.advance_extra += hermetic::WAIT_ADVANCE;
                }
                tokio::time::sleep(WAIT).await;
                Ok(Ok(()))
            }
        }
    }

    /// Does `action` on `element`, the one it names: a click (a
    /// `<select>`'s option is clicked: WebDriver chooses it and fires
    /// `input` and `change`, as a person's choice does), the field's value
    /// replaced by the text after `=`, or set by script.
    async fn act_on(
        &self,
        element: &Element,
        spelled: &str,
        action: &Action,
    ) -> Result<Result<(), (ErrorStatus, String)>, Failure> {
        let value = spelled
            .split_once(':')
            .and_then(|(_, rest)| rest.split_once('='))
            .map_or("", |(_, value)| value);
        match action {
            Action::Type(_) => self.type_into(element, value).await,
            Action::Set(_) => {
                let client = self.client.clone();
                let args = vec![
                    serde_json::to_value(element).unwrap_or(Value::Null),
                    json!(value),
                ];
                self.within_refusable(async move {
                    client
                        .execute(
                            "var el = arguments[0]; el.focus(); el.value = arguments[1]; \
                             el.dispatchEvent(new Event('input', {bubbles: true})); \
                             el.dispatchEvent(new Event('change', {bubbles: true}));",
                            args,
                        )
                        .await
                        .map(drop)
                })
                .await
            }
            _ => self.within_refusable(element.click()).await,
        }
    }

    /// Replaces the value of `field` with `text`.
    async fn type_into(
        &self,
        field: &Element,
        text: &str,
    ) -> Result<Result<(), (ErrorStatus, String)>, Failure> {
        self.within_refusable(async {
            field.clear().await?;
            field.send_keys(text).await
        })
        .await
    }

    /// The page's errors since the last read as `console` lines (failed
    /// requests among them), and what is no finding as notes: what an
    /// outside or missing script caused, what was still in flight.
    fn page_errors(&mut self, view: &PageView) -> Vec<String> {
        let own_scripts = view.failed.iter().filter(|f| f.kind == "script");
        for url in view
            .offline_scripts
            .iter()
            .chain(own_scripts.map(|f| &f.url))
        {
            if !self.missing_scripts.contains(url) {
                self.missing_scripts.push(url.clone());
            }
        }
        let sorted = page_errors::sort(&view.errors, &view.failed, &self.missing_scripts);
        for note in sorted.notes {
            self.note(note);
        }
        for what in &view.pending {
            self.note(format!(
                "still in flight when the page was read ({} s after the action, the most a read \
                 waits): {what}",
                hermetic::REQUESTS_WITHIN.as_secs()
            ));
        }
        let mut console = sorted.console;
        if console.len() > MAX_ERRORS {
            let more = console.len() - MAX_ERRORS;
            console.truncate(MAX_ERRORS);
            console.push(format!("… and {more} more errors"));
        }
        console
    }

    /// Reads the page (after it settled), takes its screenshot (its visual
    /// signature is part of the observation; the same picture is saved as
    /// `shot`, if any), and makes the observation; also whether the page
    /// said it is done.
    async fn observe(
        &mut self,
        during: Op,
        shot: Option<&str>,
    ) -> Result<(Seen, bool, Load), Failure> {
        let script = self.script.clone();
        let advance = hermetic::ACT_ADVANCE + std::mem::take(&mut self.advance_extra);
        let request = json!({
            "mode": "observe",
            "maxText": MAX_TEXT,
            "maxElements": MAX_ELEMENTS,
            "scope": self.scope.for_page(),
            "advanceMs": hermetic::ms(advance),
            "requestsMs": hermetic::ms(hermetic::REQUESTS_WITHIN),
        });
        let client = self.client.clone();
        let raw = self
            .within(during, async move {
                client.execute_async(&script, vec![request]).await
            })
            .await?;
        let view: PageView = serde_json::from_value(raw).map_err(|e| Failure::Violation {
            during,
            reason: format!("the page could not be read: {e}"),
            evidence: String::new(),
            stderr_tail: String::new(),
        })?;
        // The picture of the page just read, before anything else is
        // asked of it: what the screen shows is part of the observation.
        let png = self
            .within(during, capture(&self.client, self.driver.is_some()))
            .await?;
        let (screen, frame) = match screen::read(&png, self.video.is_some() && shot.is_some()) {
            Ok((screen, frame)) => (Some(screen), frame),
            Err(why) => {
                self.note(format!("the screen could not be read: {why}"));
                (None, None)
            }
        };
        let console = self.page_errors(&view);
        let done = view.done;
        for url in &view.offline {
            self.note(format!("could not load (offline?): {url}"));
        }
        if let (Some(probe), Some(why)) = (
            &self.probe,
            view.probe.as_ref().and_then(|p| p.error.as_ref()),
        ) {
            self.note(format!(
                "`game.probe` ({}) gave no state: {why}; the observation's `state` is null there",
                crate::text::cut(probe, 80)
            ));
        }
        let load = Load {
            href: view.href.clone(),
            in_scope: view.in_scope,
            unreachable: false,
            status: view.status,
        };
        self.clickable = offer_targets(&view);
        let mut raw = observation(&view, &self.keys, screen.as_deref(), self.probe.is_some());
        // What the browser refused to do here before is not offered again;
        // the hash is made after, so a replay that met the same refusal
        // reads the same.
        let key = observation_hash(&raw);
        if let Some(dropped) = self.dropped.get(&key)
            && let Some(actions) = raw.get_mut("actions").and_then(Value::as_array_mut)
        {
            actions.retain(|a| !a.as_str().is_some_and(|a| dropped.iter().any(|d| d == a)));
        }
        self.offered_at = key;
        let observation: Observation =
            serde_json::from_value(raw.clone()).map_err(|e| Failure::Violation {
                during,
                reason: format!("the page made a malformed observation: {e}"),
                evidence: String::new(),
                stderr_tail: String::new(),
            })?;
        self.offered.clone_from(&observation.actions);
        let screenshot = shot.and_then(|shot| self.save_screenshot(png, shot, frame));
        Ok((
            Seen {
                observation,
                hash: observation_hash(&raw),
                raw,
                screenshot,
                console,
                url: Some(view.href.clone()),
            },
            done,
            load,
        ))
    }

    /// Starts writing `png` under the cell's `screenshots/` as `name` and
    /// returns its path; `None` without a cell directory. The next command
    /// waits for the write ([`Self::finish_screenshot`]); a file that
    /// cannot be written is left out (the play goes on). `frame` is added
    /// to the video meanwhile.
    fn save_screenshot(
        &mut self,
        png: Vec<u8>,
        name: &str,
        frame: Option<screen::Frame>,
    ) -> Option<String> {
        let path = self.screenshots.as_ref()?.join(name);
        if let (Some(video), Some(frame)) = (self.video.clone(), frame) {
            let after = self.pending_frame.take();
            self.pending_frame = Some(video::film(video, after, name.to_owned(), frame));
        }
        self.pending_shot = Some(tokio::spawn(async move {
            let _ = tokio::fs::write(path, png).await;
            Ok(())
        }));
        Some(format!("screenshots/{name}"))
    }

    /// Waits for the last observation's screenshot: a browser that died or
    /// hung taking it fails the command that was to follow.
    async fn finish_screenshot(&mut self, during: Op) -> Result<(), Failure> {
        let Some(pending) = self.pending_shot.take() else {
            return Ok(());
        };
        match pending.await {
            Ok(done) => done,
            Err(e) => Err(Failure::Violation {
                during,
                reason: format!("the screenshot was lost: {e}"),
                evidence: String::new(),
                stderr_tail: String::new(),
            }),
        }
    }

    /// Runs one WebDriver exchange within the action timeout; what went
    /// wrong as a [`Failure`].
    async fn within<T>(
        &self,
        during: Op,
        exchange: impl Future<Output = Result<T, CmdError>>,
    ) -> Result<T, Failure> {
        within(during, self.timeout, exchange).await
    }

    /// Like [`Self::within`], but WebDriver refusing the command (an
    /// element hidden, covered, gone, or one it cannot act on: whatever is
    /// not a crashed tab, a browser gone, or a timeout) is not a failure:
    /// its status and first line.
    async fn within_refusable(
        &self,
        exchange: impl Future<Output = Result<(), CmdError>>,
    ) -> Result<Result<(), (ErrorStatus, String)>, Failure> {
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => Err(Failure::Hang {
                during: Op::Act,
                waited: self.timeout,
            }),
            Ok(Ok(())) => Ok(Ok(())),
            Ok(Err(e)) => match (failure(Op::Act, &e, self.timeout), e) {
                (Failure::Violation { .. }, CmdError::Standard(e)) => {
                    Ok(Err((e.error, first_line(&e.message))))
                }
                (failure, _) => Err(failure),
            },
        }
    }
}

/// The cell's `screenshots/` directory, made; `None` without a cell
/// directory (a smoke check).
fn screenshots_dir(artifacts: Option<&Path>) -> Result<Option<PathBuf>, SpawnError> {
    let Some(dir) = artifacts else {
        return Ok(None);
    };
    let dir = dir.join("screenshots");
    std::fs::create_dir_all(&dir)
        .map_err(|e| SpawnError::Browser(format!("cannot create {}: {e}", dir.display())))?;
    Ok(Some(dir))
}

/// The server of `game.serve`, if the game has one.
async fn serve(
    spec: &GameSpec,
    game: &BrowserGame,
) -> Result<Option<static_files::StaticServer>, SpawnError> {
    let Some(dir) = &game.serve else {
        return Ok(None);
    };
    let path = spec.root.join(dir);
    static_files::StaticServer::start(&path)
        .await
        .map(Some)
        .map_err(|e| {
            SpawnError::Browser(format!(
                "cannot serve `{dir}` ({}): {e}; `game.serve` names a directory of the repo",
                path.display()
            ))
        })
}

/// Runs one WebDriver exchange within `timeout`; what went wrong as a
/// [`Failure`].
async fn within<T>(
    during: Op,
    timeout: Duration,
    exchange: impl Future<Output = Result<T, CmdError>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(Failure::Hang {
            during,
            waited: timeout,
        }),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(failure(during, &e, timeout)),
    }
}

/// A PNG of the viewport: through DevTools where the server is
/// chromedriver (`devtools`), else (or when that is refused) WebDriver's
/// own screenshot.
async fn capture(client: &Client, devtools: bool) -> Result<Vec<u8>, CmdError> {
    use base64::Engine as _;
    if devtools {
        let shot = cdp(
            client,
            "Page.captureScreenshot",
            json!({ "format": "png", "optimizeForSpeed": true }),
        )
        .await;
        if let Ok(shot) = shot
            && let Some(Ok(png)) = shot
                .get("data")
                .and_then(Value::as_str)
                .map(|data| base64::engine::general_purpose::STANDARD.decode(data))
        {
            return Ok(png);
        }
    }
    client.screenshot().await
}

/// The element each offered action of `view` acts on, by action.
fn offer_targets(view: &PageView) -> Vec<(String, String)> {
    let clicks = view
        .elements
        .iter()
        .zip(&view.refs)
        .take(MAX_ELEMENTS)
        .filter_map(|(e, r)| Some((format!("click:{}", e.label), element_ref(r)?)));
    let fields = view
        .fields
        .iter()
        .zip(&view.field_refs)
        .flat_map(|(f, refs)| {
            f.actions
                .iter()
                .zip(refs)
                .filter_map(|(a, r)| Some((a.clone(), element_ref(r)?)))
        });
    clicks.chain(fields).collect()
}

/// WebDriver's Navigate To, as is: fantoccini's `goto` asks for the
/// current URL first (one round trip more) to resolve a relative one, and
/// ours are absolute.
async fn navigate(client: &Client, url: &str) -> Result<(), CmdError> {
    client
        .issue_cmd(W3cNavigate {
            url: url.to_owned(),
        })
        .await
        .map(drop)
}

/// Runs `page.js` in `mode` and returns the element it found, if any.
async fn find(
    client: &Client,
    mode: &str,
    label: &str,
    scope: &scope::Scope,
) -> Result<Option<Element>, CmdError> {
    let script = format!("{LISTENER}\n{PAGE}");
    let request = json!({ "mode": mode, "label": label, "scope": scope.for_page() });
    let found = client.execute_async(&script, vec![request]).await?;
    Ok(element_ref(&found).map(|id| Element::from_element_id(client.clone(), id.into())))
}

/// The W3C element reference in a script's result.
fn element_ref(value: &Value) -> Option<String> {
    value
        .get("element-6066-11e4-a52e-4f735466cecf")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// What a WebDriver error means for the game: the tab crashed or the
/// browser went away (`crash`), it took too long (`hang`), or something
/// else broke the session.
fn failure(during: Op, error: &CmdError, timeout: Duration) -> Failure {
    let text = first_line(&error.to_string());
    // chromedriver answers a dead renderer with the error `tab crashed`,
    // which is no W3C error code: fantoccini hands it over as a
    // non-conforming answer, so the words are what tell it.
    let crashed = match error {
        CmdError::Standard(e) => e.message.contains("crash"),
        CmdError::NotW3C(answer) => answer.to_string().contains("crash"),
        _ => false,
    };
    match error {
        CmdError::Standard(e)
            if e.error == ErrorStatus::ScriptTimeout || e.error == ErrorStatus::Timeout =>
        {
            Failure::Hang {
                during,
                waited: timeout,
            }
        }
        _ if crashed => Failure::Exited {
            during,
            status: "crashed (the page's renderer died)".to_owned(),
            stderr_tail: text,
        },
        CmdError::Standard(e)
            if e.error == ErrorStatus::InvalidSessionId
                || e.message.contains("not reachable")
                || e.message.contains("disconnected") =>
        {
            Failure::Exited {
                during,
                status: "went away (the browser closed)".to_owned(),
                stderr_tail: text,
            }
        }
        CmdError::Lost(_) | CmdError::Failed(_) | CmdError::FailedC(_) => Failure::Exited {
            during,
            status: "went away (the WebDriver server stopped answering)".to_owned(),
            stderr_tail: text,
        },
        _ => Failure::Violation {
            during,
            reason: format!("the browser refused the request: {text}"),
            evidence: String::new(),
            stderr_tail: String::new(),
        },
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_owned()
}

/// The page to load: a URL as given, or a repo-relative path as a
/// `file://` URL (which must exist).
fn page_url(url: &str, root: &Path) -> Result<String, SpawnError> {
    if url.contains("://") || url.starts_with("about:") || url.starts_with("data:") {
        return Ok(url.to_owned());
    }
    let path = root.join(url);
    let absolute = path.canonicalize().map_err(|e| {
        SpawnError::Browser(format!(
            "the page `{url}` ({}) cannot be opened: {e}; `game.url` is an http(s):// or file:// \
             URL, or a path under the repo root",
            path.display()
        ))
    })?;
    Ok(format!("file://{}", absolute.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(text: &str, elements: usize) -> PageView {
        PageView {
            title: "Game".into(),
            page: "index.html".into(),
            text: text.into(),
            elements: (0..elements)
                .map(|i| ElementView {
                    label: format!("b{i}"),
                    role: "button".into(),
                    states: Vec::new(),
                })
                .collect(),
            href: "http://127.0.0.1:1/index.html".into(),
            in_scope: true,
            status: 200,
            offline: vec![],
            fields: vec![],
            field_refs: vec![],
            probe: None,
            offline_scripts: vec![],
            failed: vec![],
            pending: vec![],
            keys: None,
            done: false,
            score: 0.0,
            errors: vec![],
            refs: vec![],
        }
    }

    #[test]
    fn the_text_is_cut_at_max_text_and_says_so() {
        let long = "x".repeat(MAX_TEXT + 10);
        let obs = observation(&view(&long, 0), &[], None, false);
        let text = obs["text"].as_str().expect("text");
        assert!(text.ends_with("(the page's text is cut here)"), "{text}");
        let note = "(the page's text is cut here)";
        assert_eq!(
            text.matches('x').count(),
            MAX_TEXT + note.matches('x').count(),
            "the page's own text is cut at MAX_TEXT"
        );
        let short = observation(&view("hi", 0), &[], None, false);
        assert_eq!(short["text"], "hi");
        assert_eq!(short["state"]["title"], "Game");
    }

    #[test]
    fn elements_are_capped_and_listed_as_click_actions() {
        let obs = observation(&view("", MAX_ELEMENTS + 5), &[], None, false);
        let actions = obs["actions"].as_array().expect("actions");
        let clicks = actions
            .iter()
            .filter(|a| a.as_str().is_some_and(|a| a.starts_with("click:")));
        assert_eq!(clicks.count(), MAX_ELEMENTS);
        assert_eq!(
            obs["state"]["elements"].as_array().map(Vec::len),
            Some(MAX_ELEMENTS)
        );
        assert_eq!(actions.last(), Some(&json!("wait")));
        assert!(actions.contains(&json!("key:Enter")));
    }

    #[test]
    fn game_keys_and_the_page_s_keys_are_offered_beside_enter_and_escape_once_each() {
        let mut page = view("", 0);
        page.keys = Some(vec!["ArrowUp".into(), "Space".into(), "Hyper".into()]);
        let obs = observation(&page, &["ArrowUp".into(), "ArrowLeft".into()], None, false);
        let keys: Vec<&str> = obs["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .filter_map(|a| a.as_str()?.strip_prefix("key:"))
            .collect();
        assert_eq!(keys, ["Enter", "Escape", "ArrowUp", "ArrowLeft", "Space"]);
    }

    #[test]
    fn every_key_a_plan_may_name_is_one_the_driver_presses() {
        for name in crate::plan::model::KEY_NAMES {
            assert!(key(name).is_some(), "{name}");
        }
    }

    #[test]
    fn an_observation_holds_labels_roles_and_states_but_no_boxes() {
        let obs = observation(&view("", 1), &[], None, false);
        assert_eq!(
            obs["state"]["elements"],
            json!([{"label": "b0", "role": "button"}])
        );
    }

    #[test]
    fn a_page_that_did_not_load_says_why() {
        let load = |href: &str, status| Load {
            href: href.into(),
            in_scope: true,
            unreachable: false,
            status,
        };
        assert_eq!(load("http://h/", 200).failed(), None);
        assert_eq!(load("file:///a.html", 0).failed(), None);
        assert!(
            load("http://h/x", 404)
                .failed()
                .is_some_and(|w| w.contains("HTTP 404"))
        );
        assert!(
            load("chrome-error://chromewebdata/", 0)
                .failed()
                .is_some_and(|w| w.contains("error page"))
        );
    }

    #[test]
    fn the_action_syntax_parses_and_refuses_with_the_syntax() {
        assert_eq!(
            Action::parse("click:Start"),
            Ok(Action::Click("Start".into()))
        );
        assert_eq!(Action::parse("click:a:b"), Ok(Action::Click("a:b".into())));
        assert_eq!(Action::parse("key:Enter"), Ok(Action::Key('\u{E007}')));
        assert_eq!(Action::parse("key:q"), Ok(Action::Key('q')));
        assert_eq!(Action::parse("type:hi"), Ok(Action::Type("hi".into())));
        assert_eq!(Action::parse("wait"), Ok(Action::Wait));
        for bad in ["north", "click:", "key:Hyper", "jump:x"] {
            let err = Action::parse(bad).expect_err(bad).error;
            assert!(err.contains('`'), "{bad}: {err}");
        }
    }

    #[test]
    fn a_repo_path_page_becomes_a_file_url_and_a_missing_one_is_named() {
        let root = std::env::temp_dir();
        assert_eq!(
            page_url("http://127.0.0.1:1/x", &root).expect("url"),
            "http://127.0.0.1:1/x"
        );
        let err = page_url("no/such/page.html", &root).expect_err("missing");
        assert!(err.to_string().contains("no/such/page.html"), "{err}");
    }
}
