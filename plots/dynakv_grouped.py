"""Grouped bars of a `dynakv` summary whose variants are named GROUP/.../POLICY."""
from dynakv_common import POLICY_COLORS, grouped, plt, summary
from mobisim_results import title  # noqa: E402


def draw_grouped(path, out, metric, ylabel, panel_key=None, figsize=(11, 4)):
    t, name = summary(path)
    parts = [v.split("/") for v in t["variant"]]
    panels = list(dict.fromkeys(p[0] for p in parts)) if panel_key else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=figsize, squeeze=False)
    for ax, panel in zip(axes[0], panels):
        idx = [i for i, p in enumerate(parts) if panel is None or p[0] == panel]
        groups = list(dict.fromkeys("/".join(parts[i][1 if panel else 0:-1]) for i in idx))
        series = list(dict.fromkeys(t["policy"][i] for i in idx))
        val = {("/".join(parts[i][1 if panel else 0:-1]), t["policy"][i]): t[metric][i] for i in idx}
        grouped(ax, groups, series, lambda g, s: val.get((g, s), 0.0), POLICY_COLORS, ylabel)
        if panel:
            ax.set_title(panel)
        ax.legend(fontsize=7)
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=150)
