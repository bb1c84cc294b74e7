//! The plan side of `aggregate`, which merges the play reports: it has no keys of its own.

use super::{NoParams, PlanKind, StepCheck};
use crate::plan::decode::TableReader;
use crate::plan::diagnostic::Diagnostics;

pub struct Aggregate;

impl PlanKind for Aggregate {
    const DOC: &'static str = "Merges the play reports.";
    type Keys = ();
    type Params = NoParams;

    fn decode(_: &mut TableReader<'_>, _: &mut Diagnostics) {}

    fn check((): &(), _: &mut StepCheck<'_, '_>) -> NoParams {
        NoParams
    }
}
