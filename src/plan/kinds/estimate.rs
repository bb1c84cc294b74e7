//! The plan side of `estimate`, which prices the cells that will run before anything is charged: it has no keys of its own.

keyless!(Estimate, "Prices the cells that will run before anything is charged.", MOVES_MONEY);
