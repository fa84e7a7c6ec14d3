#!/usr/bin/python3
"""CoordGen Figure 13: mean latency per request split into prefill, decode and overhead.

usage: coordgen_breakdown.py RESULT.h5 OUT.png

Overhead = exposed graph switching + in-context calibration + drafting (the document's "prefill
overhead" is calibration, its "decoding overhead" drafting). The decode share of each bar is
written on it (the document: 67-74% for NPU vanilla). Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, strs  # noqa: E402


def main(path, out):
    _, _, s, name = load_runs(path)
    pol = strs(s["policy"])
    prefill = list(s["mean_prefill_s"])
    decode = list(s["mean_decode_s"])
    overhead = [a + b + c for a, b, c in zip(s["mean_switch_s"], s["mean_calibration_s"], s["mean_draft_s"])]
    x = range(len(pol))
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.bar(x, prefill, label="prefill", color="tab:blue")
    ax.bar(x, decode, bottom=prefill, label="decode", color="tab:orange")
    top = [p + d for p, d in zip(prefill, decode)]
    ax.bar(x, overhead, bottom=top, label="overhead (switch, calibration, draft)", color="tab:gray")
    for i, (p, d, o) in enumerate(zip(prefill, decode, overhead)):
        ax.text(i, p + d + o, f"decode {100 * d / (p + d + o):.0f}%", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("mean latency per request (s)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(pol, fontsize=9)
    ax.legend(fontsize=8)
    ax.set_title(name)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
