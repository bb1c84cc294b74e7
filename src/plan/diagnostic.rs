//! Plan problems: what went wrong, where, and what to do about it.
//!
//! Loading collects every problem of a file before giving up, so a user fixes
//! them in one pass. Each problem has a stable namespaced code (`plan::…`) that
//! tests and `--json` consumers can match on.

use super::source::Span;

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
}

impl Diagnostics {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.list.push(diagnostic);
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

/// "did you mean `x`?" for the closest candidate, if any is close enough.
pub fn did_you_mean<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(given, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("did you mean `{c}`?"))
}

/// `a`, `b` or `c`: for messages that list what is allowed.
pub fn one_of<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("`{}`", s.as_ref())).collect();
    match quoted.as_slice() {
        [] => "nothing".to_owned(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}
