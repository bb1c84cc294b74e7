#!/usr/bin/env bash
# A real two-node Ray cluster on this one machine, for the Ray executor's
# tests and bench/ray_overhead.sh (docs/ray.md says how to use it).
#
#   cluster.sh venv               make the venv and install ray[default] into it
#   cluster.sh start DIR          head on 127.0.0.2, worker on 127.0.0.3; waits until both are alive
#   cluster.sh stop DIR           stop every process start and restart-head started; verify none is left
#   cluster.sh restart-head DIR   kill the head (as a crash would) and start a fresh one
#
# The venv is $RAY_VENV, or target/ray-venv under the repo. The ports are
# Ray's defaults unless set: RAY_GCS_PORT (6379), RAY_DASHBOARD_PORT (8265),
# RAY_CLIENT_PORT (10001), RAY_HEAD_AGENT_PORT (52365), RAY_WORKER_AGENT_PORT
# (52366); other ports are Ray's random ones. Two clusters on other ports
# can run side by side (the tests pick free ones). start keeps the ports
# in DIR/ports for restart-head.
#
# Why it looks the way it does (each found on Ray 2.60 here):
# - Ray turns 127.0.0.1 into the host's address, so the nodes live on two
#   other loopback addresses; nothing listens beyond loopback except the
#   ports Ray opens on every interface itself.
# - Both nodes share one --temp-dir root. With a temp dir each, the logs of
#   a job that ran on the worker are lost to GET /api/jobs/{id}/logs: the
#   worker's dashboard agent attaches to "a node on this host", Ray prefers
#   the head, and the agent then reads the job's log under the head's temp
#   dir while the driver wrote it under the worker's. On one shared root Ray
#   gives the worker its own sockets (raylet.1, plasma_store.1) and the log
#   paths agree, as on two real machines.
# - Each node carries a custom resource naming it (node_a, node_b) and the
#   variable GAMEPLAN_RAY_NODE, which every job started there inherits: a
#   job's own output says where it ran. Ray's get_node_id() inside a job
#   cannot: a driver on the worker attaches to the head, by the same rule.
# - Each node's dashboard agent also binds 127.0.0.1:<port>, so the worker's
#   gets a port of its own.
# - `ray stop` would stop every Ray process on the machine, anyone's. Each
#   node is started in a session of its own (setsid); stop kills that
#   session and every descendant of it (job drivers start sessions of their
#   own, under their supervisor), TERM first, then KILL: the raylet and the
#   GCS ignore TERM for over ten seconds.
# - Processes start with a small, clean environment: jobs inherit the
#   environment of whoever started the raylet, and a test's (CARGO_*, any
#   token) has no business there.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
RAY_VERSION=2.60.0
venv=${RAY_VENV:-$repo/target/ray-venv}
head_ip=127.0.0.2
worker_ip=127.0.0.3
gcs_port=${RAY_GCS_PORT:-6379}
dashboard_port=${RAY_DASHBOARD_PORT:-8265}
client_port=${RAY_CLIENT_PORT:-10001}
head_agent_port=${RAY_HEAD_AGENT_PORT:-52365}
worker_agent_port=${RAY_WORKER_AGENT_PORT:-52366}
cpus=${RAY_NODE_CPUS:-2}
# Ray's default object store is 30% of memory; these tests move no objects.
object_store_bytes=100000000

die() { echo "cluster.sh: $*" >&2; exit 1; }

need_venv() {
  [ -x "$venv/bin/ray" ] || die "no Ray venv at $venv: run tests/ray/cluster.sh venv"
}

