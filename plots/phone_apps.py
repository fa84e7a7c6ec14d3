#!/usr/bin/python3
"""Apps sharing one phone (`phone` experiment): what sharing costs each app.

usage: phone_apps.py RESULT.h5 OUT.png

Left: mean and p90 latency per app, alone on the phone and shared with the other apps.
Right: each app's per-request latency over simulated time when shared (dots) and alone (line).
With a thermal model (`thermal:`), a row below: junction and skin temperature and each governed
unit's clock over simulated time (tables/thermal.<scenario>), trips shaded where throttled.
Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, strs  # noqa: E402
import h5py  # noqa: E402


def thermal_tables(path):
    """{scenario: {column: array}} of the sustained-use series, empty without a thermal model."""
    out = {}
    with h5py.File(path, "r") as f:
        if "tables" not in f:
            return out
        for name in f["tables"]:
            if name.startswith("thermal."):
                g = f["tables"][name]
                cols = [c.decode() if isinstance(c, bytes) else c for c in g.attrs["columns"]]
                out[name[len("thermal."):]] = {c: g[c][()] for c in cols}
    return out


def draw_thermal(axes, series):
    """Temperatures (left axis) and clocks (right axis) per simulation over simulated time."""
    for ax, (scenario, t) in zip(axes, series.items()):
        ax.plot(t["t_s"], t["junction_c"], color="tab:red", label="junction")
        ax.plot(t["t_s"], t["skin_c"], color="tab:orange", label="skin")
        ax.set_ylabel("temperature (C)")
        ax.set_xlabel("simulated s")
        ax.set_title(f"{scenario}: heat and clocks", fontsize=9)
        clocks = ax.twinx()
        palette = iter(["tab:blue", "tab:green", "tab:purple", "tab:brown"])
        for col in t:
            if col.endswith("_mhz"):
                clocks.step(t["t_s"], t[col], where="post", linewidth=0.8, color=next(palette, "tab:gray"),
                            label=col.replace("_mhz", " MHz"))
        clocks.set_ylabel("clock (MHz)")
        lines = ax.get_legend_handles_labels()
        more = clocks.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="lower right")


def main(path, out):
    order, recs, summary, name = load_runs(path)
    apps = list(dict.fromkeys(strs(summary["app"])))
    scen = strs(summary["scenario"])
    app_col = strs(summary["app"])
    scenarios = [sc for sc in ("alone", "shared") if sc in scen]
    shared = "shared" in scenarios
    label = {}
    for a, m, u, p in zip(app_col, strs(summary["model"]), strs(summary["unit"]), strs(summary["priority"])):
        label[a] = f"{a}\n{m}\non {u}" + (f" ({p})" if shared else "")
    series = thermal_tables(path)
    if series:
        fig = plt.figure(figsize=(12, 9))
        grid = fig.add_gridspec(2, max(2, len(series)))
        ax1 = fig.add_subplot(grid[0, : max(1, grid.ncols // 2)])
        ax2 = fig.add_subplot(grid[0, max(1, grid.ncols // 2):])
        draw_thermal([fig.add_subplot(grid[1, k]) for k in range(len(series))], series)
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [1, 1.4]})
    width = 0.8 / len(scenarios)
    colours = {"alone": "#8da0cb", "shared": "#fc8d62"}
    for k, sc in enumerate(scenarios):
        means, p90s, xs = [], [], []
        for i, a in enumerate(apps):
            rows = [j for j in range(len(scen)) if scen[j] == sc and app_col[j] == a]
            if not rows:
                continue
            xs.append(i + (k - (len(scenarios) - 1) / 2) * width)
            means.append(float(summary["mean_latency_s"][rows[0]]))
            p90s.append(float(summary["p90_latency_s"][rows[0]]))
        if xs:
            ax1.bar(xs, means, width * 0.95, color=colours[sc], label=f"{sc}: mean")
            ax1.scatter(xs, p90s, color="black", marker="_", s=200, zorder=3, label="p90" if k == 0 else None)
    ax1.set_xticks(range(len(apps)))
    ax1.set_xticklabels([label[a] for a in apps], fontsize=7)
    ax1.set_ylabel("latency per request (s)")
    ax1.set_title("alone vs sharing the phone" if shared else "each app alone on the phone")
    top = max(float(x) for x in summary["p90_latency_s"])
    ax1.set_ylim(0, top * 1.3)  # room above the bars for the legend
    ax1.legend(fontsize=8, loc="upper center", ncol=3, framealpha=0.9)
    for i, a in enumerate(apps):
        colour = plt.get_cmap("tab10")(i % 10)  # one colour per app; dots shared, line alone
        for sc, style in (("shared", "."), ("alone", "-")):
            key = f"{sc}.{a}"
            if key in recs and len(recs[key].get("latency_s", [])):
                ax2.plot(recs[key]["arrival_s"], recs[key]["latency_s"], style, color=colour, markersize=4,
                         linewidth=0.8, label=f"{a} ({sc})")
    ax2.set_xlabel("request arrival (simulated s)")
    ax2.set_ylabel("latency (s)")
    ax2.set_yscale("log")
    ax2.set_title("per-request latency")
    ax2.legend(fontsize=7)
    device = strs(summary["device"])[0] if "device" in summary else ""
    what = "apps sharing one" if shared else "apps, each alone on one"
    fig.suptitle(f"{name}: {what} {device}")
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
