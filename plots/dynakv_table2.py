#!/usr/bin/python3
"""Seed 003 table 2 from a `dynakv` result: probability that an updated cluster is retrieved
within t steps, one line per variant (model); dashed: the document's row of the same model.

usage: dynakv_table2.py RESULT.h5 OUT.png
"""
from dynakv_common import main, plt, summary

HORIZONS = (1, 2, 4, 8, 16)
# The document's Table 2 (MMLU), by variant name.
DOC = {"qwen-s": (42.4, 47.9, 53.7, 60.5, 67.0), "qwen-m": (59.4, 65.5, 70.9, 76.3, 80.1),
       "llama-s": (36.5, 42.3, 48.7, 54.1, 61.4), "llama-m": (30.1, 36.3, 42.8, 49.6, 54.9)}


def draw(path, out):
    t, name = summary(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, v in enumerate(t["variant"]):
        line, = ax.plot(HORIZONS, [100 * t[f"updated_retrieved_within_{h}"][i] for h in HORIZONS], "o-", label=v)
        if v in DOC:
            ax.plot(HORIZONS, DOC[v], "--", color=line.get_color(), alpha=0.6, label=f"{v} (document)")
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
