//! How gameplan asks for a browser: Chromium's flags (a fresh profile, the
//! game's window, no first-run noise), the W3C capabilities of a browser
//! gameplan starts or of the plan's own WebDriver server, and the two
//! commands fantoccini does not carry (a DevTools call, a plain navigate).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use fantoccini::wd::{Capabilities, WebDriverCompatibleCommand};

/// Headless Chromium that reaches nothing but the page: the offline flags
/// docs/web-games.md › How chromedriver is started lists, and a few more,
/// media allowed to play without a gesture, a window of the viewport's size
/// (grown to make the page that size once the session is open), and
/// `--user-data-dir` when gameplan owns the browser (a WebDriver server of
/// the plan's makes its own profile).
pub(super) fn chromium_args(profile: Option<&Path>, (w, h): (u32, u32)) -> Vec<String> {
    let mut args: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        // A file:// page's own scripts count as another origin without it,
        // and Chromium then hides their errors as "Script error.".
        "--allow-file-access-from-files",
        // A game that starts when its intro tune ends must hear it play:
        // no person is there to make the gesture Chromium asks for.
        "--autoplay-policy=no-user-gesture-required",
    ]
    .map(str::to_owned)
    .into();
    if let Some(profile) = profile {
        args.push(format!("--user-data-dir={}", profile.display()));
    }
    args.push(format!("--window-size={w},{h}"));
    args
}

/// The capabilities of a browser gameplan starts: its Chromium binary,
/// the flags of [`chromium_args`] with a fresh profile, the game's timeouts.
pub(super) fn chromium_capabilities(
    browser: &Path,
    profile: &Path,
    timeout: Duration,
    viewport: (u32, u32),
) -> Capabilities {
    let mut caps = common_capabilities(timeout);
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": browser.display().to_string(), "args": chromium_args(Some(profile), viewport) }),
    );
    caps
}

/// What the plan's own WebDriver server is asked for: the game's timeouts
/// and the same Chromium flags (headless, offline; a chromedriver started
/// by hand in CI, as root and without a display, cannot start Chromium
/// without them). No browser name: a server that is not chromedriver
/// ignores `goog:` options and runs what it runs.
pub(super) fn external_capabilities(timeout: Duration, viewport: (u32, u32)) -> Capabilities {
    let mut caps = common_capabilities(timeout);
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "args": chromium_args(None, viewport) }),
    );
    caps
}

/// What any session asks for: the game's timeouts, and dialogs (`alert`)
/// accepted rather than blocking every command.
pub(super) fn common_capabilities(timeout: Duration) -> Capabilities {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let mut caps = Capabilities::new();
    caps.insert(
        "timeouts".into(),
        json!({ "script": ms, "pageLoad": ms, "implicit": 0 }),
    );
    caps.insert("unhandledPromptBehavior".into(), json!("accept"));
    caps
}

/// A Chrome DevTools command through chromedriver's `goog/cdp/execute`.
#[derive(Debug)]
pub(super) struct ChromeCdp {
    pub(super) cmd: &'static str,
    pub(super) params: Value,
}

impl WebDriverCompatibleCommand for ChromeCdp {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({ "cmd": self.cmd, "params": self.params }).to_string()),
        )
    }
}

/// Issues the DevTools command `cmd` with `params` on `client`'s session.
pub(super) async fn cdp(
    client: &fantoccini::Client,
    cmd: &'static str,
    params: Value,
) -> Result<Value, fantoccini::error::CmdError> {
    client.issue_cmd(ChromeCdp { cmd, params }).await
}

/// W3C Navigate To (`POST /session/{id}/url`).
#[derive(Debug)]
pub(super) struct W3cNavigate {
    pub(super) url: String,
}

impl WebDriverCompatibleCommand for W3cNavigate {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/url", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({ "url": self.url }).to_string()),
        )
    }
}
