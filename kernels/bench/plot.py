#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR MIT
"""results.json (from gpunvme_bench) -> bench.png. Run where matplotlib is:
   python3 kernels/bench/plot.py kernels/bench/results"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

d = sys.argv[1] if len(sys.argv) > 1 else "."
r = json.load(open(f"{d}/results.json"))
fig, (a1, a2) = plt.subplots(1, 2, figsize=(15, 6.5))

rows = [x for x in r["iops"] if x["fixture_threads"] == min(r["fixture_threads"], x["queue_pairs"])
        and x.get("cq_wait", "library") == "library"]
for mode, ls in (("direct", "-"), ("bridged", "--")):
    for qd, col in ((1, "tab:blue"), (8, "tab:orange"), (32, "tab:green")):
        pts = sorted((x["queue_pairs"], x["iops"]) for x in rows
                     if x["mode"] == mode and x["qd"] == qd)
        if pts:
            a1.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], ls, marker="o",
                    color=col, label=f"{mode}, batch depth {qd}")
a1.set_xscale("log", base=2)
a1.set_yscale("log")
a1.set_xlabel("queue pairs (one GPU block each)")
a1.set_ylabel("IOPS (millions), 1-LBA %d B reads" % r["lba_bytes"])
a1.set_title("Submission throughput vs software NVMe fixture\n(%d fixture + %d relay CPU threads)"
             % (r["fixture_threads"], r["relay_threads"]))
a1.grid(True, which="both", alpha=0.3)
a1.legend(fontsize=8)

labels, p50, p99 = [], [], []
pp = r["pingpong"]["rtt_us_clock64"]
labels.append("ping-pong RTT")
p50.append(pp["p50"])
p99.append(pp["p99"])
for x in r["qd1"]:
    lab = f'{x["mode"]} {x["op"]} {x["data"]}'
    if x["relay_backoff"]:
        lab += " +backoff"
    if x.get("cq_wait") == "proposed_v4":
        lab += " +1-load cq_wait"
    labels.append(lab)
    p50.append(x["round_us_clock64"]["p50"])
    p99.append(x["round_us_clock64"]["p99"])
xs = range(len(labels))
a2.bar([i - 0.2 for i in xs], p50, 0.4, label="p50")
a2.bar([i + 0.2 for i in xs], p99, 0.4, label="p99")
for i, v in enumerate(p50):
    a2.text(i - 0.2, v * 1.05, f"{v:.1f}", ha="center", fontsize=7)
a2.axhline(10, color="red", ls=":", label="target: bridged p50 < 10 us")
a2.set_yscale("log")
a2.set_xticks(list(xs))
a2.set_xticklabels(labels, fontsize=8, rotation=35, ha="right")
a2.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
a2.set_ylabel("microseconds (SM clock64, measured rate)")
a2.set_title("QD1 round trip, 1 LBA, %s" % r["gpu"])
a2.legend(fontsize=8)
a2.grid(True, axis="y", which="both", alpha=0.3)
fig.tight_layout()
fig.savefig(f"{d}/bench.png", dpi=110)
print(f"wrote {d}/bench.png")
