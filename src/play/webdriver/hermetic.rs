//! What makes a browser cell hermetic (docs/web-games.md › What a browser
//! cell sees and does): every reset starts from a clean origin, the page's
//! clock is virtual and started from the seed, and the page's inner size is
//! the plan's `viewport`.
//!
//! Owns the scripts installed before the page's own (`listener.js`, then
//! `clock.js`), how far virtual time moves per action, clearing what a page
//! keeps between loads, and fitting the window to the viewport. It does not
//! read the page (`page.js`, [`super::BrowserSession::observe`]) or decide
//! what a failure is.
//!
//! # Time
//!
//! Virtual time moves only when gameplan moves it: [`ACT_ADVANCE`] before
//! each read of the page (after a reset and after each action), so a game
//! whose loop runs on `setInterval` or `requestAnimationFrame` moves 15
//! frames per action; `wait` moves it [`WAIT_ADVANCE`] more (and lets half a
//! second of real time pass, for sound and video); a key is held down for [`KEY_HOLD`] (3 frames) before it goes
//! up, so a canvas game that polls the keys in its frame loop sees it. The
//! same seed starts the clock at the same instant ([`clock_start_ms`]).
//! Where the plan names its own WebDriver server (no DevTools), nothing can
//! run before the page's scripts: the page keeps the real clock there.

use std::time::Duration;

use fantoccini::Client;
use fantoccini::error::CmdError;
use serde_json::{Value, json};

use super::{ChromeCdp, LISTENER};

/// Virtual time moved on before each read of the page.
pub(super) const ACT_ADVANCE: Duration = Duration::from_millis(250);
/// Virtual time `wait` moves on besides [`ACT_ADVANCE`].
pub(super) const WAIT_ADVANCE: Duration = Duration::from_millis(750);
/// How long a pressed key is held down, in virtual time (3 frames at 60 Hz).
pub(super) const KEY_HOLD: Duration = Duration::from_millis(50);
/// Real time a read waits, at most, for the page's requests in flight.
pub(super) const REQUESTS_WITHIN: Duration = Duration::from_secs(2);

const CLOCK: &str = include_str!("clock.js");

/// 2024-01-01T00:00:00Z, where the seeds' clocks start counting.
const EPOCH_2024_MS: i64 = 1_704_067_200_000;

/// The virtual clock's start for `seed`, in milliseconds since the Unix
/// epoch: 09:00 UTC on a day of the year from 2024-01-01, the day picked by
/// the seed (a game that shows the date shows a plausible one, and seeds
/// next to each other are a day apart), the same for the same seed.
pub(super) fn clock_start_ms(seed: i64) -> i64 {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    EPOCH_2024_MS + seed.rem_euclid(365) * DAY_MS + 9 * 3600 * 1000
}

/// The script run before every page's own: the seed for its randomness
/// and its clock, the listener, then the clock.
pub(super) fn installed_source(seed: i64) -> String {
    format!(
        "window.__gameplanSeed = {};\nwindow.__gameplanClockStart = {};\n{LISTENER}\n{CLOCK}",
        seed.rem_euclid(1 << 32),
        clock_start_ms(seed)
    )
}

/// Milliseconds as `page.js` takes them.
pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Forgets everything the page kept in the browser through DevTools: the
/// cookies, and for each origin of the game (an `http(s)` origin, or
/// `file://`) its local storage, `IndexedDB`, Cache Storage, service workers
/// and the rest of `storageTypes: "all"`, plus the tab's session storage.
/// Run with the tab on `about:blank`, so no page of the game writes again
/// while it unloads.
pub(super) async fn clear_origins(client: &Client, origins: &[String]) -> Result<(), CmdError> {
    client
        .issue_cmd(ChromeCdp {
            cmd: "Network.clearBrowserCookies",
            params: json!({}),
        })
        .await?;
    for origin in origins {
        client
            .issue_cmd(ChromeCdp {
                cmd: "Storage.clearDataForOrigin",
                params: json!({ "origin": origin, "storageTypes": "all" }),
            })
            .await?;
        // Session storage is the tab's, not the origin's: "all" leaves it.
        // An origin the tab never stored for is refused; that is clean too.
        let _ = client
            .issue_cmd(ChromeCdp {
                cmd: "DOMStorage.clear",
                params: json!({ "storageId": { "securityOrigin": origin, "isLocalStorage": false } }),
            })
            .await;
    }
    Ok(())
}

