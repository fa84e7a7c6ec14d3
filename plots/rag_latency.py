#!/usr/bin/python3
"""Per-policy latency breakdown of a `rag_qa` result file.

usage: rag_latency.py RESULT.h5 OUT.png

Left: mean end-to-end latency per policy, stacked by phase (embed, QA match,
retrieval, KV match, load, prefill, decode, and waiting behind earlier work). Right: per-query latency in arrival
order for each policy. Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs  # noqa: E402

PHASES = ["embed_s", "qa_match_s", "retrieval_s", "kv_match_s", "load_s", "prefill_s", "decode_s"]


def main(path, out):
    order, recs, _, name = load_runs(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [1, 1.6]})
    bottoms = [0.0] * len(order)
    for phase in PHASES:
        vals = [float(recs[p][phase].mean()) if len(recs[p][phase]) else 0.0 for p in order]
        if max(vals) <= 0:
            continue
        ax1.bar(order, vals, bottom=bottoms, label=phase[:-2])
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    # Whatever latency no phase accounts for is queueing behind the previous query or background work.
    waits = [max(0.0, float(recs[p]["latency_s"].mean()) - b) if len(recs[p]["latency_s"]) else 0.0
             for p, b in zip(order, bottoms)]
    if max(waits) > 1e-3:
        ax1.bar(order, waits, bottom=bottoms, label="wait")
        bottoms = [b + w for b, w in zip(bottoms, waits)]
    ax1.set_ylabel("mean latency per query (s)")
    ax1.set_title("latency breakdown")
    ax1.legend(fontsize=8)
    ax1.set_xticks(range(len(order)))
    ax1.set_xticklabels(order, rotation=35, ha="right", fontsize=8)
    for i, total in enumerate(bottoms):
        ax1.text(i, total, f"{total:.1f}", ha="center", va="bottom", fontsize=7)
    for p in order:
        ax2.plot(recs[p]["latency_s"], marker=".", linewidth=0.8, label=p)
    ax2.set_xlabel("query (all users, arrival order)")
    ax2.set_ylabel("latency (s)")
    ax2.set_title("per-query latency")
    ax2.legend(fontsize=8)
    fig.suptitle(f"{name}")
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
