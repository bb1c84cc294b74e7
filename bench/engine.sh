#!/usr/bin/env bash
# Engine benchmarks W1 and W2, side by side with GNU make in one run.
#
#   bash bench/engine.sh              # release build, then both workloads
#   bash bench/engine.sh --syscalls   # also strace -f -c a fully reused W1
#   bash bench/engine.sh --quick      # W1 once with the debug build: a smoke
#                                     # check (plans/self.toml), no figures to quote
#   ROUNDS=5 (default) cold rounds of each tool
#   GAMEPLAN_BIN=path  measure that binary instead of building one
#
# W1: 1,000 command steps in 10 layers of 100; step i of layer k>0 needs
#     steps i and (i+1) mod 100 of layer k-1; EVERY step declares the input
#     seed.txt and the output out/<id>, and runs `touch out/<id>`.
# W2: 200 steps in 20 chains of 10; each hashes its own 1 MiB random input
#     plus the previous step's output with sha256sum. Cold, fully reused,
#     and after changing one input (must re-run exactly that chain's 10).
#
# Why the comparison with make is fair:
# - Same DAG, same commands, same concurrency (make -j2 vs --concurrency 2),
#   and make's rules name the same inputs (seed.txt and the upstream
#   outputs) as prerequisites, so both tools decide from the same facts.
# - Make writes one file per step (its target) and keeps no other state;
#   gameplan's extra state (journal, log, store index) is part of what is
#   measured, and the script prints how many files and directories it
#   leaves under .gameplan/ per step.
# - Cold means clean state, as a CI cache miss: a fresh copy of the
#   workload with no out/ and no .gameplan/ for each round of each tool.
# - Rounds alternate (make, gameplan, make, ...), so both meet the same
#   filesystem state: ext4 creates inodes slowly for a while after mass
#   deletions, and alternating spreads that over both tools alike.
# - The workloads live on the project's own filesystem (under target/,
#   not tmpfs), cleaned up before the first round; the figures printed are
#   medians of the rounds (best in brackets), with the machine's load.
# - Release build for gameplan; make is the distribution's binary.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
quick=false
syscalls=false
for arg in "$@"; do
    case "$arg" in
        --quick) quick=true ;;
        --syscalls) syscalls=true ;;
        *) echo "unknown argument: $arg (use --quick or --syscalls)" >&2; exit 2 ;;
    esac
done
rounds=${ROUNDS:-5}
if [[ -n "${GAMEPLAN_BIN:-}" ]]; then
    # A binary built already (e.g. the same commit's release build).
    gameplan=$(realpath "$GAMEPLAN_BIN")
    $quick && rounds=1
elif $quick; then
    cargo build --quiet --manifest-path "$here/Cargo.toml"
    gameplan="$here/target/debug/gameplan"
    rounds=1
else
    cargo build --release --quiet --manifest-path "$here/Cargo.toml"
    gameplan="$here/target/release/gameplan"
fi
# The project's own filesystem, not $TMPDIR (often tmpfs).
work="$here/target/bench-engine"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
sync
$quick && echo "quick mode: debug build, one run each; a smoke check, not a measurement"
echo "filesystem: $(df -T "$work" | awk 'NR==2 {print $2 " (" $1 ")"}'), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

now_ms() { date +%s%3N; }
# Runs command $2 in a fresh copy of template $1; prints its milliseconds.
timed_in_copy() {
    local template=$1 cmd=$2 dir="$1.$RANDOM$RANDOM"
    cp -a "$template" "$dir"
    local t0; t0=$(now_ms)
    (cd "$dir" && eval "$cmd" >/dev/null 2>&1) || { echo "command failed in $dir: $cmd" >&2; exit 1; }
    echo $(( $(now_ms) - t0 ))
    rm -rf "$dir"
}
# N alternating rounds of A then B; prints "medianA bestA medianB bestB".
alternate() {
    local n=$1 template=$2 a=$3 b=$4
    local -a ta=() tb=()
    for _ in $(seq "$n"); do
        ta+=("$(timed_in_copy "$template" "$a")")
        tb+=("$(timed_in_copy "$template" "$b")")
    done
    python3 - "${ta[*]}" "${tb[*]}" <<'PY'
import statistics, sys
a = [int(x) for x in sys.argv[1].split()]
b = [int(x) for x in sys.argv[2].split()]
print(int(statistics.median(a)), min(a), int(statistics.median(b)), min(b))
PY
}
# Median and best of N runs in one directory (warm: nothing is deleted).
warm_runs() {
    local n=$1 dir=$2; shift 2
    local -a t=()
    for _ in $(seq "$n"); do
        local t0; t0=$(now_ms)
        (cd "$dir" && "$@" >/dev/null 2>&1) || { echo "command failed in $dir: $*" >&2; exit 1; }
        t+=($(( $(now_ms) - t0 )))
    done
    python3 -c "import statistics,sys; t=[int(x) for x in sys.argv[1:]]; print(int(statistics.median(t)), min(t))" "${t[@]}"
}
ratio() { python3 -c "print(f'{$1/max($2,1):.2f}')"; }

