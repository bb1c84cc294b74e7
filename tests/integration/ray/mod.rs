//! The Ray Jobs API client against a real two-node Ray 2.60 cluster on
//! this machine (`tests/ray/cluster.sh`: head on 127.0.0.2, worker on
//! 127.0.0.3), no mock: jobs run, are pinned to a node, stop, clash on an
//! id, and are forgotten by a restarted head.
//!
//! The cluster is started once per test binary ([`shared`]), on free
//! ports (another cluster, a developer's or a second checkout's tests, may
//! run beside it on Ray's default ones), and stopped
//! when the binary exits, however it exits: a watchdog the fixture starts
//! waits for the end of a pipe only this process holds, then runs
//! `cluster.sh stop`. The tests share it; the one that restarts the head
//! takes it alone ([`alone`]) and leaves it marked, and the next test to
//! ask for it starts it afresh.
//!
//! Without the venv (`tests/ray/cluster.sh venv`, which `.ci/run` runs)
//! these tests fail, naming the command: a skipped test would look green.

mod executor;
mod hosted;
mod jobs;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use gameplan::ray::{JobDetails, JobStatus, JobsClient, SubmissionId};

/// The running cluster the tests share.
pub struct Cluster {
    dir: PathBuf,
    /// `cluster.sh`'s port variables, as this cluster was started with.
    ports: Vec<(&'static str, u16)>,
    /// The head was restarted: the worker is gone and the jobs forgotten.
    pub damaged: bool,
    /// Its stdin is the pipe whose end tells the watchdog to stop the
    /// cluster; held for the life of the process, never written.
    _watchdog: Child,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> PathBuf {
    repo().join("tests/ray/cluster.sh")
}

/// The venv `cluster.sh` uses: `$RAY_VENV`, or `target/ray-venv` in the repo.
fn venv() -> PathBuf {
    std::env::var_os("RAY_VENV").map_or_else(|| repo().join("target/ray-venv"), PathBuf::from)
}

/// A TCP port nothing listens on now, on any address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Runs `cluster.sh ARGS`, failing the test with its output if it fails.
fn cluster_sh(ports: &[(&str, u16)], args: &[&str]) {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .envs(ports.iter().map(|(k, v)| (*k, v.to_string())))
        .stdin(Stdio::null())
        .output()
        .expect("run bash tests/ray/cluster.sh");
    assert!(
        out.status.success(),
        "tests/ray/cluster.sh {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Cluster {
    fn start() -> Cluster {
        assert!(
            venv().join("bin/ray").exists(),
            "no Ray venv at {}: run `tests/ray/cluster.sh venv` first (it installs ray[default]==2.60.0 from PyPI; .ci/run does this)",
            venv().display()
        );
        // Short: Ray's socket paths under it must fit in 107 bytes.
        let dir = tempfile::Builder::new()
            .prefix("gp-ray-")
            .tempdir_in("/tmp")
            .expect("a temp dir")
            .keep();
        let dir_arg = dir.to_str().expect("a UTF-8 temp dir").to_owned();
        // Started before the cluster, so that a test binary killed during
        // the start still stops what was started.
        let watchdog = Command::new("setsid")
            .args([
                "bash",
                "-c",
                r#"cat >/dev/null; bash "$0" stop "$1" >"$1.stop.log" 2>&1 && rm -rf "$1" "$1.stop.log""#,
            ])
            .arg(script())
            .arg(&dir_arg)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the cluster's watchdog (setsid, bash)");
        let ports = vec![
            ("RAY_GCS_PORT", free_port()),
            ("RAY_DASHBOARD_PORT", free_port()),
            ("RAY_CLIENT_PORT", free_port()),
            ("RAY_HEAD_AGENT_PORT", free_port()),
            ("RAY_WORKER_AGENT_PORT", free_port()),
        ];
        let cluster = Cluster {
            dir,
            ports,
            damaged: false,
            _watchdog: watchdog,
        };
        cluster.run(&["start", &dir_arg]);
        cluster
    }

    pub fn dir(&self) -> &str {
        self.dir.to_str().expect("UTF-8")
    }

    /// Runs `cluster.sh ARGS` on this cluster's ports.
    pub fn run(&self, args: &[&str]) {
        cluster_sh(&self.ports, args);
    }

    /// The head's dashboard.
    pub fn dashboard(&self) -> String {
        let port = self
            .ports
            .iter()
            .find(|(k, _)| *k == "RAY_DASHBOARD_PORT")
            .map(|(_, p)| *p)
            .expect("a dashboard port");
        format!("http://127.0.0.2:{port}")
    }

    pub fn client(&self) -> JobsClient {
        JobsClient::new(&self.dashboard()).expect("a client of the dashboard")
    }

    /// The id of the alive node offering the custom resource `name`, from
    /// the dashboard's state API (not the Jobs API the client speaks).
    pub async fn node_offering(&self, name: &str) -> String {
        let url = format!("{}/api/v0/nodes?limit=100", self.dashboard());
        let body: serde_json::Value = reqwest::get(url)
            .await
            .expect("GET /api/v0/nodes")
            .json()
            .await
            .expect("JSON nodes");
        let nodes = body["data"]["result"]["result"]
            .as_array()
            .expect("a list of nodes");
        nodes
            .iter()
            .find(|n| n["state"] == "ALIVE" && n["resources_total"].get(name).is_some())
            .and_then(|n| n["node_id"].as_str())
            .unwrap_or_else(|| panic!("no alive node offers {name}: {body}"))
            .to_owned()
    }

    /// A cluster whose head was restarted, whole again: stopped and
    /// started in the same directory.
    fn restore(&mut self) {
        let dir = self.dir().to_owned();
        self.run(&["stop", &dir]);
        self.run(&["start", &dir]);
        self.damaged = false;
    }
}

fn lock() -> &'static RwLock<Cluster> {
    static CLUSTER: OnceLock<RwLock<Cluster>> = OnceLock::new();
    CLUSTER.get_or_init(|| RwLock::new(Cluster::start()))
}

/// Ray tests using the cluster right now.
static USERS: AtomicUsize = AtomicUsize::new(0);

/// How long the cluster may stand idle before it is stopped: long enough
/// to bridge the gap between two Ray tests, short enough that the tests
/// after them (browser cells above all) do not share the machine with an
/// idle Ray (its raylets, GCS and dashboard keep a core busy).
const IDLE_STOP: Duration = Duration::from_secs(5);

/// A cluster in use; when the last user lets go and none comes within
/// [`IDLE_STOP`], the cluster is stopped (the next user starts it again).
pub struct Using<G> {
    guard: G,
}

impl<G: std::ops::Deref<Target = Cluster>> std::ops::Deref for Using<G> {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.guard
    }
}

impl std::ops::DerefMut for Using<RwLockWriteGuard<'static, Cluster>> {
    fn deref_mut(&mut self) -> &mut Cluster {
        &mut self.guard
    }
}

