//! The plan side of `aggregate`, which merges the play reports: it has no keys of its own.

keyless!(Aggregate, "Merges the play reports.");
