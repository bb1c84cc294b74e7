//! The store's tests: round trips, damage, races, gc, the old layout.

use super::*;
use crate::reuse::why_not_reused;
use serde_json::json;
use std::sync::{Arc, Barrier};
use std::thread;

struct Fixture {
    root: tempfile::TempDir,
    state: tempfile::TempDir,
    store: Store,
}

fn fixture(files: &[(&str, &str)]) -> Fixture {
    let root = tempfile::tempdir().expect("root");
    let state = tempfile::tempdir().expect("state");
    for (path, content) in files {
        write_file(root.path(), path, content);
    }
    let store = Store::open(state.path());
    Fixture { root, state, store }
}

fn write_file(root: &Path, rel: &str, content: &str) {
    let path = join_rel(root, rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

fn read(root: &Path, rel: &str) -> String {
    fs::read_to_string(join_rel(root, rel)).expect("read")
}

fn key(run: &str) -> ReuseKey {
    let mut key = ReuseKey::new("command", json!({"run": run}));
    key.inputs.insert("src/main.c".into(), sha256_hex(b"main"));
    key
}

const OUTPUTS: [&str; 4] = [
    "build/big.log",
    "build/bin/app",
    "build/reports/deep/r.json",
    "top.txt",
];

/// Over [`INLINE_MAX`]: stored as a file under `outputs/`.
fn big() -> String {
    "a line of a log that is too long to keep inline\n".repeat(100)
}

fn built() -> Fixture {
    let big = big();
    fixture(&[
        ("build/bin/app", "#!/bin/sh\necho app\n"),
        ("build/big.log", &big),
        ("build/reports/deep/r.json", "{\"ok\":true}"),
        ("top.txt", "top"),
        ("unrelated.txt", "not an output"),
    ])
}

fn temp_dirs(store_dir: &Path) -> Vec<String> {
    fs::read_dir(store_dir)
        .map(|listing| {
            listing
                .filter_map(Result::ok)
                .map(|item| item.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(TEMP_PREFIX))
                .collect()
        })
        .unwrap_or_default()
}

/// Every file under `<state>/store`, relative, sorted.
fn store_files(state: &Path) -> Vec<String> {
    let store = state.join("store");
    let mut files: Vec<String> = walkdir::WalkDir::new(&store)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| super::super::paths::rel_string(&store, e.path()).expect("utf-8"))
        .collect();
    files.sort();
    files
}

/// Appends a whole (checksummed) record for `entry`, as a run would.
fn append_record(f: &Fixture, key: &ReuseKey, entry: &Entry) {
    append_record_at(f, key, entry, SystemTime::now());
}

fn append_record_at(f: &Fixture, key: &ReuseKey, entry: &Entry, at: SystemTime) {
    let at = u64::try_from(
        at.duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits");
    let line = index::encode(&Record::Put {
        at,
        entry: entry.clone(),
        key: key.canonical_json(),
    });
    let path = f.state.path().join("store").join(INDEX_FILE);
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .expect("open index");
    file.write_all(&line).expect("append");
}

/// Writes an entry in the old layout (before the index), as gameplan
/// did: `key.json`, the big outputs as `outputs/<i>`, `entry.json` last.
fn write_old_entry(f: &Fixture, key: &ReuseKey, outputs: &[&str]) -> Entry {
    let dir = Store::open(f.state.path()).entry_dir(&key.digest());
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(dir.join(KEY_FILE), key.canonical_json()).expect("key.json");
    let mut stored = Vec::new();
    for (index, output) in outputs.iter().enumerate() {
        let source = join_rel(f.root.path(), output);
        if let Some(small) = read_small(&source).expect("read") {
            stored.push(small.into_stored(output));
            continue;
        }
        fs::create_dir_all(dir.join(OUTPUTS_DIR)).expect("mkdir");
        let (size, sha256) =
            copy_hashing(&source, &stored_output(&dir.join(OUTPUTS_DIR), index)).expect("copy");
        stored.push(StoredOutput {
            path: (*output).to_owned(),
            size,
            sha256,
            inline: None,
            mode: None,
        });
    }
    let entry = Entry {
        format: ENTRY_FORMAT,
        key: key.digest(),
        outputs: stored,
        meta: Value::Null,
    };
    fs::write(
        dir.join(ENTRY_FILE),
        serde_json::to_vec_pretty(&entry).expect("json"),
    )
    .expect("entry.json");
    entry
}

#[test]
fn put_lookup_restore_round_trip_with_nested_paths() {
    let f = built();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let app = f.root.path().join("build/bin/app");
        fs::set_permissions(&app, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let key = key("make");
    let digest = key.digest();
    assert!(f.store.lookup(&digest).is_none());

    let entry = f
        .store
        .put(
            &key,
            f.root.path(),
            &OUTPUTS,
            json!({"summary": "built app"}),
        )
        .expect("put");
    assert_eq!(entry.key, digest);
    assert_eq!(
        entry
            .outputs
            .iter()
            .map(|o| o.path.as_str())
            .collect::<Vec<_>>(),
        OUTPUTS
    );
    assert_eq!(entry.outputs[3].size, 3);
    assert_eq!(entry.outputs[3].sha256, sha256_hex(b"top"));
    // Small outputs live in the record; only the big one is a file,
    // named by its content; the entry itself is one line of the index.
    let inline: Vec<bool> = entry.outputs.iter().map(|o| o.inline.is_some()).collect();
    assert_eq!(inline, [false, true, true, true]);
    assert_eq!(
        store_files(f.state.path()),
        [
            format!(
                "blobs/{}/{}",
                &entry.outputs[0].sha256[..2],
                entry.outputs[0].sha256
            ),
            "index.log".to_owned(),
        ]
    );
    assert_eq!(f.store.lookup(&digest), Some(entry.clone()));
    assert_eq!(f.store.stored_key(&digest), Some(key.clone()));
    // A later run (a new store value) reads the same from the index.
    let later = Store::open(f.state.path());
    assert_eq!(later.lookup(&digest), Some(entry.clone()));
    assert_eq!(later.stored_key(&digest), Some(key.clone()));
    assert!(later.warnings().is_empty());

    // Restore into a fresh checkout: nested directories are created.
    let fresh = tempfile::tempdir().expect("fresh");
    f.store.restore(&entry, fresh.path()).expect("restore");
    for path in OUTPUTS {
        assert_eq!(
            read(fresh.path(), path),
            read(f.root.path(), path),
            "{path}"
        );
    }
    assert!(!fresh.path().join("unrelated.txt").exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(fresh.path().join("build/bin/app"))
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "executables stay executable");
    }
}

#[cfg(unix)]
#[test]
fn restore_leaves_matching_files_alone_and_replaces_others() {
    use std::os::unix::fs::MetadataExt;
    let f = built();
    let entry = f
        .store
        .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    let inode = |rel: &str| {
        fs::metadata(join_rel(f.root.path(), rel))
            .expect("metadata")
            .ino()
    };
    let top_before = inode("top.txt");
    write_file(f.root.path(), "build/reports/deep/r.json", "{\"ok\":false}");
    fs::remove_file(f.root.path().join("build/bin/app")).expect("rm");

    f.store.restore(&entry, f.root.path()).expect("restore");
    assert_eq!(
        inode("top.txt"),
        top_before,
        "an unchanged file is not rewritten"
    );
    assert_eq!(
        read(f.root.path(), "build/reports/deep/r.json"),
        "{\"ok\":true}"
    );
    assert_eq!(
        read(f.root.path(), "build/bin/app"),
        "#!/bin/sh\necho app\n"
    );
}

#[test]
fn a_deleted_or_truncated_stored_output_is_a_miss() {
    let f = built();
    let key = key("make");
    let digest = key.digest();
    f.store
        .put(&key, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    let entry = f.store.lookup(&digest).expect("stored");
    let stored = |rel: &str| {
        let index = entry
            .outputs
            .iter()
            .position(|o| o.path == rel)
            .expect("stored output");
        f.store.blob(&entry.outputs[index].sha256)
    };

    fs::write(stored("build/big.log"), "t").expect("truncate");
    assert!(f.store.lookup(&digest).is_none());

    fs::remove_file(stored("build/big.log")).expect("delete");
    assert!(f.store.lookup(&digest).is_none());

    // Storing again repairs the damaged entry.
    let entry = f
        .store
        .put(&key, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put again");
    assert_eq!(f.store.lookup(&digest), Some(entry.clone()));
    assert_eq!(Store::open(f.state.path()).lookup(&digest), Some(entry));
    assert!(temp_dirs(&f.state.path().join("store")).is_empty());
}

/// An old-layout entry whose `entry.json` is damaged or gone is a miss.
#[test]
fn missing_or_damaged_old_entry_json_is_a_miss() {
    let f = built();
    let key = key("make");
    let digest = key.digest();
    write_old_entry(&f, &key, &OUTPUTS);
    assert!(Store::open(f.state.path()).lookup(&digest).is_some());
    let entry_json = f.store.entry_dir(&digest).join(ENTRY_FILE);
    fs::write(&entry_json, "{\"format\":1,").expect("damage");
    assert!(Store::open(f.state.path()).lookup(&digest).is_none());
    fs::remove_file(&entry_json).expect("delete");
    assert!(Store::open(f.state.path()).lookup(&digest).is_none());
    assert!(f.store.lookup("../../etc").is_none());
    assert!(f.store.lookup("").is_none());
}

#[test]
fn a_missing_declared_output_is_refused_and_nothing_is_stored() {
    let f = built();
    let key = key("make");
    let error = f
        .store
        .put(
            &key,
            f.root.path(),
            &["top.txt", "build/missing.bin"],
            Value::Null,
        )
        .expect_err("missing output");
    assert!(matches!(error, ReuseError::MissingOutput { .. }), "{error}");
    assert!(error.to_string().contains("build/missing.bin"));
    assert!(f.store.lookup(&key.digest()).is_none());
    assert!(Store::open(f.state.path()).lookup(&key.digest()).is_none());
    assert!(temp_dirs(&f.state.path().join("store")).is_empty());

    let error = f
        .store
        .put(&key, f.root.path(), &["build"], Value::Null)
        .expect_err("directory output");
    assert!(
        matches!(error, ReuseError::OutputNotAFile { .. }),
        "{error}"
    );
    let error = f
        .store
        .put(&key, f.root.path(), &["../outside"], Value::Null)
        .expect_err("escaping output");
    assert!(
        matches!(error, ReuseError::BadRelativePath { .. }),
        "{error}"
    );
}

#[test]
fn concurrent_puts_of_one_key_leave_one_intact_entry() {
    let f = built();
    let key = key("make");
    let digest = key.digest();
    let barrier = Arc::new(Barrier::new(4));
    let entries: Vec<Entry> = thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|worker| {
                let barrier = Arc::clone(&barrier);
                let (store, key, root) = (&f.store, &key, f.root.path());
                scope.spawn(move || {
                    barrier.wait();
                    store.put(key, root, &OUTPUTS, json!({ "worker": worker }))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("no panic").expect("put succeeds"))
            .collect()
    });
    assert_eq!(
        entries[0], entries[1],
        "the loser returns the winner's entry"
    );
    assert_eq!(f.store.lookup(&digest), Some(entries[0].clone()));
    assert_eq!(
        Store::open(f.state.path()).lookup(&digest),
        Some(entries[0].clone())
    );
    assert!(temp_dirs(&f.state.path().join("store")).is_empty());
}

/// Two runs (two store values, as two processes) that both missed and
/// both store the same key: both records are whole and either serves;
/// the log reads back without a warning, and shared blobs are one file.
#[test]
fn two_runs_storing_one_key_at_once_leave_an_intact_entry() {
    let f = built();
    let key = key("make");
    let digest = key.digest();
    let barrier = Arc::new(Barrier::new(2));
    let entries: Vec<Entry> = thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|run| {
                let barrier = Arc::clone(&barrier);
                let (state, key, root) = (f.state.path(), &key, f.root.path());
                scope.spawn(move || {
                    let store = Store::open(state);
                    // Both look first (a miss), then both store.
                    assert!(store.lookup(&key.digest()).is_none());
                    barrier.wait();
                    store.put(key, root, &OUTPUTS, json!({ "run": run }))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("no panic").expect("put succeeds"))
            .collect()
    });
    let later = Store::open(f.state.path());
    let found = later.lookup(&digest).expect("an intact entry");
    assert!(entries.contains(&found), "{found:?}");
    assert!(later.warnings().is_empty(), "{:?}", later.warnings());
    let fresh = tempfile::tempdir().expect("fresh");
    later.restore(&found, fresh.path()).expect("restore");
    assert_eq!(read(fresh.path(), "build/big.log"), big());
    let blobs = store_files(f.state.path())
        .into_iter()
        .filter(|p| p.starts_with("blobs/"))
        .count();
    assert_eq!(blobs, 1, "the big output is one blob, by content");
}

#[test]
fn restore_refuses_a_stored_file_that_no_longer_matches() {
    let f = built();
    let key = key("make");
    let entry = f
        .store
        .put(&key, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    let index = entry
        .outputs
        .iter()
        .position(|o| o.path == "build/big.log")
        .expect("stored");
    let stored = f.store.blob(&entry.outputs[index].sha256);
    fs::write(&stored, big().to_uppercase()).expect("same size, other bytes");
    let fresh = tempfile::tempdir().expect("fresh");
    let error = f.store.restore(&entry, fresh.path()).expect_err("corrupt");
    assert!(matches!(error, ReuseError::StoreCorrupt { .. }), "{error}");
    assert!(error.to_string().contains("build/big.log"));
    assert!(!fresh.path().join("build/big.log").exists());
}

#[test]
fn outputs_up_to_the_inline_limit_live_in_the_record_and_larger_ones_are_blobs() {
    let limit = usize::try_from(INLINE_MAX).expect("small");
    let at_limit = "x".repeat(limit);
    let over_limit = "y".repeat(limit + 1);
    let f = fixture(&[("at.bin", &at_limit), ("over.bin", &over_limit)]);
    let key = key("limit");
    let entry = f
        .store
        .put(&key, f.root.path(), &["at.bin", "over.bin"], Value::Null)
        .expect("put");
    assert!(
        entry.outputs[0].inline.is_some(),
        "exactly INLINE_MAX is inline"
    );
    assert!(entry.outputs[1].inline.is_none(), "one byte more is a file");
    assert_eq!(
        fs::read(f.store.blob(&entry.outputs[1].sha256)).expect("stored file"),
        over_limit.as_bytes()
    );
    assert!(!f.store.blob(&entry.outputs[0].sha256).exists());

    let fresh = tempfile::tempdir().expect("fresh");
    f.store.restore(&entry, fresh.path()).expect("restore");
    assert_eq!(read(fresh.path(), "at.bin"), at_limit);
    assert_eq!(read(fresh.path(), "over.bin"), over_limit);
}

/// A record forged with a valid checksum (so not caught as damage):
/// same length, other bytes is refused on restore; cut short is a miss.
#[test]
fn an_inline_output_that_no_longer_matches_is_refused_or_a_miss() {
    use base64::Engine as _;
    let f = built();
    let key = key("make");
    let digest = key.digest();
    let entry = f
        .store
        .put(&key, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    let edit = |inline: &str| {
        let mut damaged = entry.clone();
        let top = damaged
            .outputs
            .iter_mut()
            .find(|o| o.path == "top.txt")
            .expect("top");
        top.inline = Some(inline.to_owned());
        append_record(&f, &key, &damaged);
        damaged
    };
    let damaged = edit(&base64::engine::general_purpose::STANDARD.encode("TOP"));
    let store = Store::open(f.state.path());
    assert_eq!(store.lookup(&digest), Some(damaged.clone()));
    let fresh = tempfile::tempdir().expect("fresh");
    let error = store.restore(&damaged, fresh.path()).expect_err("corrupt");
    assert!(matches!(error, ReuseError::StoreCorrupt { .. }), "{error}");
    assert!(!fresh.path().join("top.txt").exists());
    edit("dG9");
    assert!(Store::open(f.state.path()).lookup(&digest).is_none());
}

#[cfg(unix)]
#[test]
fn symlinks_never_lead_the_store_outside_the_root() {
    use std::os::unix::fs::symlink;
    let f = built();
    let outside = tempfile::tempdir().expect("outside");
    fs::write(outside.path().join("secret"), "secret").expect("write");
    symlink(outside.path().join("secret"), f.root.path().join("leak")).expect("link");
    let error = f
        .store
        .put(&key("make"), f.root.path(), &["leak"], Value::Null)
        .expect_err("outside output");
    assert!(
        matches!(error, ReuseError::SymlinkOutsideRoot { .. }),
        "{error}"
    );

    let entry = f
        .store
        .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    let fresh = tempfile::tempdir().expect("fresh");
    symlink(outside.path(), fresh.path().join("build")).expect("link");
    let error = f
        .store
        .restore(&entry, fresh.path())
        .expect_err("outside dir");
    assert!(
        matches!(error, ReuseError::SymlinkOutsideRoot { .. }),
        "{error}"
    );
    assert!(!outside.path().join("bin").exists());
}

#[test]
fn last_keys_per_plan_explain_why_not_reused() {
    let f = fixture(&[]);
    assert!(f.store.last_keys("demo").is_empty());
    let first = key("make");
    let second = key("make -j4");
    let keys = |pairs: &[(&str, &ReuseKey)]| -> BTreeMap<String, ReuseKey> {
        pairs
            .iter()
            .map(|(s, k)| ((*s).to_owned(), (*k).clone()))
            .collect()
    };
    f.store
        .record_last("demo", &keys(&[("build", &first), ("play[a,1]", &first)]))
        .expect("record");
    assert_eq!(f.store.last_keys("demo").get("build"), Some(&first));
    assert!(f.store.last_keys("other").is_empty());
    // The same keys again (a fully reused run): the file is left as it is.
    let path = f.store.last_path("demo");
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).expect("last"));
    let before = inode(&path);
    f.store
        .record_last("demo", &keys(&[("build", &first), ("play[a,1]", &first)]))
        .expect("record the same");
    assert_eq!(inode(&path), before, "not rewritten");
    // A file from before fingerprints is read, and rewritten with one.
    let old = json!({"plan": "demo", "steps": {"build": &first, "play[a,1]": &first}});
    fs::write(&path, serde_json::to_vec(&old).expect("old file")).expect("write");
    assert_eq!(f.store.last_keys("demo").get("build"), Some(&first));
    f.store
        .record_last("demo", &keys(&[("build", &first), ("play[a,1]", &first)]))
        .expect("record over the old file");
    assert!(
        fs::read_to_string(&path)
            .expect("read")
            .starts_with("{\"fingerprint\":\"")
    );
    assert_eq!(f.store.last_keys("demo").get("play[a,1]"), Some(&first));

    // A later run of the same plan merges: steps it did not run keep their key.
    f.store
        .record_last("demo", &keys(&[("build", &second)]))
        .expect("record again");
    let last = f.store.last_keys("demo");
    assert_eq!(last.get("build"), Some(&second));
    assert_eq!(last.get("play[a,1]"), Some(&first));
    assert_eq!(why_not_reused(&first, &second), ["`run` changed"]);
}

/// Issue 10 (`gameplan gc`): entries are listed with their size and last
/// use, a reuse recorded at the end of a run refreshes the use, and
/// removing one leaves the others and `last/` alone.
#[test]
fn entries_list_size_and_last_use_and_remove_one() {
    let f = built();
    let (old, new) = (key("make"), key("make -j4"));
    let old_digest = old.digest();
    let old_entry = f
        .store
        .put(&old, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    f.store
        .put(&new, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    f.store
        .record_last("demo", &BTreeMap::from([("build".to_owned(), old.clone())]))
        .expect("record");
    // Stored an hour ago: a record as an earlier run wrote it.
    let past = SystemTime::now() - Duration::from_secs(3600);
    append_record_at(&f, &old, &old_entry, past);
    let used = |digest: &str| {
        Store::open(f.state.path())
            .entries()
            .into_iter()
            .find(|e| e.digest == digest)
            .map(|e| e.last_used)
    };
    let was = used(&old_digest).expect("listed");
    let run = Store::open(f.state.path());
    run.mark_used(&old_digest);
    assert_eq!(used(&old_digest), Some(was), "written at the run's end");
    run.flush_used().expect("flush");
    assert!(used(&old_digest) > Some(past + Duration::from_secs(60)));

    let store = Store::open(f.state.path());
    let entries = store.entries();
    assert_eq!(entries.len(), 2, "{entries:?}");
    for entry in &entries {
        // Its record and its one blob (the big log, shared by both).
        assert!(entry.bytes > big().len() as u64, "{entry:?}");
        assert!(entry.bytes < big().len() as u64 + 4096, "{entry:?}");
    }
    store.remove_entry(&old_digest).expect("remove");
    assert!(store.lookup(&old_digest).is_none());
    assert!(store.lookup(&new.digest()).is_some());
    let later = Store::open(f.state.path());
    assert!(later.lookup(&old_digest).is_none());
    assert!(later.lookup(&new.digest()).is_some(), "its blob is kept");
    assert_eq!(later.entries().len(), 1);
    assert_eq!(later.last_keys("demo").get("build"), Some(&old));
}

#[test]
fn stale_temp_dirs_are_swept_and_entries_kept() {
    let f = built();
    let key = key("make");
    f.store
        .put(&key, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    let stale = f.state.path().join("store").join(".tmp-99999-0");
    fs::create_dir_all(stale.join("outputs")).expect("mkdir");
    assert_eq!(f.store.remove_stale_temp_dirs(Duration::from_secs(3600)), 0);
    assert_eq!(f.store.remove_stale_temp_dirs(Duration::ZERO), 1);
    assert!(!stale.exists());
    assert!(f.store.lookup(&key.digest()).is_some());
}

/// Issue 8, item 5: an entry edited to name the step's script is
/// refused whole; nothing is written over the script or anywhere else.
#[test]
fn an_entry_naming_a_path_outside_the_outputs_is_refused() {
    let f = built();
    write_file(f.root.path(), "step.sh", "echo the real step\n");
    let mut entry = f
        .store
        .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    // The edit: top.txt's record now names step.sh.
    let top = entry
        .outputs
        .iter_mut()
        .find(|o| o.path == "top.txt")
        .expect("top.txt stored");
    top.path = "step.sh".to_owned();
    fs::remove_file(f.root.path().join("build/bin/app")).expect("rm");

    let scope =
        || RestoreScope::new(&["build/**", "top.txt"], ["step.sh".to_owned()]).expect("scope");
    let error = f
        .store
        .restore_within(&entry, f.root.path(), &scope())
        .expect_err("refused");
    assert!(
        matches!(&error, ReuseError::RestoreOutsideOutputs { path, .. } if path == "step.sh"),
        "{error}"
    );
    let error = f
        .store
        .restore_lazily(&entry, f.root.path(), || Some(scope()))
        .expect_err("refused when it must write");
    assert!(
        matches!(&error, ReuseError::RestoreOutsideOutputs { path, .. } if path == "step.sh"),
        "{error}"
    );
    assert_eq!(read(f.root.path(), "step.sh"), "echo the real step\n");
    assert!(
        !f.root.path().join("build/bin/app").exists(),
        "nothing is restored from a refused entry"
    );
    // The plain restore (today's call site) still trusts the entry.
    f.store.restore(&entry, f.root.path()).expect("restore");
    assert_eq!(read(f.root.path(), "step.sh"), "top");
}

/// Issue 8, item 5: `outputs = ["**"]` stores the plan and the inputs
/// too; a restore leaves them as they are in the working tree (a hand
/// edit to the plan is not reverted).
#[test]
fn a_restore_never_writes_over_an_input_or_the_plan() {
    let f = fixture(&[
        ("plan.toml", "# the plan\n"),
        ("src/in.txt", "input"),
        ("out/o.txt", "output"),
    ]);
    let all = ["out/o.txt", "plan.toml", "src/in.txt"];
    let entry = f
        .store
        .put(&key("make"), f.root.path(), &all, Value::Null)
        .expect("put");
    write_file(f.root.path(), "plan.toml", "# edited by hand\n");
    write_file(f.root.path(), "out/o.txt", "stale");
    let scope = RestoreScope::new(&["**"], ["plan.toml".to_owned(), "src/in.txt".to_owned()])
        .expect("scope");
    f.store
        .restore_within(&entry, f.root.path(), &scope)
        .expect("restore");
    assert_eq!(read(f.root.path(), "plan.toml"), "# edited by hand\n");
    assert_eq!(read(f.root.path(), "out/o.txt"), "output");
}

#[test]
fn restore_scope_matches_like_the_expansion() {
    let set = PatternSet::parse(&["build", "reports/*.json", "**/*.o"]).expect("parse");
    for yes in ["build/x", "build/a/b", "reports/r.json", "a/b/c.o", "c.o"] {
        assert!(set.matches(yes), "{yes}");
    }
    for no in [
        "buildx",
        "reports/a/r.json",
        "step.sh",
        ".git/hooks/x.o",
        "a/.gameplan/x.o",
    ] {
        assert!(!set.matches(no), "{no}");
    }
    assert!(
        PatternSet::parse(&["."])
            .expect("parse")
            .matches("any/thing")
    );
}

fn set_dir_mtime(dir: &Path, age: Duration) {
    fs::File::open(dir)
        .expect("open dir")
        .set_modified(SystemTime::now() - age)
        .expect("set mtime");
}

/// A pid that was alive a moment ago and is not any more.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

/// Issue 8, item 16: a store's first write sweeps the temporary entries
/// of killed writes: an hour old, or a minute old with a dead writer;
/// a live writer's recent one stays.
#[test]
fn the_first_put_sweeps_abandoned_temp_dirs() {
    let f = built();
    let store_dir = f.state.path().join("store");
    let me = std::process::id();
    let dead = dead_pid();
    let make = |name: &str, age: Duration| {
        let dir = store_dir.join(name);
        fs::create_dir_all(dir.join("outputs")).expect("mkdir");
        fs::write(dir.join("outputs/0"), "partial").expect("write");
        set_dir_mtime(&dir, age);
    };
    make(&format!(".tmp-{dead}-0"), Duration::from_secs(120));
    make(&format!(".tmp-{dead}-1"), Duration::from_secs(5));
    make(&format!(".tmp-{me}-900"), Duration::from_secs(7200));
    make(&format!(".tmp-{me}-901"), Duration::from_secs(120));
    make(".tmp-0-0", Duration::from_secs(120));

    let store = Store::open(f.state.path());
    store
        .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    let mut left = temp_dirs(&store_dir);
    left.sort();
    let mut expected = vec![
        format!(".tmp-{dead}-1"),
        format!(".tmp-{me}-901"),
        ".tmp-0-0".to_owned(),
    ];
    expected.sort();
    assert_eq!(left, expected);
    // Once per opened store: a later put does not list the store again.
    make(&format!(".tmp-{dead}-2"), Duration::from_secs(7200));
    store
        .put(&key("other"), f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    assert!(store_dir.join(format!(".tmp-{dead}-2")).exists());
}

/// A step with small (or no) outputs creates no file: its entry is one
/// line appended to the index.
#[test]
fn a_step_with_small_outputs_writes_one_line_and_no_file() {
    let f = fixture(&[("out/a", ""), ("out/b", "small")]);
    for (i, outputs) in [&["out/a", "out/b"][..], &[][..]].iter().enumerate() {
        f.store
            .put(
                &key(&format!("step {i}")),
                f.root.path(),
                outputs,
                Value::Null,
            )
            .expect("put");
    }
    assert_eq!(store_files(f.state.path()), ["index.log"]);
    let log = fs::read_to_string(f.state.path().join("store/index.log")).expect("log");
    assert_eq!(log.lines().count(), 2);
    assert!(
        !f.state.path().join("store/blobs").exists(),
        "no directory either"
    );
    // The empty one (stored from its stat) comes back, empty.
    let entry = Store::open(f.state.path())
        .lookup(&key("step 0").digest())
        .expect("stored");
    assert_eq!(entry.outputs[0].sha256, EMPTY_SHA256);
    let fresh = tempfile::tempdir().expect("fresh");
    f.store.restore(&entry, fresh.path()).expect("restore");
    assert_eq!(read(fresh.path(), "out/a"), "");
    assert_eq!(read(fresh.path(), "out/b"), "small");
}

/// A store written by the old layout (one directory per entry) is read
/// and restored, never rewritten: storing its key again keeps it, and
/// only `gc` removes it.
#[test]
fn an_old_layout_store_is_read_not_rewritten_and_gc_drops_it() {
    let f = built();
    let (old, new) = (key("make"), key("make -j4"));
    let written = write_old_entry(&f, &old, &OUTPUTS);
    let before = store_files(f.state.path());

    let store = Store::open(f.state.path());
    assert_eq!(store.lookup(&old.digest()), Some(written.clone()));
    assert_eq!(store.stored_key(&old.digest()), Some(old.clone()));
    let fresh = tempfile::tempdir().expect("fresh");
    store.restore(&written, fresh.path()).expect("restore");
    for path in OUTPUTS {
        assert_eq!(
            read(fresh.path(), path),
            read(f.root.path(), path),
            "{path}"
        );
    }
    let again = store
        .put(&old, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    assert_eq!(again, written, "the old entry serves");
    assert_eq!(store_files(f.state.path()), before, "nothing rewritten");

    // New results go to the index beside it; both are listed.
    store
        .put(&new, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put new");
    let listed: BTreeSet<String> = Store::open(f.state.path())
        .entries()
        .into_iter()
        .map(|e| e.digest)
        .collect();
    assert_eq!(listed, BTreeSet::from([old.digest(), new.digest()]));
    let old_entry = Store::open(f.state.path())
        .entries()
        .into_iter()
        .find(|e| e.digest == old.digest())
        .expect("listed");
    assert_eq!(old_entry.bytes, dir_size(&store.entry_dir(&old.digest())));

    let freed = Store::open(f.state.path())
        .remove_entries(&BTreeSet::from([old.digest()]))
        .expect("gc");
    assert!(freed >= old_entry.bytes, "{freed} < {}", old_entry.bytes);
    assert!(!store.entry_dir(&old.digest()).exists());
    let later = Store::open(f.state.path());
    assert!(later.lookup(&old.digest()).is_none());
    assert!(later.lookup(&new.digest()).is_some());
}

/// A run killed in the middle of appending leaves a torn last line:
/// it is no entry and no warning, and the next run's record is whole.
#[test]
fn a_torn_index_tail_is_dropped_and_the_next_record_is_whole() {
    let f = built();
    let (first, torn, next) = (key("one"), key("two"), key("three"));
    let entry = Store::open(f.state.path())
        .put(&first, f.root.path(), &["top.txt"], Value::Null)
        .expect("put");
    let mut torn_entry = entry.clone();
    torn_entry.key = torn.digest();
    let line = index::encode(&Record::Put {
        at: 1,
        entry: torn_entry,
        key: torn.canonical_json(),
    });
    let log = f.state.path().join("store").join(INDEX_FILE);
    let mut file = OpenOptions::new().append(true).open(&log).expect("open");
    file.write_all(&line[..line.len() / 2]).expect("torn write");
    drop(file);

    let store = Store::open(f.state.path());
    assert!(store.warnings().is_empty(), "{:?}", store.warnings());
    assert!(store.lookup(&first.digest()).is_some());
    assert!(store.lookup(&torn.digest()).is_none());
    store
        .put(&next, f.root.path(), &["top.txt"], Value::Null)
        .expect("put after the torn tail");
    drop(store);
    let later = Store::open(f.state.path());
    assert!(later.lookup(&next.digest()).is_some());
    assert!(later.lookup(&first.digest()).is_some());
    assert_eq!(
        later.warnings().len(),
        1,
        "the torn line, now closed, is damage"
    );
    // gc rewrites the log without it.
    later.compact().expect("compact");
    let compacted = Store::open(f.state.path());
    assert!(compacted.warnings().is_empty());
    assert!(compacted.lookup(&next.digest()).is_some());
}

/// A damaged record is skipped with a warning that names the log and
/// the line; the entries around it serve, and it is never restored.
#[test]
fn a_corrupt_record_is_skipped_with_a_warning_never_restored() {
    let f = built();
    let keys = [key("a"), key("b"), key("c")];
    for k in &keys {
        f.store
            .put(k, f.root.path(), &OUTPUTS, Value::Null)
            .expect("put");
    }
    let log = f.state.path().join("store").join(INDEX_FILE);
    let mut bytes = fs::read(&log).expect("read");
    let second = bytes.iter().position(|&b| b == b'\n').expect("a line") + 1;
    // Flip a bit in the middle of line 2 (inside its JSON).
    bytes[second + 40] ^= 0x01;
    fs::write(&log, &bytes).expect("write");
    let store = Store::open(f.state.path());
    let warnings = store.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("line 2"), "{warnings:?}");
    assert!(warnings[0].contains("index.log"), "{warnings:?}");
    let served: Vec<bool> = keys
        .iter()
        .map(|k| store.lookup(&k.digest()).is_some())
        .collect();
    assert_eq!(served, [true, false, true]);
}

/// `gc` compaction: one record per entry with its last use kept,
/// removed entries' blobs deleted, blobs still named kept; while a run
/// holds the log, a removal is a `drop` record instead.
#[test]
fn gc_compacts_the_index_and_deletes_only_unreferenced_blobs() {
    let f = built();
    let (a, b) = (key("a"), key("b"));
    let first_run = Store::open(f.state.path());
    let a_entry = first_run
        .put(&a, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put a");
    write_file(f.root.path(), "build/big.log", &big().to_uppercase());
    // Uses are kept in milliseconds: b is stored after a.
    thread::sleep(Duration::from_millis(5));
    let b_entry = first_run
        .put(&b, f.root.path(), &OUTPUTS, Value::Null)
        .expect("put b");
    drop(first_run);
    let (a_blob, b_blob) = (
        f.store.blob(&a_entry.outputs[0].sha256),
        f.store.blob(&b_entry.outputs[0].sha256),
    );
    assert_ne!(a_blob, b_blob);
    let log = f.state.path().join("store").join(INDEX_FILE);
    let lines = || fs::read_to_string(&log).expect("log").lines().count();
    // Reusing a, stored before b, makes it the most recent: one use
    // record. Reusing it again changes no order: nothing appended.
    let reuse_a = || {
        let run = Store::open(f.state.path());
        run.mark_used(&a.digest());
        run.flush_used().expect("flush");
    };
    reuse_a();
    assert_eq!(lines(), 3);
    for _ in 0..3 {
        reuse_a();
    }
    assert_eq!(lines(), 3, "a use that changes no order is not recorded");
    let used_before = Store::open(f.state.path())
        .entries()
        .into_iter()
        .find(|e| e.digest == a.digest())
        .expect("a")
        .last_used;

    // A run holding the log: gc cannot compact; the removal is a record.
    let run = Store::open(f.state.path());
    run.put(&key("c"), f.root.path(), &["top.txt"], Value::Null)
        .expect("the run stores, holding the log");
    let freed = Store::open(f.state.path())
        .remove_entries(&BTreeSet::from([b.digest()]))
        .expect("gc while held");
    assert_eq!(freed, 0);
    assert_eq!(lines(), 5, "a put and a drop appended");
    assert!(Store::open(f.state.path()).lookup(&b.digest()).is_none());
    assert!(b_blob.exists(), "blobs wait for a gc that can compact");
    drop(run);

    let freed = Store::open(f.state.path()).compact().expect("compact");
    assert!(freed >= big().len() as u64, "{freed}");
    assert_eq!(lines(), 2, "one record per entry (a and c)");
    assert!(!b_blob.exists(), "b's blob named by nothing");
    assert!(a_blob.exists());
    let after = Store::open(f.state.path());
    let a_now = after
        .entries()
        .into_iter()
        .find(|e| e.digest == a.digest())
        .expect("a kept");
    // Milliseconds survive the rewrite.
    assert_eq!(
        a_now
            .last_used
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("ms")
            .as_millis(),
        used_before
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("ms")
            .as_millis()
    );
    let fresh = tempfile::tempdir().expect("fresh");
    after
        .restore(&after.lookup(&a.digest()).expect("a"), fresh.path())
        .expect("restore a");
    assert_eq!(read(fresh.path(), "build/big.log"), big());
}

/// Issue 19: directories are resolved once per run, not once per step;
/// a new run (a new store) resolves again, so a directory replaced by
/// a link out of the repo between runs is refused.
#[cfg(unix)]
#[test]
fn directories_resolved_by_an_earlier_run_are_resolved_again() {
    use std::os::unix::fs::symlink;
    let f = built();
    let entry = f
        .store
        .put(&key("make"), f.root.path(), &OUTPUTS, Value::Null)
        .expect("put");
    let fresh = tempfile::tempdir().expect("fresh");
    let run = Store::open(f.state.path());
    run.restore(&entry, fresh.path()).expect("first restore");
    run.restore(&entry, fresh.path())
        .expect("again, from what it knows");

    let outside = tempfile::tempdir().expect("outside");
    fs::remove_dir_all(fresh.path().join("build")).expect("rm build");
    symlink(outside.path(), fresh.path().join("build")).expect("link");
    let next_run = Store::open(f.state.path());
    let error = next_run
        .restore(&entry, fresh.path())
        .expect_err("outside dir");
    assert!(
        matches!(error, ReuseError::SymlinkOutsideRoot { .. }),
        "{error}"
    );
    assert!(fs::read_dir(outside.path()).expect("list").next().is_none());
}
