//! Hostile and tricky plan files: refused cleanly (exit 3, a clear message,
//! no panic, no hang), or read exactly as written (YAML 1.1 traps).

use std::fmt::Write;
use std::time::Duration;

use crate::support::{Test, ids};

/// Hostile input must be refused at once, not after the parser has chewed on
/// it. Generous for a debug build on a busy machine; a hang or a blow-up
/// takes far longer.
const PROMPTLY: Duration = Duration::from_secs(5);

const STEP_TOML: &str = "\n[[steps]]\nid = \"a\"\nkind = \"command\"\nrun = \"true\"\n";

#[track_caller]
fn refused(t: &Test, file: &str, code: &str) -> crate::support::Check {
    let check = t.check(&[file]);
    let p = check.only(code);
    assert!(
        check.json.elapsed < PROMPTLY && check.text.elapsed < PROMPTLY,
        "{code} took too long\n{}",
        check.json
    );
    check.rendered(p).summary(file, 1);
    check
}

#[test]
fn a_file_that_is_not_utf8() {
    let mut bytes = b"version = 1\nname = \"caf".to_vec();
    bytes.extend_from_slice(&[0xe9, 0xff]);
    bytes.extend_from_slice(b"\"\n");
    let t = Test::new().file("plan.toml", bytes);
    let check = refused(&t, "plan.toml", "plan::not_utf8");
    check
        .only("plan::not_utf8")
        .at(2, 12)
        .message("the plan is not valid UTF-8")
        .label("invalid byte")
        .help("save the file as UTF-8");
}

#[test]
fn a_file_with_a_nul_byte() {
    let t = Test::new().file("plan.yaml", b"version: 1\nname: a\0b\n");
    let check = refused(&t, "plan.yaml", "plan::nul_byte");
    check
        .only("plan::nul_byte")
        .at(2, 8)
        .message("the plan contains a NUL byte");
}

