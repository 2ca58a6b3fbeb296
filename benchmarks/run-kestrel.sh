#!/usr/bin/env bash
# Load harness for the Kestrel transport (issue #5): samples/KestrelSample on
#   iouring         --transport iouring                 (UseIoUring(): one loop, since the process sees one CPU)
#   sockets         --transport sockets                 (Kestrel's default Sockets transport: the baseline)
#   iouring-inline  --transport iouring --inline        (IoUringTransportOptions.UnsafePreferInlineScheduling)
#   iouring-kestrelpool --transport iouring --kestrel-pool (UseLoopMemoryPools = false: Kestrel's pool, no
#                   registered memory and no zero-copy sends; measured alone, not paired with a Sockets server)
#   iouring-nofiles --transport iouring --no-loop-files  (ReadFilesOnLoops = false: SendFileAsync is Kestrel's own
#                   FileStream copy on the thread pool, the rest on io_uring; measured alone, not paired with Sockets,
#                   which pairs with iouring: its "vs sockets" ratios are still taken round by round)
#   iouring-base    --transport iouring, run from BASE_SAMPLE (another build's KestrelSample binary, e.g. an older
#                   commit's, built in a worktree): the before/after check; measured alone, not paired with Sockets
#   sockets-inline  --transport sockets --inline        (SocketTransportOptions.UnsafePreferInlineScheduling and
#                   DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS=1, as TechEmpower runs it)
#   iouring-nospin, sockets-nospin  as iouring and sockets with DOTNET_ThreadPool_UnfairSemaphoreSpinLimit=0 (idle
#                   thread-pool workers block at once instead of spinning; on this one-CPU server a spinning worker
#                   yields the CPU back and forth with the io_uring loop: the knob's effect on each transport)
#   c               benchmarks/c/plaintext_server       (liburing, one thread: plaintext, pipelined, json, idle only)
# Every server is pinned to CPU 0 (taskset -c 0), the generator to CPU 1. Per scenario all servers are started
# fresh, checked (benchmarks/kestrel/probe.py), warmed up until it stops JIT-compiling, then measured in interleaved rounds (each io_uring server
# measured next to its Sockets counterpart, pairs rotated and flipped each round). Per round: requests/s and p50/p99 latency from the generator; the server's utime+stime from
# /proc/PID/stat over the measured window only (requests per server CPU-second); bytes allocated per request from
# the sample's opt-in GET /_stats (--stats) before and after the window; thread-pool work items per request likewise
# (GET /_threadpool; the two probe requests around the window are counted too: negligible), context switches of all
# the server's threads per request from /proc/PID/task/*/status; VmRSS in the middle of the window.
# A round whose server used less than 90% of one CPU is marked generator-bound.
#
# Scenarios (SCENARIOS, default all of these; the number is the connection count):
#   plaintext-64 plaintext-256 plaintext-1024   GET /plaintext, one request per connection at a time
#   pipelined-256                               GET /plaintext, 16 requests per write (TechEmpower plaintext)
#   json-256                                    GET /json
#   download-64k download-1m                    GET /download?size=65536 / 1048576, 64 connections
#   upload-64k upload-1m                        POST /upload with a 64 KiB / 1 MiB body the sample reads to its end,
#                                               64 connections (bulk receive)
#   churn-64                                    GET /plaintext with Connection: close: a new connection per request
#   churnidle-10k                               churn-64 while 10,000 idle keep-alive connections stay open on the
#                                               server (opened after the warm-up, held through every round): what a
#                                               close costs when the loop has many other connections
#   idle-10k                                    10,000 keep-alive connections, one request each, then held idle:
#                                               (RSS with them - RSS before) / 10,000, fresh server per round
#   tls-64                                      GET /plaintext over TLS (HTTP/1.1, wrk), 64 connections
#   h2c-64x16 h2c-256x1                         GET /plaintext over HTTP/2 with prior knowledge (cleartext; the
#                                               sample's --h2c), h2load: connections x concurrent streams each
#   h2-64x16 h2-256x1                           the same over TLS (HTTP/2 by ALPN)
#   static-64k static-1m static-16m             GET /static/f64k.bin, f1m.bin, f16m.bin: UseStaticFiles (the
#                                               sample's --static-root, which every server gets) over files of
#                                               random bytes the harness makes once in OUT/static; 64 connections,
#                                               16 for 16m (16 responses of 16 MiB in flight already keep the server's
#                                               CPU busy, and more only lengthen each response's time in the queue)
#   file-1m                                     GET /file/f1m.bin: the same 1 MiB file through Results.File, 64
#                                               connections
#                                               Both go through SendFileAsync: io_uring reads the file on its loop
#                                               (iouring) or leaves it to Kestrel (iouring-nofiles, sockets). Hot page
#                                               cache (the warm-up reads the file), unless COLD_CACHE=1
#   rate-25 rate-50 rate-75                     partial load: GET /plaintext over HTTP/1.1 keep-alive, 64 connections,
#                                               at a fixed rate (h2load --h1 --rps) of 25/50/75% of the sockets server's
#                                               maximum, measured in the same run (wrk, 64 connections, after its
#                                               warm-up; or RATE_MAX req/s): each server's CPU and latency at that rate
#   db-64 queries-64 fortunes-64 updates-64     TechEmpower's database tests on PostgreSQL (the sample's --db, Npgsql):
#                                               GET /db (one row), /queries?queries=20 (20 rows, one query each),
#                                               /fortunes (12 rows, sorted, HTML-encoded), /updates?queries=20 (20 rows
#                                               read, then written back in one UPDATE); N connections. The harness
#                                               starts the database with benchmarks/db/postgres.sh (installed with
#                                               apt-get if missing; DB_DIR, DB_PORT as that script takes them) on CPU 1,
#                                               beside the generator, and stops it at the end if it started it; its
#                                               CPU (every postgres process's utime+stime over the window) is the
#                                               db_cpu_s column
# Memory scenarios (benchmarks/kestrel/memory.sh, which says what each does): per round a fresh server on its own; its
# VmRSS before, at the peak (sampled every second) and MEMORY_AFTER (30) s after the client is gone, with the sample's
# GET /_memory (IoUring's pool used and registered, Kestrel's pool, the GC heap) at the peak and after:
#   slowread-800 slowloris-800 slowbody-800     slowhttptest -X / -H / -B: slow readers of a 10 MB download, slow
#                                               request headers, slow request bodies
#   bigdownload-512                             GET /download?size=4194304, wrk, 512 connections, 15 s
#   idlemem-10k idlews-10k                      10,000 keep-alive connections (one request each) / WebSockets, held
#                                               15 s, then closed
# Not in the default list (run them by name): the TLS, HTTP/2, rate, upload, churnidle, static, file, database and memory scenarios. TLS servers get a self-signed
# certificate made with openssl in OUT. Any plaintext-N, pipelined-N, json-N, churn-N, churnidle-N, idle-N (N or Nk), tls-N,
# h2c-CxS, h2-CxS, rate-P, db-N, queries-N, fortunes-N, updates-N, and any N for the memory scenarios also works.
#
#   benchmarks/run-kestrel.sh                   defaults: ROUNDS=3 DURATION=6 WARMUP=5 WARMUP_MAX=60, everything
#   ROUNDS=1 DURATION=2 WARMUP=1 SCENARIOS="plaintext-256 json-256" SERVERS="iouring sockets" benchmarks/run-kestrel.sh
#   ROUNDS=1 SCENARIOS="slowread-800 slowloris-800 slowbody-800 bigdownload-512 idlemem-10k idlews-10k" \
#       SERVERS="iouring sockets iouring-kestrelpool" benchmarks/run-kestrel.sh          the memory scenarios (~16 min)
#   SCENARIOS="static-64k static-1m static-16m file-1m" SERVERS="iouring sockets iouring-nofiles" \
#       benchmarks/run-kestrel.sh                                          static files, hot page cache (~14 min)
#   COLD_CACHE=1 OUT=/tmp/kestrel-cold SCENARIOS="static-1m static-16m" SERVERS="iouring sockets iouring-nofiles" \
#       benchmarks/run-kestrel.sh                                          from a dropped page cache (~7 min)
#   SCENARIOS="db-64 queries-64 fortunes-64 updates-64" SERVERS="iouring sockets" benchmarks/run-kestrel.sh
#                                                                          TechEmpower's database tests (~10 min)
# Environment: ROUNDS, DURATION (s per measured round), WARMUP (s per warm-up step; steps repeat until the server
# stops compiling, at most WARMUP_MAX s per server and scenario; the database scenarios between DB_WARMUP_MIN and
# DB_WARMUP_MAX, default 40 and 60), SERVERS, SCENARIOS,
# GENERATOR (wrk, default, or loadgen: benchmarks/c/loadgen for the plaintext, pipelined and json scenarios; the
# others always use wrk. loadgen counts responses by length, nearly free in user space; measured against the C server
# on this 2-CPU machine it went ~35% further than wrk pipelined, but one request at a time both stop at the same
# rate: the kernel's loopback TCP work on the generator's CPU is then the limit; the TLS, HTTP/2 and rate scenarios
# use wrk and h2load whatever this says), RATE_MAX (req/s: the rate scenarios' 100%, instead of measuring the sockets
# server), MEMORY_AFTER (s from a memory scenario's client exiting to its "after" sample, default 30),
# COLD_CACHE=1 (static and file scenarios: sync and write 3 to /proc/sys/vm/drop_caches, from CPU 1, before each
# round's measured window, so the window starts with the file on disk; needs root and a writable /proc/sys, checked
# at the start: on this project's machine (root, ext4 on virtio) it works, a 16 MiB file goes from 4096 resident
# pages to 0 (fincore), and reading it back takes ~12 ms, so "disk" there is fast. It drops the whole machine's
# clean page cache, not only these files (other processes' files are read again; mapped pages such as the servers'
# code stay). Only the window's first reads miss: the first response puts the file back in the cache. The rows say
# "cold" in results.tsv's cache column and results.md's title says "cold cache"), COLD_CACHE_EVERY (s; with
# COLD_CACHE=1, also evict the scenario's file every that many seconds during the window with
# posix_fadvise(DONTNEED), that file's pages only, so reads keep missing; default 0: only before the window),
# SAMPLE (the iouring server's KestrelSample binary; default this tree's build), IOURING_ARGS (more arguments for it,
# e.g. --report-iowait), IOURING_ENV ("NAME=value ...": environment of the iouring server only, e.g. benchmarks/compare.sh's
# KESTREL_SAMPLE_SLOWDOWN self-check), KEEP_SERVERS=1 (load scenarios that start the servers alike — same scheme and
# HTTP/2 setting — run on the same processes, started and warmed once; each scenario still warms up until it stops
# compiling; the database scenarios always start fresh servers; benchmarks/compare.sh sets it), PROCESSES (load
# scenarios: split the rounds between that many sets of freshly started and warmed servers, started in the other order
# each time, so that the spread covers what differs from one pair of processes to the next (one binary against
# itself: sets read 0.72-1.01 on pipelined-256, log 2026-11-29 seventh session); OUT/processes.tsv says which set
# measured each round and compare.py then takes its interval across the sets; default 1), OUT (directory for
# everything;
# default a new temp dir), PORT_BASE, DOCS=1 (also write docs/benchmarks-kestrel.md and docs/benchmarks-kestrel.svg).
# Output in OUT: results.tsv (one row per round), results.md (medians, ratios against sockets), results.svg (chart
# of requests per server CPU-second), the raw generator outputs and server logs (memory scenarios: also the VmRSS
# samples and the /_memory reports of each round; static and file scenarios: the files, OUT/static).
set -Eeuo pipefail
trap 'echo "run-kestrel.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-6}
WARMUP=${WARMUP:-5}
WARMUP_MAX=${WARMUP_MAX:-60}
DB_WARMUP_MIN=${DB_WARMUP_MIN:-40} DB_WARMUP_MAX=${DB_WARMUP_MAX:-60}
SERVERS=${SERVERS:-"iouring sockets iouring-inline sockets-inline c"}
SCENARIOS=${SCENARIOS:-"plaintext-64 plaintext-256 plaintext-1024 pipelined-256 json-256 download-64k download-1m churn-64 idle-10k"}
GENERATOR=${GENERATOR:-wrk}
PORT_BASE=${PORT_BASE:-18280}
DOCS=${DOCS:-0}
COLD_CACHE=${COLD_CACHE:-0}
COLD_CACHE_EVERY=${COLD_CACHE_EVERY:-0}
KEEP_SERVERS=${KEEP_SERVERS:-0}
PROCESSES=${PROCESSES:-1}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE="$ROOT/benchmarks/kestrel"
OUT=${OUT:-$(mktemp -d /tmp/kestrel-bench.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
COMMAND="ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP WARMUP_MAX=$WARMUP_MAX SERVERS=\"$SERVERS\" SCENARIOS=\"$SCENARIOS\" GENERATOR=$GENERATOR benchmarks/run-kestrel.sh"
((COLD_CACHE)) && COMMAND="COLD_CACHE=$COLD_CACHE COLD_CACHE_EVERY=$COLD_CACHE_EVERY $COMMAND"
((KEEP_SERVERS)) && COMMAND="KEEP_SERVERS=1 $COMMAND"
((PROCESSES > 1)) && COMMAND="PROCESSES=$PROCESSES $COMMAND"
[[ $PROCESSES =~ ^[1-9][0-9]*$ ]] && ((PROCESSES <= ROUNDS)) || { echo "PROCESSES must be 1 to ROUNDS ($ROUNDS)"; exit 2; }
[[ $GENERATOR == wrk || $GENERATOR == loadgen ]] || { echo "GENERATOR must be wrk or loadgen"; exit 2; }

# ---- processes: everything started in the background is killed on exit, Ctrl-C or failure ----
declare -A PID PORT LIVE   # LIVE: pids started and not yet reaped (a reaped pid may be reused: never kill it)
cleanup() {
    local p
    for p in "${!LIVE[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${!LIVE[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
reap() { # pid: SIGTERM, SIGKILL after 10 s, wait
    kill "$1" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    unset "LIVE[$1]"
}
row() { local IFS=$'\t'; echo "$*" >>"$TSV"; }   # one line of measurements.tsv
POSTGRES="$ROOT/benchmarks/db/postgres.sh"
DB_STARTED=0   # 1: this run started the database scenarios' PostgreSQL, so it stops it on exit
stop_db() { ((DB_STARTED)) && { "$POSTGRES" stop >/dev/null || true; DB_STARTED=0; }; return 0; }
trap 'cleanup; stop_db' EXIT
trap 'echo "interrupted"; exit 130' INT TERM

# ---- tools ----
command -v dotnet >/dev/null || { echo "needs the .NET 10 SDK (dotnet) on PATH"; exit 1; }
missing=()
command -v wrk >/dev/null || missing+=(wrk)
{ command -v gcc >/dev/null && command -v make >/dev/null; } || missing+=(build-essential)
dpkg -s liburing-dev >/dev/null 2>&1 || missing+=(liburing-dev)
command -v python3 >/dev/null || missing+=(python3)
command -v taskset >/dev/null || missing+=(util-linux)
command -v bc >/dev/null || missing+=(bc)
command -v h2load >/dev/null || missing+=(nghttp2-client)
command -v curl >/dev/null || missing+=(curl)
command -v openssl >/dev/null || missing+=(openssl)
command -v ss >/dev/null || missing+=(iproute2)
command -v slowhttptest >/dev/null || missing+=(slowhttptest)
if ((${#missing[@]})); then
    echo "installing with apt-get: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 10,000 idle connections need that many descriptors in the server and in the client (children inherit this).
hard=$(ulimit -Hn)
if [[ $hard != unlimited ]] && ((hard < 65536)); then ulimit -Hn 65536 2>/dev/null && hard=65536; fi
if [[ $hard == unlimited ]] || ((hard > 65536)); then hard=65536; fi   # the C server keeps fds below 65536
ulimit -n "$hard" 2>/dev/null || true

# ---- build (Release) ----
echo "building samples/KestrelSample (Release) and benchmarks/c"
dotnet build -c Release -nologo -v q "$ROOT/samples/KestrelSample/KestrelSample.csproj" >"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
make -s -C "$ROOT/benchmarks/c" >>"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
SAMPLE=${SAMPLE:-"$ROOT/samples/KestrelSample/bin/Release/net10.0/KestrelSample"}
C_SERVER="$ROOT/benchmarks/c/plaintext_server"
LOADGEN="$ROOT/benchmarks/c/loadgen"
IDLE_CLIENT="$ROOT/benchmarks/c/idle_conns"

source "$HERE/memory.sh"   # the memory scenarios (slowread, slowloris, slowbody, bigdownload, idlemem, idlews)

# ---- scenarios: sets S_KIND S_PATH S_CONNS S_DEPTH S_CLOSE S_HOLD (idle connections held) S_C (the C server can serve it) S_GEN, and
# S_SCHEME (http or https), S_H2C (1: cleartext endpoints speak HTTP/2 only), S_STREAMS (h2load's streams per
# connection), S_RATE_PCT (rate scenarios: the share of the sockets server's maximum) ----
scenario() {
    local name=$1 kind=${1%%-*} arg=${1#*-}
    S_KIND=$kind S_DEPTH=1 S_CLOSE="" S_C=1 S_PATH=/plaintext S_GEN=wrk
    S_CONNS="" S_SCHEME=http S_H2C=0 S_STREAMS=1 S_RATE_PCT="" S_HOLD=0 S_MEMORY=0 S_FILE="" S_DB=0
    if [[ $arg =~ ^([0-9]+)(k?)$ ]]; then
        S_CONNS=${BASH_REMATCH[1]}
        [[ ${BASH_REMATCH[2]} == k ]] && S_CONNS=$((S_CONNS * 1000))
    fi
    case $kind in
        tls)       S_SCHEME=https S_C=0 ;;
        h2c|h2)
            [[ $arg =~ ^([0-9]+)x([0-9]+)$ ]] || { echo "scenario $name: write it as $kind-CONNECTIONSxSTREAMS (e.g. $kind-64x16)"; exit 2; }
            S_CONNS=${BASH_REMATCH[1]} S_STREAMS=${BASH_REMATCH[2]} S_C=0 S_GEN=h2load
            if [[ $kind == h2 ]]; then S_SCHEME=https; else S_H2C=1; fi ;;
        rate)
            [[ $arg =~ ^[0-9]+$ ]] && ((arg > 0 && arg <= 100)) || { echo "scenario $name: rate-P with P a percentage"; exit 2; }
            S_RATE_PCT=$arg S_CONNS=64 S_C=0 S_GEN=h2load-rate ;;
        plaintext) ;;
        pipelined) S_DEPTH=16 ;;
        json)      S_PATH=/json ;;
        churn)     S_CLOSE=close S_C=0 ;;
        churnidle) S_CLOSE=close S_C=0 S_HOLD=$S_CONNS S_CONNS=64 ;;   # N: the idle connections held
        idle)      ;;
        download)
            S_C=0 S_CONNS=64
            case $arg in
                64k) S_PATH="/download?size=65536" ;;
                1m)  S_PATH="/download?size=1048576" ;;
                *) echo "unknown scenario $name (download-64k or download-1m)"; exit 2 ;;
            esac ;;
        static|file)
            # a file of OUT/static through SendFileAsync: UseStaticFiles at /static/, Results.File at /file/
            S_C=0 S_CONNS=64
            case $kind-$arg in
                static-64k|static-1m|file-1m) S_FILE=f$arg.bin ;;
                static-16m) S_FILE=f16m.bin S_CONNS=16 ;;
                *) echo "unknown scenario $name (static-64k, static-1m, static-16m or file-1m)"; exit 2 ;;
            esac
            S_PATH="/$kind/$S_FILE" ;;
        db)        S_PATH=/db S_C=0 S_DB=1 ;;                  # TechEmpower's database tests (the sample's --db)
        queries)   S_PATH="/queries?queries=20" S_C=0 S_DB=1 ;;
        fortunes)  S_PATH=/fortunes S_C=0 S_DB=1 ;;
        updates)   S_PATH="/updates?queries=20" S_C=0 S_DB=1 ;;
        upload)
            # POST bodies the sample reads to their end (/upload): bulk receive, 64 connections
            S_C=0 S_CONNS=64
            case $arg in
                64k) S_PATH="/upload?size=65536" ;;
                1m)  S_PATH="/upload?size=1048576" ;;
                *) echo "unknown scenario $name (upload-64k or upload-1m)"; exit 2 ;;
            esac ;;
        *) memory_kind "$kind" || { echo "unknown scenario $name"; exit 2; } ;;
    esac
    [[ ${S_CONNS:-} ]] || { echo "scenario $name: no connection count"; exit 2; }
    [[ $GENERATOR == loadgen && $kind =~ ^(plaintext|pipelined|json)$ ]] && S_GEN=loadgen
    return 0
}
for s in $SCENARIOS; do scenario "$s"; done   # fail early on a typo
base_url() { echo "$S_SCHEME://127.0.0.1:${PORT[$1]}"; }   # name: the server's URL in this scenario

