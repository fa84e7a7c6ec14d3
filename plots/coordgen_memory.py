#!/usr/bin/python3
"""CoordGen Figure 12: peak memory of each policy (a `coordgen` result file).

usage: coordgen_memory.py RESULT.h5 OUT.png

Bars: peak memory (GB); label: extra over NPU vanilla (MB). The dashed line is NPU vanilla +
500 MB, the document's bound on CoordGen's extra memory. Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, strs  # noqa: E402


def main(path, out):
    _, _, s, name = load_runs(path)
    pol = strs(s["policy"])
    gb = [v / 1e9 for v in s["peak_memory_bytes"]]
    base = gb[pol.index("npu_vanilla")] if "npu_vanilla" in pol else None
    fig, ax = plt.subplots(figsize=(8, 4.2))
    bars = ax.bar(range(len(pol)), gb, color=["tab:red" if p == "coordgen" else "tab:green" for p in pol])
    if base is not None:
        ax.axhline(base + 0.5, ls="--", color="gray", lw=1, label="NPU vanilla + 500 MB")
        for b, v in zip(bars, gb):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"+{(v - base) * 1e3:.0f} MB", ha="center",
                    va="bottom", fontsize=7)
        ax.legend(fontsize=8)
    ax.set_ylabel("peak memory (GB)")
    ax.set_xticks(range(len(pol)))
    ax.set_xticklabels(pol, rotation=40, ha="right", fontsize=8)
    ax.set_title(name)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
