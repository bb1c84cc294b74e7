//! The [`ReuseKey`]: every input of a step's result, its canonical JSON and
//! its digest, and [`why_not_reused`], the difference between two keys in
//! words (setting names only, never their values). Also the sha256 helpers
//! keys and outputs are digested with ([`sha256_hex`], [`outputs_digest`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The version of gameplan's step semantics that a key was made under.
///
/// Bump it when a step kind starts producing different results from the same
/// inputs (not for every build): every earlier result then stops being reused,
/// and [`why_not_reused`] says so.
pub const KEY_VERSION: u32 = 3;

/// Every input of a step's result, and nothing else.
///
/// Two steps with equal keys produce the same result, so the second may reuse
/// the first's stored outputs. Build one per step from its kind, its resolved
/// settings (after templating; a plan comment never reaches here), the content
/// hashes of its input files ([`crate::reuse::FileHashCache::hash_all`]) and
/// the digests of the keys of the steps it needs.
///
/// The key is stored in clear in its result's index record, so settings
/// must not contain secrets: put a digest of a secret in instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReuseKey {
    /// [`KEY_VERSION`] when the key was made.
    pub key_version: u32,
    /// The step kind, e.g. `command`.
    pub kind: String,
    /// The step's resolved settings that affect its result.
    pub settings: Value,
    /// Repo-relative `/`-separated input path → lowercase sha256 hex of its content.
    pub inputs: BTreeMap<String, String>,
    /// Step id of each needed step → the digest of its outputs ([`outputs_digest`]).
    pub upstream: BTreeMap<String, String>,
}

impl ReuseKey {
    /// A key of the current [`KEY_VERSION`] with no inputs and no upstream steps yet.
    pub fn new(kind: impl Into<String>, settings: Value) -> Self {
        Self {
            key_version: KEY_VERSION,
            kind: kind.into(),
            settings,
            inputs: BTreeMap::new(),
            upstream: BTreeMap::new(),
        }
    }

    /// The canonical JSON text of the key: object keys sorted by UTF-8 bytes at
    /// every depth, no insignificant whitespace. Equal keys give equal text.
    pub fn canonical_json(&self) -> String {
        let mut out = String::with_capacity(256);
        // Fields are written in sorted order by hand so that the text does not
        // depend on the struct's declaration order or serde's map type.
        out.push_str("{\"inputs\":");
        write_string_map(&mut out, &self.inputs);
        out.push_str(",\"key_version\":");
        let _ = write!(out, "{}", self.key_version);
        out.push_str(",\"kind\":");
        write_json_string(&mut out, &self.kind);
        out.push_str(",\"settings\":");
        write_canonical_value(&mut out, &self.settings);
        out.push_str(",\"upstream\":");
        write_string_map(&mut out, &self.upstream);
        out.push('}');
        out
    }

    /// Lowercase sha256 hex of [`Self::canonical_json`]: the key's name in the store.
    pub fn digest(&self) -> String {
        sha256_hex(self.canonical_json().as_bytes())
    }
}

/// Human reasons why a result made under `previous` is not reused under
/// `current`, in a stable order; empty when the keys are equal.
///
/// Setting values are never quoted, only their names, since a resolved
/// setting may hold something that must not reach a log.
pub fn why_not_reused(previous: &ReuseKey, current: &ReuseKey) -> Vec<String> {
    let mut reasons = Vec::new();
    if previous.key_version != current.key_version {
        reasons.push(format!(
            "gameplan's step semantics changed (key version {} → {})",
            previous.key_version, current.key_version
        ));
    }
    if previous.kind != current.kind {
        reasons.push(format!(
            "step kind changed (`{}` → `{}`)",
            previous.kind, current.kind
        ));
    }
    settings_reasons(&previous.settings, &current.settings, &mut reasons);
    map_reasons("input", &previous.inputs, &current.inputs, &mut reasons);
    map_reasons(
        "upstream",
        &previous.upstream,
        &current.upstream,
        &mut reasons,
    );
    reasons
}

fn settings_reasons(previous: &Value, current: &Value, reasons: &mut Vec<String>) {
    if canonical_value(previous) == canonical_value(current) {
        return;
    }
    let (Value::Object(_), Value::Object(_)) = (previous, current) else {
        reasons.push("settings changed".to_owned());
        return;
    };
    object_reasons("", previous, current, reasons);
}

