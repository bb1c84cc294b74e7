//! Rendering plan problems: a caret excerpt per problem, or JSON.

use std::fmt::{self, Write};
use std::sync::Arc;

use miette::{
    Diagnostic as MietteDiagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan,
    NamedSource, SourceCode,
};
use serde_json::json;

use crate::plan::LoadFailure;
use crate::plan::diagnostic::{Diagnostic, location};
use crate::plan::source::Source;

/// One problem bound to its file, in the shape miette renders.
struct Located<'a> {
    diagnostic: &'a Diagnostic,
    source: Option<NamedSource<Arc<str>>>,
    /// `file:line:col`, in the message so it is greppable even where the
    /// excerpt is not shown.
    location: String,
    /// A warning (`plan check` passes) rather than a problem.
    warning: bool,
}

impl fmt::Debug for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diagnostic.message)
    }
}

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.diagnostic.message)
    }
}

impl std::error::Error for Located<'_> {}

impl MietteDiagnostic for Located<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.diagnostic.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(if self.warning {
            miette::Severity::Warning
        } else {
            miette::Severity::Error
        })
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diagnostic
            .help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.source.as_ref().map(|s| s as &dyn SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let span = self.diagnostic.span?;
        self.source.as_ref()?;
        let label = LabeledSpan::new(self.diagnostic.label.clone(), span.start, span.len());
        Some(Box::new(std::iter::once(label)))
    }
}

/// Every problem of a failed load, rendered for a person.
pub fn render(failure: &LoadFailure, color: bool) -> String {
    let mut out = excerpts(
        failure.source.as_deref(),
        &failure.name,
        &failure.diagnostics,
        false,
        color,
    );
    let n = failure.diagnostics.len();
    let _ = writeln!(
        out,
        "{}: {n} problem{} found; nothing was run or charged",
        failure.name,
        if n == 1 { "" } else { "s" }
    );
    out
}

/// The warnings of a plan that loaded: each with its excerpt, marked as a
/// warning (the plan is valid; they are likely mistakes, not errors).
pub fn render_warnings(source: &Source, warnings: &[Diagnostic], color: bool) -> String {
    excerpts(Some(source), &source.name, warnings, true, color)
}

fn excerpts(
    source: Option<&Source>,
    name: &str,
    diagnostics: &[Diagnostic],
    warning: bool,
    color: bool,
) -> String {
    let theme = if color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_links(false)
        .with_width(100);
    let named = source.map(|s| NamedSource::new(&s.name, Arc::clone(&s.text)));
    let mut out = String::new();
    for diagnostic in diagnostics {
        let located = Located {
            diagnostic,
            source: named.clone(),
            location: location(source, name, diagnostic),
            warning,
        };
        if handler.render_report(&mut out, &located).is_err() {
            out.push_str(&located.to_string());
        }
        out.push('\n');
    }
    out
}

/// The problems of a failed load as JSON objects (for `--json`).
pub fn to_json(failure: &LoadFailure) -> Vec<serde_json::Value> {
    list_json(
        failure.source.as_deref(),
        &failure.name,
        &failure.diagnostics,
    )
}

/// Problems or warnings as JSON objects: file, line, column, code, message,
/// label, help.
pub fn list_json(
    source: Option<&Source>,
    name: &str,
    diagnostics: &[Diagnostic],
) -> Vec<serde_json::Value> {
    diagnostics
        .iter()
        .map(|d| {
            let (line, column) = match (source, d.span) {
                (Some(s), Some(span)) => {
                    let (l, c) = s.line_col(span.start);
                    (Some(l), Some(c))
                }
                _ => (None, None),
            };
            json!({
                "file": name,
                "line": line,
                "column": column,
                "code": d.code,
                "message": d.message,
                "label": d.label,
                "help": d.help,
            })
        })
        .collect()
}
