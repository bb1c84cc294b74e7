//! The chromedriver process gameplan starts for a browser game: found on
//! the game's `PATH`, started on a free loopback port in its own process
//! group with the cell's marker in its environment, waited for until it
//! listens, and stopped with every Chromium process it started.
//!
//! Chromium inherits chromedriver's environment, marker included, so the
//! marker scan that finds a stdio game's escaped processes (and the second
//! Ctrl-C's kill of every game) finds the browser's too, whatever process
//! group Chromium puts its helpers in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Child;

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder};

use crate::play::driver::SpawnError;
use crate::play::stdio::{MARKER_ENV, kill_marked};
use crate::process::{Group, SpawnInGroup as _, Tail};

/// How long chromedriver gets to listen on its port.
const LISTEN_WITHIN: Duration = Duration::from_secs(10);

/// How much of chromedriver's output is kept for an error message.
const OUTPUT_TAIL: usize = 4 * 1024;

/// The Chromium binaries tried, in order, and the Debian package of each
/// program the driver needs.
pub const BROWSERS: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];
pub const BROWSER_PACKAGE: &str = "chromium";
pub const DRIVER_PACKAGE: &str = "chromium-driver";

/// The first executable called `name` on `path` (a `PATH` value), a
/// relative directory taken from gameplan's working directory, which is
/// chromedriver's.
pub(super) fn on_path(name: &str, path: Option<&str>) -> Option<PathBuf> {
    crate::process::on_path(name, path?, Path::new(".")).ok()
}

/// chromedriver and Chromium on the game's `PATH`, or which package to install.
pub fn find_programs(env: &BTreeMap<String, String>) -> Result<(PathBuf, PathBuf), SpawnError> {
    let path = env.get("PATH").map(String::as_str);
    let looked = || format!("looked on PATH={}", path.unwrap_or("(unset)"));
    let driver = on_path("chromedriver", path).ok_or_else(|| SpawnError::Missing {
        program: "chromedriver".into(),
        package: DRIVER_PACKAGE.into(),
        looked: looked(),
    })?;
    let browser = BROWSERS
        .iter()
        .find_map(|name| on_path(name, path))
        .ok_or_else(|| SpawnError::Missing {
            program: "chromium".into(),
            package: BROWSER_PACKAGE.into(),
            looked: looked(),
        })?;
    Ok((driver, browser))
}

/// A running chromedriver.
pub struct ChromeDriver {
    /// `None` once [`ChromeDriver::stop`] handed it to its reaper.
    child: Option<Child>,
    group: Group,
    port: u16,
    marker: String,
    output: Tail,
    /// The browser's profile directory, removed with the browser.
    profile: Option<PathBuf>,
    finished: bool,
}

