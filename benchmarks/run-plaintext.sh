#!/usr/bin/env bash
# Load harness for the plain connection API (issue #3): HTTP/1.1 plaintext served by
#   iouring         benchmarks/PlaintextServer --transport iouring --loops 1   (IoUringNetwork, pipe continuations on the thread pool)
#   sockets         benchmarks/PlaintextServer --transport sockets             (Socket + NetworkStream pipes, completions on the thread pool)
#   iouring-inline  the same with --inline (IoUringNetworkOptions.UnsafePreferInlineScheduling)
#   sockets-inline  the same with DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS=1
#   c               benchmarks/c/plaintext_server (liburing, one ring, one thread: the ceiling)
# Each server is pinned to CPU 0 (taskset -c 0; the .NET ones then see one CPU, hence --loops 1), wrk to CPU 1.
# Interleaved rounds (server order rotated each round), non-pipelined and pipelined 16 deep; per round the server's
# utime+stime from /proc/PID/stat gives requests per server CPU-second. Prints a markdown table of medians.
#
#   benchmarks/run-plaintext.sh                      defaults: ROUNDS=5 DURATION=10 CONNECTIONS=256
#   ROUNDS=3 DURATION=5 SERVERS="iouring sockets c" benchmarks/run-plaintext.sh
# Environment: ROUNDS, DURATION (s per round), CONNECTIONS, WARMUP (s per warm-up step; steps repeat until the server
# stops compiling, at most WARMUP_MAX s per server and mode), SERVERS, MODES
# ("plain pipelined"), PORT_BASE, OUT (directory for raw wrk outputs and results.tsv; default a new temp dir),
# GENERATOR: wrk (default; `taskset -c 1 wrk -t1 -c256 -d10s --latency -s pipeline.lua URL -- DEPTH`) or loadgen
# (benchmarks/c/loadgen: one io_uring thread that counts responses by length instead of parsing them — several
# times cheaper per request than wrk, so the server on its one CPU can be saturated; same connections and depth).
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-256}
WARMUP=${WARMUP:-5}
WARMUP_MAX=${WARMUP_MAX:-120}
SERVERS=${SERVERS:-"iouring sockets iouring-inline sockets-inline c"}
MODES=${MODES:-"plain pipelined"}
PORT_BASE=${PORT_BASE:-18180}
GENERATOR=${GENERATOR:-wrk}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/plaintext-bench.XXXXXX)}
mkdir -p "$OUT"

