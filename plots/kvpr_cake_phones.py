#!/usr/bin/python3
"""Beyond the documents, from a `kvpr_cake` result: Cake-style splits on phones.

usage: kvpr_cake_phones.py RESULT.h5 OUT.png

One panel per phone: Cake time over pure load across prefix lengths, per compute unit and
block size (K/V payload solid, PerCache Q/K/V payload dashed); below 1 Cake beats pure load.
The best single split (exact ILP over the device costs) is drawn in black as the bound.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from matplotlib.lines import Line2D  # noqa: E402

from mobisim_results import open_result, rows, table, title  # noqa: E402


def main(path, out):
    with open_result(path) as f:
        t = table(f, "tables/phones")
        th = table(f, "tables/phone_threshold")
        name = f.attrs["name"]
    devices = list(dict.fromkeys(t["device"]))
    # A colour per (unit, block size), the same in every panel; the payload is the line style.
    combos = list(dict.fromkeys((t["unit"][i], t["block_tokens"][i]) for i in range(len(t["unit"]))))
    palette = plt.get_cmap("tab10" if len(combos) <= 10 else "tab20").colors
    color = {c: palette[k % len(palette)] for k, c in enumerate(combos)}
    fig, axes = plt.subplots(1, len(devices), figsize=(4.2 * len(devices) + 2.2, 4.8), sharey=True, squeeze=False)
    for ax, dev in zip(axes[0], devices):
        storage = t["storage"][rows(t, device=dev)[0]]
        for unit in dict.fromkeys(t["unit"][i] for i in rows(t, device=dev)):
            for block in dict.fromkeys(t["block_tokens"][i] for i in rows(t, device=dev, unit=unit)):
                for pl, style in (("kv", "-"), ("qkv", "--")):
                    idx = rows(t, device=dev, unit=unit, block_tokens=block, payload=pl)
                    if idx:
                        ax.plot([t["prefix_len"][i] for i in idx], [t["cake_over_load"][i] for i in idx], style,
                                marker=".", ms=3, color=color[(unit, block)])
        idx = rows(t, device=dev, unit="gpu", payload="kv", block_tokens=t["block_tokens"][0])
        ax.plot([t["prefix_len"][i] for i in idx], [t["best_split_over_load"][i] for i in idx], color="black",
                linewidth=2, label="best split (gpu, kv)")
        ax.axhline(1.0, color="red", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylim(0.8, 20)
        wins = [f"{th['unit'][i]} b={th['block_tokens'][i]} {th['payload'][i]}: >={th['cake_beats_load_from_tokens'][i]}"
                for i in rows(th, device=dev) if th["cake_beats_load_from_tokens"][i] > 0]
        ax.set_title(f"{dev} ({storage})\n" + ("; ".join(wins) if wins else "Cake never beats pure load"), fontsize=8)
        ax.set_xlabel("prefix length (tokens)")
    axes[0][0].set_ylabel("Cake time / pure-load time")
    handles = [Line2D([], [], color=color[c], label=f"{c[0]}, {c[1]}-token blocks") for c in combos]
    handles += [Line2D([], [], color="grey", linestyle="-", label="K/V payload"),
                Line2D([], [], color="grey", linestyle="--", label="PerCache Q/K/V payload"),
                Line2D([], [], color="black", linewidth=2, label="best split (gpu, K/V)"),
                Line2D([], [], color="red", linestyle="--", linewidth=1, label="pure load (= 1)")]
    fig.legend(handles=handles, loc="center right", fontsize=7, frameon=False)
    title(fig, path, f"{name}: prefix caches on phone storage, recompute while reading (below 1: Cake wins)")
    fig.tight_layout(rect=(0, 0, 1 - 2.2 / (4.2 * len(devices) + 2.2), 1))
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