# The database scenarios' PostgreSQL, on CPU 1 beside the generator so that CPU 0 stays the server's alone; stopped at
# the end (or on failure) unless it was already running before this run.
DB_URL=""
db_ticks() { "$POSTGRES" ticks; }   # utime+stime of all its processes so far, clock ticks
if [[ " $SCENARIOS " =~ \ (db|queries|fortunes|updates)- ]]; then
    "$POSTGRES" status >/dev/null 2>&1 || DB_STARTED=1
    DB_URL=$(DB_CPU=1 "$POSTGRES" start) || { echo "could not start PostgreSQL (benchmarks/db/postgres.sh start)"; exit 1; }
fi

# The static and file scenarios' files, made once (random bytes: nothing compresses or dedups them); every sample
# server gets --static-root OUT/static. Synced so that a drop of the page cache (COLD_CACHE) finds them clean.
STATIC_ROOT="$OUT/static"
mkdir -p "$STATIC_ROOT"
if [[ " $SCENARIOS " =~ \ (static|file)- ]]; then
    for f in 64k:65536 1m:1048576 16m:16777216; do
        [[ -s $STATIC_ROOT/f${f%%:*}.bin ]] || head -c "${f#*:}" /dev/urandom >"$STATIC_ROOT/f${f%%:*}.bin"
    done
    sync
