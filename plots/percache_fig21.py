#!/usr/bin/python3
"""PerCache figure 21: the seven policies on several phones.

usage: percache_fig21.py RESULT.h5 OUT.png
Reads every results/percache/fig21_<device>.h5 next to RESULT.h5 and draws mean latency
per policy, grouped by device.
"""
import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mobisim_results import load_runs  # noqa: E402


def main(path, out):
    files = sorted(glob.glob(os.path.join(os.path.dirname(path) or ".", "fig21_*.h5"))) or [path]
    fig, ax = plt.subplots(figsize=(11, 4))
    order = None
    for d, f in enumerate(files):
        o, recs, _, _ = load_runs(f)
        order = order or o
        width = 0.8 / len(o)
        for i, p in enumerate(o):
            ax.bar(d + i * width, recs[p]["latency_s"].mean(), width, color=f"C{i}", label=p if d == 0 else None)
    ax.set_xticks(np.arange(len(files)) + 0.4)
    ax.set_xticklabels([os.path.basename(f)[6:-3] for f in files])
    ax.set_ylabel("mean latency (s)")
    ax.legend(fontsize=7, ncol=4)
    fig.suptitle("percache_fig21: User 0 on three phones")
    fig.tight_layout()
    fig.savefig(out, dpi=130)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
