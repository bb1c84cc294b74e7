#!/usr/bin/env python3
"""The peer of bench/browser.sh: a minimal W3C WebDriver client in plain
Python (one persistent HTTP/1.1 connection, no Selenium), doing what a
browser cell does with chromedriver, as a competent user would script it.

usage: browser_peer.py PAGE_URL ROUNDS MODE
  MODE minimal:   start chromedriver, wait for its port, new session (the
                  same headless Chromium capabilities gameplan sends), open
                  the page, find the button, click it, close the session,
                  stop chromedriver. chromedriver's own cost of one click.
  MODE same-work: minimal, plus what a cell also does for its findings and
                  replay: the page opened twice (the cell's determinism
                  check), and after each load and the click one read of the
                  page (text, clickable elements) and one screenshot.
Prints one line per round: seconds.
"""
import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

READ_PAGE = """
var out = [];
document.querySelectorAll('a[href],button,[onclick],[role=button]').forEach(function (el) {
  var r = el.getBoundingClientRect();
  out.push({label: el.innerText, x: r.left, y: r.top, w: r.width, h: r.height});
});
return {title: document.title, text: document.body.innerText, elements: out};
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(port, proc):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                sys.exit("chromedriver exited")
            time.sleep(0.01)
    sys.exit("chromedriver did not listen")


class WebDriver:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port)
        self.session = None

    def call(self, method, path, body=None):
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=headers)
        reply = json.loads(self.conn.getresponse().read())
        value = reply.get("value")
        if isinstance(value, dict) and "error" in value:
            sys.exit(f"{method} {path}: {value['error']}: {value.get('message', '')[:200]}")
        return value

    def s(self, path):
        return f"/session/{self.session}{path}"


def capabilities(profile, width, height):
    """The headless Chromium gameplan asks chromedriver for: its flags, a
    fresh profile, the window."""
    return {
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": shutil.which("chromium") or "/usr/bin/chromium",
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--allow-file-access-from-files",
                f"--user-data-dir={profile}", f"--window-size={width},{height}",
            ],
        },
    }


def round_once(url, mode):
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
        caps = capabilities(profile, 800, 600)
        wd.session = wd.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]
        loads = 2 if mode == "same-work" else 1
        for _ in range(loads):
            wd.call("POST", wd.s("/url"), {"url": url})
            if mode == "same-work":
                wd.call("POST", wd.s("/execute/sync"), {"script": READ_PAGE, "args": []})
                base64.b64decode(wd.call("GET", wd.s("/screenshot")))
        button = wd.call("POST", wd.s("/element"), {"using": "css selector", "value": "button"})
        element = next(iter(button.values()))
        wd.call("POST", wd.s(f"/element/{element}/click"), {})
        if mode == "same-work":
            wd.call("POST", wd.s("/execute/sync"), {"script": READ_PAGE, "args": []})
            base64.b64decode(wd.call("GET", wd.s("/screenshot")))
        wd.call("DELETE", wd.s(""))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return time.monotonic() - started


def main():
    url, rounds, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    for _ in range(rounds):
        print(f"{round_once(url, mode):.3f}", flush=True)


if __name__ == "__main__":
    main()
