#!/bin/sh
# browser: a gameplan browser cell vs chromedriver's own cost, side by side.
#
# One cell = start chromedriver on a loopback port, open a headless Chromium
# session, load a one-button page, click the button, close everything. The
# gameplan side is the whole `gameplan plan run` of a one-cell plan (a
# scripted player: `click:Go`), release build, fresh state dir each round:
# process start, plan load, journal, the cell's report files included. The
# peer (bench/browser_peer.py) is a minimal raw W3C WebDriver client on one
# persistent HTTP connection, as a competent user would script it, with the
# same chromedriver, the same Chromium flags and a fresh profile per round.
#
# Why fair: both pay chromedriver's and Chromium's start-up the same way
# (same binaries, flags, window, fresh profile; nothing warm is shared
# between rounds, the page is a local file). The peer is measured twice:
# `minimal` (session + one click: chromedriver's own cost, the number the
# floor is about) and `same-work` (also what a cell does for its findings:
# the page loaded twice for the determinism check, a read of the page and
# a screenshot per observation), so the gap splits into what gameplan
# does more and what it does slower. Rounds alternate between the two
# runners so a busy machine hurts both alike; medians are compared, and
# so is the median of each round's own ratio (the three runs of a round
# are seconds apart, so a load that drifts over the minutes of a bench
# moves both sides of a round's ratio together), and so are the fastest
# rounds (on a shared machine, the runs least disturbed by other work).
#
# Floor: gameplan <= 1.20x the minimal peer; aim <= 1.10x.
#
# usage: bench/browser.sh [ROUNDS]     (NO_BUILD=1: use the release binary as built;
#                                       PHASES=1: then time each phase of a cell)
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-7}
command -v chromedriver >/dev/null || { echo "needs chromedriver (apt-get install chromium-driver)" >&2; exit 3; }
[ -n "${NO_BUILD:-}" ] || cargo build --release --quiet
BIN=$PWD/target/release/gameplan
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo/.git"
cat > "$WORK/repo/page.html" <<'HTML'
<!doctype html><title>Bench</title><h1 id="h">Ready</h1>
<button onclick="document.getElementById('h').textContent = 'Clicked'">Go</button>
HTML
cat > "$WORK/repo/plan.toml" <<'TOML'
version = 1
name = "browser-bench"

[game]
id = "bench"
driver = "webdriver"
url = "page.html"

[[personas]]
slug = "clicker"
card = "Clicks once."
player = { kind = "scripted", actions = ["click:Go"] }

[[steps]]
id = "play"
kind = "play"
matrix = { persona = "*" }
TOML
URL="file://$WORK/repo/page.html"

now() { python3 -c 'import time; print(time.monotonic())'; }
: > "$WORK/gameplan.txt"; : > "$WORK/minimal.txt"; : > "$WORK/same.txt"
i=0
while [ "$i" -lt "$ROUNDS" ]; do
    i=$((i + 1))
    rm -rf "$WORK/state"
    t0=$(now)
    (cd "$WORK/repo" && "$BIN" plan run plan.toml --state-dir "$WORK/state" > "$WORK/last.txt" 2>&1) \
        || { cat "$WORK/last.txt"; exit 1; }
    t1=$(now)
    python3 -c "print(f'{$t1 - $t0:.3f}')" >> "$WORK/gameplan.txt"
    python3 bench/browser_peer.py "$URL" 1 minimal >> "$WORK/minimal.txt"
    python3 bench/browser_peer.py "$URL" 1 same-work >> "$WORK/same.txt"
done
python3 - "$WORK" <<'PY'
import statistics, sys
work = sys.argv[1]
def med(name):
    xs = [float(x) for x in open(f"{work}/{name}.txt") if x.strip()]
    return statistics.median(xs), min(xs), max(xs)
g, m, s = med("gameplan"), med("minimal"), med("same")
for label, (mid, lo, hi) in [("gameplan plan run (one browser cell)", g),
                             ("peer minimal (session + one click)", m),
                             ("peer same-work (+ reload, reads, screenshots)", s)]:
    print(f"{label:48s} median {mid:6.3f} s  (min {lo:.3f}, max {hi:.3f})")
def rounds(name):
    return [float(x) for x in open(f"{work}/{name}.txt") if x.strip()]
paired_m = statistics.median(a / b for a, b in zip(rounds("gameplan"), rounds("minimal")))
paired_s = statistics.median(a / b for a, b in zip(rounds("gameplan"), rounds("same")))
print(f"gameplan / peer minimal   = {g[0] / m[0]:.2f}x  (median of round ratios {paired_m:.2f}x)"
      "   (floor <= 1.20x, aim <= 1.10x)")
print(f"gameplan / peer same-work = {g[0] / s[0]:.2f}x  (median of round ratios {paired_s:.2f}x)")
print(f"gameplan / peer minimal, fastest rounds = {g[1] / m[1]:.2f}x  (each side's least disturbed run)")
import os
print(f"load average {os.getloadavg()[0]:.2f} (1 min), {len(rounds('gameplan'))} rounds")
PY
# PHASES=1: also where a cell's time goes, command by command.
if [ -n "${PHASES:-}" ]; then python3 bench/browser_phases.py "$BIN" "$WORK/repo" 5; fi
