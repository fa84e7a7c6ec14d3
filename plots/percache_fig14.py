#!/usr/bin/python3
"""PerCache figure 14 (and 22): per-user mean latency of the seven policies.

usage: percache_fig14.py RESULT.h5 OUT.png
Left: mean latency per user and policy (grouped bars). Right: overall mean latency per
policy, with the reduction of PerCache against each baseline.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mobisim_results import color_of, legend_outside, load_runs, strs, title  # noqa: E402


def main(path, out):
    order, recs, _, name = load_runs(path)
    users = []
    for p in order:
        for u in strs(recs[p]["user"]):
            if u not in users:
                users.append(u)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 4.8), gridspec_kw={"width_ratios": [2.2, 1]})
    width = 0.8 / len(order)
    x = np.arange(len(users))
    for i, p in enumerate(order):
        u = np.array(strs(recs[p]["user"]))
        lat = recs[p]["latency_s"]
        means = [lat[u == uid].mean() if (u == uid).any() else 0 for uid in users]
        ax1.bar(x + i * width, means, width, label=p, color=color_of(p))
    ax1.set_xticks(x + 0.4 - width / 2)
    ax1.set_xticklabels([s.split("/")[-1] for s in users], rotation=60, fontsize=7)
    ax1.set_ylabel("mean latency per user (s)")
    legend_outside(ax1)
    overall = [recs[p]["latency_s"].mean() for p in order]
    ax2.bar(range(len(order)), overall, color=[color_of(p) for p in order])
    ax2.set_xticks(range(len(order)))
    ax2.set_xticklabels(order, rotation=45, ha="right", fontsize=8)
    ax2.set_ylabel("mean latency, all queries (s)")
    if "percache" in order:
        pc = overall[order.index("percache")]
        for i, v in enumerate(overall):
            ax2.text(i, v, f"{100 * (v - pc) / v:.1f}%" if order[i] != "percache" else "", ha="center",
                     va="bottom", fontsize=7)
        ax2.set_title("labels: PerCache's reduction vs each", fontsize=9)
    title(fig, path, f"PerCache and its baselines, mean latency per user ({name})")
    fig.tight_layout()
    fig.savefig(out, dpi=130)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
