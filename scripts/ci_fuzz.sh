#!/usr/bin/env bash
# CI step: builds every libFuzzer target (tests/fuzz/fuzz_*.cpp) with clang, ASan and UBSan, runs each
# for FUZZ_SECONDS (default 25), JOBS (default 2) targets at a time, and fails on any finding. About
# 6-7 minutes on 2 cores from a cold build (ccache makes the rebuild much faster). A build directory
# already configured with MOBISIM_FUZZ=ON (CI's `SANITIZE=1 FUZZ=1 scripts/test.sh`) is reused as is.
#   scripts/ci_fuzz.sh            # all targets
#   FUZZ_SECONDS=60 scripts/ci_fuzz.sh
#   FUZZ_BUILD_DIR=build-asan scripts/ci_fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-25}
build=${FUZZ_BUILD_DIR:-build-fuzz}
export FUZZ_BUILD_DIR=$build
command -v clang++ >/dev/null || { echo "ci_fuzz: clang++ not installed (scripts/setup.sh installs it)" >&2; exit 1; }

targets=()
for f in tests/fuzz/fuzz_*.cpp; do
  t=$(basename "$f" .cpp)
  targets+=("${t#fuzz_}")
done

launcher=()
export CCACHE_BASEDIR="$PWD"
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Unity builds halve a cold build (see CMakeLists.txt); MOBISIM_UNITY=OFF compiles file by file.
unity=(-DCMAKE_UNITY_BUILD="${MOBISIM_UNITY:-ON}")
jobs=${JOBS:-2}
start=$(date +%s)
if ! grep -qs '^MOBISIM_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  source scripts/cmake_generator.sh
  cmake_generator "$build"
  CXX=clang++ cmake -S . -B "$build" "${generator[@]}" -DMOBISIM_FUZZ=ON -DCMAKE_BUILD_TYPE=Fuzz -DMOBISIM_BUILD_TESTS=OFF \
    -DMOBISIM_BUILD_BENCH=OFF -DMOBISIM_MPI=OFF "${launcher[@]}" "${unity[@]}" >/dev/null
fi
cmake --build "$build" -j"$jobs" --target "${targets[@]/#/fuzz_}" >/dev/null
echo "ci_fuzz: built ${#targets[@]} targets in $(( $(date +%s) - start )) s"

# A libFuzzer run uses one core: run $jobs targets at a time, each writing its own log.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
printf '%s\n' "${targets[@]}" | FUZZ_PREBUILT=1 xargs -P "$jobs" -I{} sh -c \
  'scripts/fuzz.sh "$1" "$2" >"$3/$1.out" 2>&1; echo $? >"$3/$1.status"' _ {} "$seconds" "$logs"
failed=()
for t in "${targets[@]}"; do
  cat "$logs/$t.out"
  [ "$(cat "$logs/$t.status" 2>/dev/null)" = 0 ] || failed+=("$t")
done
echo "ci_fuzz: total $(( $(date +%s) - start )) s"
if ((${#failed[@]})); then
  echo "ci_fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "ci_fuzz: no findings"
