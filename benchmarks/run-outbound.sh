#!/usr/bin/env bash
# Outbound benchmarks (issue #20): io_uring as a client, against the same client on sockets, in one run.
#   httpclient  benchmarks/HttpClientLoad on CPU 1: HttpClient with SocketsHttpHandler.UseIoUring and with the default
#               SocketsHttpHandler, in one process, measured windows alternating (ABBA), GET /plaintext from
#               samples/KestrelSample on Kestrel Sockets (CPU 0). Figure: responses per client CPU-second.
#   yarp        samples/YarpProxy on CPU 1, on io_uring both ways and on Sockets both ways (two processes, measured
#               windows alternating), in front of samples/KestrelSample on Kestrel Sockets (CPU 0); wrk on CPU 0
#               through the proxy, GET /plaintext. Figure: proxied requests per proxy CPU-second (utime+stime of the
#               proxy process over the window, /proc/PID/stat).
# Each client or proxy is warmed up WARMUP s (past tier-0 JIT) before the first measured window.
#
#   benchmarks/run-outbound.sh                      defaults: ROUNDS=6 WINDOW=10 WARMUP=30 CONNECTIONS=64
#   ROUNDS=2 WINDOW=3 WARMUP=5 SCENARIOS=yarp benchmarks/run-outbound.sh
# PROXY_BUILD=path/to/YarpProxy.dll measures that build's io_uring proxy as "iouring" (an A/B of two commits: build
# the other commit's samples/YarpProxy with -c Release in a worktree).
# Output in OUT (default a new temp dir): httpclient.tsv, yarp.tsv (one row per window), summary.md, server logs.
set -Eeuo pipefail
trap 'echo "run-outbound.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-6}
WINDOW=${WINDOW:-10}
WARMUP=${WARMUP:-30}
CONNECTIONS=${CONNECTIONS:-64}
SCENARIOS=${SCENARIOS:-"httpclient yarp"}
OUT=${OUT:-$(mktemp -d /tmp/run-outbound.XXXXXX)}
mkdir -p "$OUT"
HZ=$(getconf CLK_TCK)

if ! command -v wrk >/dev/null; then
  echo "installing wrk"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
for project in samples/KestrelSample samples/YarpProxy benchmarks/HttpClientLoad; do
  dotnet build -c Release -v q -nologo "$project" >/dev/null
done
bin() { echo "$1/bin/Release/net10.0/$(basename "$1").dll"; }

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

