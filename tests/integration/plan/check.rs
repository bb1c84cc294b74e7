//! `plan check`: one test per class of plan problem, each asserting the exit
//! code, the problem's code, its message and where it points, in the JSON
//! report and in the text a person reads.

use crate::support::{Test, at, pos};

/// A plan with a persona, two lenses, a gate and a play step: the base most
/// reference tests break in exactly one place.
const REFS: &str = r#"version = 1
name = "refs"
controllers = ["standard", "jev"]

[game]
id = "maze"
command = ["builtin:maze"]

[[personas]]
slug = "curious-kid"
card = "Clicks everything."

[[lenses]]
name = "crashes"
kind = "rule"
over = "findings"
when = "unit.category == 'crash'"

[[gates]]
name = "blockers"
lenses = ["crashes"]
reviewers = ["curious-kid"]

[[steps]]
id = "build"
kind = "command"
run = "make game"

[[steps]]
id = "play"
kind = "play"
needs = ["build"]
matrix = { persona = ["curious-kid"], controller = ["jev"] }

[[steps]]
id = "judge"
kind = "gate"
gate = "blockers"
needs = ["play"]
"#;

/// `REFS` with one piece of text replaced (which must be there).
#[track_caller]
fn refs_with(from: &str, to: &str) -> String {
    assert!(REFS.contains(from), "{from:?} is not in REFS");
    REFS.replacen(from, to, 1)
}

#[track_caller]
fn check_toml(plan: &str) -> crate::support::Check {
    Test::new().file("plan.toml", plan).check(&["plan.toml"])
}

#[track_caller]
fn check_yaml(plan: &str) -> crate::support::Check {
    Test::new().file("plan.yaml", plan).check(&["plan.yaml"])
}

#[test]
fn the_base_plans_of_these_tests_are_valid() {
    let check = check_toml(REFS);
    check.json.code(0);
    assert!(check.problems().is_empty());
    check
        .text
        .stderr_has("plan.toml: ok (plan `refs`, 3 steps)");
}

#[test]
fn unknown_key_suggests_the_closest_key() {
    let plan = refs_with("run = \"make game\"", "run = \"make game\"\ntimeuot = 30");
    let check = check_toml(&plan);
    let p = check.only("plan::unknown_key");
    at(p, &plan, "timeuot")
        .message("unknown key `timeuot` in step `build`")
        .label("unknown key")
        .help("did you mean `timeout`?");
    check.rendered(p).summary("plan.toml", 1);
}

#[test]
fn unknown_key_at_the_top_level_suggests_the_closest_key() {
    let plan = refs_with("name = \"refs\"\n", "name = \"refs\"\ndescripton = \"x\"\n");
    let check = check_toml(&plan);
    let p = check.only("plan::unknown_key");
    p.at(3, 1)
        .message("unknown key `descripton` in the plan")
        .help("did you mean `description`?");
    check.rendered(p);
}

#[test]
fn unknown_key_with_nothing_close_lists_the_allowed_keys() {
    let plan = refs_with(
        "slug = \"curious-kid\"",
        "slug = \"curious-kid\"\nxyzzy = 1",
    );
    let check = check_toml(&plan);
    let p = check.only("plan::unknown_key");
    at(p, &plan, "xyzzy")
        .message("unknown key `xyzzy` in persona `curious-kid`")
        .help("the keys allowed here are `card`, `card_file`, `patience`, `player` or `slug`");
}

#[test]
fn wrong_type_says_what_was_expected_and_found() {
    let plan = refs_with("name = \"refs\"", "name = 7");
    let check = check_toml(&plan);
    let p = check.only("plan::wrong_type");
    p.at(2, 8)
        .message("expected a string, found an integer")
        .label("expected a string")
        .help("quote the value to make it a string");
    check.rendered(p);

    let plan = refs_with("needs = [\"build\"]", "needs = \"build\"");
    let check = check_toml(&plan);
    at(check.only("plan::wrong_type"), &plan, "\"build\"\nmatrix")
        .message("expected an array, found a string");

    let plan = refs_with(
        "run = \"make game\"",
        "run = \"make game\"\nretries = \"twice\"",
    );
    let check = check_toml(&plan);
    at(check.only("plan::wrong_type"), &plan, "\"twice\"")
        .message("expected an integer, found a string");
}