/// Settings that are tables of their own: a change names the entry inside
/// (`env.CC`), never a value (an env value may be a secret's stand-in).
const NESTED: [&str; 4] = ["env", "env_inputs", "game", "step"];

fn object_reasons(prefix: &str, previous: &Value, current: &Value, reasons: &mut Vec<String>) {
    let (Value::Object(old), Value::Object(new)) = (previous, current) else {
        return;
    };
    let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for name in names {
        let path = format!("{prefix}{name}");
        match (old.get(name), new.get(name)) {
            (Some(a), Some(b)) if canonical_value(a) == canonical_value(b) => {}
            (Some(a @ Value::Object(_)), Some(b @ Value::Object(_)))
                if prefix.is_empty() && NESTED.contains(&name.as_str()) =>
            {
                object_reasons(&format!("{path}."), a, b, reasons);
            }
            (None, Some(b)) => reasons.push(format!("{} added", in_plan_words(&path, b))),
            (Some(a), None) => reasons.push(format!("{} removed", in_plan_words(&path, a))),
            (Some(a), Some(b)) => {
                let (was, is) = (in_plan_words(&path, a), in_plan_words(&path, b));
                reasons.push(if was == is {
                    format!("{is} changed")
                } else {
                    format!("{was} became {is}")
                });
            }
            (None, None) => {}
        }
    }
}

/// A key's setting as the plan writes it: `program` is `run` or `argv`,
/// `env_inputs.CC` the input `"$CC"`, `cell` the matrix values.
fn in_plan_words(path: &str, value: &Value) -> String {
    match path {
        "program" if value.get("argv").is_some() => "`argv`".to_owned(),
        "program" => "`run`".to_owned(),
        "cell" => "the matrix values".to_owned(),
        _ => match path.strip_prefix("env_inputs.") {
            Some(name) => format!("environment variable `${name}`"),
            None => format!("`{}`", path.strip_prefix("step.").unwrap_or(path)),
        },
    }
}

fn map_reasons(
    what: &str,
    previous: &BTreeMap<String, String>,
    current: &BTreeMap<String, String>,
    reasons: &mut Vec<String>,
) {
    let names: BTreeSet<&String> = previous.keys().chain(current.keys()).collect();
    for name in names {
        match (previous.get(name), current.get(name)) {
            (None, Some(_)) => reasons.push(format!("{what} `{name}` added")),
            (Some(_), None) => reasons.push(format!("{what} `{name}` removed")),
            (Some(a), Some(b)) if a != b => reasons.push(format!("{what} `{name}` changed")),
            _ => {}
        }
    }
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

/// The digest of a step's outputs as steps that need it see them: sha256
/// over each (repo-relative path, content sha256), in path order. Equal
/// bytes give an equal digest however they were made, which is what lets an
/// upstream re-run that changed nothing re-run nothing below it.
pub fn outputs_digest<'a>(outputs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut sorted: Vec<(&str, &str)> = outputs.into_iter().collect();
    sorted.sort_unstable();
    let mut text = String::new();
    for (path, sha) in sorted {
        text.push_str(path);
        text.push('\0');
        text.push_str(sha);
        text.push('\n');
    }
    sha256_hex(text.as_bytes())
}

/// Lowercase hex of a digest (sha2 0.11 digests have no `{:x}`).
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// Whether `text` looks like a digest this module made (64 lowercase hex).
pub(crate) fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn canonical_value(value: &Value) -> String {
    let mut out = String::new();
    write_canonical_value(&mut out, value);
    out
}

