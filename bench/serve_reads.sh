#!/bin/sh
# serve_reads: does one tenant's read wait behind another's? `whoami`
# latency on `gameplan serve`, alone and while another tenant GETs its
# 10,000-run job in a loop.
#
# Two accounts on one fresh ledger file under $TMPDIR (WAL,
# synchronous=FULL): `heavy` buys one job of 10,000 cells (the default
# --max-cells), `light` only asks `whoami`. The server is a release
# `gameplan serve` child on 127.0.0.1:0 (or $GAMEPLAN_BIN, another build,
# to compare). After 20 warm-up calls, `light` sends SAMPLES whoamis (200)
# one after another on one keep-alive connection: the median alone. Then
# HEAVY clients (8) of `heavy` GET the job in a loop (each answer holds its
# 10,000 runs, checked) and, once each has had one answer, `light` sends
# SAMPLES whoamis again: the median while loaded. Prints both medians,
# their ratio and the heavy GET's median, then each phase's median, p90,
# max and sum: a lock that starves a few calls for seconds leaves the
# median low and shows in the max and the sum.
#
# Why the comparison is fair: the same server process, ledger file, client
# code, connection reuse and number of samples measure both medians; the
# only difference is the heavy tenant's concurrent reads, so the ratio is
# how much one tenant's reads hold up another's. Run with
# GAMEPLAN_BIN=<another build> to compare builds under the same load (build
# both the same way: release against release). What remains of the ratio
# on a small machine is CPU, not a lock: the heavy GETs and the whoamis
# share the cores (2 here), and serializing 10,000 runs is real work.
#
# usage: bench/serve_reads.sh [SAMPLES] [HEAVY]
set -eu
cd "$(dirname "$0")/.."
exec cargo bench --quiet --bench serve_reads -- "$@"
