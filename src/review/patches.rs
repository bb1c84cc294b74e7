//! A `git format-patch` series read into review units: one per file per patch, with its hunks (DESIGN §8).
