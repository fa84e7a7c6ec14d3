#!/usr/bin/python3
"""Seed 002 figure 3 from a `kvpr_cake` result: time of each strategy over pure load.

usage: kvpr_cake_fig3.py RESULT.h5 OUT.png

Left: without Q computation; right: with Q (every strategy computes Q of all positions on
the compute stream). y = 1 (dashed) is pure load.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import open_result, rows, table  # noqa: E402


def main(path, out):
    with open_result(path) as f:
        t = table(f, "tables/fig3")
        name = f.attrs["name"]
    strategies = list(dict.fromkeys(t["strategy"]))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for q, ax in zip((0, 1), axes):
        for s in strategies:
            idx = rows(t, strategy=s, with_q=q)
            ax.plot([t["seq_len"][i] for i in idx], [t["ratio_vs_load"][i] for i in idx], marker="o", ms=3, label=s)
        ax.axhline(1.0, color="red", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title("with Q computation" if q else "without Q computation")
    axes[0].set_ylabel("time / pure-load time")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{name}: compute-or-load on P100 + PCIe 3.0")
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
