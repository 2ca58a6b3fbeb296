#!/usr/bin/env python3
"""Report of benchmarks/run-kestrel.sh (standard library only).

    report.py OUT "SERVERS" "SCENARIOS" SVG_NAME > results.md

Reads OUT/measurements.tsv (written by the harness, one row per round) and the generator outputs it names, writes
OUT/results.tsv (the same rounds with the parsed and derived numbers), OUT/medians.tsv (for chart.py) and prints the
markdown tables of medians, with ratios against the `sockets` server of the same run.
"""
import csv
import glob
import os
import re
import statistics
import sys

NAN = float("nan")
UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}
SIZES = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}
SCENARIO_TEXT = {
    "plaintext": "GET /plaintext, one request at a time per connection",
    "pipelined": "GET /plaintext, 16 requests per write (TechEmpower plaintext)",
    "json": "GET /json",
    "download": "GET /download?size=N, 64 connections",
    "static": "GET /static/fN.bin: UseStaticFiles over an N-byte file of random bytes (SendFileAsync), 64 connections, 16 for 16m",
    "file": "GET /file/fN.bin: Results.File over an N-byte file of random bytes (SendFileAsync), 64 connections",
    "upload": "POST /upload with an N-byte body the app reads to its end, 64 connections",
    "churn": "GET /plaintext with `Connection: close`: one connection per request",
    "churnidle": "churn with 64 connections while N idle keep-alive connections stay open on the server",
    "idle": "keep-alive connections, one request each, then held idle",
    "tls": "GET /plaintext over TLS (HTTP/1.1, wrk)",
    "h2c": "GET /plaintext over HTTP/2 with prior knowledge, cleartext (h2load; CxS: connections x streams each)",
    "h2": "GET /plaintext over HTTP/2 on TLS (h2load; CxS: connections x streams each)",
    "rate": "GET /plaintext over HTTP/1.1 keep-alive, 64 connections, at P% of the sockets server's maximum rate (h2load --h1 --rps)",
    "db": "TechEmpower single query: GET /db, one random world row as JSON (PostgreSQL through Npgsql, the sample's --db)",
    "queries": "TechEmpower multiple queries: GET /queries?queries=20, 20 rows, one query each, on one pooled connection",
    "fortunes": "TechEmpower fortunes: GET /fortunes, the 12 fortune rows and one added, sorted, as an HTML-encoded table",
    "updates": "TechEmpower updates: GET /updates?queries=20, 20 rows read, each given a new number, written back in one UPDATE",
    "slowread": "slowhttptest -X: slow readers of GET /download?size=10000000 (3 per connection, 32 B read every 5 s), 20 s",
    "slowloris": "slowhttptest -H: GET /plaintext with headers that trickle in (a line every 10 s), 20 s",
    "slowbody": "slowhttptest -B: POST /upload of 8192 bytes that trickle in (every 10 s), 20 s; Kestrel ends each after ~5 s (MinRequestBodyDataRate), so the peak is sampled 1 s after the last one opened",
    "bigdownload": "wrk, GET /download?size=4194304, 15 s",
    "idlemem": "keep-alive connections, one GET /plaintext each, held 15 s, then closed",
    "idlews": "WebSockets to /ws (upgrade, then idle), held 15 s, then closed",
}
DB_KINDS = ("db", "queries", "fortunes", "updates")  # on PostgreSQL: the rows have the database's CPU (db_cpu_s)
MEMORY_KINDS = ("slowread", "slowloris", "slowbody", "bigdownload", "idlemem", "idlews")  # benchmarks/kestrel/memory.sh
MIB = 1024.0 ** 2
MEMORY_MIB = ["rss_peak", "rss_hwm", "rss_after", "pool_used_before", "pool_used_peak", "pool_used_after", "pool_registered_before",
              "pool_registered_peak", "pool_registered_after", "kestrel_pool_peak", "kestrel_pool_after", "gc_heap_before", "gc_heap_peak",
              "gc_heap_after", "gc_committed_peak", "gc_committed_after", "poh_peak", "poh_after", "allocated"]  # memory_round's, in MiB


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return NAN


