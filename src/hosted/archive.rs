//! A build as it travels to a hosted server: a gzipped tar of the plan's
//! root, named by the sha256 of its bytes, with a manifest naming the
//! plans in it.
//!
//! - **Packed the same every time** ([`pack`]): entries sorted by path,
//!   mode normalized to 0644/0755, mtime and owner zero, so an unchanged
//!   tree gives the same sha256 and is not uploaded again.
//! - **Checked before anything is quoted** ([`check`]): the server reads
//!   the whole archive without writing a byte, and refuses it unless every
//!   entry is a file, a directory or a link that stays inside the build;
//!   every path is relative and never climbs (`..`); the entries, the
//!   bytes once unpacked and the archive itself are within [`Limits`];
//!   and the manifest ([`MANIFEST`]) names at least one plan that is a file
//!   of the build (its entry point). A gzip bomb stops at the unpacked
//!   limit, not at the disk's end.
//! - **Unpacked only once checked** ([`unpack`]), into a fresh directory
//!   that is renamed into place when complete, so a server killed halfway
//!   leaves no half build to play.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The manifest's path inside the archive.
pub const MANIFEST: &str = ".gameplan-build.json";

/// What the packer leaves out of a build: the state directory, version
/// control, and build output that a game never reads at play time.
pub const LEFT_OUT: &[&str] = &[".gameplan", ".git", "target"];

/// The manifest: which plans the build holds, relative to its root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The format (1).
    pub build: u32,
    pub game: String,
    pub plans: Vec<String>,
}

/// What a server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The archive's own size.
    pub archive_bytes: u64,
    /// Its files' sizes added up, once unpacked.
    pub unpacked_bytes: u64,
    pub entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            archive_bytes: 256 * 1024 * 1024,
            unpacked_bytes: 1024 * 1024 * 1024,
            entries: 50_000,
        }
    }
}

/// An archive that passed [`check`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    pub manifest: Manifest,
    pub files: u64,
    /// Its files' sizes added up.
    pub unpacked_bytes: u64,
}

/// A packed build.
pub struct Packed {
    pub bytes: Vec<u8>,
    pub sha256: String,
    pub files: u64,
}

/// Packs `root` (less [`LEFT_OUT`] and `also_left_out`, e.g. a state
/// directory elsewhere under it) with a manifest naming `plans` (paths
/// relative to `root`) for `game`.
pub fn pack(
    root: &Path,
    game: &str,
    plans: &[String],
    also_left_out: &[PathBuf],
) -> std::io::Result<Packed> {
    let mut paths = Vec::new();
    let walk = walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            let relative = e.path().strip_prefix(root).unwrap_or(e.path());
            let top = relative.components().next();
            let left_out = top.is_some_and(|c| LEFT_OUT.iter().any(|l| c.as_os_str() == *l));
            !left_out && !also_left_out.iter().any(|p| e.path() == p)
        });
    for entry in walk {
        let entry = entry.map_err(std::io::Error::other)?;
        let relative = entry.path().strip_prefix(root).unwrap_or(entry.path());
        if relative.as_os_str().is_empty() || relative == Path::new(MANIFEST) {
            continue;
        }
        paths.push((relative.to_path_buf(), entry));
    }
    let manifest = Manifest {
        build: 1,
        game: game.to_owned(),
        plans: plans.to_vec(),
    };
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    let manifest_bytes = serde_json::to_vec_pretty(&manifest).map_err(std::io::Error::other)?;
    let mut header = file_header(manifest_bytes.len() as u64, false);
    tar.append_data(&mut header, MANIFEST, manifest_bytes.as_slice())?;
    let mut files = 1;
    for (relative, entry) in paths {
        let kind = entry.file_type();
        if kind.is_dir() {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            header.set_mtime(0);
            tar.append_data(&mut header, &relative, std::io::empty())?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            header.set_mtime(0);
            tar.append_link(&mut header, &relative, &target)?;
        } else if kind.is_file() {
            let metadata = entry.metadata().map_err(std::io::Error::other)?;
            let executable =
                std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o111 != 0;
            let mut header = file_header(metadata.len(), executable);
            let file = std::fs::File::open(entry.path())?;
            tar.append_data(&mut header, &relative, file)?;
            files += 1;
        }
        // Sockets, fifos and devices are no part of a build.
    }
    let bytes = tar.into_inner()?.finish()?;
    let sha256 = crate::backend::ledger::sha256_hex(&bytes);
    Ok(Packed {
        bytes,
        sha256,
        files,
    })
}

fn file_header(size: u64, executable: bool) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(if executable { 0o755 } else { 0o644 });
    header.set_size(size);
    header.set_mtime(0);
    header
}