fi
export STATIC_ROOT   # probe.py's expected bodies of /static/NAME and /file/NAME
# COLD_CACHE: check that dropping the page cache works here before the run relies on it.
drop_page_cache() { sync && taskset -c 1 sh -c 'echo 3 >/proc/sys/vm/drop_caches' 2>/dev/null; }
if ((COLD_CACHE)); then
    drop_page_cache || { echo "COLD_CACHE=1: cannot write /proc/sys/vm/drop_caches (needs root and a writable /proc/sys)"; exit 2; }
    if command -v fincore >/dev/null && [[ -s $STATIC_ROOT/f1m.bin ]]; then
        cat "$STATIC_ROOT/f1m.bin" >/dev/null; drop_page_cache
        resident=$(fincore -n -b -o RES "$STATIC_ROOT/f1m.bin" | tr -d ' ')
        ((resident == 0)) || { echo "COLD_CACHE=1: $resident bytes of a file stayed resident after a drop of the page cache"; exit 2; }
    fi
fi
evict_file() { # path: drops that file's clean pages from the page cache (posix_fadvise DONTNEED)
    python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}

# A self-signed certificate for the TLS scenarios (the sample takes it with --cert).
CERT="$OUT/server.pfx:bench"
if [[ " $SCENARIOS " =~ \ (tls|h2)- ]]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>>"$OUT/build.log"
    openssl pkcs12 -export -inkey "$OUT/key.pem" -in "$OUT/cert.pem" -out "$OUT/server.pfx" -passout pass:bench
