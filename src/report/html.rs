//! `report.html`: one self-contained page per run, what a reviewer opens
//! in a browser (docs/running.md › The HTML report).
//!
//! Rendered from the run's summary ([`RunReport`], as `summary.json`
//! holds it), its `aggregate.json` when an aggregate step wrote one, and
//! each finding's first cell's `report.json` (its evidence: the
//! screenshot, the last actions, the stderr tail). The template
//! (`report.html` beside this file) is compiled into the binary: inline
//! CSS, no script, nothing fetched when viewed; images are the run's own
//! files, linked by paths relative to the page, which lives in the run's
//! directory. The coverage chart is SVG drawn here. `gameplan report`
//! renders it again from a finished run.
//!
//! A plan may name a template of its own (`[report] template`): it gets the
//! same context. One that cannot be read or rendered costs the run nothing:
//! the page is rendered with the shipped template, and a warning naming
//! the plan's template says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::run::RunReport;

/// The page's file name, in the run's directory.
pub const REPORT_HTML: &str = "report.html";

const TEMPLATE: &str = include_str!("report.html");

/// The coverage chart's line colours, one per cell, in turn.
const COLOURS: [&str; 6] = [
    "#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#57606a",
];

/// The page's path as the run's summary shows paths (as typed from where
/// gameplan ran), read off a cell's report path (`<run
/// dir>/steps/<cell>/report.md`); none when the page is not there (its
/// write failed): the summary never names a page nobody can open.
pub fn shown_path(playtest: &super::playtest::Playtest) -> Option<String> {
    let cell = playtest.cells.first()?;
    let page = Path::new(&cell.report)
        .ancestors()
        .nth(3)?
        .join(REPORT_HTML);
    page.is_file().then(|| page.display().to_string())
}

/// A rendered page, and why it is not in the plan's own template when it
/// is not.
pub struct Page {
    pub html: String,
    /// The plan's template could not be read or rendered; the page is the
    /// shipped template's.
    pub warning: Option<String>,
}

/// Renders the page of `report`, the run whose directory is `run_dir`:
/// with `report.template` (the plan's own) when it renders, else with the
/// shipped template.
pub fn render(report: &RunReport, run_dir: &Path) -> Result<Page, String> {
    let context = context(report, run_dir)?;
    let warning = match report.template.as_deref() {
        None => None,
        Some(own) => match std::fs::read_to_string(own) {
            Ok(source) => match render_template(&source, &context) {
                Ok(html) => {
                    return Ok(Page {
                        html,
                        warning: None,
                    });
                }
                Err(e) => Some(format!(
                    "the plan's report template {own} does not render: {e}"
                )),
            },
            Err(e) => Some(format!("cannot read the plan's report template {own}: {e}")),
        },
    };
    let html =
        render_template(TEMPLATE, &context).map_err(|e| format!("the report template: {e}"))?;
    Ok(Page {
        html,
        warning: warning
            .map(|w| format!("{w}; report.html was written with the shipped template instead")),
    })
}

/// `source` rendered with `context`, HTML-escaped whatever the template's
/// file is called: findings' titles and game output are not markup.
fn render_template(source: &str, context: &Value) -> Result<String, minijinja::Error> {
    let mut env = minijinja::Environment::new();
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    env.template_from_str(source)?
        .render(minijinja::Value::from(minijinja::value::Serde(context)))
}

/// What a template gets: the run, its findings with their evidence, its
/// cells, gates, progress and coverage.
fn context(report: &RunReport, run_dir: &Path) -> Result<Value, String> {
    let run = serde_json::to_value(report).map_err(|e| e.to_string())?;
    let prefix = shown_prefix(report, run_dir);
    let relative = |p: &str| p.strip_prefix(&prefix).unwrap_or(p).to_owned();
    let aggregate = aggregate_of(run_dir);
    let playtest = report.playtest.as_ref();
    let reports = cell_reports(run_dir, playtest);
    let findings: Vec<Value> = playtest
        .map(|p| {
            p.findings
                .iter()
                .map(|f| finding(f, &reports, &relative))
                .collect()
        })
        .unwrap_or_default();
    let cells: Vec<Value> = playtest
        .map(|p| {
            p.cells
                .iter()
                .map(|c| {
                    let mut v = serde_json::to_value(c).unwrap_or_default();
                    v["report"] = json!(relative(&c.report));
                    v["video"] = json!(video_of(&reports, &c.step).map(|(src, video)| {
                        json!({"src": src, "format": video["format"], "frames": video["frames"]})
                    }));
                    v
                })
                .collect()
        })
        .unwrap_or_default();
    let gates: Vec<Value> = report
        .steps
        .iter()
        .filter(|s| s.kind == "gate")
        .map(|s| json!({"id": s.id, "word": s.state.word(), "message": s.message}))
        .collect();
    let coverage = coverage_svg(&reports, playtest);
    Ok(json!({
        "run": run,
        "verdict": verdict(report.exit_code),
        "duration": format!("{:.2} s", f64::from(u32::try_from(report.duration_ms).unwrap_or(u32::MAX)) / 1000.0),
        "gates": gates,
        "findings": findings,
        "fixed": playtest.and_then(|p| p.fixed.clone()).unwrap_or_default(),
        "cells": cells,
        "progress": aggregate.as_ref().map(|a| progress(&a["progress"])),
        "personas": aggregate.as_ref().map(|a| a["personas"].clone()),
        "controllers": aggregate.as_ref().map(|a| a["controllers"].clone()),
        // Drawn here, escaped here: the template marks it safe.
        "coverage_svg": coverage,
    }))
}