# ---- tools ----
missing=()
command -v wrk >/dev/null || missing+=(wrk)
{ command -v gcc >/dev/null && command -v make >/dev/null; } || missing+=(build-essential)
dpkg -s liburing-dev >/dev/null 2>&1 || missing+=(liburing-dev)
command -v python3 >/dev/null || missing+=(python3)
command -v taskset >/dev/null || missing+=(util-linux)
if ((${#missing[@]})); then
    echo "installing with apt-get: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- build (Release) ----
echo "building benchmarks/PlaintextServer (Release) and benchmarks/c"
dotnet build -c Release -nologo -v q "$ROOT/benchmarks/PlaintextServer/PlaintextServer.csproj" >"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
make -s -C "$ROOT/benchmarks/c" >>"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
DOTNET_SERVER="$ROOT/benchmarks/PlaintextServer/bin/Release/net10.0/PlaintextServer"
C_SERVER="$ROOT/benchmarks/c/plaintext_server"
LOADGEN="$ROOT/benchmarks/c/loadgen"

# ---- wrk script: the TechEmpower request, repeated DEPTH times per write ----
cat >"$OUT/pipeline.lua" <<'EOF'
local depth = 1
init = function(args)
  depth = tonumber(args[1] or "1")
  local r = {}
  for i = 1, depth do
    r[i] = wrk.format("GET", "/plaintext", {
      ["Accept"] = "text/plain,text/html;q=0.9,application/xhtml+xml;q=0.9,application/xml;q=0.8,*/*;q=0.7",
      ["Connection"] = "keep-alive" })
  end
  req = table.concat(r)
end
request = function() return req end
EOF

# ---- servers ----
declare -A PID PORT
start_server() { # name port
    local name=$1 port=$2 log="$OUT/server-$1.log"
    case $name in
        iouring)        taskset -c 0 "$DOTNET_SERVER" --transport iouring --loops 1 --port "$port" >"$log" 2>&1 & ;;
        iouring-inline) taskset -c 0 "$DOTNET_SERVER" --transport iouring --loops 1 --inline --port "$port" >"$log" 2>&1 & ;;
        sockets)        taskset -c 0 "$DOTNET_SERVER" --transport sockets --port "$port" >"$log" 2>&1 & ;;
        sockets-inline) DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS=1 taskset -c 0 "$DOTNET_SERVER" --transport sockets --inline --port "$port" >"$log" 2>&1 & ;;
        c)              taskset -c 0 "$C_SERVER" "$port" >"$log" 2>&1 & ;;
        *) echo "unknown server $name"; exit 2 ;;
    esac
    PID[$name]=$!
    PORT[$name]=$port
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$name did not start:"; cat "$log"; exit 1; }
    echo "  $name: pid ${PID[$name]}, port $port, $(sed -n 2p "$log")"
}
stop_servers() {
    for name in "${!PID[@]}"; do kill "${PID[$name]}" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop_servers EXIT

cpu_ticks() { # utime + stime of the whole process (all threads), in clock ticks
    local stat
    stat=$(<"/proc/$1/stat")
    stat=${stat##*) }          # fields after the command name; $1 here is field 3 (state)
    set -- $stat
    echo $((${12} + ${13}))    # fields 14 and 15
}
cpu_lines() { # /proc/stat lines of CPU 0 and CPU 1, fields joined by commas, the two lines by a semicolon
    grep -E '^cpu[01] ' /proc/stat | tr ' ' ',' | paste -sd';'
}
server_stats() { # .NET servers print "alloc <GC.GetTotalAllocatedBytes> gc0 .. [enter .. wakeup .. sqe .. cqe ..]" on SIGHUP
    local name=$1 log="$OUT/server-$1.log" before
    [[ $name == c ]] && { echo "-"; return; }
    before=$(grep -c '^alloc ' "$log" || true)
    kill -HUP "${PID[$name]}"
    for _ in $(seq 50); do
        (( $(grep -c '^alloc ' "$log" || true) > before )) && break
        sleep 0.02
    done
    grep '^alloc ' "$log" | tail -1 || true
}
run_wrk() { # name mode seconds outfile: the load generator, pinned to CPU 1
    local depth=1
    [[ $2 == pipelined ]] && depth=16
    if [[ $GENERATOR == loadgen ]]; then
        taskset -c 1 "$LOADGEN" 127.0.0.1 "${PORT[$1]}" "$CONNECTIONS" "$depth" "$3" >"$4" 2>&1
        return
    fi
    taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$3s" --latency -s "$OUT/pipeline.lua" "http://127.0.0.1:${PORT[$1]}/plaintext" -- "$depth" >"$4" 2>&1
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, kernel $(uname -r), .NET $(dotnet --list-runtimes | sed -n 's/^Microsoft.NETCore.App \([^ ]*\).*/\1/p' | tail -1), $(dpkg -s liburing-dev | sed -n 's/^Version: /liburing /p'), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
echo "generator: $GENERATOR, $CONNECTIONS connections, ${DURATION}s x $ROUNDS rounds per server and mode"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw outputs: $OUT"
echo "starting servers (taskset -c 0):"
i=0
read -r -a server_list <<<"$SERVERS"
for name in "${server_list[@]}"; do start_server "$name" $((PORT_BASE + i)); i=$((i + 1)); done

# The .NET runtime keeps tiering code up (tier 0 -> instrumented -> tier 1) for tens of seconds under load, and on
# one busy CPU the background compiler lags further: a fixed few seconds measured half-compiled servers (and req/s
# can sit flat for 20 s before the tier-1 code lands). So warm each .NET server in WARMUP-second steps until a step
# compiles almost nothing new (the "jit" count of its SIGHUP stats grows by < 10), at most WARMUP_MAX seconds.
jit_count() { { server_stats "$1" || true; } | sed -n 's/.* jit \([0-9]*\).*/\1/p'; }
warm_up() { # name mode (the first stats request comes after a first step: a server just started may not handle SIGHUP yet)
    local before=-1000 after=0 elapsed=0
    while ((elapsed < WARMUP_MAX)); do
        run_wrk "$1" "$2" "$WARMUP" "$OUT/warmup-$1-$2.txt"
        elapsed=$((elapsed + WARMUP))
        [[ $1 == c ]] && break
        after=$(jit_count "$1")
        after=${after:-0}
        ((after - before < 10)) && break
        before=$after
    done
    echo "  $1 $2: warm after ${elapsed}s ($(sed -n 's/^Requests\/sec: *//p' "$OUT/warmup-$1-$2.txt") req/s in the last step, ${after} methods compiled)"
}
echo "warming up (steps of ${WARMUP}s until steady, at most ${WARMUP_MAX}s per server and mode)"
for name in "${server_list[@]}"; do
    for mode in $MODES; do warm_up "$name" "$mode"; done
done

CLK_TCK=$(getconf CLK_TCK)
printf 'round\tmode\tserver\twrk_out\tcpu_s\twall_s\tstats_before\tstats_after\tcpus_before\tcpus_after\n' >"$OUT/results.tsv"
for round in $(seq "$ROUNDS"); do
    for mode in $MODES; do
        # rotate the order each round so no server always runs first or last
        n=${#server_list[@]}
        for k in $(seq 0 $((n - 1))); do
            name=${server_list[$(((k + round - 1) % n))]}
            out="$OUT/round$round-$mode-$name.txt"
            a0=$(server_stats "$name")
            c0=$(cpu_lines)
            t0=$(cpu_ticks "${PID[$name]}")
            s0=$(date +%s.%N)
            run_wrk "$name" "$mode" "$DURATION" "$out"
            s1=$(date +%s.%N)
            t1=$(cpu_ticks "${PID[$name]}")
            c1=$(cpu_lines)
            a1=$(server_stats "$name")
            cpu=$(echo "scale=3; ($t1 - $t0) / $CLK_TCK" | bc)
            wall=$(echo "$s1 - $s0" | bc)
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$mode" "$name" "$out" "$cpu" "$wall" "$a0" "$a1" "$c0" "$c1" >>"$OUT/results.tsv"
            printf '  round %s %-9s %-15s %s req/s, server CPU %ss of %ss\n' "$round" "$mode" "$name" \
                "$(sed -n 's/^Requests\/sec: *//p' "$out")" "$cpu" "$wall"
        done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT/results.tsv" "$SERVERS" "$MODES" <<'EOF'
import csv, re, statistics, sys

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
servers, modes = sys.argv[2].split(), sys.argv[3].split()

def ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

def parse(path):
    t = open(path).read()
    total = int(re.search(r"(\d+) requests in", t).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
    p50 = ms(re.search(r"^\s+50%\s+(\S+)", t, re.M).group(1))
    p99 = ms(re.search(r"^\s+99%\s+(\S+)", t, re.M).group(1))
    if p99 < p50:
        p99 = float("nan")  # wrk's histogram sometimes prints 99% as 0.00us with pipelining
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", t))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    return total, rps, p50, p99, errors + (int(non2xx.group(1)) if non2xx else 0)

def counters(before, after):
    # "alloc 123 gc0 4 ... enter 5 wakeup 6 sqe 7 cqe 8" before and after the round -> deltas by name
    if before == "-" or after == "-":
        return {}
    b, a = before.split(), after.split()
    return {b[i]: int(a[i + 1]) - int(b[i + 1]) for i in range(0, len(b) - 1, 2)}

def cpu_shares(before, after, cpu):
    # shares of one CPU over the round from /proc/stat: (user+nice+system, irq+softirq, steal, all busy)
    b = [int(x) for x in before.split(";")[cpu].split(",")[1:] if x]
    a = [int(x) for x in after.split(";")[cpu].split(",")[1:] if x]
    d = [y - x for x, y in zip(b, a)]
    total = sum(d[:8]) or 1
    return (d[0] + d[1] + d[2]) / total, (d[5] + d[6]) / total, d[7] / total, (total - d[3] - d[4]) / total

stats = {}
for r in rows:
    total, rps, p50, p99, errors = parse(r["wrk_out"])
    cpu, wall = float(r["cpu_s"]), float(r["wall_s"])
    d = counters(r["stats_before"], r["stats_after"])
    per_req = lambda k: d[k] / total if k in d and total else float("nan")
    util = cpu / wall
    stats.setdefault((r["mode"], r["server"]), []).append(dict(
        rps=rps, per_cpu=total / cpu if cpu else 0.0, p50=p50, p99=p99, util=util, errors=errors,
        cpu0_other=max(0.0, cpu_shares(r["cpus_before"], r["cpus_after"], 0)[0] - util),
        cpu0_irq=cpu_shares(r["cpus_before"], r["cpus_after"], 0)[1],
        cpu0_steal=cpu_shares(r["cpus_before"], r["cpus_after"], 0)[2],
        cpu1_busy=cpu_shares(r["cpus_before"], r["cpus_after"], 1)[3],
        alloc=per_req("alloc"), enter=per_req("enter"), wakeup=per_req("wakeup"), bound=util < 0.9))

def med(key, xs):
    vals = [x[key] for x in xs if x[key] == x[key]]  # NaN-free
    return statistics.median(vals) if vals else float("nan")
print()
print("| mode | server | req/s | req per server CPU-s | vs sockets (CPU-s) | vs C (CPU-s) | p50 ms | p99 ms | server CPU | CPU 0: other tasks / softirq / steal | CPU 1 busy | generator-bound rounds | alloc B/req | io_uring_enter/req | wakeups/req | errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for mode in modes:
    base = stats.get((mode, "sockets"))
    ceiling = stats.get((mode, "c"))
    for s in servers:
        xs = stats.get((mode, s))
        if not xs:
            continue
        per_cpu = med("per_cpu", xs)
        vs_sockets = f"{per_cpu / med('per_cpu', base):.2f}x" if base else "-"
        vs_c = f"{per_cpu / med('per_cpu', ceiling):.0%}" if ceiling else "-"
        fmt = lambda k, f: "-" if med(k, xs) != med(k, xs) else format(med(k, xs), f)
        alloc, enter, wakeup = fmt("alloc", ".2f"), fmt("enter", ".3f"), fmt("wakeup", ".3f")
        print(f"| {mode} | {s} | {med('rps', xs):,.0f} | {per_cpu:,.0f} | {vs_sockets} | {vs_c} | {med('p50', xs):.2f} | {med('p99', xs):.2f} "
              f"| {med('util', xs):.0%} | {med('cpu0_other', xs):.0%} / {med('cpu0_irq', xs):.0%} / {med('cpu0_steal', xs):.0%} | {med('cpu1_busy', xs):.0%} | {sum(x['bound'] for x in xs)}/{len(xs)} | {alloc} | {enter} | {wakeup} | {sum(x['errors'] for x in xs)} |")
print()
print("Medians over rounds. req/s and latency from the generator; server CPU = (utime+stime)/wall from /proc/PID/stat;")
print("a round with server CPU < 90% of one CPU is generator-bound (wrk, or the machine's other load, was the limit).")
print("CPU 0 (the server's, /proc/stat): other tasks = user+system time not the server's; softirq = irq+softirq (network")
print("processing, partly the server's own, not in its utime+stime); steal = taken by the hypervisor. CPU 1 busy: wrk and anything else.")
print("Ratios compare medians of requests per server CPU-second (per_cpu ratio of each server's median).")
EOF
