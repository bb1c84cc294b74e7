//! A stdio game's program is checked where the plan names it: `plan check`
//! (and every run, which loads the plan the same way) refuses a program
//! that is not on PATH, a repo path that does not exist or is not
//! executable, and an unknown built-in game, with the file, line and column, exit 3,
//! before anything runs or is charged.

use crate::support::Test;

fn plan(command: &str) -> String {
    format!(
        "version = 1\nname = \"prog\"\n\n[game]\nid = \"g\"\ncommand = {command}\n\n[[personas]]\nslug = \"p\"\ncard = \"Plays.\"\nplayer = {{ kind = \"random\" }}\n"
    )
}

#[test]
fn a_game_program_that_cannot_be_started_is_a_plan_error_where_the_command_is_written() {
    for (command, says) in [
        (
            r#"["no-such-game-9f2c", "--bridge"]"#,
            "`no-such-game-9f2c` is not on PATH",
        ),
        (r#"["./build/game"]"#, "`./build/game` does not exist"),
        (r#"["game.py"]"#, "`game.py` is not on PATH"),
        (r#"["./game.py"]"#, "`./game.py` is not executable"),
        (r#"["builtin:mazz"]"#, "there is no built-in game `mazz`"),
    ] {
        let t = Test::new()
            .file("game.py", "print('not executable')\n")
            .file("plan.toml", plan(command));
        let check = t.check(&["plan.toml"]);
        let problem = check.only("plan::missing_program");
        assert!(problem.message.contains(says), "{command}: {problem:?}");
        assert_eq!(
            (problem.line, problem.column),
            (Some(6), Some(11)),
            "{command}: {problem:?}"
        );
        // A paid run loads the plan the same way: refused before any charge.
        let out = t.run(&["plan", "run", "plan.toml", "--yes"]);
        out.code(3).stderr_has(says);
        let ledger = t.run(&["ledger", "show", "--json"]).code(0).json();
        assert_eq!(ledger["jobs"], serde_json::json!([]), "{command}");
    }
    // What resolves passes: a program on PATH, the built-in maze.
    for command in [r#"["python3", "game.py"]"#, r#"["builtin:maze"]"#] {
        let t = Test::new()
            .file("game.py", "")
            .file("plan.toml", plan(command));
        let check = t.check(&["plan.toml"]);
        assert!(check.problems().is_empty(), "{command}: {}", check.text);
    }
}
