//! Install and shell integration, generated from the clap
//! definitions.

use crate::support::Test;

#[test]
fn completions_cover_the_commands_and_leave_out_the_internal_ones() {
    let t = Test::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = t.run(&["completions", shell]);
        out.code(0).stdout_has("explain").stdout_has("no-reuse");
        let text = format!("{out}");
        assert!(!text.contains("__launch"), "{shell}: {text}");
    }
    t.run(&["completions", "tcsh"]).code(3);
}

#[test]
fn man_prints_the_page_and_writes_one_per_command() {
    let t = Test::new();
    t.run(&["man"])
        .code(0)
        .stdout_has(".TH gameplan 1")
        .stdout_has("gameplan\\-plan(1)");
    t.run(&["man", "--out", "man"]).code(0);
    let run_page = t.read("man/gameplan-plan-run.1");
    assert!(run_page.contains("no\\-reuse"), "{run_page}");
    assert!(!t.path("man/gameplan-__launch.1").exists());
}
