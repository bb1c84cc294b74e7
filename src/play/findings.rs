//! Findings: what went wrong in a play, with a stable fingerprint.
//!
//! Owns the fingerprint, the evidence, and the per-cell set that dedupes
//! by fingerprint (the categories and severities are `finding_class`'s).
//! Findings come from what happened (the process died, did not answer, refused a listed action, did
//! not change), not from what the game says alone; the `error` category is
//! the one that takes the game's word (an `error` or `crash` event).
//!
//! # The fingerprint
//!
//! `id` = the first 16 hex digits of sha256 over the category and a
//! normalized *location* (which action, which message, which place): never
//! the persona, controller or seed, so the same bug found by two personas
//! or two controllers has the same id and the aggregate can merge them.
//! Normalizing masks numbers and long hex runs and collapses whitespace, so
//! a pid or an address in a message does not make a new bug.
//!
//! A *place* (where a player got stuck) is fingerprinted by what stays put
//! while the player's pockets change ([`place`]): the first line of the
//! text (a room's name or opening sentence, numbers masked) and the
//! state's text fields (`"room": "vault"`), never the score, the state's
//! numbers (gold, turn counters) or lists, nor what sits under an
//! inventory-like key (`inventory`, `items`, `held`, `hand`, `bag`, ...:
//! [`INVENTORY_KEYS`]), nor the rest of the text ("You carry: lamp").
//! A `stuck` finding adds the place's offered actions ([`stuck_location`]:
//! two dead ends that read alike but offer other ways are two places),
//! numbers masked and without the ones that name something carried
//! (`use lamp`). So one softlock room is one finding however much gold,
//! and whichever lamp, the player brought into it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How many of the last actions a finding's evidence quotes.
pub const EVIDENCE_ACTIONS: usize = 10;

pub use crate::finding_class::{Category, Severity};

/// What shows where a finding happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Evidence {
    /// The action number (1 = the first action; 0 = before any, at hello or reset).
    pub step: u64,
    /// The sha256 of the observation the action was taken from.
    pub observation: String,
    /// The last actions up to and including this one, oldest first.
    pub last_actions: Vec<String>,
    /// What the game said or sent (an event message, the refusal, a quoted bad line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The end of the game's stderr (crash only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// The screenshot of the page at that moment, relative to the cell's
    /// directory (`screenshots/step-0004.png`; a browser game only): for
    /// a failing action, the page the action was taken on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screenshot: Option<String>,
    /// The page's address at that moment (a browser game only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
}

/// One thing wrong with the game.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    /// Stable fingerprint: the same bug has the same id whoever found it.
    pub id: String,
    pub title: String,
    pub category: Category,
    pub severity: Severity,
    pub persona: String,
    pub controller: String,
    pub evidence: Evidence,
    /// How many times the cell met it (the evidence is of the first).
    pub occurrences: u64,
    /// What the fingerprint is made of besides the category, normalized
    /// (numbers masked): what tells two findings with alike titles apart.
    #[serde(default)]
    pub location: String,
    /// A crash or hang that did not happen again when the cell's actions
    /// were replayed once in a fresh game: low severity, both outcomes in
    /// its evidence; `--fail-on crash` (or `hang`) passes it by and
    /// `--fail-on unconfirmed` selects it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconfirmed: bool,
}

/// What a finding is about, before persona and controller are attached.
#[derive(Debug, Clone)]
pub struct Spotted {
    pub category: Category,
    pub title: String,
    /// What the fingerprint is made of, besides the category.
    pub location: String,
    pub evidence: Evidence,
}

impl Spotted {
    pub fn id(&self) -> String {
        fingerprint(self.category, &self.location)
    }
}

/// The fingerprint of a finding: category + normalized location.
pub fn fingerprint(category: Category, location: &str) -> String {
    let text = format!("{}\n{}", category.name(), normalize(location));
    crate::reuse::sha256_hex(text.as_bytes())[..16].to_owned()
}