/// Why an archive was refused: said to the client as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Reads the whole archive and says whether a server may keep and play it
/// (the module doc lists what is checked). Writes nothing.
pub fn check(bytes: &[u8], limits: Limits) -> Result<Checked, Refused> {
    if bytes.len() as u64 > limits.archive_bytes {
        return Err(Refused(format!(
            "the archive is {} bytes, over the {} this server takes",
            bytes.len(),
            limits.archive_bytes
        )));
    }
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let entries = archive
        .entries()
        .map_err(|e| Refused(format!("it is not a gzipped tar archive: {e}")))?;
    let mut files = BTreeSet::new();
    let mut links = Vec::new();
    let mut manifest = None;
    let (mut count, mut unpacked) = (0_u64, 0_u64);
    for entry in entries {
        let mut entry =
            entry.map_err(|e| Refused(format!("the archive cannot be read to its end: {e}")))?;
        count += 1;
        if count > limits.entries {
            return Err(Refused(format!(
                "it has more than the {} entries this server takes",
                limits.entries
            )));
        }
        let path = entry
            .path()
            .map_err(|e| Refused(format!("an entry's path cannot be read: {e}")))?
            .into_owned();
        let name = inside(&path)?;
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Directory => {}
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                unpacked = unpacked.saturating_add(entry.size());
                if unpacked > limits.unpacked_bytes {
                    return Err(Refused(format!(
                        "its files add up to more than the {} bytes this server unpacks",
                        limits.unpacked_bytes
                    )));
                }
                if name == MANIFEST {
                    let mut text = String::new();
                    entry
                        .by_ref()
                        .take(64 * 1024)
                        .read_to_string(&mut text)
                        .map_err(|e| Refused(format!("{MANIFEST} cannot be read: {e}")))?;
                    manifest = Some(serde_json::from_str::<Manifest>(&text).map_err(|e| {
                        Refused(format!("{MANIFEST} is not a build manifest: {e}"))
                    })?);
                } else {
                    // Read to its end: a truncated or corrupt stream is
                    // found here, not when a cell plays.
                    std::io::copy(&mut entry, &mut std::io::sink())
                        .map_err(|e| Refused(format!("`{name}` cannot be read to its end: {e}")))?;
                }
                files.insert(name);
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .ok()
                    .flatten()
                    .ok_or_else(|| Refused(format!("the link `{name}` has no target")))?;
                links.push((path.clone(), target.into_owned()));
            }
            other => {
                return Err(Refused(format!(
                    "`{name}` is a {other:?} entry; a build holds files, directories and links inside it only"
                )));
            }
        }
    }
    stay_inside(&links)?;
    let manifest = manifest.ok_or_else(|| {
        Refused(format!(
            "it has no {MANIFEST}: pack builds with `gameplan hosted quote`, which writes it"
        ))
    })?;
    if manifest.plans.is_empty() {
        return Err(Refused(format!("{MANIFEST} names no plan")));
    }
    for plan in &manifest.plans {
        if !files.contains(plan.trim_start_matches("./")) {
            return Err(Refused(format!(
                "{MANIFEST} names the plan `{plan}`, which is not a file of the build"
            )));
        }
    }
    Ok(Checked {
        manifest,
        files: files.len() as u64,
        unpacked_bytes: unpacked,
    })
}

/// Refuses a link (its path, its target) that points outside the build.
fn stay_inside(links: &[(PathBuf, PathBuf)]) -> Result<(), Refused> {
    for (path, target) in links {
        if target.is_absolute() || escapes(&path.parent().unwrap_or(Path::new("")).join(target)) {
            return Err(Refused(format!(
                "the link `{}` points to `{}`, outside the build",
                path.display(),
                target.display()
            )));
        }
    }
    Ok(())
}

/// The entry's path as a relative, normalized name, or why not.
fn inside(path: &Path) -> Result<String, Refused> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(Refused(format!(
                    "the entry `{}` is not a path inside the build (absolute, or it climbs with `..`)",
                    path.display()
                )));
            }
        }
    }
    Ok(parts.join("/"))
}

