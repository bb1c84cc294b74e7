//! `dispositions.toml`: accepted findings (waivers) with a reason, an owner
//! and an expiry date (docs/review.md › Dispositions).
//!
//! The file lives beside the plan. Each `[[dispositions]]` names the lens it
//! applies to and at least one matcher: a finding `fingerprint` (exact), a
//! `title` glob or a `unit` glob (over unit ids). Every matcher given must
//! match. A disposition is *in force* up to and including its `expires` day
//! (UTC); after that it discharges nothing and a finding it would have
//! discharged is reported *lapsed*, so an expired waiver turns the gate red
//! rather than silently keeping it green.
//!
//! Reading reuses the plan's machinery (the spanned tree of `plan::node`,
//! `plan::decode`'s table reader, `plan::diagnostic`), so a malformed file
//! is reported like a plan: every problem at once, each at its
//! `file:line:col` with a caret excerpt. Owns parsing, matching, the digest
//! that unit reuse keys on, and which dispositions went unused; it does not
//! decide verdicts (the gate does).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};

use super::decode::{Spanned, TableReader};
use super::diagnostic::{Diagnostic, Diagnostics, did_you_mean, one_of};
use super::node::{self, Node, Value};
use super::source::{Format, Source, Span};

/// The file's name; it is looked for in the plan's directory.
pub const FILE_NAME: &str = "dispositions.toml";

/// The largest dispositions file read. It is hand-written; a bigger one is a
/// mistake (or an attack) and is refused before parsing.
pub const MAX_DISPOSITIONS_BYTES: usize = 1024 * 1024;

/// How many dispositions one file may hold. Each one is tried against every
/// finding; thousands of waivers mean the lens is wrong, not the findings.
pub const MAX_DISPOSITIONS: usize = 10_000;

/// Where the dispositions of `plan` live: `dispositions.toml` in its directory.
pub fn beside(plan: &Path) -> PathBuf {
    plan.parent()
        .map_or_else(|| PathBuf::from(FILE_NAME), |dir| dir.join(FILE_NAME))
}

// ---------------------------------------------------------------- Date

/// A calendar day (UTC), `YYYY-MM-DD`. Ordered by time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    // Field order is the ordering: year, then month, then day.
    year: u16,
    month: u8,
    day: u8,
}

impl Date {
    /// A valid date, or `None` (month 13, February 30th, year 0).
    pub fn new(year: u16, month: u8, day: u8) -> Option<Date> {
        (year >= 1 && (1..=12).contains(&month) && day >= 1 && day <= days_in(year, month))
            .then_some(Date { year, month, day })
    }

    /// Parses exactly `YYYY-MM-DD` (four, two and two digits).
    pub fn parse(text: &str) -> Result<Date, String> {
        let bytes = text.as_bytes();
        let shaped = bytes.len() == 10
            && bytes[4] == b'-'
            && bytes[7] == b'-'
            && bytes
                .iter()
                .enumerate()
                .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
        if !shaped {
            return Err(format!("`{text}` is not a date in the form YYYY-MM-DD"));
        }
        let number = |range: std::ops::Range<usize>| text[range].parse::<u16>().unwrap_or(0);
        let (year, month, day) = (number(0..4), number(5..7), number(8..10));
        let month = u8::try_from(month).unwrap_or(0);
        let day = u8::try_from(day).unwrap_or(0);
        Date::new(year, month, day).ok_or_else(|| format!("`{text}` is not a day of the calendar"))
    }

    /// Today in UTC, from the system clock.
    pub fn today() -> Date {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Date::from_unix_days(i64::try_from(secs / 86_400).unwrap_or(0))
    }

    /// The day `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
    pub fn from_unix_days(days: i64) -> Date {
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Date {
            year: u16::try_from(year.clamp(1, 9999)).unwrap_or(1),
            month: u8::try_from(month).unwrap_or(1),
            day: u8::try_from(day).unwrap_or(1),
        }
    }
}

fn days_in(year: u16, month: u8) -> u8 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        _ => 31,
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

impl std::str::FromStr for Date {
    type Err = String;
    fn from_str(s: &str) -> Result<Date, String> {
        Date::parse(s)
    }
}

impl serde::Serialize for Date {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

// ---------------------------------------------------------------- model

/// One accepted finding, as written in the file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Disposition {
    pub id: String,
    /// The lens whose findings it may discharge.
    pub lens: String,
    /// Matches a finding's fingerprint exactly.
    pub fingerprint: Option<String>,
    /// A glob over the finding's title.
    pub title: Option<String>,
    /// A glob over the unit's id.
    pub unit: Option<String>,
    pub reason: String,
    pub owner: String,
    /// The last day it is in force (inclusive, UTC).
    pub expires: Date,
    /// The line of its `[[dispositions]]` header, to point a reader at it.
    pub line: usize,
}