/// Words in a state key that say it holds what the player carries: its
/// values change with the player's pockets, not with the place.
pub const INVENTORY_KEYS: [&str; 14] = [
    "inventory",
    "item",
    "carr",
    "hold",
    "held",
    "hand",
    "bag",
    "pack",
    "pocket",
    "equip",
    "gear",
    "loot",
    "wield",
    "wear",
];

fn inventory_like(key: &str) -> bool {
    let key = key.to_lowercase();
    INVENTORY_KEYS.iter().any(|word| key.contains(word))
}

/// Where a player is stuck, as a `stuck` finding's location: the [`place`]
/// and its offered actions (normalized, sorted), leaving out the actions
/// that name something carried (`use lamp` while `items` holds `lamp`).
pub fn stuck_location(observation: &super::protocol::Observation) -> String {
    let mut carried = Vec::new();
    carried_things(&observation.state, false, &mut carried);
    let mut offered: Vec<String> = observation
        .actions
        .iter()
        .map(|a| normalize(a))
        .filter(|a| {
            let words = format!(" {a} ");
            !carried
                .iter()
                .any(|thing| words.contains(&format!(" {thing} ")))
        })
        .collect();
    offered.sort();
    offered.dedup();
    let mut location = place(observation);
    location.push_str("\noffers: ");
    location.push_str(&offered.join(" | "));
    location
}

/// The strings under inventory-like keys of `value` (normalized): what the
/// player carries.
fn carried_things(value: &serde_json::Value, under_inventory: bool, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(text) if under_inventory => {
            let thing = normalize(text);
            if !thing.is_empty() {
                out.push(thing);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                carried_things(item, under_inventory, out);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                carried_things(inner, under_inventory || inventory_like(key), out);
            }
        }
        _ => {}
    }
}

/// Where an observation is, as a finding's location: the first non-empty
/// line of its text and the text fields of its state (`path=value`, sorted),
/// leaving out what changes with inventory or score (see the module doc).
pub fn place(observation: &super::protocol::Observation) -> String {
    let first_line = observation
        .text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut fields = Vec::new();
    text_fields(&observation.state, &mut String::new(), &mut fields);
    fields.sort();
    let mut location = normalize(first_line);
    for field in fields {
        location.push('\n');
        location.push_str(&field);
    }
    location
}

