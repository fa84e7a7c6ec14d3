#!/usr/bin/python3
"""CoordGen Figure 12: peak memory of each policy (a `coordgen` result file).

usage: coordgen_memory.py RESULT.h5 OUT.png

Bars: peak memory (GB); label: extra over NPU vanilla (MB). The dashed line is NPU vanilla +
500 MB, the document's bound on CoordGen's extra memory. Reads the HDF5 with h5py only.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, policy_bars, script_main, strs  # noqa: E402


def main(path, out):
    _, _, s, name = load_runs(path)
    pol = strs(s["policy"])
    gb = [v / 1e9 for v in s["peak_memory_bytes"]]
    base = gb[pol.index("npu_vanilla")] if "npu_vanilla" in pol else None
    fig, ax = plt.subplots(figsize=(8, 4.2))
    policy_bars(ax, pol, gb, "tab:green",
                labels=[f"+{(v - base) * 1e3:.0f} MB" for v in gb] if base is not None else None)
    if base is not None:
        ax.axhline(base + 0.5, ls="--", color="gray", lw=1, label="NPU vanilla + 500 MB")
        ax.legend(fontsize=8)
    ax.set_ylabel("peak memory (GB)")
    ax.set_title(name)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    script_main(main, __doc__)