impl Disposition {
    /// In force on `today`: not past its `expires` day.
    pub fn in_force(&self, today: Date) -> bool {
        today <= self.expires
    }
}

/// What a finding's disposition is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match<'a> {
    /// A disposition in force matched: the finding is discharged.
    Discharged(&'a Disposition),
    /// Only expired dispositions matched: the finding stands, and the
    /// (most recently expired) disposition is reported lapsed.
    Lapsed(&'a Disposition),
}

impl<'a> Match<'a> {
    pub fn disposition(&self) -> &'a Disposition {
        match self {
            Match::Discharged(d) | Match::Lapsed(d) => d,
        }
    }
}

/// A disposition with its globs compiled.
#[derive(Clone, Debug)]
struct Entry {
    disposition: Disposition,
    title: Option<GlobMatcher>,
    unit: Option<GlobMatcher>,
}

impl Entry {
    fn matches(&self, unit_id: &str, fingerprint: Option<&str>, title: &str) -> bool {
        let d = &self.disposition;
        d.fingerprint
            .as_deref()
            .is_none_or(|want| fingerprint == Some(want))
            && self.title.as_ref().is_none_or(|g| g.is_match(title))
            && self.unit.as_ref().is_none_or(|g| g.is_match(unit_id))
    }
}

/// The dispositions of one plan, in file order. A plan without the file has
/// none ([`Dispositions::default`]).
#[derive(Clone, Debug, Default)]
pub struct Dispositions {
    entries: Vec<Entry>,
    /// The file they were read from (`None` when there was none).
    pub path: Option<PathBuf>,
}

impl Dispositions {
    /// Reads `path`; a missing file is an empty set. Lens names are not
    /// checked (see [`Dispositions::load_for`]).
    pub fn load(path: &Path) -> Result<Dispositions, DispositionsError> {
        Self::read(path, None)
    }

    /// Reads `path` and also refuses a disposition naming a lens not in
    /// `lenses` (the plan's lens names).
    pub fn load_for(path: &Path, lenses: &[&str]) -> Result<Dispositions, DispositionsError> {
        Self::read(path, Some(lenses))
    }

    fn read(path: &Path, lenses: Option<&[&str]>) -> Result<Dispositions, DispositionsError> {
        let Some(source) = read_source(path)? else {
            return Ok(Dispositions::default());
        };
        let source = Arc::new(source);
        let mut diags = Diagnostics::default();
        let entries = parse(&source.text, lenses, &mut diags);
        if diags.is_empty() {
            Ok(Dispositions {
                entries,
                path: Some(path.to_path_buf()),
            })
        } else {
            Err(DispositionsError {
                name: source.name.clone(),
                source: Some(source),
                diagnostics: diags.into_vec(),
            })
        }
    }

    /// Parses a file's text (its name only labels problems).
    pub fn parse_str(
        name: &str,
        text: &str,
        lenses: Option<&[&str]>,
    ) -> Result<Dispositions, DispositionsError> {
        let mut diags = Diagnostics::default();
        let entries = parse(text, lenses, &mut diags);
        if diags.is_empty() {
            return Ok(Dispositions {
                entries,
                path: None,
            });
        }
        Err(DispositionsError {
            name: name.to_owned(),
            source: Some(Arc::new(Source {
                name: name.to_owned(),
                path: PathBuf::from(name),
                text: text.into(),
                format: Format::Toml,
            })),
            diagnostics: diags.into_vec(),
        })
    }

