#!/usr/bin/env bash
# The llm player on the CI model: seconds and tokens per action, re-asks
# and fallbacks, and the ratio of gameplan's time to a raw OpenAI-client
# loop's for the same requests (issue goal: at most 1.1x).
#
#   bash bench/llm.sh [ACTIONS]      (default 20; NO_BUILD=1 skips the release build)
#
# What runs, in one go, against one server (tests/llm/model.sh serve:
# SmolLM2-135M-Instruct from PyPI behind llama-cpp-python's server):
#  1. gameplan (release build) plays builtin:maze with `--player llm`
#     through a recording proxy: every request body it sends is kept.
#  2. gameplan plays the same cell again, straight to the server: its
#     wall time is the figure (the proxy's cost is on neither side).
#  3. the peer: Python's official `openai` client (the one a competent
#     user would write a loop with) sends the recorded request bodies, in
#     order, one after the other, to the same server, and takes each
#     answer: no game, no parsing, no files.
# Why it is fair: the same server and model, warm for both (the proxy run
# goes first and warms it), the same prompts, token caps and
# response_format, one request at a time on both sides (the server serves
# one at a time anyway); gameplan's time includes everything it does
# besides the model (the game process, parsing, the trace, the report),
# which is what the ratio measures. The model's sampling may make run 2
# take other actions than run 1, so both runs' tokens are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
actions=${1:-20}
venv=${LLM_VENV:-target/llm-venv}
[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q
bin=target/release/gameplan
work=$(mktemp -d /tmp/gp-bench-llm.XXXXXX)
cleanup() {
  [ -z "${proxy_pid:-}" ] || kill "$proxy_pid" 2>/dev/null || true
  bash tests/llm/model.sh stop "$work/server" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
bash tests/llm/model.sh serve "$work/server" >&2
url=$(cat "$work/server/url")

# The recording proxy: forwards each POST to the server, keeps the body
# of each one answered 200.
"$venv/bin/python" - "$url" "$work/requests.jsonl" "$work/proxy_url" <<'PY' &
import http.server, sys, urllib.request
upstream, out, url_file = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
class Proxy(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        path = self.path[len("/v1"):] if self.path.startswith("/v1") else self.path
        req = urllib.request.Request(upstream + path, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        # Only what the server answered: a request in a dialect it refused
        # (gameplan's first json_schema, about 5 ms) is no model call.
        if status == 200:
            with open(out, "ab") as f:
                f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
open(url_file, "w").write(f"http://127.0.0.1:{server.server_port}/v1")
server.serve_forever()
PY
proxy_pid=$!
for _ in $(seq 1 50); do [ -s "$work/proxy_url" ] && break; sleep 0.1; done

play() {
  "$bin" play --player llm --model smollm2-135m --base-url "$1" \
    --card "Curious; tries every door once." --seed 1 --patience "$actions" \
    --max-actions "$actions" --out "$2" -- builtin:maze >/dev/null 2>&1 || true
}
play "$(cat "$work/proxy_url")" "$work/recorded"
kill "$proxy_pid"; proxy_pid=
t0=$(date +%s.%N)
play "$url" "$work/direct"
t1=$(date +%s.%N)

"$venv/bin/python" - "$url" "$work/requests.jsonl" "$work/recorded/report.json" "$work/direct/report.json" "$t0" "$t1" <<'PY'
import json, sys, time
from openai import OpenAI
url, requests, recorded, direct = sys.argv[1:5]
wall = float(sys.argv[6]) - float(sys.argv[5])
client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
bodies = [json.loads(l) for l in open(requests)]
started = time.monotonic()
peer_in = peer_out = 0
for body in bodies:
    extra = {k: v for k, v in body.items() if k not in ("model", "messages")}
    reply = client.chat.completions.create(model=body["model"], messages=body["messages"], extra_body=extra)
    peer_in += reply.usage.prompt_tokens
    peer_out += reply.usage.completion_tokens
peer = time.monotonic() - started
for name, path in (("recorded", recorded), ("direct", direct)):
    r = json.load(open(path))
    m = r.get("model") or {}
    n = max(r["actions_taken"], 1)
    print(f"gameplan ({name} run): {r['actions_taken']} actions, {m.get('calls')} calls, "
          f"{m.get('input_tokens')} in / {m.get('output_tokens')} out tokens "
          f"({(m.get('input_tokens', 0) + m.get('output_tokens', 0)) / n:.0f} tokens/action), "
          f"re-asks {m.get('reasks')}, fallbacks {m.get('fallbacks')}, structured {m.get('structured')}, "
          f"quit {r['quit_reason']}")
d = json.load(open(direct))
n = max(d["actions_taken"], 1)
rn = max(json.load(open(recorded))["actions_taken"], 1)
print(f"gameplan: {wall:.1f} s wall for {d['actions_taken']} actions = {wall / n:.2f} s/action")
print(f"peer (openai {__import__('openai').__version__}, the recorded {len(bodies)} requests): "
      f"{peer:.1f} s = {peer / rn:.2f} s/action, {peer_in} in / {peer_out} out tokens")
print(f"ratio gameplan/peer per action: {(wall / n) / (peer / rn):.2f}x (goal <= 1.1x)")
PY
