#!/usr/bin/python3
"""Documented bisection that calibrated experiments/coordgen/table4_calibrated_workload.yaml.

`mobisim calibrate` fits device/engine keys only, so the synthetic CAG generator's keys
(traces/cag_synth.h) are fitted here, by coordinate-wise bisection, to three Table 4 cells (summary,
Qwen2.5-1.5B), one key per cell, each acceptance (roughly) monotone in its key:
    variant_prob          <- SAM       3.60  (decreasing: variants break copied runs)
    history_fraction      <- PLD       2.53  (decreasing: PLD cannot see the history store)
    variant_in_top_n_prob <- SAM+ours  4.21  (increasing: calibration drafts the variant)
Held a priori (not fitted): copy_start_prob 0.5, mean_span_tokens 24 (about one sentence), zipf 1, top_n 3.
Nothing else (no other Table 4 cell, no Table 3 cell) is looked at. Prints each round and the best
round (smallest 0.5 * sum of squared log residuals). Its run for the committed values: round 2 (rounds 0-3),
variant_prob 0.0561, history_fraction 0.5139, variant_in_top_n_prob 0.5664 -> PLD 2.50, SAM 3.69 (+2.6%),
SAM+ours 4.21. Run from the repository root after building (about 4 minutes):
    /usr/bin/python3 experiments/coordgen/fit_synthetic_workload.py
"""
import csv
import math
import os
import subprocess
import tempfile

YAML = "experiments/coordgen/table4_calibrated_workload.yaml"
TARGET = {"SAM": 3.60, "PLD": 2.53, "SAM+ours": 4.21}
KEYS = [  # key, bracket round 1, bracket later rounds (around the previous value), point, increasing
    ("variant_prob", (0.0, 0.3), 0.01, "SAM", False),
    ("history_fraction", (0.0, 1.0), 0.1, "PLD", False),
    ("variant_in_top_n_prob", (0.0, 1.0), 1.0, "SAM+ours", True),  # weak lever: whole range each round
]


def accepted(values, tmp):
    out = os.path.join(tmp, "fit.h5")
    cmd = ["build/mobisim", "run", YAML, "--no-plot", "--output", out]
    for k, v in values.items():
        cmd += ["-p", f"experiment.workload.synthetic.{k}={v}"]
    subprocess.run(cmd, check=True, capture_output=True)
    with open(os.path.join(tmp, "fit_summary.csv")) as f:
        return {r["policy"]: float(r["accepted_per_step"]) for r in csv.DictReader(f)}


def bisect(values, key, lo, hi, point, increasing, tmp, steps):
    for _ in range(steps):
        values[key] = (lo + hi) / 2
        below = accepted(values, tmp)[point] < TARGET[point]
        if below == increasing:
            lo = values[key]
        else:
            hi = values[key]
    values[key] = (lo + hi) / 2


def main():
    values = {"mean_span_tokens": 24, "variant_prob": 0.05, "history_fraction": 0.2, "variant_in_top_n_prob": 0.5}
    # Acceptance is not smooth in the keys (finite sample), so the rounds wander: keep the round with the
    # smallest cost, 0.5 * sum of squared log residuals (mobisim calibrate's cost).
    best = None
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(4):
            for key, first, width, point, increasing in KEYS:
                lo, hi = first if rnd == 0 else (max(0.0, values[key] - width), min(1.0, values[key] + width))
                bisect(values, key, lo, hi, point, increasing, tmp, 9 if rnd == 0 else 7)
            got = accepted(values, tmp)
            print(rnd, {k: round(v, 4) for k, v in values.items()}, {k: round(v, 3) for k, v in got.items()}, flush=True)
            cost = 0.5 * sum(math.log(got[p] / t) ** 2 for p, t in TARGET.items())
            if best is None or cost < best[0]:
                best = (cost, dict(values))
            if max(abs(got[p] / t - 1) for p, t in TARGET.items()) < 0.01:
                break
    print("best (rounded to 4 digits in the YAMLs):", {k: round(v, 4) for k, v in best[1].items()},
          f"cost {best[0]:.6f}")


if __name__ == "__main__":
    main()