    /// Every disposition, in file order.
    pub fn all(&self) -> impl Iterator<Item = &Disposition> {
        self.entries.iter().map(|e| &e.disposition)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The dispositions of `lens` in force on `today`, in file order.
    pub fn in_force(&self, lens: &str, today: Date) -> Vec<&Disposition> {
        self.all()
            .filter(|d| d.lens == lens && d.in_force(today))
            .collect()
    }

    /// sha256 hex over what of the in-force dispositions of `lens` can
    /// change a verdict: each one's id and matchers, sorted by id. Reasons,
    /// owners and expiry dates are left out: rewording a reason or extending
    /// a date that has not passed discharges exactly the same findings, so
    /// it must not make every unit be judged again.
    pub fn in_force_digest(&self, lens: &str, today: Date) -> String {
        let mut in_force: Vec<serde_json::Value> = self
            .in_force(lens, today)
            .into_iter()
            .map(|d| serde_json::json!([d.id, d.fingerprint, d.title, d.unit]))
            .collect();
        in_force.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
        let canonical = serde_json::json!({"lens": lens, "in_force": in_force}).to_string();
        crate::reuse::sha256_hex(canonical.as_bytes())
    }

    /// The disposition of a finding of `lens` on `unit_id`: the first in
    /// force that matches discharges it; failing that, the matching one that
    /// expired last makes it lapsed; `None` when none matches.
    pub fn matching(
        &self,
        lens: &str,
        unit_id: &str,
        fingerprint: Option<&str>,
        title: &str,
        today: Date,
    ) -> Option<Match<'_>> {
        let mut lapsed: Option<&Disposition> = None;
        for entry in &self.entries {
            let d = &entry.disposition;
            if d.lens != lens || !entry.matches(unit_id, fingerprint, title) {
                continue;
            }
            if d.in_force(today) {
                return Some(Match::Discharged(d));
            }
            if lapsed.is_none_or(|l| d.expires > l.expires) {
                lapsed = Some(d);
            }
        }
        lapsed.map(Match::Lapsed)
    }

    /// The dispositions of the lenses in `judged` that matched no finding:
    /// `matched` holds the ids [`Dispositions::matching`] returned (through
    /// [`Match::disposition`]), discharged or lapsed. A lens that did not
    /// run (its gate was not reached) is not in `judged`, so its
    /// dispositions are not called unused on no evidence.
    pub fn unused<'s>(&'s self, judged: &[&str], matched: &BTreeSet<&str>) -> Vec<&'s Disposition> {
        self.all()
            .filter(|d| judged.contains(&d.lens.as_str()) && !matched.contains(d.id.as_str()))
            .collect()
    }
}

// ---------------------------------------------------------------- schema

/// `dispositions.toml` beside a plan: the findings its team accepted, each
/// with a reason, an owner and an expiry (`gameplan schema dispositions`).
// Schema only: the file is read by the spanned reader above, which reports
// every problem with its place.
#[derive(schemars::JsonSchema)]
#[schemars(deny_unknown_fields, rename = "DispositionsFile")]
#[expect(dead_code, reason = "a schema-only mirror of the file, never built")]
pub struct DispositionsFile {
    /// Accepted findings, each a `[[dispositions]]` table. A file without
    /// any waives nothing.
    dispositions: Option<Vec<DispositionEntry>>,
}

/// One accepted finding. At least one of `fingerprint`, `title` and `unit`
/// is required, and every one given must match.
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    rename = "Disposition",
    extend("anyOf" = [{"required": ["fingerprint"]}, {"required": ["title"]}, {"required": ["unit"]}])
)]
#[expect(dead_code, reason = "a schema-only mirror of the file, never built")]
struct DispositionEntry {
    /// Unique in the file; names the disposition in reports.
    id: String,
    /// The plan's lens whose findings it may discharge.
    lens: String,
    /// A finding's fingerprint, matched exactly.
    fingerprint: Option<String>,
    /// A glob over the finding's title (`*` matches anything).
    title: Option<String>,
    /// A glob over the unit's id (`*` stays within one path part, `**` crosses them).
    unit: Option<String>,
    /// Why the finding is accepted.
    reason: String,
    /// Who answers for it.
    owner: String,
    /// The last day it applies (UTC), `YYYY-MM-DD`; after it, a matching
    /// finding stands and the disposition is reported lapsed.
    #[schemars(extend("format" = "date", "pattern" = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
    expires: String,
}

// ---------------------------------------------------------------- errors

/// A dispositions file that could not be used: every problem, each with its
/// place in the file.
#[derive(Debug)]
pub struct DispositionsError {
    /// The path as reported.
    pub name: String,
    /// The text (when it could be read), for excerpts.
    pub source: Option<Arc<Source>>,
    pub diagnostics: Vec<Diagnostic>,
}

impl DispositionsError {
    /// The same problems as a plan load failure, so every command reports
    /// them the way it reports a plan's (exit 3, excerpts, `--json`).
    pub fn into_load_failure(self) -> crate::plan::LoadFailure {
        crate::plan::LoadFailure {
            name: self.name,
            source: self.source,
            diagnostics: self.diagnostics,
        }
    }
}