impl ChromeDriver {
    /// Starts `program` on a free loopback port and waits until it listens.
    /// The browser's `profile` is the driver's from here: removed when it
    /// stops, and when it is dropped (a start that failed, a canceled cell).
    pub async fn start(
        program: &Path,
        env: &BTreeMap<String, String>,
        marker: &str,
        profile: PathBuf,
    ) -> Result<ChromeDriver, SpawnError> {
        // The port is free when asked for, then handed to chromedriver: a
        // server started meanwhile (another cell's `serve`) may take it.
        // Then chromedriver cannot listen there and what answers is not
        // chromedriver: a new port, three times at most.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut driver = match Self::spawn(program, env, marker) {
                Ok(driver) => driver,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&profile);
                    return Err(e);
                }
            };
            match driver.wait_listening().await {
                Ok(()) => {
                    driver.profile = Some(profile);
                    return Ok(driver);
                }
                Err(Listening::Taken) if attempt < 3 => driver.stop().await,
                Err(Listening::Taken) => {
                    let why = format!(
                        "another server answered on chromedriver's port {} three times: {}",
                        driver.port,
                        driver.output_tail()
                    );
                    driver.stop().await;
                    let _ = std::fs::remove_dir_all(&profile);
                    return Err(SpawnError::Browser(why));
                }
                Err(Listening::Failed(e)) => {
                    driver.stop().await;
                    let _ = std::fs::remove_dir_all(&profile);
                    return Err(e);
                }
            }
        }
    }

    /// chromedriver on a free loopback port, not yet listening.
    fn spawn(
        program: &Path,
        env: &BTreeMap<String, String>,
        marker: &str,
    ) -> Result<ChromeDriver, SpawnError> {
        let port = free_port()?;
        let mut command = tokio::process::Command::new(program);
        command
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .env_clear()
            .envs(env)
            .env(MARKER_ENV, marker)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let (mut child, group) = command
            .spawn_in_group()
            .map_err(|e| SpawnError::Browser(format!("cannot run `{}`: {e}", program.display())))?;
        let output = Tail::new(OUTPUT_TAIL);
        if let Some(stdout) = child.stdout.take() {
            output.keep(stdout);
        }
        if let Some(stderr) = child.stderr.take() {
            output.keep(stderr);
        }
        Ok(ChromeDriver {
            child: Some(child),
            group,
            port,
            marker: marker.to_owned(),
            output,
            profile: None,
            finished: false,
        })
    }

    /// The URL of its WebDriver endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// The end of what chromedriver printed.
    pub fn output_tail(&self) -> String {
        self.output.text().trim().to_owned()
    }

    /// Until chromedriver answers on its port: `Taken` when what answers
    /// there is another server.
    async fn wait_listening(&mut self) -> Result<(), Listening> {
        let deadline = Instant::now() + LISTEN_WITHIN;
        loop {
            if let Ok(stream) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await {
                return if is_chromedriver(stream).await {
                    Ok(())
                } else {
                    Err(Listening::Taken)
                };
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.finished = true;
                return Err(Listening::Failed(SpawnError::Browser(format!(
                    "chromedriver {status} before it listened: {}",
                    self.output_tail()
                ))));
            }
            if Instant::now() >= deadline {
                return Err(Listening::Failed(SpawnError::Browser(format!(
                    "chromedriver did not listen on port {} within {} s: {}",
                    self.port,
                    LISTEN_WITHIN.as_secs(),
                    self.output_tail()
                ))));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Kills chromedriver's group (Chromium's processes are in it), then,
    /// on a blocking thread, walks `/proc` for a process of the browser that
    /// left the group (it is killed) and removes the profile (hundreds of
    /// files, a few milliseconds). The stop waits for that walk: a blocking
    /// task still queued when its runtime shuts down is dropped, not run,
    /// and a profile left in the temporary directory after each `gameplan
    /// play` was the cost of not waiting. chromedriver is reaped beside
    /// what the cell does next (a reap cut short by the runtime's end
    /// leaves the child to tokio's orphan reaping: it is dead either way).
    pub async fn stop(mut self) {
        self.group.kill();
        self.finished = true;
        let marker = self.marker.clone();
        let profile = self.profile.take();
        if let Some(mut child) = self.child.take() {
            drop(tokio::spawn(async move {
                let _ = child.wait().await;
            }));
        }
        let _ = tokio::task::spawn_blocking(move || {
            kill_browser(&marker);
            if let Some(profile) = profile {
                remove_profile(&marker, &profile);
            }
        })
        .await;
    }
}

impl Drop for ChromeDriver {
    /// A session dropped without [`ChromeDriver::stop`] (a canceled task)
    /// still leaves no browser behind.
    fn drop(&mut self) {
        if !self.finished {
            self.group.kill();
            kill_browser(&self.marker);
            if let Some(profile) = self.profile.take() {
                remove_profile(&self.marker, &profile);
            }
        }
    }
}

/// Removes a killed browser's profile. A process sent SIGKILL may still be
/// finishing a write when the first removal walks the directory (it then
/// fails with "directory not empty"), so a removal that fails is retried,
/// after killing whatever still names the profile, for up to two seconds.
fn remove_profile(marker: &str, profile: &Path) {
    for _ in 0..40 {
        match std::fs::remove_dir_all(profile) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                kill_browser(marker);
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => return,
        }
    }
}

/// The profile directory of the browser of `marker`: its name is how
/// Chromium's helpers are found (see [`kill_browser`]).
pub fn profile_name(marker: &str) -> String {
    format!("{PROFILE_PREFIX}{marker}")
}

const PROFILE_PREFIX: &str = "gameplan-chromium-";

/// Kills every process of the browser of `marker`: those carrying the
/// marker in their environment (chromedriver, Chromium's browser process,
/// crash handler) and those whose arguments name its profile (the helpers
/// Chromium's zygote starts with a cleaned environment: renderers, GPU,
/// utilities).
pub fn kill_browser(marker: &str) {
    kill_marked(marker);
    kill_naming(&profile_name(marker));
}

