#!/usr/bin/python3
"""Graph-switching schedules of a `coordgen_schedule` result file (CoordGen Figure 8 / section 3.2).

usage: coordgen_schedule.py RESULT.h5 OUT.png

Left: prefill + switch latency per strategy, grouped by prompt length, with the part beyond an
all-G_p prefill hatched. Right: peak NPU memory per strategy. Reads the HDF5 with h5py only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mobisim_results import load_runs, strs, title  # noqa: E402


def main(path, out):
    _, _, s, name = load_runs(path)
    strat = strs(s["strategy"])
    prompts = sorted(set(int(p) for p in s["prompt_tokens"]))
    names = list(dict.fromkeys(strat))
    w = 0.8 / len(names)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    for k, n in enumerate(names):
        lat, exp = [], []
        for p in prompts:
            i = [j for j in range(len(strat)) if strat[j] == n and int(s["prompt_tokens"][j]) == p][0]
            lat.append(s["latency_s"][i])
            exp.append(s["exposed_switch_s"][i])
        xs = [x + k * w for x in range(len(prompts))]
        a1.bar(xs, [l - e for l, e in zip(lat, exp)], w, label=n)
        a1.bar(xs, exp, w, bottom=[l - e for l, e in zip(lat, exp)], color="none", edgecolor="black", hatch="//")
    a1.set_xticks([x + 0.4 - w / 2 for x in range(len(prompts))])
    a1.set_xticklabels([f"{p} tokens" for p in prompts])
    a1.set_ylabel("prefill + switch latency (s); hatched: beyond all-G_p prefill")
    a1.legend(fontsize=7)
    peak = [s["peak_npu_bytes"][strat.index(n)] / 1e9 for n in names]
    a2.bar(names, peak, color="tab:gray")
    a2.set_ylabel("peak NPU memory (GB)")
    a2.tick_params(axis="x", rotation=40)
    title(fig, path, name)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
