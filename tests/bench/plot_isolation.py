#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Plot relay_isolation's JSON as an SVG (no third-party modules): the
victim's QD1 p50 and p99, idle and while another file floods the relay,
pooled over the run, and each round's two p50s beside each other."""
import json
import sys


def main(src, dst):
    d = json.load(open(src))
    bars = [("idle p50", d["idle_p50_us"]), ("flood p50", d["flood_p50_us"]),
            ("idle p99", d["idle_p99_us"]), ("flood p99", d["flood_p99_us"])]
    top = max(v for _, v in bars) or 1.0
    rounds = d.get("round_p50_us_idle_flood", [])
    w, h, pad, bw = max(520, 100 + 50 * len(rounds)), 300, 50, 80
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-family="sans-serif" font-size="13">'
           f'victim QD1 4 KiB read, one relay thread (us); flood/idle p50 {d["flood_over_idle_p50"]:.2f}</text>']
    for i, (name, v) in enumerate(bars):
        x = pad + i * (bw + 30)
        bh = (h - 2 * pad) * v / top
        y = h - pad - bh
        colour = "#4477aa" if name.startswith("idle") else "#cc6677"
        out.append(f'<rect x="{x}" y="{y:.1f}" width="{bw}" height="{bh:.1f}" fill="{colour}"/>')
        out.append(f'<text x="{x + bw / 2}" y="{y - 4:.1f}" text-anchor="middle" font-family="sans-serif" '
                   f'font-size="11">{v:.1f}</text>')
        out.append(f'<text x="{x + bw / 2}" y="{h - pad + 16}" text-anchor="middle" font-family="sans-serif" '
                   f'font-size="11">{name}</text>')
    if rounds:
        # Each round's idle and flooded p50, on their own scale below.
        rtop = max(max(r) for r in rounds) or 1.0
        y0, rh = h + 40, 160
        out[0] = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {y0 + rh + 30}" '
                  f'width="{w}" height="{y0 + rh + 30}">')
        out[1] = f'<rect width="{w}" height="{y0 + rh + 30}" fill="white"/>'
        out.append(f'<text x="{w / 2}" y="{h + 20}" text-anchor="middle" font-family="sans-serif" '
                   f'font-size="13">p50 per round (us): idle (blue) and flooded (red)</text>')
        for i, (pi, pf) in enumerate(rounds):
            x = pad + i * 50
            for j, (v, colour) in enumerate(((pi, "#4477aa"), (pf, "#cc6677"))):
                bh = rh * v / rtop
                out.append(f'<rect x="{x + j * 18}" y="{y0 + rh - bh:.1f}" width="16" height="{bh:.1f}" '
                           f'fill="{colour}"/>')
            out.append(f'<text x="{x + 17}" y="{y0 + rh + 14}" text-anchor="middle" '
                       f'font-family="sans-serif" font-size="10">{i}</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
