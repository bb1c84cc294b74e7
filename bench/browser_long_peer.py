#!/usr/bin/env python3
"""The peer of bench/browser.sh's long cell: a raw W3C WebDriver client in
plain Python (one persistent HTTP/1.1 connection, no Selenium) playing a
real page for N key presses, doing per action the same work a gameplan
browser cell does: the action, one read of the page, one screenshot
written to disk.

usage: browser_long_peer.py PAGE_URL ACTIONS SHOTS_DIR LISTENER_JS PAGE_JS REQUEST_JSON W H [HOLD_JSON]
  LISTENER_JS, PAGE_JS: gameplan's own scripts (src/play/webdriver/): what
                is installed in every document (the listener and the
                virtual clock, with their seed and start), and the read,
                run as gameplan runs it (listener + page, one async
                script), so both sides ask the browser for exactly the same
                reading: what differs is the client around it, not the
                page's work;
  REQUEST_JSON: the read script's argument for an observation (it moves
                the page's clock on, then reads);
  W H:          the page's inner size (gameplan's game.viewport): the
                window is grown by its frame, as gameplan grows it;
  HOLD_JSON:    when given, a key is pressed as gameplan presses it on a
                page with the virtual clock: key down, the read script in
                this mode (the clock moved on by the hold), key up.

One round: start chromedriver, open a session (the same headless Chromium
capabilities gameplan sends), install the listener for every document (as
gameplan does, through DevTools), open the page, read it and photograph it,
then ACTIONS times: press one arrow key (Up, Right, Down, Left in turn),
read, photograph (DevTools' capture, as gameplan takes it; decoded and
written to SHOTS_DIR/step-NNNN.png); close.
Prints the round's seconds. browser.sh runs it with 1 and with 61 actions
and divides the difference by 60, as it does for gameplan, so start-up
cancels out of the per-action figure on both sides.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# The one raw client both peers use (a persistent connection, W3C errors
# stop the bench).
from browser_peer import WebDriver, capabilities, free_port, wait_listening

KEYS = ["\ue013", "\ue014", "\ue015", "\ue012"]  # ArrowUp, Right, Down, Left


def round_once(url, actions, shots, script, request, width, height, listener, hold=None):
    port = free_port()
    profile = tempfile.mkdtemp(prefix="peer-chromium-")
    started = time.monotonic()
    proc = subprocess.Popen(
        ["chromedriver", f"--port={port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, proc)
        wd = WebDriver(port)
        caps = capabilities(profile, width, height)
        wd.session = wd.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]
        wd.call("POST", wd.s("/goog/cdp/execute"),
                {"cmd": "Page.addScriptToEvaluateOnNewDocument", "params": {"source": listener}})
        frame = wd.call("POST", wd.s("/execute/sync"), {
            "script": "return [outerWidth - innerWidth, outerHeight - innerHeight];", "args": []})
        wd.call("POST", wd.s("/window/rect"), {"width": width + frame[0], "height": height + frame[1]})
        wd.call("POST", wd.s("/url"), {"url": url})

        def read_and_shoot(name):
            wd.call("POST", wd.s("/execute/async"), {"script": script, "args": [request]})
            # The capture gameplan uses (DevTools through chromedriver), so
            # both sides ask the browser for the same picture; W3C's own
            # /screenshot measures the page with a script first and is
            # slower (~+200 ms an action on 2048).
            shot = wd.call("POST", wd.s("/goog/cdp/execute"), {
                "cmd": "Page.captureScreenshot",
                "params": {"format": "png", "optimizeForSpeed": True},
            })
            png = base64.b64decode(shot["data"])
            with open(os.path.join(shots, name), "wb") as f:
                f.write(png)

        read_and_shoot("reset.png")
        for i in range(actions):
            key = KEYS[i % len(KEYS)]
            if hold is None:
                wd.call("POST", wd.s("/actions"), {"actions": [{
                    "type": "key", "id": "keyboard",
                    "actions": [{"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}],
                }]})
            else:
                for kind in ("keyDown", "keyUp"):
                    wd.call("POST", wd.s("/actions"), {"actions": [{
                        "type": "key", "id": "keyboard", "actions": [{"type": kind, "value": key}],
                    }]})
                    if kind == "keyDown":
                        wd.call("POST", wd.s("/execute/async"), {"script": script, "args": [hold]})
            read_and_shoot(f"step-{i + 1:04}.png")
        wd.call("DELETE", wd.s(""))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return time.monotonic() - started


def main():
    url, actions, shots = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    listener = open(sys.argv[4]).read()
    script = listener + "\n" + open(sys.argv[5]).read()
    request = json.loads(sys.argv[6])
    width, height = int(sys.argv[7]), int(sys.argv[8])
    hold = json.loads(sys.argv[9]) if len(sys.argv) > 9 else None
    os.makedirs(shots, exist_ok=True)
    took = round_once(url, actions, shots, script, request, width, height, listener, hold)
    print(f"{took:.3f}", flush=True)


if __name__ == "__main__":
    main()
