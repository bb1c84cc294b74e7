//! The plan's `[report]` table: how the run's `report.html` is made.
//!
//! Owns the table as written ([`RawReport`], decoded kind-first like every
//! table) and its checks: the template must be a repo file that compiles,
//! reported at the key that names it. Rendering the page is the report
//! module's (`report::html`); the plan only says which template to use.

use schemars::JsonSchema;

use super::decode::{Decode, Spanned, TableReader};
use super::diagnostic::{Diagnostic, Diagnostics};
use super::model::ReportPage;
use super::node::Node;
use super::validate::Validator;

/// The run's page, `report.html` (docs/running.md › The HTML report).
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Report")]
pub struct RawReport {
    /// A minijinja template of your own for `report.html`, relative to the
    /// repo root; it gets what the shipped template gets. Default: the
    /// shipped template.
    pub template: Option<Spanned<String>>,
}

impl Decode for RawReport {
    fn decode(node: &Node, diags: &mut Diagnostics) -> Option<Self> {
        let mut t = TableReader::new(node, "[report]", diags)?;
        let template = t.optional("template", diags);
        t.finish(diags);
        Some(RawReport { template })
    }
}

impl Validator<'_> {
    /// `[report]`: a template that is a repo file and compiles, so a run
    /// does not learn at its close that its page fell back.
    pub(in crate::plan) fn report(&mut self, raw: Option<&RawReport>) -> Option<ReportPage> {
        let template = raw?.template.as_ref()?;
        self.repo_file(template, "report template");
        if let Ok(source) = std::fs::read_to_string(self.root.join(template.value.as_str()))
            && let Err(e) = crate::template::check_page(&source)
        {
            let mut d = Diagnostic::new(
                "plan::invalid_report_template",
                format!("report template `{}`: {}", template.value, e.message),
            )
            .at(template.span)
            .label("does not compile");
            if let Some(help) = e.help {
                d = d.help(help);
            }
            self.push(d);
        }
        Some(ReportPage {
            template: Some(template.value.clone()),
        })
    }
}
