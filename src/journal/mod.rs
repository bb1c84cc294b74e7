//! The run journal: an append-only, checksummed checkpoint log, plus run locks.
//! (Being built; see issue 3.)