/// Writes `report.html` into `run_dir`; why it is not in the plan's own
/// template when it is not.
pub fn write(report: &RunReport, run_dir: &Path) -> Result<Option<String>, String> {
    let page = render(report, run_dir)?;
    let path = run_dir.join(REPORT_HTML);
    crate::journal::atomic_write(&path, page.html.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(page.warning)
}

/// The exit code as a word and the colour of its banner.
fn verdict(code: u8) -> Value {
    let (word, class) = match code {
        crate::exit_code::SUCCESS => ("passed", "pass"),
        crate::exit_code::FAILED => ("failed", "fail"),
        crate::exit_code::INCOMPLETE => ("incomplete", "other"),
        crate::exit_code::CANCELED => ("canceled", "other"),
        _ => ("stopped", "fail"),
    };
    json!({"word": word, "class": class})
}

/// How the summary writes paths into the run's directory
/// (`.gameplan/runs/<id>/`, relative to the repo root), so each can be
/// made relative to the page.
fn shown_prefix(report: &RunReport, run_dir: &Path) -> String {
    let mut cells = report.playtest.iter().flat_map(|p| &p.cells);
    let marker = format!("{}/", report.run_id);
    cells
        .find_map(|c| {
            let at = c.report.find(&marker)?;
            Some(c.report[..at + marker.len()].to_owned())
        })
        .unwrap_or_else(|| format!("{}/", run_dir.display()))
}

/// The run's `aggregate.json`, when one of its steps wrote one.
fn aggregate_of(run_dir: &Path) -> Option<Value> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(run_dir.join("steps"))
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("aggregate.json")))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    let bytes = std::fs::read(found.first()?).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A finding as the page shows it: its line, its labels, and the evidence
/// of the first cell that met it.
fn finding(
    f: &super::playtest::FindingLine,
    reports: &CellReports,
    relative: &impl Fn(&str) -> String,
) -> Value {
    let mut labels = Vec::new();
    if f.unconfirmed {
        labels.push("unconfirmed".to_owned());
    }
    if let Some(r) = f.repeats {
        labels.push(r.text());
    }
    if let Some(b) = f.baseline {
        labels.push(b.name().to_owned());
    }
    let evidence = evidence_of(reports.get(&f.first.step), &f.id);
    let cell_rel = format!("steps/{}/", crate::journal::run::file_name(&f.first.step));
    let moment = evidence
        .get("screenshot")
        .and_then(Value::as_str)
        .and_then(|shot| moment(reports, &f.first.step, shot, evidence.get("step")));
    json!({
        "id": f.id,
        "severity": f.severity,
        "category": f.category,
        "title": f.title,
        "labels": labels,
        "met": f.met,
        "found_by": f.found_by,
        "first": f.first,
        "report": relative(&f.report),
        "replay": f.replay,
        "shrink": f.shrink,
        "at": evidence.get("step"),
        "last_actions": evidence.get("last_actions"),
        "detail": evidence.get("detail"),
        "stderr_tail": evidence.get("stderr_tail"),
        "screenshot": evidence
            .get("screenshot")
            .and_then(Value::as_str)
            .map(|s| format!("{cell_rel}{s}")),
        "video": moment,
    })
}

/// Each cell's `report.json` (the cells of the playtest, and the first
/// cell of each finding), read once: the evidence, the videos and the
/// coverage all come from them.
struct CellReports<'r> {
    run_dir: &'r Path,
    by_step: BTreeMap<String, Value>,
}

impl CellReports<'_> {
    fn get(&self, step: &str) -> Option<&Value> {
        self.by_step.get(step)
    }
}

fn cell_reports<'r>(
    run_dir: &'r Path,
    playtest: Option<&super::playtest::Playtest>,
) -> CellReports<'r> {
    let steps = playtest.into_iter().flat_map(|p| {
        p.cells
            .iter()
            .map(|c| &c.step)
            .chain(p.findings.iter().map(|f| &f.first.step))
    });
    let mut by_step = BTreeMap::new();
    for step in steps {
        if by_step.contains_key(step) {
            continue;
        }
        let path = run_dir
            .join("steps")
            .join(crate::journal::run::file_name(step))
            .join("report.json");
        if let Some(report) = std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        {
            by_step.insert(step.clone(), report);
        }
    }
    CellReports { run_dir, by_step }
}

