#!/usr/bin/python3
"""Draws many figures in one Python process (what `mobisim reproduce` uses).

usage: batch.py JOBS.tsv
Each line of JOBS.tsv is one plot: the script path, then its arguments, separated by tabs.
Every script is run as if started on its own (`__main__`, sys.argv set), so any plot script
under plots/ fits without change; matplotlib, numpy and h5py are imported once for all.
A failing plot is reported and the others still run; the exit status is 1 when any failed.
"""
import os
import runpy
import sys
import traceback

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def run_job(fields):
    script, args = fields[0], fields[1:]
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script] + args
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
        return True
    except SystemExit as e:
        if e.code in (None, 0):
            return True
        print(f"plot failed: {script} {' '.join(args)} (exit {e.code})", file=sys.stderr)
        return False
    except Exception:  # one bad figure must not stop the others
        traceback.print_exc()
        print(f"plot failed: {script} {' '.join(args)}", file=sys.stderr)
        return False
    finally:
        plt.close("all")
        sys.argv, sys.path[:] = saved_argv, saved_path


def main(jobs_path):
    ok = True
    with open(jobs_path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                ok = run_job(line.split("\t")) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
