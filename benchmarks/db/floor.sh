#!/usr/bin/env bash
# What the transport costs in a database scenario: the application's floor (benchmarks/DbFloor: the Kestrel sample's
# endpoint code in 64 loops, no HTTP) measured in windows that alternate with the sample on io_uring and on Sockets, all
# three alive and warm on CPU 0, PostgreSQL and wrk on CPU 1. Per window: operations per CPU-second of the process.
# The summary gives each one's cost per request and peak RSS, what HTTP and the transport add to the floor on each
# server, and the highest io_uring/Sockets ratio any transport could reach (the floor's cost alone against Sockets').
#
#   benchmarks/db/floor.sh                    fortunes, 8 rounds of 8 s windows after a 45 s warm-up each
#   SCENARIO=db ROUNDS=12 benchmarks/db/floor.sh
#
# Environment: SCENARIO (db, queries, fortunes, updates), ROUNDS, WINDOW and WARMUP (s), SPIN_LIMIT (the thread pool's
# DOTNET_ThreadPool_UnfairSemaphoreSpinLimit for all three; default 0: see docs/deployment.md, "The thread pool's
# spinning on a one-CPU server"), PERF (1: perf record -g of each process in the last round's windows,
# OUT/perf-NAME.data, with the JIT's perf maps), IOURING_ARGS (more options for the io_uring server, e.g. --inline),
# OUT (default a new temp dir). Installs wrk if missing; the database comes from benchmarks/db/postgres.sh.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SCENARIO=${SCENARIO:-fortunes} ROUNDS=${ROUNDS:-8} WINDOW=${WINDOW:-8} WARMUP=${WARMUP:-45}
OUT=${OUT:-$(mktemp -d /tmp/floor.XXXXXX)}
case $SCENARIO in
    db|fortunes) PATH_Q=/$SCENARIO ;;
    queries|updates) PATH_Q="/$SCENARIO?queries=20" ;;
    *) echo "SCENARIO: db, queries, fortunes or updates"; exit 2 ;;
esac
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
export DOTNET_ThreadPool_UnfairSemaphoreSpinLimit=${SPIN_LIMIT:-0}
if [[ ${PERF:-0} == 1 ]]; then
    export DOTNET_PerfMapEnabled=1 DOTNET_EnableWriteXorExecute=0 # the JIT's code in maps perf can read
fi
mkdir -p "$OUT"
for project in samples/KestrelSample benchmarks/DbFloor; do
    dotnet build -c Release "$ROOT/$project" >>"$OUT/build.log" 2>&1 || { echo "build failed: $OUT/build.log"; exit 1; }
done
SAMPLE=$ROOT/samples/KestrelSample/bin/Release/net10.0/KestrelSample
FLOOR=$ROOT/benchmarks/DbFloor/bin/Release/net10.0/DbFloor
DB_URL=$(DB_CPU=1 "$ROOT/benchmarks/db/postgres.sh" start)

declare -A PID PORT=([iouring]=5651 [sockets]=5652)
cleanup() { kill "${PID[@]}" 2>/dev/null || true; }
trap cleanup EXIT
read -r -a iouring_args <<<"${IOURING_ARGS:-}"
for name in iouring sockets; do
    args=(--transport "$name" --urls "http://127.0.0.1:${PORT[$name]}" --db "$DB_URL")
    [[ $name == iouring ]] && args+=("${iouring_args[@]}")
    taskset -c 0 "$SAMPLE" "${args[@]}" >"$OUT/server-$name.log" 2>&1 &
    PID[$name]=$!
done
coproc FLOOR_PROC { exec taskset -c 0 "$FLOOR" "$DB_URL" "$SCENARIO" 64 2>"$OUT/floor.log"; }
PID[floor]=$FLOOR_PROC_PID
for name in iouring sockets; do
    for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:${PORT[$name]}$PATH_Q" && break; sleep 0.2; done
done

cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# Sets RESULT to "operations cpu_ms"; runs in this shell, as a coprocess's pipes do not reach subshells.
window() { # name seconds
    local name=$1 seconds=$2
    if [[ $name == floor ]]; then
        echo "$seconds" >&"${FLOOR_PROC[1]}"
        read -r RESULT <&"${FLOOR_PROC[0]}"
        return
    fi
    local before after requests
    before=$(cpu_ticks "${PID[$name]}")
    requests=$(taskset -c 1 wrk -t1 -c64 -d"${seconds}s" -s "$ROOT/benchmarks/kestrel/request.lua" \
        "http://127.0.0.1:${PORT[$name]}" -- "$PATH_Q" 1 | awk '/requests in/ {print $1}')
    after=$(cpu_ticks "${PID[$name]}")
    RESULT="$requests $(( (after - before) * 1000 / $(getconf CLK_TCK) ))"
}

names=(floor iouring sockets)
for name in "${names[@]}"; do window "$name" "$WARMUP"; done
: >"$OUT/windows.txt"
for round in $(seq "$ROUNDS"); do
    shift_by=$(( round % 3 ))
    for k in 0 1 2; do
        name=${names[$(( (k + shift_by) % 3 ))]}
        if [[ ${PERF:-0} == 1 && $round == "$ROUNDS" ]]; then
            perf record -F 2000 -g -p "${PID[$name]}" -o "$OUT/perf-$name.data" -- sleep "$WINDOW" >/dev/null 2>&1 &
            PERF_PID=$!
        fi
        window "$name" "$WINDOW"
        [[ -n ${PERF_PID:-} ]] && wait "$PERF_PID" && PERF_PID=
        echo "$round $name $RESULT" | tee -a "$OUT/windows.txt"
    done
done
for name in "${names[@]}"; do
    echo "$name $(awk '/^VmHWM/ {print $2}' "/proc/${PID[$name]}/status")" # peak RSS, KiB
done >"$OUT/rss.txt"
python3 - "$OUT/windows.txt" "$SCENARIO" "$OUT/rss.txt" <<'PY' | tee "$OUT/summary.md"
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
rate = {}  # (round, name) -> operations per CPU-second
for r, name, ops, ms in rows:
    rate[(int(r), name)] = int(ops) / (int(ms) / 1000)
rounds = sorted({r for r, _ in rate})
def q(values):
    values = sorted(values); n = len(values)
    return statistics.median(values), values[n // 4], values[(3 * n) // 4]
print(f"## {sys.argv[2]}: {len(rounds)} rounds, per window operations per CPU-second of the process (CPU 0)\n")
peak = dict((name, int(kib)) for name, kib in (line.split() for line in open(sys.argv[3])))
print("| | per CPU-second, median (IQR) | µs of CPU per request | peak RSS MiB |")
print("|---|---|---|---|")
for name in ("floor", "iouring", "sockets"):
    m, lo, hi = q([rate[(r, name)] for r in rounds])
    print(f"| {name} | {m:,.0f} ({lo:,.0f}-{hi:,.0f}) | {1e6 / m:.1f} | {peak[name] / 1024:.0f} |")
print()
ratio = lambda a, b: q([rate[(r, a)] / rate[(r, b)] for r in rounds])
added = lambda name: q([1e6 / rate[(r, name)] - 1e6 / rate[(r, "floor")] for r in rounds])
for label, (m, lo, hi) in (("io_uring / Sockets", ratio("iouring", "sockets")),
                           ("ceiling: floor / Sockets (a transport costing nothing)", ratio("floor", "sockets")),
                           ("floor / io_uring", ratio("floor", "iouring"))):
    print(f"- {label}: **{m:.3f}** (IQR {lo:.3f}-{hi:.3f})")
for name in ("iouring", "sockets"):
    m, lo, hi = added(name)
    print(f"- HTTP and transport on {name}: {m:.1f} µs per request above the floor (IQR {lo:.1f}-{hi:.1f})")
PY
echo "windows: $OUT/windows.txt"
