//! What a page is to a player: the action syntax (`click:<label>`,
//! `key:<name>`, `type:<text>`, `wait`), a load's outcome, and the
//! observation built from what `page.js` read of the page (its text, offered
//! elements, errors).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{MAX_ELEMENTS, MAX_TEXT, Refusal, SAMPLE_TEXT};

/// An action in the driver's syntax.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Action {
    Click(String),
    Key(char),
    Type(String),
    Wait,
}

impl Action {
    pub(super) fn parse(action: &str) -> Result<Action, Refusal> {
        let refuse = |error: String| Refusal { error };
        if action == "wait" {
            return Ok(Action::Wait);
        }
        let Some((verb, rest)) = action.split_once(':') else {
            return Err(refuse(format!(
                "`{action}` is not an action of the webdriver driver (click:LABEL, key:NAME, \
                 type:TEXT, wait)"
            )));
        };
        match verb {
            "click" if !rest.is_empty() => Ok(Action::Click(rest.to_owned())),
            "type" => Ok(Action::Type(rest.to_owned())),
            "key" => key(rest).map(Action::Key).ok_or_else(|| {
                refuse(format!(
                    "`{rest}` is not a key this driver presses (Enter, Escape, Tab, Space, \
                     Backspace, ArrowUp, ArrowDown, ArrowLeft, ArrowRight, or one character)"
                ))
            }),
            _ => Err(refuse(format!(
                "`{action}` is not an action of the webdriver driver (click:LABEL, key:NAME, \
                 type:TEXT, wait)"
            ))),
        }
    }
}

/// The WebDriver key code of a key name (W3C WebDriver §17.4.2).
pub(super) fn key(name: &str) -> Option<char> {
    Some(match name {
        "Enter" => '\u{E007}',
        "Escape" => '\u{E00C}',
        "Tab" => '\u{E004}',
        "Space" => ' ',
        "Backspace" => '\u{E003}',
        "ArrowLeft" => '\u{E012}',
        "ArrowUp" => '\u{E013}',
        "ArrowRight" => '\u{E014}',
        "ArrowDown" => '\u{E015}',
        other => {
            let mut chars = other.chars();
            let c = chars.next()?;
            if chars.next().is_some() {
                return None;
            }
            c
        }
    })
}

/// Where the page is after a command, and whether it loaded.
#[derive(Debug, Clone)]
pub(super) struct Load {
    pub(super) href: String,
    pub(super) in_scope: bool,
    /// The browser showed its error page for `href`.
    pub(super) unreachable: bool,
    /// The main document's HTTP status (0 when the browser does not say:
    /// a `file://` page, a page that changed its URL by script).
    pub(super) status: u16,
}

impl Load {
    /// Why the page did not load, if it did not: the browser's error page
    /// (a refused connection, an unknown host, a missing file) or an HTTP
    /// error status.
    pub(super) fn failed(&self) -> Option<String> {
        if self.unreachable {
            return Some(format!(
                "the browser showed its error page for {} (a network error: nothing answered, or no such file)",
                self.href
            ));
        }
        if self.href.starts_with("chrome-error://") {
            return Some(format!(
                "the browser showed its error page (a network error: nothing answered, or no such file) for {}",
                self.href
            ));
        }
        (self.status >= 400).then(|| format!("{} answered HTTP {}", self.href, self.status))
    }
}

/// What `page.js` reads from a page.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct PageView {
    pub(super) title: String,
    pub(super) page: String,
    #[serde(default)]
    pub(super) href: String,
    #[serde(default = "yes", rename = "inScope")]
    pub(super) in_scope: bool,
    #[serde(default)]
    pub(super) status: u16,
    /// Resources out of scope that failed to load (offline CI: a badge, a
    /// font from a CDN): listed in the report, not findings.
    #[serde(default)]
    pub(super) offline: Vec<String>,
    /// Those of `offline` that were scripts.
    #[serde(default, rename = "offlineScripts")]
    pub(super) offline_scripts: Vec<String>,
    /// Requests of the game that failed or answered HTTP >= 400.
    #[serde(default)]
    pub(super) failed: Vec<super::page_errors::FailedRequest>,
    /// Requests still in flight when the page was read (after
    /// [`super::hermetic::REQUESTS_WITHIN`]).
    #[serde(default)]
    pub(super) pending: Vec<String>,
    pub(super) text: String,
    pub(super) elements: Vec<ElementView>,
    pub(super) input: bool,
    pub(super) keys: Option<Vec<String>>,
    pub(super) done: bool,
    pub(super) score: f64,
    pub(super) errors: Vec<String>,
    /// The W3C reference of each of `elements`, in order (never part of
    /// the observation: it changes with every load).
    #[serde(default)]
    pub(super) refs: Vec<Value>,
}

/// A control as the observation lists it: what a person sees of it and
/// its state, never its box (a CSS animation or a resized window moves
/// boxes without changing the game; the hash must not see that).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(super) struct ElementView {
    pub(super) label: String,
    #[serde(default)]
    pub(super) role: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) states: Vec<String>,
}

pub(super) fn yes() -> bool {
    true
}

/// The observation of a page (see the module doc): what the player reads
/// and the hash covers.
pub(super) fn observation(view: &PageView, game_keys: &[String]) -> Value {
    let mut text: String = view.text.chars().take(MAX_TEXT).collect();
    if view.text.chars().nth(MAX_TEXT).is_some() {
        text.push_str("\n… (the page's text is cut here)");
    }
    let elements = &view.elements[..view.elements.len().min(MAX_ELEMENTS)];
    let mut actions: Vec<String> = elements
        .iter()
        .map(|e| format!("click:{}", e.label))
        .collect();
    if view.input {
        actions.push(format!("type:{SAMPLE_TEXT}"));
    }
    // Enter and Escape on every page, then `game.keys`, then the page's
    // own `window.gameplan.keys`, each once.
    let page_keys = view.keys.iter().flatten();
    let mut keys: Vec<&str> = vec!["Enter", "Escape"];
    for k in game_keys.iter().chain(page_keys) {
        if key(k).is_some() && !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    actions.extend(keys.iter().map(|k| format!("key:{k}")));
    actions.push("wait".to_owned());
    json!({
        "text": text.trim(),
        "actions": actions,
        "state": {
            "title": view.title,
            "page": view.page,
            "elements": elements,
        },
        "score": view.score,
    })
}