impl fmt::Display for DispositionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            let at = super::diagnostic::location(self.source.as_deref(), &self.name, d);
            write!(f, "{at}: {}", d.message)?;
            if let Some(help) = &d.help {
                write!(f, " ({help})")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for DispositionsError {}

fn refused(name: &str, source: Option<Source>, diagnostic: Diagnostic) -> DispositionsError {
    DispositionsError {
        name: name.to_owned(),
        source: source.map(Arc::new),
        diagnostics: vec![diagnostic],
    }
}

/// The file's text, `None` when there is no file. Size, UTF-8 and NUL are
/// checked before any parser sees it, as for a plan.
fn read_source(path: &Path) -> Result<Option<Source>, DispositionsError> {
    let name = path.display().to_string();
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(refused(
                &name,
                None,
                Diagnostic::new(
                    "dispositions::unreadable",
                    format!("cannot read {name}: {e}"),
                )
                .help("fix its permissions, or remove it if the plan has no dispositions"),
            ));
        }
    };
    if path.is_dir() {
        return Err(refused(
            &name,
            None,
            Diagnostic::new(
                "dispositions::not_a_file",
                "this is a directory, not a dispositions file",
            )
            .help(format!("`{FILE_NAME}` beside a plan must be a TOML file")),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_DISPOSITIONS_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            refused(
                &name,
                None,
                Diagnostic::new(
                    "dispositions::unreadable",
                    format!("cannot read {name}: {e}"),
                ),
            )
        })?;
    if bytes.len() > MAX_DISPOSITIONS_BYTES {
        return Err(refused(
            &name,
            None,
            Diagnostic::new(
                "dispositions::too_large",
                format!(
                    "the dispositions file is larger than {} KiB",
                    MAX_DISPOSITIONS_BYTES / 1024
                ),
            )
            .help("it is a hand-written list of accepted findings; waive by `unit` or `title` glob instead of one entry per finding"),
        ));
    }
    let source = |text: Arc<str>| Source {
        name: name.clone(),
        path: path.to_path_buf(),
        text,
        format: Format::Toml,
    };
    let text: Arc<str> = match String::from_utf8(bytes) {
        Ok(text) => text.into(),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let lossy: Arc<str> = String::from_utf8_lossy(e.as_bytes()).into();
            return Err(refused(
                &name,
                Some(source(lossy)),
                Diagnostic::new("dispositions::not_utf8", "the file is not valid UTF-8")
                    .at(Span::new(at, at + 1))
                    .label("invalid byte")
                    .help("save the file as UTF-8"),
            ));
        }
    };
    if let Some(at) = text.find('\0') {
        let shown: Arc<str> = text.replace('\0', "\u{2400}").into();
        return Err(refused(
            &name,
            Some(source(shown)),
            Diagnostic::new("dispositions::nul_byte", "the file contains a NUL byte")
                .at(Span::new(at, at + '\u{2400}'.len_utf8()))
                .label("NUL byte (shown as ␀)")
                .help("the dispositions file is text; this looks like a binary file or a bad copy"),
        ));
    }
    Ok(Some(source(text)))
}

// ---------------------------------------------------------------- parsing

/// Reads every `[[dispositions]]`, pushing each problem to `diags`.
fn parse(text: &str, lenses: Option<&[&str]>, diags: &mut Diagnostics) -> Vec<Entry> {
    let Some(tree) = node::from_toml(text, diags) else {
        return Vec::new();
    };
    let Some(mut top) = TableReader::new(&tree, "the dispositions file", diags) else {
        return Vec::new();
    };
    let list = top.entry("dispositions");
    top.finish(diags);
    let Some(list) = list else {
        // An empty file (or comments only) waives nothing, which is fine.
        return Vec::new();
    };
    let Value::Array(items) = &list.value.value else {
        diags.push(
            Diagnostic::new(
                "dispositions::wrong_type",
                format!(
                    "`dispositions` must be an array of tables, found {}",
                    list.value.value.type_name()
                ),
            )
            .at(list.key_span)
            .label("write each one as a `[[dispositions]]` table")
            .help("[[dispositions]]\nid = \"…\"\nlens = \"…\"\ntitle = \"…\"\nreason = \"…\"\nowner = \"…\"\nexpires = 2027-01-31"),
        );
        return Vec::new();
    };
    if items.len() > MAX_DISPOSITIONS {
        diags.push(
            Diagnostic::new(
                "dispositions::too_many",
                format!(
                    "{} dispositions; at most {MAX_DISPOSITIONS} are read",
                    items.len()
                ),
            )
            .at(list.key_span)
            .help("waive by `unit` or `title` glob instead of one entry per finding"),
        );
        return Vec::new();
    }
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let mut entries = Vec::new();
    let mut seen: BTreeMap<String, Span> = BTreeMap::new();
    for item in items {
        let (entry, id) = parse_one(item, lenses, line_of, diags);
        // Checked also when the disposition has other problems, so every
        // problem shows at once.
        if let Some(id) = id {
            if let Some(first) = seen.get(&id.value) {
                diags.push(
                    Diagnostic::new(
                        "dispositions::duplicate_id",
                        format!("two dispositions have the id `{}`", id.value),
                    )
                    .at(id.span)
                    .label("used again here")
                    .help(format!(
                        "ids name a disposition in reports; the first is on line {}; rename one",
                        line_of(first.start)
                    )),
                );
                continue;
            }
            seen.insert(id.value, id.span);
        }
        entries.extend(entry);
    }
    entries
}