#[test]
fn missing_required_key_points_at_the_table_missing_it() {
    // A step without `kind`: one problem, and no follow-on from treating the
    // plan as if it had no `steps` (no "plays a game but has no [game]").
    let plan = r#"version = 1
name = "t"

[[steps]]
id = "build"
run = "make"
"#;
    let check = check_toml(plan);
    let p = check.only("plan::missing_key");
    p.at(5, 1)
        .message("step `build` is missing the required key `kind`")
        .label("`kind` is required here");
    check.rendered(p);

    let check =
        check_toml("name = \"t\"\n\n[[steps]]\nid = \"a\"\nkind = \"command\"\nrun = \"x\"\n");
    check
        .only("plan::missing_key")
        .at(1, 1)
        .message("the plan is missing the required key `version`");
}

#[test]
fn missing_required_key_of_a_lens_does_not_make_its_gate_unknown() {
    let plan = refs_with("over = \"findings\"\n", "");
    let check = check_toml(&plan);
    let p = check.only("plan::missing_key");
    at(p, &plan, "name = \"crashes\"").message("lens `crashes` is missing the required key `over`");
}

#[test]
fn a_broken_section_draws_no_follow_on_problems() {
    // Each mistake is reported once, where it is, and not again as a
    // reference to something "unknown" or "missing" because the section
    // holding it could not be read.
    let broken = [
        // A persona without a slug: the reviewer, the persona in the matrix.
        (
            refs_with("slug = \"curious-kid\"\n", ""),
            "plan::missing_key",
            "card = \"Clicks everything.\"",
        ),
        // A misspelt driver: not taken for stdio (which would need `command`).
        (
            refs_with(
                "command = [\"builtin:maze\"]",
                "driver = \"webdrivr\"\nurl = \"http://127.0.0.1:9/\"",
            ),
            "plan::unknown_value",
            "\"webdrivr\"",
        ),
        // A [game] without an id: not "plays a game but has no [game]".
        (
            refs_with("id = \"maze\"\n", ""),
            "plan::missing_key",
            "command = [\"builtin:maze\"]",
        ),
        // A bad matrix axis: a `per` naming that step is not "not a matrix step".
        (
            format!(
                "{}\n[[steps]]\nid = \"upload\"\nkind = \"deliver\"\nper = \"play\"\n",
                refs_with("controller = [\"jev\"]", "controller = 7")
            ),
            "plan::wrong_type",
            "7 }",
        ),
        // An unreadable controllers list: `jev` in the matrix is not "unknown".
        (
            refs_with(
                "controllers = [\"standard\", \"jev\"]",
                "controllers = \"jev\"",
            ),
            "plan::wrong_type",
            "\"jev\"\n",
        ),
        // An unreadable gate list: the gate step's gate is not "unknown".
        (
            refs_with("lenses = [\"crashes\"]", "lenses = \"crashes\""),
            "plan::wrong_type",
            "\"crashes\"\nreviewers",
        ),
    ];
    for (plan, code, needle) in broken {
        let check = check_toml(&plan);
        at(check.only(code), &plan, needle);
    }
}

#[test]
fn duplicate_step_id() {
    let plan = format!("{REFS}\n[[steps]]\nid = \"build\"\nkind = \"command\"\nrun = \"again\"\n");
    let check = check_toml(&plan);
    let p = check.only("plan::duplicate");
    p.at(42, 6)
        .message("duplicate step id `build`")
        .label("already defined on line 25")
        .help("each step id must be unique; rename or remove one");
    check.rendered(p);
}

#[test]
fn duplicate_persona_slug() {
    let plan = refs_with(
        "[[lenses]]",
        "[[personas]]\nslug = \"curious-kid\"\ncard = \"Another kid.\"\n\n[[lenses]]",
    );
    let check = check_toml(&plan);
    let p = check.only("plan::duplicate");
    p.at(14, 8)
        .message("duplicate persona slug `curious-kid`")
        .label("already defined on line 10");
}

#[test]
fn duplicate_lens_name() {
    let plan = refs_with(
        "[[gates]]",
        "[[lenses]]\nname = \"crashes\"\nkind = \"rule\"\nover = \"runs\"\nwhen = \"true\"\n\n[[gates]]",
    );
    let check = check_toml(&plan);
    check
        .only("plan::duplicate")
        .at(20, 8)
        .message("duplicate lens name `crashes`")
        .label("already defined on line 14");
}

#[test]
fn duplicate_gate_name() {
    let plan = refs_with(
        "[[steps]]\nid = \"build\"",
        "[[gates]]\nname = \"blockers\"\nlenses = [\"crashes\"]\n\n[[steps]]\nid = \"build\"",
    );
    let check = check_toml(&plan);
    check
        .only("plan::duplicate")
        .at(25, 8)
        .message("duplicate gate name `blockers`")
        .label("already defined on line 20");
}

