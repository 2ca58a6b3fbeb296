#!/usr/bin/env python3
"""Paired comparison of two servers of one benchmarks/run-kestrel.sh run (standard library only).

    compare.py OUT A B [SCENARIOS] > compare.md

Each round of a load scenario measured A and B in adjacent windows (their order flips every round), so each round
gives one ratio A/B of requests per server CPU-second taken under the same machine conditions. The report gives, per
scenario, the median of those ratios, their interquartile range, a 95% confidence interval of the mean log ratio
(Student's t over the rounds) and its half-width: the smallest difference the run could have told from noise, and
the rounds the scenario's spread would need for a half-width of ±5%.
A verdict says "same" when the interval holds 1.00. Peak RSS (VmHWM at the last window) and p99 stand beside.
With PROCESSES > 1 (run-kestrel.sh: the rounds split between fresh sets of server processes) the interval is taken
across the sets' mean log ratios instead (Student's t over the sets), since two processes of one binary differ by a
few percent for their whole life, and rounds of one pair of processes share that difference.
"""
import csv
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import parse_generator  # noqa: E402

# Student's t, two-sided 95%, by degrees of freedom (1-30); larger samples use 30's.
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def windows(out, a, b):
    """{scenario: {round: {server: dict}}} of the load rounds of A and B that served without errors."""
    by = {}
    with open(os.path.join(out, "measurements.tsv")) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["server"] not in (a, b) or row["round"] == "0" or row["cpu_s"] in ("", "-"):
                continue
            g = parse_generator(row["out"])
            cpu = float(row["cpu_s"])
            if g["requests"] <= 0 or cpu <= 0:
                continue
            hwm = row.get("rss_hwm_kib", "-")
            by.setdefault(row["scenario"], {}).setdefault(int(row["round"]), {})[row["server"]] = dict(
                per_cpu=g["requests"] / cpu, p99=g["p99"], errors=g["errors"],
                hwm=float(hwm) / 1024 if hwm not in ("", "-") else math.nan,
                busy=float(row["cpu0_busy"]) if row["cpu0_busy"] not in ("", "-") else math.nan)
    return by


def process_sets(out):
    """{(scenario, round): set} from OUT/processes.tsv (absent before PROCESSES existed: every round in set 0)."""
    sets = {}
    path = os.path.join(out, "processes.tsv")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                scen, rnd, pset = line.split()
                sets[(scen, int(rnd))] = int(pset)
    return sets


def interval(logs):
    """95% interval of the geometric mean of exp(logs) (Student's t) and its half-width in log units."""
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = T95[min(len(logs) - 1, len(T95)) - 1] * sd / math.sqrt(len(logs))
    return math.exp(mean - half), math.exp(mean + half), half, sd


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def summary(rounds, a, b, sets):
    """sets: {round: process set}; with two or more sets the interval is across their mean log ratios."""
    kept = sorted(n for n, r in rounds.items() if a in r and b in r)
    pairs = [(rounds[n][a], rounds[n][b]) for n in kept]
    if len(pairs) < 2:
        return None
    ratios = [x["per_cpu"] / y["per_cpu"] for x, y in pairs]
    logs = [math.log(r) for r in ratios]
    by_set = {}
    for n, value in zip(kept, logs):
        by_set.setdefault(sets.get(n, 0), []).append(value)
    units = [statistics.fmean(v) for v in by_set.values()] if len(by_set) > 1 else logs
    low, high, half, sd = interval(units)
    q1, q3 = quartiles(ratios)
    # Rounds (or process sets) this spread needs for a ±5% half-width: the least n with t(n-1) * sd / sqrt(n) <= ln 1.05.
    need = next((n for n in range(2, 1000) if T95[min(n - 1, len(T95)) - 1] * sd / math.sqrt(n) <= math.log(1.05)), 1000)
    return dict(n=len(pairs), sets=len(by_set), logs=units, need=need, median=statistics.median(ratios), q1=q1, q3=q3,
                low=low, high=high,
                detectable=math.exp(half) - 1,
                a=statistics.median(x["per_cpu"] for x, _ in pairs), b=statistics.median(y["per_cpu"] for _, y in pairs),
                a_p99=statistics.median(x["p99"] for x, _ in pairs), b_p99=statistics.median(y["p99"] for _, y in pairs),
                a_hwm=max(x["hwm"] for x, _ in pairs), b_hwm=max(y["hwm"] for _, y in pairs),
                errors=sum(x["errors"] + y["errors"] for x, y in pairs),
                busy=min(min(x["busy"], y["busy"]) for x, y in pairs))


def verdict(s):
    if s["low"] <= 1.0 <= s["high"]:
        return "same"
    change = (s["low"] * s["high"]) ** 0.5 - 1
    return f"**{change:+.1%}**"


def main():
    out, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
    order = sys.argv[4].split() if len(sys.argv) > 4 else None
    by = windows(out, a, b)
    sets = process_sets(out)
    header = open(os.path.join(out, "header.txt")).read().strip() if os.path.exists(os.path.join(out, "header.txt")) else ""
    print(f"# {a} against {b}: paired windows\n")
    print("```\n" + header + "\n```\n")
    print(f"Requests per server CPU-second, {a} / {b}, one ratio per round (adjacent windows, order flipped each round). "
          "CI: 95% interval of the geometric mean ratio; detectable: its half-width, the smallest change this run "
          "could tell from noise. Verdict: the change when the interval excludes 1.00, else same.\n")
    print(f"| scenario | rounds | {a} req/CPU-s | {b} req/CPU-s | ratio median | IQR | 95% CI | detectable | verdict "
          f"| rounds for ±5% | p99 ms {a} / {b} | peak RSS MiB {a} / {b} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    logs = []  # every round's log ratio, of every scenario: the row "all" below
    for scen in order or sorted(by):
        s = summary(by.get(scen, {}), a, b, {n: v for (sc, n), v in sets.items() if sc == scen})
        if s is None:
            print(f"| {scen} | 0 | | | | | | | not measured (a server failed its probe or served nothing) | | | |")
            continue
        logs += s["logs"]
        note = " (errors: %d)" % s["errors"] if s["errors"] else ""
        note += " (server CPU below 90%% busy: %.0f%%)" % (100 * s["busy"]) if s["busy"] < 0.9 else ""
        note += f" (interval across {s['sets']} process sets; ±5% needs {s['need']} sets)" if s["sets"] > 1 else ""
        print(f"| {scen} | {s['n']} | {s['a']:,.0f} | {s['b']:,.0f} | {s['median']:.3f} | {s['q1']:.3f}-{s['q3']:.3f} "
              f"| {s['low']:.3f}-{s['high']:.3f} | ±{s['detectable']:.1%} | {verdict(s)}{note} | {s['need']} "
              f"| {s['a_p99']:.2f} / {s['b_p99']:.2f} | {s['a_hwm']:.0f} / {s['b_hwm']:.0f} |")
    if len(logs) > 2:
        # A change common to every scenario (a uniform regression) shows in all rounds together, with a narrower
        # interval than any one scenario's; scenarios that moved apart widen it.
        mean, sd = statistics.fmean(logs), statistics.stdev(logs)
        half = 1.96 * sd / math.sqrt(len(logs))
        t = dict(low=math.exp(mean - half), high=math.exp(mean + half))
        print(f"| all, pooled | {len(logs)} | | | {math.exp(statistics.median(logs)):.3f} | | {t['low']:.3f}-{t['high']:.3f} "
              f"| ±{math.exp(half) - 1:.1%} | {verdict(t)} | | | |")


if __name__ == "__main__":
    main()
