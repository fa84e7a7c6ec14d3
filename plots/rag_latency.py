#!/usr/bin/python3
"""Per-policy latency breakdown of a `rag_qa` result file.

usage: rag_latency.py RESULT.h5 OUT.png

Left: mean end-to-end latency per policy, stacked by phase (embed, QA match,
retrieval, KV match, load, prefill, decode). Right: per-query latency in arrival
order for each policy. Reads the HDF5 with h5py only.
"""
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["embed_s", "qa_match_s", "retrieval_s", "kv_match_s", "load_s", "prefill_s", "decode_s"]


def main(path, out):
    with h5py.File(path, "r") as f:
        order = [s.decode() if isinstance(s, bytes) else s for s in f["runs"].attrs["order"]]
        recs = {p: {k: f["runs"][p]["records"][k][()] for k in f["runs"][p]["records"].attrs["columns"]} for p in order}
        name = f.attrs["name"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 1.6]})
    bottoms = [0.0] * len(order)
    for phase in PHASES:
        vals = [float(recs[p][phase].mean()) if len(recs[p][phase]) else 0.0 for p in order]
        if max(vals) <= 0:
            continue
        ax1.bar(order, vals, bottom=bottoms, label=phase[:-2])
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax1.set_ylabel("mean latency per query (s)")
    ax1.set_title("latency breakdown")
    ax1.legend(fontsize=8)
    ax1.tick_params(axis="x", rotation=30)
    for p in order:
        ax2.plot(recs[p]["latency_s"], marker=".", linewidth=0.8, label=p)
    ax2.set_xlabel("query (all users, arrival order)")
    ax2.set_ylabel("latency (s)")
    ax2.set_title("per-query latency")
    ax2.legend(fontsize=8)
    fig.suptitle(f"{name}")
    fig.tight_layout()
    fig.savefig(out, dpi=150)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
