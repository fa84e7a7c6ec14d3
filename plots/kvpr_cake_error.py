#!/usr/bin/python3
"""Seed 002 figures 6-7 from a `kvpr_cake` result: closed-form split vs the exact ILP.

usage: kvpr_cake_error.py RESULT.h5 OUT.png

Left (figure 6): closed form (c1 = 1/1.013) vs KVPR's ILP; right (figure 7): the Q-aware
closed form (c2 = 1/1.026) vs the Q-aware ILP. Percent error of the split point per cost
view (analytic form for several h, and the device's roofline costs); dotted: without c.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import open_result, rows, table  # noqa: E402


def main(path, out):
    with open_result(path) as f:
        t = table(f, "tables/error")
        name = f.attrs["name"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for form, ax, title in (("closed_form", axes[0], "figure 6: closed form vs ILP"),
                            ("closed_form_q", axes[1], "figure 7: Q-aware closed form vs Q-aware ILP")):
        for i, c in enumerate(dict.fromkeys(t["costs"])):
            idx = [j for j in rows(t, form=form, costs=c) if not math.isnan(t["error_pct"][j])]
            if not idx:
                continue
            line, = ax.plot([t["seq_len"][j] for j in idx], [t["error_pct"][j] for j in idx], marker="o", ms=3, label=c)
            ax.plot([t["seq_len"][j] for j in idx], [t["error_pct_without_c"][j] for j in idx], linestyle=":",
                    color=line.get_color())
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel("split error vs ILP (%)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(f"{name} (dotted: without the empirical constant)")
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
