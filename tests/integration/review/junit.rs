//! The seam's `JUnit` part: a step kind hands its own test cases
//! to `--junit` (`Kind::junit_cases`), each step's in a suite of its own.
//! The `aggregate` kind reports one case per distinct finding, classname
//! its category: skipped (not judged) without `fail_on`, failed for the
//! findings `--fail-on` matched and passed for the rest; a reused
//! aggregate reports the same cases.

use crate::support::Test;

const MAZE_PLAN: &str = include_str!("../../../plans/maze.toml");

/// One `<testcase>` as a CI reporter reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Case {
    suite: String,
    name: String,
    classname: String,
    /// `passed`, or the first child element saying otherwise
    /// (`failure`, `error`, `skipped`).
    status: String,
    /// The status element's `message`.
    message: String,
}

/// Parses `xml` strictly (end tags must match, the document must close):
/// every test case with its suite.
fn cases(xml: &str) -> Vec<Case> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let attr = |e: &quick_xml::events::BytesStart<'_>, name: &str| {
        e.try_get_attribute(name)
            .unwrap_or_else(|err| panic!("a malformed attribute ({err}):\n{xml}"))
            .map(|a| a.unescape_value().expect("an attribute value").into_owned())
            .unwrap_or_default()
    };
    let (mut suite, mut found, mut depth) = (String::new(), Vec::<Case>::new(), 0usize);
    let mut in_case = false;
    loop {
        let event = reader
            .read_event()
            .unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
        let (start, empty) = match &event {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(e) => {
                depth -= 1;
                if e.name().as_ref() == b"testcase" {
                    in_case = false;
                }
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        match start.name().as_ref() {
            b"testsuite" => suite = attr(start, "name"),
            b"testcase" => {
                found.push(Case {
                    suite: suite.clone(),
                    name: attr(start, "name"),
                    classname: attr(start, "classname"),
                    status: "passed".into(),
                    message: String::new(),
                });
                in_case = !empty;
            }
            status @ (b"failure" | b"error" | b"skipped") if in_case => {
                let case = found.last_mut().expect("inside a case");
                if case.status == "passed" {
                    case.status = String::from_utf8_lossy(status).into_owned();
                    case.message = attr(start, "message");
                }
            }
            _ => {}
        }
        if !empty {
            depth += 1;
        }
    }
    assert_eq!(depth, 0, "unclosed elements:\n{xml}");
    found
}

fn in_suite<'c>(cases: &'c [Case], suite: &str) -> Vec<&'c Case> {
    cases.iter().filter(|c| c.suite == suite).collect()
}

#[test]
fn junit_has_a_case_per_step_and_one_per_distinct_finding_in_the_aggregates_suite() {
    let t = Test::new().file("plans/maze.toml", MAZE_PLAN);
    t.run(&["plan", "run", "plans/maze.toml", "--junit", "junit.xml"])
        .code(0);
    let first = cases(&t.read("junit.xml"));
    let steps: Vec<&str> = in_suite(&first, "maze")
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(steps.len(), 9, "{first:#?}");
    assert!(steps.iter().filter(|s| s.starts_with("play[")).count() == 8);
    assert_eq!(steps.last(), Some(&"aggregate"));
    assert!(
        in_suite(&first, "maze")
            .iter()
            .all(|c| c.status == "passed"),
        "{first:#?}"
    );

    // One case per distinct finding, most severe first, none red: nothing
    // judged them.
    let findings = in_suite(&first, "maze: aggregate");
    let classes: Vec<&str> = findings.iter().map(|c| c.classname.as_str()).collect();
    assert_eq!(
        classes,
        [
            "maze.aggregate.crash",
            "maze.aggregate.error",
            "maze.aggregate.stuck",
            "maze.aggregate.refused"
        ],
        "{first:#?}"
    );
    assert!(
        findings[0]
            .name
            .starts_with("8df40e09ffdc5950 The game exited with code 101")
    );
    for case in &findings {
        assert_eq!(case.status, "skipped", "{case:?}");
        assert!(case.message.contains("not judged"), "{case:?}");
    }
    assert_eq!(first.len(), 13, "9 steps and 4 findings, nothing else");
    assert!(t.read("junit.xml").contains("gameplan replay"));

    // Run again: every step is reused, the aggregate restored from the
    // store, and the file holds the same cases.
    t.run(&["plan", "run", "plans/maze.toml", "--junit", "again.xml"])
        .code(0)
        .stdout_has("(9 reused)");
    assert_eq!(cases(&t.read("again.xml")), first);
}

#[test]
fn fail_on_fails_the_case_of_the_finding_it_matched_and_passes_the_others() {
    let t = Test::new().file("plans/maze.toml", MAZE_PLAN);
    t.run(&[
        "plan",
        "run",
        "plans/maze.toml",
        "--fail-on",
        "crash",
        "--junit",
        "junit.xml",
    ])
    .code(1);
    let all = cases(&t.read("junit.xml"));
    let findings = in_suite(&all, "maze: aggregate");
    assert_eq!(findings.len(), 4, "{all:#?}");
    assert_eq!(findings[0].classname, "maze.aggregate.crash");
    assert_eq!(findings[0].status, "failure", "{all:#?}");
    assert!(
        findings[0]
            .message
            .starts_with("critical crash matches --fail-on crash: The game exited with code 101"),
        "{:?}",
        findings[0]
    );
    for case in &findings[1..] {
        assert_eq!(case.status, "passed", "{case:?}");
    }
    // The steps' suite keeps its own `fail-on` case beside the steps.
    let steps = in_suite(&all, "maze");
    assert_eq!(steps.len(), 10, "{all:#?}");
    assert_eq!(steps[9].name, "fail-on");
    assert_eq!(steps[9].status, "failure");

    // Judged and matching nothing: every finding's case passes.
    t.run(&[
        "plan",
        "run",
        "plans/maze.toml",
        "--fail-on",
        "hang",
        "--junit",
        "junit.xml",
    ])
    .code(0);
    let all = cases(&t.read("junit.xml"));
    assert!(all.iter().all(|c| c.status == "passed"), "{all:#?}");
    assert_eq!(in_suite(&all, "maze: aggregate").len(), 4);
}
