#!/usr/bin/python3
"""Seed 003 figure 11 from a `dynakv` result: KV transfer volume of the session under the
delayed-split buffer budget B_max (variants bmax_N), with the part loaded only to split.

usage: dynakv_fig11.py RESULT.h5 OUT.png
"""
from dynakv_common import main, plt, summary


def draw(path, out):
    t, name = summary(path)
    bmax = [int(v.split("_")[-1]) for v in t["variant"]]
    steps = t["decode_length"]
    total = t["session_transfer"]
    forced = [f * n for f, n in zip(t["forced_read_per_token"], steps)]
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = range(len(bmax))
    ax.bar(xs, total, color="#d62728", label="all KV transfer")
    ax.bar(xs, forced, color="#555555", label="loads forced to split")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([str(b) for b in bmax])
    ax.set_xlabel("buffer size B_max (entries)")
    ax.set_ylabel("session transfer volume (MB)")
    ax.set_title(f"{name}: {total[0] / min(total):.2f}x less I/O at best B_max than B_max=0")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
