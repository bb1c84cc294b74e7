//! The plan side of `register`, which buys the job (idempotently): it has no keys of its own.

use super::{NoParams, PlanKind, StepCheck};
use crate::plan::decode::TableReader;
use crate::plan::diagnostic::Diagnostics;

pub struct Register;

impl PlanKind for Register {
    const DOC: &'static str = "Buys the job (idempotent).";
    const MOVES_MONEY: bool = true;
    type Keys = ();
    type Params = NoParams;

    fn decode(_: &mut TableReader<'_>, _: &mut Diagnostics) {}

    fn check((): &(), _: &mut StepCheck<'_, '_>) -> NoParams {
        NoParams
    }
}