need_dir() {
  [ -n "${1:-}" ] || die "usage: cluster.sh ${FUNCNAME[1]#cmd_} DIR"
  [ "${FUNCNAME[1]}" != cmd_start ] || mkdir -p "$1"
  cd "$1" 2>/dev/null || die "no such directory: $1"
  dir=$(pwd)
  # Ray's sockets live under the temp dir and a socket path holds 107 bytes.
  [ ${#dir} -le 60 ] || die "DIR too long for Ray's socket paths (${#dir} > 60 bytes): $dir"
}

cmd_venv() {
  if [ -x "$venv/bin/ray" ] \
    && "$venv/bin/python" -c "import ray, sys; sys.exit(ray.__version__ != '$RAY_VERSION')" 2>/dev/null; then
    echo "ray $RAY_VERSION is already in $venv"
    return 0
  fi
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "ray[default]==$RAY_VERSION"
  "$venv/bin/ray" --version
}

# ray start for one node, in a session of its own whose id goes to
# DIR/<node>.sid; its output to DIR/<node>.out.
start_node() {
  local node=$1
  shift
  env -i PATH="$venv/bin:/usr/local/bin:/usr/bin:/bin" HOME="$HOME" LANG=C.UTF-8 \
    RAY_USAGE_STATS_ENABLED=0 GAMEPLAN_RAY_NODE="$node" \
    setsid --wait bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$dir/$node.sid" \
    "$venv/bin/ray" start --temp-dir="$dir/tmp" --num-cpus="$cpus" \
    --object-store-memory="$object_store_bytes" --disable-usage-stats \
    --resources="{\"$node\": 1}" "$@" \
    >"$dir/$node.out" 2>&1 </dev/null \
    || { cat "$dir/$node.out" >&2; die "ray start of $node failed (its output is above)"; }
}

start_head() {
  start_node node_a --head --node-ip-address="$head_ip" --port="$gcs_port" \
    --include-dashboard=true --dashboard-host="$head_ip" --dashboard-port="$dashboard_port" \
    --ray-client-server-port="$client_port" --dashboard-agent-listen-port="$head_agent_port"
}

start_worker() {
  start_node node_b --address="$head_ip:$gcs_port" --node-ip-address="$worker_ip" \
    --dashboard-agent-listen-port="$worker_agent_port"
}

# Waits until the dashboard answers and the named nodes are alive.
wait_alive() {
  "$venv/bin/python" - "http://$head_ip:$dashboard_port" "$@" <<'PY'
import json, sys, time, urllib.request
base, wanted = sys.argv[1], set(sys.argv[2:])
deadline = time.monotonic() + 90
last = "the dashboard did not answer"
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(base + "/api/v0/nodes?limit=100", timeout=5) as r:
            nodes = json.load(r)["data"]["result"]["result"]
        alive = {k for n in nodes if n["state"] == "ALIVE"
                 for k in (n.get("resources_total") or {}) if k.startswith("node_")}
        if wanted <= alive:
            sys.exit(0)
        last = "alive: " + (", ".join(sorted(alive)) or "none")
    except Exception as e:  # not up yet: refused, 500 while the GCS starts
        last = f"{type(e).__name__}: {e}"
    time.sleep(0.5)
sys.exit(f"cluster.sh: nodes {sorted(wanted)} not alive after 90 s ({last})")
PY
}

# Every process of the sessions named by the given .sid files, and every
# descendant of one of them, from one look at the process table.
session_tree() {
  local sids=()
  local f
  for f in "$@"; do
    [ -s "$f" ] && sids+=("$(cat "$f")")
  done
  [ ${#sids[@]} -gt 0 ] || return 0
  ps -eo pid=,ppid=,sid=,stat= | awk -v sids="${sids[*]}" -v self=$$ '
    BEGIN { n = split(sids, s, " "); for (i = 1; i <= n; i++) want[s[i]] = 1 }
    $4 ~ /^Z/ { next }
    { parent[$1] = $2; if ($3 in want) keep[$1] = 1; pids[++count] = $1 }
    END {
      do {
        grew = 0
        for (i = 1; i <= count; i++) {
          p = pids[i]
          if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 }
        }
      } while (grew)
      for (p in keep) if (p != self) print p
    }'
}

# Those of the given pids still running (zombies hold nothing: not counted).
still_running() {
  local p st
  for p in "$@"; do
    st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    st=${st##*) }
    [ "${st%% *}" = Z ] || echo "$p"
  done
  return 0
}

# TERM, up to 2 s for a clean exit, then KILL until nothing is left. Pids
# seen once stay on the list: a job driver whose supervisor died is
# adopted by init and is in none of the sessions any more.
stop_sessions() {
  local pids i
  pids=$(session_tree "$@")
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for i in $(seq 1 70); do
    # shellcheck disable=SC2086
    pids=$(still_running $pids $(session_tree "$@") | sort -un)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    [ "$i" -le 20 ] || kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  die "processes still running after KILL: $(echo $pids)"
}

cmd_start() {
  need_venv
  need_dir "${1:-}"
  if [ -s "$dir/node_a.sid" ] && [ -n "$(session_tree "$dir/node_a.sid")" ]; then
    die "a cluster is already running from $dir (cluster.sh stop $dir)"
  fi
  if "$venv/bin/python" -c "import socket, sys; socket.create_connection(('$head_ip', $dashboard_port), 1)" 2>/dev/null; then
    die "something already listens on $head_ip:$dashboard_port (another Ray cluster?)"
  fi
  local t0=$SECONDS
  printf '%s\n' "gcs_port=$gcs_port" "dashboard_port=$dashboard_port" "client_port=$client_port" \
    "head_agent_port=$head_agent_port" "worker_agent_port=$worker_agent_port" >"$dir/ports"
  start_head
  start_worker
  wait_alive node_a node_b
  echo "ray cluster up in $((SECONDS - t0)) s: dashboard http://$head_ip:$dashboard_port (node_a on $head_ip, node_b on $worker_ip)"
}

cmd_stop() {
  need_dir "${1:-}"
  stop_sessions "$dir/node_a.sid" "$dir/node_b.sid"
  rm -f "$dir/node_a.sid" "$dir/node_b.sid"
  echo "ray cluster in $dir stopped; no process of it is left"
}

cmd_restart-head() {
  need_venv
  need_dir "${1:-}"
  [ -s "$dir/node_a.sid" ] || die "no head was started from $dir"
  # shellcheck source=/dev/null
  . "$dir/ports"
  local pids
  pids=$(session_tree "$dir/node_a.sid")
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  stop_sessions "$dir/node_a.sid"
  # `ray start --head` refuses an address that ray_current_cluster names
  # while any raylet on the machine still points at it, and the worker's
  # does until it gives the dead head up (about a minute).
  rm -f "$dir/tmp/ray_current_cluster"
  start_head
  wait_alive node_a
  # Without GCS fault tolerance the new head is a new cluster: it knows no
  # job, and the worker, cut off from the old one, exits within a minute
  # and does not join this one.
  echo "ray head restarted: http://$head_ip:$dashboard_port (a new cluster: no jobs; node_b gone)"
}

case "${1:-}" in
  venv | start | stop | restart-head) "cmd_$1" "${@:2}" ;;
  *) die "usage: cluster.sh venv | start DIR | stop DIR | restart-head DIR" ;;
esac