#[test]
fn unknown_needs() {
    let plan = refs_with("needs = [\"build\"]", "needs = [\"biuld\"]");
    let check = check_toml(&plan);
    let p = check.only("plan::unknown_needs");
    at(p, &plan, "\"biuld\"")
        .message("unknown step `biuld`")
        .label("no step of this name")
        .help("did you mean `build`?");
    check.rendered(p);
}

#[test]
fn unknown_persona() {
    let plan = refs_with("persona = [\"curious-kid\"]", "persona = [\"curious-kd\"]");
    let check = check_toml(&plan);
    at(check.only("plan::unknown_persona"), &plan, "\"curious-kd\"")
        .message("unknown persona `curious-kd`")
        .help("did you mean `curious-kid`?");

    let plan = refs_with(
        "matrix = { persona = [\"curious-kid\"], controller = [\"jev\"] }",
        "persona = \"zed\"",
    );
    let check = check_toml(&plan);
    at(check.only("plan::unknown_persona"), &plan, "\"zed\"")
        .message("unknown persona `zed`")
        .help("the plan's personas are `curious-kid`");
}

#[test]
fn unknown_controller() {
    let plan = refs_with("controller = [\"jev\"]", "controller = [\"jevv\"]");
    let check = check_toml(&plan);
    at(check.only("plan::unknown_controller"), &plan, "\"jevv\"")
        .message("unknown controller `jevv`")
        .help("did you mean `jev`?");

    // Built in, but not one of the plan's controllers.
    let plan = refs_with("controller = [\"jev\"]", "controller = [\"rune\"]");
    let check = check_toml(&plan);
    at(check.only("plan::unknown_controller"), &plan, "\"rune\"")
        .help("the plan's controllers are `standard` or `jev`");

    // Not a controller at all.
    let plan = refs_with(
        "controllers = [\"standard\", \"jev\"]",
        "controllers = [\"standard\", \"jev\", \"turbo\"]",
    );
    let check = check_toml(&plan);
    at(check.only("plan::unknown_controller"), &plan, "\"turbo\"")
        .message("unknown controller `turbo`");
}

#[test]
fn unknown_lens() {
    let plan = refs_with("lenses = [\"crashes\"]", "lenses = [\"crash\"]");
    let check = check_toml(&plan);
    let p = check.only("plan::unknown_lens");
    at(p, &plan, "\"crash\"")
        .message("unknown lens `crash`")
        .help("did you mean `crashes`?");
    check.rendered(p);
}

#[test]
fn unknown_lens_with_nothing_close_lists_the_lenses() {
    let plan = refs_with("lenses = [\"crashes\"]", "lenses = [\"boredom\"]");
    at(
        check_toml(&plan).only("plan::unknown_lens"),
        &plan,
        "\"boredom\"",
    )
    .help("the plan's lenses are `crashes`");
}

#[test]
fn unknown_word_suggests_the_closest_and_lists_all() {
    let plan = refs_with("over = \"findings\"", "over = \"finding\"");
    let check = check_toml(&plan);
    let p = check.only("plan::unknown_value");
    at(p, &plan, "\"finding\"")
        .message("unknown lens input (`over`) `finding`")
        .help("did you mean `findings`? (expected `findings`, `runs`, `files` or `patches`)");
    check.rendered(p);
    let plan = refs_with("kind = \"command\"", "kind = \"comand\"");
    at(
        check_toml(&plan).only("plan::unknown_value"),
        &plan,
        "\"comand\"",
    )
    .message("unknown step kind `comand`")
    .help_has("did you mean `command`?");
}

#[test]
fn unknown_gate() {
    let plan = refs_with("gate = \"blockers\"", "gate = \"blocker\"");
    let check = check_toml(&plan);
    at(check.only("plan::unknown_gate"), &plan, "\"blocker\"")
        .message("unknown gate `blocker`")
        .help("did you mean `blockers`?");
}

#[test]
fn unknown_reviewer() {
    let plan = refs_with("reviewers = [\"curious-kid\"]", "reviewers = [\"grumpy\"]");
    let check = check_toml(&plan);
    at(check.only("plan::unknown_reviewer"), &plan, "\"grumpy\"")
        .message("unknown persona `grumpy`")
        .help("the plan's personas are `curious-kid`");
}

const CYCLE: &str = r#"version = 1
name = "loop"

[[steps]]
id = "a"
kind = "command"
run = "true"
needs = ["b"]

[[steps]]
id = "b"
kind = "command"
run = "true"
needs = ["c"]

[[steps]]
id = "c"
kind = "command"
run = "true"
needs = ["a"]
"#;

