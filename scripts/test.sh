#!/usr/bin/env bash
# Builds (Release, ./build) and runs the whole test suite with ctest.
#   scripts/test.sh             # Release build + ctest (one ctest test per test)
#   CTEST_SHARDS=24 scripts/test.sh  # the same suite in 24 processes + the slowest tests alone (CI)
#   SANITIZE=1 scripts/test.sh  # ./build-asan with AddressSanitizer + UBSan: end-to-end runs at 8 threads beside ctest
#                               # (the suite in CTEST_SHARDS processes, default 24)
#   SANITIZE=1 FUZZ=1 scripts/test.sh  # the same with clang, libraries also instrumented for libFuzzer,
#                               # so scripts/ci_fuzz.sh (FUZZ_BUILD_DIR=build-asan) reuses them (CI)
#   TSAN=1 scripts/test.sh      # ./build-tsan with ThreadSanitizer (clang when installed): end-to-end runs at --threads 8
#                               # (only at 8: the 1-vs-8 identity is checked on the Release binary,
#                               # scripts/e2e.sh build 8, and by the Release suite; races need the threads)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
launcher=()
export CCACHE_BASEDIR="$PWD"   # cache hits across clones of the repository
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Unity builds halve a cold build (see CMakeLists.txt); MOBISIM_UNITY=OFF compiles file by file.
unity=(-DCMAKE_UNITY_BUILD="${MOBISIM_UNITY:-ON}")
source scripts/cmake_generator.sh
if [ "${TSAN:-0}" = 1 ]; then
  build=${BUILD_DIR:-build-tsan}
  cmake_generator "$build"
  # clang++ when installed (scripts/setup.sh installs it): the whole cold TSan build of `mobisim` cost
  # 19% fewer CPU s than with g++ 12 and its end-to-end runs 61% fewer (docs/speed.md, sixteenth
  # session). TSan works with both, so without clang this falls back to g++. As in the ASan build,
  # -Werror stays with g++ (CMakeLists.txt). An existing build directory keeps its compiler.
  if command -v clang++ >/dev/null; then
    export CXX=clang++
  else
    echo "test.sh: TSAN=1 without clang++ (scripts/setup.sh installs it): building with g++, slower" >&2
  fi
  # Only the binary: TSan watches whole runs whose simulations share worker threads.
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" "${launcher[@]}" "${unity[@]}" \
        -DMOBISIM_TSAN=ON -DMOBISIM_BUILD_TESTS=OFF -DMOBISIM_BUILD_BENCH=OFF -DMOBISIM_MPI=OFF >/dev/null
  cmake --build "$build" -j"$jobs" --target mobisim
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
  E2E_COMPARE=0 bash scripts/e2e.sh "$build" 8
  exit 0
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  build=${BUILD_DIR:-build-asan}
  cmake_generator "$build"
  fuzz=()
  if [ "${FUZZ:-0}" = 1 ]; then
    command -v clang++ >/dev/null || { echo "test.sh: FUZZ=1 needs clang++ (scripts/setup.sh installs it)" >&2; exit 1; }
    export CXX=clang++
    fuzz=(-DMOBISIM_FUZZ=ON)
  fi
  # -O1 keeps the sanitized build and its tests fast enough for CI on 2 cores. The suite runs as
  # MOBISIM_CTEST_SHARDS processes (CMakeLists.txt): an ASan process start costs ~0.2 CPU s, paid
  # once per shard instead of once per test. CTEST_SHARDS=0 registers one ctest test per test.
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" "${launcher[@]}" "${unity[@]}" \
        -DMOBISIM_SANITIZE=ON "${fuzz[@]}" -DMOBISIM_BUILD_BENCH=OFF -DMOBISIM_MPI=OFF \
        -DMOBISIM_CTEST_SHARDS="${CTEST_SHARDS:-24}" >/dev/null
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp}
else
  build=${BUILD_DIR:-build}
  cmake_generator "$build"
  # One ctest test per test unless CTEST_SHARDS=N (CI's release step): a Release test process costs
  # ~0.08 CPU s before its first test (loading, static initialisers): the suite took 252 CPU s run
  # one test a process, 197 in 24 shards (docs/speed.md, fifteenth session). Passed every time, so a later run
  # without CTEST_SHARDS gets one test per test again.
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${unity[@]}" \
        -DMOBISIM_CTEST_SHARDS="${CTEST_SHARDS:-0}" >/dev/null
fi
cmake --build "$build" -j"$jobs"
if [ "${SANITIZE:-0}" = 1 ]; then
  # The end-to-end runs go beside the suite, not before it: alone, each left one core idle while its
  # last processes finished (docs/speed.md, fourteenth session). Their verdicts print after the suite's.
  e2e_log=$(mktemp)
  trap 'rm -f "$e2e_log"' EXIT
  # At 8 threads only: the 1-vs-8 identity of the same runs is checked on the Release binary (.ci/run's
  # e2e_release step), where the 1-thread half costs ~2% of what it costs under ASan (docs/speed.md).
  E2E_COMPARE=0 bash scripts/e2e.sh "$build" 8 >"$e2e_log" 2>&1 &
  e2e_pid=$!
fi
suite_status=0
(cd "$build" && ctest --output-on-failure -j"$jobs" --timeout 600) || suite_status=$?
if [ "${SANITIZE:-0}" = 1 ]; then
  e2e_status=0
  wait "$e2e_pid" || e2e_status=$?
  cat "$e2e_log"
  [ "$e2e_status" = 0 ] || exit "$e2e_status"
fi
exit "$suite_status"