impl<G> Drop for Using<G> {
    fn drop(&mut self) {
        if USERS.fetch_sub(1, Ordering::SeqCst) == 1 {
            std::thread::spawn(|| {
                std::thread::sleep(IDLE_STOP);
                if USERS.load(Ordering::SeqCst) > 0 {
                    return;
                }
                let mut cluster = lock().write().unwrap_or_else(PoisonError::into_inner);
                if USERS.load(Ordering::SeqCst) == 0 && !cluster.damaged {
                    let dir = cluster.dir().to_owned();
                    cluster.run(&["stop", &dir]);
                    // Started again (stopped first, harmlessly) by the next user.
                    cluster.damaged = true;
                }
            });
        }
    }
}

/// The shared cluster, whole (both nodes alive), for as long as the
/// guard lives.
pub fn shared() -> Using<RwLockReadGuard<'static, Cluster>> {
    USERS.fetch_add(1, Ordering::SeqCst);
    loop {
        {
            let cluster = lock().read().unwrap_or_else(PoisonError::into_inner);
            if !cluster.damaged {
                return Using { guard: cluster };
            }
        }
        let mut cluster = lock().write().unwrap_or_else(PoisonError::into_inner);
        if cluster.damaged {
            cluster.restore();
        }
    }
}

/// The shared cluster with no other test using it, for a test that
/// breaks it (and sets `damaged`).
pub fn alone() -> Using<RwLockWriteGuard<'static, Cluster>> {
    USERS.fetch_add(1, Ordering::SeqCst);
    let mut cluster = lock().write().unwrap_or_else(PoisonError::into_inner);
    if cluster.damaged {
        cluster.restore();
    }
    Using { guard: cluster }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A submission id no other test (nor an earlier run) uses.
pub fn fresh_id(what: &str) -> SubmissionId {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    SubmissionId::new(format!("it-{}-{n}-{what}", std::process::id())).expect("a valid id")
}

/// Polls the job until `done` holds of it, failing after `within`.
pub async fn wait_for(
    client: &JobsClient,
    id: &SubmissionId,
    within: Duration,
    what: &str,
    done: impl Fn(&JobDetails) -> bool,
) -> JobDetails {
    let started = Instant::now();
    loop {
        let job = client.status(id).await.expect("status");
        if done(&job) {
            return job;
        }
        assert!(
            started.elapsed() < within,
            "job {id} not {what} after {within:?}: {job:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls the job until it has ended.
pub async fn wait_ended(client: &JobsClient, id: &SubmissionId) -> JobDetails {
    wait_for(client, id, Duration::from_secs(60), "ended", |job| {
        job.status.is_terminal()
    })
    .await
}

/// Asserts the job succeeded.
pub fn assert_succeeded(job: &JobDetails) {
    assert_eq!(
        job.status,
        JobStatus::Succeeded,
        "job {:?} did not succeed: {:?}",
        job.submission_id,
        job.message
    );
}
