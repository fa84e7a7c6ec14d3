#!/usr/bin/python3
"""Hostile-input campaign (issue 14): damages generated traces and mutates experiment configs,
runs mobisim on each, and counts crashes, hangs and silent exits 0 on damaged input.

    scripts/hostile_campaign.sh [--traces N] [--configs N] [--seed S] [--mobisim build/mobisim]

Traces: a generated RAG trace (replayed by experiments/quickstart.yaml) and a generated chat
trace (replayed by experiments/prefix_cache/ttft.yaml), each damaged by truncation, 20 random
bytes changed, one bit flipped or a 512-byte block zeroed, with the mobisim digest kept or
stripped (the file as another tool would write it). Every damaged copy must exit 4 naming it.
Configs: every experiments/**/*.yaml with one leaf deleted or replaced by a hostile value (wrong
type, NaN, +-1e308, 2^63, -1, 0, unknown name, huge list) or an unknown key added; `validate`,
then `run` when valid. A crash is a signal or a sanitizer report; a hang is a run past the
timeout. Exit codes must be 0-4. Writes nothing into the repository.
"""
import argparse
import collections
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, timeout):
    start = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                           env=dict(os.environ, MOBISIM_HOME=ROOT), errors="replace")
        return p.returncode, p.stdout + p.stderr, time.time() - start
    except subprocess.TimeoutExpired:
        return "hang", "", time.time() - start


def is_crash(rc, out):
    return (isinstance(rc, int) and (rc < 0 or rc >= 128)) or "Sanitizer" in out or \
        "Segmentation fault" in out or "terminate called" in out


def summary_of(h5_path):
    """The run's summary CSV (written next to the result file), which carries every policy's numbers."""
    csv = os.path.splitext(h5_path)[0] + "_summary.csv"
    return open(csv).read() if os.path.exists(csv) else None


def remove_results(tmp):
    for name in ("r.h5", "r_summary.csv"):
        if os.path.exists(os.path.join(tmp, name)):
            os.remove(os.path.join(tmp, name))


def damage(data, rng):
    kind = rng.choice(["truncate", "bytes20", "bitflip", "zero512"])
    b = bytearray(data)
    if kind == "truncate":
        b = b[:rng.randrange(len(b))]
    elif kind == "bytes20":
        for _ in range(20):
            i = rng.randrange(len(b))
            b[i] = (b[i] + 1 + rng.randrange(255)) % 256
    elif kind == "bitflip":
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    else:
        i = rng.randrange(max(1, len(b) - 512))
        old = b[i:i + 512]
        b[i:i + 512] = bytes(len(old))
        if b[i:i + 512] == old:  # already zeros: change one byte so the copy is really damaged
            b[i] ^= 0xFF
    return kind, bytes(b)


HOSTILE = ["delete", "abc", float("nan"), 1e308, -1e308, 2**63, -(2**63) - 1, -1, 0, True,
           "no_such_name", [2**63], list(range(2000)), {}, None, 1.5, "unknown_key"]


def leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (k,))
        if path:
            yield path
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, path + (i,))
        yield path
    else:
        yield path


def mutate(doc, rng):
    doc = yaml.safe_load(yaml.safe_dump(doc))
    paths = [p for p in leaves(doc) if p]
    path = rng.choice(paths)
    value = rng.choice(HOSTILE)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    if value == "delete":
        del parent[last]
    elif value == "unknown_key" and isinstance(parent, dict):
        parent["definitely_unknown_key"] = 1
    else:
        parent[last] = value
    return f"{'.'.join(map(str, path))}={value if not isinstance(value, list) else f'list[{len(value)}]'}", doc


