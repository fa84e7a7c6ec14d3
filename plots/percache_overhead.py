#!/usr/bin/python3
"""PerCache Table 1 / figure 20 (percache_overhead driver).

usage: percache_overhead.py RESULT.h5 OUT.png
table1: simulated vs document per-operation latency (log scale) and per-item storage.
battery: battery % used versus number of cache populations, with the document's 10 % at 51.
"""
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mobisim_results import load_table, strs  # noqa: E402


def main(path, out):
    with h5py.File(path, "r") as f:
        tables = list(f["tables"].keys())
    if "battery" in tables:
        t = load_table(path, "battery")
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(t["populations"], t["battery_used_percent"], marker=".", label="simulated")
        ax.plot([0, 51], [0, 10], "--", label="document: 51 populations = 10 %")
        ax.set_xlabel("cache populations")
        ax.set_ylabel("battery used (%)")
        ax.legend()
        ax.set_title("percache_fig20 (OnePlus Ace 6, Llama-3.2-3B)")
    else:
        lat = load_table(path, "latency")
        st = load_table(path, "storage")
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4))
        ops = strs(lat["operation"])
        x = np.arange(len(ops))
        ax1.bar(x - 0.2, lat["simulated_s"], 0.4, label="simulated")
        ax1.bar(x + 0.2, lat["document_s"], 0.4, label="Table 1")
        ax1.set_yscale("log")
        ax1.set_xticks(x)
        ax1.set_xticklabels(ops, rotation=30, ha="right", fontsize=7)
        ax1.set_ylabel("seconds")
        ax1.legend()
        comp = strs(st["component"])
        x = np.arange(len(comp))
        ax2.bar(x - 0.2, st["simulated_bytes"], 0.4, label="simulated")
        ax2.bar(x + 0.2, st["document_bytes"], 0.4, label="Table 1")
        ax2.set_yscale("log")
        ax2.set_xticks(x)
        ax2.set_xticklabels(comp, rotation=20, ha="right", fontsize=7)
        ax2.set_ylabel("bytes per item")
        ax2.legend()
        fig.suptitle("percache_table1 (Pixel 7, Llama-3.2-3B)")
    fig.tight_layout()
    fig.savefig(out, dpi=130)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
