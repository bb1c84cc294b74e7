//! The plan side of `deliver`, which uploads one cell's artifacts and completes its run: it has no keys of its own.

use super::{NoParams, PlanKind, StepCheck};
use crate::plan::decode::TableReader;
use crate::plan::diagnostic::Diagnostics;

pub struct Deliver;

impl PlanKind for Deliver {
    const DOC: &'static str = "Uploads one cell's artifacts and completes its run.";
    type Keys = ();
    type Params = NoParams;

    fn decode(_: &mut TableReader<'_>, _: &mut Diagnostics) {}

    fn check((): &(), _: &mut StepCheck<'_, '_>) -> NoParams {
        NoParams
    }
}
