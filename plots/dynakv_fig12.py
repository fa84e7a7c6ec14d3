#!/usr/bin/python3
"""Seed 003 figure 12 from a `dynakv` result: entries per contiguous flash read (mean and max)
under strict sequence order, intra-cluster and inter-cluster placement. Dashed: the document's
means (< 7.9, 25.3, 40.8 entries).

usage: dynakv_fig12.py RESULT.h5 OUT.png
"""
from dynakv_common import main, plt, summary

DOC = {"sequence": 7.9, "intra": 25.3, "inter": 40.8}


def draw(path, out):
    t, name = summary(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = list(range(len(t["variant"])))
    ax.bar([x - 0.2 for x in xs], t["mean_run_entries"], width=0.4, label="mean (mobisim)", color="#d62728")
    ax.bar([x + 0.2 for x in xs], t["max_run_entries"], width=0.4, label="max (mobisim)", color="#ff9896")
    for x, p in zip(xs, t["placement"]):
        if p in DOC:
            ax.hlines(DOC[p], x - 0.4, x + 0.4, colors="k", linestyles="--")
    ax.plot([], [], "k--", label="document mean")
    ax.set_xticks(xs)
    ax.set_xticklabels(t["placement"])
    ax.set_yscale("log")
    ax.set_ylabel("entries per contiguous read")
    ax.set_title(name)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
