#!/usr/bin/env bash
# Benchmark: how long `gameplan plan check` and `gameplan plan explain --json`
# take on a plan of 10,000 steps (the most a plan may expand to), against the
# target of 300 ms each. Not run in CI.
#
# Two shapes of plan, each exactly 10,000 steps:
#   layers  10,000 `[[steps]]` command steps in 100 layers of 100, each step
#           needing two steps of the layer before (19,800 edges): about
#           850 KB of TOML (under the 1 MiB file limit); parsing and
#           validation do most of the work.
#   matrix  one 100 × 100 matrix step: a small file, expansion does the work.
#
# Usage: bench/plan_check.sh [RUNS]      (default 10 runs per command)
# Uses hyperfine when installed; otherwise times a loop with `date +%s%N`.
# Exits 1 when a median misses the target.

set -euo pipefail

RUNS="${1:-10}"
TARGET_MS=300
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

cd "$ROOT"
echo "building release binary…" >&2
cargo build --release --quiet
BIN="$ROOT/target/release/gameplan"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/gameplan-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/.git" # the repo root for the plans' paths

# 100 layers × 100 command steps; step (l, i) needs (l-1, i) and (l-1, i+1 mod 100).
awk 'BEGIN {
  print "version = 1"
  print "name = \"bench-layers\""
  for (l = 0; l < 100; l++) {
    for (i = 0; i < 100; i++) {
      printf "[[steps]]\nid = \"s%d-%d\"\nkind = \"command\"\nrun = \"true\"\n", l, i
      if (l > 0) printf "needs = [\"s%d-%d\", \"s%d-%d\"]\n", l - 1, i, l - 1, (i + 1) % 100
    }
  }
}' >"$WORK/layers.toml"

awk 'BEGIN {
  printf "version = 1\nname = \"bench-matrix\"\n\n[[steps]]\nid = \"x\"\nkind = \"command\"\nrun = \"true\"\nmatrix = { a = ["
  for (i = 0; i < 100; i++) printf "%s%d", (i ? ", " : ""), i
  printf "], b = ["
  for (i = 0; i < 100; i++) printf "%s%d", (i ? ", " : ""), i
  print "] }"
}' >"$WORK/matrix.toml"

cd "$WORK"
for plan in layers.toml matrix.toml; do
  # The plan must be valid and exactly 10,000 steps, or the figures mean nothing.
  if ! out="$("$BIN" plan check "$plan" 2>&1)"; then
    echo "$out" >&2
    echo "FAIL: $plan does not check" >&2
    exit 1
  fi
  case "$out" in
  *", 10000 steps)"*) ;;
  *)
    echo "FAIL: $plan is not 10,000 steps: $out" >&2
    exit 1
    ;;
  esac
  echo "$plan: $(wc -c <"$plan") bytes, 10000 steps" >&2
done

# Prints "BEST MEDIAN" in whole milliseconds for one command line.
time_ms() {
  if command -v hyperfine >/dev/null 2>&1; then
    local json="$WORK/hyperfine.json"
    hyperfine --style none --warmup 2 --runs "$RUNS" --export-json "$json" \
      --command-name x "$*" >/dev/null
    python3 - "$json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(round(r["min"] * 1000), round(r["median"] * 1000))
EOF
  else
    local times=() start end
    "$@" >/dev/null 2>&1 || true # warm the page cache
    for ((n = 0; n < RUNS; n++)); do
      start=$(date +%s%N)
      "$@" >/dev/null 2>&1
      end=$(date +%s%N)
      times+=($(((end - start) / 1000000)))
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '
      { t[NR] = $1 }
      END {
        median = (NR % 2) ? t[(NR + 1) / 2] : int((t[NR / 2] + t[NR / 2 + 1]) / 2)
        print t[1], median
      }'
  fi
}

tool="a date +%s%N loop"
command -v hyperfine >/dev/null 2>&1 && tool="hyperfine"
echo "timing $RUNS runs each with $tool; target < ${TARGET_MS} ms" >&2
printf '%-8s %-20s %8s %8s  %s\n' plan command best median verdict
worst=0
summary=()
for plan in layers matrix; do
  for cmd in "plan check" "plan explain --json"; do
    # shellcheck disable=SC2086 # $cmd is two or three words on purpose
    read -r best median < <(time_ms "$BIN" $cmd "$plan.toml")
    verdict=ok
    if ((median >= TARGET_MS)); then verdict=SLOW; fi
    ((median > worst)) && worst=$median
    printf '%-8s %-20s %6d ms %6d ms  %s\n' "$plan" "$cmd" "$best" "$median" "$verdict"
    summary+=("$plan ${cmd#plan } ${median}ms")
  done
done

if ((worst < TARGET_MS)); then
  echo "PASS: 10,000-step plans, median $(IFS=,; echo "${summary[*]}" | sed 's/,/, /g') (target < ${TARGET_MS} ms)"
else
  echo "FAIL: 10,000-step plans, median $(IFS=,; echo "${summary[*]}" | sed 's/,/, /g') (target < ${TARGET_MS} ms)"
  exit 1
fi
