#!/usr/bin/env bash
# End-to-end runs of the real binary: the quick start and the smallest experiment of every
# `reproduce` set, each at 1 and THREADS worker threads, results compared byte for byte.
# CI runs it at THREADS only on the ASan+UBSan build and on the ThreadSanitizer build, so memory and
# thread errors of whole runs (not only unit tests) fail the job, and with the comparison on the
# Release build (the binary users run, where the 24 runs cost ~15 CPU s instead of ~240 under ASan).
#   scripts/e2e.sh BUILD_DIR [THREADS]      # default THREADS=8; E2E_JOBS checks at a time (default 2)
#   E2E_COMPARE=0 scripts/e2e.sh BUILD_DIR 8  # each run at THREADS only, nothing compared: the
#                                           # sanitizer jobs (races need many threads; the 1 vs
#                                           # THREADS identity is CI's e2e_release step)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/e2e.sh BUILD_DIR [THREADS]}
threads=${2:-8}
bin=$(cd "$build" && pwd)/mobisim
[ -x "$bin" ] || { echo "e2e: no binary at $bin" >&2; exit 1; }
export MOBISIM_HOME=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Checks run E2E_JOBS (default 2) at a time; each writes its verdict to $work/<name>.verdict and
# the verdicts are printed in the order below, so the log reads the same whatever finishes first.
jobs=${E2E_JOBS:-2}
compare=${E2E_COMPARE:-1}
case $compare in 0 | 1) ;; *) echo "e2e: E2E_COMPARE must be 0 or 1, not '$compare'" >&2; exit 2 ;; esac
thread_counts=(1 "$threads")
[ "$compare" = 1 ] || thread_counts=("$threads")
names=()
# run_both NAME OUT_SUFFIX COMPARED_SUFFIX ARGS...: runs mobisim ARGS at 1 and THREADS threads with
# --output $work/NAME_t<threads>OUT_SUFFIX and compares $work/NAME_t<threads>OUT_SUFFIX COMPARED_SUFFIX
# (with E2E_COMPARE=0: at THREADS only, and a run that exits 0 passes).
run_both() {
  local name=$1 out=$2 compared=$3; shift 3
  for t in "${thread_counts[@]}"; do
    if ! "$bin" "$@" --quiet --threads "$t" --output "$work/${name}_t$t$out" >"$work/$name.log" 2>&1; then
      { echo "e2e: FAILED $name at --threads $t:"; cat "$work/$name.log"; } >"$work/$name.verdict"; return
    fi
  done
  if [ "$compare" = 0 ]; then
    echo "e2e: ok $name (threads $threads)" >"$work/$name.verdict"
  elif cmp -s "$work/${name}_t1$out$compared" "$work/${name}_t$threads$out$compared"; then
    echo "e2e: ok $name (threads 1 and $threads identical)" >"$work/$name.verdict"
  else
    echo "e2e: FAILED $name: threads 1 and $threads differ" >"$work/$name.verdict"
  fi
}
schedule() {  # name, then run_both's arguments after the name
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || true; done
  names+=("$1")
  run_both "$@" &
}
check() {  # name, then the mobisim arguments of one run writing an HDF5 result file
  local name=$1; shift
  schedule "$name" .h5 "" "$@" --no-plot
}

check quickstart run experiments/quickstart.yaml --timeline "$work/quickstart.json"
check percache_table1 run experiments/percache/table1.yaml
check percache_fig14_generated run experiments/percache/fig14_generated.yaml
check prefix_cache_ttft run experiments/prefix_cache/ttft.yaml
check kvpr_cake_error run experiments/kvpr_cake/error.yaml
check kvpr_cake_fig3 run experiments/kvpr_cake/fig3.yaml
check coordgen_fig8 run experiments/coordgen/fig8_schedules.yaml
# Figure 12 with 1,024 decode steps instead of 2,048: the same placements, clusters and flash reads, at a third of
# the cost (a replay's cost grows with the square of its length; under ASan at 8 threads 95 -> 34 CPU s). At 8
# threads its three variants replay the one stream in three groups, each generating it (dynakv_experiment.cpp).
check dynakv_fig12 run experiments/dynakv/fig12.yaml -p 'experiment.decode_lengths=[1024]'
check compose_d_chat_on_cpu run experiments/compose/d_chat_on_cpu.yaml
check compose_a_rag_kv_reuse run experiments/compose/a_rag_kv_reuse.yaml
# Sustained use: a throttled run (warm phone, warm day) with its heat/clock series and counter tracks.
check sustained_ranking_warm run experiments/sustained/ranking_warm.yaml -p experiment.thermal.start=warm \
  -p experiment.thermal.ambient_c=30 --timeline "$work/sustained.json"
# A sweep (each run a child process) at 1 and THREADS runs at a time: identical indexes.
cat > "$work/sweep.yaml" <<YAML
sweep:
  base: $PWD/experiments/quickstart.yaml
  grid: {experiment.pipeline.system_prompt_tokens: [32, 96], experiment.device: [pixel7, oneplus-12]}
  seeds: [1, 2]
  set: {experiment.workload.max_users: 1, experiment.workload.max_queries_per_user: 4}
YAML
# A sweep's output is a folder; its index must be identical.
schedule sweep "" /index.h5 sweep "$work/sweep.yaml"
wait

runs=0
failures=0
for name in "${names[@]}"; do
  if [ -f "$work/$name.verdict" ]; then cat "$work/$name.verdict"; else echo "e2e: FAILED $name: no verdict"; fi
  if grep -q '^e2e: ok' "$work/$name.verdict" 2>/dev/null; then runs=$((runs + 1)); else failures=$((failures + 1)); fi
done
echo "e2e: $runs passed, $failures failed"
[ "$failures" -eq 0 ]
