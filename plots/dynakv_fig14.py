#!/usr/bin/python3
"""Seed 003 figure 14 from a `dynakv` result: (a) DRAM used for the KV cache with and without
layer-wise virtualization and (b) per-token latency, against the cache ratio, for DynaKV with
cluster-aligned replacement, DynaKV with LRU and PQCache with LRU (variants NAME_PERCENT).

usage: dynakv_fig14.py RESULT.h5 OUT.png
"""
from dynakv_common import main, plt, summary
from mobisim_results import title  # noqa: E402


def draw(path, out):
    t, name = summary(path)
    series = {}
    for i, v in enumerate(t["variant"]):
        series.setdefault(v.rsplit("_", 1)[0], []).append(i)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for k, (s, idx) in enumerate(series.items()):
        color = f"C{k}"
        r = [t["cache_ratio"][i] for i in idx]
        axes[0].plot(r, [t["memory_model_level"][i] for i in idx], "o--", color=color, label=f"{s} (no virtualization)")
        axes[0].plot(r, [t["memory_layer_level"][i] for i in idx], "o-", color=color, label=f"{s} (layer-wise)")
        axes[1].plot(r, [t["latency_per_token"][i] for i in idx], "o-", color=color, label=s)
    axes[0].set_ylabel("KV memory (MB)")
    axes[0].set_yscale("log")
    axes[0].set_title("(a) memory usage")
    axes[1].set_ylabel("latency per token (ms)")
    axes[1].set_title("(b) end-to-end latency")
    for a in axes:
        a.set_xlabel("cache ratio")
        a.legend(fontsize=7)
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
