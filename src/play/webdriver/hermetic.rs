//! What makes a browser cell hermetic (docs/web-games.md › What a browser
//! cell sees and does): every reset starts from a clean origin, the page's
//! clock is virtual and started from the seed, and the page's inner size is
//! the plan's `viewport`.
//!
//! Owns the scripts installed before the page's own (`listener.js`, then
//! `clock.js`) and the session's steps that install them, how far virtual
//! time moves per action and how a key is held, clearing what a page keeps
//! between loads, and fitting the window to the viewport. It does not read
//! the page (`page.js`, `BrowserSession::observe`) or decide what a
//! failure is.
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

use fantoccini::actions::{InputSource, KeyAction, KeyActions};

use super::capabilities::cdp;
use super::{BrowserSession, LISTENER, PAGE, navigate};
use crate::play::driver::Failure;
use crate::play::protocol::Op;

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
/// while it unloads. What DevTools refused, as notes for the report (the
/// reset goes on: a page that kept something shows in the opening's
/// determinism check).
pub(super) async fn clear_origins(client: &Client, origins: &[String]) -> Vec<String> {
    let mut refused = Vec::new();
    let mut refusal = |what: &str, e: &CmdError| {
        refused.push(format!(
            "a reset could not clear {what}: {}",
            e.to_string().lines().next().unwrap_or_default()
        ));
    };
    if let Err(e) = cdp(client, "Network.clearBrowserCookies", json!({})).await {
        refusal("the cookies", &e);
    }
    for origin in origins {
        if let Err(e) = cdp(
            client,
            "Storage.clearDataForOrigin",
            json!({ "origin": origin, "storageTypes": "all" }),
        )
        .await
        {
            refusal(&format!("the storage of {origin}"), &e);
        }
        // Session storage is the tab's, not the origin's: "all" leaves it.
        // An origin the tab never stored for is refused; that is clean too.
        let _ = cdp(
            client,
            "DOMStorage.clear",
            json!({ "storageId": { "securityOrigin": origin, "isLocalStorage": false } }),
        )
        .await;
    }
    refused
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
    // A busy browser lays the page out at its new size a moment after the
    // window took it: a first screenshot before then would be of another
    // size than every later one (and than a replay's).
    let mut measured = inner(&client.execute(measure, vec![]).await?);
    for _ in 0..20 {
        if measured == (want_w, want_h) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        measured = inner(&client.execute(measure, vec![]).await?);
    }
    let (iw, ih) = measured;
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

impl BrowserSession {
    /// Makes the page's inner size the viewport (the window is larger), or
    /// notes that the browser would not.
    pub(super) async fn fit_viewport(&mut self, viewport: (u32, u32)) {
        let fitted = tokio::time::timeout(self.timeout, fit_viewport(&self.client, viewport)).await;
        let (w, h) = viewport;
        match fitted {
            Ok(Ok(size)) if size == viewport => {}
            Ok(Ok((iw, ih))) => self.note(format!(
                "the page is {iw}x{ih}, not the viewport {w}x{h}: the browser would not size its \
                 window so"
            )),
            _ => self.note(format!(
                "the window could not be sized for a {w}x{h} page: it plays at the browser's size"
            )),
        }
    }

    /// Leaves the game's page and forgets what it kept: through DevTools,
    /// on `about:blank` (so nothing writes while the page unloads), every
    /// storage of the game's origins and the cookies; on the plan's own
    /// WebDriver server, what the page's own script can clear
    /// ([`CLEAR_BY_SCRIPT`]).
    pub(super) async fn clear_origin(&mut self) -> Result<(), Failure> {
        let client = self.client.clone();
        if self.driver.is_some() {
            let origins = origins_of(self.scope.prefixes());
            let refused = self
                .within(Op::Reset, async move {
                    navigate(&client, "about:blank").await?;
                    Ok(clear_origins(&client, &origins).await)
                })
                .await?;
            for note in refused {
                self.note(note);
            }
            Ok(())
        } else {
            let url = self.url.clone();
            self.within(Op::Reset, async move {
                client.execute_async(CLEAR_BY_SCRIPT, vec![]).await?;
                // Navigating to the same URL reloads the page, except when
                // only a fragment would change: then leave it first.
                if url.contains('#') {
                    navigate(&client, "about:blank").await?;
                }
                Ok(())
            })
            .await
        }
    }

    /// Installs the listener and the virtual clock, with `seed` for the
    /// page's randomness and the clock's start, to run before the scripts
    /// of every page from now on (replacing the last reset's). Only
    /// through chromedriver's DevTools; elsewhere the observation installs
    /// the listener late, and the page is not seeded and keeps real time.
    pub(super) async fn install_listener(&mut self, seed: i64) -> Result<(), Failure> {
        if self.driver.is_none() {
            return Ok(());
        }
        if let Some(id) = self.installed.take() {
            let _ = self
                .within(
                    Op::Reset,
                    cdp(
                        &self.client,
                        "Page.removeScriptToEvaluateOnNewDocument",
                        json!({ "identifier": id }),
                    ),
                )
                .await;
        }
        let source = installed_source(seed);
        let added = self
            .within(
                Op::Reset,
                cdp(
                    &self.client,
                    "Page.addScriptToEvaluateOnNewDocument",
                    json!({ "source": source }),
                ),
            )
            .await;
        self.installed = added.ok().and_then(|v| {
            v.get("identifier")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        Ok(())
    }

    /// Presses `key`: down, held for [`KEY_HOLD`] of the page's
    /// time (a game that polls the keys in its frame loop sees it down),
    /// then up. Without a virtual clock, down and up at once.
    pub(super) async fn press(&mut self, key: char) -> Result<(), Failure> {
        let client = self.client.clone();
        let down = KeyActions::new("keyboard".to_owned()).then(KeyAction::Down { value: key });
        let up = KeyActions::new("keyboard".to_owned()).then(KeyAction::Up { value: key });
        if !self.clock {
            let both = down.then(KeyAction::Up { value: key });
            return self.within(Op::Act, client.perform_actions(both)).await;
        }
        let script = format!("{LISTENER}\n{PAGE}");
        let request = json!({
            "mode": "advance",
            "advanceMs": ms(KEY_HOLD),
            "requestsMs": ms(REQUESTS_WITHIN),
            "scope": self.scope.for_page(),
        });
        self.within(Op::Act, async move {
            client.perform_actions(down).await?;
            client.execute_async(&script, vec![request]).await?;
            client.perform_actions(up).await
        })
        .await
    }
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
