"""Shared helpers of the DynaKV (seed 003) plot scripts: read the `dynakv` summary table."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402,F401

from mobisim_results import open_result, rows, script_main, table  # noqa: E402,F401

POLICY_COLORS = {"no_cluster": "#7f7f7f", "pqcache": "#1f77b4", "clusterkv": "#ff7f0e", "dynakv": "#d62728"}
BASELINES = ("pqcache", "clusterkv")


def summary(path):
    """(summary columns as lists, experiment name)."""
    with open_result(path) as f:
        t = table(f, "summary")
        name = f.attrs["name"]
    return t, name.decode() if isinstance(name, bytes) else str(name)


def main(draw, doc):
    script_main(draw, doc)


def bars(ax, labels, values, colors=None, fmt="{:.1f}"):
    xs = range(len(labels))
    b = ax.bar(xs, values, color=colors)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=20, ha="right")
    for rect, v in zip(b, values):
        ax.annotate(fmt.format(v), (rect.get_x() + rect.get_width() / 2, rect.get_height()), ha="center",
                    va="bottom", fontsize=7)
    return b


def grouped(ax, groups, series, value, colors=None, ylabel=""):
    """groups: x labels; series: names; value(group, series) -> float."""
    n = len(series)
    w = 0.8 / max(1, n)
    for j, s in enumerate(series):
        xs = [i + (j - (n - 1) / 2) * w for i in range(len(groups))]
        ax.bar(xs, [value(g, s) for g in groups], width=w, label=s,
               color=(colors or {}).get(s))
    ax.set_xticks(list(range(len(groups))))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