def trace_campaign(args, tmp, rng, counts, examples):
    mob = args.mobisim
    bases = []
    rag = os.path.join(tmp, "rag.h5")
    rc, out, _ = run([mob, "trace", "generate", "configs/workloads/rag_default.yaml", "--out", rag, "-p", "users=2",
                      "-p", "queries.per_user=5", "-p", "knowledge.chunks_per_user=20"], 120)
    assert rc == 0, out
    bases.append(("rag", rag, ["experiments/quickstart.yaml"]))
    chat = os.path.join(tmp, "chat.h5")
    rc, out, _ = run([mob, "trace", "generate-chat", "--out", chat, "--seed", "1", "-p", "sessions=30"], 120)
    assert rc == 0, out
    bases.append(("chat", chat, ["experiments/prefix_cache/ttft.yaml"]))
    clean = {}
    for name, path, (config,) in bases:  # the undamaged files must run
        data = open(path, "rb").read()
        for variant, content in (("digest", data), ("plain", data[512:])):
            f = os.path.join(tmp, f"damaged_{name}.h5")  # the same path as the damaged copies below
            open(f, "wb").write(content)
            remove_results(tmp)
            rc, out, _ = run([mob, "run", config, "-p", f"experiment.workload={{trace: {f}}}", "--no-plot", "--quiet",
                              "--output", os.path.join(tmp, "r.h5")], 120)
            assert rc == 0, f"undamaged {name} ({variant}) failed: {out}"
            clean[name] = summary_of(os.path.join(tmp, "r.h5"))
    per_base = args.traces // len(bases)
    for name, path, (config,) in bases:
        data = open(path, "rb").read()
        for i in range(per_base):
            variant = "digest" if i % 2 == 0 else "plain"
            original = data if variant == "digest" else data[512:]
            kind, content = damage(original, rng)
            if content == original:
                continue
            f = os.path.join(tmp, f"damaged_{name}.h5")
            open(f, "wb").write(content)
            remove_results(tmp)
            rc, out, secs = run([mob, "run", config, "-p", f"experiment.workload={{trace: {f}}}", "--no-plot", "--quiet",
                                 "--output", os.path.join(tmp, "r.h5")], args.timeout)
            key = (name, variant)
            counts["traces"] += 1
            counts[f"traces_exit_{rc}"] += 1
            counts[f"traces_{name}_{variant}"] += 1
            if "checksum mismatch" in out:
                counts["traces_checksum_mismatch"] += 1
            if "crashes the HDF5 library" in out:
                counts["traces_library_crash_contained"] += 1
            bad = None
            if is_crash(rc, out):
                bad = "crash"
            elif rc == "hang":
                bad = "hang"
            elif rc == 0 and summary_of(os.path.join(tmp, "r.h5")) == clean[name]:
                # The damage hit bytes no object uses (free space, padding): the data read, and so
                # every number, is exactly the undamaged file's.
                counts["traces_exit_0_identical_results"] += 1
            elif rc == 0:
                bad = "silent_exit_0"
            elif rc != 4:
                bad = f"exit_{rc}_not_4"
            elif f not in out:
                bad = "message_without_file"
            if bad:
                counts[f"fail_traces_{bad}"] += 1
                if len(examples) < 20:
                    keep = os.path.join(args.keep, f"{bad}_{name}_{variant}_{kind}_{i}.h5")
                    shutil.copy(f, keep)
                    examples.append(f"{bad}: {key} {kind} -> {keep}: {out.strip()[-300:]}")


def config_campaign(args, tmp, rng, counts, examples):
    mob = args.mobisim
    files = sorted(glob.glob(os.path.join(ROOT, "experiments", "**", "*.yaml"), recursive=True))
    docs = {f: yaml.safe_load(open(f)) for f in files}
    base_secs = {}
    for f in files:
        rc, out, secs = run([mob, "run", f, "--no-plot", "--quiet", "--output", os.path.join(tmp, "base.h5")], 300)
        base_secs[f] = secs
    for i in range(args.configs):
        f = files[i % len(files)]
        desc, doc = mutate(docs[f], rng)
        m = os.path.join(tmp, "mutated.yaml")
        with open(m, "w") as out_f:
            yaml.safe_dump(doc, out_f, sort_keys=False)
        counts["configs"] += 1
        rc, out, secs = run([mob, "validate", m], args.timeout)
        counts[f"configs_validate_exit_{rc}"] += 1
        timeout = max(args.timeout, 5 * base_secs[f])
        if rc == 0:
            rc, out, secs = run([mob, "run", m, "--no-plot", "--quiet", "--output", os.path.join(tmp, "c.h5")], timeout)
            counts[f"configs_run_exit_{rc}"] += 1
        bad = None
        if is_crash(rc, out):
            bad = "crash"
        elif rc == "hang":
            bad = "hang"
        elif not isinstance(rc, int) or rc not in (0, 1, 2, 3, 4):
            bad = f"exit_{rc}"
        elif rc == 1:
            counts["note_configs_exit_1"] += 1  # an internal failure rather than a config error: reported
            if len(examples) < 40:
                examples.append(f"exit_1: {os.path.relpath(f, ROOT)} {desc}: {out.strip()[-300:]}")
        if bad:
            counts[f"fail_configs_{bad}"] += 1
            if len(examples) < 40:
                keep = os.path.join(args.keep, f"{bad}_config_{i}.yaml")
                shutil.copy(m, keep)
                examples.append(f"{bad}: {os.path.relpath(f, ROOT)} {desc} -> {keep}: {out.strip()[-300:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=1200)
    ap.add_argument("--configs", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--mobisim", default=os.path.join(ROOT, "build", "mobisim"))
    ap.add_argument("--keep", default="/tmp/mobisim-campaign-findings", help="where offending inputs are copied")
    a = ap.parse_args()
    os.makedirs(a.keep, exist_ok=True)
    rng = random.Random(a.seed)
    counts, examples = collections.Counter(), []
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="mobisim-campaign-") as tmp:
        trace_campaign(a, tmp, rng, counts, examples)
        config_campaign(a, tmp, rng, counts, examples)
    for k in sorted(counts):
        print(f"{k}: {counts[k]}")
    for e in examples:
        print("EXAMPLE", e)
    bad = sum(counts[k] for k in counts if k.startswith("fail_"))
    print(f"campaign: {counts['traces']} damaged traces, {counts['configs']} mutated configs, "
          f"crashes {counts['fail_traces_crash'] + counts['fail_configs_crash']}, "
          f"hangs {counts['fail_traces_hang'] + counts['fail_configs_hang']}, "
          f"silent exits 0 on damaged traces {counts['fail_traces_silent_exit_0']}, other failures "
          f"{bad - counts['fail_traces_crash'] - counts['fail_configs_crash'] - counts['fail_traces_hang'] - counts['fail_configs_hang'] - counts['fail_traces_silent_exit_0']}, "
          f"in {time.time() - start:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
