//! `game.probe` in the page: the observation script that carries it, and
//! the check, when a session opens, that it is a JavaScript expression.
//! What its value means (the observation's `state`) is `page_view`'s.

use std::time::Duration;

use fantoccini::Client;

use super::{LISTENER, PAGE, first_line};

/// The observation script: the listener, `game.probe` (if any) as
/// `window.__gameplanProbe`, then `page.js`. The probe is part of the
/// script's source, not `eval`ed, so a page's Content-Security-Policy
/// does not stop it.
pub(super) fn observation_script(probe: Option<&str>) -> String {
    match probe {
        Some(probe) => format!(
            "{LISTENER}\nObject.defineProperty(window, '__gameplanProbe', {{ configurable: true, \
             writable: true, value: function () {{ return (\n{probe}\n); }} }});\n{PAGE}"
        ),
        None => format!("{LISTENER}\n{PAGE}"),
    }
}

/// Whether `probe` is a JavaScript expression (compiled, not run: no page
/// is loaded yet); what the browser said otherwise.
pub(super) async fn check_probe(
    client: &Client,
    probe: &str,
    timeout: Duration,
) -> Result<(), String> {
    let script = format!("return typeof function () {{ return (\n{probe}\n); }};");
    match tokio::time::timeout(timeout, client.execute(&script, vec![])).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "`game.probe` ({}) is not a JavaScript expression: {}; it is evaluated in the page \
             as `return (PROBE)`, e.g. `probe = \"window.game && window.game.state\"`",
            crate::text::cut(probe, 80),
            first_line(&e.to_string())
        )),
        Err(_) => Err(format!(
            "the browser did not check `game.probe` within {} s",
            timeout.as_secs_f64()
        )),
    }
}
