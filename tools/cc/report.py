#!/usr/bin/env python3
"""The figures of one tools/cc/run.sh experiment: per-flow goodput (each client's
perftest average, and its rate at the congestion point while every flow was sending),
Jain's fairness index of both, the queue's depth over time, its drops and ECN marks, and
the CNPs (sent by the servers' notification points, handled by the clients' reaction
points; 0 while the engine has no DCQCN).

usage: report.py DIR   (DIR holds record.jsonl, counters-a.json, counters-b.json,
                        client-N.json, setup.txt)
"""
import glob
import json
import os
import sys


def jain(xs):
    xs = [x for x in xs if x is not None]
    if not xs or sum(x * x for x in xs) == 0:
        return float("nan")
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def pct(xs, p):
    if not xs:
        return 0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def counter_sum(counters, name):
    """`name` summed over every process's NIC counters (departed ones included)."""
    return sum((p.get("nic") or {}).get(name, 0) for p in counters.get("processes", []))


def main(d):
    print(open(os.path.join(d, "setup.txt")).read().strip())
    rec = [json.loads(l) for l in open(os.path.join(d, "record.jsonl")) if l.strip()]
    a = json.load(open(os.path.join(d, "counters-a.json")))
    b = json.load(open(os.path.join(d, "counters-b.json")))
    # The clients' own figures (perftest's average over each flow's life).
    good = []
    for f in sorted(glob.glob(os.path.join(d, "client-*.json")),
                    key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0])):
        try:
            r = json.load(open(f))
            good.append((os.path.basename(f), r["bw_average_mb_per_sec"] * 8,
                         r["bytes"] * r["iterations"] / (r["bw_average_mb_per_sec"] * 1e6)))
        except (ValueError, KeyError):
            good.append((os.path.basename(f), None, None))
    # Rates at the congestion point, per reading; the window where every flow sends.
    names = []
    for l in rec:  # flows that moved more than 10 messages' worth
        for f in l.get("flows", []):
            if f["flow"] not in names and f["tx_bytes"] > 10 * 65536:
                names.append(f["flow"])
    names.sort()
    window = []
    for l in rec:
        rates = {f["flow"]: f["rate_bps"] for f in l.get("flows", [])}
        if names and all((rates.get(n) or 0) > 1e6 for n in names):
            window.append((l["t"], [rates[n] for n in names], l["queue"]["cp_queue_bytes"]))
    print()
    for name, g, secs in good:
        print("%-30s goodput %s" % (name, "%.1f Mbit/s in %.2f s" % (g, secs) if g is not None
                                    else "failed"))
    for k, name in enumerate(names):
        w = sum(r[1][k] for r in window) / len(window) / 1e6 if window else None
        print("%-30s rate at the queue while all send %s" % (
            name, "%.1f Mbit/s" % w if w is not None else "-"))
    gs = [g for _, g, _ in good]
    print("slowest flow done in %.2f s" % max((t for _, _, t in good if t), default=0))
    times = [t for _, _, t in good if t]
    if times:
        # Each flow's completion time (its client's run); p99 of 8 is the slowest.
        print("flow completion time: p50 %.2f s, p99 %.2f s" % (pct(times, 50), pct(times, 99)))
    total = sum(g for g in gs if g is not None)
    print("sum of goodputs %.1f Mbit/s" % total)
    print("Jain's index: goodput %.3f, rate while all send %s (%d readings of 0.1 s)" % (
        jain(gs),
        "%.3f" % jain([sum(r[1][k] for r in window) / len(window) for k in range(len(names))])
        if window else "-",
        len(window)))
    q = a.get("queue", {})
    depths = [l["queue"]["cp_queue_bytes"] for l in rec
              if any((f.get("rate_bps") or 0) > 1e6 for f in l.get("flows", []))]
    print()
    print("queue (%s)" % q.get("config"))
    print("  depth while sending (KB): mean %.1f, p50 %.1f, p95 %.1f, max seen %.1f; max %.1f" % (
        sum(depths) / len(depths) / 1e3 if depths else 0, pct(depths, 50) / 1e3,
        pct(depths, 95) / 1e3, max(depths, default=0) / 1e3, q.get("cp_max_queue_bytes", 0) / 1e3))
    print("  packets %d, ECN-marked %d, dropped %d (%.3f%%), sent %d bytes" % (
        q.get("cp_enqueued", 0) + q.get("cp_dropped", 0), q.get("cp_ecn_marked", 0),
        q.get("cp_dropped", 0),
        100.0 * q.get("cp_dropped", 0) / max(1, q.get("cp_enqueued", 0) + q.get("cp_dropped", 0)),
        q.get("cp_tx_bytes", 0)))
    print("CNPs: sent by the servers %d (CE-marked packets seen %d), handled by the clients %d, "
          "ignored %d; rate decreases %d" % (
              counter_sum(b, "np_cnp_sent"), counter_sum(b, "np_ecn_marked_roce_packets"),
              counter_sum(a, "rp_cnp_handled"), counter_sum(a, "rp_cnp_ignored"),
              counter_sum(a, "rp_rate_decreases")))
    retries = {k: counter_sum(a, k) for k in ("completer_retry_err", "rcvd_seq_err", "retries")}
    print("clients' retransmission counters: %s" % ", ".join("%s %d" % kv for kv in retries.items()))


if __name__ == "__main__":
    main(sys.argv[1])
