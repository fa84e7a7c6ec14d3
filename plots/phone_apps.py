#!/usr/bin/python3
"""Apps sharing one phone (`phone` experiment): what sharing costs each app.

usage: phone_apps.py RESULT.h5 OUT.png

Left: mean and p90 latency per app, alone on the phone and shared with the other apps.
Right: each app's per-request latency over simulated time when shared (dots) and alone (line).
Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, strs  # noqa: E402


def main(path, out):
    order, recs, summary, name = load_runs(path)
    apps = list(dict.fromkeys(strs(summary["app"])))
    scen = strs(summary["scenario"])
    app_col = strs(summary["app"])
    label = {a: f"{a}\n{m} on {u} ({p})" for a, m, u, p in zip(app_col, strs(summary["model"]), strs(summary["unit"]),
                                                            strs(summary["priority"]))}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [1, 1.5]})
    width = 0.38
    colours = {"alone": "#8da0cb", "shared": "#fc8d62"}
    for k, sc in enumerate(["alone", "shared"]):
        means, p90s, xs = [], [], []
        for i, a in enumerate(apps):
            rows = [j for j in range(len(scen)) if scen[j] == sc and app_col[j] == a]
            if not rows:
                continue
            xs.append(i + (k - 0.5) * width)
            means.append(float(summary["mean_latency_s"][rows[0]]))
            p90s.append(float(summary["p90_latency_s"][rows[0]]))
        if xs:
            ax1.bar(xs, means, width, color=colours[sc], label=f"{sc}: mean")
            ax1.scatter(xs, p90s, color="black", marker="_", s=200, zorder=3,
                        label="p90" if sc == "shared" else None)
    ax1.set_xticks(range(len(apps)))
    ax1.set_xticklabels([label[a] for a in apps], fontsize=7)
    ax1.set_ylabel("latency per request (s)")
    ax1.set_title("alone vs sharing the phone")
    ax1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0) if len(apps) > 3 else None)
    for a in apps:
        for sc, style in (("shared", "."), ("alone", "-")):
            key = f"{sc}.{a}"
            if key in recs and len(recs[key].get("latency_s", [])):
                ax2.plot(recs[key]["arrival_s"], recs[key]["latency_s"], style, markersize=4, linewidth=0.8,
                         label=f"{a} ({sc})")
    ax2.set_xlabel("request arrival (simulated s)")
    ax2.set_ylabel("latency (s)")
    ax2.set_yscale("log")
    ax2.set_title("per-request latency")
    ax2.legend(fontsize=7)
    device = strs(summary["device"])[0] if "device" in summary else ""
    fig.suptitle(f"{name}: apps sharing one {device}")
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
