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
