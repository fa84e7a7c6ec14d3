#!/usr/bin/python3
"""Seed 003 figure 17 from a `dynakv` result: per-token latency per policy, one panel per model
(variants MODEL/DEVICE/POLICY).

usage: dynakv_fig17.py RESULT.h5 OUT.png
"""
from dynakv_common import main
from dynakv_grouped import draw_grouped


def draw(path, out):
    draw_grouped(path, out, "latency_per_token", "latency per token (ms)", panel_key=True)


if __name__ == "__main__":
    main(draw, __doc__)