#[test]
fn cycle_is_named_step_by_step() {
    let check = check_toml(CYCLE);
    let p = check.only("plan::cycle");
    at(p, CYCLE, "\"a\"]")
        .message("dependency cycle: a → b → c → a")
        .label("`c` needs `a`, which leads back here");
    check.rendered(p);
}

#[test]
fn a_step_needing_itself_is_a_cycle() {
    let plan = refs_with("needs = [\"build\"]", "needs = [\"build\", \"play\"]");
    let check = check_toml(&plan);
    check
        .only("plan::cycle")
        .at(32, 19)
        .message("step `play` needs itself")
        .label("a step cannot wait for itself");
}

#[test]
fn two_separate_cycles_are_both_reported() {
    let plan = format!(
        "{CYCLE}\n[[steps]]\nid = \"x\"\nkind = \"command\"\nrun = \"true\"\nneeds = [\"y\"]\n\n[[steps]]\nid = \"y\"\nkind = \"command\"\nrun = \"true\"\nneeds = [\"x\"]\n"
    );
    let check = check_toml(&plan);
    check.codes(&["plan::cycle", "plan::cycle"]);
    check.with_message("dependency cycle: a → b → c → a");
    check.with_message("dependency cycle: x → y → x");
}

#[test]
fn per_naming_a_non_matrix_step() {
    let plan = format!("{REFS}\n[[steps]]\nid = \"upload\"\nkind = \"deliver\"\nper = \"build\"\n");
    let check = check_toml(&plan);
    let p = check.only("plan::per_not_matrix");
    p.at(44, 7)
        .message("`per` names step `build`, which has no matrix")
        .label("not a matrix step");
    check.rendered(p);

    // Naming a step that does not exist is an unknown step, not a non-matrix one.
    let plan = format!("{REFS}\n[[steps]]\nid = \"upload\"\nkind = \"deliver\"\nper = \"plya\"\n");
    at(
        check_toml(&plan).only("plan::unknown_needs"),
        &plan,
        "\"plya\"",
    )
    .help("did you mean `play`?");
}

#[test]
fn retries_are_refused_on_estimate_register_and_finish() {
    let plan = r#"version = 1
name = "money"

[[steps]]
id = "estimate"
kind = "estimate"
retries = 1

[[steps]]
id = "register"
kind = "register"
needs = ["estimate"]
retries = 2

[[steps]]
id = "build"
kind = "command"
run = "make"
retries = 3

[[steps]]
id = "finish"
kind = "finish"
needs = ["register"]
retries = 4
"#;
    let check = check_toml(plan);
    // `retries` on the command step is fine; the three money steps are not.
    check.codes(&["plan::retries_on_money_step"; 3]);
    for (kind, needle) in [("estimate", "1\n"), ("register", "2\n"), ("finish", "4\n")] {
        let p = check.with_message(&format!(
            "`retries` is not allowed on the {kind} step `{kind}`"
        ));
        // The value, not the key, is what is wrong.
        p.at(pos(plan, &format!("retries = {needle}")).0, 11)
            .label("money steps are never retried")
            .help_has("a retry could charge twice");
        check.rendered(p);
    }
    check.summary("plan.toml", 3);
}

#[test]
fn paths_escaping_the_repo_root() {
    let plan = r#"version = 1
name = "paths"

[game]
id = "maze"
command = ["builtin:maze"]
inputs = ["build/game", "../outside/game"]

[[personas]]
slug = "kid"
card_file = "../x"

[[personas]]
slug = "vet"
card_file = "/etc/passwd"

[[lenses]]
name = "onboarding"
kind = "llm"
over = "runs"
model = "gpt-4o-mini"
charter_file = "lenses/../../../charter.md"

[[steps]]
id = "build"
kind = "command"
run = "make"
inputs = ["src/**", "../shared/**"]
outputs = ["/etc/cron.d/x"]
cwd = "sub/../.."

[[steps]]
id = "home"
kind = "command"
run = "ls"
cwd = "~/secrets"

[[steps]]
id = "play"
kind = "play"
needs = ["build"]
matrix = { persona = "*" }
"#;
    let check = check_toml(plan);
    let expected = [
        ("input `../outside/game`", "\"../outside/game\""),
        ("card_file `../x`", "\"../x\""),
        ("card_file `/etc/passwd`", "\"/etc/passwd\""),
        (
            "charter_file `lenses/../../../charter.md`",
            "\"lenses/../../../charter.md\"",
        ),
        ("input `../shared/**`", "\"../shared/**\""),
        ("output `/etc/cron.d/x`", "\"/etc/cron.d/x\""),
        ("cwd `sub/../..`", "\"sub/../..\""),
        ("cwd `~/secrets`", "\"~/secrets\""),
    ];
    check.codes(&["plan::path_escapes_root"; 8]);
    for (what, needle) in expected {
        let p = check.with_message(&format!("{what} is outside the repo"));
        at(p, plan, needle)
            .label("escapes the repo root")
            .help_has("plans read and write only inside their repo");
    }
    check.summary("plan.toml", 8);
}

