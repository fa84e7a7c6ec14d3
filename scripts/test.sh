#!/usr/bin/env bash
# Builds (Release, ./build) and runs the whole test suite with ctest.
# With SANITIZE=1 it builds ./build-asan with AddressSanitizer + UndefinedBehaviorSanitizer instead.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
if [ "${SANITIZE:-0}" = 1 ]; then
  build=${BUILD_DIR:-build-asan}
  # -O1 keeps the sanitized build and its tests fast enough for CI on 2 cores.
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" \
        -DMOBISIM_SANITIZE=ON -DMOBISIM_BUILD_BENCH=OFF >/dev/null
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  build=${BUILD_DIR:-build}
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j"$jobs"
cd "$build"
ctest --output-on-failure -j"$jobs" --timeout 600
