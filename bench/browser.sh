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
# The long cell (LONG_ROUNDS rounds, default 3; 0 skips it): the per-action
# cost of playing a real canvas game, the published pac-man-game vendored
# under tests/fixtures/web-games/pac-man/ (unchanged, from the npm
# registry), for 60 arrow-key presses, each observation with its visual
# signature (the screenshot decoded, averaged and quantized). gameplan: a
# one-cell plan whose scripted player presses the keys, the whole `plan
# run` timed with 61 actions and with 1; the difference over 60 is its time
# per action (start-up, plan load, session start and the reports of one
# action cancel out). The peer (bench/browser_long_peer.py) is a raw W3C
# client that does per action what a cell does (the key held for 50 ms of
# the page's virtual time, one read of the page after its clock moved
# 250 ms, one screenshot written to disk, taken through DevTools as
# gameplan takes it) and is timed the same way. Why fair: both run the same
# page with the same chromedriver, Chromium flags, inner size and a fresh
# profile; the peer installs gameplan's own listener.js and clock.js and
# reads the page with page.js, so the browser does the same work for both
# (the clock, waiting for requests and animations to settle, without which
# a screenshot shows a frame in flight and a trace does not replay); what
# is compared is the client around it, and gameplan's own work per action:
# the signature of the screen, the journal and trace. The settle wait is in
# both sides (it is the browser's work); PHASES=1 shows what it costs.
# Goal: <= 1.2x.
#
# The video (docs/web-games.md, "The video"): the long cell's gameplan side
# is also played with `[budget] video = false`, timed the same way (61
# actions and 1, in the same rounds, alternating with the video on), so
# the video's cost per action and its share of the cell's time are the
# difference of the two. Goal: the video adds <= 15% to the cell's time.
#
# usage: bench/browser.sh [ROUNDS]     (LONG_ROUNDS=N: rounds of the long cell; NO_BUILD=1: use the release binary as built;
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
# The long cell: time per action on a real canvas game, gameplan vs the raw client.
LONG_ROUNDS=${LONG_ROUNDS:-3}
if [ "$LONG_ROUNDS" -gt 0 ]; then
    cp -r tests/fixtures/web-games/pac-man/lib "$WORK/repo/pacman"
    long_plan() {  # $1 = actions, $2 = the [budget] (e.g. "video = false")
        python3 - "$1" "${2:-}" > "$WORK/repo/long.toml" <<'PY'
import sys
budget = sys.argv[2]
keys = ["key:ArrowUp", "key:ArrowRight", "key:ArrowDown", "key:ArrowLeft"]
actions = [keys[i % 4] for i in range(int(sys.argv[1]))]
print(f"""version = 1
name = "browser-long"

[game]
id = "pac-man"
driver = "webdriver"
serve = "pacman"
url = "index.html"
keys = ["ArrowUp", "ArrowRight", "ArrowDown", "ArrowLeft"]
viewport = [1280, 800]
stuck_after = 1000

[budget]
{budget}

[[personas]]
slug = "presser"
card = "Presses the arrow keys in turn."
player = {{ kind = "scripted", actions = {actions!r} }}
patience = 1000                   # the default patience (40) would end the cell early

[[steps]]
id = "play"
kind = "play"
matrix = {{ persona = "*" }}
""".replace("'", '"'))
PY
    }
    : > "$WORK/g1.txt"; : > "$WORK/g61.txt"; : > "$WORK/p1.txt"; : > "$WORK/p61.txt"
    : > "$WORK/o1.txt"; : > "$WORK/o61.txt"
    # The peer's page is served by Python's http.server on loopback (the
    # page loads once per round, which the 61 - 1 difference cancels out).
    PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    (cd "$WORK/repo/pacman" && exec python3 -m http.server "$PORT" --bind 127.0.0.1 >/dev/null 2>&1) &
    SERVER=$!
    trap 'kill $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
    sleep 1
    # The same reading gameplan asks for: its scope (the served origin),
    # the clock moved on 250 ms before each read and a pressed key held
    # 50 ms (src/play/webdriver/hermetic.rs), the listener and the virtual
    # clock with a seed and a start, installed before the page's scripts.
    SCOPE="{\"prefixes\":[\"http://127.0.0.1:$PORT/\"],\"patterns\":[]}"
    REQUEST="{\"mode\":\"observe\",\"maxText\":4000,\"maxElements\":60,\"scope\":$SCOPE,\"advanceMs\":250,\"requestsMs\":2000}"
    HOLD="{\"mode\":\"advance\",\"advanceMs\":50,\"requestsMs\":2000,\"scope\":$SCOPE}"
    { echo "window.__gameplanSeed = 1;"; echo "window.__gameplanClockStart = 1704186000000;";
      cat src/play/webdriver/listener.js src/play/webdriver/clock.js; } > "$WORK/listener.js"
    LURL="http://127.0.0.1:$PORT/index.html"
    i=0
    while [ "$i" -lt "$LONG_ROUNDS" ]; do
        i=$((i + 1))
        for n in 1 61; do
            long_plan "$n"
            rm -rf "$WORK/state"
            t0=$(now)
            (cd "$WORK/repo" && "$BIN" plan run long.toml --state-dir "$WORK/state" > "$WORK/last.txt" 2>&1) \
                || { cat "$WORK/last.txt"; exit 1; }
            t1=$(now)
            python3 -c "print(f'{$t1 - $t0:.3f}')" >> "$WORK/g$n.txt"
            # The same cell with the video off.
            long_plan "$n" "video = false"
            rm -rf "$WORK/state"
            t0=$(now)
            (cd "$WORK/repo" && "$BIN" plan run long.toml --state-dir "$WORK/state" > "$WORK/last.txt" 2>&1) \
                || { cat "$WORK/last.txt"; exit 1; }
            t1=$(now)
            python3 -c "print(f'{$t1 - $t0:.3f}')" >> "$WORK/o$n.txt"
            rm -rf "$WORK/shots"
            python3 bench/browser_long_peer.py "$LURL" "$n" "$WORK/shots" \
                "$WORK/listener.js" src/play/webdriver/page.js "$REQUEST" 1280 800 "$HOLD" >> "$WORK/p$n.txt"
        done
    done
    python3 - "$WORK" <<'PY'
