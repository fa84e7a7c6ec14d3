#!/usr/bin/python3
"""CoordGen Figure 11: energy per request of each policy (a `coordgen` result file).

usage: coordgen_energy.py RESULT.h5 OUT.png

Bars: mean energy per request (J); label: the policy's energy divided by CoordGen's (the
document's "CoordGen reduces energy by 1.07-4.71x"). Reads the HDF5 with h5py only.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, policy_bars, script_main, strs  # noqa: E402


def main(path, out):
    _, _, s, name = load_runs(path)
    pol = strs(s["policy"])
    e = list(s["energy_per_request_j"])
    ref = e[pol.index("coordgen")] if "coordgen" in pol else None
    fig, ax = plt.subplots(figsize=(8, 4.2))
    policy_bars(ax, pol, e, "tab:orange", labels=[f"{v / ref:.2f}x" for v in e] if ref else None)
    ax.set_ylabel("energy per request (J)  [label: / CoordGen]")
    ax.set_title(name)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    script_main(main, __doc__)
