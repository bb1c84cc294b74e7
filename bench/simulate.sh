#!/bin/sh
# simulate: gameplan vs a minimal Python driver loop, side by side.
#
# 10,000 seeded games of the built-in maze (`gameplan game maze`), at most
# 50 actions each, 2 game processes in parallel, both speaking bridge
# protocol v1 to the same game binary. gameplan does more per action
# (observation hash, findings, trace steps kept for failed games); the
# Python loop only parses and picks. Prints games/s of both, the ratio, and
# each runner's own CPU per action (game processes excluded).
#
# Floor: gameplan >= 1.5x the Python loop; aim 2x. Needs a release build
# (built here; 6-12 minutes cold on two cores).
#
# usage: bench/simulate.sh [GAMES] [WORKERS] [MAX_STEPS] [GAME...]
#   GAME defaults to the built-in maze; e.g. `python3 examples/games/coins.py`.
set -eu
cd "$(dirname "$0")/.."
GAMES=${1:-10000}
WORKERS=${2:-2}
STEPS=${3:-50}
shift $(( $# < 3 ? $# : 3 ))
cargo build --release --quiet
BIN=$PWD/target/release/gameplan
if [ $# -eq 0 ]; then
    set -- builtin:maze
    PYGAME="$BIN game maze"
else
    PYGAME="$*"
fi

echo "== gameplan __simulate ($GAMES games, $WORKERS workers, max $STEPS steps): $*"
OUT=$(mktemp -d)
"$BIN" __simulate --games "$GAMES" --workers "$WORKERS" --max-steps "$STEPS" \
    --strategies random --out "$OUT/failed" -- "$@" > "$OUT/gameplan.txt" || true
grep -v '^trace of a failed game' "$OUT/gameplan.txt"
echo "($(grep -c '^trace of a failed game' "$OUT/gameplan.txt") traces of failed games in $OUT/failed)"
echo "== python driver loop: $PYGAME"
# shellcheck disable=SC2086
python3 bench/simulate_driver.py "$GAMES" "$WORKERS" "$STEPS" -- $PYGAME | tee "$OUT/python.txt"

rate() { sed -n 's/.* \([0-9.]*\) games\/s.*/\1/p' "$1" | head -1; }
G=$(rate "$OUT/gameplan.txt")
P=$(rate "$OUT/python.txt")
echo "== gameplan $G games/s, python $P games/s, ratio $(echo "$G $P" | awk '{printf "%.2f", $1/$2}')x"
echo "(overhead per action: the 'runner cpu' lines above, each runner's own CPU over its actions)"
