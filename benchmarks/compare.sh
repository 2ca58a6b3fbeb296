#!/usr/bin/env bash
# Before/after in paired windows: the working tree's KestrelSample on io_uring (server "iouring") against another
# build's (server "iouring-base"), both alive and warm side by side, measured by benchmarks/run-kestrel.sh in short
# windows that alternate between them (A B, B A, A B, ...), so every window of one has a neighbour of the other under
# the same machine conditions. benchmarks/kestrel/compare.py turns each round's pair into one ratio of requests per
# server CPU-second and reports their median, IQR, 95% interval and the smallest change the run could detect.
#
#   benchmarks/compare.sh BASE            BASE: a git revision (exported with git archive and built once in
#                                         /tmp/iouring-compare/SHA) or the path of a built KestrelSample binary
#   benchmarks/compare.sh HEAD            the self-check: two processes of the same code read 1.00 within the spread
#   SLOWDOWN=10 benchmarks/compare.sh HEAD    the other self-check: the working tree's server loses 10% of its
#                                         requests per CPU-second on purpose (KESTREL_SAMPLE_SLOWDOWN): detected?
#
# Environment: SCENARIOS (default: the set below, ~29 min on this 2-CPU machine; the database scenarios warm up 40-60 s each), ROUNDS (pairs of windows per scenario, default 10),
# DURATION (s per window, default 2), WARMUP and WARMUP_MAX (s, default 3 and 21: each server warms up until it stops
# compiling), PROCESSES (fresh pairs of server processes per scenario, default 1: with 4 or more the interval is
# taken across them, which a verdict of a few percent needs), KEEP_SERVERS (default 1: scenarios that start the servers alike share the processes, except the database ones), SLOWDOWN (percent), OUT (default a new temp dir), and everything run-kestrel.sh reads. A scenario the
# base cannot serve (e.g. static files or the database before they existed) fails its probe and reads "not measured".
# Output: OUT/compare.md (and the harness's own results.md beside it).
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=${1:?usage: benchmarks/compare.sh BASE (a git revision or a KestrelSample binary)}
export SCENARIOS=${SCENARIOS:-"plaintext-256 json-256 pipelined-256 download-1m static-64k static-1m upload-1m h2c-64x16 tls-64 h2-64x16 db-64 queries-64 fortunes-64 updates-64"}
export ROUNDS=${ROUNDS:-10} DURATION=${DURATION:-2} WARMUP=${WARMUP:-3} WARMUP_MAX=${WARMUP_MAX:-21}
export SERVERS="iouring iouring-base" KEEP_SERVERS=${KEEP_SERVERS:-1}
export OUT=${OUT:-$(mktemp -d /tmp/compare.XXXXXX)}

if [[ -x $BASE && -f $BASE ]]; then
    BASE_SAMPLE=$(cd "$(dirname "$BASE")" && pwd)/$(basename "$BASE")
    label=$BASE_SAMPLE
else
    sha=$(git -C "$ROOT" rev-parse --verify "$BASE^{commit}") || { echo "compare.sh: '$BASE' is neither a revision nor a binary"; exit 2; }
    label="$BASE ($sha)"
    BASE_SAMPLE=$("$ROOT/benchmarks/build-revision.sh" "$sha")/samples/KestrelSample/bin/Release/net10.0/KestrelSample
fi
export BASE_SAMPLE
if [[ -n ${SLOWDOWN:-} ]]; then
    export IOURING_ENV="KESTREL_SAMPLE_SLOWDOWN=$SLOWDOWN"
fi
mkdir -p "$OUT"
echo "base: $label${SLOWDOWN:+; the server of the working tree slowed down by $SLOWDOWN% on purpose}" >"$OUT/base.txt"

"$ROOT/benchmarks/run-kestrel.sh"
{
    cat "$OUT/base.txt"; echo
    python3 "$ROOT/benchmarks/kestrel/compare.py" "$OUT" iouring iouring-base "$SCENARIOS"
} >"$OUT/compare.md"
cat "$OUT/compare.md"
echo "comparison: $OUT/compare.md"
