//! `gameplan report [RUN_ID] [--open] [--out FILE]`: a run's `report.html`
//! written again from its `summary.json` (after a `gameplan` upgrade, or
//! elsewhere with `--out`), and opened in the browser with `--open`.

use std::path::Path;
use std::process::{Command, Stdio};

use super::Context;
use crate::exit_code::{Done, Failure};
use crate::journal::run::RunDir;
use crate::report::run::RunReport;

pub fn run(
    cx: &Context,
    run_id: Option<&str>,
    out: Option<&Path>,
    open: bool,
    flag: Option<&Path>,
) -> Done {
    let (_, state_dir) = super::plan_runs::dirs(flag);
    let history = super::plan_runs::history(&state_dir, run_id)?;
    let run_dir = RunDir::new(&state_dir, &history.run_id);
    let summary = run_dir.summary();
    let report: RunReport = std::fs::read(&summary)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            Failure::plan(format!(
                "error: run {} has no readable summary ({}: {e}): it has not finished; \
                 `gameplan plan resume {}` finishes it and writes its page\n",
                history.run_id,
                summary.display(),
                history.run_id
            ))
        })?;
    let page = match crate::report::html::render(&report, &run_dir.dir) {
        Ok(page) => {
            if let Some(warning) = &page.warning {
                cx.console.err(&format!("warning: {warning}\n"));
            }
            page.html
        }
        Err(e) => return Err(Failure::failed(format!("error: {e}\n"))),
    };
    let path = out.map_or_else(
        || run_dir.dir.join(crate::report::html::REPORT_HTML),
        Path::to_path_buf,
    );
    crate::journal::atomic_write(&path, page.as_bytes())
        .map_err(|e| Failure::plan(format!("error: cannot write {}: {e}\n", path.display())))?;
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
    Ok(())
}
