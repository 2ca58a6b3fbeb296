# Memory scenarios of benchmarks/run-kestrel.sh (issue #38; sourced by it, not run on its own): how much memory each
# server takes under slow or many clients, and how much of it it gives back once they are gone. They are not in the
# default SCENARIOS: run them by name (N: the connection count, N or Nk), e.g.
#   ROUNDS=1 SCENARIOS="slowread-800 slowloris-800 slowbody-800 bigdownload-512 idlemem-10k idlews-10k" \
#       SERVERS="iouring sockets iouring-kestrelpool" benchmarks/run-kestrel.sh
#
#   slowread-N     slowhttptest -X (slow reader): N connections, each 3 pipelined GET /download?size=10000000 read
#                  32 bytes every 5 s through a receive window of 512-1024 bytes; 200 new connections/s, 20 s
#   slowloris-N    slowhttptest -H (slow headers): N GET /plaintext whose headers never end, a header line every 10 s;
#                  200 new connections/s, 20 s
#   slowbody-N     slowhttptest -B (slow body): N POST /upload announcing an 8192-byte body that trickles in, a few
#                  bytes every 10 s; 200 new connections/s, 20 s. Kestrel ends each after ~5-6 s (MinRequestBodyDataRate:
#                  240 bytes/s after a 5 s grace; the server logs a "fail:" for each) and slowhttptest stops once none
#                  is left: the load's middle is taken as 1 s after the last connection opened (N / 200 s), not 10 s
#   bigdownload-N  wrk, N connections of GET /download?size=4194304, 15 s
#   idlemem-N      benchmarks/c/idle_conns: N keep-alive connections, one GET /plaintext each, held 15 s, then closed
#   idlews-N       idle_conns websocket: N WebSockets to /ws (the upgrade, then idle), held 15 s, then closed with a
#                  close frame each
#
# Per round each server on its own, fresh, warmed up (fresh_server_rounds in run-kestrel.sh); then: VmRSS and the
# sample's GET /_memory (--stats: rss, gc.*, IoUring's and Kestrel's memory-pool and zero-copy instruments) before;
# the load from CPU 1 with the server's VmRSS sampled every second (the peak: their maximum until the client is gone;
# VmHWM too); /_memory and the server's open sockets once in the middle of the load (S_PEAK_S after it started; idle
# ones: after every connection was open); VmRSS,
# /_memory and sockets again MEMORY_AFTER s (default 30) after the client exited.
# Files per round in OUT: SCENARIO-roundR-SERVER.txt (the client's output) and, beside it, .rss (the samples: epoch
# seconds, VmRSS KiB), .memory-before, .memory-peak, .memory-after (/_memory). One row per round in measurements.tsv;
# report.py reads the /_memory files it names for results.tsv and the memory table of results.md.

MEMORY_AFTER=${MEMORY_AFTER:-30}
[[ $MEMORY_AFTER == 30 ]] || COMMAND="MEMORY_AFTER=$MEMORY_AFTER $COMMAND"   # the run's command, as the header gives it

memory_kind() { # kind: S_PATH, S_GEN, S_LOAD_S (the load's seconds; idle ones: the hold), S_PEAK_S (when to sample
    # the peak) and S_MEMORY=1 for a memory scenario's kind (S_CONNS set); fails for any other kind
    case $1 in
        slowread)    S_PATH="/download?size=10000000" S_GEN=slowhttptest S_LOAD_S=20 ;;
        slowloris)   S_PATH=/plaintext S_GEN=slowhttptest S_LOAD_S=20 ;;
        slowbody)    S_PATH=/upload S_GEN=slowhttptest S_LOAD_S=20 ;;
        bigdownload) S_PATH="/download?size=4194304" S_GEN=wrk S_LOAD_S=15 ;;
        idlemem)     S_PATH=/plaintext S_GEN=idle_conns S_LOAD_S=15 ;;
        idlews)      S_PATH=/ws S_GEN=idle_conns S_LOAD_S=15 ;;
        *) return 1 ;;
    esac
    S_PEAK_S=$((S_LOAD_S / 2))
    [[ $1 == slowbody ]] && S_PEAK_S=$(( (S_CONNS + 199) / 200 + 1 < S_PEAK_S ? (S_CONNS + 199) / 200 + 1 : S_PEAK_S ))
    S_MEMORY=1 S_C=0
}