import statistics, sys
work = sys.argv[1]
def xs(name):
    return [float(x) for x in open(f"{work}/{name}.txt") if x.strip()]
g = [(b - a) / 60 for a, b in zip(xs("g1"), xs("g61"))]
p = [(b - a) / 60 for a, b in zip(xs("p1"), xs("p61"))]
print(f"long cell (pac-man, a canvas game, 60 key presses), per action: gameplan {statistics.median(g) * 1000:.0f} ms, "
      f"raw W3C client {statistics.median(p) * 1000:.0f} ms: {statistics.median(g) / statistics.median(p):.2f}x"
      f"  (median of round ratios {statistics.median(a / b for a, b in zip(g, p)):.2f}x; goal <= 1.20x)")
print(f"  gameplan 61-action cell median {statistics.median(xs('g61')):.2f} s, peer {statistics.median(xs('p61')):.2f} s; "
      f"{len(g)} rounds")
o = [(b - a) / 60 for a, b in zip(xs("o1"), xs("o61"))]
on, off = statistics.median(g), statistics.median(o)
print(f"video: per action {on * 1000:.0f} ms with it, {off * 1000:.0f} ms without: {(on - off) * 1000:+.1f} ms, "
      f"{(on / off - 1) * 100:+.1f}% (median of round ratios {(statistics.median(a / b for a, b in zip(g, o)) - 1) * 100:+.1f}%)")
c_on, c_off = statistics.median(xs("g61")), statistics.median(xs("o61"))
print(f"  61-action cell {c_on:.2f} s with the video, {c_off:.2f} s without: {(c_on / c_off - 1) * 100:+.1f}% "
      f"(median of round ratios {(statistics.median(a / b for a, b in zip(xs('g61'), xs('o61'))) - 1) * 100:+.1f}%; goal <= +15%)")
PY
fi

# PHASES=1: also where a cell's time goes, command by command.
if [ -n "${PHASES:-}" ]; then python3 bench/browser_phases.py "$BIN" "$WORK/repo" 5; fi