/// Kills the browsers of every game this gameplan process started (a
/// second Ctrl-C): every marker starts with our pid.
pub fn kill_browsers_of_this_process() {
    kill_naming(&format!("{PROFILE_PREFIX}{}-", std::process::id()));
}

/// Kills every live process whose arguments hold `needle`, then removes
/// the gameplan profiles they named (`--user-data-dir=…/gameplan-chromium-…`):
/// after a second Ctrl-C nobody else would.
fn kill_naming(needle: &str) {
    let needle = needle.as_bytes();
    let mut profiles = std::collections::BTreeSet::new();
    for found in
        crate::process::running_with(|cmdline| cmdline.windows(needle.len()).any(|w| w == needle))
    {
        let cmdline = found.kill();
        profiles.extend(
            cmdline
                .split(' ')
                .filter_map(|arg| arg.strip_prefix("--user-data-dir="))
                .map(PathBuf::from)
                .filter(|dir| {
                    dir.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(PROFILE_PREFIX))
                }),
        );
    }
    for profile in profiles {
        let _ = std::fs::remove_dir_all(profile);
    }
}

/// A port nobody listens on now (the kernel's pick; released at once for
/// chromedriver to take).
/// Why chromedriver is not there to talk to.
enum Listening {
    /// Another server answers on its port.
    Taken,
    Failed(SpawnError),
}

/// Whether the server on `stream` is chromedriver: its `/status` says so
/// (a static file server started on the same port does not).
async fn is_chromedriver(mut stream: tokio::net::TcpStream) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let asked = async {
        stream
            .write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        // Read until it says which server it is (or closes): a server
        // may keep the connection open after its answer.
        let mut answer = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let n = stream.read(&mut chunk).await?;
            answer.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&answer);
            if n == 0 || text.contains("\"ready\"") || answer.len() > 64 * 1024 {
                return Ok::<_, std::io::Error>(text.contains("\"ready\""));
            }
        }
    };
    // Slow to say: taken for chromedriver, as before this check.
    tokio::time::timeout(Duration::from_secs(5), asked)
        .await
        .map_or(true, |answered| answered.unwrap_or(true))
}

fn free_port() -> Result<u16, SpawnError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| SpawnError::Browser(format!("no free loopback port: {e}")))
}

/// How long the browser gets to start and open a session.
const START_WITHIN: Duration = Duration::from_secs(30);

/// A WebDriver session at `endpoint` (within [`START_WITHIN`]); when none
/// opens, the browser gameplan started is stopped and what chromedriver
/// said is in the error.
pub(super) async fn connect(
    capabilities: Capabilities,
    endpoint: &str,
    driver: Option<ChromeDriver>,
) -> Result<(Client, Option<ChromeDriver>), SpawnError> {
    let connected = tokio::time::timeout(
        START_WITHIN,
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(endpoint),
    )
    .await;
    match connected {
        Ok(Ok(client)) => Ok((client, driver)),
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("no session within {} s", START_WITHIN.as_secs()),
            };
            let tail = driver.as_ref().map(ChromeDriver::output_tail);
            if let Some(driver) = driver {
                driver.stop().await;
            }
            Err(SpawnError::Browser(format!(
                "no WebDriver session at {endpoint}: {why}{}",
                tail.filter(|t| !t.is_empty())
                    .map(|t| format!(" (chromedriver said: {t})"))
                    .unwrap_or_default()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_chromedriver_names_its_debian_package() {
        let dir = std::env::temp_dir().join(format!("gameplan-nodriver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let env = BTreeMap::from([("PATH".to_owned(), dir.display().to_string())]);
        let err = find_programs(&env).expect_err("nothing on that PATH");
        let text = err.to_string();
        assert!(err.is_environment(), "{text}");
        assert!(
            text.contains("chromedriver") && text.contains("chromium-driver"),
            "{text}"
        );
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn a_missing_chromium_names_its_debian_package() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("gameplan-nochromium-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let driver = dir.join("chromedriver");
        std::fs::write(&driver, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&driver, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let env = BTreeMap::from([("PATH".to_owned(), dir.display().to_string())]);
        let err = find_programs(&env).expect_err("no chromium on that PATH");
        let text = err.to_string();
        assert!(err.is_environment(), "{text}");
        assert!(
            text.contains("`chromium`") && text.contains("apt-get install chromium"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
