//! What a page is to a player: the action syntax (`click:<label>`,
//! `select:<field>=<option>`, `type:<field>=<text>` or `type:<text>`,
//! `set:<field>=<value>`, `key:<name>`, `wait`), a load's outcome, and the
//! observation built from what `page.js` read of the page (its text, offered
//! elements and fields, `game.probe`'s value, errors) and the screen's
//! visual signature.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{MAX_ELEMENTS, MAX_TEXT};
use crate::play::driver::Refusal;

/// An action in the driver's syntax.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Action {
    Click(String),
    /// `FIELD=OPTION`: chooses an option of a `<select>`.
    Select(String),
    /// `FIELD=TEXT` (replaces a field's value), or a bare `TEXT` into the
    /// focused text field, else the first one.
    Type(String),
    /// `FIELD=VALUE`: a range, date, time or color input set by script.
    Set(String),
    Key(char),
    Wait,
}

impl Action {
    pub(super) fn parse(action: &str) -> Result<Action, Refusal> {
        let refuse = |error: String| Refusal { error };
        if action == "wait" {
            return Ok(Action::Wait);
        }
        let syntax = "click:LABEL, select:FIELD=OPTION, type:FIELD=TEXT, type:TEXT, \
                      set:FIELD=VALUE, key:NAME, wait";
        let Some((verb, rest)) = action.split_once(':') else {
            return Err(refuse(format!(
                "`{action}` is not an action of the webdriver driver ({syntax})"
            )));
        };
        match verb {
            "click" if !rest.is_empty() => Ok(Action::Click(rest.to_owned())),
            "select" | "set" if !rest.contains('=') => Err(refuse(format!(
                "`{action}` names no value: write `{verb}:FIELD=VALUE` as the page offers it"
            ))),
            "select" => Ok(Action::Select(rest.to_owned())),
            "set" => Ok(Action::Set(rest.to_owned())),
            "type" => Ok(Action::Type(rest.to_owned())),
            "key" => key(rest).map(Action::Key).ok_or_else(|| {
                refuse(format!(
                    "`{rest}` is not a key this driver presses (Enter, Escape, Tab, Space, \
                     Backspace, ArrowUp, ArrowDown, ArrowLeft, ArrowRight, or one character)"
                ))
            }),
            _ => Err(refuse(format!(
                "`{action}` is not an action of the webdriver driver ({syntax})"
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
    /// The form fields a person could fill in, each with its offers.
    #[serde(default)]
    pub(super) fields: Vec<FieldView>,
    /// The element each field's offer acts on, in the same order (never
    /// part of the observation).
    #[serde(default, rename = "fieldRefs")]
    pub(super) field_refs: Vec<Vec<Value>>,
    /// `game.probe`'s value or why there is none (`None` without a probe).
    #[serde(default)]
    pub(super) probe: Option<ProbeView>,
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

/// A form field as the observation lists it (its value is game state) and
/// what is offered for it.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct FieldView {
    pub(super) label: String,
    #[serde(default)]
    pub(super) role: String,
    #[serde(default)]
    pub(super) value: String,
    #[serde(default)]
    pub(super) actions: Vec<String>,
}

/// What `game.probe` gave: its value as JSON, or what went wrong.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct ProbeView {
    #[serde(default)]
    pub(super) value: Option<Value>,
    #[serde(default)]
    pub(super) error: Option<String>,
}

pub(super) fn yes() -> bool {
    true
}

/// The observation of a page (see the module doc): what the player reads
/// and the hash covers. `screen` is the visual signature of the screenshot
/// taken with it; with a `game.probe` (`probed`), `state` is the probe's
/// value and the page's facts move to `page`.
pub(super) fn observation(
    view: &PageView,
    game_keys: &[String],
    screen: Option<&str>,
    probed: bool,
) -> Value {
    let mut text: String = view.text.chars().take(MAX_TEXT).collect();
    if view.text.chars().nth(MAX_TEXT).is_some() {
        text.push_str("\n… (the page's text is cut here)");
    }
    let elements = &view.elements[..view.elements.len().min(MAX_ELEMENTS)];
    let mut actions: Vec<String> = elements
        .iter()
        .map(|e| format!("click:{}", e.label))
        .collect();
    actions.extend(view.fields.iter().flat_map(|f| f.actions.iter().cloned()));
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
    // A field's value is game state (a typed name, a chosen level).
    let mut listed: Vec<ElementView> = elements.to_vec();
    listed.extend(view.fields.iter().map(|f| ElementView {
        label: f.label.clone(),
        role: f.role.clone(),
        states: vec![format!("value={}", f.value)],
    }));
    let facts = json!({
        "title": view.title,
        "page": view.page,
        "elements": listed,
    });
    let mut observation = json!({
        "text": text.trim(),
        "actions": actions,
        "state": facts,
        "score": view.score,
    });
    if probed {
        let value = view
            .probe
            .as_ref()
            .and_then(|p| p.value.clone())
            .unwrap_or(Value::Null);
        observation["page"] = observation["state"].take();
        observation["state"] = value;
    }
    if let Some(screen) = screen {
        observation["screen"] = Value::String(screen.to_owned());
    }
    observation
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form() -> PageView {
        serde_json::from_value(json!({
            "title": "Setup", "page": "form.html", "text": "Setup",
            "elements": [{"label": "Begin", "role": "button"}],
            "fields": [{
                "label": "Level", "role": "select", "value": "easy",
                "actions": ["select:Level=Easy", "select:Level=Hard"]
            }],
            "fieldRefs": [[{}, {}]],
            "probe": {"value": {"lives": 3}},
            "keys": null, "done": false, "score": 0, "errors": []
        }))
        .expect("a page view")
    }

    #[test]
    fn fields_are_offered_after_the_clicks_and_their_values_are_state() {
        let obs = observation(&form(), &[], Some("64x40x8:ab"), false);
        assert_eq!(
            obs["actions"],
            json!([
                "click:Begin",
                "select:Level=Easy",
                "select:Level=Hard",
                "key:Enter",
                "key:Escape",
                "wait"
            ])
        );
        assert_eq!(
            obs["state"]["elements"][1],
            json!({"label": "Level", "role": "select", "states": ["value=easy"]})
        );
        assert_eq!(obs["screen"], "64x40x8:ab");
    }

    #[test]
    fn with_a_probe_its_value_is_the_state_and_the_page_s_facts_move_to_page() {
        let obs = observation(&form(), &[], None, true);
        assert_eq!(obs["state"], json!({"lives": 3}));
        assert_eq!(obs["page"]["title"], "Setup");
        assert!(obs.get("screen").is_none());
        let mut thrown = form();
        thrown.probe = Some(ProbeView {
            value: None,
            error: Some("it threw".into()),
        });
        assert_eq!(observation(&thrown, &[], None, true)["state"], Value::Null);
    }

    #[test]
    fn select_and_set_need_a_value_and_type_keeps_its_old_form() {
        assert_eq!(
            Action::parse("select:Level=Hard"),
            Ok(Action::Select("Level=Hard".into()))
        );
        assert_eq!(
            Action::parse("set:Volume=10"),
            Ok(Action::Set("Volume=10".into()))
        );
        assert_eq!(
            Action::parse("type:Lives=5"),
            Ok(Action::Type("Lives=5".into()))
        );
        assert_eq!(Action::parse("type:hi"), Ok(Action::Type("hi".into())));
        for bad in ["select:Level", "set:Volume"] {
            let err = Action::parse(bad).expect_err(bad).error;
            assert!(err.contains("FIELD=VALUE"), "{bad}: {err}");
        }
    }
}
