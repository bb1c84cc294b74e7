//! Review gates: lenses (command, rule, llm), gates and their verdict,
//! dispositions, patches, `--fail-on`, `JUnit`, unit reuse.

mod baseline;
mod clippy_lens;
mod command_lens_limits;
mod discharge;
mod dispositions;
mod fail_on;
mod gates;
mod junit;
mod llm_lens;
mod patches;
mod playtest_units;
mod reviewers;
mod unit_reuse;
