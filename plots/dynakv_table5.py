#!/usr/bin/python3
"""Seed 003 table 5 from a `dynakv` result: size-weighted mean cluster variance per policy.

usage: dynakv_table5.py RESULT.h5 OUT.png
"""
from dynakv_common import POLICY_COLORS, bars, main, plt, summary


def draw(path, out):
    t, name = summary(path)
    fig, ax = plt.subplots(figsize=(5, 4))
    bars(ax, t["variant"], t["cluster_variance"], [POLICY_COLORS.get(p, "gray") for p in t["policy"]], "{:.2f}")
    ax.set_ylabel("mean cluster variance")
    ax.set_title(name)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
