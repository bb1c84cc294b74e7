//! The plan side of `estimate`, which prices the cells that will run before anything is charged: it has no keys of its own.

use super::{NoParams, PlanKind, StepCheck};
use crate::plan::decode::TableReader;
use crate::plan::diagnostic::Diagnostics;

pub struct Estimate;

impl PlanKind for Estimate {
    const DOC: &'static str = "Prices the cells that will run before anything is charged.";
    const MOVES_MONEY: bool = true;
    type Keys = ();
    type Params = NoParams;

    fn decode(_: &mut TableReader<'_>, _: &mut Diagnostics) {}

    fn check((): &(), _: &mut StepCheck<'_, '_>) -> NoParams {
        NoParams
    }
}