#[test]
fn a_file_over_1_mib() {
    let mut plan = format!("version = 1\nname = \"big\"\n{STEP_TOML}");
    while plan.len() <= 1024 * 1024 {
        plan.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    let t = Test::new().file("plan.toml", &plan);
    let check = refused(&t, "plan.toml", "plan::too_large");
    let p = check.only("plan::too_large");
    assert_eq!((p.line, p.column), (None, None));
    assert!(p.message.contains("larger than 1024 KiB"), "{p:?}");
}

#[test]
fn a_file_of_exactly_1_mib_is_read() {
    let mut plan = format!("version = 1\nname = \"big\"\n{STEP_TOML}");
    let line = "# padding padding padding padding padding padding padding padding\n";
    while plan.len() + line.len() <= 1024 * 1024 {
        plan.push_str(line);
    }
    plan.push_str(&"#".repeat(1024 * 1024 - plan.len() - 1));
    plan.push('\n');
    assert_eq!(plan.len(), 1024 * 1024);
    Test::new()
        .file("plan.toml", &plan)
        .check(&["plan.toml"])
        .json
        .code(0);
}

#[test]
fn a_yaml_alias_bomb() {
    // "Billion laughs": ten levels of ten aliases each would be 10^10 values.
    let mut plan = String::from(
        "version: 1\nname: lol\nvars:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let refs = vec![format!("*l{}", i - 1); 10].join(", ");
        writeln!(plan, "  l{i}: &l{i} [{refs}]").unwrap();
    }
    plan.push_str("steps:\n  - {id: a, kind: command, run: 'true'}\n");
    let t = Test::new().file("plan.yaml", &plan);
    let check = refused(&t, "plan.yaml", "plan::too_large");
    let p = check.only("plan::too_large");
    assert!(p.message.contains("aliases"), "{p:?}");
    p.help("a plan never needs this many values; this looks like an alias bomb");
    // It points into the alias lines, where the expansion ran over.
    assert!((6..=13).contains(&p.line.unwrap()), "{p:?}");
}

#[test]
fn yaml_aliases_within_bounds_are_fine() {
    let plan = "version: 1\nname: ok\nvars:\n  base: &base [a, b]\n  copy: *base\nsteps:\n  - {id: a, kind: command, run: 'true'}\n";
    Test::new()
        .file("plan.yaml", plan)
        .check(&["plan.yaml"])
        .json
        .code(0);
}

#[test]
fn nesting_10000_deep_toml() {
    for (open, close) in [("[", "]"), ("{ a = ", " }")] {
        let plan = format!(
            "version = 1\nname = \"deep\"\n[vars]\nv = {}{}\n{STEP_TOML}",
            open.repeat(10_000),
            close.repeat(10_000)
        );
        let t = Test::new().file("plan.toml", &plan);
        let check = t.check(&["plan.toml"]);
        // The TOML parser refuses this itself, before gameplan's own limit.
        let p = check.only("plan::syntax");
        assert!(p.message.contains("recurs"), "{p:?}");
        assert_eq!(p.line, Some(4), "{p:?}");
        assert!(check.json.elapsed < PROMPTLY, "{}", check.json);
    }
}

#[test]
fn nesting_10000_deep_yaml() {
    for (open, close, code) in [("[", "]", "plan::syntax"), ("{a: ", "}", "plan::too_deep")] {
        let plan = format!(
            "version: 1\nname: deep\nvars:\n  v: {}{}\nsteps:\n  - {{id: a, kind: command, run: 'true'}}\n",
            open.repeat(10_000),
            close.repeat(10_000)
        );
        let t = Test::new().file("plan.yaml", &plan);
        let check = t.check(&["plan.yaml"]);
        let p = check.only(code);
        assert_eq!(p.line, Some(4), "{p:?}");
        assert!(check.json.elapsed < PROMPTLY, "{}", check.json);
    }
    // Block style nests one line at a time.
    let mut plan = String::from("version: 1\nname: deep\nvars:\n");
    for depth in 1..=200 {
        writeln!(plan, "{}k:", "  ".repeat(depth)).unwrap();
    }
    let t = Test::new().file("plan.yaml", &plan);
    let p = refused(&t, "plan.yaml", "plan::too_deep");
    p.only("plan::too_deep")
        .message("values nest deeper than 64 levels")
        .help("a plan never needs this much nesting; flatten the structure");
}

/// `depth` empty arrays nested inside `[vars]`, and the column of the last.
fn nested_vars(toml: bool, depth: usize) -> (String, usize) {
    let value = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    if toml {
        (
            format!("version = 1\nname = \"deep\"\n[vars]\nv = {value}\n{STEP_TOML}"),
            "v = ".len() + depth,
        )
    } else {
        (
            format!(
                "version: 1\nname: deep\nvars:\n  v: {value}\nsteps:\n  - {{id: a, kind: command, run: 'true'}}\n"
            ),
            "  v: ".len() + depth,
        )
    }
}

#[test]
fn toml_and_yaml_share_one_nesting_limit() {
    // The plan's table, `vars`, then arrays: 64 tables and arrays in all is
    // the limit, whatever the syntax; the 65th is refused where it opens.
    for toml in [true, false] {
        let file = if toml { "plan.toml" } else { "plan.yaml" };
        let (plan, _) = nested_vars(toml, 62);
        Test::new().file(file, plan).check(&[file]).json.code(0);
        let (plan, column) = nested_vars(toml, 63);
        let t = Test::new().file(file, plan);
        t.check(&[file])
            .only("plan::too_deep")
            .at(4, column)
            .message("values nest deeper than 64 levels");
    }
}

#[test]
fn duplicate_yaml_keys() {
    let plan = "version: 1\nname: a\nsteps:\n  - id: a\n    kind: command\n    run: 'true'\n    run: 'false'\nname: b\n";
    let t = Test::new().file("plan.yaml", plan);
    let check = t.check(&["plan.yaml"]);
    check.codes(&["plan::duplicate_key", "plan::duplicate_key"]);
    check
        .with_message("duplicate key `run`")
        .at(7, 5)
        .label("defined again here");
    let p = check.with_message("duplicate key `name`");
    p.at(8, 1);
    check.rendered(p).summary("plan.yaml", 2);
}

#[test]
fn duplicate_toml_keys() {
    let plan = "version = 1\nname = \"a\"\nname = \"b\"\n";
    let t = Test::new().file("plan.toml", plan);
    let check = t.check(&["plan.toml"]);
    let p = check.only("plan::syntax");
    p.at(3, 1);
    assert!(p.message.contains("duplicate key"), "{p:?}");
}

#[test]
fn more_than_one_yaml_document() {
    let plan = "version: 1\nname: a\nsteps: []\n---\nversion: 1\nname: b\n";
    let t = Test::new().file("plan.yaml", plan);
    t.check(&["plan.yaml"])
        .only("plan::syntax")
        .at(4, 1)
        .message("a plan file holds one YAML document");
}

#[test]
fn yaml_tags_are_refused() {
    let plan = "version: 1\nname: !!binary aGVsbG8=\nsteps: []\n";
    let t = Test::new().file("plan.yaml", plan);
    t.check(&["plan.yaml"])
        .only("plan::syntax")
        .message("YAML tags are not supported in plans (except `!!str`)");
}

#[test]
fn template_bombs_are_refused() {
    let bombs = [
        ("{{ 'a' * 100000000 }}", None),
        (
            "{{ 'ab' * 40000 }}",
            Some("the template renders to more than 64 KiB"),
        ),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            Some("the template ran out of fuel (100000 steps)"),
        ),
        ("{% for i in range(1000000000) %}{% endfor %}", None),
        (
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            None,
        ),
    ];
    for (template, message) in bombs {
        let plan = format!(
            "version = 1\nname = \"bomb\"\n\n[[steps]]\nid = \"a\"\nkind = \"command\"\nrun = \"{template}\"\n"
        );
        let t = Test::new().file("plan.toml", &plan);
        let check = refused(&t, "plan.toml", "plan::template");
        let p = check.only("plan::template");
        p.at(7, 7).label("in this template");
        if let Some(message) = message {
            p.message(message);
        }
        // Nothing of the rendered output leaks into the report.
        assert!(check.json.stdout.len() < 4096, "{}", check.json);
        assert!(check.text.stderr.len() < 8192, "{}", check.text);
    }
}

