#!/usr/bin/env python3
"""mobisim fidelity plot: simulated vs published for every numeric registry point (log-log),
validation and calibration points marked (validation points whose residual is put down to a workload
difference drawn hollow), the +-10% band shaded; the summary, causes and on-device lines below.

usage: fidelity.py fidelity.h5 fidelity.png
"""
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def column(g, name):
    v = g[name][()]
    if v.dtype.kind in ("S", "O"):
        return np.array([x.decode() if isinstance(x, bytes) else str(x) for x in v])
    return np.asarray(v, dtype=float)


def main(h5_path, png_path):
    with h5py.File(h5_path, "r") as f:
        g = f["points"]
        role, kind, status = column(g, "role"), column(g, "kind"), column(g, "status")
        pub, sim, sets = column(g, "published"), column(g, "simulated"), column(g, "set")
        cause_kind = column(g, "cause_kind") if "cause_kind" in g else np.array([""] * len(role))
        lines = []
        for key in ("summary", "causes_summary", "ondevice_summary"):
            if key in f.attrs:
                v = f.attrs[key]
                v = v.decode() if isinstance(v, bytes) else str(v)
                if v:
                    lines.append(v)
        summary = "\n".join(lines)
    ok = (status == "ok") & (kind != "trend") & (pub > 0) & (sim > 0)
    fig, ax = plt.subplots(figsize=(7.5, 7.0))
    lo = min(pub[ok].min(), sim[ok].min()) / 2 if ok.any() else 1e-3
    hi = max(pub[ok].max(), sim[ok].max()) * 2 if ok.any() else 1e3
    x = np.geomspace(lo, hi, 200)
    ax.fill_between(x, x * 0.9, x * 1.1, color="0.85", label="±10%", zorder=0)
    ax.plot(x, x, color="0.4", lw=0.8, zorder=1)
    markers = {"percache": "o", "prefix_cache": "s", "kvpr_cake": "^", "dynakv": "D", "coordgen": "v",
               "ondevice": "P"}
    workload = cause_kind == "workload"
    for r, color in (("validation", "tab:blue"), ("calibration", "tab:orange")):
        for s in sorted(set(sets[ok & (role == r)])):
            m = ok & (role == r) & (sets == s)
            filled, hollow = m & ~workload, m & workload
            if filled.any():
                ax.scatter(pub[filled], sim[filled], c=color, marker=markers.get(s, "X"), s=36, edgecolors="k",
                           linewidths=0.4, label=f"{r}: {s}", zorder=3)
            if hollow.any():
                ax.scatter(pub[hollow], sim[hollow], facecolors="none", edgecolors=color, marker=markers.get(s, "X"),
                           s=36, linewidths=1.0, label=f"{r}: {s} (workload differs)", zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published (point's unit)")
    ax.set_ylabel("mobisim (same unit)")
    ax.set_title("mobisim vs published numbers", fontsize=11)
    ax.legend(fontsize=7, loc="upper left", ncol=1)
    fig.text(0.01, 0.005, summary, fontsize=5.5, wrap=True)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.savefig(png_path, dpi=130)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
