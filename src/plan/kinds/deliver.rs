//! The plan side of `deliver`, which uploads one cell's artifacts and completes its run: it has no keys of its own.

keyless!(Deliver, "Uploads one cell's artifacts and completes its run.");
