#!/usr/bin/python3
"""Seed 003 table 2 from a `dynakv` result: probability that an updated cluster is retrieved
within t steps, one line per variant (model).

usage: dynakv_table2.py RESULT.h5 OUT.png
"""
from dynakv_common import main, plt, summary

HORIZONS = (1, 2, 4, 8, 16)


def draw(path, out):
    t, name = summary(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, v in enumerate(t["variant"]):
        ax.plot(HORIZONS, [100 * t[f"updated_retrieved_within_{h}"][i] for h in HORIZONS], "o-", label=v)
    ax.set_xscale("log", base=2)
    ax.set_xticks(HORIZONS)
    ax.set_xticklabels([str(h) for h in HORIZONS])
    ax.set_xlabel("steps t after the update")
    ax.set_ylabel("retrieved within t steps (%)")
    ax.set_ylim(0, 100)
    ax.set_title(name)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
