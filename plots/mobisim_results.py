"""Readers for mobisim result files shared by every plot script (h5py only).

A result table is an HDF5 group with one dataset per column and a `columns`
attribute giving their order (see experiments/experiment.h).
"""
import h5py


def _s(x):
    return x.decode() if isinstance(x, bytes) else str(x)


def load_runs(path):
    """(order, {variant: {column: array}}, summary {column: array}, name)."""
    with h5py.File(path, "r") as f:
        order = [_s(s) for s in f["runs"].attrs["order"]]
        recs = {}
        for p in order:
            g = f["runs"][p]["records"]
            recs[p] = {_s(k): g[_s(k)][()] for k in g.attrs["columns"]}
        summary = {}
        if "summary" in f:
            g = f["summary"]
            cols = g.attrs["columns"] if "columns" in g.attrs else list(g.keys())
            summary = {_s(k): g[_s(k)][()] for k in cols}
        return order, recs, summary, _s(f.attrs["name"])


def load_table(path, name):
    with h5py.File(path, "r") as f:
        g = f["tables"][name]
        cols = g.attrs["columns"] if "columns" in g.attrs else list(g.keys())
        return {_s(k): g[_s(k)][()] for k in cols}


def strs(a):
    return [_s(x) for x in a]


def table(f, path):
    g = f[path]
    cols = [c.decode() if isinstance(c, bytes) else c for c in g.attrs["columns"]]
    out = {}
    for c in cols:
        v = g[c][()]
        if len(v) and isinstance(v[0], bytes):
            v = [x.decode() for x in v]
        out[c] = list(v)
    return out


def rows(t, **match):
    n = len(next(iter(t.values())))
    return [i for i in range(n) if all(t[k][i] == v for k, v in match.items())]


def open_result(path):
    return h5py.File(path, "r")


def script_main(draw, doc):
    """`SCRIPT RESULT.h5 OUT.png`: the command line every plot script takes (usage from its docstring)."""
    import sys

    if len(sys.argv) != 3:
        sys.exit(doc)
    draw(sys.argv[1], sys.argv[2])


def policy_bars(ax, policies, values, color, highlight="coordgen", labels=None):
    """One bar per policy (the highlighted one in red), optional text above each, policy names as ticks."""
    bars = ax.bar(range(len(policies)), values, color=["tab:red" if p == highlight else color for p in policies])
    for b, text in zip(bars, labels or []):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), text, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(policies)))
    ax.set_xticklabels(policies, rotation=40, ha="right", fontsize=8)
    return bars


# ---------------------------------------------------------------------------
# What a figure shows: phone, model, runtime (from the result's resolved config)
# ---------------------------------------------------------------------------
def _named(node):
    if isinstance(node, dict):
        return node.get("name") or node.get("base") or ""
    return str(node) if node else ""


def setup_of(path, skip=()):
    """"Pixel 7 (pixel7) · llama-3.2-3b int4 · mllm on cpu": the phone, model and runtime a result
    simulated, read from its /config attribute (parts the experiment does not have, and the parts
    named in `skip` among "device", "model", "engine", are left out)."""
    import yaml

    with h5py.File(path, "r") as f:
        config = yaml.safe_load(_s(f.attrs["config"]))
    e = config.get("experiment", {}) or {}
    parts = []
    device = None if "device" in skip else e.get("device")
    if isinstance(device, dict):
        desc = device.get("description", "")
        parts.append(desc.split(",")[0] if desc else _named(device))
    elif device:
        parts.append(str(device))
    model = None if "model" in skip else e.get("model")
    if model:
        dtype = model.get("weight_dtype", "") if isinstance(model, dict) else ""
        parts.append(f"{_named(model)} {dtype}".strip())
    engine = "" if "engine" in skip else _named(e.get("engine"))
    unit = (e.get("pipeline") or {}).get("compute_unit", "") if isinstance(e.get("pipeline"), dict) else ""
    if engine or unit:
        parts.append(" on ".join(x for x in (engine, unit) if x))
    return " · ".join(p for p in parts if p)


def title(fig, path, what):
    """Figure title: what it shows, then the phone, model and runtime it was simulated on."""
    setup = setup_of(path)
    fig.suptitle(f"{what}\n{setup}" if setup else what, fontsize=10)


# One colour per policy, the same in every figure (PerCache in red; unknown names get a stable colour).
POLICY_COLORS = {
    "naive": "#7f7f7f",
    "ragcache": "#1f77b4",
    "meancache": "#2ca02c",
    "sleeptime": "#9467bd",
    "ragcache_meancache": "#17becf",
    "ragcache_sleeptime": "#8c564b",
    "percache": "#d62728",
    "always_load": "#7f7f7f",
    "always_recompute": "#bcbd22",
    "cake": "#ff7f0e",
    "kvpr_ilp": "#1f77b4",
    "kvpr_closed_form": "#2ca02c",
    "kvpr_closed_form_q": "#9467bd",
    "no_cluster": "#7f7f7f",
    "pqcache": "#1f77b4",
    "clusterkv": "#2ca02c",
    "dynakv": "#d62728",
    "vanilla": "#7f7f7f",
    "pld": "#1f77b4",
    "sam": "#2ca02c",
    "eagle": "#9467bd",
    "coordgen": "#d62728",
}
_EXTRA = ["#e377c2", "#bcbd22", "#ff7f0e", "#aec7e8", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d",
          "#9edae5", "#ffbb78", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"]


def color_of(name):
    """The colour of a policy (or any series name): fixed for known policies, stable for others."""
    if name in POLICY_COLORS:
        return POLICY_COLORS[name]
    h = 0
    for ch in name:
        h = (h * 131 + ord(ch)) % 1000003
    return _EXTRA[h % len(_EXTRA)]


def legend_outside(ax, **kw):
    """A legend to the right of the axes, never over the data."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False, **kw)


def not_modelled(path):
    """The keys a run took as 0 because their costs are not modelled (result attribute `not_modelled`)."""
    with h5py.File(path, "r") as f:
        return strs(f.attrs["not_modelled"]) if "not_modelled" in f.attrs else []
