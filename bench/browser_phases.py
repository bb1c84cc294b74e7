#!/usr/bin/env python3
"""Where a gameplan browser cell's time goes, phase by phase (the detail
behind bench/browser.sh's one figure).

usage: bench/browser_phases.py GAMEPLAN_BINARY REPO_DIR [ROUNDS]
       (or PHASES=1 bash bench/browser.sh, which makes the repo)

Runs `gameplan plan run plan.toml` in REPO_DIR (a repo holding a one-cell
webdriver plan, as bench/browser.sh writes it) ROUNDS times with a
chromedriver that logs every WebDriver command with its time (a wrapper put
first on PATH: `chromedriver --log-path=...`; the log costs both sides
alike, so the phases are for comparing with each other, not with the
bench's totals). Prints the median of each phase:

  start      gameplan's exec to chromedriver's first log line (plan load,
             journal, chromedriver's own start)
  session    InitSession (Chromium's start: chromedriver's own cost)
  listener   the error listener installed for every document (DevTools)
  each command after that, by name and position
  teardown   the last answer to gameplan's exit (kill, reports, journal)
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

LINE = re.compile(r"^\[(\d+\.\d+)\]\[INFO\]: \[[0-9a-f]+\] (COMMAND|RESPONSE) (\w+)")


def one_round(binary, repo, work):
    log = os.path.join(work, "cd.log")
    state = os.path.join(work, "state")
    shutil.rmtree(state, ignore_errors=True)
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, PATH=f"{work}/bin:{os.environ['PATH']}")
    started = time.time()
    subprocess.run([binary, "plan", "run", "plan.toml", "--state-dir", state], cwd=repo,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    ended = time.time()
    phases = []
    first = None
    last = None
    pending = {}
    for line in open(log, encoding="utf-8", errors="replace"):
        if first is None and line.startswith("["):
            first = float(line[1:line.index("]")])
        m = LINE.match(line)
        if not m:
            continue
        at, kind, name = float(m.group(1)), m.group(2), m.group(3)
        if kind == "COMMAND":
            pending[name] = at
        elif name in pending:
            phases.append((name, at - pending.pop(name)))
            last = at
    named = [("start", first - started)]
    seen = {}
    for name, secs in phases:
        seen[name] = seen.get(name, 0) + 1
        n = seen[name]
        if name == "InitSession":
            label = "session"
        elif name == "ExecuteCDP":
            label = "listener" if n == 1 else f"screenshot #{n - 1}"
        else:
            label = f"{name} #{n}"
        named.append((label, secs))
    named.append(("teardown", ended - last))
    named.append(("total", ended - started))
    return named


def main():
    binary, repo = os.path.abspath(sys.argv[1]), sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    work = tempfile.mkdtemp(prefix="browser-phases-")
    try:
        os.makedirs(f"{work}/bin")
        real = shutil.which("chromedriver")
        with open(f"{work}/bin/chromedriver", "w") as f:
            f.write(f'#!/bin/sh\nexec {real} --log-path={work}/cd.log "$@"\n')
        os.chmod(f"{work}/bin/chromedriver", 0o755)
        runs = [one_round(binary, repo, work) for _ in range(rounds)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for i, (label, _) in enumerate(runs[0]):
        values = [r[i][1] for r in runs if len(r) > i and r[i][0] == label]
        print(f"{label:24s} median {statistics.median(values) * 1000:7.1f} ms")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min), {rounds} rounds")


if __name__ == "__main__":
    main()
