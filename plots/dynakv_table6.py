#!/usr/bin/python3
"""Seed 003 table 6 from a `dynakv` result: per-token latency against the decode length, split
into CPU compute, one colour per variant. Dashed: the document's row for the variant's model.

usage: dynakv_table6.py RESULT.h5 OUT.png
"""
from dynakv_common import main, plt, summary

LENGTHS = [1024, 2048, 4096, 8192, 16384]
DOCUMENT = {  # Table 6, ms per token
    "qwen2.5-1.5b": [84.6, 96.5, 123.5, 209.2, 376.3],
    "qwen2.5-3b": [152.5, 167.5, 215.1, 326.3, 636.8],
    "llama-3.2-1b": [76.7, 97.6, 189.4, 346.7, 677.3],
    "llama-3.2-3b": [189.3, 289.6, 499.6, 1044.0, 1802.3],
}


def draw(path, out):
    t, name = summary(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, v in enumerate(dict.fromkeys(t["variant"])):
        idx = [i for i, x in enumerate(t["variant"]) if x == v]
        color = f"C{k}"
        L = [t["decode_length"][i] for i in idx]
        ax.plot(L, [t["latency_per_token"][i] for i in idx], "o-", color=color, label=f"{v}: total")
        ax.plot(L, [t["compute_per_token"][i] for i in idx], "s:", color=color, alpha=0.6, label=f"{v}: CPU compute")
        doc = DOCUMENT.get(t["model"][idx[0]])
        if doc:
            ax.plot(LENGTHS, doc, "--", color=color, alpha=0.8, label=f"{v}: document")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode length (tokens)")
    ax.set_ylabel("latency per token (ms)")
    ax.set_title(name)
    ax.set_yscale("log")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
