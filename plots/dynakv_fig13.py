#!/usr/bin/python3
"""Seed 003 figure 13 from a `dynakv` result: (a) flash data movement with the dual-head
layout against a packed cluster-by-cluster layout, (b) flash storage used (pools) against the
packed KV bytes, per model.

usage: dynakv_fig13.py RESULT.h5 OUT.png
"""
from dynakv_common import main, plt, summary
from mobisim_results import title  # noqa: E402


def draw(path, out):
    t, name = summary(path)
    models = t["variant"]
    xs = list(range(len(models)))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    ax.bar([x - 0.2 for x in xs], t["naive_layout_moved"], width=0.4, label="cluster-by-cluster", color="#1f77b4")
    moved = [max(v, 1e-3) for v in t["flash_moved"]]
    ax.bar([x + 0.2 for x in xs], moved, width=0.4, label="dual-head", color="#d62728")
    for x, a, b in zip(xs, t["naive_layout_moved"], t["flash_moved"]):
        ratio = a / b if b > 0 else float("inf")
        ax.annotate(f"{ratio:.3g}x", (x, a), ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("data moved on flash (MB, log)")
    ax.set_title("(a) data movement")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.bar([x - 0.2 for x in xs], t["kv_stored"], width=0.4, label="packed KV", color="#1f77b4")
    ax.bar([x + 0.2 for x in xs], t["flash_allocated"], width=0.4, label="dual-head pools", color="#d62728")
    ax.set_ylabel("flash storage (MB)")
    ax.set_title("(b) storage usage")
    ax.legend(fontsize=8)
    for a in axes:
        a.set_xticks(xs)
        a.set_xticklabels(models)
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