#[test]
fn yaml_1_1_traps_stay_the_strings_written() {
    // A YAML 1.1 reader makes `no`/`on` booleans, `1.10` the float 1.1,
    // `2024-01-01` a date and `0o17` (or `017`) the number 15. A plan means
    // exactly the text written, in every key that wants a string.
    let plan = r"version: 1
name: no
description: 1.10
controllers: [standard]
game:
  id: 2024-01-01
  command: [builtin:maze]
personas:
  - slug: on
    card: no
  - slug: 0o17
    card: 2024-01-01
  - slug: 1e3
    card: 1.10
steps:
  - id: x
    kind: command
    run: 'true'
    matrix: { build: [1.10, no, on, off, yes, 0o17, 017, 0x1F, 2024-01-01, 1e3, 1_000, .inf, True] }
  - id: play
    kind: play
    matrix: { persona: '*' }
";
    let t = Test::new().file("plan.yaml", plan);
    let out = t.run(&["plan", "explain", "--json", "plan.yaml"]);
    let doc = out.code(0).json();
    assert_eq!(doc["plan"], "no");
    assert_eq!(
        ids(&doc),
        [
            "x[1.10]",
            "x[no]",
            "x[on]",
            "x[off]",
            "x[yes]",
            "x[0o17]",
            "x[017]",
            "x[0x1F]",
            "x[2024-01-01]",
            "x[1e3]",
            "x[1_000]",
            "x[.inf]",
            "x[True]",
            "play[on]",
            "play[0o17]",
            "play[1e3]",
        ]
    );
    let cells: Vec<&serde_json::Value> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["cell"])
        .collect();
    assert_eq!(cells[0], &serde_json::json!({"build": "1.10"}));
    assert_eq!(cells[1], &serde_json::json!({"build": "no"}));
    assert_eq!(cells[5], &serde_json::json!({"build": "0o17"}));
    assert_eq!(cells[13], &serde_json::json!({"persona": "on"}));
    // The same in `plan check`'s report of the plan's name.
    let check = t.check(&["plan.yaml"]);
    check.json.code(0);
    check.text.stderr_has("plan.yaml: ok (plan `no`, 16 steps)");
}

#[test]
fn yaml_untyped_scalars_still_fill_typed_keys() {
    // The other side of the same rule: where a key wants a number or a
    // boolean, the plain scalar is read as one.
    let plan = "version: 1\nname: typed\nsteps:\n  - id: a\n    kind: command\n    run: 'true'\n    retries: 0x3\n    always: true\n    reuse: false\n    timeout: 90\n";
    Test::new()
        .file("plan.yaml", plan)
        .check(&["plan.yaml"])
        .json
        .code(0);
    // …and `no` is not a boolean.
    let plan = "version: 1\nname: typed\nsteps:\n  - id: a\n    kind: command\n    run: 'true'\n    always: no\n";
    let t = Test::new().file("plan.yaml", plan);
    t.check(&["plan.yaml"])
        .only("plan::wrong_type")
        .at(7, 13)
        .message("expected a boolean (true or false), found a string");
}
