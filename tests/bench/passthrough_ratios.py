#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""make bench's passthrough boot: its runs out of the console log, each
run's ratios against the kernel's polled io_uring and fio (from the same
run), and their medians per relay mode, against issue 26's targets (QD1
p50 within 1.25x the kernel's, QD32 IOPS at least 0.9x). Writes
passthrough-MODE-N.json per run and passthrough.json; prints a table.
Reports, never asserts.

    passthrough_ratios.py CONSOLE_LOG OUT_DIR
"""
import json
import statistics
import sys


def runs_in(log):
    out, cur, tag = [], None, None
    for line in open(log, errors="replace"):
        line = line.rstrip("\r\n")
        if line.startswith("@@PT-JSON-BEGIN"):
            _, mode, n = line.split()
            cur, tag = [], (mode, int(n))
        elif line.startswith("@@PT-JSON-END"):
            out.append((tag, json.loads("\n".join(cur))))
            cur = None
        elif cur is not None:
            cur.append(line)
    return out


def cell(doc, target, qd):
    for run in doc.get("runs", []):
        if run.get("target") == target:
            for r in run.get("results", []):
                if r.get("qd") == qd and not r.get("skipped"):
                    return r
    return None


def ratios(doc, base):
    """Back end over `base`: QD1 p50 latency, QD32 IOPS (None: a cell missing)."""
    p1, b1 = cell(doc, "passthrough", 1), cell(doc, base, 1)
    p32, b32 = cell(doc, "passthrough", 32), cell(doc, base, 32)
    lat = p1["lat_us_p50"] / b1["lat_us_p50"] if p1 and b1 and b1["lat_us_p50"] else None
    iops = p32["iops"] / b32["iops"] if p32 and b32 and b32["iops"] else None
    return {"qd1_p50_over": lat, "qd32_iops_over": iops}


def main(log, out):
    runs = runs_in(log)
    if not runs:
        sys.exit("passthrough bench: no run in the console log")
    rows, per_mode = [], {}
    for (mode, n), doc in runs:
        json.dump(doc, open(f"{out}/passthrough-{mode}-{n}.json", "w"))
        r = {"mode": mode, "round": n,
             "kernel_poll": ratios(doc, "kernel-poll"), "fio": ratios(doc, "fio-io_uring_cmd")}
        rows.append(r)
        m = per_mode.setdefault(mode, {"kernel_poll": {"qd1_p50_over": [], "qd32_iops_over": []},
                                       "fio": {"qd1_p50_over": [], "qd32_iops_over": []}})
        for base in ("kernel_poll", "fio"):
            for k, v in r[base].items():
                if v is not None:
                    m[base][k].append(v)
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    print("passthrough back end / baseline, each run (the baselines ran in the same run):")
    print(f"{'relay':<8} {'round':>5} {'QD1 p50 / kernel':>17} {'QD32 IOPS / kernel':>19} "
          f"{'QD1 p50 / fio':>14} {'QD32 IOPS / fio':>16}")
    for r in rows:
        k, f = r["kernel_poll"], r["fio"]
        print(f"{r['mode']:<8} {r['round']:>5} {fmt(k['qd1_p50_over']):>17} {fmt(k['qd32_iops_over']):>19} "
              f"{fmt(f['qd1_p50_over']):>14} {fmt(f['qd32_iops_over']):>16}")
    medians = {}
    for mode, m in per_mode.items():
        medians[mode] = {base: {k: (statistics.median(v) if v else None) for k, v in d.items()}
                         for base, d in m.items()}
        k = medians[mode]["kernel_poll"]
        print(f"bench: passthrough, relay {mode}, median of {len([r for r in rows if r['mode'] == mode])} runs: "
              f"QD1 p50 {fmt(k['qd1_p50_over'])}x the kernel's polled io_uring (target <= 1.25), "
              f"QD32 IOPS {fmt(k['qd32_iops_over'])}x (target >= 0.9)")
    doc = {"bench": "passthrough", "targets": {"qd1_p50_over_kernel_max": 1.25, "qd32_iops_over_kernel_min": 0.9},
           "runs": rows, "medians": medians}
    json.dump(doc, open(f"{out}/passthrough.json", "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
