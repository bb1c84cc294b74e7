//! Plan problems: what went wrong, where, and what to do about it.
//!
//! Loading collects every problem of a file before giving up, so a user fixes
//! them in one pass. Each problem has a stable namespaced code (`plan::…`) that
//! tests and `--json` consumers can match on.

use super::source::{Source, Span};
pub use crate::suggest::{did_you_mean, one_of};

/// One problem found in a plan file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: &'static str,
    pub message: String,
    /// Where in the file; `None` for problems of the file as a whole (not found, too big).
    pub span: Option<Span>,
    /// Short text printed under the caret.
    pub label: Option<String>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            message: message.into(),
            span: None,
            label: None,
            help: None,
        }
    }

    #[must_use]
    pub fn at(mut self, span: Span) -> Self {
        self.span = Some(span);
        self
    }

    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// The problems found so far in one file.
#[derive(Debug, Default)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
    /// Not a problem: where an unset secret was read while secrets were
    /// deferred (`LoadOptions::defer_secrets`); carried along the same
    /// path through rendering as the problems are.
    pub unset_secrets: Vec<(String, super::source::Span)>,
    /// Not problems either: what is valid but very likely not meant (a
    /// gate no step runs). `plan check` shows them; they never fail a load.
    pub warnings: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.list.push(diagnostic);
    }

    pub fn warn(&mut self, diagnostic: Diagnostic) {
        self.warnings.push(diagnostic);
    }

    /// The warnings, in file order.
    pub fn take_warnings(&mut self) -> Vec<Diagnostic> {
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.sort_by_key(|d| d.span.map_or((0, 0), |s| (s.start, s.end)));
        warnings.dedup();
        warnings
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn into_vec(mut self) -> Vec<Diagnostic> {
        // File order reads best, and makes output stable whatever order the
        // checks ran in.
        self.list
            .sort_by_key(|d| d.span.map_or((0, 0), |s| (s.start, s.end)));
        self.list.dedup();
        self.list
    }
}

/// `file:line:col` of a problem (just `file` when it has no position).
pub fn location(source: Option<&Source>, name: &str, diagnostic: &Diagnostic) -> String {
    match (source, diagnostic.span) {
        (Some(source), Some(span)) => {
            let (line, col) = source.line_col(span.start);
            format!("{name}:{line}:{col}")
        }
        _ => name.to_owned(),
    }
}
