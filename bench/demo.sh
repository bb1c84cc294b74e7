#!/usr/bin/env bash
# demo: the paid demo end to end on the embedded backend, as README's first
# command runs it (`plan run plans/demo.toml --yes`), and its 24-cell
# variant (bench/demo24.toml: six seeds x two personas x two controllers).
#
# What it measures: the wall time of one whole paid run, from the process
# start to its exit: the ledger created with its demo account, scopes
# checked, the smoke check, the estimate, register, every cell played on a
# fresh built-in maze process, each cell's upload and complete, the
# aggregate merged and published, and finish's settlement.
#
# Why it is fair: every run starts in a fresh temp repo (its own .git and
# no .gameplan/: no ledger, no store, no journal), so nothing is reused and
# every run buys and plays all of its cells; the release build is built
# first and run once untimed (page cache warm, as a second command would
# find it); the median of N runs is printed, not the best; runs are
# sequential, with gameplan's default concurrency (the machine's cores), on
# the same filesystem ($TMPDIR, default /tmp; TMPDIR=/dev/shm takes fsync
# out of it: the journal and the ledger fsync their money records).
# Each run must exit 0 and its ledger must hold one settled job whose runs
# all played, or the figure is refused (a run that stopped early is not a
# fast run).
#
# Targets (issue 16): the 4-cell demo under 3 s on 2 cores (floor 10 s);
# the 24-cell variant under 10 s. Prints each median, its ratio to the
# target, and exits 1 when a median misses its floor (10 s for both).
#
# usage: bench/demo.sh [RUNS (5)]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-5}
cargo build --release --quiet --manifest-path "$here/Cargo.toml"
gameplan="$here/target/release/gameplan"
work=$(mktemp -d "${TMPDIR:-/tmp}/gameplan-demo-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Sets `repo` to a fresh repo holding the plans and the persona file they read.
fresh() {
    local dir
    dir=$(mktemp -d "$work/repo.XXXXXX")
    mkdir -p "$dir/.git" "$dir/plans" "$dir/bench" "$dir/examples/personas"
    cp "$here/plans/demo.toml" "$dir/plans/"
    cp "$here/bench/demo24.toml" "$dir/bench/"
    cp "$here/examples/personas/veteran.md" "$dir/examples/personas/"
    repo=$dir
}

# One paid run of PLAN in a fresh repo; sets `took` to its wall time in ms.
# Refuses the figure unless the run exited 0 with CELLS cells played and
# settled once.
one() {
    local plan=$1 cells=$2 dir t0 t1
    fresh
    dir=$repo
    t0=$(date +%s%N)
    if ! (cd "$dir" && "$gameplan" plan run "$plan" --yes >"$dir/out.txt" 2>&1); then
        echo "the run of $plan failed in $dir:" >&2
        cat "$dir/out.txt" >&2
        exit 1
    fi
    t1=$(date +%s%N)
    (cd "$dir" && "$gameplan" ledger show --json) | python3 -c '
import json, sys
doc, cells = json.load(sys.stdin), int(sys.argv[1])
jobs = doc["jobs"]
ok = (len(jobs) == 1 and jobs[0]["state"] == "settled" and len(jobs[0]["settlements"]) == 1
      and len(jobs[0]["runs"]) == cells and all(r["played"] for r in jobs[0]["runs"]))
sys.exit(0 if ok else f"not one settled job of {cells} played runs: {json.dumps(jobs)[:2000]}")
' "$cells"
    took=$(((t1 - t0) / 1000000))
}

median() { sort -n | awk '{ t[NR] = $1 } END { print (NR % 2) ? t[(NR + 1) / 2] : int((t[NR / 2] + t[NR / 2 + 1]) / 2) }'; }

# Sets MEDIAN, MIN and MAX (ms) of RUNS runs of PLAN, after one untimed
# warm-up run. `one` runs in this shell (not in a $(...)), so a refused run
# stops the bench.
measure() {
    local plan=$1 cells=$2 times=()
    one "$plan" "$cells"
    for _ in $(seq "$runs"); do
        one "$plan" "$cells"
        times+=("$took")
    done
    local sorted
    sorted=$(printf '%s\n' "${times[@]}" | sort -n)
    MEDIAN=$(echo "$sorted" | median)
    MIN=$(echo "$sorted" | head -1)
    MAX=$(echo "$sorted" | tail -1)
}

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }

echo "paid demo on the embedded ledger, release build, $(nproc) cores, median of $runs fresh runs each"
status=0
report() {
    local name=$1 median=$2 min=$3 max=$4 target=$5 floor=$6 verdict=ok
    ((median >= target)) && verdict="over target"
    ((median >= floor)) && { verdict="OVER FLOOR"; status=1; }
    printf '  %-34s median %6d ms (min %d, max %d)  target < %d ms: ratio %sx  floor %d ms: %s\n' \
        "$name" "$median" "$min" "$max" "$target" "$(ratio "$median" "$target")" "$floor" "$verdict"
}
measure plans/demo.toml 4
report "plans/demo.toml (4 cells)" "$MEDIAN" "$MIN" "$MAX" 3000 10000
measure bench/demo24.toml 24
report "bench/demo24.toml (24 cells)" "$MEDIAN" "$MIN" "$MAX" 10000 10000
exit $status
