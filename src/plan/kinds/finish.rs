//! The plan side of `finish`, which settles the job exactly once (and runs even when a step it needs failed): it has no keys of its own.

use super::{NoParams, PlanKind, StepCheck};
use crate::plan::decode::TableReader;
use crate::plan::diagnostic::Diagnostics;

pub struct Finish;

impl PlanKind for Finish {
    const DOC: &'static str = "Settles the job exactly once.";
    const MOVES_MONEY: bool = true;
    const ALWAYS: bool = true;
    type Keys = ();
    type Params = NoParams;

    fn decode(_: &mut TableReader<'_>, _: &mut Diagnostics) {}

    fn check((): &(), _: &mut StepCheck<'_, '_>) -> NoParams {
        NoParams
    }
}
