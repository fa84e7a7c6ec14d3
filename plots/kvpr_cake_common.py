"""Helpers shared by the kvpr_cake_* and prefix_cache_* plot scripts (h5py only)."""
import h5py


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