start() { # cpu log args...: a .NET app pinned to a CPU, in the background; sets STARTED
  local cpu=$1 log=$2; shift 2
  taskset -c "$cpu" dotnet "$@" >"$OUT/$log" 2>&1 &
  STARTED=$!
  PIDS+=("$STARTED")
}
wait_for() { # url
  for _ in $(seq 100); do curl -fs -o /dev/null "$1" && return 0; sleep 0.2; done
  echo "no answer from $1" >&2; return 1
}
cpu_ticks() { local stat; stat=$(<"/proc/$1/stat"); stat=${stat##*) }; set -- $stat; echo $(( ${12} + ${13} )); }

echo "machine: $(nproc) CPUs, $(uname -r); load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.md"
echo "ROUNDS=$ROUNDS WINDOW=$WINDOW WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS" | tee -a "$OUT/summary.md"

start 0 backend.log "$(bin samples/KestrelSample)" --transport sockets --urls http://127.0.0.1:5700
wait_for http://127.0.0.1:5700/plaintext

if [[ " $SCENARIOS " == *" httpclient "* ]]; then
  echo "== httpclient"
  taskset -c 1 dotnet "$(bin benchmarks/HttpClientLoad)" --url http://127.0.0.1:5700/plaintext --connections "$CONNECTIONS" \
    --warmup "$WARMUP" --window "$WINDOW" --rounds "$ROUNDS" | tee "$OUT/httpclient.tsv"
fi

if [[ " $SCENARIOS " == *" yarp "* ]]; then
  echo "== yarp"
  declare -A PROXY_PID PROXY_PORT=([iouring]=5701 [sockets]=5702)
  for name in iouring sockets; do
    dll=$(bin samples/YarpProxy); [ "$name" = iouring ] && dll=${PROXY_BUILD:-$dll}
    start 1 "proxy-$name.log" "$dll" --backend http://127.0.0.1:5700 --transport "$name" \
      --urls "http://127.0.0.1:${PROXY_PORT[$name]}"
    PROXY_PID[$name]=$STARTED
    wait_for "http://127.0.0.1:${PROXY_PORT[$name]}/plaintext"
  done
  for name in iouring sockets; do
    grep -q "^Inbound: $([ $name = iouring ] && echo io_uring || echo Sockets), outbound: $([ $name = iouring ] && echo io_uring || echo Sockets)" "$OUT/proxy-$name.log" \
      || { echo "proxy $name does not run as asked:"; cat "$OUT/proxy-$name.log"; exit 1; }
    echo "warming up proxy $name for $WARMUP s"
    taskset -c 0 wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" "http://127.0.0.1:${PROXY_PORT[$name]}/plaintext" >/dev/null
  done
  printf 'round\tproxy\tseconds\trequests\tcpu_s\tper_cpu_s\terrors\n' | tee "$OUT/yarp.tsv"
  for round in $(seq "$ROUNDS"); do
    order="iouring sockets"; (( round % 2 == 0 )) && order="sockets iouring"
    for name in $order; do
      pid=${PROXY_PID[$name]}
      t0=$(cpu_ticks "$pid"); s0=$(date +%s.%N)
      taskset -c 0 wrk -t1 -c"$CONNECTIONS" -d"${WINDOW}s" "http://127.0.0.1:${PROXY_PORT[$name]}/plaintext" >"$OUT/wrk-$name-$round.txt"
      s1=$(date +%s.%N); t1=$(cpu_ticks "$pid")
      requests=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$OUT/wrk-$name-$round.txt")
      errors=$(sed -n 's/.*Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p' "$OUT/wrk-$name-$round.txt"); errors=${errors:-0}
      python3 -c "import sys; r,t,s,hz=int(sys.argv[1]),int(sys.argv[2]),float(sys.argv[3]),int(sys.argv[4]); c=t/hz; print('\t'.join([sys.argv[5],sys.argv[6],f'{s:.3f}',str(r),f'{c:.3f}',f'{r/c:.1f}',sys.argv[7]]))" \
        "$requests" $((t1 - t0)) "$(echo "$s1 - $s0" | bc)" "$HZ" "$round" "$name" "$errors" | tee -a "$OUT/yarp.tsv"
    done
  done
fi

python3 - "$OUT" >>"$OUT/summary.md" <<'PY'
import csv, os, statistics, sys
out = sys.argv[1]
for scenario, column in (("httpclient", "client"), ("yarp", "proxy")):
    path = os.path.join(out, scenario + ".tsv")
    if not os.path.exists(path):
        continue
    rows = [r for r in csv.DictReader((l for l in open(path) if not l.startswith("#")), delimiter="\t")]
    by_round = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r[column]] = float(r["per_cpu_s"])
    ratios = sorted(v["iouring"] / v["sockets"] for v in by_round.values() if len(v) == 2)
    med = {n: statistics.median(float(r["per_cpu_s"]) for r in rows if r[column] == n) for n in ("iouring", "sockets")}
    rate = {n: statistics.median(int(r[next(k for k in r if k in ("responses", "requests"))]) / float(r["seconds"]) for r in rows if r[column] == n) for n in ("iouring", "sockets")}
    errors = sum(int(r["errors"]) for r in rows)
    print(f"\n{scenario}: per CPU-second io_uring {med['iouring']:.0f}, sockets {med['sockets']:.0f}; "
          f"per-round ratio median {statistics.median(ratios):.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f}, {len(ratios)} rounds); "
          f"rate io_uring {rate['iouring']:.0f}/s, sockets {rate['sockets']:.0f}/s; errors {errors}")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/summary.md"
cat "$OUT/summary.md"
echo "results in $OUT"