#[test]
fn paths_that_stay_inside_the_repo_are_fine() {
    let plan = r#"version = 1
name = "paths"

[[personas]]
slug = "kid"
card_file = "personas/../personas/kid.md"

[[steps]]
id = "build"
kind = "command"
run = "make"
inputs = ["./src/**", "a/b/../c"]
outputs = ["build/game"]
cwd = "sub/.."
"#;
    Test::new()
        .file("plan.toml", plan)
        .file("personas/kid.md", "A kid.")
        .check(&["plan.toml"])
        .json
        .code(0);
}

#[test]
fn a_card_file_that_does_not_exist() {
    let plan = refs_with(
        "card = \"Clicks everything.\"",
        "card_file = \"personas/kid.md\"",
    );
    let check = check_toml(&plan);
    at(
        check.only("plan::missing_file"),
        &plan,
        "\"personas/kid.md\"",
    )
    .message("card_file `personas/kid.md` does not exist")
    .label("no such file");
}

#[test]
fn unsupported_version() {
    let plan = refs_with("version = 1", "version = 2");
    let check = check_toml(&plan);
    let p = check.only("plan::unsupported_version");
    p.at(1, 11)
        .message("unsupported plan version 2")
        .label("this gameplan reads version 1")
        .help("set `version = 1`, or upgrade gameplan if the plan was written for a newer one");
    check.rendered(p);

    let plan = refs_with("version = 1", "version = 0");
    check_toml(&plan)
        .only("plan::unsupported_version")
        .at(1, 11);
}

#[test]
fn invalid_names() {
    let plan = r#"version = 1
name = "Nightly"

[[personas]]
slug = "-kid"
card = "x"

[[lenses]]
name = "dead ends"
kind = "rule"
over = "findings"
when = "true"

[[gates]]
name = "_blockers"
lenses = ["dead ends"]

[[steps]]
id = "build.game"
kind = "command"
run = "make"
"#;
    let check = check_toml(plan);
    check.codes(&["plan::invalid_name"; 5]);
    for (message, needle) in [
        ("invalid plan name `Nightly`", "\"Nightly\""),
        ("invalid persona slug `-kid`", "\"-kid\""),
        ("invalid lens name `dead ends`", "\"dead ends\"\nkind"),
        ("invalid gate name `_blockers`", "\"_blockers\""),
        ("invalid step id `build.game`", "\"build.game\""),
    ] {
        let p = check.with_message(message);
        at(p, plan, needle)
            .label("not a valid name")
            .help("names match [a-z0-9][a-z0-9_-]*: lowercase letters, digits, `-` and `_`");
        check.rendered(p);
    }
}

#[test]
fn names_at_the_edges_of_the_rule_are_valid() {
    let plan = r#"version = 1
name = "0"

[[steps]]
id = "9-lives_x"
kind = "command"
run = "true"

[[steps]]
id = "a-"
kind = "command"
run = "true"
"#;
    check_toml(plan).json.code(0);
}

#[test]
fn unset_template_variables() {
    let plan = r#"version = 1
name = "tpl"

[vars]
seed = 7

[[steps]]
id = "a"
kind = "command"
run = "echo {{ vars.nope }}"

[[steps]]
id = "b"
kind = "command"
run = "echo {{ env.NOPE }}"

[[steps]]
id = "c"
kind = "command"
run = "echo {{ secret('NOPE') }}"

[[steps]]
id = "d"
kind = "command"
run = "echo {{ vars.sed }}"
"#;
    let check = check_toml(plan);
    // An unset secret is no check error (issue 10): only a run of `c` needs it.
    check.codes(&["plan::template"; 3]);
    let p = check.with_message("`vars.nope` is not set");
    at(p, plan, "\"echo {{ vars.nope }}\"")
        .label("in this template")
        .help("the plan's vars are `seed`; or pass --var nope=VALUE");
    check.rendered(p);
    let p = check.with_message("environment variable `NOPE` is not set");
    at(p, plan, "\"echo {{ env.NOPE }}\"").help("export NOPE before running gameplan");
    check.rendered(p);
    at(
        check.with_message("`vars.sed` is not set"),
        plan,
        "\"echo {{ vars.sed }}\"",
    )
    .help("did you mean `seed`?");
}

