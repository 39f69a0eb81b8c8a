#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""results.json (from gpunvme_bench) -> bench.png. Run where matplotlib is:
   python3 kernels/bench/plot.py kernels/bench/results
Reads the UAPI v2 bench (modes owner/shared) and also the UAPI v1 one kept
in results/v1 (modes direct/bridged: shown as owner and "v1 bridge")."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

d = sys.argv[1] if len(sys.argv) > 1 else "."
# null (a non-finite number, e.g. from a run that never completed) -> 0
r = json.load(open(f"{d}/results.json"),
              object_hook=lambda o: {k: (0 if v is None else v) for k, v in o.items()})
NAME = {"direct": "owner", "bridged": "v1 bridge", "owner": "owner", "shared": "shared"}
MODES = [m for m in ("owner", "shared", "v1 bridge")
         if any(NAME[x["mode"]] == m for x in r.get("iops", []) + r.get("qd1", []))]


def mode(x):
    return NAME[x["mode"]]


panels = 2 + ("pairs64_qd32" in r) + ("relay_microbench" in r)
cols = 2
rows = (panels + 1) // 2
fig, axes = plt.subplots(rows, cols, figsize=(15, 6.5 * rows), squeeze=False)
axes = [a for row in axes for a in row]
for a in axes[panels:]:
    a.set_visible(False)
ai = iter(axes)

# 1. Commands/s vs queue pairs (library cq_wait, default thread counts).
a1 = next(ai)
rows_ = [x for x in r["iops"] if x.get("cq_wait", "library") == "library"
         and x["fixture_threads"] == min(r["fixture_threads"], x["queue_pairs"])]
for m, ls in zip(MODES, ("-", "--", ":")):
    for qd, col in ((1, "tab:blue"), (8, "tab:orange"), (32, "tab:green")):
        pts = sorted((x["queue_pairs"], x["iops"]) for x in rows_ if mode(x) == m and x["qd"] == qd)
        if pts:
            a1.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], ls, marker="o",
                    color=col, label=f"{m}, batch depth {qd}")
a1.set_xscale("log", base=2)
a1.set_yscale("log")
a1.set_xlabel("queue pairs (one GPU block each)")
a1.set_ylabel("commands/s (millions), 1-LBA %d B I/Os" % r["lba_bytes"])
a1.set_title("Commands/s vs the software NVMe fixture (not an SSD)\n(%d fixture + %d relay CPU threads)"
             % (r["fixture_threads"], r["relay_threads"]))
a1.grid(True, which="both", alpha=0.3)
a1.legend(fontsize=8)

# 2. QD1 round trip.
a2 = next(ai)
labels, p50, p99 = [], [], []
pp = r["pingpong"]["rtt_us_clock64"]
labels.append("ping-pong RTT")
p50.append(pp["p50"])
p99.append(pp["p99"])
seen = {}
for x in r["qd1"]:
    lab = f'{mode(x)} {x["op"]} {x["data"]}'
    if x.get("relay_backoff"):
        lab += " +backoff"
    if x.get("cq_wait") == "proposed_v4":
        lab += " +1-load cq_wait"
    if x.get("cq_wait") == "before_dw3_poll":
        lab += " BEFORE 1-load poll"
    if x.get("api") == "per_thread":
        lab += " per-thread API"
    if x.get("cq_in") == "vram":
        lab += " CQ in VRAM (copy engine)"
    seen[lab] = seen.get(lab, 0) + 1
    if seen[lab] > 1 or sum(1 for y in r["qd1"] if y is not x and y["mode"] == x["mode"]
                            and y["op"] == x["op"] and y["data"] == x["data"]
                            and y.get("cq_wait") == x.get("cq_wait")
                            and y.get("api") == x.get("api") and y.get("cq_in") == x.get("cq_in")
                            and y.get("relay_backoff") == x.get("relay_backoff")):
        lab += f" #{seen[lab]}"
    labels.append(lab)
    p50.append(x["round_us_clock64"]["p50"])
    p99.append(x["round_us_clock64"]["p99"])
