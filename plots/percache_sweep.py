#!/usr/bin/python3
"""PerCache figures 17/18/19: a parameter sweep (one variant per value).

usage: percache_sweep.py RESULT.h5 OUT.png
Panels: mean latency, QA hit rate, QKV chunk hit rate, ROUGE-L and BLEU per variant
(plus stale QA hits when any variant served one: refresh.yaml).
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, strs, title  # noqa: E402


def main(path, out):
    order, recs, summ, name = load_runs(path)
    pol = strs(summ["policy"])
    col = lambda c: [summ[c][pol.index(p)] for p in order]  # noqa: E731
    panels = [("mean_latency_s", "mean latency (s)"), ("qa_hit_rate", "QA hit rate"),
              ("kv_chunk_hit_rate", "QKV chunk hit rate"), ("mean_rouge_l", "ROUGE-L"), ("mean_bleu", "BLEU")]
    if "qa_stale_hits" in summ and any(summ["qa_stale_hits"]):  # refresh.yaml: stale QA hits per variant
        panels.append(("qa_stale_hits", "stale QA hits"))
    fig, axes = plt.subplots(1, len(panels), figsize=(18, 3.6))
    for ax, (c, label) in zip(axes, panels):
        ax.plot(range(len(order)), col(c), marker="o")
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels(order, rotation=45, ha="right", fontsize=7)
        ax.set_title(label, fontsize=9)
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=130)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