fn write_canonical_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        // serde_json prints integers exactly and floats as the shortest text
        // that reads back to the same f64, so this is deterministic.
        Value::Number(number) => {
            let _ = write!(out, "{number}");
        }
        Value::String(text) => write_json_string(out, text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (index, (name, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_json_string(out, name);
                out.push(':');
                write_canonical_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_string_map(out: &mut String, map: &BTreeMap<String, String>) {
    // BTreeMap<String, _> iterates in byte order already.
    out.push('{');
    for (index, (name, value)) in map.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        write_json_string(out, name);
        out.push(':');
        write_json_string(out, value);
    }
    out.push('}');
}

fn write_json_string(out: &mut String, text: &str) {
    out.push('"');
    // Runs of plain text are copied whole; every byte that needs escaping
    // is ASCII, so `i` is always a char boundary.
    let mut plain = 0;
    for (i, byte) in text.bytes().enumerate() {
        let escaped = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..0x20 => "",
            _ => continue,
        };
        out.push_str(&text[plain..i]);
        if escaped.is_empty() {
            let _ = write!(out, "\\u{byte:04x}");
        } else {
            out.push_str(escaped);
        }
        plain = i + 1;
    }
    out.push_str(&text[plain..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> ReuseKey {
        let mut key = ReuseKey::new(
            "command",
            json!({"run": "cc -o app src/a.c", "env": {"CC": "cc", "A": "1"}}),
        );
        key.inputs
            .insert("src/a.c".into(), sha256_hex(b"int main;"));
        key.inputs.insert("src/b.c".into(), sha256_hex(b"int b;"));
        key.upstream.insert("fetch".into(), sha256_hex(b"fetch"));
        key
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth_without_whitespace() {
        let key = sample();
        let text = key.canonical_json();
        assert!(text.starts_with("{\"inputs\":{\"src/a.c\":\"",));
        assert!(text.contains(
            "\"settings\":{\"env\":{\"A\":\"1\",\"CC\":\"cc\"},\"run\":\"cc -o app src/a.c\"}"
        ));
        assert!(!text.contains('\n'));
        // The canonical text is valid JSON that reads back into the same key.
        let back: ReuseKey = serde_json::from_str(&text).expect("canonical text is JSON");
        assert_eq!(back, key);
    }

    /// Cross-checked independently: Python's `json.dumps(doc, sort_keys=True,
    /// separators=(",", ":"), ensure_ascii=False)` of the same document hashes
    /// to this value.
    const GOLDEN_DIGEST: &str = "8cebcca482f8637edc0d1cc9fe28e79dc7ae0f58f34288504a3ff8f3d11d96ed";

    #[test]
    fn digest_is_stable_across_runs() {
        // A fixed value: if this changes, every user's store is invalidated,
        // which needs a KEY_VERSION bump, not a silent encoding change.
        let mut key = ReuseKey::new(
            "command",
            json!({"run": "make", "n": 1.5, "x": [true, null]}),
        );
        // The encoding is what is pinned, whatever the current version.
        key.key_version = 1;
        key.inputs.insert("a.txt".into(), sha256_hex(b"a"));
        assert_eq!(
            key.canonical_json(),
            "{\"inputs\":{\"a.txt\":\"ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb\"},\
             \"key_version\":1,\"kind\":\"command\",\"settings\":{\"n\":1.5,\"run\":\"make\",\"x\":[true,null]},\
             \"upstream\":{}}"
        );
        assert_eq!(key.digest(), sha256_hex(key.canonical_json().as_bytes()));
        assert_eq!(key.digest(), GOLDEN_DIGEST);
    }

    #[test]
    fn digest_ignores_insertion_order() {
        let a = sample();
        let mut b = ReuseKey::new(
            "command",
            json!({"env": {"A": "1", "CC": "cc"}, "run": "cc -o app src/a.c"}),
        );
        b.upstream.insert("fetch".into(), sha256_hex(b"fetch"));
        b.inputs.insert("src/b.c".into(), sha256_hex(b"int b;"));
        b.inputs.insert("src/a.c".into(), sha256_hex(b"int main;"));
        assert_eq!(a.digest(), b.digest());
        assert!(why_not_reused(&a, &b).is_empty());
    }

    #[test]
    fn changed_input_changes_digest_and_is_named() {
        let previous = sample();
        let mut current = sample();
        current
            .inputs
            .insert("src/a.c".into(), sha256_hex(b"int main(void);"));
        assert_ne!(previous.digest(), current.digest());
        assert_eq!(
            why_not_reused(&previous, &current),
            ["input `src/a.c` changed"]
        );
    }

    #[test]
    fn added_and_removed_inputs_are_named() {
        let previous = sample();
        let mut current = sample();
        current.inputs.remove("src/b.c");
        current.inputs.insert("src/c.c".into(), sha256_hex(b"c"));
        assert_ne!(previous.digest(), current.digest());
        assert_eq!(
            why_not_reused(&previous, &current),
            ["input `src/b.c` removed", "input `src/c.c` added"]
        );
    }

    #[test]
    fn changed_setting_changes_digest_and_is_named_without_its_value() {
        let previous = sample();
        let mut current = sample();
        current.settings =
            json!({"run": "cc -O2 -o app src/a.c", "env": {"CC": "cc", "A": "1"}, "argv": []});
        assert_ne!(previous.digest(), current.digest());
        let reasons = why_not_reused(&previous, &current);
        assert_eq!(reasons, ["`argv` added", "`run` changed"]);
        assert!(reasons.iter().all(|r| !r.contains("-O2")));

        let mut nested = sample();
        nested.settings = json!({"run": "cc -o app src/a.c", "env": {"CC": "clang", "A": "1"}});
        assert_eq!(why_not_reused(&previous, &nested), ["`env.CC` changed"]);
        assert!(
            why_not_reused(&previous, &nested)
                .iter()
                .all(|r| !r.contains("clang"))
        );

        // What the plan writes, not what the key calls it.
        let mut shell = sample();
        shell.settings = json!({"program": {"shell": "make"}, "env_inputs": {"CC": "gcc"}});
        let mut argv = sample();
        argv.settings = json!({"program": {"argv": ["make"]}, "env_inputs": {"CC": "clang"}});
        assert_eq!(
            why_not_reused(&shell, &argv),
            ["environment variable `$CC` changed", "`run` became `argv`"]
        );
    }

    #[test]
    fn changed_upstream_changes_digest_and_is_named() {
        let previous = sample();
        let mut current = sample();
        current
            .upstream
            .insert("fetch".into(), sha256_hex(b"other"));
        current
            .upstream
            .insert("build".into(), sha256_hex(b"build"));
        assert_ne!(previous.digest(), current.digest());
        assert_eq!(
            why_not_reused(&previous, &current),
            ["upstream `build` added", "upstream `fetch` changed"]
        );
    }

    #[test]
    fn key_version_and_kind_changes_are_named() {
        let mut previous = sample();
        previous.key_version = 1;
        let mut current = sample();
        current.key_version = 2;
        current.kind = "simulate".into();
        assert_ne!(previous.digest(), current.digest());
        assert_eq!(
            why_not_reused(&previous, &current),
            [
                "gameplan's step semantics changed (key version 1 → 2)",
                "step kind changed (`command` → `simulate`)"
            ]
        );
    }

    #[test]
    fn non_object_settings_change_is_reported() {
        let previous = ReuseKey::new("simulate", json!(3));
        let current = ReuseKey::new("simulate", json!([3]));
        assert_eq!(why_not_reused(&previous, &current), ["settings changed"]);
    }

    #[test]
    fn strings_are_escaped_like_json() {
        let key = ReuseKey::new("command", json!({"run": "echo \"hi\"\n\t\\ \u{1}é"}));
        let text = key.canonical_json();
        assert!(
            text.contains(r#""run":"echo \"hi\"\n\t\\ \u0001é""#),
            "{text}"
        );
        let back: ReuseKey = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(back, key);
    }

    /// The same text `serde_json` writes for a string, escapes at either end
    /// and next to multi-byte characters included (the digest depends on it).
    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for text in [
            "",
            "\"",
            "\\x",
            "é\n",
            "\u{1}",
            "a\u{1f}b\u{8}\u{c}é€\"\r",
            "plain/text \u{7f}",
        ] {
            let mut out = String::new();
            write_json_string(&mut out, text);
            let expected = serde_json::to_string(text).expect("a string");
            assert_eq!(out, expected, "{text:?}");
        }
    }

    #[test]
    fn hex_helpers() {
        assert_eq!(to_hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert!(is_sha256_hex(&sha256_hex(b"")));
        assert!(!is_sha256_hex("../../etc"));
        assert!(!is_sha256_hex(&sha256_hex(b"").to_uppercase()));
    }
}