/// What a page can clear of its own origin by script, where there is no
/// DevTools (the plan's own WebDriver server): its storage, its cookies
/// (those scripts can see), `IndexedDB`, Cache Storage and service workers.
/// Run in the game's page before it is reloaded (Execute Async Script).
pub(super) const CLEAR_BY_SCRIPT: &str = r"
var done = arguments[arguments.length - 1];
var waits = [];
try { localStorage.clear(); } catch (e) {}
try { sessionStorage.clear(); } catch (e) {}
try {
  document.cookie.split(';').forEach(function (c) {
    var name = c.split('=')[0].trim();
    if (name) document.cookie = name + '=; expires=Thu, 01 Jan 1970 00:00:00 GMT; path=/';
  });
} catch (e) {}
try {
  if (indexedDB.databases) {
    waits.push(indexedDB.databases().then(function (all) {
      all.forEach(function (db) { indexedDB.deleteDatabase(db.name); });
    }));
  }
} catch (e) {}
try {
  if (window.caches) {
    waits.push(caches.keys().then(function (keys) {
      return Promise.all(keys.map(function (k) { return caches.delete(k); }));
    }));
  }
} catch (e) {}
try {
  if (navigator.serviceWorker) {
    waits.push(navigator.serviceWorker.getRegistrations().then(function (all) {
      return Promise.all(all.map(function (r) { return r.unregister(); }));
    }));
  }
} catch (e) {}
Promise.all(waits).then(function () { done(null); }, function () { done(null); });
";

/// Makes the page's inner size `(w, h)`: Chromium's `--window-size` sizes
/// the window, and a headless window keeps room for its (invisible) frame
/// (1280x800 gives a 1280x657 page). The difference is measured once and
/// the window grown by it. The size the page ended with, as it says.
pub(super) async fn fit_viewport(
    client: &Client,
    (w, h): (u32, u32),
) -> Result<(u32, u32), CmdError> {
    let inner = |v: &Value| -> (i64, i64) {
        (
            v.get(0).and_then(Value::as_i64).unwrap_or(0),
            v.get(1).and_then(Value::as_i64).unwrap_or(0),
        )
    };
    let measure = "return [window.innerWidth, window.innerHeight]";
    let (iw, ih) = inner(&client.execute(measure, vec![]).await?);
    let (want_w, want_h) = (i64::from(w), i64::from(h));
    if (iw, ih) == (want_w, want_h) || iw <= 0 || ih <= 0 {
        return Ok((w, h));
    }
    let (_, _, ow, oh) = client.get_window_rect().await?;
    let grown = |outer: u64, want: i64, inner: i64| {
        let outer = i64::try_from(outer).unwrap_or(want);
        u32::try_from((outer + want - inner).max(1)).unwrap_or(u32::MAX)
    };
    client
        .set_window_size(grown(ow, want_w, iw), grown(oh, want_h, ih))
        .await?;
    let (iw, ih) = inner(&client.execute(measure, vec![]).await?);
    Ok((
        u32::try_from(iw).unwrap_or_default(),
        u32::try_from(ih).unwrap_or_default(),
    ))
}

/// The origins whose storage a reset clears: each scope prefix's origin
/// (`http://127.0.0.1:8080`), or `file://` for a page on disk.
pub(super) fn origins_of(prefixes: &[String]) -> Vec<String> {
    let mut out: Vec<String> = prefixes
        .iter()
        .filter_map(|p| {
            let (scheme, rest) = p.split_once("://")?;
            if scheme.eq_ignore_ascii_case("file") {
                return Some("file://".to_owned());
            }
            let host = rest.split('/').next().unwrap_or(rest);
            Some(format!("{scheme}://{host}"))
        })
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_starts_the_clock_at_the_same_instant_within_a_year_from_2024() {
        assert_eq!(clock_start_ms(7), clock_start_ms(7));
        assert_ne!(clock_start_ms(7), clock_start_ms(8));
        assert_eq!(clock_start_ms(1) - clock_start_ms(0), 24 * 3600 * 1000);
        for seed in [0, 1, -1, i64::MAX, i64::MIN, 31_536_000] {
            let start = clock_start_ms(seed);
            assert!(
                (EPOCH_2024_MS..EPOCH_2024_MS + 365 * 24 * 3600 * 1000).contains(&start),
                "{seed}: {start}"
            );
        }
        assert!(
            installed_source(7).contains(&format!("__gameplanClockStart = {}", clock_start_ms(7)))
        );
    }

    #[test]
    fn a_game_s_origins_are_its_http_origin_or_file() {
        assert_eq!(
            origins_of(&["http://127.0.0.1:8080/".to_owned()]),
            ["http://127.0.0.1:8080"]
        );
        assert_eq!(origins_of(&["file:///repo/web/".to_owned()]), ["file://"]);
        assert!(origins_of(&[]).is_empty());
    }
}
