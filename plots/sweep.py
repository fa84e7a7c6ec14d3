#!/usr/bin/python3
"""A sweep's metrics against one swept parameter, with 95% confidence bands over seeds.

usage: sweep.py INDEX.h5 OUT.png [--metric M[,M2,...]] [--x KEY] [--by variant|KEY] [--variants A,B]

Reads /points of a sweep index (mobisim sweep): one panel per metric, one line per variant
(or per value of a second swept parameter), the shaded band is the 95% confidence interval of
the mean over seeds (absent with one seed).
"""
import argparse

import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def text(values):
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def as_number(s):
    try:
        return float(s)
    except ValueError:
        return None


def metric_range(name):
    """The values a metric can take: rates and fractions lie in [0, 1], times, counts, energies
    and bytes are never negative (a confidence band is clipped to this range)."""
    if name.endswith("_rate") or "fraction" in name or name.startswith("mean_rouge") or name.startswith("mean_bleu"):
        return 0.0, 1.0
    return 0.0, None


def describe_setup(f, index_path, params):
    """Phone, model and runtime of the sweep's first run (result paths are relative to the index)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mobisim_results import setup_of

    try:
        runs = f["runs"]
        cols = {c: runs[c][()] for c in text(runs.attrs["columns"])}
        result = text(cols["result"])[0] if "result" in cols else ""
        result = os.path.join(os.path.dirname(os.path.abspath(index_path)), result) if result else ""
        if result and os.path.exists(result):
            swept = {part for part in ("device", "model", "engine") if any(f"experiment.{part}" in p for p in params)}
            setup = setup_of(result, skip=swept)
            return setup + (f" ({', '.join(sorted(swept))} swept)" if swept else "")
    except (KeyError, IndexError, OSError):
        pass
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index")
    ap.add_argument("out")
    ap.add_argument("--metric", default="mean_latency_s")
    ap.add_argument("--x", default=None)
    ap.add_argument("--by", default="variant")
    ap.add_argument("--variants", default=None, help="only these variants (comma-separated)")
    a = ap.parse_args()
    f = h5py.File(a.index, "r")
    params = text(f.attrs["parameters"])
    if not params:
        raise SystemExit(f"{a.index}: the sweep varies no parameter")
    x_key = a.x or params[0]
    if x_key not in params:
        raise SystemExit(f"{a.index}: '{x_key}' is not a swept parameter ({', '.join(params)})")
    g = f["points"]
    cols = {c: g[c][()] for c in text(g.attrs["columns"])}
    xs = text(cols[x_key])
    group_col = text(cols["variant"]) if a.by == "variant" else text(cols[a.by])
    other = [p for p in params if p not in (x_key, a.by)]
    rest = [" ".join(f"{p.split('.')[-1]}={v}" for p, v in zip(other, vals)) for vals in zip(*[text(cols[p]) for p in other])] \
        if other else [""] * len(xs)
    metrics = a.metric.split(",")
    numeric = all(as_number(x) is not None for x in xs)
    order = []
    for x in xs:
        if x not in order:
            order.append(x)
    if numeric:
        order.sort(key=float)
    keep = set(a.variants.split(",")) if a.variants else None
    groups = []
    for g_ in group_col:
        if g_ not in groups:
            groups.append(g_)
    others = sorted(set(rest))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mobisim_results import color_of
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics) + 2.2, 3.6), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        if m + "_mean" not in cols:
            raise SystemExit(f"{a.index}: no metric '{m}' in /points")
        lines = {}
        for i, x in enumerate(xs):
            if keep and text(cols["variant"])[i] not in keep:
                continue
            lines.setdefault((group_col[i], rest[i]), []).append((x, cols[m + "_mean"][i], cols[m + "_ci95"][i]))
        for (group, other_values), pts in lines.items():
            pts.sort(key=lambda p: float(p[0]) if numeric else order.index(p[0]))
            px = [float(p[0]) if numeric else order.index(p[0]) for p in pts]
            mean = [p[1] for p in pts]
            ci = [p[2] for p in pts]
            color = color_of(group) if a.by == "variant" else colors[groups.index(group) % len(colors)]
            style = styles[others.index(other_values) % len(styles)]
            label = group + (f" ({other_values})" if other_values else "")
            ax.plot(px, mean, marker="o", markersize=3, color=color, linestyle=style, label=label)
            if any(c > 0 for c in ci):
                lo_bound, hi_bound = metric_range(m)
                low = [max(lo_bound, u - c) for u, c in zip(mean, ci)]
                high = [u + c if hi_bound is None else min(hi_bound, u + c) for u, c in zip(mean, ci)]
                ax.fill_between(px, low, high, color=color, alpha=0.12)
        if not numeric:
            ax.set_xticks(range(len(order)))
            ax.set_xticklabels(order, rotation=30, ha="right", fontsize=7)
        ax.set_xlabel(x_key.split(".")[-1])
        ax.set_title(m, fontsize=9)
        ax.grid(alpha=0.3)
    # One legend: a colour per variant (or value of --by), a line style per value of the other swept
    # parameters, each said once (not every combination).
    from matplotlib.lines import Line2D

    shown = [g_ for g_ in groups if keep is None or a.by != "variant" or g_ in keep]
    handles = [Line2D([], [], color=color_of(g_) if a.by == "variant" else colors[groups.index(g_) % len(colors)],
                      marker="o", markersize=3, label=g_) for g_ in shown]
    if len(others) > 1 or others[0]:
        handles += [Line2D([], [], color="black", linestyle=styles[i % len(styles)], label=o) for i, o in enumerate(others)]
    fig.legend(handles=handles, loc="center right", fontsize=7, frameon=False,
               title=("variant" if a.by == "variant" else a.by.split(".")[-1]) +
               (" / line style: " + ", ".join(p.split(".")[-1] for p in other) if other else ""),
               title_fontsize=7)
    sweep_file = f.attrs["sweep"] if isinstance(f.attrs["sweep"], str) else f.attrs["sweep"].decode()
    setup = describe_setup(f, a.index, params)
    name = sweep_file.rsplit("/", 1)[-1]
    seeds = int(max(cols["seeds_ok"])) if "seeds_ok" in cols and len(cols["seeds_ok"]) else 1
    spread = f"bands: 95% intervals over {seeds} seeds" if seeds > 1 else "one seed per point (no intervals)"
    fig.suptitle(f"{name}: {spread}" + (f"\n{setup}" if setup else ""), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - 2.2 / (4.2 * len(metrics) + 2.2), 1))
    fig.savefig(a.out, dpi=130)


if __name__ == "__main__":
    main()