/// One `[[dispositions]]` table (`None` when it has a problem), and its id
/// when it has one.
fn parse_one(
    item: &Node,
    lenses: Option<&[&str]>,
    line_of: impl Fn(usize) -> usize,
    diags: &mut Diagnostics,
) -> (Option<Entry>, Option<Spanned<String>>) {
    let before = diags.len();
    let Some(mut t) = TableReader::new(item, "a disposition", diags) else {
        return (None, None);
    };
    let id: Option<Spanned<String>> = t.required("id", diags);
    if let Some(id) = &id {
        t.describe(format!("disposition `{}`", id.value));
    }
    let lens: Option<Spanned<String>> = t.required("lens", diags);
    let fingerprint: Option<String> = t.optional("fingerprint", diags);
    let title: Option<Spanned<String>> = t.optional("title", diags);
    let unit: Option<Spanned<String>> = t.optional("unit", diags);
    let reason: Option<Spanned<String>> = t.required("reason", diags);
    let owner: Option<Spanned<String>> = t.required("owner", diags);
    let expires = if let Some(entry) = t.entry("expires") {
        read_date(&entry.value, diags)
    } else {
        let what = id.as_ref().map_or_else(
            || "a disposition".to_owned(),
            |id| format!("disposition `{}`", id.value),
        );
        diags.push(
            Diagnostic::new(
                "plan::missing_key",
                format!("{what} is missing the required key `expires`"),
            )
            .at(head_span(item))
            .label("`expires` is required here")
            .help("every waiver ends: add `expires = YYYY-MM-DD`, the last day it applies"),
        );
        None
    };
    let has_matcher = ["fingerprint", "title", "unit"].iter().any(|k| t.has(k));
    t.finish(diags);

    if !has_matcher {
        diags.push(
            Diagnostic::new(
                "dispositions::no_matcher",
                format!(
                    "{} matches nothing: it has none of `fingerprint`, `title` or `unit`",
                    id.as_ref()
                        .map_or_else(|| "this disposition".to_owned(), |id| format!("disposition `{}`", id.value))
                ),
            )
            .at(head_span(item))
            .label("add a matcher to this disposition")
            .help("name the finding: `fingerprint = \"…\"` (exact), `title = \"glob\"` or `unit = \"glob\"` (a unit id such as `src/*.rs`)"),
        );
    }
    for (key, text) in [("reason", &reason), ("owner", &owner), ("id", &id)] {
        if let Some(value) = text
            && value.value.trim().is_empty()
        {
            diags.push(
                Diagnostic::new("dispositions::empty", format!("`{key}` is empty"))
                    .at(value.span)
                    .label(format!("write the {key} here"))
                    .help("a waiver says why, and who answers for it"),
            );
        }
    }
    if let (Some(lens), Some(known)) = (&lens, lenses)
        && !known.contains(&lens.value.as_str())
    {
        let mut d = Diagnostic::new(
            "dispositions::unknown_lens",
            format!("the plan has no lens `{}`", lens.value),
        )
        .at(lens.span)
        .label("not a lens of the plan");
        d = match did_you_mean(&lens.value, known.iter().copied()) {
            Some(hint) => d.help(hint),
            None if known.is_empty() => {
                d.help("the plan declares no `[[lenses]]`; remove the disposition")
            }
            None => d.help(format!("the plan's lenses are {}", one_of(known))),
        };
        diags.push(d);
    }
    let title_glob = title.as_ref().and_then(|g| compile(g, false, diags));
    let unit_glob = unit.as_ref().and_then(|g| compile(g, true, diags));

    if diags.len() > before {
        return (None, id);
    }
    let entry = (|| {
        Some(Entry {
            disposition: Disposition {
                id: id.as_ref()?.value.clone(),
                lens: lens?.value,
                fingerprint,
                title: title.map(|t| t.value),
                unit: unit.map(|u| u.value),
                reason: reason?.value,
                owner: owner?.value,
                expires: expires?,
                line: line_of(head_span(item).start),
            },
            title: title_glob,
            unit: unit_glob,
        })
    })();
    (entry, id)
}

