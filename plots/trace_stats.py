#!/usr/bin/python3
"""Draw the workload statistics of a mobisim RAG trace (PerCache figures 2, 3, 5, 6 style).

Input: the JSON written by `mobisim trace stats FILE --json OUT` (or `--plot`, which runs this
script itself). Output: one PNG with six panels: queries per user, chunk retrieval frequency,
prefix overlap ratio, top-1 similarity to earlier queries, pairwise query similarity and token
lengths.

    /usr/bin/python3 plots/trace_stats.py --stats stats.json --out stats.png
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stats", required=True, help="JSON from `mobisim trace stats --json`")
    ap.add_argument("--out", required=True, help="output PNG")
    a = ap.parse_args()
    try:
        with open(a.stats, encoding="utf-8") as f:
            s = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"trace_stats.py: cannot read {a.stats}: {e}", file=sys.stderr)
        return 4

    fig, ax = plt.subplots(2, 3, figsize=(15, 8))
    fig.suptitle(f"RAG trace statistics: {s['source']} ({s['users']} users, top-{s['k']} retrieval)")

    ax[0][0].bar(range(len(s["queries_per_user"])), s["queries_per_user"], color="tab:blue")
    ax[0][0].set(title="queries per user", xlabel="user", ylabel="queries")

    freq = s["chunk_retrieval_freq"]
    if freq:
        top = max(freq)
        ax[0][1].hist(freq, bins=[x + 0.5 for x in range(0, top + 1)], density=True, color="tab:orange")
    ax[0][1].set(title="chunk retrieval frequency (cf. PerCache fig. 3)", xlabel="times retrieved",
                 ylabel="density")

    po = s["prefix_overlap"]
    k = s["k"]
    ax[0][2].hist(po, bins=[(m - 0.5) / k for m in range(0, k + 2)], color="tab:green", rwidth=0.8)
    ax[0][2].set(title="prefix overlap ratio (cf. fig. 5)", xlabel="ratio", ylabel="queries")

    t1 = [x for x in s["top1_similarity"] if x is not None]
    if t1:
        ax[1][0].hist(t1, bins=20, range=(0, 1), color="tab:red")
        ax[1][0].axvline(0.8, color="k", ls="--", lw=1)
        ax[1][0].axvline(0.85, color="k", ls=":", lw=1)
    ax[1][0].set(title="top-1 similarity to earlier queries (cf. fig. 6)", xlabel="cosine", ylabel="queries")

    pw = [x for x in s["pairwise_similarity"] if x is not None]
    if pw:
        ax[1][1].hist(pw, bins=20, range=(0, 1), color="tab:purple")
        ax[1][1].axvline(0.8, color="k", ls="--", lw=1)
    ax[1][1].set(title="pairwise query similarity (cf. fig. 2)", xlabel="cosine", ylabel="pairs")

    for key, color in (("chunk_tokens", "tab:gray"), ("query_tokens", "tab:blue"), ("answer_tokens", "tab:orange")):
        if s[key]:
            ax[1][2].hist(s[key], bins=30, alpha=0.6, label=key.replace("_", " "), color=color)
    ax[1][2].set(title="token lengths", xlabel="tokens", ylabel="count")
    ax[1][2].legend()

    fig.tight_layout()
    fig.savefig(a.out, dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
