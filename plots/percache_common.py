"""Shared readers for the PerCache plot scripts (h5py only)."""
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
