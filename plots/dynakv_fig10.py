#!/usr/bin/python3
"""Seed 003 figure 10 from a `dynakv` result: (a) accuracy proxy (attention mass captured),
(b) per-token latency and (c) effective bandwidth of each policy, normalised to DynaKV as the
document does (speedup and bandwidth ratios printed on the bars).

usage: dynakv_fig10.py RESULT.h5 OUT.png
"""
from dynakv_common import POLICY_COLORS, bars, main, plt, summary


def draw(path, out):
    t, name = summary(path)
    names = t["variant"]
    col = [POLICY_COLORS.get(p, "gray") for p in t["policy"]]
    i_dk = t["policy"].index("dynakv")
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    bars(axes[0], names, t["attention_mass"], col, "{:.3f}")
    axes[0].set_ylabel("attention mass captured")
    axes[0].set_ylim(min(t["attention_mass"]) * 0.95, 1.0)
    axes[0].set_title("(a) accuracy proxy")
    norm = [v / t["latency_per_token"][i_dk] for v in t["latency_per_token"]]
    bars(axes[1], names, norm, col, "{:.2f}x")
    axes[1].set_ylabel("latency / DynaKV latency")
    axes[1].set_title("(b) per-token latency (normalised)")
    bw = [v / t["effective_bandwidth"][i_dk] for v in t["effective_bandwidth"]]
    bars(axes[2], names, bw, col, "{:.2f}")
    axes[2].set_ylabel("effective bandwidth / DynaKV")
    axes[2].set_title("(c) effective bandwidth (normalised)")
    fig.suptitle(f"{name}: {t['model'][0]} on {t['device'][0]}, T={t['decode_length'][0]}")
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    main(draw, __doc__)
