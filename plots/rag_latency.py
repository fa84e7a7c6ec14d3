#!/usr/bin/python3
"""Per-policy latency breakdown of a `rag_qa` result file.

usage: rag_latency.py RESULT.h5 OUT.png

Left: mean end-to-end latency per policy, stacked by phase (embed, QA match,
retrieval, KV match, load, prefill, decode, and waiting behind earlier work). Right: the distribution of per-query
latency for each policy (empirical CDF). The title names the phone, model and runtime. Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import color_of, legend_outside, load_runs, not_modelled, title  # noqa: E402

PHASES = ["embed_s", "qa_match_s", "retrieval_s", "kv_match_s", "load_s", "prefill_s", "decode_s"]
# Phases in blues and greens (policies own the other colours across figures); waiting in light grey.
PHASE_COLORS = {"embed_s": "#c6dbef", "qa_match_s": "#9ecae1", "retrieval_s": "#6baed6", "kv_match_s": "#4292c6",
                "load_s": "#a1d99b", "prefill_s": "#2171b5", "decode_s": "#31a354"}


def main(path, out):
    order, recs, _, name = load_runs(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [1, 1.6]})
    bottoms = [0.0] * len(order)
    for phase in PHASES:
        vals = [float(recs[p][phase].mean()) if len(recs[p][phase]) else 0.0 for p in order]
        if max(vals) <= 0:
            continue
        ax1.bar(order, vals, bottom=bottoms, label=phase[:-2], color=PHASE_COLORS[phase])
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    # Whatever latency no phase accounts for is queueing behind the previous query or background work.
    waits = [max(0.0, float(recs[p]["latency_s"].mean()) - b) if len(recs[p]["latency_s"]) else 0.0
             for p, b in zip(order, bottoms)]
    if max(waits) > 1e-3:
        ax1.bar(order, waits, bottom=bottoms, label="wait", color="#d9d9d9")
        bottoms = [b + w for b, w in zip(bottoms, waits)]
    ax1.set_ylabel("mean latency per query (s)")
    ax1.set_title("latency breakdown")
    ax1.set_ylim(0, max(bottoms + [1e-9]) * 1.3)  # room above the bars for the legend
    ax1.legend(fontsize=7, ncol=4, loc="upper center", frameon=False)
    ax1.set_xticks(range(len(order)))
    ax1.set_xticklabels(order, rotation=35, ha="right", fontsize=8)
    for i, total in enumerate(bottoms):
        ax1.text(i, total, f"{total:.1f}", ha="center", va="bottom", fontsize=7)
    # Per-query latency as a distribution (the lines of seven policies over the same queries would
    # overlap): empirical CDF per policy, one colour per policy shared with every other figure.
    for p in order:
        lat = sorted(float(x) for x in recs[p]["latency_s"])
        if not lat:
            continue
        ax2.step(lat, [(i + 1) / len(lat) for i in range(len(lat))], where="post", linewidth=1.2,
                 color=color_of(p), label=p)
    ax2.set_xlabel("latency per query (s)")
    ax2.set_ylabel("fraction of queries")
    ax2.set_ylim(0, 1.02)
    ax2.set_title("latency distribution (CDF)")
    legend_outside(ax2)
    title(fig, path, f"{name}: latency per query by policy")
    unmodelled = not_modelled(path)
    if unmodelled:
        # A QA-bank hit at 0 s means its embedding and matching are not modelled, not free.
        fig.text(0.01, 0.01, "not modelled (0 s): " + ", ".join(k.split(".")[-1] for k in unmodelled), fontsize=7,
                 color="dimgray")
    fig.tight_layout(rect=(0, 0.03 if unmodelled else 0, 1, 1))
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