/// Whether a relative path climbs above its root anywhere along it.
fn escapes(path: &Path) -> bool {
    let mut depth: i64 = 0;
    for component in path.components() {
        match component {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return true,
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Unpacks a checked archive into `dest`, which must not exist yet: into
/// a sibling first, renamed into place once whole.
pub fn unpack(bytes: &[u8], dest: &Path) -> std::io::Result<()> {
    into_place(dest, "partial", |partial| {
        if partial.exists() {
            std::fs::remove_dir_all(partial)?;
        }
        std::fs::create_dir_all(partial)?;
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
        archive.set_preserve_permissions(false);
        archive.set_preserve_mtime(false);
        archive.set_overwrite(false);
        for entry in archive.entries()? {
            let mut entry = entry?;
            // `unpack_in` refuses paths that climb out, a second guard after
            // `check`.
            entry.unpack_in(partial)?;
        }
        std::fs::File::open(partial)?.sync_all()
    })
}

/// Writes `bytes` to `path` durably (temp, fsync, rename).
pub fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    into_place(path, "tmp", |temp| {
        let mut file = std::fs::File::create(temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })
}

/// Makes `dest` in a sibling (`.NAME.SUFFIX`, in its parent, made if
/// missing) that `make` fills and syncs, then renames it into place and
/// syncs the parent: no reader, and no crash, ever leaves `dest` half made.
fn into_place(
    dest: &Path,
    suffix: &str,
    make: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let sibling = parent.join(format!(
        ".{}.{suffix}",
        dest.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ));
    make(&sibling)?;
    std::fs::rename(&sibling, dest)?;
    if let Ok(dir) = std::fs::File::open(parent) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("plan.toml"), "name = 'x'\n").expect("plan");
        std::fs::create_dir_all(dir.path().join("game/.gameplan")).expect("dirs");
        std::fs::write(dir.path().join("game/main.py"), "print(1)\n").expect("game");
        std::fs::create_dir_all(dir.path().join(".gameplan/runs")).expect("state");
        std::fs::write(dir.path().join(".gameplan/runs/big"), vec![0; 4096]).expect("state");
        std::os::unix::fs::symlink("main.py", dir.path().join("game/link.py")).expect("link");
        dir
    }

    fn raw(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        for (path, kind, body, link) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            // Written by hand: `append_data` refuses `..`, which is what
            // these archives must hold.
            let name = header.as_old_mut().name.as_mut_slice();
            name[..path.len()].copy_from_slice(path.as_bytes());
            if let Some(link) = link {
                header.set_link_name(link).expect("link");
            }
            header.set_cksum();
            tar.append(&header, *body).expect("append");
        }
        tar.into_inner().expect("tar").finish().expect("gz")
    }

    const MANIFEST_OK: &[u8] = br#"{"build":1,"game":"g","plans":["plan.toml"]}"#;

    #[test]
    fn a_tree_packs_to_the_same_bytes_twice_leaves_out_state_and_checks() {
        let dir = tree();
        let plans = vec!["plan.toml".to_owned()];
        let first = pack(dir.path(), "g", &plans, &[]).expect("pack");
        // Touching a file changes its mtime, never the archive.
        std::fs::write(dir.path().join("game/main.py"), "print(1)\n").expect("touch");
        let second = pack(dir.path(), "g", &plans, &[]).expect("pack");
        assert_eq!(first.sha256, second.sha256);
        let checked = check(&first.bytes, Limits::default()).expect("checked");
        assert_eq!(checked.manifest.plans, plans);
        let out = tempfile::tempdir().expect("tempdir");
        let dest = out.path().join("build");
        unpack(&first.bytes, &dest).expect("unpack");
        assert!(dest.join("game/main.py").is_file());
        assert!(
            dest.join("game/.gameplan").is_dir(),
            "only the root's state is left out"
        );
        assert!(
            !dest.join(".gameplan").exists(),
            "the state dir is no part of a build"
        );
        assert_eq!(
            std::fs::read_link(dest.join("game/link.py")).expect("link"),
            Path::new("main.py")
        );
    }

    #[test]
    fn archives_that_climb_link_out_lack_an_entry_point_or_exceed_a_limit_are_refused() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                raw(&[
                    (MANIFEST, tar::EntryType::Regular, MANIFEST_OK, None),
                    ("plan.toml", tar::EntryType::Regular, b"x", None),
                    ("../evil", tar::EntryType::Regular, b"x", None),
                ]),
                "climbs",
            ),
            (
                raw(&[
                    (MANIFEST, tar::EntryType::Regular, MANIFEST_OK, None),
                    ("plan.toml", tar::EntryType::Regular, b"x", None),
                    (
                        "a/l",
                        tar::EntryType::Symlink,
                        b"",
                        Some("../../etc/passwd"),
                    ),
                ]),
                "outside the build",
            ),
            (
                raw(&[
                    (MANIFEST, tar::EntryType::Regular, MANIFEST_OK, None),
                    ("plan.toml", tar::EntryType::Regular, b"x", None),
                    ("dev", tar::EntryType::Char, b"", None),
                ]),
                "entry; a build holds files",
            ),
            (
                raw(&[("plan.toml", tar::EntryType::Regular, b"x", None)]),
                "has no .gameplan-build.json",
            ),
            (
                raw(&[(MANIFEST, tar::EntryType::Regular, MANIFEST_OK, None)]),
                "not a file of the build",
            ),
            (b"not an archive".to_vec(), "invalid gzip header"),
        ];
        for (bytes, says) in cases {
            let refused = check(&bytes, Limits::default()).expect_err(says);
            assert!(refused.0.contains(says), "{says}: {refused}");
        }
        let ok = raw(&[
            (MANIFEST, tar::EntryType::Regular, MANIFEST_OK, None),
            ("plan.toml", tar::EntryType::Regular, &[7; 2000], None),
        ]);
        check(&ok, Limits::default()).expect("within the limits");
        let small = |f: fn(&mut Limits)| {
            let mut limits = Limits::default();
            f(&mut limits);
            check(&ok, limits).expect_err("over").0
        };
        assert!(small(|l| l.archive_bytes = 10).contains("over the 10 this server takes"));
        assert!(small(|l| l.unpacked_bytes = 1000).contains("more than the 1000 bytes"));
        assert!(small(|l| l.entries = 1).contains("more than the 1 entries"));
    }
}