/// The video of the cell `step`, if it wrote one that is still there: its
/// path relative to the page, and `report.json`'s `video`.
fn video_of(reports: &CellReports, step: &str) -> Option<(String, Value)> {
    let video = reports.get(step)?.get("video")?.clone();
    let name = crate::journal::run::file_name(step);
    let path = video["path"].as_str()?.to_owned();
    reports
        .run_dir
        .join("steps")
        .join(&name)
        .join(&path)
        .is_file()
        .then(|| (format!("steps/{name}/{path}"), video))
}

/// Where in its cell's video the observation whose screenshot is `shot`
/// (`screenshots/step-0004.png`) plays: a link to that moment (a media
/// fragment, `#t=SECONDS`, for webm; an animated PNG cannot be started
/// midway, so the link is to the animation) and its words.
fn moment(reports: &CellReports, step: &str, shot: &str, at: Option<&Value>) -> Option<Value> {
    let (src, video) = video_of(reports, step)?;
    let name = shot.strip_prefix("screenshots/").unwrap_or(shot);
    let frame = video["shots"]
        .as_array()?
        .iter()
        .position(|s| s.as_str() == Some(name))?;
    let fps = video["fps"].as_f64().filter(|f| *f > 0.0)?;
    #[expect(clippy::cast_precision_loss, reason = "a few hundred frames at most")]
    let seconds = frame as f64 / fps;
    let action = at.map_or_else(String::new, |a| format!("action {a}, "));
    Some(if video["format"] == "webm" {
        json!({"href": format!("{src}#t={seconds:.1}"), "text": format!("{action}{seconds:.1} s into the cell's video")})
    } else {
        json!({"href": src, "text": format!("{action}frame {} of the cell's video (an animated PNG)", frame + 1)})
    })
}

/// The evidence of finding `id` in a cell's `report`.
fn evidence_of(report: Option<&Value>, id: &str) -> serde_json::Map<String, Value> {
    report
        .and_then(|r| r["findings"].as_array())
        .and_then(|list| list.iter().find(|f| f["id"] == id))
        .and_then(|f| f["evidence"].as_object().cloned())
        .unwrap_or_default()
}

/// The progress table's rows with their completion rate written out.
fn progress(table: &Value) -> Value {
    let mut table = table.clone();
    if let Some(rows) = table["rows"].as_array_mut() {
        for row in rows {
            row["completion_rate_text"] = match row["completion_rate"].as_f64() {
                Some(rate) => json!(format!("{:.0}%", rate * 100.0)),
                None => json!("–"),
            };
            row["coverage"] = row["median_distinct_observations"].clone();
        }
    }
    table
}

/// Coverage as lines, one per cell: distinct observations after every 10
/// actions (`progress.coverage` of each `report.json`). None when no cell
/// played 10 actions.
fn coverage_svg(
    reports: &CellReports,
    playtest: Option<&super::playtest::Playtest>,
) -> Option<String> {
    let series: Vec<(String, Vec<f64>)> = playtest?
        .cells
        .iter()
        .filter_map(|c| {
            let report = reports.get(&c.step)?;
            let points: Vec<f64> = report["progress"]["coverage"]
                .as_array()?
                .iter()
                .filter_map(Value::as_f64)
                .collect();
            (!points.is_empty()).then(|| (c.step.clone(), points))
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    let (width, height, pad) = (640.0, 220.0, 36.0);
    let longest = series
        .iter()
        .map(|(_, p)| p.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let top = series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .fold(1.0_f64, f64::max);
    #[expect(clippy::cast_precision_loss, reason = "a few hundred points at most")]
    let x = |i: usize| pad + (width - 2.0 * pad) * i as f64 / (longest - 1) as f64;
    let y = |v: f64| height - pad - (height - 2.0 * pad) * v / top;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="coverage">"#
    );
    let _ = write!(
        svg,
        r##"<line x1="{pad}" y1="{b}" x2="{r}" y2="{b}" stroke="#d0d7de"/><line x1="{pad}" y1="{pad}" x2="{pad}" y2="{b}" stroke="#d0d7de"/><text x="{pad}" y="{t}">{top}</text><text x="{r}" y="{l}" text-anchor="end">{n} actions</text>"##,
        b = height - pad,
        r = width - pad,
        t = pad - 6.0,
        l = height - pad + 16.0,
        n = longest * 10,
    );
    for (i, (step, points)) in series.iter().enumerate() {
        let coords: Vec<String> = points
            .iter()
            .enumerate()
            .map(|(k, v)| format!("{:.1},{:.1}", x(k), y(*v)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke-width="1.5" stroke="{}" points="{}"><title>{}</title></polyline>"#,
            COLOURS[i % COLOURS.len()],
            coords.join(" "),
            escape(step)
        );
    }
    svg.push_str("</svg>");
    Some(svg)
}

/// `text` safe inside an SVG (XML) element.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
