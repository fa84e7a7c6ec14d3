#!/usr/bin/python3
"""Per-policy results of a `coordgen` result file (CoordGen figures 10-13, tables 3-4).

usage: coordgen_latency.py RESULT.h5 OUT.png

Four panels: per-token latency (ms/token, Figure 10 / Table 3; a dash: after the prefill only), energy per request (Figure 11),
peak memory (Figure 12), mean latency breakdown per request into prefill, graph switch,
calibration, drafting and decode (Figure 13); the accepted tokens per verification (Table 4) are
written on the latency bars. Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, strs, title  # noqa: E402

PHASES = [("mean_prefill_s", "prefill"), ("mean_switch_s", "graph switch"), ("mean_calibration_s", "calibration"),
          ("mean_draft_s", "draft"), ("mean_decode_s", "decode")]


def main(path, out):
    _, _, s, name = load_runs(path)
    pol = strs(s["policy"])
    x = range(len(pol))
    fig, ax = plt.subplots(1, 4, figsize=(17, 4.2))
    bars = ax[0].bar(x, s["ms_per_token"], color="tab:blue")
    for b, a in zip(bars, s["accepted_per_step"]):
        ax[0].text(b.get_x() + b.get_width() / 2, b.get_height(), f"{a:.2f}", ha="center", va="bottom", fontsize=7)
    if "decode_ms_per_token" in s:  # after the prefill only (no prefill, no calibration)
        ax[0].plot(list(x), s["decode_ms_per_token"], "k_", markersize=14, mew=2, label="after prefill")
        ax[0].legend(fontsize=7)
    ax[0].set_ylabel("ms per output token (label: accepted/step)")
    ax[1].bar(x, s["energy_per_request_j"], color="tab:orange")
    ax[1].set_ylabel("energy per request (J)")
    ax[2].bar(x, s["peak_memory_bytes"] / 1e9, color="tab:green")
    ax[2].set_ylabel("peak memory (GB)")
    bottom = [0.0] * len(pol)
    for col, label in PHASES:
        vals = list(s[col])
        ax[3].bar(x, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax[3].set_ylabel("mean latency per request (s)")
    ax[3].legend(fontsize=7)
    for a in ax:
        a.set_xticks(list(x))
        a.set_xticklabels(pol, rotation=40, ha="right", fontsize=8)
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
