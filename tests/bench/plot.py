#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Plot `gpunvme bench -o json` output as an SVG (no third-party modules).

One panel per metric (IOPS, p50, p99, p99.9); a bar per (queue pairs, queue
depth) cell for each target, so gpunvme (shared and raw) and the kernel
driver (interrupt and polled) sit side by side.
"""
import json
import sys


def cells(run):
    out = {}
    for r in run.get("results", []):
        out[(r.get("qpairs"), r.get("qd"))] = r
    return out


def metric(r, names):
    for n in names:
        if n in r:
            return float(r[n])
    return 0.0


def main(src, dst):
    data = json.load(open(src))
    runs = data.get("runs", [])
    keys = sorted({k for run in runs for k in cells(run)})
    panels = [("IOPS", ["iops"]), ("p50 latency (us)", ["lat_us_p50"]), ("p99 latency (us)", ["lat_us_p99"]), ("p99.9 latency (us)", ["lat_us_p999"])]
    colors = ["#3b6ea5", "#d1793b", "#5a9e4b", "#8a5aa8"]
    w, ph, pad = 900, 220, 60
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{ph * len(panels) + 40}" font-family="sans-serif" font-size="11">']
    svg.append(f'<text x="10" y="18" font-size="14">gpunvme bench: {" vs ".join(r.get("target", "?") for r in runs)} (QEMU/TCG)</text>')
    for pi, (title, names) in enumerate(panels):
        top = 30 + pi * ph
        vals = [[metric(cells(run).get(k, {}), names) for k in keys] for run in runs]
        vmax = max([v for row in vals for v in row] + [1e-9])
        svg.append(f'<text x="10" y="{top + 14}">{title}</text>')
        slot = (w - pad - 20) / max(len(keys), 1)
        bw = slot / (len(runs) + 1)
        for ki, k in enumerate(keys):
            x0 = pad + ki * slot
            for ri, row in enumerate(vals):
                h = (ph - 60) * row[ki] / vmax
                y = top + ph - 35 - h
                svg.append(f'<rect x="{x0 + ri * bw:.1f}" y="{y:.1f}" width="{bw - 2:.1f}" height="{h:.1f}" fill="{colors[ri % len(colors)]}"/>')
            svg.append(f'<text x="{x0:.1f}" y="{top + ph - 20}">{k[0]}qp QD{k[1]}</text>')
    for ri, run in enumerate(runs):
        svg.append(f'<rect x="{w - 200}" y="{8 + ri * 14}" width="10" height="10" fill="{colors[ri % len(colors)]}"/>'
                   f'<text x="{w - 185}" y="{17 + ri * 14}">{run.get("target", "?")} ({run.get("method", "")})</text>')
    svg.append("</svg>")
    open(dst, "w").write("\n".join(svg))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
