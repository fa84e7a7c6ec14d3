#!/usr/bin/python3
"""Seed 003 figure 18 from a `dynakv` result: (a) average power and (b) energy per token of
each policy across models (variants MODEL/POLICY).

usage: dynakv_fig18.py RESULT.h5 OUT.png
"""
from dynakv_common import POLICY_COLORS, grouped, main, plt, summary
from mobisim_results import title  # noqa: E402


def draw(path, out):
    t, name = summary(path)
    parts = [v.split("/") for v in t["variant"]]
    groups = list(dict.fromkeys(p[0] for p in parts))
    series = list(dict.fromkeys(t["policy"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, label in ((axes[0], "power", "average power (W)"), (axes[1], "energy_per_token", "energy per token (mJ)")):
        val = {(p[0], t["policy"][i]): t[metric][i] for i, p in enumerate(parts)}
        grouped(ax, groups, series, lambda g, s: val.get((g, s), 0.0), POLICY_COLORS, label)
        ax.legend(fontsize=7)
    axes[0].set_title("(a) power")
    axes[1].set_title("(b) energy")
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
