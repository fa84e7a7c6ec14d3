#!/usr/bin/python3
"""TTFT with a persistent prefix KV cache, from a `prefix_cache` result (seed 001).

usage: prefix_cache_ttft.py RESULT.h5 OUT.png

Left: median TTFT uncached vs cached (full hits) per device and eviction policy, with the
note's numbers as markers. Middle: TTFT distribution per variant. Right: the note's own
geometry (180-token prefix + U-token suffix): speedup and the share of savings a 128-token
partial match recovers (the note: 4.2x, 71%).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import open_result, rows, table, title  # noqa: E402


def main(path, out):
    with open_result(path) as f:
        s = table(f, "summary")
        geo = table(f, "tables/note_geometry")
        order = [x.decode() if isinstance(x, bytes) else x for x in f["runs"].attrs["order"]]
        ttft = {v: list(f["runs"][v]["records"]["ttft_ms"][()]) for v in order}
        name = f.attrs["name"]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(16, 4.8))
    labels, unc, hit = [], [], []
    for i in range(len(s["device"])):
        if s["policy"][i] == "no_cache":
            continue
        labels.append(f"{s['device'][i]}\n{s['policy'][i]}")
        unc.append(s["median_uncached_ttft_ms"][i])
        hit.append(s["median_ttft_full_hit_ms"][i])
    x = range(len(labels))
    a1.bar([i - 0.2 for i in x], unc, width=0.4, label="uncached (median)")
    a1.bar([i + 0.2 for i in x], hit, width=0.4, label="cached, full hits (median)")
    for i in x:
        j = [k for k in range(len(s["device"])) if f"{s['device'][k]}\n{s['policy'][k]}" == labels[i]][0]
        a1.plot([i - 0.2], [s["note_uncached_ms"][j]], "k_", ms=14)
        a1.plot([i + 0.2], [s["note_cached_ms"][j]], "k_", ms=14)
    a1.set_xticks(list(x))
    a1.set_xticklabels(labels, fontsize=6, rotation=60)
    a1.set_ylabel("TTFT (ms); black ticks: the note")
    a1.legend(fontsize=7)
    for v in order:
        vals = sorted(ttft[v])
        a2.plot(vals, [(k + 1) / len(vals) for k in range(len(vals))], label=v, linewidth=1)
    a2.set_xlabel("TTFT (ms)")
    a2.set_ylabel("CDF over sessions")
    a2.legend(fontsize=6)
    for dev in dict.fromkeys(geo["device"]):
        idx = rows(geo, device=dev)
        a3.plot([geo["suffix_tokens"][i] for i in idx], [geo["speedup"][i] for i in idx], marker="o",
                label=f"{dev} speedup")
        a3.plot([geo["suffix_tokens"][i] for i in idx], [10 * geo["partial128_recovery"][i] for i in idx],
                marker="s", linestyle="--", label=f"{dev} partial-128 recovery x10")
    a3.axhline(4.2, color="gray", linestyle=":", label="note: 4.2x")
    a3.axhline(7.1, color="gray", linestyle="-.", label="note: 71% (x10)")
    a3.set_xlabel("suffix tokens after the 180-token prefix")
    a3.legend(fontsize=6)
    title(fig, path, str(name))
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