memory_report() { curl -s --max-time 5 "$(base_url "$1")/_memory" || true; }   # name: the sample's "name value" lines

start_memory_load() { # name out: the scenario's client on CPU 1, in the background (GEN); idle ones return once every
    # connection is open
    local mode
    case $S_KIND in
        slowread)    mode=(-X -w 512 -y 1024 -n 5 -z 32 -k 3) ;;
        slowloris)   mode=(-H -i 10) ;;
        slowbody)    mode=(-B -i 10 -s 8192) ;;
        bigdownload) start_generator "$1" "$S_LOAD_S" "$2"; return ;;
        idlemem)     open_idle "$1" "$2"; GEN=$CLIENT; return ;;
        idlews)      open_idle "$1" "$2" websocket; GEN=$CLIENT; return ;;
    esac
    # slowhttptest ends its test after -l seconds; timeout keeps a stuck one from holding up the run
    taskset -c 1 timeout -k 5 $((S_LOAD_S + 30)) slowhttptest "${mode[@]}" -c "$S_CONNS" -r 200 -l "$S_LOAD_S" \
        -u "$(base_url "$1")$S_PATH" >"$2" 2>&1 &
    GEN=$!; LIVE[$GEN]=1
}

memory_scenario() {
    echo "== $1 ($(date +%H:%M:%S)): $S_CONNS connections, $S_GEN, $S_PATH, ${S_LOAD_S} s; memory before, at the peak and ${MEMORY_AFTER} s after (open files limit $(ulimit -n))"
    (( $(ulimit -n) > S_CONNS + 500 )) || { echo "  ulimit -n $(ulimit -n) is too low for $S_CONNS connections: skipped"; return; }
    fresh_server_rounds "$1" memory_round
}

memory_round() { # scenario name round out
    local name=$2 out=$4 p=${PID[$2]} rss0 peak hwm rss1 sock0 sock1 sock2 a0 a1 c0 c1 t0 t1 sampler
    rss0=$(rss_kib "$p"); sock0=$(sockets_open "$p"); a0=$(allocated "$name")
    memory_report "$name" >"$out.memory-before"
    ( while :; do echo "$EPOCHREALTIME $(rss_kib "$p")"; sleep 1; done ) >"$out.rss" &
    sampler=$!; LIVE[$sampler]=1
    t0=$EPOCHREALTIME; c0=$(cpu_ticks "$p"); OPENED=-
    start_memory_load "$name" "$out"
    sleep "$S_PEAK_S"
    sock1=$(sockets_open "$p"); memory_report "$name" >"$out.memory-peak"
    if [[ $S_GEN == idle_conns ]]; then sleep $((S_LOAD_S - S_PEAK_S)); reap "$GEN"; else finish_generator; fi
    t1=$EPOCHREALTIME; c1=$(cpu_ticks "$p"); hwm=$(rss_kib "$p" VmHWM); peak=$(rss_kib "$p")
    sleep "$MEMORY_AFTER"
    rss1=$(rss_kib "$p"); sock2=$(sockets_open "$p"); a1=$(allocated "$name")
    memory_report "$name" >"$out.memory-after"
    reap "$sampler"
    peak=$(awk -v end="$t1" -v max="$peak" '$1 <= end && $2 > max { max = $2 } END { print max }' "$out.rss")   # and at the end
    row "$1" "$3" "$name" "$S_GEN" "$S_CONNS" 1 "$S_PATH" - "$out" "$(echo "scale=3; ($c1 - $c0) / $CLK_TCK" | bc)" \
        "$(echo "$t1 - $t0" | bc)" "$a0" "$a1" "$rss0" "$peak" "$sock0" "$sock1" "$OPENED" - - - - - - - "$rss1" "$hwm" "$sock2" "$MEMORY_AFTER"
    printf '  round %s %-19s %5s connections at the peak; RSS %4s MiB before, %4s at the peak, %4s %ss after\n' "$3" "$name" \
        "$((sock1 - sock0))" "$((rss0 / 1024))" "$((peak / 1024))" "$((rss1 / 1024))" "$MEMORY_AFTER"
}
