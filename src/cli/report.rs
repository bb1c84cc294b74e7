//! `gameplan report [RUN_ID] [--open] [--out FILE]`: a run's `report.html`
//! written again from its `summary.json` (after a `gameplan` upgrade, or
//! elsewhere with `--out`), and opened in the browser with `--open`.

use std::path::Path;
use std::process::{Command, Stdio};

use super::Context;
use crate::exit_code;
use crate::journal::run::RunDir;
use crate::report::run::RunReport;

pub fn run(
    cx: &Context,
    run_id: Option<&str>,
    out: Option<&Path>,
    open: bool,
    flag: Option<&Path>,
) -> u8 {
    let (_, state_dir) = super::plan_runs::dirs(flag);
    let history = match super::plan_runs::read(&state_dir, run_id) {
        Ok(h) => h,
        Err(message) => {
            cx.console.err(&format!("error: {message}\n"));
            return exit_code::PLAN_ERROR;
        }
    };
    let run_dir = RunDir::new(&state_dir, &history.run_id);
    let summary = run_dir.summary();
    let report: RunReport = match std::fs::read(&summary)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            cx.console.err(&format!(
                "error: run {} has no readable summary ({}: {e}): it has not finished; \
                 `gameplan plan resume {}` finishes it and writes its page\n",
                history.run_id,
                summary.display(),
                history.run_id
            ));
            return exit_code::PLAN_ERROR;
        }
    };
    let page = match crate::report::html::render(&report, &run_dir.dir) {
        Ok(page) => {
            if let Some(warning) = &page.warning {
                cx.console.err(&format!("warning: {warning}\n"));
            }
            page.html
        }
        Err(e) => {
            cx.console.err(&format!("error: {e}\n"));
            return exit_code::FAILED;
        }
    };
    let path = out.map_or_else(
        || run_dir.dir.join(crate::report::html::REPORT_HTML),
        Path::to_path_buf,
    );
    if let Err(e) = crate::journal::atomic_write(&path, page.as_bytes()) {
        cx.console
            .err(&format!("error: cannot write {}: {e}\n", path.display()));
        return exit_code::PLAN_ERROR;
    }
    if out.is_some() {
        cx.console.err(
            "note: its images and cells' reports are linked relative to the run's directory; \
             keep the page there to follow them\n",
        );
    }
    cx.console.out(&format!("{}\n", path.display()));
    if open {
        // The desktop's opener; a machine without one says so.
        let opened = Command::new("xdg-open")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !opened.is_ok_and(|s| s.success()) {
            cx.console.err(&format!(
                "note: could not open it (no `xdg-open`?): open {} in a browser\n",
                path.display()
            ));
        }
    }
    exit_code::SUCCESS
}
