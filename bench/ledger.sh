#!/bin/sh
# ledger: the ledger's register + finish round trip over loopback HTTP,
# printed with the same round trip as direct SQLite transactions, its floor.
#
# Each round trip buys one 4-cell job and settles it: register (a fresh
# Idempotency-Key, confirming the quoted price) then finish of that job.
# HTTP: the `http` backend (reqwest) against a `gameplan serve` release
# process on 127.0.0.1:0, started by the bench program (it reads the
# `listening on http://ADDR` line) and stopped after with SIGTERM. Direct:
# the same two `Ledger` methods called in-process, one SQLite transaction
# each. Prints median, p90 and p99 of both, the ratio, and the server's own
# share (register + finish as its request log times them).
#
# Fair comparison: both ledgers are fresh files side by side in one
# directory under $TMPDIR (default /tmp; same filesystem), opened by the
# same `Ledger::open` (WAL, synchronous=FULL: every commit is fsynced);
# rounds alternate between the two sides, each side first every other
# round, so both meet the same disk and load; warm-up rounds are dropped on
# both sides; the client is one HttpBackend, whose connection pool keeps
# one keep-alive connection, as a real runner does; the demo account is
# topped up first (each finish refunds the job anyway, since no run
# plays), so no 402 changes the path. The quote is taken once per side
# before the loop: estimate is not part of the round trip, a register does
# not consume its quote, and the loop ends long before its 15 minutes
# (checked).
#
# Target: HTTP median <= 5 ms (exit 1 when over). Builds release itself
# (cargo bench; minutes cold).
#
# usage: bench/ledger.sh [ROUND_TRIPS (500)] [WARMUP (50)]
#   TMPDIR=/dev/shm bench/ledger.sh   # both ledgers on tmpfs: no fsync cost
set -eu
cd "$(dirname "$0")/.."
exec cargo bench --quiet --bench ledger_roundtrip -- "$@"
