//! The explorer spends its patience on what it has not tried, and on what
//! changed something; an action that changed nothing ("That is already
//! open.") waits until everything else was tried. On a goal-directed text
//! game where most commands change nothing, as in parser adventures
//! (tests/fixtures/games/vault.py: find the key, open the door, unlock the
//! vault), it must reach the goal at least as often as `random` over the
//! same six seeds and the same 40 actions. (examples/games/lantern.py is
//! no test of this: its planted crash and hang end most cells first.)

use crate::support::Test;

fn plan() -> String {
    r#"version = 1
name = "goals"

[game]
id = "vault"
command = ["python3", "vault.py"]
action_timeout = 2
stuck_after = 30

[budget]
max_actions = 40

[[personas]]
slug = "explorer"
card = "Tries what it has not tried."
player = { kind = "explorer" }
patience = 40

[[personas]]
slug = "random"
card = "Anything at random."
player = { kind = "random" }
patience = 40

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*", seed = [1, 2, 3, 4, 5, 6] }
"#
    .to_owned()
}

#[test]
fn the_explorer_reaches_a_text_games_goal_at_least_as_often_as_random_on_six_seeds() {
    let game = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/games/vault.py"),
    )
    .expect("vault.py");
    let t = Test::new().file("vault.py", game).file("plan.toml", plan());
    t.run(&["plan", "run", "plan.toml", "--concurrency", "2"]);
    let run = t.run_ids().pop().expect("a run");
    let goals = |persona: &str| {
        (1..=6)
            .filter(|seed| {
                let rel = format!(".gameplan/runs/{run}/steps/play[{persona},{seed}]/report.json");
                let report: serde_json::Value =
                    serde_json::from_str(&t.read(&rel)).expect("report");
                report["metrics"]["goals"].as_u64().unwrap_or(0) > 0
            })
            .count()
    };
    let (explorer, random) = (goals("explorer"), goals("random"));
    assert!(explorer > 0, "the explorer never reached the goal");
    // At least as often is the promise; on these seeds (all seeded, so
    // this is stable) an explorer that repeats what changed nothing only
    // ties random (2/6 each), and this one does better (4/6).
    assert!(
        explorer > random,
        "explorer {explorer}/6, random {random}/6"
    );
}
