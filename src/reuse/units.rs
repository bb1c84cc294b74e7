//! Small results a step kind keeps under keys of its own, across runs, in
//! `<state>/units/<k[0:2]>/<key>.json`: what unit-level reuse stands on (a
//! review kind's clean verdict per lens × unit, so an unchanged unit is not
//! judged again).
//!
//! The kind owns its keys (what enters them, and which to drop when a unit
//! turns out to have a finding); this module only keeps the values, like
//! the step [`super::Store`] keeps whole results. It is a cache: a value
//! that is missing, torn or unreadable is absent, never an error, and the
//! kind judges the unit again. Values are written whole (temp name, then
//! rename, as every reuse file), wrapped with their key so a file renamed
//! or truncated is not mistaken for another's value.
//!
//! A key is 1 to 128 characters of `[A-Za-z0-9_-]` (a sha256 hex fits):
//! nothing that could name a path outside the folder (`/`, `..`, a NUL) is
//! accepted.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::error::{ReuseError, io_error};
use super::write::write_atomically;

/// The folder under the state directory that holds the values.
pub const UNITS_DIR: &str = "units";

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 128;

/// A kind's values under its own keys, in `<state>/units/` (see the
/// module doc). Cheap to clone; every call goes to the file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitStore {
    dir: PathBuf,
    /// `false` under `--no-reuse`: nothing stored is read (every unit is
    /// judged again), while fresh values are still put for the next run.
    reads: bool,
}

impl UnitStore {
    /// The unit store of the state directory `state_dir`; nothing is
    /// created until a value is put.
    pub fn open(state_dir: &Path) -> UnitStore {
        UnitStore {
            dir: state_dir.join(UNITS_DIR),
            reads: true,
        }
    }

    /// The same store, read as empty unless `reads` (`--no-reuse` passes
    /// `false`): what is put still lands, for the next run.
    #[must_use]
    pub fn reading(mut self, reads: bool) -> UnitStore {
        self.reads = reads;
        self
    }

    /// The folder holding the values.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The value stored under `key`; `None` when there is none, or the
    /// file is torn, unreadable or holds another key's value.
    pub fn get(&self, key: &str) -> Result<Option<Value>, ReuseError> {
        let path = self.path(key)?;
        if !self.reads {
            return Ok(None);
        }
        let Ok(bytes) = std::fs::read(&path) else {
            return Ok(None);
        };
        let Ok(Value::Object(mut entry)) = serde_json::from_slice::<Value>(&bytes) else {
            return Ok(None);
        };
        if entry.get("key").and_then(Value::as_str) != Some(key) {
            return Ok(None);
        }
        Ok(entry.remove("value"))
    }

    /// Stores `value` under `key`, replacing what was there; a reader sees
    /// the old value or the new, never a mix.
    pub fn put(&self, key: &str, value: &Value) -> Result<(), ReuseError> {
        let path = self.path(key)?;
        let bytes = serde_json::to_vec(&json!({ "key": key, "value": value }))
            .map_err(|e| io_error("encode a value for", &path)(std::io::Error::other(e)))?;
        write_atomically(&path, &bytes)
    }

    /// Drops the value under `key`; `false` when there was none.
    pub fn remove(&self, key: &str) -> Result<bool, ReuseError> {
        let path = self.path(key)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error("remove", &path)(e)),
        }
    }

    /// `<dir>/<k[0:2]>/<key>.json`, for a key that cannot leave `dir`.
    fn path(&self, key: &str) -> Result<PathBuf, ReuseError> {
        let ok = !key.is_empty()
            && key.len() <= MAX_KEY_LEN
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(ReuseError::BadUnitKey {
                key: key.chars().take(MAX_KEY_LEN + 8).collect(),
            });
        }
        // ASCII only, so the first two bytes are a char boundary.
        let fan = &key[..key.len().min(2)];
        Ok(self.dir.join(fan).join(format!("{key}.json")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, UnitStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = UnitStore::open(dir.path());
        (dir, store)
    }

    #[test]
    fn units_put_get_remove() {
        let (dir, store) = store();
        let key = "ab12cd";
        assert_eq!(store.get(key).expect("valid key"), None);
        store.put(key, &json!({"verdict": "clear"})).expect("put");
        assert!(dir.path().join("units/ab/ab12cd.json").is_file());
        assert_eq!(
            store.get(key).expect("get"),
            Some(json!({"verdict": "clear"}))
        );
        store.put(key, &json!(2)).expect("replace");
        assert_eq!(store.get(key).expect("get"), Some(json!(2)));
        assert_eq!(store.get("ab12ce").expect("get"), None, "another key");
        assert!(store.remove(key).expect("remove"));
        assert_eq!(store.get(key).expect("get"), None);
        assert!(!store.remove(key).expect("remove again"), "nothing left");
        // A one-character key fans out to itself.
        store.put("x", &json!(null)).expect("put");
        assert_eq!(store.get("x").expect("get"), Some(json!(null)));
    }

    #[test]
    fn units_a_torn_or_corrupt_file_reads_as_absent() {
        let (_dir, store) = store();
        let key = "deadbeef";
        store.put(key, &json!({"verdict": "clear"})).expect("put");
        let path = store.dir().join("de/deadbeef.json");
        let whole = std::fs::read(&path).expect("read");
        std::fs::write(&path, &whole[..whole.len() - 1]).expect("tear");
        assert_eq!(store.get(key).expect("get"), None, "torn");
        std::fs::write(&path, b"\xff\x00garbage").expect("corrupt");
        assert_eq!(store.get(key).expect("get"), None, "not JSON");
        std::fs::write(&path, b"[1,2]").expect("wrong shape");
        assert_eq!(store.get(key).expect("get"), None, "not an entry");
        // Another key's entry copied over it is not this key's value.
        store.put("de0", &json!("other")).expect("put");
        std::fs::copy(store.dir().join("de/de0.json"), &path).expect("copy");
        assert_eq!(store.get(key).expect("get"), None, "another key's");
        std::fs::write(&path, b"").expect("empty");
        assert_eq!(store.get(key).expect("get"), None, "empty");
        // It can be put again over the damage.
        store.put(key, &json!(1)).expect("put");
        assert_eq!(store.get(key).expect("get"), Some(json!(1)));
    }

    #[test]
    fn units_a_key_that_could_escape_the_folder_is_refused() {
        let (dir, store) = store();
        let long = "a".repeat(MAX_KEY_LEN + 1);
        for key in [
            "",
            "..",
            "../x",
            "a/b",
            "/etc/passwd",
            "a\\b",
            "a.b",
            "a\0b",
            "ü",
            &long,
        ] {
            let refused = store.put(key, &json!(1)).expect_err(key);
            assert!(
                refused.to_string().contains("[A-Za-z0-9_-]"),
                "{key:?}: {refused}"
            );
            assert!(store.get(key).is_err(), "{key:?}");
            assert!(store.remove(key).is_err(), "{key:?}");
        }
        assert!(
            !dir.path().join(UNITS_DIR).exists(),
            "nothing was written anywhere"
        );
        let longest = "a".repeat(MAX_KEY_LEN);
        store.put(&longest, &json!(1)).expect("the longest key");
    }
}
