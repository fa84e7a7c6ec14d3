#!/usr/bin/env bash
# Runs the same M/M/1 model in mobisim (C++20 coroutines) and in SimPy, and prints
# customers served per wall-clock second for both and their ratio.
#   bench/peers/run_peers.sh [BUILD_DIR] [CUSTOMERS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
n=${2:-200000}
cxx_json=$("$build/mobisim_bench" --benchmark_filter='BM_MM1' --benchmark_format=json 2>/dev/null)
cxx_rate=$(printf '%s' "$cxx_json" | /usr/bin/python3 -c '
import json, sys
b = json.load(sys.stdin)["benchmarks"][0]
print("%.0f %.0f" % (b["customers/s"], b["events/s"]))')
read -r cxx_cust cxx_events <<<"$cxx_rate"
py_line=$(/usr/bin/python3 "$here/mm1_simpy.py" "$n")
py_cust=${py_line##*customers_per_s=}
echo "mobisim  M/M/1: ${cxx_cust} customers/s (${cxx_events} events/s)"
echo "SimPy    M/M/1: ${py_cust} customers/s ($py_line)"
/usr/bin/python3 -c "print(f'speed ratio mobisim/SimPy: {${cxx_cust}/${py_cust}:.1f}x')"
