#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""array.json (from array_bench) -> array.png. Run where matplotlib is:
   python3 kernels/bench/plot_array.py kernels/bench/results/DIR
Three panels: effective reads/s against the measured hit rate (the
curve, BaM's figure), commands/s of the miss run over 1..8 fixture
controllers (array and raw per-thread API), and the in-run ratios against
their targets."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

d = sys.argv[1] if len(sys.argv) > 1 else "."
r = json.load(open(f"{d}/array.json"),
              object_hook=lambda o: {k: (0 if v is None else v) for k, v in o.items()})
fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(19, 6))

# 1. The curve: reads/s against hit rate.
pts = sorted((x["hit_rate"], x["reads_per_s"] / 1e6, x.get("working_set_pages", 0)) for x in r["curve"])
a1.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="tab:blue", label="array (frames in VRAM)")
for h, v, w in pts:
    a1.annotate(f"{w} pages", (h, v), fontsize=7, textcoords="offset points", xytext=(4, 4))
g = [x for x in r["hit"] if x["kind"] == "gather"]
if g:
    a1.axhline(g[0]["reads_per_s"] / 1e6, color="tab:gray", ls=":", label="plain VRAM gather (all resident)")
a1.set_yscale("log")
a1.set_xlabel("hit rate (measured: 1 - loads / reads)")
a1.set_ylabel("element reads/s (millions)")
a1.set_title("Effective throughput against hit rate\n(%d frames of %d KiB; misses from a software fixture, not an SSD)"
             % (r["frames"], r["page_bytes"] // 1024))
a1.grid(True, which="both", alpha=0.3)
a1.legend(fontsize=8)

# 2. Scaling of the miss run.
for kind, col in (("array", "tab:blue"), ("raw", "tab:orange")):
    s = sorted((x["controllers"], x["cmds_per_s"] / 1e6) for x in r["scale"] if x["kind"] == kind)
    a2.plot([p[0] for p in s], [p[1] for p in s], "o-", color=col, label=f"{kind} (all miss)")
s = sorted((x["controllers"], x["cmds_per_s"] / 1e6) for x in r["scale"] if x["kind"] == "array")
if s:
    a2.plot([p[0] for p in s], [s[0][1] * p[0] for p in s], ":", color="tab:gray", label="linear from 1")
a2.set_xscale("log", base=2)
a2.set_xlabel("fixture controllers (each its own CPU thread(s))")
a2.set_ylabel("page reads (commands)/s (millions)")
a2.set_title("Scaling over controllers (target: 4 >= 3.2 x 1; measured %.2f)" % r["targets"]["scale_4_over_1"])
a2.grid(True, which="both", alpha=0.3)
a2.legend(fontsize=8)

# 3. The ratios.
t = r["targets"]
labels, vals, goals = [], [], []
for i, v in enumerate(t["miss_array_over_raw_cmds_per_s"]):
    labels.append(f"miss: array / raw #{i + 1}")
    vals.append(v)
    goals.append(t["miss_target"])
for i, v in enumerate(t["hit_array_over_gather_reads_per_s"]):
    labels.append(f"hit: array / gather #{i + 1}")
    vals.append(v)
    goals.append(t["hit_target"])
labels.append("scale: 4 / 1 controllers")
vals.append(t["scale_4_over_1"])
goals.append(t["scale_target"])
xs = range(len(vals))
a3.bar(xs, vals, color=["tab:green" if v >= g_ else "tab:red" for v, g_ in zip(vals, goals)])
for i, (v, g_) in enumerate(zip(vals, goals)):
    a3.text(i, v * 1.02, f"{v:.2f}", ha="center", fontsize=8)
    a3.plot([i - 0.4, i + 0.4], [g_, g_], "k:")
a3.set_xticks(list(xs))
a3.set_xticklabels(labels, fontsize=8, rotation=25, ha="right")
a3.set_ylabel("ratio in this run (dotted: target)")
a3.set_title("%s: ratios against their targets" % r["gpu"])
a3.grid(True, axis="y", alpha=0.3)

fig.tight_layout()
fig.savefig(f"{d}/array.png", dpi=100)
print(f"wrote {d}/array.png")
