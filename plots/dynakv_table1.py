#!/usr/bin/python3
"""Seed 003 table 1 from a `dynakv` result: KV cache footprint against the 8-bit weights,
per model and sequence length (tables/table1_footprint), as bars with the ratio printed.

usage: dynakv_table1.py RESULT.h5 OUT.png
"""
from dynakv_common import main, open_result, plt, table


def draw(path, out):
    with open_result(path) as f:
        t = table(f, "tables/table1_footprint")
    models = list(dict.fromkeys(t["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, m in zip(axes[0], models):
        idx = [i for i, x in enumerate(t["model"]) if x == m]
        labels = [f"{t['seq_len'][i] // 1024}K" for i in idx]
        xs = list(range(len(idx)))
        b = ax.bar(xs, [t["kv_cache"][i] for i in idx], color="#d62728", label="KV cache")
        ax.axhline(t["weights"][idx[0]], color="k", linestyle="--", label="8-bit weights")
        for rect, i in zip(b, idx):
            ax.annotate(f"{100 * t['kv_over_weights'][i]:.1f}%", (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels)
        ax.set_xlabel("sequence length")
        ax.set_ylabel("GB")
        ax.set_title(m)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