/// Where to point for a problem of a whole disposition: its first key.
fn head_span(item: &Node) -> Span {
    item.table()
        .and_then(|entries| entries.first())
        .map_or(item.span, |e| e.key_span)
}

/// `expires`: a TOML date (`2027-01-31`) or a string holding one.
fn read_date(node: &Node, diags: &mut Diagnostics) -> Option<Date> {
    let text = match &node.value {
        Value::Datetime(text) | Value::Str(text) | Value::Scalar(text) => text,
        other => {
            diags.push(
                Diagnostic::new(
                    "dispositions::bad_date",
                    format!("`expires` must be a date, found {}", other.type_name()),
                )
                .at(node.span)
                .label("expected YYYY-MM-DD")
                .help("write the last day the waiver applies: `expires = 2027-01-31`"),
            );
            return None;
        }
    };
    match Date::parse(text) {
        Ok(date) => Some(date),
        Err(message) => {
            let help = if text.len() > 10 && Date::parse(&text[..10]).is_ok() {
                "a day, without a time: `expires = 2027-01-31` (it applies to the end of that day, UTC)"
            } else {
                "write the last day the waiver applies: `expires = 2027-01-31`"
            };
            diags.push(
                Diagnostic::new("dispositions::bad_date", message)
                    .at(node.span)
                    .label("expected YYYY-MM-DD")
                    .help(help),
            );
            None
        }
    }
}