xs = range(len(labels))
a2.bar([i - 0.2 for i in xs], p50, 0.4, label="p50")
a2.bar([i + 0.2 for i in xs], p99, 0.4, label="p99")
for i, v in enumerate(p50):
    a2.text(i - 0.2, v * 1.05, f"{v:.2f}", ha="center", fontsize=7)
t = r.get("targets", {})
if t.get("qd1_p50_us_owner"):
    a2.axhline(1.15 * t["qd1_p50_us_owner"], color="red", ls=":",
               label="target: shared p50 <= 1.15 x owner p50 (%.2f us); measured %.3f x"
               % (1.15 * t["qd1_p50_us_owner"], t["qd1_p50_ratio_shared_over_owner"]))
a2.set_yscale("log")
a2.set_xticks(list(xs))
a2.set_xticklabels(labels, fontsize=7, rotation=40, ha="right")
a2.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
a2.set_ylabel("microseconds (SM clock64, measured rate)")
a2.set_title("QD1 round trip, 1 LBA, %s" % r["gpu"])
a2.legend(fontsize=8)
a2.grid(True, axis="y", which="both", alpha=0.3)

# 3. 64 pairs x batch depth 32: owner vs shared with 1..8 relay threads.
if "pairs64_qd32" in r:
    a3 = next(ai)
    labels, vals, cols_ = [], [], []
    for x in r["pairs64_qd32"]:
        lab = mode(x) + (f' R={x["relay_threads"]}' if x["mode"] == "shared" else "")
        if x.get("cq_wait") == "proposed_v4":
            lab += " +1-load"
        if x.get("cq_wait") == "before_dw3_poll":
            lab += " before 1-load"
        labels.append(lab)
        vals.append(x["iops"] / 1e6)
        cols_.append("tab:gray" if x["mode"] == "owner" else "tab:purple")
    a3.bar(range(len(vals)), vals, color=cols_)
    for i, v in enumerate(vals):
        a3.text(i, v * 1.01, f"{v:.1f}", ha="center", fontsize=8)
    a3.set_xticks(list(range(len(labels))))
    a3.set_xticklabels(labels, fontsize=8, rotation=30, ha="right")
    a3.set_ylabel("commands/s (millions)")
    a3.set_title("64 queue pairs x batch depth 32 (64-entry rings), %d fixture threads;\n"
                 "R = relay threads (bridge_thread.c pool)" % r["fixture_threads"])
    a3.grid(True, axis="y", alpha=0.3)

# 4. The CPU-only relay microbenchmark.
if "relay_microbench" in r:
    a4 = next(ai)
    runs = r["relay_microbench"]["runs"]
    labels = [f'{x["mix"]}\n{x["ranges"]}' for x in runs if x["mode"] == "single"]
    single = [x["cmds_per_s_relay_time"] / 1e6 for x in runs if x["mode"] == "single"]
    cross = [x["cmds_per_s_wall"] / 1e6 for x in runs if x["mode"] == "cross"]
    xs = range(len(labels))
    a4.bar([i - 0.2 for i in xs], single, 0.4, label="one thread, hot caches (per second of Relay::step)")
    if len(cross) == len(single):
        a4.bar([i + 0.2 for i in xs], cross, 0.4,
               label="relay alone on its core, clients on others (per wall second)")
    a4.axhline(5, color="red", ls=":", label="target: 5 M validated commands/s per thread")
    a4.set_xticks(list(xs))
    a4.set_xticklabels(labels, fontsize=8)
    a4.set_ylabel("validated commands/s per relay thread (millions)")
    a4.set_title("Relay + validation alone (CPU, in-memory controller), 64 pairs x 32")
    a4.legend(fontsize=8)
    a4.grid(True, axis="y", alpha=0.3)

fig.tight_layout()
fig.savefig(f"{d}/bench.png", dpi=100)
print(f"wrote {d}/bench.png")