#[test]
fn set_template_variables_render() {
    let plan = r#"version = 1
name = "tpl"

[vars]
seed = 7

[[steps]]
id = "a"
kind = "command"
run = "echo {{ vars.seed }} {{ env.GAME_URL }} {{ secret('TOKEN') }}"
"#;
    Test::new()
        .file("plan.toml", plan)
        .env("GAME_URL", "http://127.0.0.1:1/")
        .env("TOKEN", "t0k3n")
        .check(&["plan.toml"])
        .json
        .code(0);
}

#[test]
fn a_template_in_vars_cannot_read_vars() {
    let plan = r#"version = 1
name = "tpl"

[vars]
seed = 7
twice = "{{ vars.seed }}{{ vars.seed }}"

[[steps]]
id = "a"
kind = "command"
run = "true"
"#;
    at(
        check_toml(plan).only("plan::template"),
        plan,
        "\"{{ vars.seed }}{{ vars.seed }}\"",
    )
    .message("`vars.seed` is not set");
}

#[test]
fn a_rule_expression_that_does_not_compile() {
    let plan = refs_with(
        "when = \"unit.category == 'crash'\"",
        "when = \"unit.category in ['crash',\"",
    );
    let check = check_toml(&plan);
    let p = check.only("plan::invalid_expression");
    at(p, &plan, "\"unit.category in ['crash',\"")
        .message("lens `crashes`: invalid expression: unexpected end of input, expected expression")
        .label("does not compile")
        .help(
            "write one minijinja expression, without `{{ }}`: unit.category in ['crash', 'hang']",
        );
    check.rendered(p);

    // It compiles, but reads a name a rule cannot see.
    let plan = refs_with(
        "when = \"unit.category == 'crash'\"",
        "when = \"finding.category == 'crash'\"",
    );
    at(
        check_toml(&plan).only("plan::invalid_expression"),
        &plan,
        "\"finding.category",
    )
    .message("lens `crashes`: `finding` is not defined in this expression")
    .help("the expression can read unit, reviewer");
}

#[test]
fn a_rule_expression_is_not_rendered_as_a_template() {
    // `when` is evaluated per unit at review time; `{{` there is not a
    // load-time template, and `unit` is not a load-time variable.
    let plan = refs_with(
        "when = \"unit.category == 'crash'\"",
        "when = \"unit.title is string and unit.severity >= 2\"",
    );
    check_toml(&plan).json.code(0);
}

#[test]
fn every_problem_in_a_file_is_reported() {
    let plan = r#"version = 3
name = "Many"
descripton = "typo"

[[personas]]
slug = "kid"
card = "x"

[[lenses]]
name = "crashes"
kind = "rule"
over = "findings"
when = "unit.category in ["

[[gates]]
name = "blockers"
lenses = ["crashs"]

[[steps]]
id = "build"
kind = "command"
run = "make {{ vars.target }}"
outputs = ["../out"]

[[steps]]
id = "build"
kind = "command"
run = "make"
needs = ["biuld"]

[[steps]]
id = "est"
kind = "estimate"
retries = 2
"#;
    let check = check_toml(plan);
    check.codes(&[
        "plan::unsupported_version",
        "plan::invalid_name",
        "plan::unknown_key",
        "plan::invalid_expression",
        "plan::unknown_lens",
        "plan::template",
        "plan::path_escapes_root",
        "plan::duplicate",
        "plan::unknown_needs",
        "plan::retries_on_money_step",
    ]);
    // In file order, each where it belongs.
    let lines: Vec<usize> = check.problems().iter().map(|p| p.line.unwrap()).collect();
    assert_eq!(lines, [1, 2, 3, 13, 17, 22, 23, 26, 29, 34]);
    check.summary("plan.toml", 10);
    // The text shows every one of them too.
    for p in check.problems() {
        check.rendered(p);
    }
}

