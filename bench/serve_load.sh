#!/bin/sh
# serve_load: `gameplan serve` under concurrent load on loopback, and the
# ledger checked afterwards.
#
# REQUESTS requests (default 2,000) from CONCURRENCY clients at once
# (default 32): each client is its own account with its own token (as many
# studios would call one server; an account may hold 20 unsettled jobs),
# buying and settling 2-cell jobs in a loop: estimate, register (a fresh
# Idempotency-Key), get the job, finish. Each client is the library's
# `http` backend (reqwest, one keep-alive connection pool per client), as a
# real runner calls; the server is a release `gameplan serve` child on
# 127.0.0.1:0 over a fresh ledger file (WAL, synchronous=FULL: every write
# is fsynced) under $TMPDIR. Prints p50/p99/max per request and the
# throughput, then reads the ledger back (`Ledger::show`, what `gameplan
# ledger show` prints) and checks that every account adds up (balance =
# topups - charged + refunded), every job is settled exactly once, every
# charge was refunded (no run plays, so each finish refunds its job), and
# every balance is back to its topups. Exits 1 when anything does not add
# up or a request failed. Bounded: REQUESTS requests and at most 5 minutes.
#
# There is no peer here: the figure is the server's own latency under
# contention, and the check is the point (every charge once, under load).
#
# usage: bench/serve_load.sh [REQUESTS] [CONCURRENCY]
set -eu
cd "$(dirname "$0")/.."
exec cargo bench --quiet --bench serve_load -- "$@"
