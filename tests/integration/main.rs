//! Integration tests: the real binary against plans in temp repos.