/// The string values under `value`, as `path=value` (normalized): numbers,
/// booleans and lists are counters, flags and inventories, and what sits
/// under an inventory-like key is carried, not the place.
fn text_fields(value: &serde_json::Value, path: &mut String, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(text) => out.push(format!("{path}={}", normalize(text))),
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                if inventory_like(key) {
                    continue;
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                text_fields(inner, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Lowercase, numbers and long hex runs masked as `#`, whitespace collapsed,
/// at most 200 characters: what stays the same when the same bug recurs.
pub fn normalize(text: &str) -> String {
    // Written straight into `out` (no string per word): a finding is
    // fingerprinted each time a game meets it, thousands of times in a
    // simulation.
    let mut out = String::with_capacity(text.len().min(200));
    let mut words = text.split_whitespace().peekable();
    while let Some(word) = words.next() {
        let hexish = word.len() >= 8
            && word
                .trim_start_matches("0x")
                .chars()
                .all(|c| c.is_ascii_hexdigit());
        if hexish {
            out.push('#');
        } else {
            let mut in_number = false;
            for c in word.chars() {
                if c.is_ascii_digit() {
                    if !in_number {
                        out.push('#');
                    }
                    in_number = true;
                } else {
                    in_number = false;
                    out.extend(c.to_lowercase());
                }
            }
        }
        if words.peek().is_some() {
            out.push(' ');
        }
        if out.len() >= 200 && out.chars().count() >= 200 {
            break;
        }
    }
    match out.char_indices().nth(200) {
        Some((cut, _)) => {
            out.truncate(cut);
            out
        }
        None => out,
    }
}

/// The findings of one cell, deduplicated by id, in the order first met.
#[derive(Debug, Clone, Default)]
pub struct FindingSet {
    findings: Vec<Finding>,
}

impl FindingSet {
    /// Records a finding; a second one with the same id only counts.
    pub fn add(&mut self, spotted: Spotted, persona: &str, controller: &str) {
        let severity = spotted.category.severity();
        self.add_rated(spotted, severity, persona, controller);
    }

    /// [`Self::add`] with a severity of its own (a broken invariant's).
    pub fn add_rated(
        &mut self,
        spotted: Spotted,
        severity: Severity,
        persona: &str,
        controller: &str,
    ) {
        let id = spotted.id();
        if let Some(known) = self.findings.iter_mut().find(|f| f.id == id) {
            known.occurrences += 1;
            return;
        }
        self.findings.push(Finding {
            id,
            title: spotted.title,
            category: spotted.category,
            severity,
            persona: persona.to_owned(),
            controller: controller.to_owned(),
            evidence: spotted.evidence,
            occurrences: 1,
            location: normalize(&spotted.location),
            unconfirmed: false,
        });
    }

    pub fn as_slice(&self) -> &[Finding] {
        &self.findings
    }

    pub fn into_vec(self) -> Vec<Finding> {
        self.findings
    }

    pub fn categories(&self) -> impl Iterator<Item = Category> + '_ {
        self.findings.iter().map(|f| f.category)
    }
}

/// The last [`EVIDENCE_ACTIONS`] of `actions`.
pub fn last_actions(actions: &[String]) -> Vec<String> {
    actions[actions.len().saturating_sub(EVIDENCE_ACTIONS)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spotted(category: Category, location: &str) -> Spotted {
        Spotted {
            category,
            title: "t".into(),
            location: location.into(),
            evidence: Evidence {
                step: 1,
                observation: "h".into(),
                last_actions: vec![],
                detail: None,
                stderr_tail: None,
                screenshot: None,
                page: None,
            },
        }
    }

    #[test]
    fn the_same_bug_has_the_same_id_for_every_persona_and_a_pid_does_not_matter() {
        let a = spotted(
            Category::Crash,
            "pull lever: exited with code 3: panic at pid 4711",
        );
        let b = spotted(
            Category::Crash,
            "pull  lever: exited with code 3: Panic at pid 99",
        );
        let c = spotted(
            Category::Error,
            "pull lever: exited with code 3: panic at pid 4711",
        );
        assert_eq!(a.id(), b.id());
        assert_ne!(a.id(), c.id(), "the category is part of the id");
        let mut set = FindingSet::default();
        set.add(a, "kid", "standard");
        set.add(b, "veteran", "jev");
        assert_eq!(set.as_slice().len(), 1);
        assert_eq!(set.as_slice()[0].occurrences, 2);
        assert_eq!(
            set.as_slice()[0].persona,
            "kid",
            "the first finder's evidence stays"
        );
    }

    fn observation(text: &str, state: serde_json::Value) -> super::super::protocol::Observation {
        super::super::protocol::Observation {
            text: text.into(),
            actions: vec!["wait".into()],
            state,
            score: 0.0,
        }
    }

    /// Issue 15 item 4: gold, inventory and score do not move a place; the
    /// room's name and its state text do.
    #[test]
    fn a_place_ignores_what_changes_with_inventory_or_score() {
        let poor = observation(
            "A sealed vault.\nYou carry nothing.\nYou have no gold.",
            serde_json::json!({"room": "vault", "gold": 0, "items": []}),
        );
        let mut rich = observation(
            "A sealed vault.\nYou carry: lamp, rope.\nYou have 1 gold coin.",
            serde_json::json!({"room": "vault", "gold": 1, "items": ["lamp", "rope"], "lit": true}),
        );
        rich.actions.push("use lamp".into());
        rich.score = 30.0;
        assert_eq!(place(&poor), place(&rich));
        let elsewhere = observation(
            "A sealed vault.\nYou carry nothing.",
            serde_json::json!({"room": "cellar", "gold": 0}),
        );
        assert_ne!(place(&poor), place(&elsewhere));
        let other_room = observation("A dark cellar.", serde_json::json!({}));
        assert_ne!(
            place(&other_room),
            place(&observation("A cold cellar.", serde_json::json!({})))
        );
        assert_eq!(
            place(&observation(
                "Turn 3: the pit.",
                serde_json::json!({"at": {"zone": "Pit 2"}})
            )),
            "turn #: the pit.\nat.zone=pit #"
        );
    }

    /// One softlock is one finding whatever the player carries: the
    /// actions that name a carried thing and the inventory-like state keys
    /// are masked; another exit is another place.
    #[test]
    fn a_stuck_place_is_its_place_and_offered_actions_without_what_is_carried() {
        let mut bare = observation(
            "A sealed vault.\nYou carry nothing.",
            serde_json::json!({"room": "vault", "items": [], "hand": ""}),
        );
        bare.actions = vec!["pound door".into(), "wait 3 turns".into()];
        let mut lit = observation(
            "A sealed vault.\nYou carry: lamp.",
            serde_json::json!({"room": "vault", "items": ["lamp"], "hand": "brass key"}),
        );
        lit.actions = vec![
            "wait 5 turns".into(),
            "use lamp".into(),
            "pound door".into(),
            "drop brass key".into(),
        ];
        assert_eq!(stuck_location(&bare), stuck_location(&lit));
        assert!(
            stuck_location(&bare).ends_with("offers: pound door | wait # turns"),
            "{}",
            stuck_location(&bare)
        );
        let mut other_exit = bare.clone();
        other_exit.actions.push("climb rope".into());
        assert_ne!(stuck_location(&bare), stuck_location(&other_exit));
    }

    /// `normalize` as first written (a string per word): finding ids are
    /// kept in reports and dispositions, so the faster one must agree.
    fn normalize_as_first_written(text: &str) -> String {
        let mut out = String::new();
        let mut words = text.split_whitespace().peekable();
        while let Some(word) = words.next() {
            let mut masked = String::new();
            let mut in_number = false;
            let hexish = word.len() >= 8
                && word
                    .trim_start_matches("0x")
                    .chars()
                    .all(|c| c.is_ascii_hexdigit());
            if hexish {
                masked.push('#');
            } else {
                for c in word.chars() {
                    if c.is_ascii_digit() {
                        if !in_number {
                            masked.push('#');
                        }
                        in_number = true;
                    } else {
                        in_number = false;
                        masked.extend(c.to_lowercase());
                    }
                }
            }
            out.push_str(&masked);
            if words.peek().is_some() {
                out.push(' ');
            }
            if out.chars().count() >= 200 {
                break;
            }
        }
        out.chars().take(200).collect()
    }

    #[test]
    fn normalize_gives_the_ids_it_always_gave() {
        let long_word = "x".repeat(199);
        let cases = [
            String::new(),
            "  \t\n ".to_owned(),
            "At 0xdeadbeef12 step 12 of 40".to_owned(),
            "ÉCOLE İstanbul ΣΊΣΥΦΟΣ ß 12ab34 deadbeef DEADBEEF0 0x12".to_owned(),
            "word ".repeat(60),
            "ééééé ".repeat(50),
            format!("{long_word} y z"),
            format!("{long_word}9 tail"),
            format!("{long_word}İ tail"),
            "a1b22c333 0x 0xg1234567 12345678 1234567".to_owned(),
        ];
        for text in cases {
            assert_eq!(
                normalize(&text),
                normalize_as_first_written(&text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn normalize_masks_numbers_and_addresses() {
        assert_eq!(
            normalize("At 0xdeadbeef12 step 12 of 40"),
            "at # step # of #"
        );
    }
}