fi

# ---- servers ----
start_server() { # name port tag (names the log)
    local name=$1 port=$2 log="$OUT/server-$3-$1.log" transport=${1%-inline}
    transport=${transport%-base}
    transport=${transport%-nospin}
    transport=${transport%-nofiles}
    local args=(--transport "${transport%-kestrelpool}" --stats --urls "$S_SCHEME://127.0.0.1:$2" --static-root "$STATIC_ROOT")
    [[ $S_SCHEME == https ]] && args+=(--cert "$CERT")
    ((S_H2C)) && args+=(--h2c)
    ((S_DB)) && args+=(--db "$DB_URL")
    [[ $name == *-inline ]] && args+=(--inline)
    [[ $name == *-kestrelpool ]] && args+=(--kestrel-pool)
    [[ $name == *-nofiles ]] && args+=(--no-loop-files)
    # A ring's teardown finishes after its process is gone, and until then an armed multishot accept keeps the
    # previous server's listening socket answering: give it a few seconds before calling the port taken.
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break; sleep 0.1; done
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "port $port is already in use: stop what listens there or set PORT_BASE"; exit 1
    fi
    case $name in
        iouring) env ${IOURING_ENV:-} taskset -c 0 "$SAMPLE" "${args[@]}" ${IOURING_ARGS:-} >"$log" 2>&1 & ;;
        iouring-inline|iouring-kestrelpool|iouring-nofiles|sockets) taskset -c 0 "$SAMPLE" "${args[@]}" >"$log" 2>&1 & ;;
        iouring-base) taskset -c 0 "${BASE_SAMPLE:?iouring-base needs BASE_SAMPLE, the KestrelSample binary of another build}" "${args[@]}" >"$log" 2>&1 & ;;
        sockets-inline) DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS=1 taskset -c 0 "$SAMPLE" "${args[@]}" >"$log" 2>&1 & ;;
        iouring-nospin|sockets-nospin) DOTNET_ThreadPool_UnfairSemaphoreSpinLimit=0 taskset -c 0 "$SAMPLE" "${args[@]}" >"$log" 2>&1 & ;;
        c) taskset -c 0 "$C_SERVER" "$port" >"$log" 2>&1 & ;;
        *) echo "unknown server $name"; exit 2 ;;
    esac
    PID[$name]=$!
    PORT[$name]=$port
    LIVE[$!]=1
    for _ in $(seq 300); do
        { [[ $name == c ]] || grep -qs '^Transport:' "$log"; } && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        kill -0 "${PID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    { kill -0 "${PID[$name]}" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; } ||
        { echo "$name did not start:"; cat "$log"; exit 1; }
    if [[ $name == iouring* ]] && ! grep -q '^Transport: io_uring' "$log"; then
        echo "$name is not on io_uring:"; cat "$log"; exit 1
    fi
}
stop_server() { reap "${PID[$1]}"; unset "PID[$1]"; }
KEPT=""   # KEEP_SERVERS=1: what the running servers were started for (their names and start arguments), else empty
stop_kept() { local name; for name in "${!PID[@]}"; do stop_server "$name"; done; KEPT=""; }

