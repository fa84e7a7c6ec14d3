#!/usr/bin/python3
"""Seed 003 table 6 from a `dynakv` result: per-token latency against the decode length, split
into CPU compute and the flash I/O left on the critical path. Dashed: the document's Qwen-M row.

usage: dynakv_table6.py RESULT.h5 OUT.png
"""
from dynakv_common import main, plt, summary

DOC_QWEN_M = {1024: 152.5, 2048: 167.5, 4096: 215.1, 8192: 326.3, 16384: 636.8}


def draw(path, out):
    t, name = summary(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for v in dict.fromkeys(t["variant"]):
        idx = [i for i, x in enumerate(t["variant"]) if x == v]
        L = [t["decode_length"][i] for i in idx]
        ax.plot(L, [t["latency_per_token"][i] for i in idx], "o-", label=f"{v}: total")
        ax.plot(L, [t["compute_per_token"][i] for i in idx], "s:", label=f"{v}: CPU compute")
    if t["model"][0] == "qwen2.5-3b":
        ks = sorted(DOC_QWEN_M)
        ax.plot(ks, [DOC_QWEN_M[k] for k in ks], "k--", label="document (Qwen-M)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode length (tokens)")
    ax.set_ylabel("latency per token (ms)")
    ax.set_title(name)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