def ms(text):
    m = re.match(r"([\d.]+)(us|ms|s|m|h)$", text)
    return float(m.group(1)) * UNITS[m.group(2)] if m else NAN


def percentile(sorted_values, pct):
    if not sorted_values:
        return NAN
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * pct / 100))]


def parse_h2load(path, text):
    """h2load output, and its --log-file (PATH.log: start us, status, response time us per request) for percentiles."""
    r = dict(requests=0, rps=0.0, p50=NAN, p99=NAN, p999=NAN, read=NAN, errors=0)
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", text)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", text)
    if m:
        r["requests"] = int(m.group(1))
        r["errors"] += int(m.group(2)) + int(m.group(3)) + int(m.group(4))
    m = re.search(r"status codes: \d+ 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if m:
        r["errors"] += sum(int(x) for x in m.groups())
    m = re.search(r"traffic: [\d.]+\w* \((\d+)\) total", text)
    if m:
        r["read"] = float(m.group(1))
    try:
        times = sorted(int(line.split("\t")[2]) / 1000.0 for line in open(path + ".log") if line.count("\t") >= 2)
    except (OSError, ValueError):
        times = []
    r["p50"], r["p99"], r["p999"] = percentile(times, 50), percentile(times, 99), percentile(times, 99.9)
    return r


def parse_generator(path):
    """wrk --latency, h2load or benchmarks/c/loadgen output -> dict (NaN/0 where absent)."""
    try:
        text = open(path, errors="replace").read()
    except OSError:
        text = ""
    if text.startswith("starting benchmark...") or "\nfinished in " in text:
        return parse_h2load(path, text)
    r = dict(requests=0, rps=0.0, p50=NAN, p99=NAN, p999=NAN, read=NAN, errors=0)
    m = re.search(r"(\d+) requests in [\d.]+\w+, ([\d.]+)([KMGT]?B) read", text)
    if m:
        r["requests"], r["read"] = int(m.group(1)), float(m.group(2)) * SIZES[m.group(3)]
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if m:
        r["rps"] = float(m.group(1))
    for key, pct in (("p50", "50"), ("p99", "99")):
        m = re.search(rf"^\s+{pct}%\s+(\S+)", text, re.M)
        if m:
            r[key] = ms(m.group(1))
    if r["p99"] < r["p50"]:
        r["p99"] = NAN  # wrk's histogram sometimes prints 99% as 0.00us with pipelining
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        r["errors"] += sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        r["errors"] += int(m.group(1))
    return r


def is_memory(scenario):
    return scenario.split("-")[0] in MEMORY_KINDS


def memory_round(row):
    """A memory scenario's round: the harness's VmRSS samples (KiB) and the sample's GET /_memory before, in the middle
    of the load (peak) and after it (files beside the client's output), in MiB."""
    def report(when):
        try:
            lines = [line.split() for line in open(f"{row['out']}.memory-{when}")]
        except OSError:
            return {}
        return {p[0]: number(p[1]) for p in lines if len(p) == 2}

    def kestrel_pool(m):  # what Kestrel's pool holds, rented or pooled: bytes it allocated less those it evicted
        allocated = m.get("aspnetcore.memory_pool.allocated")
        return NAN if allocated is None else (allocated - m.get("aspnetcore.memory_pool.evicted", 0.0)) / MIB

    kib = lambda column: number(row.get(column)) / 1024
    before, peak, after = report("before"), report("peak"), report("after")
    d = dict(conns_peak=number(row["sockets"]) - number(row["sockets_before"]), sockets_after=number(row.get("sockets_after")) - number(row["sockets_before"]),
             rss_before=kib("rss_before_kib"), rss_peak=kib("rss_kib"), rss_hwm=kib("rss_hwm_kib"), rss_after=kib("rss_after_kib"),
             after_s=number(row.get("after_s")), cpu_s=number(row["cpu_s"]), wall_s=number(row["wall_s"]), open_s=number(row["open_s"]),
             kestrel_pool_peak=kestrel_pool(peak), kestrel_pool_after=kestrel_pool(after), memory_report=bool(peak))
    for key, name in (("gc_heap", "gc.heap"), ("gc_committed", "gc.committed"), ("poh", "gc.poh"),
                      ("pool_used", "iouring.memory_pool.used"), ("pool_registered", "iouring.memory_pool.registered")):
        for when, m in (("before", before), ("peak", peak), ("after", after)):
            d[f"{key}_{when}"] = m.get(name, NAN) / MIB
    d["allocated"] = (number(row["alloc_after"]) - number(row["alloc_before"])) / MIB   # managed, from before to after
    # zero-copy sends so far, and those the kernel copied after all
    d["zc_sends"] = after.get("iouring.connection.zero_copy.sends", NAN)
    d["zc_copied"] = after.get("iouring.connection.zero_copy.copied", NAN)
    return d


def fail_logs(out, scenario, server):
    """Lines logged at Error level ("fail: ...") by the server during the scenario (warm-up included)."""
    count = 0
    for path in glob.glob(os.path.join(out, f"server-{scenario}-{server}.log")) + \
            glob.glob(os.path.join(out, f"server-{scenario}-round*-{server}.log")):
        count += sum(1 for line in open(path, errors="replace") if line.startswith("fail:"))
    return count


def median(values):
    values = [v for v in values if v == v]
    return statistics.median(values) if values else NAN


def per_round(xs, base, key, server):
    """key's ratio to the `sockets` server's taken round by round (each round's pair measured seconds apart, so the
    machine's drift between rounds does not move it): "median (lowest–highest)", or — for sockets itself."""
    base_by_round = {b["round"]: b[key] for b in base or []}
    ratios = [x[key] / base_by_round[x["round"]] for x in xs if base_by_round.get(x["round"])]
    if not ratios or server == "sockets":
        return "—"
    return f"{median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"


def fmt(value, spec, dash="—"):
    return dash if value != value else format(value, spec)


def table_start(title, columns):
    """A markdown table's title and head: scenario and server left-aligned, the numbers right-aligned."""
    print(f"## {title}")
    print()
    print("| " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * (len(columns) - 2))


def memory_table(scenarios, servers, by, out):
    med = lambda key, xs: median([x[key] for x in xs])
    after_s = median([x["after_s"] for s in scenarios for v in servers for x in by.get((s, v), [])])
    after = f"{after_s:.0f} s after" if after_s == after_s else "after"
    table_start("Memory", ["scenario", "server", "connections at the peak", "RSS before MiB", "peak RSS MiB", "peak vs sockets",
                f"RSS {after} MiB", f"{after} vs sockets", "pool used MiB at the peak", "registered MiB at the peak",
                "registered MiB after", "Kestrel pool MiB at the peak", "Kestrel pool MiB after",
                "GC heap MiB at the peak", "server fail logs"])
    for scen in scenarios:
        base = by.get((scen, "sockets"))
        for s in servers:
            xs = by.get((scen, s))
            if not xs:
                continue
            ratio = lambda key: fmt(med(key, xs) / med(key, base), ".2f") + "×" if base and s != "sockets" else "—"
            conns = f"{min(x['conns_peak'] for x in xs):,.0f}" + ("" if all(x["memory_report"] for x in xs) else " (no /_memory!)")
            print(f"| {scen} | {s} | {conns} | {med('rss_before', xs):.0f} | {med('rss_peak', xs):.0f} | {ratio('rss_peak')} "
                  f"| {med('rss_after', xs):.0f} | {ratio('rss_after')} | {fmt(med('pool_used_peak', xs), '.1f')} "
                  f"| {fmt(med('pool_registered_peak', xs), '.1f')} | {fmt(med('pool_registered_after', xs), '.1f')} "
                  f"| {fmt(med('kestrel_pool_peak', xs), '.1f')} | {fmt(med('kestrel_pool_after', xs), '.1f')} "
                  f"| {fmt(med('gc_heap_peak', xs), '.1f')} | {fail_logs(out, scen, s)} |")
    print()
    print("Per round a fresh server (CPU 0), warmed up with GET /plaintext on 64 connections, then the scenario's client")
    print("(CPU 1; see `benchmarks/kestrel/memory.sh`). **connections at the peak**: the server's open sockets in the middle")
    print("of the load less those before (the lowest round). **RSS**: the server's VmRSS before the load; **peak**: the")
    print("highest of its samples, one a second, until the client was gone (results.tsv also has VmHWM); **after**: once")
    print("the client had exited and the server sat idle that long. **vs sockets**: over the `sockets` server's (lower is")
    print("better). From the sample's GET /_memory (`--stats`), read once in the middle of the load (the peak) and again")
    print("after: **pool used**: bytes rented from the io_uring loops' pools (`iouring.memory_pool.used`); **registered**:")
    print("bytes the loops registered with their rings (`iouring.memory_pool.registered`); **Kestrel pool**: what Kestrel's")
    print("pinned-block pool holds, rented or pooled (`aspnetcore.memory_pool.allocated` less `.evicted`; Sockets, and io_uring")
    print("with `--kestrel-pool`); **GC heap**: the managed heap after the last GC (`GCMemoryInfo.HeapSizeBytes`; 0 before the")
    print("first). — : the server has no such instrument. Medians over the rounds; every sample is in results.tsv.")
    print()


def main():
    out, servers, scenarios, svg = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
    rows = list(csv.DictReader(open(os.path.join(out, "measurements.tsv")), delimiter="\t"))
    rounds, failed = [], {}
    for row in rows:
        if row["round"] == "0":  # the probe found a wrong response: not measured
            failed[(row["scenario"], row["server"])] = row["probe"]
            continue
        d = dict(scenario=row["scenario"], round=int(row["round"]), server=row["server"], generator=row["generator"],
                 connections=int(row["connections"]), depth=int(row["depth"]), path=row["path"], out=row["out"])
        a0, a1 = number(row["alloc_before"]), number(row["alloc_after"])
        if is_memory(row["scenario"]):
            d.update(memory_round(row))
        elif row["generator"] == "idle_conns":
            n = d["connections"]
            ready = re.search(r"^ready (\d+) connections", open(row["out"], errors="replace").read(), re.M)
            d.update(held=int(row["sockets"]) - int(row["sockets_before"]), ready=bool(ready),
                     rss_before=number(row["rss_before_kib"]) / 1024, rss=number(row["rss_kib"]) / 1024,
                     kib_per_conn=(number(row["rss_kib"]) - number(row["rss_before_kib"])) / n,
                     alloc_per_conn=(a1 - a0) / n, open_s=number(row["open_s"]))
        else:
            g = parse_generator(row["out"])
            cpu, wall, expected = number(row["cpu_s"]), number(row["wall_s"]), number(row["probe"])
            requests = g["requests"]
            per_resp = g["read"] / requests if requests else NAN
            d.update(requests=requests, rps=g["rps"], per_cpu=requests / cpu if cpu > 0 else NAN, p50=g["p50"],
                     p99=g["p99"], p999=g["p999"], target_rate=number(row.get("target_rate")), cpu_s=cpu, wall_s=wall, util=cpu / wall if wall > 0 else NAN,
                     alloc=(a1 - a0) / requests if requests else NAN, rss=number(row["rss_kib"]) / 1024,
                     bytes_per_resp=per_resp, expected_bytes=expected, errors=g["errors"])
            d["bound"] = d["util"] < 0.9
            # the CPU of the thread pool's workers and of the transport's I/O threads (loops, epoll), per wall second
            parts = (row.get("threads_s") or "").split("/")
            # The workers' share is the process's CPU less its I/O and other threads': a worker that exits in the
            # window (the pool retires idle ones) takes its per-thread ticks with it, but not the process's.
            pool, io = (max(0.0, cpu - number(parts[1]) - number(parts[2])), number(parts[1])) if len(parts) == 3 else (NAN, NAN)
            d["pool_util"], d["io_util"] = (pool / wall, io / wall) if wall > 0 else (NAN, NAN)
            # thread-pool work items and context switches per request ("before/after"; older runs have neither)
            for key, column in (("pool_items", "pool_items"), ("ctxsw", "ctx_switches")):
                pair = (row.get(column) or "").split("/")
                d[key] = ((number(pair[1]) - number(pair[0])) / requests
                          if len(pair) == 2 and requests else NAN)
            # the thread pool's workers at the window's start, middle and end ("-" from older runs), and whether the
            # window started from a dropped page cache (COLD_CACHE=1)
            threads = (row.get("pool_threads") or "").split("/")
            d["pool_threads"] = max(number(t) for t in threads[1:]) if len(threads) == 3 else NAN
            d["pool_threads_added"] = d["pool_threads"] - number(threads[0]) if len(threads) == 3 else NAN
            d["cache"] = row.get("cache") or ""
            d["cpu0_other"] = max(0.0, number(row["cpu0_busy"]) - d["util"])
            d["cpu0_softirq"] = number(row["cpu0_softirq"])
            d["steal"] = number(row.get("steal") or "nan")   # older runs have no steal column
            # wrk's "MB read" has 3 significant digits; a few % off means responses of another size
            # (HTTP/2 scenarios have no expected size: their probe is curl's)
            # the database tests' PostgreSQL (all its processes, on CPU 1) over the window; "-" or absent elsewhere
            d["db_cpu"] = number(row.get("db_cpu_s"))
            d["db_util"] = d["db_cpu"] / wall if wall > 0 else NAN
            d["db_ms_per_req"] = d["db_cpu"] * 1000 / requests if requests else NAN
            d["size_ok"] = requests > 0 and (expected != expected or abs(per_resp - expected) <= 0.05 * expected)
        rounds.append(d)

    columns = ["scenario", "round", "server", "generator", "connections", "depth", "path", "target_rate", "requests", "rps", "per_cpu",
               "p50", "p99", "p999", "cpu_s", "wall_s", "util", "pool_util", "io_util", "pool_items", "pool_threads", "pool_threads_added", "cache", "ctxsw", "cpu0_other", "cpu0_softirq", "steal", "bound", "alloc", "rss", "bytes_per_resp", "expected_bytes",
               "size_ok", "errors", "held", "ready", "rss_before", "kib_per_conn", "alloc_per_conn", "open_s",
               # memory scenarios: connections at the peak and sockets still open after (server sockets above those before)
               "conns_peak", "sockets_after", "after_s"] + MEMORY_MIB + ["zc_sends", "zc_copied", "out",
               "db_cpu", "db_util", "db_ms_per_req"]
    names = {"db_cpu": "db_cpu_s", "db_util": "db_cpu", "per_cpu": "req_per_cpu_s", "p50": "p50_ms", "p99": "p99_ms", "p999": "p999_ms", "util": "server_cpu", "bound": "generator_bound",
             "alloc": "alloc_b_per_req", "rss": "rss_mib", "rss_before": "rss_before_mib",
             "pool_items": "pool_items_per_req", "ctxsw": "ctx_switches_per_req"}
    names.update({c: c + "_mib" for c in MEMORY_MIB})
    with open(os.path.join(out, "results.tsv"), "w") as f:
        f.write("\t".join(names.get(c, c) for c in columns) + "\n")
        for d in rounds:
            cells = []
            for c in columns:
                v = d.get(c, "")
                if isinstance(v, bool):
                    v = int(v)
                cells.append(("" if v != v else f"{v:.6g}") if isinstance(v, float) else str(v))
            f.write("\t".join(cells) + "\n")

    by = {}
    for d in rounds:
        by.setdefault((d["scenario"], d["server"]), []).append(d)
    med = lambda key, xs: median([x[key] for x in xs])

    header = open(os.path.join(out, "header.txt")).read().strip().splitlines()
    print("# Kestrel transport benchmarks")
    print()
    print("Generated by `benchmarks/run-kestrel.sh` (issue #5). One machine, both sides on loopback: the server pinned")
    print("to CPU 0 (`taskset -c 0`, so .NET sees one CPU and the io_uring transport runs one loop), the generator to")
    print("CPU 1. Read the ratios measured side by side in the same run, not the absolute numbers.")
    print()
    for line in header:
        key, _, value = line.partition(": ")
        print(f"- {key}: `{value}`" if key == "command" else f"- {line}")
    print()

    load = [s for s in scenarios if not s.startswith(("idle-", "rate-")) and not is_memory(s)]
    memory = [s for s in scenarios if is_memory(s)]
    rated = [s for s in scenarios if s.startswith("rate-")]
    idle = [s for s in scenarios if s.startswith("idle-")]
    medians = []
    cold = any(d.get("cache") == "cold" for d in rounds)
    # The database's columns only in runs with a database test: other runs' tables stay as they were.
    database = any(s.split("-")[0] in DB_KINDS for s in load)
    if load:
        table_start("Under load" + (" (cold cache: the static and file scenarios' rounds started from a dropped page cache)" if cold else ""),
                    ["scenario", "server", "req/s", "req per server CPU-s", "vs sockets", "per round", "p50 ms", "p99 ms",
                    "p99 vs sockets", "server CPU", "CPU 0 other", "generator-bound", "pool items/req", "pool threads (added)",
                    "alloc B/req", "RSS MiB", "bytes/resp", "errors", "server fail logs"]
                    + (["database CPU", "database CPU ms/req"] if database else []))
        for scen in load:
            base = by.get((scen, "sockets"))
            for s in servers:
                xs = by.get((scen, s))
                if not xs:
                    note = f"wrong response: {failed[(scen, s)]}" if (scen, s) in failed else "—"
                    print(f"| {scen} | {s} | {note} |" + " — |" * (18 if database else 16))
                    continue
                per_cpu, p99 = med("per_cpu", xs), med("p99", xs)
                vs = per_cpu / med("per_cpu", base) if base else NAN
                p99_vs = p99 / med("p99", base) if base else NAN
                bound = sum(x["bound"] for x in xs)
                spread = per_round(xs, base, "per_cpu", s)
                sizes = "" if all(x["size_ok"] for x in xs) else " (size mismatch!)"
                threads = med("pool_threads", xs)
                threads = "—" if threads != threads else f"{threads:.0f} (+{med('pool_threads_added', xs):.0f})"
                label = f"{scen} (cold cache)" if any(x["cache"] == "cold" for x in xs) else scen
                print(f"| {label} | {s} | {med('rps', xs):,.0f} | {per_cpu:,.0f} | {fmt(vs, '.2f')}{'×' if vs == vs else ''} | {spread} "
                      f"| {fmt(med('p50', xs), '.2f')} | {fmt(p99, '.2f')} | {fmt(p99_vs, '.2f')}{'×' if p99_vs == p99_vs else ''} "
                      f"| {med('util', xs):.0%} | {med('cpu0_other', xs):.0%} | {bound}/{len(xs)} | {fmt(med('pool_items', xs), '.2f')} | {threads} | {fmt(med('alloc', xs), ',.0f')} | {fmt(med('rss', xs), '.0f')} "
                      f"| {fmt(med('bytes_per_resp', xs), ',.0f')}{sizes} | {sum(x['errors'] for x in xs)} | {fail_logs(out, scen, s)} |"
                      + (f" {fmt(med('db_util', xs), '.0%')} | {fmt(med('db_ms_per_req', xs), '.3f')} |" if database else ""))
                medians.append((scen, s, per_cpu, bound, len(xs)))
        print()
        print("Medians over the rounds. **req/s**, **p50/p99**: from the generator (wrk `--latency`, or loadgen; with")
        print("pipelining the latency is per batch of 16). **req per server CPU-s**: requests completed / the server's")
        print("utime+stime (`/proc/PID/stat`) over the measured window, warm-up excluded: the efficiency figure, meaningful")
        print("even when the generator is the limit. **vs sockets**: that figure's median over the `sockets` server's")
        print("(higher is better); **per round**: the same ratio taken round by round, each round's two servers measured")
        print("seconds apart: its median, robust to the machine's speed drifting between rounds, and lowest–highest (how")
        print("much one run can be trusted); **p99 vs sockets**: p99 over the `sockets` p99 (lower is better). **server CPU**:")
        print("utime+stime / wall time; **CPU 0 other**: CPU 0's busy time (`/proc/stat`) not in the server's utime+stime:")
        print("other processes, steal, interrupts (with `CONFIG_IRQ_TIME_ACCOUNTING` also softirq work done during the")
        print("server's syscalls; results.tsv has CPU 0's irq+softirq share and the machine's steal share per round); well above 0 means the run was disturbed.")
        print("**generator-bound**: rounds where the server stayed under 90% of one CPU (the generator, or the machine's")
        print("other load, was the limit, so req/s understates the server). **pool items/req**: thread-pool work items")
        print("completed in the window (`ThreadPool.CompletedWorkItemCount`, the sample's `--stats` endpoint) / requests: the")
        print("hops to and from the thread pool (results.tsv also has context switches per request). **pool threads (added)**: the")
        print("thread pool's worker threads (`.NET TP Worker` in `/proc/PID/task/*/comm`) in the middle or at the end of the window,")
        print("whichever is more, and how many more than at its start (threads blocked in file reads make the pool add")
        print("threads). **cold cache**: with `COLD_CACHE=1` the static and file scenarios' windows start after a drop of the")
        print("page cache (`/proc/sys/vm/drop_caches`), so their first reads come from disk. **alloc B/req**: difference of")
        print("`GC.GetTotalAllocatedBytes(precise: true)` (the sample's `--stats` endpoint) across the window / requests.")
        print("**RSS**: VmRSS in the middle of the window. **bytes/resp**: generator bytes read / requests, checked against")
        print("the probe's response size. **errors**: the generator's socket errors + non-2xx responses, all rounds.")
        print("**server fail logs**: lines the server logged at Error level (`fail:`) during the scenario, warm-up")
        print("included (see OUT/server-SCENARIO-SERVER.log). — : not served by that server.")
        if database:
            print("**database CPU**: the database tests' PostgreSQL (`benchmarks/db/postgres.sh`, on CPU 1 beside the generator):")
            print("the utime+stime of all its processes (the postmaster, every backend, and those it reaped) over the window / wall")
            print("time; **database CPU ms/req**: that CPU / requests. A database test's server can stay under 90% of its CPU")
            print("because CPU 1, shared by the database and the generator, is the limit: its generator-bound rounds say so.")
        print()
    if rated:
        table_start("At a fixed rate (partial load)", ["scenario", "server", "target req/s", "req/s", "server CPU", "thread pool", "I/O threads",
                    "CPU vs sockets", "per round", "p50 ms", "p99 ms", "p99.9 ms", "p99 vs sockets", "pool items/req",
                    "alloc B/req", "errors", "server fail logs"])
        for scen in rated:
            base = by.get((scen, "sockets"))
            for s in servers:
                xs = by.get((scen, s))
                if not xs:
                    print(f"| {scen} | {s} |" + " — |" * 15)
                    continue
                util, p99 = med("util", xs), med("p99", xs)
                vs = util / med("util", base) if base else NAN
                p99_vs = p99 / med("p99", base) if base else NAN
                spread = per_round(xs, base, "util", s)
                print(f"| {scen} | {s} | {fmt(med('target_rate', xs), ',.0f')} | {med('rps', xs):,.0f} | {util:.0%} "
                      f"| {fmt(med('pool_util', xs), '.0%')} | {fmt(med('io_util', xs), '.0%')} | {fmt(vs, '.2f')}{'×' if vs == vs else ''} | {spread} | {fmt(med('p50', xs), '.2f')} | {fmt(p99, '.2f')} "
                      f"| {fmt(med('p999', xs), '.2f')} | {fmt(p99_vs, '.2f')}{'×' if p99_vs == p99_vs else ''} "
                      f"| {fmt(med('pool_items', xs), '.2f')} | {fmt(med('alloc', xs), ',.0f')} | {sum(x['errors'] for x in xs)} | {fail_logs(out, scen, s)} |")
        print()
        print("Every server gets the same request rate (h2load `--h1 --rps`, 64 connections, the rate split evenly over")
        print("them; 100% is the sockets server's maximum measured flat out in the same run, see the header).")
        print("**server CPU**: the server's utime+stime / wall time over the window (1 CPU = 100%), of which **thread pool**:")
        print("the .NET thread pool's workers (the application, and whatever the transport runs there: the process's CPU")
        print("less that of its other threads, so workers that exited in the window count) and **I/O threads**: the transport's own")
        print("(the io_uring loop; Sockets' epoll thread); **pool items/req**: thread-pool work items per request, as above;")
        print("**CPU vs sockets**:")
        print("that over the sockets server's (lower is better); **per round**: that ratio round by round, its median")
        print("and lowest–highest. **p50/p99/p99.9**: from h2load's per-request log (time from sending the request to the end of")
        print("the response; requests held back while a connection waits are not counted from their intended start,")
        print("so under overload these understate; at these rates the server keeps up).")
        print()
    if idle:
        table_start("Idle connections", ["scenario", "server", "connections held", "RSS before MiB", "RSS with them MiB", "KiB per connection",
                    "vs sockets", "alloc B per connection", "time to open s", "server fail logs"])
        for scen in idle:
            base = by.get((scen, "sockets"))
            for s in servers:
                xs = by.get((scen, s))
                if not xs:
                    print(f"| {scen} | {s} |" + " — |" * 8)
                    continue
                kib = med("kib_per_conn", xs)
                vs = kib / med("kib_per_conn", base) if base else NAN
                held = min(x["held"] for x in xs)
                short = "" if all(x["ready"] for x in xs) else " (client failed!)"
                print(f"| {scen} | {s} | {held:,}{short} | {med('rss_before', xs):.0f} | {med('rss', xs):.0f} | {kib:.1f} "
                      f"| {fmt(vs, '.2f')}{'×' if vs == vs else ''} | {fmt(med('alloc_per_conn', xs), ',.0f')} | {med('open_s', xs):.1f} | {fail_logs(out, scen, s)} |")
        print()
        print("Per round a fresh server, warmed up with 64 connections, then `benchmarks/c/idle_conns` (CPU 1) opens the")
        print("connections (128 in progress at a time), does one GET /plaintext on each and keeps them open. **connections held**:")
        print("socket descriptors in `/proc/PID/fd` with them minus before (the lowest round). **KiB per connection**:")
        print("(VmRSS with them − VmRSS before) / connections, 1 s after the last one opened (lower is better; **vs sockets**")
        print("likewise). **alloc B per connection**: managed bytes allocated while opening them, per connection.")
        print()
    if memory:
        memory_table(memory, servers, by, out)
    print("Scenarios: " + "; ".join(f"**{k}**: {v}" for k, v in SCENARIO_TEXT.items()
                                   if any(s.startswith(k + "-") for s in scenarios)) + ". The number is the connection count.")
    print("Servers: **iouring** = `samples/KestrelSample --transport iouring` (`UseIoUring()`), **sockets** = Kestrel's")
    print("Sockets transport, **-inline** = `UnsafePreferInlineScheduling` on that transport (for Sockets also")
    print("`DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS=1`, as TechEmpower runs it), **-nospin** = that transport with")
    print("`DOTNET_ThreadPool_UnfairSemaphoreSpinLimit=0` (idle thread-pool workers do not spin), **iouring-nofiles** = io_uring with")
    print("`--no-loop-files` (`ReadFilesOnLoops = false`: SendFileAsync is Kestrel's own copy on the thread pool; measured on its")
    print("own, its ratios against the `sockets` rounds), **c** = `benchmarks/c/plaintext_server`")
    print("(liburing, one thread, canned responses; plaintext, json and idle only).")
    print()
    if load:
        print(f"![requests per server CPU-second]({svg})")
        print()

    with open(os.path.join(out, "medians.tsv"), "w") as f:
        f.write("scenario\tserver\treq_per_cpu_s\tgenerator_bound_rounds\trounds\n")
        for scen, s, per_cpu, bound, n in medians:
            f.write(f"{scen}\t{s}\t{per_cpu:.1f}\t{bound}\t{n}\n")


if __name__ == "__main__":
    main()