# ---------------------------------------------------------------- W1
w1="$work/w1"; mkdir -p "$w1/.git"
python3 - "$w1" <<'PY'
import sys
d = sys.argv[1]
plan = ['version = 1', 'name = "w1"', '']
make = ['all:', '']
ids = []
for k in range(10):
    for i in range(100):
        sid = f"l{k}-{i}"
        ids.append(sid)
        plan += ['[[steps]]', f'id = "{sid}"', 'kind = "command"', f'run = "touch out/{sid}"',
                 'inputs = ["seed.txt"]', f'outputs = ["out/{sid}"]']
        prereqs = 'seed.txt'
        if k > 0:
            deps = [f"l{k-1}-{i}", f"l{k-1}-{(i+1)%100}"]
            plan.append('needs = [' + ', '.join(f'"{x}"' for x in deps) + ']')
            prereqs += ' ' + ' '.join('out/' + x for x in deps)
        plan.append('')
        make += [f"out/{sid}: {prereqs} | out", f"\ttouch out/{sid}", '']
make[0] = 'all: ' + ' '.join('out/' + x for x in ids)
make += ['out:', '\tmkdir -p out']
open(f"{d}/w1.toml", 'w').write('\n'.join(plan))
open(f"{d}/seed.txt", 'w').write('seed\n')
open(f"{d}/Makefile", 'w').write('\n'.join(make) + '\n')
PY
mkdir -p "$w1/out"
read -r make_med make_best gp_med gp_best < <(alternate "$rounds" "$w1" "make -j2 -s" "'$gameplan' plan run w1.toml --concurrency 2")
load_w1=$(cut -d' ' -f1-3 /proc/loadavg)

# What a cold run leaves under .gameplan/, and its peak memory.
peak="$w1.peak"; cp -a "$w1" "$peak"
(cd "$peak" && /usr/bin/time -f '%M' -o "$work/peak.txt" "$gameplan" plan run w1.toml --concurrency 2 >/dev/null 2>&1)
peak_kb=$(cat "$work/peak.txt")
files=$(find "$peak/.gameplan" -type f | wc -l)
dirs=$(find "$peak/.gameplan" -mindepth 1 -type d | wc -l)
store_files=$(find "$peak/.gameplan/store" -type f | wc -l)
store_dirs=$(find "$peak/.gameplan/store" -type d | wc -l)
step_files=$(find "$peak/.gameplan/runs" -path '*/steps/*' -type f | wc -l)
# The fully reused run, in that same tree.
read -r reused_med reused_best < <(warm_runs "$(( rounds * 2 ))" "$peak" "$gameplan" plan run w1.toml --concurrency 2)