#[test]
fn checking_several_files_reports_each() {
    let good = REFS;
    let bad =
        "version: 1\nname: bad\nsteps:\n  - id: a\n    kind: command\n    run: x\n    needs: [b]\n";
    let t = Test::new().file("a.toml", good).file("b.yaml", bad);
    let check = t.check(&["a.toml", "b.yaml"]);
    check.json.code(3);
    assert!(!check.doc.valid);
    let files: Vec<(&str, bool, usize)> = check
        .doc
        .files
        .iter()
        .map(|f| (f.file.as_str(), f.valid, f.problems.len()))
        .collect();
    assert_eq!(files, [("a.toml", true, 0), ("b.yaml", false, 1)]);
    let p = check.only("plan::unknown_needs");
    assert_eq!(p.file, "b.yaml");
    p.at(7, 13).message("unknown step `b`");
    check.rendered(p).summary("b.yaml", 1);
    check
        .text
        .stderr_has("a.toml: ok (plan `refs`, 3 steps)")
        .stderr_has("1 of 2 plans valid");

    // Both bad: both reported, each under its own name.
    let t = Test::new()
        .file("a.toml", refs_with("version = 1", "version = 9"))
        .file("b.yaml", bad);
    let check = t.check(&["a.toml", "b.yaml"]);
    check.codes(&["plan::unsupported_version", "plan::unknown_needs"]);
    check.summary("a.toml", 1).summary("b.yaml", 1);
    check.text.stderr_has("0 of 2 plans valid");
}

#[test]
fn every_valid_plan_file_checks_ok() {
    let check = Test::new()
        .file("a.toml", REFS)
        .file(
            "b.yml",
            "version: 1\nname: b\nsteps:\n  - {id: a, kind: command, run: x}\n",
        )
        .check(&["a.toml", "b.yml"]);
    check.json.code(0);
    assert!(check.doc.valid && check.doc.files.iter().all(|f| f.valid));
    check.text.stderr_has("2 of 2 plans valid");
}

#[test]
fn a_missing_or_unknown_file_is_a_plan_error() {
    let t = Test::new().file("plan.json", "{}");
    let check = t.check(&["nope.toml"]);
    let p = check.only("plan::unreadable");
    assert_eq!((p.line, p.column), (None, None));
    assert!(p.message.starts_with("cannot read nope.toml: "), "{p:?}");
    check
        .text
        .stderr_has("nope.toml: 1 problem found; nothing was run or charged");

    let check = t.check(&["plan.json"]);
    check
        .only("plan::unknown_format")
        .message("not a plan file (expected a .toml, .yaml or .yml extension)");
}

#[test]
fn a_usage_error_exits_3_not_2() {
    Test::new()
        .file("plan.toml", REFS)
        .run(&["plan", "check", "--var", "noequals", "plan.toml"])
        .code(3)
        .stderr_has("`noequals` is not NAME=VALUE");
    Test::new().run(&["plan", "check"]).code(3);
}

// ------------------------------------------------------------------- YAML

const REFS_YAML: &str = r#"version: 1
name: refs
controllers: [standard, jev]
game:
  id: maze
  command: ["builtin:maze"]
personas:
  - slug: curious-kid
    card: Clicks everything.
lenses:
  - name: crashes
    kind: rule
    over: findings
    when: "unit.category == 'crash'"
gates:
  - name: blockers
    lenses: [crashes]
    reviewers: [curious-kid]
steps:
  - id: build
    kind: command
    run: make game
  - id: play
    kind: play
    needs: [build]
    matrix: { persona: [curious-kid], controller: [jev] }
  - id: judge
    kind: gate
    gate: blockers
    needs: [play]
"#;

#[track_caller]
fn yaml_with(from: &str, to: &str) -> String {
    assert!(REFS_YAML.contains(from), "{from:?} is not in REFS_YAML");
    REFS_YAML.replacen(from, to, 1)
}

#[test]
fn the_yaml_twin_of_the_base_plan_is_valid_and_means_the_same() {
    let t = Test::new()
        .file("plan.toml", REFS)
        .file("plan.yaml", REFS_YAML);
    t.check(&["plan.toml", "plan.yaml"]).json.code(0);
    let toml = t.run(&["plan", "explain", "--json", "plan.toml"]);
    let yaml = t.run(&["plan", "explain", "--json", "plan.yaml"]);
    assert_eq!(toml.code(0).stdout, yaml.code(0).stdout);
}

#[test]
fn yaml_unknown_key() {
    let plan = yaml_with(
        "    run: make game\n",
        "    run: make game\n    timeuot: 30\n",
    );
    let check = check_yaml(&plan);
    let p = check.only("plan::unknown_key");
    p.at(23, 5)
        .message("unknown key `timeuot` in step `build`")
        .help("did you mean `timeout`?");
    check.rendered(p);
}

#[test]
fn yaml_unknown_key_in_a_flow_mapping() {
    let plan = "version: 1\nname: flow\nsteps:\n  - { id: build, kind: command, run: make, timeuot: 30 }\n";
    let check = check_yaml(plan);
    let p = check.only("plan::unknown_key");
    p.at(4, 44).help("did you mean `timeout`?");
    at(p, plan, "timeuot");
}

