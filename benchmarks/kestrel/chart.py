#!/usr/bin/env python3
"""Bar chart of benchmarks/run-kestrel.sh as plain SVG (standard library only: matplotlib is not assumed).

    chart.py OUT/medians.tsv "SERVERS" "SCENARIOS" > results.svg

One panel per scenario, each with its own scale (the scenarios differ by orders of magnitude), one bar per server:
median requests per server CPU-second. A bar whose rounds were mostly generator-bound is drawn hatched.
"""
import csv
import sys
from xml.sax.saxutils import escape

COLORS = {"iouring": "#1f77b4", "iouring-inline": "#7fb8e0", "sockets": "#d62728", "sockets-inline": "#f4a09c",
          "c": "#7f7f7f"}
SPARE = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
PANEL_W, PANEL_H, COLS = 280, 210, 4
LABELS = {"iouring-inline": "iour-inl", "sockets-inline": "sock-inl"}
TOP, LEFT, GAP = 80, 20, 18


def short(v):
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def main():
    rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
    servers, scenarios = sys.argv[2].split(), [s for s in sys.argv[3].split() if not s.startswith("idle-")]
    data = {(r["scenario"], r["server"]): r for r in rows}
    scenarios = [s for s in scenarios if any((s, v) in data for v in servers)]
    color = {s: COLORS.get(s) or SPARE[i % len(SPARE)] for i, s in enumerate(servers)}
    cols = max(1, min(COLS, len(scenarios)))
    nrows = max(1, (len(scenarios) + cols - 1) // cols)
    width = max(760, LEFT * 2 + cols * PANEL_W + (cols - 1) * GAP)
    height = TOP + nrows * (PANEL_H + GAP)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
         f'font-family="sans-serif" font-size="11">',
         '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
         '<rect width="6" height="6" fill="white" fill-opacity="0.0"/><line x1="0" y1="0" x2="0" y2="6" stroke="white" '
         'stroke-width="2.5"/></pattern></defs>',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{LEFT}" y="22" font-size="15" font-weight="bold">Kestrel: requests per server CPU-second '
         f'(median; higher is better)</text>']
    x = LEFT
    for s in servers:  # legend
        o.append(f'<rect x="{x}" y="36" width="12" height="12" fill="{color[s]}"/>')
        o.append(f'<text x="{x + 16}" y="46">{escape(s)}</text>')
        x += 24 + 7 * len(s)
    o.append(f'<text x="{LEFT}" y="66" fill="#555">Each panel has its own scale. Hatched: most rounds generator-bound '
             f'(server under 90% of a CPU). —: not served.</text>')

    for i, scen in enumerate(scenarios):
        px = LEFT + (i % cols) * (PANEL_W + GAP)
        py = TOP + (i // cols) * (PANEL_H + GAP)
        o.append(f'<rect x="{px}" y="{py}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#ccc"/>')
        o.append(f'<text x="{px + PANEL_W / 2}" y="{py + 16}" text-anchor="middle" font-weight="bold">{escape(scen)}</text>')
        values = [float(data[(scen, s)]["req_per_cpu_s"]) if (scen, s) in data else None for s in servers]
        top = max([v for v in values if v] or [1.0]) * 1.18
        base_y, plot_h = py + PANEL_H - 22, PANEL_H - 52
        slot = (PANEL_W - 20) / len(servers)
        bar_w = min(38, slot * 0.7)
        o.append(f'<line x1="{px + 8}" y1="{base_y}" x2="{px + PANEL_W - 8}" y2="{base_y}" stroke="#888"/>')
        for k, (s, v) in enumerate(zip(servers, values)):
            cx = px + 10 + slot * (k + 0.5)
            if v is None:
                o.append(f'<text x="{cx}" y="{base_y - 4}" text-anchor="middle" fill="#999">—</text>')
                continue
            h = plot_h * v / top
            r = data[(scen, s)]
            bound = int(r["generator_bound_rounds"]) * 2 > int(r["rounds"])
            attrs = f'x="{cx - bar_w / 2:.1f}" y="{base_y - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}"'
            o.append(f'<rect {attrs} fill="{color[s]}"><title>{escape(s)}: {v:,.0f} req per CPU-s</title></rect>')
            if bound:
                o.append(f'<rect {attrs} fill="url(#hatch)"/>')
            o.append(f'<text x="{cx}" y="{base_y - h - 4:.1f}" text-anchor="middle">{short(v)}</text>')
            o.append(f'<text x="{cx}" y="{base_y + 13}" text-anchor="middle" font-size="9" fill="#555">'
                     f'{escape(LABELS.get(s, s))}</text>')
    o.append("</svg>")
    print("\n".join(o))


if __name__ == "__main__":
    main()
