#!/bin/sh
# simulate: gameplan against the loop a competent Python user writes, in one run.
#
# 10,000 seeded games of the built-in maze (`gameplan game maze`), at most
# 50 actions each, 2 workers, both speaking bridge protocol v1 to the same
# game binary (this build's), seeds 1..GAMES on both sides.
#
# Why the comparison is fair:
# - The peer (bench/simulate_driver.py) is written as a competent user
#   writes it: subprocess pipes with Python's default buffering (readline
#   reads 8 KiB chunks; one write and one flush per request), json from the
#   standard library, a multiprocessing pool of WORKERS processes, a game
#   process kept across games.
# - Same rules on both sides: a new game process after a crash (the dead one
#   reaped), play on after a refused action, a uniformly random listed
#   action, stop at done or MAX_STEPS.
# - gameplan is a release build, built before any timing starts; both runs
#   start from the same cache state (the game binary was just run).
# - gameplan does strictly more per action (observation hash, findings,
#   history, trace steps, traces of failed games written to disk); the
#   Python loop only parses and picks.
# - The game side is the same program for both, and changes to it reach
#   both: `gameplan game maze` is served before the CLI is parsed (no clap
#   tree, TLS provider or environment copy), so each start of the game
#   costs both runners the same, less than before. gameplan starts it through its rlimit
#   wrapper (`__game-exec`, served in the same process: still one exec per
#   game, plus three setrlimit calls the Python loop does not make).
#
# A third runner, the floor (bench/simulate_floor.rs), plays the same games
# doing nothing but the protocol's I/O: no JSON parser, no hash, no
# findings, no trace, no deadline. What it takes is the game side's cost
# (process starts, the game's work, its half of every round trip) plus two
# system calls per action: no runner that plays one game at a time per
# worker can be faster, so floor / Python is the most any such runner can
# gain over the Python loop on this machine and game.
#
# Prints the three summaries, then one line with games/s of each and the
# ratios. Target: gameplan >= 1.5x the Python loop (aim 2x).
#
# Each runner's total CPU (user + system, its game processes included: all
# are waited for) is printed too, with the ratio of those totals. On 2
# cores that all three keep busy, games/s follows total CPU on a quiet
# machine, but on a shared one it is whatever CPU the others leave: two
# builds (0264e58 and 2bbcc97) gave wall ratios from 1.10x to 2.86x in one
# session at load 18-23, while their CPU ratios stayed at 1.12-1.13x. Quote
# the CPU ratio beside the wall one, and the load average beside both.
#
# usage: bench/simulate.sh [GAMES] [WORKERS] [MAX_STEPS] [GAME...]
#   GAME defaults to the built-in maze; e.g. `python3 examples/games/coins.py`.
#   ROUNDS=3 bench/simulate.sh alternates the two runners 3 times and
#   reports the best round of each.
#   GAMEPLAN_BIN=FILE bench/simulate.sh measures that build instead of this
#   tree's (another commit's release build); the game is then that build's.
set -eu
cd "$(dirname "$0")/.."
GAMES=${1:-10000}
WORKERS=${2:-2}
STEPS=${3:-50}
ROUNDS=${ROUNDS:-1}
shift $(( $# < 3 ? $# : 3 ))
echo "== building gameplan and the floor runner (release)"
if [ -n "${GAMEPLAN_BIN:-}" ]; then
    BIN=$(realpath "$GAMEPLAN_BIN")
else
    cargo build --release --quiet
    BIN=$PWD/target/release/gameplan
fi
FLOOR=$(cargo build --release --quiet --bench simulate_floor --message-format=json |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "simulate_floor" and m.get("executable"):
        print(m["executable"])')
if [ $# -eq 0 ]; then
    set -- builtin:maze
    PYGAME="$BIN game maze"
else
    PYGAME="$*"
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# Both runners share the machine with whatever else runs: say how busy it was.
load() { echo "== load average $1: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"; }
load "at start"
rate() { sed -n 's/.* \([0-9.]*\) games\/s.*/\1/p' "$1" | head -1; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (b == "" || a + 0 > b + 0) ? a : b }'; }
# A runner's total CPU seconds, as `timed NAME` saved them; the smaller of two.
cpu() { tail -1 "$OUT/$1.cpu" | awk '{ printf "%.2f", $1 + $2 }'; }
least() { awk -v a="$1" -v b="$2" 'BEGIN { print (b == "" || a + 0 < b + 0) ? a : b }'; }
timed() { name=$1; shift; /usr/bin/time -f '%U %S' -o "$OUT/$name.cpu" "$@"; }
G=""
P=""
F=""
GC=""
PC=""
FC=""
round=1
while [ "$round" -le "$ROUNDS" ]; do
    echo "== round $round: gameplan __simulate ($GAMES games, $WORKERS workers, max $STEPS steps): $*"
    rm -rf "$OUT/failed"
    timed gameplan "$BIN" __simulate --games "$GAMES" --workers "$WORKERS" --max-steps "$STEPS" \
        --strategies random --out "$OUT/failed" -- "$@" > "$OUT/gameplan.txt" || true
    grep -v '^trace of a failed game' "$OUT/gameplan.txt"
    echo "($(grep -c '^trace of a failed game' "$OUT/gameplan.txt") traces of failed games in" \
        "$(ls "$OUT/failed" 2>/dev/null | wc -l) files, $(du -sh "$OUT/failed" 2>/dev/null | cut -f1))"
    echo "== round $round: python driver loop: $PYGAME"
    # shellcheck disable=SC2086
    timed python python3 bench/simulate_driver.py "$GAMES" "$WORKERS" "$STEPS" -- $PYGAME | tee "$OUT/python.txt"
    echo "== round $round: floor runner (protocol I/O only): $PYGAME"
    # shellcheck disable=SC2086
    timed floor "$FLOOR" "$GAMES" "$WORKERS" "$STEPS" -- $PYGAME | tee "$OUT/floor.txt"
    G=$(best "$(rate "$OUT/gameplan.txt")" "$G")
    P=$(best "$(rate "$OUT/python.txt")" "$P")
    F=$(best "$(rate "$OUT/floor.txt")" "$F")
    echo "== round $round: total CPU, game processes included: gameplan $(cpu gameplan) s," \
        "python $(cpu python) s, floor $(cpu floor) s (load $(cut -d' ' -f1 /proc/loadavg))"
    GC=$(least "$(cpu gameplan)" "$GC")
    PC=$(least "$(cpu python)" "$PC")
    FC=$(least "$(cpu floor)" "$FC")
    round=$((round + 1))
done
load "at end"
echo "== gameplan $G games/s, python $P games/s, ratio $(echo "$G $P" | awk '{printf "%.2f", $1/$2}')x"
echo "== floor $F games/s: floor/python $(echo "$F $P" | awk '{printf "%.2f", $1/$2}')x (the most any runner gains here)," \
    "gameplan/floor $(echo "$G $F" | awk '{printf "%.2f", $1/$2}')x"
echo "== total CPU (fewest of the rounds): gameplan $GC s, python $PC s, floor $FC s: python/gameplan" \
    "$(echo "$PC $GC" | awk '{printf "%.2f", $1/$2}')x, python/floor $(echo "$PC $FC" | awk '{printf "%.2f", $1/$2}')x" \
    "(close to the games/s ratios on a quiet machine, and steadier than them on a busy one)"
echo "(overhead per action: the 'runner cpu' lines above, each runner's own CPU over its actions)"
