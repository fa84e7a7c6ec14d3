#!/usr/bin/python3
"""CoordGen Figure 11: energy per request of each policy (a `coordgen` result file).

usage: coordgen_energy.py RESULT.h5 OUT.png

Bars: mean energy per request (J); label: the policy's energy divided by CoordGen's (the
document's "CoordGen reduces energy by 1.07-4.71x"). Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, strs  # noqa: E402


def main(path, out):
    _, _, s, name = load_runs(path)
    pol = strs(s["policy"])
    e = list(s["energy_per_request_j"])
    ref = e[pol.index("coordgen")] if "coordgen" in pol else None
    fig, ax = plt.subplots(figsize=(8, 4.2))
    bars = ax.bar(range(len(pol)), e, color=["tab:red" if p == "coordgen" else "tab:orange" for p in pol])
    if ref:
        for b, v in zip(bars, e):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{v / ref:.2f}x", ha="center", va="bottom",
                    fontsize=7)
    ax.set_ylabel("energy per request (J)  [label: / CoordGen]")
    ax.set_xticks(range(len(pol)))
    ax.set_xticklabels(pol, rotation=40, ha="right", fontsize=8)
    ax.set_title(name)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
