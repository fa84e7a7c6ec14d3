#!/usr/bin/python3
"""PerCache figure 16: ablation latency and hit rates.

usage: percache_fig16.py RESULT.h5 OUT.png
Left: mean latency per variant. Right: QA-bank hit rate and QKV chunk hit rate.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mobisim_results import load_runs, strs, title  # noqa: E402


def main(path, out):
    order, recs, summ, name = load_runs(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    ax1.bar(range(len(order)), [recs[p]["latency_s"].mean() for p in order])
    ax1.set_xticks(range(len(order)))
    ax1.set_xticklabels(order, rotation=30, ha="right", fontsize=8)
    ax1.set_ylabel("mean latency (s)")
    pol = strs(summ["policy"])
    qa = [summ["qa_hit_rate"][pol.index(p)] for p in order]
    kv = [summ["kv_chunk_hit_rate"][pol.index(p)] for p in order]
    x = np.arange(len(order))
    ax2.bar(x - 0.2, qa, 0.4, label="QA bank hit rate")
    ax2.bar(x + 0.2, kv, 0.4, label="QKV chunk hit rate")
    ax2.set_xticks(x)
    ax2.set_xticklabels(order, rotation=30, ha="right", fontsize=8)
    ax2.legend(fontsize=8)
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=130)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
