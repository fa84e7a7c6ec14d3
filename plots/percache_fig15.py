#!/usr/bin/python3
"""PerCache figure 15 a/b/c: cache scheduling micro-benchmarks.

usage: percache_fig15.py RESULT.h5 OUT.png
Left: accumulated TFLOPs (query + background work before each query) per variant.
Right: per-query latency per variant.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mobisim_results import load_runs, title  # noqa: E402


def main(path, out):
    order, recs, _, name = load_runs(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    for p in order:
        r = recs[p]
        acc = np.cumsum(r["flops"] + r["bg_flops"]) / 1e12
        ax1.plot(acc, marker="o", label=p)
        ax2.plot(r["latency_s"], marker="o", label=p)
    if len(order) >= 2:
        a = np.sum(recs[order[0]]["flops"] + recs[order[0]]["bg_flops"])
        b = np.sum(recs[order[1]]["flops"] + recs[order[1]]["bg_flops"])
        ax1.set_title(f"{order[0]} vs {order[1]}: {100 * (a - b) / b:+.2f}% TFLOPs", fontsize=9)
    ax1.set_xlabel("query")
    ax1.set_ylabel("accumulated TFLOPs (query + background)")
    ax2.set_xlabel("query")
    ax2.set_ylabel("latency (s)")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=130)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