/// A `title` glob (`*` matches anything, `/` included) or a `unit` glob
/// (`*` stays within one path part, as in the plan's `files` patterns).
fn compile(
    glob: &Spanned<String>,
    path_like: bool,
    diags: &mut Diagnostics,
) -> Option<GlobMatcher> {
    match GlobBuilder::new(&glob.value)
        .literal_separator(path_like)
        .backslash_escape(true)
        .build()
    {
        Ok(g) => Some(g.compile_matcher()),
        Err(e) => {
            diags.push(
                Diagnostic::new("dispositions::bad_glob", format!("not a valid glob: {}", e.kind()))
                    .at(glob.span)
                    .label("this glob")
                    .help("`*` matches within a path part, `**` across parts, `?` one character, `[abc]` a set; `\\` escapes"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> Date {
        Date::parse(text).unwrap()
    }

    const GOOD: &str = r#"
[[dispositions]]
id = "legacy-unwrap"
lens = "clippy-clean"
unit = "src/legacy/**"
reason = "the legacy module is being replaced in Q1"
owner = "ana"
expires = 2027-01-31

[[dispositions]]
id = "flaky-title"
lens = "no-todo"
title = "TODO in *"
reason = "tracked in #12"
owner = "bo"
expires = "2026-12-01"

[[dispositions]]
id = "exact"
lens = "no-todo"
fingerprint = "abc123"
unit = "plans/demo.toml"
reason = "accepted"
owner = "cy"
expires = 2026-12-31
"#;

    fn good() -> Dispositions {
        Dispositions::parse_str("d.toml", GOOD, Some(&["clippy-clean", "no-todo"])).unwrap()
    }

    #[test]
    fn dates_parse_order_and_print() {
        assert_eq!(day("2027-01-31").to_string(), "2027-01-31");
        assert!(day("2026-12-31") < day("2027-01-01"));
        assert!(day("2024-02-29") > day("2024-02-28"));
        for bad in [
            "2027-1-31",
            "2027-02-30",
            "2023-02-29",
            "2027-13-01",
            "0000-01-01",
            "27-01-31",
            "2027/01/31",
            "2027-01-31T00:00:00Z",
            "",
        ] {
            assert!(Date::parse(bad).is_err(), "{bad} parsed");
        }
        assert_eq!(Date::from_unix_days(0), day("1970-01-01"));
        assert_eq!(Date::from_unix_days(19_723), day("2024-01-01"));
        assert_eq!(Date::from_unix_days(20_513), day("2026-03-01"));
        assert!(Date::today() > day("2025-01-01"));
    }

    #[test]
    fn a_missing_file_is_an_empty_set() {
        let dir = tempfile::tempdir().unwrap();
        let set = Dispositions::load(&dir.path().join(FILE_NAME)).unwrap();
        assert!(set.is_empty());
        assert_eq!(set.matching("x", "u", None, "t", day("2026-01-01")), None);
    }

    #[test]
    fn a_good_file_loads_every_field() {
        let set = good();
        assert_eq!(set.len(), 3);
        let first = set.all().next().unwrap();
        assert_eq!(first.id, "legacy-unwrap");
        assert_eq!(first.unit.as_deref(), Some("src/legacy/**"));
        assert_eq!(first.expires, day("2027-01-31"));
        assert_eq!(first.line, 3);
        assert_eq!(set.all().nth(1).unwrap().expires, day("2026-12-01"));
    }

    #[test]
    fn in_force_through_the_expiry_day_then_lapsed() {
        let set = good();
        let on = |d: &str| set.matching("no-todo", "a.rs", None, "TODO in a.rs", day(d));
        assert!(matches!(on("2026-12-01"), Some(Match::Discharged(d)) if d.id == "flaky-title"));
        assert!(matches!(on("2026-12-02"), Some(Match::Lapsed(d)) if d.id == "flaky-title"));
        assert_eq!(set.in_force("no-todo", day("2026-12-01")).len(), 2);
        assert_eq!(set.in_force("no-todo", day("2026-12-02")).len(), 1);
    }

    #[test]
    fn every_matcher_given_must_match() {
        let set = good();
        let today = day("2026-06-01");
        // fingerprint and unit both given: both must match.
        let exact = |unit, fp| set.matching("no-todo", unit, fp, "other", today);
        assert!(
            matches!(exact("plans/demo.toml", Some("abc123")), Some(Match::Discharged(d)) if d.id == "exact")
        );
        assert_eq!(exact("plans/other.toml", Some("abc123")), None);
        assert_eq!(exact("plans/demo.toml", Some("abc124")), None);
        assert_eq!(exact("plans/demo.toml", None), None);
        // Unit globs keep `*` inside one path part; `**` crosses them.
        let unit = |id| set.matching("clippy-clean", id, None, "x", today);
        assert!(unit("src/legacy/a/b.rs").is_some());
        assert!(unit("src/new.rs").is_none());
        // A lens's dispositions never discharge another lens's findings.
        assert_eq!(
            set.matching("other", "src/legacy/a.rs", None, "x", today),
            None
        );
    }

    #[test]
    fn a_discharge_in_force_wins_over_a_lapsed_one() {
        let text = r#"
[[dispositions]]
id = "old"
lens = "l"
title = "*"
reason = "r"
owner = "o"
expires = 2020-01-01

[[dispositions]]
id = "new"
lens = "l"
title = "*"
reason = "r"
owner = "o"
expires = 2030-01-01
"#;
        let set = Dispositions::parse_str("d.toml", text, None).unwrap();
        let m = set
            .matching("l", "u", None, "t", day("2025-01-01"))
            .unwrap();
        assert_eq!(m, Match::Discharged(set.all().nth(1).unwrap()));
        let m = set
            .matching("l", "u", None, "t", day("2031-01-01"))
            .unwrap();
        assert!(
            matches!(m, Match::Lapsed(d) if d.id == "new"),
            "the latest expiry is reported"
        );
    }

    #[test]
    fn unused_lists_the_judged_lenses_dispositions_that_matched_nothing() {
        let set = good();
        let today = day("2026-06-01");
        let mut matched = BTreeSet::new();
        let m = set
            .matching("no-todo", "a.rs", None, "TODO in a.rs", today)
            .unwrap();
        matched.insert(m.disposition().id.as_str());
        let unused: Vec<&str> = set
            .unused(&["no-todo"], &matched)
            .iter()
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(unused, ["exact"]);
        let unused: Vec<&str> = set
            .unused(&["no-todo", "clippy-clean"], &BTreeSet::new())
            .iter()
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(unused, ["legacy-unwrap", "flaky-title", "exact"]);
    }

    #[test]
    fn the_digest_follows_what_is_in_force_not_the_wording() {
        let set = good();
        let before = set.in_force_digest("no-todo", day("2026-12-01"));
        assert_eq!(before.len(), 64);
        assert_eq!(before, set.in_force_digest("no-todo", day("2026-11-01")));
        // flaky-title expires: the set in force changed.
        assert_ne!(before, set.in_force_digest("no-todo", day("2026-12-02")));
        // Another lens has its own digest.
        assert_ne!(
            before,
            set.in_force_digest("clippy-clean", day("2026-12-01"))
        );
        // A reworded reason keeps the digest; a changed matcher does not.
        let reworded = GOOD.replace("tracked in #12", "tracked in #13");
        let reworded = Dispositions::parse_str("d.toml", &reworded, None).unwrap();
        assert_eq!(
            before,
            reworded.in_force_digest("no-todo", day("2026-12-01"))
        );
        let retitled = GOOD.replace("TODO in *", "TODO: *");
        let retitled = Dispositions::parse_str("d.toml", &retitled, None).unwrap();
        assert_ne!(
            before,
            retitled.in_force_digest("no-todo", day("2026-12-01"))
        );
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_place() {
        let text = r#"
[[dispositions]]
id = "a"
lens = "clipy-clean"
reason = "r"
owner = "o"
expires = "2027-02-30"
colour = "red"

[[dispositions]]
id = "a"
lens = "no-todo"
title = "["
owner = ""
expires = 2027-01-01T10:00:00Z
"#;
        let err = Dispositions::parse_str("d.toml", text, Some(&["clippy-clean", "no-todo"]))
            .unwrap_err();
        let codes: Vec<&str> = err.diagnostics.iter().map(|d| d.code).collect();
        for code in [
            "dispositions::unknown_lens",
            "dispositions::bad_date",
            "plan::unknown_key",
            "dispositions::no_matcher",
            "plan::missing_key",
            "dispositions::bad_glob",
            "dispositions::empty",
        ] {
            assert!(codes.contains(&code), "{code} missing from {codes:?}");
        }
        let shown = err.to_string();
        assert!(
            shown.contains("d.toml:4:8: the plan has no lens `clipy-clean`"),
            "{shown}"
        );
        assert!(shown.contains("did you mean `clippy-clean`?"), "{shown}");
        assert!(
            shown.contains("d.toml:8:1: unknown key `colour`"),
            "{shown}"
        );
        assert!(shown.contains("without a time"), "{shown}");
    }

    #[test]
    fn a_duplicate_id_points_at_the_second() {
        let one = "[[dispositions]]\nid = \"a\"\nlens = \"l\"\ntitle = \"*\"\nreason = \"r\"\nowner = \"o\"\nexpires = 2027-01-01\n";
        let text = format!("{one}\n{one}");
        let err = Dispositions::parse_str("d.toml", &text, None).unwrap_err();
        assert_eq!(err.diagnostics.len(), 1, "{err}");
        assert_eq!(err.diagnostics[0].code, "dispositions::duplicate_id");
        assert!(err.to_string().starts_with("d.toml:10:6:"), "{err}");
        assert!(err.to_string().contains("the first is on line 2"), "{err}");
    }

    #[test]
    fn wrong_shapes_are_refused_not_panicked_on() {
        for (text, code) in [
            ("dispositions = 3", "dispositions::wrong_type"),
            ("dispositions = [1]", "plan::wrong_type"),
            ("[dispositions]\nid = 1", "dispositions::wrong_type"),
            ("waivers = []", "plan::unknown_key"),
            ("[[dispositions]\n", "plan::syntax"),
        ] {
            let err = Dispositions::parse_str("d.toml", text, None).unwrap_err();
            let codes: Vec<&str> = err.diagnostics.iter().map(|d| d.code).collect();
            assert!(
                codes
                    .iter()
                    .any(|c| c.starts_with(code.split("::").next().unwrap())),
                "{text}: {codes:?}"
            );
            assert!(codes.contains(&code), "{text}: {codes:?}");
        }
        assert!(
            Dispositions::parse_str("d.toml", "# nothing waived yet\n", None)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn the_size_and_count_limits_are_enforced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, format!("# {}\n", "x".repeat(MAX_DISPOSITIONS_BYTES))).unwrap();
        let err = Dispositions::load(&path).unwrap_err();
        assert_eq!(err.diagnostics[0].code, "dispositions::too_large");

        // Empty tables: the count is refused before any entry is read.
        let over = format!("dispositions = [{}{{}}]", "{}, ".repeat(MAX_DISPOSITIONS));
        let err = Dispositions::parse_str("d.toml", &over, None).unwrap_err();
        assert_eq!(err.diagnostics.len(), 1, "{err}");
        assert_eq!(err.diagnostics[0].code, "dispositions::too_many", "{err}");
        let at_limit = format!(
            "dispositions = [{}{{}}]",
            "{}, ".repeat(MAX_DISPOSITIONS - 1)
        );
        let err = Dispositions::parse_str("d.toml", &at_limit, None).unwrap_err();
        assert_ne!(err.diagnostics[0].code, "dispositions::too_many", "{err}");
    }

    #[test]
    fn binary_and_non_utf8_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, b"id = \"\xff\"").unwrap();
        assert_eq!(
            Dispositions::load(&path).unwrap_err().diagnostics[0].code,
            "dispositions::not_utf8"
        );
        std::fs::write(&path, b"id = \"\0\"").unwrap();
        assert_eq!(
            Dispositions::load(&path).unwrap_err().diagnostics[0].code,
            "dispositions::nul_byte"
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert_eq!(
            Dispositions::load(&path).unwrap_err().diagnostics[0].code,
            "dispositions::not_a_file"
        );
    }
}
