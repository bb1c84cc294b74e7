//! `gameplan check [PLAN]`: whether this machine can run the plan, row by
//! row with the fix, before a newcomer learns it from a failed cell. Real
//! parts: a PATH without chromedriver, `gameplan serve` on loopback with a
//! token made for the test, a wrapper script that starts java.

use std::os::unix::fs::PermissionsExt as _;

use crate::support::{ALL_SCOPES, Served, Test};

/// The row `check` of a `check --json` document.
fn row<'d>(doc: &'d serde_json::Value, check: &str) -> &'d serde_json::Value {
    doc["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["check"] == check)
        .unwrap_or_else(|| panic!("no `{check}` row: {doc:#}"))
}

const WEB: &str = r#"version = 1
name = "web"

[game]
id = "page"
driver = "webdriver"
url = "page.html"
serve = "site"

[[personas]]
slug = "p"
card = "Clicks."
player = { kind = "explorer" }

[[steps]]
id = "play"
kind = "play"
"#;

#[test]
fn a_machine_without_chromedriver_is_told_which_package_to_install_for_a_web_plan() {
    let empty = tempfile::tempdir().expect("dir");
    let t = Test::new()
        .file("web.toml", WEB)
        .file("site/page.html", "<button>go</button>")
        .env("PATH", &empty.path().display().to_string());
    let out = t.run(&["check", "web.toml"]);
    out.code(1)
        .stdout_has("FAIL  browser      chromedriver is not on PATH")
        .stdout_has("fix: apt-get install -y chromium-driver")
        .stdout_has("not ready: 1 check failed");
    let doc = t.run(&["check", "web.toml", "--json"]).code(1).json();
    assert_eq!(doc["ok"], false);
    assert_eq!(row(&doc, "browser")["status"], "fail");
    assert_eq!(row(&doc, "plan")["status"], "pass");
    // Without a web game it is only a warning: nothing the plan runs needs it.
    let no_plan = t.run(&["check", "--json"]).code(0).json();
    assert_eq!(row(&no_plan, "browser")["status"], "warn");
    assert!(
        no_plan["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r["check"] != "plan")
    );
}

#[test]
fn the_browser_row_names_both_versions_when_they_are_installed() {
    let t = Test::new()
        .file("web.toml", WEB)
        .file("site/page.html", "<button>go</button>");
    let doc = t.run(&["check", "web.toml", "--json"]).code(0).json();
    let browser = row(&doc, "browser");
    assert_eq!(browser["status"], "pass", "{browser}");
    let detail = browser["detail"].as_str().expect("detail");
    assert!(detail.starts_with("chromedriver "), "{detail}");
    // The same major version of driver and browser.
    let majors: Vec<&str> = detail
        .split(", ")
        .map(|part| part.rsplit(' ').next().unwrap_or_default())
        .map(|v| v.split('.').next().unwrap_or_default())
        .collect();
    assert_eq!(majors.len(), 2, "{detail}");
    assert_eq!(majors[0], majors[1], "{detail}");
    assert!(
        row(&doc, "concurrency")["detail"]
            .as_str()
            .is_some_and(|d| d.contains("[pools] browser = ")),
        "{doc:#}"
    );
}

fn paid_plan(url: &str) -> String {
    format!(
        r#"version = 1
name = "paid"

[backend]
kind = "http"
url = "{url}"
token = "{{{{ secret('GAMEPLAN_TOKEN') }}}}"

[game]
id = "coins"
driver = "stdio"
command = ["python3", "game.py"]

[[personas]]
slug = "p"
card = "Plays."
player = {{ kind = "explorer" }}
"#
    )
}

#[test]
fn a_token_missing_a_scope_is_named_with_the_scope_and_the_command_that_makes_one() {
    let t = Test::new().file("game.py", "print('a game')\n");
    let served = Served::start(&t);
    t.write("paid.toml", paid_plan(&served.url));
    let db = served.db.display().to_string();
    let narrow = t
        .run(&["ledger", "token", "--db", &db, "--scopes", "playtest:write"])
        .code(0)
        .stdout
        .trim()
        .to_owned();
    let t = t.env("GAMEPLAN_TOKEN", &narrow);
    let out = t.run(&["check", "paid.toml"]);
    out.code(1)
        .stdout_has("FAIL  backend")
        .stdout_has("lacks playtest:model, playtest:upload")
        .stdout_has(&format!("--scopes {ALL_SCOPES}"));
    // Every scope: the backend passes, naming the account.
    let t = t.env("GAMEPLAN_TOKEN", &served.token);
    let doc = t.run(&["check", "paid.toml", "--json"]).code(0).json();
    let backend = row(&doc, "backend");
    assert_eq!(backend["status"], "pass", "{backend}");
    assert!(
        backend["detail"]
            .as_str()
            .is_some_and(|d| d.contains("account `demo`")),
        "{backend}"
    );
    // The token's secret not set: said as such, nothing asked of the server.
    let t = t.without_env("GAMEPLAN_TOKEN");
    let doc = t.run(&["check", "paid.toml", "--json"]).code(1).json();
    assert_eq!(row(&doc, "secrets")["status"], "fail");
    assert!(
        row(&doc, "backend")["detail"]
            .as_str()
            .is_some_and(|d| d.contains("the token's secret GAMEPLAN_TOKEN is not set")),
        "{doc:#}"
    );
    // A server that does not answer: said, with the fix.
    drop(served);
    let t = t.env("GAMEPLAN_TOKEN", &narrow);
    let doc = t.run(&["check", "paid.toml", "--json"]).code(1).json();
    let backend = row(&doc, "backend");
    assert_eq!(backend["status"], "fail", "{backend}");
    assert!(
        backend["fix"]
            .as_str()
            .is_some_and(|f| f.contains("gameplan serve")),
        "{backend}"
    );
}

const WRAPPED: &str = r#"version = 1
name = "jvm"

[game]
id = "jvm"
driver = "stdio"
command = ["./run.sh"]

[[personas]]
slug = "p"
card = "Plays."
player = { kind = "explorer" }

[[steps]]
id = "play"
kind = "play"
"#;

#[test]
fn a_jvm_behind_a_wrapper_script_is_found_and_an_address_space_limit_on_it_is_a_warning() {
    let t = Test::new().file("plan.toml", WRAPPED).file(
        "run.sh",
        "#!/bin/sh\n# the studio's launcher\nexec java -Xmx64m -jar game.jar \"$@\"\n",
    );
    std::fs::set_permissions(t.path("run.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let doc = t.run(&["check", "plan.toml", "--json"]).code(0).json();
    let game = row(&doc, "game");
    assert_eq!(game["status"], "pass", "{game}");
    assert!(
        game["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("`./run.sh`: java ")),
        "{game}"
    );
    t.write(
        "plan.toml",
        WRAPPED.replace(
            "command = [\"./run.sh\"]",
            "command = [\"./run.sh\"]\nlimits = { address_space = \"512MiB\" }",
        ),
    );
    let doc = t.run(&["check", "plan.toml", "--json"]).code(0).json();
    let game = row(&doc, "game");
    assert_eq!(game["status"], "warn", "{game}");
    assert!(
        game["fix"]
            .as_str()
            .is_some_and(|f| f.contains("limits.memory")),
        "{game}"
    );
    // No java on the game's PATH: named, with the package.
    let bin = tempfile::tempdir().expect("dir");
    std::os::unix::fs::symlink("/bin/sh", bin.path().join("sh")).expect("sh");
    let t = t.env("PATH", &bin.path().display().to_string());
    t.write("plan.toml", WRAPPED);
    t.run(&["check", "plan.toml"])
        .code(1)
        .stdout_has("FAIL  game         `./run.sh` needs java, which is not on the game's PATH")
        .stdout_has("apt-get install -y default-jre-headless");
}

#[test]
fn a_ray_head_that_does_not_answer_fails_the_executor_row() {
    let plan = WRAPPED.replace(
        "[game]",
        "[executor]\nkind = \"ray\"\naddress = \"http://127.0.0.1:9\"\nshared_dir = \"/tmp\"\n\n[game]",
    );
    let t = Test::new()
        .file("plan.toml", &plan)
        .file("run.sh", "#!/bin/sh\n");
    // A plan that does not load says its first problem where it is written.
    let (line, column) = crate::support::pos(&plan, "[\"./run.sh\"]");
    t.run(&["check", "plan.toml"]).code(1).stdout_has(&format!(
        "FAIL  plan         plan.toml:{line}:{column}: the game's program `./run.sh` is not executable"
    ));
    std::fs::set_permissions(t.path("run.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let doc = t.run(&["check", "plan.toml", "--json"]).code(1).json();
    let executor = row(&doc, "executor");
    assert_eq!(executor["status"], "fail", "{executor}");
    assert!(
        executor["detail"]
            .as_str()
            .is_some_and(|d| d.contains("http://127.0.0.1:9")),
        "{executor}"
    );
}

/// The plan's own WebDriver server is asked for its `/status`: a pass only
/// when it answers ready, never for what was not checked.
#[test]
fn the_plans_own_webdriver_server_passes_only_when_it_answers_ready() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let plan = WEB.replace(
        "serve = \"site\"",
        &format!("serve = \"site\"\nwebdriver_url = \"http://127.0.0.1:{port}\""),
    );
    let t = Test::new()
        .file("web.toml", &plan)
        .file("site/page.html", "<button>go</button>");
    let doc = t.run(&["check", "web.toml", "--json"]).code(1).json();
    let browser = row(&doc, "browser");
    assert_eq!(browser["status"], "fail", "{browser}");
    assert!(
        browser["detail"]
            .as_str()
            .is_some_and(|d| d.contains("does not answer")),
        "{browser}"
    );
    let mut driver = std::process::Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromedriver on PATH");
    crate::support::wait_until(
        "chromedriver listens",
        std::time::Duration::from_secs(20),
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    let doc = t.run(&["check", "web.toml", "--json"]).code(0).json();
    let _ = driver.kill();
    let _ = driver.wait();
    let browser = row(&doc, "browser");
    assert_eq!(browser["status"], "pass", "{browser}");
    assert!(
        browser["detail"]
            .as_str()
            .is_some_and(|d| d.ends_with("is ready")),
        "{browser}"
    );
}