echo "W1 (1,000 steps, each with an input and an output, concurrency 2; $rounds alternating cold rounds; load $load_w1)"
echo "  make -j2 cold        median ${make_med} ms (best ${make_best})"
echo "  gameplan cold        median ${gp_med} ms (best ${gp_best})   ratio to make: $(ratio "$gp_med" "$make_med")x median, $(ratio "$gp_best" "$make_best")x best (target <= 1.3x, floor 1.5x)"
echo "  gameplan reused      median ${reused_med} ms (best ${reused_best})   (target <= 20 ms, floor 50 ms)"
echo "  state per step       $(python3 -c "print(f'{$files/1000:.3f} files, {$dirs/1000:.3f} directories')") under .gameplan/ ($files files, $dirs directories; make: 0 beyond its 1 target per step) (target <= 1 file)"
echo "                       of which store/: $store_files files, $store_dirs directories; runs/*/steps/: $step_files files (per-step logs)"
echo "  gameplan cold peak   $(( peak_kb / 1024 )) MiB RSS (target <= 40 MiB)"
if $syscalls; then
    if command -v strace >/dev/null; then
        (cd "$peak" && strace -f -c -o "$work/strace.txt" "$gameplan" plan run w1.toml --concurrency 2 >/dev/null 2>&1)
        # Columns: % time, seconds, usecs/call, calls, [errors,] syscall.
        calls=$(awk '$NF=="total" {print $4}' "$work/strace.txt")
        echo "  strace -f -c, fully reused W1: ${calls} system calls, $(python3 -c "print(f'{$calls/1000:.2f}')") per step (target <= 5); the most frequent:"
        awk 'NR>2 && $NF!="total" && $1 !~ /^-/ {print $4, $NF}' "$work/strace.txt" | sort -n -r | head -6 | awk '{printf "    %-16s %s\n", $2, $1}'
    else
        echo "  --syscalls: strace is not installed (apt-get install strace)"
    fi
fi

$quick && exit 0

# ---------------------------------------------------------------- W2
w2="$work/w2"; mkdir -p "$w2/.git" "$w2/in" "$w2/out"
python3 - "$w2" <<'PY'
import os, sys
d = sys.argv[1]
plan = ['version = 1', 'name = "w2"', '']
make = ['all:', '']
outs = []
for c in range(20):
    for s in range(10):
        sid = f"c{c}-{s}"
        with open(f"{d}/in/{sid}", 'wb') as f:
            f.write(os.urandom(1 << 20))
        prev = f"out/c{c}-{s-1}" if s else None
        inputs = [f"in/{sid}"] + ([prev] if prev else [])
        run = f"cat {' '.join(inputs)} | sha256sum > out/{sid}"
        plan += ['[[steps]]', f'id = "{sid}"', 'kind = "command"', f'run = "{run}"',
                 'inputs = [' + ', '.join(f'"{x}"' for x in inputs) + ']', f'outputs = ["out/{sid}"]']
        if prev:
            plan.append(f'needs = ["c{c}-{s-1}"]')
        plan.append('')
        make += [f"out/{sid}: {' '.join(inputs)}", f"\t{run}", '']
        outs.append(f"out/{sid}")
make[0] = 'all: ' + ' '.join(outs)
open(f"{d}/w2.toml", 'w').write('\n'.join(plan))
open(f"{d}/Makefile", 'w').write('\n'.join(make) + '\n')
PY
read -r make_med make_best gp_med gp_best < <(alternate 3 "$w2" "make -j2 -s" "'$gameplan' plan run w2.toml --concurrency 2")
warm="$w2.warm"; cp -a "$w2" "$warm"; (cd "$warm" && "$gameplan" plan run w2.toml --concurrency 2 >/dev/null 2>&1)
read -r reused_med reused_best < <(warm_runs 10 "$warm" "$gameplan" plan run w2.toml --concurrency 2)
cd "$warm"
head -c 1048576 /dev/urandom > in/c7-0
t0=$(now_ms)
"$gameplan" plan run w2.toml --concurrency 2 --json > changed.json 2>/dev/null
gp_changed=$(( $(now_ms) - t0 ))
reran=$(python3 -c "import json; r=json.load(open('changed.json')); s=[x['id'] for x in r['steps'] if x['state']=='succeeded']; print(len(s), ' '.join(sorted(s)))")
echo "W2 (200 steps, 20 chains of 10, 1 MiB inputs, concurrency 2; load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "  make -j2 cold        median ${make_med} ms (best ${make_best})"
echo "  gameplan cold        median ${gp_med} ms (best ${gp_best})   ratio to make: $(ratio "$gp_med" "$make_med")x"
echo "  gameplan reused      median ${reused_med} ms (best ${reused_best})   (target <= 100 ms)"
echo "  one input changed    ${gp_changed} ms, re-ran ${reran%% *} steps (must be the 10 of chain c7): ${reran#* }"