#[test]
fn yaml_wrong_type() {
    let plan = yaml_with("    needs: [build]", "    needs: build");
    let check = check_yaml(&plan);
    at(check.only("plan::wrong_type"), &plan, "build\n    matrix")
        .message("expected an array, found a string");
}

#[test]
fn yaml_duplicate_step_id() {
    let plan = format!("{REFS_YAML}  - id: build\n    kind: command\n    run: again\n");
    let check = check_yaml(&plan);
    let p = check.only("plan::duplicate");
    p.at(31, 9)
        .message("duplicate step id `build`")
        .label("already defined on line 20");
    check.rendered(p);
}

#[test]
fn yaml_unknown_needs_and_lens() {
    let plan = yaml_with("needs: [build]", "needs: [biuld]")
        .replace("lenses: [crashes]", "lenses: [crash]");
    let check = check_yaml(&plan);
    check.codes(&["plan::unknown_lens", "plan::unknown_needs"]);
    at(check.with_message("unknown lens `crash`"), &plan, "crash]");
    at(check.with_message("unknown step `biuld`"), &plan, "biuld").help("did you mean `build`?");
}

#[test]
fn yaml_cycle() {
    let plan = "version: 1\nname: loop\nsteps:\n  - id: a\n    kind: command\n    run: 'true'\n    needs: [b]\n  - id: b\n    kind: command\n    run: 'true'\n    needs:\n      - a\n";
    let check = check_yaml(plan);
    let p = check.only("plan::cycle");
    p.at(12, 9).message("dependency cycle: a → b → a");
    check.rendered(p);
}

#[test]
fn yaml_path_escaping_the_root() {
    let plan = yaml_with(
        "    run: make game\n",
        "    run: make game\n    outputs:\n      - build/game\n      - /etc/passwd\n",
    );
    let check = check_yaml(&plan);
    at(check.only("plan::path_escapes_root"), &plan, "/etc/passwd")
        .message("output `/etc/passwd` is outside the repo");
}

#[test]
fn yaml_missing_required_key() {
    let plan = yaml_with("  - id: judge\n    kind: gate\n", "  - id: judge\n");
    let check = check_yaml(&plan);
    let p = check.only("plan::missing_key");
    at(p, &plan, "id: judge").message("step `judge` is missing the required key `kind`");
}

#[test]
fn yaml_positions_count_characters_not_bytes() {
    // Multi-byte text earlier in the file, and earlier on the same line, must
    // not shift lines or columns (the YAML parser counts characters).
    let plan = yaml_with(
        "card: Clicks everything.",
        "card: \"Clicks everything — très vite.\"",
    )
    .replace("needs: [build]", "needs: [\"é\", \"ñø\", build]");
    let check = check_yaml(&plan);
    check.codes(&["plan::unknown_needs"; 2]);
    let first = check.with_message("unknown step `é`");
    at(first, &plan, "\"é\"").at(25, 13);
    let second = check.with_message("unknown step `ñø`");
    at(second, &plan, "\"ñø\"").at(25, 18);
    check.rendered(first).rendered(second);
}

/// A review-only plan written from its lenses and gates alone (no `steps`)
/// gets the default pipeline, which plays: the error says how to list the
/// gate steps instead of only asking for a game.
#[test]
fn a_review_plan_without_steps_is_told_how_to_list_its_gate_steps() {
    let plan = r#"version = 1
name = "mine"

[[lenses]]
name = "no-dbg"
kind = "rule"
over = "files"
files = ["src/**"]
when = "'dbg!(' in unit.text"

[[gates]]
name = "style"
lenses = ["no-dbg"]
"#;
    Test::new()
        .file("review.toml", plan)
        .run(&["plan", "check", "review.toml"])
        .code(3)
        .stderr_has("this plan plays a game but has no [game] table")
        .stderr_has("for a review-only plan, list its gate steps")
        .stderr_has("kind = \"gate\"");
}

#[test]
fn a_matrix_seed_that_is_not_a_whole_number_is_refused_where_it_is_written() {
    let plan = format!(
        "{REFS}\n[[steps]]\nid = \"many\"\nkind = \"play\"\nmatrix = {{ persona = \"*\", seed = [1, \"two\"] }}\n"
    );
    at(
        check_toml(&plan).only("plan::invalid_value"),
        &plan,
        "\"two\"",
    )
    .message("the matrix seed `two` is not a whole number")
    .help("a cell's seed is what the game is reset with: list whole numbers, e.g. `seed = [1, 2]`");
}
