#!/usr/bin/env bash
# Repeats the mobisim/SimPy M/M/1 pair of run_peers.sh and summarises the speed ratios, as issue 12
# asks ("median of >= 7 pairs, cold and warm"). The machine is shared and noisy, so one pair says
# little: each pair runs both peers back to back, and the summary is a median.
#   bench/peers/run_peers_paired.sh [BUILD_DIR] [PAIRS] [CUSTOMERS]
# Cold: the first pair (first run of the binaries and of the Python interpreter in this call);
# warm: the median of the others; all: the median of every pair.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
pairs=${2:-7}
n=${3:-200000}
if ! [[ "$pairs" =~ ^[0-9]+$ ]] || [ "$pairs" -lt 2 ]; then
  echo "run_peers_paired.sh: PAIRS must be an integer >= 2 (got '$pairs')" >&2
  exit 2
fi
ratios=()
for i in $(seq 1 "$pairs"); do
  line=$("$here/run_peers.sh" "$build" "$n" | tail -1)
  ratio=${line##*: }
  ratio=${ratio%x}
  echo "pair $i: ${ratio}x"
  ratios+=("$ratio")
done
/usr/bin/python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print(f"cold (pair 1): {r[0]:.1f}x")
print(f"warm median (pairs 2-{len(r)}): {statistics.median(r[1:]):.1f}x")
print(f"median of all {len(r)} pairs: {statistics.median(r):.1f}x (min {min(r):.1f}x, max {max(r):.1f}x)")
PY
