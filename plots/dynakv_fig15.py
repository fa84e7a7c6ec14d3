#!/usr/bin/python3
"""Seed 003 figure 15 from a `dynakv` result: per-token latency against the top-k percentage
of the KV cache retrieved, one line per policy.

usage: dynakv_fig15.py RESULT.h5 OUT.png
"""
from dynakv_common import POLICY_COLORS, main, plt, summary


def draw(path, out):
    t, name = summary(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for p in dict.fromkeys(t["policy"]):
        idx = [i for i, q in enumerate(t["policy"]) if q == p]
        ax.plot([t["top_k_percent"][i] for i in idx], [t["latency_per_token"][i] for i in idx], "o-", label=p,
                color=POLICY_COLORS.get(p))
    ax.set_xlabel("top-k (% of the KV cache)")
    ax.set_ylabel("latency per token (ms)")
    ax.set_title(name)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