# The servers' order in round $1: each io_uring server next to its Sockets counterpart (iouring with sockets,
# iouring-inline with sockets-inline), so each round's ratio compares two windows seconds apart, not up to a minute
# (this VM's speed drifts on that scale); the pairs rotate each round and each pair's order flips, so no server
# always runs first, last or before its partner. iouring-kestrelpool, iouring-nofiles and iouring-base are units of
# their own (Sockets has one counterpart, iouring), rotated with the pairs, except in a run without sockets, where
# iouring-base is iouring's partner.
round_order() {
    local round=$1 name partner units=() used=" " i
    shift
    for name in "$@"; do
        [[ $used == *" $name "* ]] && continue
        case $name in iouring-kestrelpool|iouring-nofiles|iouring-base) partner= ;; iouring*) partner=sockets${name#iouring} ;; sockets*) partner=iouring${name#sockets} ;; *) partner= ;; esac
        # Without sockets in the run (benchmarks/compare.sh), iouring pairs with iouring-base: the before/after pair.
        [[ $name == iouring && " $* " != *" sockets "* ]] && partner=iouring-base
        [[ $name == iouring-base && " $* " != *" sockets "* ]] && partner=iouring
        if [[ -n $partner && " $* " == *" $partner "* && $used != *" $partner "* ]]; then
            if (( round % 2 )); then units+=("$name $partner"); else units+=("$partner $name"); fi
            used+="$name $partner "
        else
            units+=("$name"); used+="$name "
        fi
    done
    for i in $(seq 0 $((${#units[@]} - 1))); do
        echo -n "${units[$(((i + round - 1) % ${#units[@]}))]} "
    done
    echo
}
cpu_ticks() { # utime + stime of the whole process (all threads), in clock ticks
    local stat
    stat=$(<"/proc/$1/stat")
    stat=${stat##*) }          # fields after the command name; $1 here is field 3 (state)
    set -- $stat
    echo $((${12} + ${13}))    # fields 14 and 15
}
thread_ticks() { # pid: utime+stime ticks so far of the .NET thread pool's workers, of the transport's I/O threads
    # (io_uring loops; Sockets' epoll threads) and of the other threads (a thread that exits in the window takes its
    # ticks with it: the thread pool retires idle workers, so report.py takes the workers' share as the process's
    # CPU less the I/O and other threads')
    local t comm stat n pool=0 io=0 other=0
    for t in /proc/$1/task/*; do
        # read, not $(<...): a thread that exited since the glob makes $(<...) end the script under set -e
        { read -r comm <"$t/comm" && read -r stat <"$t/stat"; } 2>/dev/null || continue
        stat=${stat##*) }
        set -- $stat
        n=$((${12} + ${13}))
        case $comm in
            ".NET TP Worker"*) pool=$((pool + n)) ;;
            io_uring*|".NET Sockets"*) io=$((io + n)) ;;
            *) other=$((other + n)) ;;
        esac
    done
    echo "$pool $io $other"
}
cpu_ticks_of_machine() { # busy, irq+softirq and total clock ticks of CPU 0 so far (/proc/stat: busy = all but idle and iowait),
    # then steal and total ticks of all CPUs (time the hypervisor ran something else: a disturbed round shows here)
    local _ user nice system idle iowait irq softirq steal
    read -r _ user nice system idle iowait irq softirq steal _ < <(grep '^cpu0 ' /proc/stat)
    echo -n "$((user + nice + system + irq + softirq + steal)) $((irq + softirq)) $((user + nice + system + idle + iowait + irq + softirq + steal))"
    read -r _ user nice system idle iowait irq softirq steal _ < <(grep '^cpu ' /proc/stat)
    echo " $steal $((user + nice + system + idle + iowait + irq + softirq + steal))"
}
pool_threads() { # pid: the .NET thread pool's worker threads now
    local t n=0 comm
    for t in /proc/$1/task/*; do
        { read -r comm <"$t/comm"; } 2>/dev/null || continue
        [[ $comm == ".NET TP Worker"* ]] && n=$((n + 1))
    done
    echo "$n"
}
rss_kib() { sed -n "s/^${2:-VmRSS}:[[:space:]]*\([0-9]*\) kB/\1/p" "/proc/$1/status"; }   # pid [field, e.g. VmHWM]
sockets_open() { { find "/proc/$1/fd" -lname 'socket:*' 2>/dev/null || true; } | wc -l; }   # fds may close mid-listing
curl_options() { # how curl speaks to this scenario's servers
    if ((S_H2C)); then echo --http2-prior-knowledge; elif [[ $S_SCHEME == https ]]; then echo -k; fi
}
stat_of() { # name path: a number from the sample's opt-in stats endpoints, "-" for the C server or on failure
    [[ $1 == c ]] && { echo -; return; }
    local body
    if [[ $S_SCHEME == https ]] || ((S_H2C)); then
        body=$(curl -s --max-time 5 $(curl_options) "$(base_url "$1")$2" || true)
        [[ $body =~ ^[0-9]+$ ]] && echo "$body" || echo -
        return
    fi
    body=$(exec 3<>"/dev/tcp/127.0.0.1/${PORT[$1]}" &&
        printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" >&3 &&
        timeout 5 cat <&3 | tail -n 1)
    [[ $body =~ ^[0-9]+$ ]] && echo "$body" || echo -
}
allocated() { stat_of "$1" /_stats; }   # GC.GetTotalAllocatedBytes(precise: true)
pool_items() { stat_of "$1" /_threadpool; }   # ThreadPool.CompletedWorkItemCount (an older sample: "-")
ctx_switches() { # pid: voluntary + involuntary context switches of all its threads so far
    # A thread that exits between the glob and its read makes cat fail: not an error (pipefail would end the run).
    { cat /proc/"$1"/task/*/status 2>/dev/null || true; } | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }'
}
# The runtime keeps tiering code up (tier 0 -> instrumented -> tier 1) for 20-40 s under load on this one busy CPU,
# and req/s can sit flat for many seconds before the tier-1 code lands: a fixed short warm-up measures half-compiled
# servers (measured: iouring 55k req/s before, 100k+ after). So warm up in WARMUP-second steps until a step compiles
# almost nothing (GET /_jit grows by < 10 methods), at most WARMUP_MAX seconds. The C server needs one step.
warm_up() { # name scenario
    local before after elapsed=0 cap=$WARMUP_MAX floor=0
    # Under a database's load a fresh server compiles for 35-40 s, with pauses of a few seconds that look like the
    # end (log 2026-11-29, fifth session): those scenarios warm up for at least DB_WARMUP_MIN s, at most DB_WARMUP_MAX.
    if ((S_DB)); then
        floor=$DB_WARMUP_MIN
        ((cap < DB_WARMUP_MAX)) && cap=$DB_WARMUP_MAX
    fi
    before=$(stat_of "$1" /_jit)
    while ((elapsed < cap)); do
        start_generator "$1" "$WARMUP" "$OUT/warmup-$2-$1.txt" "" warm; finish_generator
        elapsed=$((elapsed + WARMUP))
        after=$(stat_of "$1" /_jit)
        [[ $after == - || $before == - ]] && break
        ((after - before < 10 && elapsed >= floor)) && break
        before=$after
    done
    printf '  %-15s warm after %ss (%s methods compiled)\n' "$1" "$elapsed" "$after"
}
start_generator() { # name seconds outfile [connections] [warm]: the scenario's load generator on CPU 1, in the background
    # (warm: a rate scenario's warm-up runs flat out with wrk, as its calibration does)
    local conns=${4:-$S_CONNS} gen=$S_GEN
    [[ ${5:-} == warm && $gen == h2load-rate ]] && gen=wrk
    if [[ $gen == h2load ]]; then
        taskset -c 1 h2load -t1 -c"$conns" -m"$S_STREAMS" -D"$2" --log-file="$3.log" "$(base_url "$1")$S_PATH" >"$3" 2>&1 &
    elif [[ $gen == h2load-rate ]]; then
        # --rps is per connection: the scenario's rate spread over them
        taskset -c 1 h2load --h1 -t1 -c"$conns" --rps="$(( (RATE + conns - 1) / conns ))" -D"$2" --log-file="$3.log" \
            "$(base_url "$1")$S_PATH" >"$3" 2>&1 &
    elif [[ $gen == loadgen ]]; then
        taskset -c 1 "$LOADGEN" 127.0.0.1 "${PORT[$1]}" "$conns" "$S_DEPTH" "$2" "$S_PATH" >"$3" 2>&1 &
    else
        taskset -c 1 wrk -t1 -c"$conns" -d"$2s" --latency -s "$HERE/request.lua" "$(base_url "$1")" \
            -- "$S_PATH" "$S_DEPTH" $S_CLOSE >"$3" 2>&1 &
    fi
    GEN=$!
    LIVE[$GEN]=1
}
finish_generator() { wait "$GEN" || true; unset "LIVE[$GEN]"; }
await_ready() { # file pid: until benchmarks/c/idle_conns (pid) printed "ready" into file (at most 120 s); fails if it never did
    for _ in $(seq 1200); do grep -qs '^ready' "$1" && break; kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
    grep -qs '^ready' "$1"
}
# The idle and memory scenarios: per round each server in turn (rotated each round) on its own, fresh: started, warmed
# up with WARMUP s of GET /plaintext on 64 connections (wrk), back to the sockets it had before (the warm-up's
# connections closed, or they would count as held), then measured by FUNCTION SCENARIO NAME ROUND OUTFILE, then stopped.
fresh_server_rounds() { # scenario function
    local servers=() name k n round sock0
    for name in "${server_list[@]}"; do [[ $name != c || $S_C == 1 ]] && servers+=("$name"); done
    n=${#servers[@]}
    for round in $(seq "$ROUNDS"); do
        for k in $(seq 0 $((n - 1))); do
            name=${servers[$(((k + round - 1) % n))]}
            start_server "$name" "$PORT_BASE" "$1-round$round"
            sock0=$(sockets_open "${PID[$name]}")
            S_PATH=/plaintext S_GEN=wrk start_generator "$name" "$WARMUP" "$OUT/warmup-$1-$name.txt" 64; finish_generator
            for _ in $(seq 100); do (( $(sockets_open "${PID[$name]}") <= sock0 )) && break; sleep 0.1; done
            sleep 0.5
            "$2" "$1" "$name" "$round" "$OUT/$1-round$round-$name.txt"
            stop_server "$name"
        done
    done
}
open_idle() { # name out [websocket]: benchmarks/c/idle_conns on CPU 1 opens S_CONNS connections to the server, one GET
    # S_PATH each (websocket: upgrades), and holds them; sets CLIENT (its pid) and OPENED (seconds until all were open)
    local t0=$EPOCHREALTIME
    taskset -c 1 "$IDLE_CLIENT" 127.0.0.1 "${PORT[$1]}" "$S_CONNS" "$S_PATH" ${3:-} >"$2" 2>&1 &
    CLIENT=$!; LIVE[$CLIENT]=1
    await_ready "$2" "$CLIENT" || echo "  $1: the client did not get $S_CONNS connections: $(head -c 300 "$2")"
    OPENED=$(echo "$EPOCHREALTIME - $t0" | bc)
}

# ---- header ----
read -r -a server_list <<<"$SERVERS"
n_load=0 n_idle=0 memory_s=0
for s in $SCENARIOS; do
    scenario "$s"
    k=0; for name in "${server_list[@]}"; do [[ $name != c || $S_C == 1 ]] && k=$((k + 1)); done
    if ((S_MEMORY)); then memory_s=$((memory_s + k * ROUNDS * (WARMUP + S_LOAD_S + MEMORY_AFTER + 6)))
    elif [[ $S_KIND == idle ]]; then n_idle=$((n_idle + k)); else n_load=$((n_load + k)); fi
done
# per server and scenario: the rounds plus ~0.5 s each for sampling, the warm-up, ~1 s to start, probe and stop;
# an idle round: start, warm-up, open, settle, stop (measured on 2 cores: within ~10% of a real run); a memory round:
# start, warm-up, load, MEMORY_AFTER, stop
estimate=$(( (n_load * (ROUNDS * 2 * DURATION + ROUNDS + 2 * WARMUP + 2) / 2 + n_load * WARMUP_MAX * 2 / 3 + n_idle * ROUNDS * (WARMUP + 5) + memory_s + 20) / 60 + 1 ))
DOTNET_VERSION=$(dotnet --list-runtimes | sed -n 's/^Microsoft.NETCore.App \([^ ]*\).*/\1/p' | tail -1)
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "kernel: $(uname -r); .NET $DOTNET_VERSION; $(dpkg -s liburing-dev | sed -n 's/^Version: /liburing /p'); $({ wrk -v 2>&1 || true; } | head -1 | cut -d' ' -f1-2)"
    echo "command: $COMMAND"
    echo "generator: $GENERATOR; open files limit $(ulimit -n)"
    if ((COLD_CACHE)); then
        echo "page cache: cold cache (COLD_CACHE=1: the static and file scenarios' rounds start after a drop of the page cache$( ((COLD_CACHE_EVERY > 0)) && echo ", and their file is evicted every $COLD_CACHE_EVERY s during the window"))"
    fi
    # runtime settings the servers inherit (e.g. DOTNET_ThreadPool_UnfairSemaphoreSpinLimit=0): part of what was measured
    env | grep -E '^(DOTNET|COMPlus)_' | grep -vE '^DOTNET_(CLI_|NOLOGO|GENERATE_)' | sort | sed 's/^/environment: /' || true
    [[ -n $DB_URL ]] && echo "database: $("$POSTGRES" psql -tAc 'SHOW server_version' | cut -d' ' -f1 | sed 's/^/PostgreSQL /') on CPU 1 (benchmarks/db/postgres.sh), $(echo "$DB_URL" | sed 's/Password=[^;]*;//')"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/header.txt"
echo "raw outputs: $OUT; estimated time ~${estimate} min"

CLK_TCK=$(getconf CLK_TCK)
TSV="$OUT/measurements.tsv"
row scenario round server generator connections depth path probe out cpu_s wall_s alloc_before alloc_after \
    rss_before_kib rss_kib sockets_before sockets open_s cpu0_busy cpu0_softirq steal target_rate threads_s pool_items ctx_switches \
    rss_after_kib rss_hwm_kib sockets_after after_s \
    pool_threads cache db_cpu_s   # rss_after_kib, sockets_after, after_s: memory scenarios only; rss_hwm_kib: memory
    # scenarios and (the peak so far, at the window's end) load scenarios; pool_threads, cache: load scenarios only;
    # db_cpu_s: the database scenarios' PostgreSQL over the window (all its processes)

# A rate scenario's requests per second: its share of RATE_MAX, or of the sockets server's maximum (measured once per
# run, flat out with wrk on 64 connections right after that server's warm-up, in the first rate scenario).
RATE=0
set_rate() { # servers that answered correctly
    if [[ -z ${RATE_MAX:-} ]]; then
        [[ " $* " == *" sockets "* ]] || { echo "the rate scenarios need the sockets server in SERVERS, or RATE_MAX"; exit 2; }
        local gen=$S_GEN
        S_GEN=wrk; start_generator sockets "$DURATION" "$OUT/rate-max-sockets.txt" 64; finish_generator; S_GEN=$gen
        RATE_MAX=$(sed -n 's/^Requests\/sec: *\([0-9]*\).*/\1/p' "$OUT/rate-max-sockets.txt")
        [[ $RATE_MAX =~ ^[0-9]+$ ]] || { echo "could not measure the sockets server's maximum:"; cat "$OUT/rate-max-sockets.txt"; exit 1; }
        echo "rate scenarios: 100% = $RATE_MAX req/s (the sockets server flat out, wrk -c64)" | tee -a "$OUT/header.txt"
    fi
    RATE=$((RATE_MAX * S_RATE_PCT / 100))
    echo "  fixed rate $RATE req/s (${S_RATE_PCT}% of $RATE_MAX)"
}

# An HTTP/2 scenario's check with curl (probe.py speaks HTTP/1.1 only): status 200 over HTTP/2 and the expected body.
probe_h2() { # name
    local result
    result=$(curl -sS --max-time 10 $(curl_options) $([[ $S_SCHEME == https ]] && echo --http2) -o "$OUT/probe-$1.body" -w '%{http_version} %{http_code}' \
        "$(base_url "$1")$S_PATH" 2>&1 || true)
    if [[ $result == "2 200" && $(<"$OUT/probe-$1.body") == "Hello, World!" ]]; then echo "ok -"; else echo "error: curl got '$result'"; fi
}

# ---- one scenario under load: start all servers, probe, warm up, interleaved rounds, stop ----
# A new set of processes for the same servers, on the same ports, warmed up again; odd sets start in reverse order.
restart_servers() { # scenario set names...
    local scen=$1 set=$2 name order=() port
    shift 2
    for name in "$@"; do stop_server "$name"; done
    if ((set % 2)); then for name in "$@"; do order=("$name" "${order[@]}"); done; else order=("$@"); fi
    for name in "${order[@]}"; do port=${PORT[$name]}; start_server "$name" "$port" "$scen-set$set"; done
    for name in "${order[@]}"; do warm_up "$name" "$scen"; done
    reset_peak_rss "$@"
}
# The peak RSS columns count from here: writing 5 to clear_refs resets VmHWM to the current RSS.
reset_peak_rss() { # names...
    local name
    for name in "$@"; do echo 5 >"/proc/${PID[$name]}/clear_refs"; done
}
load_scenario() {
    local scen=$1 servers=() name i out probe order
    declare -A PROBE
    for name in "${server_list[@]}"; do [[ $name != c || $S_C == 1 ]] && servers+=("$name"); done
    echo "== $scen ($(date +%H:%M:%S)): $S_CONNS connections, ${S_PATH}, depth $S_DEPTH${S_CLOSE:+, Connection: close}, $S_GEN$( ((COLD_CACHE)) && [[ $S_FILE ]] && echo ", cold cache")"
    local started="${servers[*]} | $S_SCHEME $S_H2C $S_DB"
    # The database scenarios start fresh servers each: kept across them, a self-check read -7.5% (queries-64) and
    # -8.6% (fortunes-64) for two processes of one build (docs/benchmarks/log/2026-11-29.md).
    if [[ $KEPT != "$started" ]] || ((S_DB)); then
        stop_kept
        i=0
        for name in "${servers[@]}"; do start_server "$name" $((PORT_BASE + i)) "$scen"; i=$((i + 1)); done
    fi
    local ok=()
    for name in "${servers[@]}"; do
        if [[ $S_GEN == h2load ]]; then
            probe=$(probe_h2 "$name")
        else
            probe=$(python3 "$HERE/probe.py" 127.0.0.1 "${PORT[$name]}" "$S_PATH" "$S_DEPTH" $S_CLOSE ${S_SCHEME/http/} 2>&1 || true)
        fi
        if [[ $probe == ok* ]]; then
            ok+=("$name"); PROBE[$name]=${probe#ok }
        else
            echo "  $name: WRONG RESPONSE, not measured: $probe"
            probe=${probe//[$'\t\n']/ }
            row "$scen" 0 "$name" "$S_GEN" "$S_CONNS" "$S_DEPTH" "$S_PATH" "$probe" - - - - - - - - - - - - - - -
        fi
    done
    for name in "${ok[@]}"; do warm_up "$name" "$scen"; done
    [[ $S_GEN == h2load-rate ]] && set_rate "${ok[@]}" 
    local holders=()
    if ((S_HOLD)); then
        (( $(ulimit -n) > S_HOLD + 500 )) || { echo "  ulimit -n $(ulimit -n) is too low to hold $S_HOLD connections"; exit 1; }
        for name in "${ok[@]}"; do   # each server gets its own idle client, held until the scenario ends
            taskset -c 1 "$IDLE_CLIENT" 127.0.0.1 "${PORT[$name]}" "$S_HOLD" >"$OUT/$scen-held-$name.txt" 2>&1 &
            holders+=($!); LIVE[$!]=1
            await_ready "$OUT/$scen-held-$name.txt" "$!" || { echo "  $name: could not hold $S_HOLD connections: $(head -c 300 "$OUT/$scen-held-$name.txt")"; exit 1; }
        done
        echo "  holding $S_HOLD idle connections on each server"
    fi
    # The peak RSS columns count from here: the scenario's measured windows (a kept server's earlier scenarios and
    # every warm-up are not in them).
    reset_peak_rss "${ok[@]}"
    local per_set=$(( (ROUNDS + PROCESSES - 1) / PROCESSES )) set=0
    for round in $(seq "$ROUNDS"); do
        if ((round > 1 && (round - 1) % per_set == 0)); then
            ((S_HOLD == 0)) || { echo "  PROCESSES > 1 does not restart servers that hold idle connections"; exit 2; }
            set=$((set + 1))
            restart_servers "$scen" "$set" "${ok[@]}"
        fi
        printf '%s\t%s\t%s\n' "$scen" "$round" "$set" >>"$OUT/processes.tsv"
        read -r -a order <<<"$(round_order "$round" "${ok[@]}")"
        for name in "${order[@]}"; do
            out="$OUT/$scen-round$round-$name.txt"
            local p=${PID[$name]} a0 a1 t0 t1 s0 s1 rss hwm c0 c1 w0 w1 w2 evictor="" cache=hot d0=- d1=-
            if ((COLD_CACHE)) && [[ $S_FILE ]]; then   # the window starts with the file on disk
                drop_page_cache || { echo "  could not drop the page cache"; exit 1; }
                cache=cold
                if ((COLD_CACHE_EVERY > 0)); then   # and it goes back there every COLD_CACHE_EVERY s
                    (taskset -pc 1 "$BASHPID" >/dev/null; while sleep "$COLD_CACHE_EVERY"; do evict_file "$STATIC_ROOT/$S_FILE"; done) &
                    evictor=$!; LIVE[$evictor]=1
                fi
            fi
            a0=$(allocated "$name")
            local th0 th1 i0 i1 x0 x1
            i0=$(pool_items "$name"); x0=$(ctx_switches "$p"); w0=$(pool_threads "$p")
            th0=$(thread_ticks "$p")
            ((S_DB)) && d0=$(db_ticks)
            c0=$(cpu_ticks_of_machine); t0=$(cpu_ticks "$p"); s0=$(date +%s.%N)
            start_generator "$name" "$DURATION" "$out"
            sleep "$(echo "$DURATION / 2" | bc -l)"
            rss=$(rss_kib "$p"); w1=$(pool_threads "$p")   # in the middle of the window, every connection open
            finish_generator
            s1=$(date +%s.%N); t1=$(cpu_ticks "$p"); c1=$(cpu_ticks_of_machine)
            ((S_DB)) && d1=$(db_ticks)
            [[ $evictor ]] && reap "$evictor"
            th1=$(thread_ticks "$p"); w2=$(pool_threads "$p"); hwm=$(rss_kib "$p" VmHWM)
            x1=$(ctx_switches "$p"); i1=$(pool_items "$name")
            a1=$(allocated "$name")
            row "$scen" "$round" "$name" "$S_GEN" "$S_CONNS" "$S_DEPTH" "$S_PATH" "${PROBE[$name]}" "$out" \
                "$(echo "scale=3; ($t1 - $t0) / $CLK_TCK" | bc)" "$(echo "$s1 - $s0" | bc)" "$a0" "$a1" - "$rss" - - - \
                "$(echo "$c0 $c1" | awk '{ printf "%.3f\t%.3f\t%.4f", ($6 - $1) / ($8 - $3), ($7 - $2) / ($8 - $3), ($9 - $4) / ($10 - $5) }')" \
                "$([[ $S_GEN == h2load-rate ]] && echo "$RATE" || echo -)" \
                "$(echo "$th0 $th1" | awk -v hz="$CLK_TCK" '{ printf "%.2f/%.2f/%.2f", ($4 - $1) / hz, ($5 - $2) / hz, ($6 - $3) / hz }')" \
                "$i0/$i1" "$x0/$x1" - "$hwm" - - "$w0/$w1/$w2" "$cache" \
                "$([[ $d0 == - ]] && echo - || echo "scale=3; ($d1 - $d0) / $CLK_TCK" | bc)"
            printf '  round %s %-15s %12s req/s, server CPU %ss%s\n' "$round" "$name" \
                "$(sed -n -e 's/^Requests\/sec: *//p' -e 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$out")" \
                "$(echo "scale=2; ($t1 - $t0) / $CLK_TCK" | bc)" "$([[ $d0 == - ]] || echo ", database CPU $(echo "scale=2; ($d1 - $d0) / $CLK_TCK" | bc)s")"
            grep -E 'Socket errors|Non-2xx|closed by the server|error' "$out" | grep -vE '^requests: .* 0 failed, 0 errored' |
                sed 's/^/    /' | head -3 || true
        done
    done
    local holder
    for holder in "${holders[@]}"; do reap "$holder"; done
    if ((KEEP_SERVERS && !S_DB)); then KEPT=$started; else stop_kept; fi
}

# ---- idle connections: per round and server a fresh server, warm-up, RSS before, N connections held, RSS after ----
idle_scenario() {
    echo "== $1 ($(date +%H:%M:%S)): $S_CONNS idle keep-alive connections, one GET $S_PATH each (open files limit $(ulimit -n))"
    (( $(ulimit -n) > S_CONNS + 500 )) || { echo "  ulimit -n $(ulimit -n) is too low for $S_CONNS connections: skipped"; return; }
    fresh_server_rounds "$1" idle_round
}
idle_round() { # scenario name round out
    local name=$2 out=$4 rss0 rss1 sock0 sock1 a0 a1
    rss0=$(rss_kib "${PID[$name]}"); sock0=$(sockets_open "${PID[$name]}"); a0=$(allocated "$name")
    open_idle "$name" "$out"
    sleep 1   # let the server settle (allocations, buffers) with every connection idle
    rss1=$(rss_kib "${PID[$name]}"); sock1=$(sockets_open "${PID[$name]}"); a1=$(allocated "$name")
    echo "  server sockets via ss: $(ss -Htn state established "( sport = :${PORT[$name]} )" | wc -l)" >>"$out"
    reap "$CLIENT"
    row "$1" "$3" "$name" idle_conns "$S_CONNS" 1 "$S_PATH" - "$out" - - "$a0" "$a1" "$rss0" "$rss1" "$sock0" "$sock1" "$OPENED" - - - - - - -
    printf '  round %s %-15s %6s connections held, RSS %s -> %s KiB (%s B per connection)\n' "$3" "$name" \
        "$((sock1 - sock0))" "$rss0" "$rss1" "$(( (rss1 - rss0) * 1024 / S_CONNS ))"
}

for scen in $SCENARIOS; do
    scenario "$scen"
    if ((S_MEMORY)) || [[ $S_KIND == idle ]]; then stop_kept; fi   # these start fresh servers of their own
    if ((S_MEMORY)); then
        memory_scenario "$scen"
    elif [[ $S_KIND == idle ]]; then
        idle_scenario "$scen"
    else
        load_scenario "$scen"
    fi
done
stop_kept
stop_db
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/header.txt"

# ---- report ----
python3 "$HERE/report.py" "$OUT" "$SERVERS" "$SCENARIOS" results.svg >"$OUT/results.md"
python3 "$HERE/chart.py" "$OUT/medians.tsv" "$SERVERS" "$SCENARIOS" >"$OUT/results.svg"
cat "$OUT/results.md"
echo
echo "results: $OUT/results.md, $OUT/results.tsv, $OUT/results.svg"
if [[ $DOCS == 1 ]]; then
    python3 "$HERE/report.py" "$OUT" "$SERVERS" "$SCENARIOS" benchmarks-kestrel.svg >"$ROOT/docs/benchmarks-kestrel.md"
    cp "$OUT/results.svg" "$ROOT/docs/benchmarks-kestrel.svg"
    echo "wrote docs/benchmarks-kestrel.md and docs/benchmarks-kestrel.svg"
fi
