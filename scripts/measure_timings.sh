#!/usr/bin/env bash
# Measures every timing the docs quote and writes them to docs/timings.md (never typed by hand).
#   scripts/measure_timings.sh                 # quick start, reproduce all (per figure), the test suite
#   scripts/measure_timings.sh --fresh-build   # also: a clean clone built by scripts/setup.sh without ccache
#   BUILD_DIR=build THREADS=2 scripts/measure_timings.sh
# Runs from the source tree with an existing Release build (scripts/setup.sh makes one).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
threads=${THREADS:-$(nproc)}
fresh=0
[ "${1:-}" = "--fresh-build" ] && fresh=1
[ -x "$build/mobisim" ] || { echo "measure_timings: $build/mobisim missing (run scripts/setup.sh)" >&2; exit 2; }

seconds() {  # seconds COMMAND...: wall seconds of the command (its output discarded)
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$@" >/dev/null 2>&1; then echo "measure_timings: failed: $*" >&2; exit 1; fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }'
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
src=$PWD
fresh_line=""
if [ "$fresh" = 1 ]; then
  git clone -q "$src" "$scratch/clone"
  ln -sfn "$(realpath ../shared 2>/dev/null || echo ../shared)" "$scratch/shared" 2>/dev/null || true
  fresh_s=$(cd "$scratch/clone" && CCACHE_DISABLE=1 seconds scripts/setup.sh)
  fresh_line="| \`scripts/setup.sh\` in a fresh clone (packages already installed, no compiler cache) | $fresh_s s |"
fi

quick_s=$(cd "$scratch" && seconds "$src/$build/mobisim" run "$src/experiments/quickstart.yaml" --no-plot --quiet --force)
tenk_s=$(cd "$scratch" && seconds "$src/$build/mobisim" run "$src/experiments/quickstart.yaml" --no-plot --quiet --force \
  -p 'experiment.workload.generate={base: rag_default, users: 500}')
sweep_s=$(seconds "$build/mobisim" sweep experiments/sweeps/tau_by_phone.yaml --threads "$threads" --quiet \
  --output "$scratch/tau_by_phone")
repro_s=$(seconds "$build/mobisim" reproduce all --no-plot --quiet --threads "$threads")
tests_s=$( (cd "$build" && seconds ctest -j"$threads" --timeout 600) )

{
  echo "# Timings"
  echo
  echo "Measured by \`scripts/measure_timings.sh\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD),"
  echo "$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), Release build."
  echo "Load average when it finished: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine slows every row)."
  echo "Every timing in the docs comes from this file; rerun the script to refresh it."
  echo
  echo "| what | wall time |"
  echo "|---|---|"
  [ -n "$fresh_line" ] && echo "$fresh_line"
  echo "| quick start (\`run experiments/quickstart.yaml\`, 100 queries x 7 policies) | $quick_s s |"
  echo "| quick start at 10,000 queries (500 users) | $tenk_s s |"
  echo "| \`sweep experiments/sweeps/tau_by_phone.yaml --threads $threads\` (30 runs) | $sweep_s s |"
  echo "| \`reproduce all --no-plot --threads $threads\` | $repro_s s |"
  echo "| the test suite (\`ctest -j$threads\`) | $tests_s s |"
  echo
  echo "Per figure (\`reproduce all --threads $threads\`: figures run $threads at a time, so they share the cores):"
  echo
  echo "| figure | wall s |"
  echo "|---|---|"
  tail -n +2 results/reproduce_times_all.csv | awk -F, '{printf "| %s | %s |\n", $1, $2}'
} > docs/timings.md.tmp
mv docs/timings.md.tmp docs/timings.md
echo "measure_timings: wrote docs/timings.md"
